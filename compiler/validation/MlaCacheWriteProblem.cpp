#include "compiler/validation/MlaCacheWriteProblem.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "compiler/validation/ProblemData.h"
#include "compiler/validation/reference/CompanionReference.h"

namespace attnjit::validation {

using ir::ScalarKind;
using namespace problem_data;

namespace {

constexpr int64_t kKvCPadding = 16, kKPePadding = 8;  // after each token's row (multiples of 8)
constexpr int kSpareBlocks = 3;                       // never written

}  // namespace

struct MlaCacheWriteProblem::Data {
  compiler::MlaCacheWriteConfig config;
  reference::MlaCacheWriteInputs inputs;
  int64_t strideBlock = 0, strideToken = 0;  // cache, elements
};

support::Expected<std::unique_ptr<MlaCacheWriteProblem>> MlaCacheWriteProblem::create(
    const compiler::MlaCacheWriteConfig& config, const compiler::BatchShape& shape) {
  if (support::Status s = config.validate(); !s) return s;
  if (support::Status s = shape.validate(); !s) return s;
  auto data = std::make_shared<Data>();
  data->config = config;
  reference::MlaCacheWriteInputs& in = data->inputs;
  const ScalarKind dt = config.dtype, cacheKind = config.cacheElement();
  const int64_t L = config.kvLoraRank, R = config.ropeDim, W = config.cacheRowElements(), bs = config.blockSize;
  RandomStream random(shape.seed);

  // Blocks of every sequence (context and new tokens), a permutation of the cache's.
  std::vector<int64_t> blocksPerSeq;
  int64_t usedBlocks = 0;
  for (size_t s = 0; s < shape.queryLens.size(); ++s) {
    blocksPerSeq.push_back((shape.queryLens[s] + shape.contextLens[s] + bs - 1) / bs);
    usedBlocks += blocksPerSeq.back();
  }
  const int64_t numBlocks = usedBlocks + kSpareBlocks;
  std::vector<int64_t> physical(static_cast<size_t>(numBlocks));
  for (size_t i = 0; i < physical.size(); ++i) physical[i] = static_cast<int64_t>(i);
  for (size_t i = physical.size() - 1; i > 0; --i) std::swap(physical[i], physical[random.below(i + 1)]);
  size_t nextBlock = 0;
  for (size_t s = 0; s < shape.queryLens.size(); ++s) {
    const size_t first = nextBlock;
    nextBlock += static_cast<size_t>(blocksPerSeq[s]);
    for (int i = 0; i < shape.queryLens[s]; ++i) {
      const int64_t pos = shape.contextLens[s] + i;
      const bool padding = random.below(8) == 0;
      in.slots.push_back(padding ? -1 : physical[first + static_cast<size_t>(pos / bs)] * bs + pos % bs);
    }
  }
  const int64_t T = static_cast<int64_t>(in.slots.size());
  in.numTokens = static_cast<int>(T);
  in.kvLoraRank = config.kvLoraRank;
  in.ropeDim = config.ropeDim;
  in.numSlots = numBlocks * bs;
  if (compiler::isPerTensorFp8(config.cacheFormat)) {
    in.scale = kScale;
    in.quantMax = compiler::kvCacheQuantMax(config.cacheFormat);
  }

  // Rows: uniform in [-1, 1] times 2^k (k in -6..6) per row, rounded to the dtype.
  auto fillRows = [&](std::vector<double>& rows, int64_t width) {
    rows.resize(static_cast<size_t>(T * width));
    for (int64_t t = 0; t < T; ++t) {
      const double magnitude = std::ldexp(1.0, static_cast<int>(random.below(13)) - 6);
      for (int64_t d = 0; d < width; ++d)
        rows[static_cast<size_t>(t * width + d)] = ir::roundToFloatKind(magnitude * random.uniform(-1, 1), dt);
    }
  };
  fillRows(in.kvC, L);
  fillRows(in.kPe, R);

  data->strideToken = W;
  data->strideBlock = bs * W;
  const int64_t kvCStride = L + kKvCPadding, kPeStride = R + kKPePadding;
  auto sourceRows = [&](const std::vector<double>& rows, int64_t width, int64_t stride) {
    std::vector<uint8_t> bytes = poisonedBuffer(dt, static_cast<size_t>(T * stride));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < width; ++d)
        setFloat(bytes, dt, static_cast<size_t>(t * stride + d), rows[static_cast<size_t>(t * width + d)]);
    return bytes;
  };
  std::unique_ptr<MlaCacheWriteProblem> problem(new MlaCacheWriteProblem());
  auto& buffers = problem->buffers_;
  buffers.push_back({"kv_c", sourceRows(in.kvC, L, kvCStride), false});
  buffers.push_back({"k_pe", sourceRows(in.kPe, R, kPeStride), false});
  buffers.push_back({"kv_cache", poisonedBuffer(cacheKind, static_cast<size_t>(numBlocks * data->strideBlock)), true});
  std::vector<uint8_t> slotBytes(in.slots.size() * sizeof(int64_t));
  std::memcpy(slotBytes.data(), in.slots.data(), slotBytes.size());
  buffers.push_back({"slot_mapping", std::move(slotBytes), false});
  if (compiler::isPerTensorFp8(config.cacheFormat)) {
    std::vector<uint8_t> bytes(sizeof(float));
    const float scale = kScale;
    std::memcpy(bytes.data(), &scale, sizeof scale);
    buffers.push_back({"scale", std::move(bytes), false});
  }
  problem->scalars_ = {kvCStride, kPeStride, data->strideBlock, data->strideToken};
  problem->grid_ = {T, 1, 1};
  const int64_t written = std::count_if(in.slots.begin(), in.slots.end(), [](int64_t s) { return s >= 0; });
  problem->minimumBytes_ =
      static_cast<double>(written * W) * static_cast<double>(elementBytes(dt) + elementBytes(cacheKind)) +
      8.0 * static_cast<double>(T);
  problem->data_ = std::move(data);
  return problem;
}

void MlaCacheWriteProblem::check(const std::vector<Buffer>& after, AttentionRunResult& result) const {
  const Data& data = *data_;
  const compiler::MlaCacheWriteConfig& config = data.config;
  const reference::MlaCacheWriteInputs& in = data.inputs;
  const ScalarKind cacheKind = config.cacheElement();
  const int64_t W = config.cacheRowElements(), bs = config.blockSize;
  const std::vector<uint8_t>& cache = after[2].bytes;
  const reference::MlaCacheRows expected = reference::referenceMlaCacheWrite(in);
  const bool quantized = compiler::isPerTensorFp8(config.cacheFormat);
  const reference::QuantFormat format =
      cacheKind == ScalarKind::F8E4M3 ? reference::QuantFormat::Fp8E4M3 : reference::QuantFormat::Fp8E5M2;
  result.maxAbsError = 0;
  result.maxRelError = 0;
  result.tolerance = 0;
  std::string failure, worst;
  auto fail = [&](const std::string& what) {
    if (failure.empty()) failure = what;
  };
  for (int64_t slot = 0; slot < in.numSlots; ++slot) {
    const int64_t base = (slot / bs) * data.strideBlock + (slot % bs) * data.strideToken;
    const int64_t t = expected.owner[static_cast<size_t>(slot)];
    if (t < 0) {
      for (int64_t i = 0; i < W; ++i)
        if (getBits(cache, cacheKind, static_cast<size_t>(base + i)) != poisonBits(cacheKind)) {
          fail("the kernel wrote slot " + std::to_string(slot) + ", which no token maps to");
          break;
        }
      continue;
    }
    for (int64_t i = 0; i < W; ++i) {
      const double want = expected.values[static_cast<size_t>(slot * W + i)];
      const double got = getFloat(cache, cacheKind, static_cast<size_t>(base + i));
      auto where = [&] {
        std::ostringstream text;
        text << "token " << t << " (slot " << slot << "), " << (i < config.kvLoraRank ? "kv_c" : "k_pe") << " element "
             << (i < config.kvLoraRank ? i : i - config.kvLoraRank) << ": stored " << got << ", expected " << want;
        return text.str();
      };
      if (!quantized) {
        if (getBits(cache, cacheKind, static_cast<size_t>(base + i)) != ir::encodeFloat(want, cacheKind)) {
          fail(where());
          result.maxAbsError = std::numeric_limits<double>::infinity();
        }
        continue;
      }
      // Half a step at the value's magnitude, plus the f32 division's rounding, in x units.
      const double scale = in.scale;
      const double allowed = (reference::halfQuantStep(want, format) + std::ldexp(std::abs(want), -22)) * scale;
      const double err = std::isnan(got) ? std::numeric_limits<double>::infinity() : std::abs(got - want) * scale;
      result.tolerance = std::max(result.tolerance, allowed);
      result.maxRelError = std::max(result.maxRelError, err / allowed);
      if (err > result.maxAbsError || worst.empty()) {
        worst = where();
        result.maxAbsError = std::max(result.maxAbsError, err);
      }
      if (err > allowed) fail(where() + " (x / scale, clamped; allowed error " + std::to_string(allowed / scale) + ")");
    }
  }
  result.detail = failure.empty() ? (worst.empty() ? "all rows exact" : "largest error at " + worst) : failure;
  result.passed = failure.empty();
}

support::Expected<AttentionRunResult> runMlaCacheWriteInterpreted(const compiler::MlaCacheWriteConfig& config,
                                                             const compiler::BatchShape& shape) {
  auto problem = MlaCacheWriteProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemInterpreted([&] { return compiler::buildMlaCacheWrite(config); }, **problem);
}

support::Expected<GpuRunResult> runMlaCacheWriteGpu(const compiler::MlaCacheWriteConfig& config,
                                                    const compiler::BatchShape& shape, const GpuRunOptions& options) {
  auto problem = MlaCacheWriteProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemGpu([&] { return compiler::buildMlaCacheWrite(config); }, **problem, options);
}

}  // namespace attnjit::validation
