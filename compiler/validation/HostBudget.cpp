#include "compiler/validation/HostBudget.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "compiler/validation/ConvertCacheProblem.h"

namespace attnjit::validation {

using compiler::Family;

namespace {

// Per logical element the harness holds a float64 copy (the reference's input or
// result), the device-layout copy (at most 4 bytes) and, for outputs, the read-back
// copy and the float64 expected value: 24 bytes covers both with room to spare.
constexpr double kBytesPerElement = 24;
// Unused physical blocks of a problem's cache (AttentionProblem's kSpareBlocks) and the
// split-KV partials' extra f32 values per row (max and sum).
constexpr double kSpareBlocks = 3;

struct Batch {
  double queries = 0;    // sum of query_lens
  double keys = 0;       // sum of query_lens + context_lens
  double sequences = 0;
  double maxSeqLen = 0;
  double queryKeyPairs = 0;  // sum over sequences of query_len · seq_len
};

Batch batchOf(const compiler::BatchShape& shape) {
  Batch batch;
  for (std::size_t s = 0; s < shape.queryLens.size() && s < shape.contextLens.size(); ++s) {
    const double q = shape.queryLens[s], seq = q + shape.contextLens[s];
    batch.queries += q;
    batch.keys += seq;
    batch.sequences += 1;
    batch.maxSeqLen = std::max(batch.maxSeqLen, seq);
    batch.queryKeyPairs += q * seq;
  }
  return batch;
}

double segmentsFor(const Batch& batch, int tileSize, const compiler::BatchShape& shape) {
  const double tiles = std::ceil(batch.maxSeqLen / std::max(tileSize, 1));
  return std::max(1.0, std::ceil(tiles / std::max(shape.segmentTiles, 1)));
}

// Accepts "123", "1.5e9" and a suffix K, M, G or T (powers of `base`).
bool parseQuantity(const char* text, double base, double& value) {
  char* end = nullptr;
  value = std::strtod(text, &end);
  if (end == text || !std::isfinite(value) || value <= 0) return false;
  if (*end != '\0') {
    const std::string suffix(end);
    const std::string units = "KMGT";
    if (suffix.size() != 1 || units.find(static_cast<char>(std::toupper(static_cast<unsigned char>(suffix[0])))) ==
                                  std::string::npos)
      return false;
    value *= std::pow(base, 1 + static_cast<double>(units.find(static_cast<char>(
                                    std::toupper(static_cast<unsigned char>(suffix[0]))))));
  }
  return true;
}

support::Expected<double> budgetFromEnvironment(const char* variable, double base, double fallback) {
  const char* text = std::getenv(variable);
  if (text == nullptr || *text == '\0') return fallback;
  double value = 0;
  if (!parseQuantity(text, base, value))
    return support::Diagnostic{support::Location{variable, 0, 0},
                               std::string(variable) + "='" + support::excerpt(text) +
                                   "': expected a positive number with an optional K, M, G or T suffix"};
  return value;
}

// The least of physical memory, RLIMIT_AS and the cgroup's memory limit.
double usableMemory() {
  double least = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  if (least <= 0) least = 16.0 * (1u << 30);
  struct rlimit limit {};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
    least = std::min(least, static_cast<double>(limit.rlim_cur));
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream file(path);
    std::string text;
    if (!(file >> text) || text == "max") continue;
    char* end = nullptr;
    const double bytes = std::strtod(text.c_str(), &end);
    if (end != text.c_str() && bytes > 0) least = std::min(least, bytes);
  }
  return least;
}

std::string gib(double bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.3g GiB", bytes / double(1u << 30));
  return text;
}

}  // namespace

HostEstimate estimateHostWork(const compiler::Variant& variant, const compiler::BatchShape& shape) {
  const Batch batch = batchOf(shape);
  double elements = 0, multiplyAdds = 0;
  switch (variant.family) {
    case Family::UnifiedAttention: {
      const auto& c = variant.attention;
      const double Hq = c.numQueryHeads, Hkv = c.numKvHeads, D = c.headSize, Dv = c.effectiveValueHeadSize();
      const double cacheRows = batch.keys + (batch.sequences + kSpareBlocks) * c.blockSize;
      elements = batch.queries * Hq * (D + Dv) + cacheRows * Hkv * (D + Dv);
      if (c.splitKv) elements += batch.queries * Hq * (Dv + 2) * segmentsFor(batch, c.tileSize, shape);
      multiplyAdds = batch.queryKeyPairs * Hq * (D + Dv);
      break;
    }
    case Family::MlaDecode: {
      const auto& c = variant.mla;
      const double H = c.numHeads, W = c.latentWidth(), L = c.kvLoraRank;
      const double cacheRows = batch.keys + (batch.sequences + kSpareBlocks) * c.blockSize;
      elements = batch.queries * H * (W + L) + cacheRows * W;
      if (c.splitKv) elements += batch.queries * H * (L + 2) * segmentsFor(batch, c.tileSize, shape);
      multiplyAdds = batch.queryKeyPairs * H * (W + L);
      break;
    }
    case Family::MergeAttnStates: {
      const auto& c = variant.merge;
      elements = batch.queries * c.numHeads * (3.0 * c.headSize + 3);
      multiplyAdds = elements;
      break;
    }
    case Family::MergePartials: {
      const auto& c = variant.mergePartials;
      elements = batch.queries * c.numHeads * (shape.numPartials + 1.0) * (c.headSize + 1.0);
      multiplyAdds = elements;
      break;
    }
    case Family::ReduceSegments: {
      const auto& c = variant.reduceSegments;
      elements = batch.queries * c.numQueryHeads * (shape.numPartials + 1.0) * (c.headSize + 2.0);
      multiplyAdds = elements;
      break;
    }
    case Family::ReshapeAndCache: {
      const auto& c = variant.cacheWrite;
      const double rowElements = double(c.headSize) + c.effectiveValueHeadSize();
      // The cache before and after (expected and read back) and the new rows.
      const double cacheRows = batch.keys + (batch.sequences + kSpareBlocks) * c.blockSize;
      elements = 2 * cacheRows * c.numKvHeads * rowElements + batch.queries * c.numKvHeads * rowElements;
      multiplyAdds = batch.queries * c.numKvHeads * rowElements;
      break;
    }
    case Family::GatherCache: {
      // The cache (all of it is poisoned and uploaded), dst and its expectation.
      const auto& c = variant.gatherCache;
      const double cacheRows = batch.keys + (batch.sequences + kSpareBlocks) * c.blockSize;
      elements = cacheRows * c.entrySize + 2 * batch.keys * c.entrySize;
      multiplyAdds = batch.keys * c.entrySize;
      break;
    }
    case Family::ConvertCache: {
      // Source, destination and the expectation (ConvertCacheProblem's element count).
      const double n = static_cast<double>(ConvertCacheProblem::elementsFor(static_cast<int64_t>(batch.keys), variant.convertCache.countDivisibility));
      elements = 3 * n;
      multiplyAdds = n;
      break;
    }
    case Family::MlaCacheWrite: {
      const auto& c = variant.mlaCacheWrite;
      const double W = c.cacheRowElements();
      const double cacheRows = batch.keys + (batch.sequences + kSpareBlocks) * c.blockSize;
      elements = 2 * cacheRows * W + batch.queries * W;
      multiplyAdds = batch.queries * W;
      break;
    }
  }
  return HostEstimate{elements * kBytesPerElement, multiplyAdds};
}

support::Expected<double> hostMemoryBudget() {
  return budgetFromEnvironment("ATTNJIT_HOST_MEMORY_BUDGET", 1024, 0.75 * usableMemory());
}

support::Expected<double> interpreterWorkBudget() {
  return budgetFromEnvironment("ATTNJIT_INTERPRETER_WORK_BUDGET", 1000, 4e12);
}

support::Status checkHostBudget(const compiler::Variant& variant, const compiler::BatchShape& shape,
                                bool interpreted) {
  const HostEstimate estimate = estimateHostWork(variant, shape);
  auto memory = hostMemoryBudget();
  if (!memory) return memory.status();
  if (estimate.bytes > *memory)
    return support::Status::error(
        variant.location, "the batch (" + support::excerpt(shape.str()) + ") needs about " + gib(estimate.bytes) +
                              " of host memory for its inputs, outputs and float64 reference, over the budget of " +
                              gib(*memory) +
                              "; use a smaller --shape or set ATTNJIT_HOST_MEMORY_BUDGET (e.g. 64G)");
  if (!interpreted) return support::Status::ok();
  auto work = interpreterWorkBudget();
  if (!work) return work.status();
  if (estimate.multiplyAdds > *work) {
    char text[160];
    std::snprintf(text, sizeof text, "about %.3g multiply-adds, over the interpreter's budget of %.3g", estimate.multiplyAdds,
                  *work);
    return support::Status::error(variant.location, "interpreting the batch (" + support::excerpt(shape.str()) +
                                                        ") takes " + text +
                                                        "; use a smaller --shape, run it on the GPU (without --interpret) or set "
                                                        "ATTNJIT_INTERPRETER_WORK_BUDGET (e.g. 1T)");
  }
  return support::Status::ok();
}

support::Diagnostic outOfHostMemory(const compiler::Variant& variant, const compiler::BatchShape& shape) {
  return support::Diagnostic{variant.location,
                             "out of host memory running the batch (" + support::excerpt(shape.str()) +
                                 "), estimated at " + gib(estimateHostWork(variant, shape).bytes) +
                                 "; use a smaller --shape or lower ATTNJIT_HOST_MEMORY_BUDGET to be refused early"};
}

}  // namespace attnjit::validation
