// Decode context parallelism across GPUs: one process per GPU (rank), the KV
// cache of every sequence split among the ranks, paged attention with LSE on
// each shard, an NCCL all-gather of the partial outputs and LSEs, and the LSE
// merge (parallel/ContextParallel.h).
//
//   attnjit_context_parallel [--ranks N] [--scheme contiguous|round_robin]
//                            [--mode check|bench] [--model paged|mla]
//                            [--batch B] [--context C]
//
// --model paged (default): paged attention, 32/8 heads, D = 128, bf16.
// --model mla: MLA latent decode, 128 heads over a 576-wide latent (512 + 64),
//   bf16; each rank's partial output is [B, 128, 512] with an [H, B] LSE.
//
// check (default): a batch of mixed lengths; rank 0 compares the merged result
//   with one GPU's attention over the whole context and with a float64
//   reference computed here. Exit status 0 only when both agree.
// bench: B sequences of C tokens (default 8 x 131072, 32/8 heads, D = 128,
//   bf16); rank 0 prints the median step time (attention on the shard, gather,
//   merge) and, for comparison, one GPU's time over the whole context.
//
// The parent process forks the ranks before touching CUDA; rank 0 creates the
// NCCL id and sends it to the others through pipes. NCCL_NVLS_ENABLE=0 keeps
// NVLink multicast off (set here unless the environment says otherwise).
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compiler/ops/CompanionOps.h"
#include "compiler/ops/ContextParallelShards.h"
#include "compiler/ops/MlaDecodeOp.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "ir/Numeric.h"
#include "parallel/ContextParallel.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/Stream.h"

namespace {

using attnjit::ir::ScalarKind;
using attnjit::support::Status;
namespace ops = attnjit::ops;
namespace support = attnjit::support;
namespace parallel = attnjit::parallel;
namespace runtime = attnjit::runtime;

constexpr int kQueryHeads = 32, kKvHeads = 8, kHeadSize = 128, kBlockSize = 16;
constexpr int kMlaHeads = 128, kLatentWidth = 576, kLoraRank = 512;
constexpr ScalarKind kDtype = ScalarKind::BF16;

// The shapes of the two models: query heads and width, output width, and the
// width of one cache row (a K or V row, or a latent row).
struct ModelShape {
  bool mla = false;
  int queryHeads = kQueryHeads, queryWidth = kHeadSize, outWidth = kHeadSize, rowWidth = kHeadSize;
};
const char* modelName(const ModelShape& shape) {
  return shape.mla ? "MLA decode 128 heads, 576/512" : "paged attention 32/8 heads, D=128";
}
ModelShape modelShape(bool mla) {
  if (!mla) return {};
  return {true, kMlaHeads, kLatentWidth, kLoraRank, kLatentWidth};
}

struct Options {
  int ranks = 0;  // 0: every visible GPU
  ops::KvShardScheme scheme = ops::KvShardScheme::RoundRobinBlocks;
  bool bench = false;
  bool mla = false;
  int batch = 0, context = 0;  // bench shape (0: defaults)
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "attnjit_context_parallel: %s\nusage: attnjit_context_parallel [--ranks N] "
               "[--scheme contiguous|round_robin] [--mode check|bench] [--model paged|mla] [--batch B] [--context C]\n",
               problem.c_str());
  std::exit(2);
}

Options parseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    auto positive = [&](const std::string& text) {
      char* end = nullptr;
      const long value = std::strtol(text.c_str(), &end, 10);
      if (end == text.c_str() || *end != '\0' || value < 1 || value > (1 << 24)) usage(arg + ": bad value " + text);
      return static_cast<int>(value);
    };
    if (arg == "--ranks") {
      options.ranks = positive(next());
    } else if (arg == "--scheme") {
      auto scheme = ops::parseKvShardScheme(next());
      if (!scheme) usage(scheme.diagnostic().message);
      options.scheme = *scheme;
    } else if (arg == "--mode") {
      const std::string mode = next();
      if (mode != "check" && mode != "bench") usage("--mode is check or bench, not " + mode);
      options.bench = mode == "bench";
    } else if (arg == "--model") {
      const std::string model = next();
      if (model != "paged" && model != "mla") usage("--model is paged or mla, not " + model);
      options.mla = model == "mla";
    } else if (arg == "--batch") {
      options.batch = positive(next());
    } else if (arg == "--context") {
      options.context = positive(next());
    } else {
      usage("unknown argument " + arg);
    }
  }
  return options;
}

#define REQUIRE_OK(expression)                                                                       \
  do {                                                                                               \
    if (support::Status status_ = (expression); !status_) {                                                   \
      std::fprintf(stderr, "rank %d: %s: %s\n", rank, #expression, status_.diagnostic().str().c_str()); \
      return 1;                                                                                      \
    }                                                                                                \
  } while (0)

// The whole batch's data on the host, generated alike in every process: q, and
// each token's K and V rows drawn from a pool of random rows (a pool keeps 4 GiB
// caches cheap to make; rows are picked by a hash of (sequence, token, head), so
// neighbouring keys differ).
struct Batch {
  ModelShape shape;
  std::vector<int32_t> seqLens;
  std::vector<uint16_t> q;  // [B, Hq, D] bf16 bits
  std::vector<uint16_t> keyPool, valuePool;
  std::vector<double> keyPoolF, valuePoolF, qF;  // the same values, for the reference
  static constexpr int kPoolRows = 4096;

  int numSeqs() const { return static_cast<int>(seqLens.size()); }
  size_t poolRow(int seq, int token, int head) const {
    uint64_t h = (static_cast<uint64_t>(seq) * 1000003u + static_cast<uint64_t>(token)) * 131u + head;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return static_cast<size_t>(h % kPoolRows);
  }
};

Batch makeBatch(std::vector<int32_t> seqLens, const ModelShape& shape) {
  Batch batch;
  batch.shape = shape;
  batch.seqLens = std::move(seqLens);
  std::mt19937_64 random(2026);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  auto fill = [&](std::vector<uint16_t>& bits, std::vector<double>& values, size_t count) {
    bits.resize(count);
    values.resize(count);
    for (size_t i = 0; i < count; ++i) {
      values[i] = attnjit::ir::roundToFloatKind(uniform(random), kDtype);
      bits[i] = static_cast<uint16_t>(attnjit::ir::encodeFloat(values[i], kDtype));
    }
  };
  fill(batch.q, batch.qF, static_cast<size_t>(batch.numSeqs()) * shape.queryHeads * shape.queryWidth);
  fill(batch.keyPool, batch.keyPoolF, static_cast<size_t>(Batch::kPoolRows) * shape.rowWidth);
  if (!shape.mla) fill(batch.valuePool, batch.valuePoolF, static_cast<size_t>(Batch::kPoolRows) * kHeadSize);
  return batch;
}

// A paged cache (num_blocks, 2, block_size, Hkv, D) holding, in physical block
// order, the given (sequence, logical block) pairs.
std::vector<uint16_t> makeCache(const Batch& batch, const std::vector<std::pair<int, int>>& blocks) {
  const size_t tokenElements = static_cast<size_t>(kKvHeads) * kHeadSize;
  const size_t blockElements = 2 * kBlockSize * tokenElements;
  std::vector<uint16_t> cache(std::max<size_t>(blocks.size(), 1) * blockElements, 0);
  for (size_t physical = 0; physical < blocks.size(); ++physical) {
    const auto [seq, logical] = blocks[physical];
    for (int slot = 0; slot < kBlockSize; ++slot) {
      const int token = logical * kBlockSize + slot;
      if (token >= batch.seqLens[seq]) break;
      for (int h = 0; h < kKvHeads; ++h) {
        const size_t row = batch.poolRow(seq, token, h) * kHeadSize;
        uint16_t* k = cache.data() + physical * blockElements + (slot * kKvHeads + h) * kHeadSize;
        std::memcpy(k, batch.keyPool.data() + row, kHeadSize * sizeof(uint16_t));
        std::memcpy(k + kBlockSize * tokenElements, batch.valuePool.data() + row, kHeadSize * sizeof(uint16_t));
      }
    }
  }
  return cache;
}

// A latent cache (num_blocks, block_size, 576) holding the given blocks.
std::vector<uint16_t> makeLatentCache(const Batch& batch, const std::vector<std::pair<int, int>>& blocks) {
  const size_t blockElements = static_cast<size_t>(kBlockSize) * kLatentWidth;
  std::vector<uint16_t> cache(std::max<size_t>(blocks.size(), 1) * blockElements, 0);
  for (size_t physical = 0; physical < blocks.size(); ++physical) {
    const auto [seq, logical] = blocks[physical];
    for (int slot = 0; slot < kBlockSize; ++slot) {
      const int token = logical * kBlockSize + slot;
      if (token >= batch.seqLens[seq]) break;
      std::memcpy(cache.data() + physical * blockElements + static_cast<size_t>(slot) * kLatentWidth,
                  batch.keyPool.data() + batch.poolRow(seq, token, 0) * kLatentWidth, kLatentWidth * sizeof(uint16_t));
    }
  }
  return cache;
}

// Float64 MLA decode: every head attends to the latent rows (K = the 576-wide
// row, V = its first 512 values): [B, 128, 512].
std::vector<double> referenceMla(const Batch& batch, double scale) {
  std::vector<double> out(static_cast<size_t>(batch.numSeqs()) * kMlaHeads * kLoraRank, 0.0);
  for (int s = 0; s < batch.numSeqs(); ++s) {
    for (int h = 0; h < kMlaHeads; ++h) {
      const double* q = batch.qF.data() + (static_cast<size_t>(s) * kMlaHeads + h) * kLatentWidth;
      std::vector<double> scores(batch.seqLens[s]);
      double maximum = -INFINITY;
      for (int t = 0; t < batch.seqLens[s]; ++t) {
        const double* row = batch.keyPoolF.data() + batch.poolRow(s, t, 0) * kLatentWidth;
        double dot = 0;
        for (int d = 0; d < kLatentWidth; ++d) dot += q[d] * row[d];
        scores[t] = dot * scale;
        maximum = std::max(maximum, scores[t]);
      }
      double sum = 0;
      double* o = out.data() + (static_cast<size_t>(s) * kMlaHeads + h) * kLoraRank;
      for (int t = 0; t < batch.seqLens[s]; ++t) {
        const double p = std::exp(scores[t] - maximum);
        sum += p;
        const double* row = batch.keyPoolF.data() + batch.poolRow(s, t, 0) * kLatentWidth;
        for (int d = 0; d < kLoraRank; ++d) o[d] += p * row[d];
      }
      for (int d = 0; d < kLoraRank; ++d) o[d] /= sum;
    }
  }
  return out;
}

// Float64 attention of each sequence's one query over all its keys: [B, Hq, D].
std::vector<double> referenceAttention(const Batch& batch, double scale) {
  std::vector<double> out(static_cast<size_t>(batch.numSeqs()) * kQueryHeads * kHeadSize, 0.0);
  for (int s = 0; s < batch.numSeqs(); ++s) {
    for (int h = 0; h < kQueryHeads; ++h) {
      const int kvHead = h / (kQueryHeads / kKvHeads);
      const double* q = batch.qF.data() + (static_cast<size_t>(s) * kQueryHeads + h) * kHeadSize;
      std::vector<double> scores(batch.seqLens[s]);
      double maximum = -INFINITY;
      for (int t = 0; t < batch.seqLens[s]; ++t) {
        const double* k = batch.keyPoolF.data() + batch.poolRow(s, t, kvHead) * kHeadSize;
        double dot = 0;
        for (int d = 0; d < kHeadSize; ++d) dot += q[d] * k[d];
        scores[t] = dot * scale;
        maximum = std::max(maximum, scores[t]);
      }
      double sum = 0;
      double* o = out.data() + (static_cast<size_t>(s) * kQueryHeads + h) * kHeadSize;
      for (int t = 0; t < batch.seqLens[s]; ++t) {
        const double p = std::exp(scores[t] - maximum);
        sum += p;
        const double* v = batch.valuePoolF.data() + batch.poolRow(s, t, kvHead) * kHeadSize;
        for (int d = 0; d < kHeadSize; ++d) o[d] += p * v[d];
      }
      for (int d = 0; d < kHeadSize; ++d) o[d] /= sum;
    }
  }
  return out;
}

// Device buffers of one paged-attention problem (the whole batch or a shard).
struct DeviceProblem {
  runtime::DeviceBuffer q, cache, blockTables, seqLens, cuSeqlensQ, out, lse, workspace;
  int maxBlocksPerSeq = 0, maxSeqLen = 0;
  int64_t sumSeqLens = 0;
};

// MLA decode over a problem, its LSE in the merge's [H, B] layout.
ops::MlaDecodeParams mlaParams(const DeviceProblem& d, int numSeqs, float scale, runtime::StreamHandle stream) {
  ops::MlaDecodeParams p;
  p.numHeads = kMlaHeads;
  p.blockSize = kBlockSize;
  p.numSeqs = numSeqs;
  p.maxSeqLen = d.maxSeqLen;
  p.sumSeqLens = d.sumSeqLens;
  p.scale = scale;
  p.out = d.out.address();
  p.q = d.q.address();
  p.kvCache = d.cache.address();
  p.blockTables = d.blockTables.address();
  p.seqLens = d.seqLens.address();
  p.lse = d.lse.address();
  p.lseStrideBatch = 1;
  p.lseStrideHead = numSeqs;
  p.workspace = d.workspace.address();
  p.workspaceBytes = d.workspace.size();
  p.qStrideBatch = int64_t{kMlaHeads} * kLatentWidth;
  p.qStrideHead = kLatentWidth;
  p.oStrideBatch = int64_t{kMlaHeads} * kLoraRank;
  p.oStrideHead = kLoraRank;
  p.blockTableStride = d.maxBlocksPerSeq;
  p.kvStrideBlock = int64_t{kBlockSize} * kLatentWidth;
  p.kvStrideToken = kLatentWidth;
  p.stream = stream;
  return p;
}

ops::PagedAttentionParams attentionParams(const DeviceProblem& d, int numSeqs, float scale,
                                          runtime::StreamHandle stream) {
  ops::PagedAttentionParams p;
  p.dtype = kDtype;
  p.numQueryHeads = kQueryHeads;
  p.numKvHeads = kKvHeads;
  p.headSize = kHeadSize;
  p.blockSize = kBlockSize;
  // Every key of a shard precedes the decode query (ContextParallelShards.h).
  p.causal = false;
  p.numSeqs = numSeqs;
  p.numTokens = numSeqs;
  p.maxQueryLen = 1;
  p.maxSeqLen = d.maxSeqLen;
  p.scale = scale;
  p.out = d.out.address();
  p.q = d.q.address();
  p.kvCache = d.cache.address();
  p.blockTables = d.blockTables.address();
  p.seqLens = d.seqLens.address();
  p.cuSeqlensQ = d.cuSeqlensQ.address();
  p.lse = d.lse.address();
  p.lseStrideHead = numSeqs;
  p.workspace = d.workspace.address();
  p.workspaceBytes = d.workspace.size();
  p.qStrideToken = kQueryHeads * kHeadSize;
  p.qStrideHead = kHeadSize;
  p.oStrideToken = kQueryHeads * kHeadSize;
  p.oStrideHead = kHeadSize;
  p.blockTableStride = d.maxBlocksPerSeq;
  p.kvStrideBlock = 2 * kBlockSize * kKvHeads * kHeadSize;
  p.kvStrideKv = kBlockSize * kKvHeads * kHeadSize;
  p.kvStrideToken = kKvHeads * kHeadSize;
  p.kvStrideHead = kHeadSize;
  p.stream = stream;
  return p;
}

template <typename T>
support::Expected<runtime::DeviceBuffer> upload(const std::vector<T>& host) {
  auto buffer = runtime::DeviceBuffer::allocate(std::max<size_t>(host.size() * sizeof(T), 16));
  if (!buffer) return buffer;
  if (support::Status s = buffer->copyFromHost(host.data(), host.size() * sizeof(T)); !s) return s;
  return buffer;
}

// Uploads a problem: the cache holds `blocks` (sequence, logical block) in
// physical order; blockTables/seqLens index it.
support::Expected<DeviceProblem> makeDeviceProblem(const Batch& batch, const std::vector<std::pair<int, int>>& blocks,
                                                      const std::vector<int32_t>& blockTables, int maxBlocksPerSeq,
                                                      const std::vector<int32_t>& seqLens) {
  DeviceProblem d;
  const int numSeqs = batch.numSeqs();
  std::vector<int32_t> cuSeqlensQ(numSeqs + 1);
  std::iota(cuSeqlensQ.begin(), cuSeqlensQ.end(), 0);
  d.maxBlocksPerSeq = maxBlocksPerSeq;
  d.maxSeqLen = std::max(1, *std::max_element(seqLens.begin(), seqLens.end()));
  d.sumSeqLens = std::accumulate(seqLens.begin(), seqLens.end(), int64_t{0});
  const ModelShape& shape = batch.shape;
  const size_t outElements = static_cast<size_t>(numSeqs) * shape.queryHeads * shape.outWidth;
  const uint64_t workspaceBytes =
      shape.mla ? ops::mlaDecodeWorkspaceBytes(numSeqs, kMlaHeads, kLoraRank, d.maxSeqLen).value()
                : ops::pagedAttentionWorkspaceBytes(numSeqs, kQueryHeads, kHeadSize, d.maxSeqLen).value();
  auto fillBuffer = [](size_t bytes, uint8_t poison) -> support::Expected<runtime::DeviceBuffer> {
    auto buffer = runtime::DeviceBuffer::allocate(std::max<size_t>(bytes, 16));
    if (!buffer) return buffer;
    if (support::Status s = buffer->fill(poison); !s) return s;
    return buffer;
  };
  struct Step {
    runtime::DeviceBuffer* target;
    support::Expected<runtime::DeviceBuffer> made;
  };
  Step steps[] = {
      {&d.q, upload(batch.q)},
      {&d.cache, upload(shape.mla ? makeLatentCache(batch, blocks) : makeCache(batch, blocks))},
      {&d.blockTables, upload(blockTables)},
      {&d.seqLens, upload(seqLens)},
      {&d.cuSeqlensQ, upload(cuSeqlensQ)},
      {&d.out, fillBuffer(outElements * sizeof(uint16_t), 0xff)},  // NaN until written
      {&d.lse, fillBuffer(static_cast<size_t>(numSeqs) * shape.queryHeads * sizeof(float), 0xff)},
      {&d.workspace, fillBuffer(workspaceBytes, 0xff)},
  };
  for (Step& step : steps) {
    if (!step.made) return step.made.status();
    *step.target = std::move(*step.made);
  }
  return d;
}

std::vector<double> downloadOutput(const runtime::DeviceBuffer& out, size_t elements, support::Status& status) {
  std::vector<uint16_t> bits(elements);
  status = out.copyToHost(bits.data(), elements * sizeof(uint16_t));
  std::vector<double> values(elements);
  for (size_t i = 0; i < elements; ++i) values[i] = attnjit::ir::decodeFloat(bits[i], kDtype);
  return values;
}

double maxAbsDifference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double difference = std::fabs(a[i] - b[i]);
    if (!(difference <= worst)) worst = std::isnan(difference) ? INFINITY : difference;
  }
  return worst;
}

double median(std::vector<float> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

// Times `step` (enqueued on `stream`): warm-up, then the median of per-step events.
support::Expected<double> timeSteps(runtime::StreamHandle stream, const std::function<support::Status()>& step) {
  for (int i = 0; i < 10; ++i)
    if (support::Status s = step(); !s) return s;
  std::vector<float> times;
  for (int i = 0; i < 50; ++i) {
    auto start = runtime::Event::create();
    auto end = runtime::Event::create();
    if (!start || !end) return start ? end.status() : start.status();
    if (support::Status s = start->record(stream); !s) return s;
    if (support::Status s = step(); !s) return s;
    if (support::Status s = end->record(stream); !s) return s;
    auto ms = runtime::Event::elapsedMilliseconds(*start, *end);
    if (!ms) return ms.status();
    times.push_back(*ms);
  }
  return median(times);
}

int runRank(int rank, int numRanks, const Options& options, int readFd, const std::vector<int>& writeFds) {
  // ---- join the group: rank 0 makes the id, the pipes carry it. ----
  parallel::GroupId id;
  if (rank == 0) {
    auto made = parallel::createGroupId();
    if (!made) {
      std::fprintf(stderr, "rank 0: %s\n", made.diagnostic().str().c_str());
      return 1;
    }
    id = *made;
    for (int fd : writeFds)
      if (write(fd, id.bytes.data(), id.bytes.size()) != static_cast<ssize_t>(id.bytes.size())) return 1;
  } else if (read(readFd, id.bytes.data(), id.bytes.size()) != static_cast<ssize_t>(id.bytes.size())) {
    std::fprintf(stderr, "rank %d: no group id from rank 0\n", rank);
    return 1;
  }
  if (auto context = runtime::activatePrimaryContext(rank); !context) {
    std::fprintf(stderr, "rank %d: %s\n", rank, context.diagnostic().str().c_str());
    return 1;
  }
  auto group = parallel::ContextParallelGroup::join(id, rank, numRanks);
  if (!group) {
    std::fprintf(stderr, "rank %d: %s\n", rank, group.diagnostic().str().c_str());
    return 1;
  }
  auto stream = runtime::Stream::create();
  if (!stream) return 1;

  // ---- the batch and this rank's shard ----
  std::vector<int32_t> seqLens;
  if (options.bench) {
    seqLens.assign(options.batch ? options.batch : 8, options.context ? options.context : 131072);
  } else {
    seqLens = {4099, 17, 1000, 2600, 1, 530};  // odd lengths, a sequence shorter than one block per rank
  }
  const ModelShape shape = modelShape(options.mla);
  const Batch batch = makeBatch(seqLens, shape);
  const int numSeqs = batch.numSeqs();
  // The logical block table: sequence s's blocks numbered consecutively.
  int maxBlocks = 0;
  for (int32_t len : seqLens) maxBlocks = std::max(maxBlocks, (len + kBlockSize - 1) / kBlockSize);
  std::vector<int32_t> logicalTables(static_cast<size_t>(numSeqs) * maxBlocks, 0);
  std::vector<std::pair<int, int>> allBlocks;  // (sequence, logical block) of logical id
  for (int s = 0; s < numSeqs; ++s)
    for (int b = 0; b * kBlockSize < seqLens[s]; ++b) {
      logicalTables[static_cast<size_t>(s) * maxBlocks + b] = static_cast<int32_t>(allBlocks.size());
      allBlocks.push_back({s, b});
    }
  auto shards = ops::shardKvBlockTables(options.scheme, numRanks, kBlockSize, seqLens, logicalTables, maxBlocks);
  if (!shards) {
    std::fprintf(stderr, "rank %d: %s\n", rank, shards.diagnostic().str().c_str());
    return 1;
  }
  // This rank's cache holds only its blocks: renumber them into its own pool.
  ops::KvShard shard = (*shards)[rank];
  std::vector<std::pair<int, int>> shardBlocks;
  for (int s = 0; s < numSeqs; ++s) {
    const int used = (shard.seqLens[s] + kBlockSize - 1) / kBlockSize;
    for (int b = 0; b < used; ++b) {
      int32_t& entry = shard.blockTables[static_cast<size_t>(s) * shard.maxBlocksPerSeq + b];
      shardBlocks.push_back(allBlocks[entry]);
      entry = static_cast<int32_t>(shardBlocks.size() - 1);
    }
  }
  auto local = makeDeviceProblem(batch, shardBlocks, shard.blockTables, shard.maxBlocksPerSeq, shard.seqLens);
  if (!local) {
    std::fprintf(stderr, "rank %d: %s\n", rank, local.diagnostic().str().c_str());
    return 1;
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(shape.queryWidth)));
  const size_t outElements = static_cast<size_t>(numSeqs) * shape.queryHeads * shape.outWidth;
  auto merged = runtime::DeviceBuffer::allocate(outElements * sizeof(uint16_t));
  auto mergeWorkspace = runtime::DeviceBuffer::allocate(
      parallel::mergeAcrossRanksWorkspaceBytes(kDtype, numSeqs, shape.queryHeads, shape.outWidth, numRanks));
  if (!merged || !mergeWorkspace) return 1;
  REQUIRE_OK(merged->fill(0xff));
  parallel::RankMergeParams mergeParams;
  mergeParams.dtype = kDtype;
  mergeParams.numHeads = shape.queryHeads;
  mergeParams.headSize = shape.outWidth;
  mergeParams.numTokens = numSeqs;
  mergeParams.localOutput = local->out.address();
  mergeParams.localLse = local->lse.address();
  mergeParams.output = merged->address();
  mergeParams.outputStrideToken = shape.queryHeads * shape.outWidth;
  mergeParams.outputStrideHead = shape.outWidth;
  mergeParams.workspace = mergeWorkspace->address();
  mergeParams.workspaceBytes = mergeWorkspace->size();
  mergeParams.stream = stream->handle();
  // One decode step's attention over a problem (a shard or the whole batch).
  auto attend = [&](const DeviceProblem& d) -> support::Status {
    if (shape.mla) return ops::mlaDecode(mlaParams(d, numSeqs, scale, stream->handle()));
    return ops::pagedAttention(attentionParams(d, numSeqs, scale, stream->handle()));
  };
  auto step = [&]() -> support::Status {
    if (support::Status s = attend(*local); !s) return s;
    return (*group)->mergeAcrossRanks(mergeParams);
  };

  // ---- the run ----
  if (!options.bench) {
    REQUIRE_OK(step());
    REQUIRE_OK(stream->synchronize());
    if (rank != 0) return 0;
    // Rank 0: one GPU over the whole context, and the float64 reference.
    auto whole = makeDeviceProblem(batch, allBlocks, logicalTables, maxBlocks, seqLens);
    if (!whole) {
      std::fprintf(stderr, "rank 0: %s\n", whole.diagnostic().str().c_str());
      return 1;
    }
    REQUIRE_OK(attend(*whole));
    REQUIRE_OK(stream->synchronize());
    support::Status copied;
    const std::vector<double> mergedOut = downloadOutput(*merged, outElements, copied);
    REQUIRE_OK(copied);
    const std::vector<double> wholeOut = downloadOutput(whole->out, outElements, copied);
    REQUIRE_OK(copied);
    const std::vector<double> reference = shape.mla ? referenceMla(batch, scale) : referenceAttention(batch, scale);
    const double mergedError = maxAbsDifference(mergedOut, reference);
    const double wholeError = maxAbsDifference(wholeOut, reference);
    const double mergedVsWhole = maxAbsDifference(mergedOut, wholeOut);
    // bf16 outputs of averages of values in [-1, 1]: one rounding of the result
    // (2^-9 relative) plus one of each partial before the merge.
    constexpr double kTolerance = 1.6e-2;
    const bool passed = mergedError <= kTolerance && wholeError <= kTolerance && mergedVsWhole <= kTolerance;
    std::printf(
        "context parallel check: %s, %d ranks, %s shards, %d sequences (lengths 4099 17 1000 2600 1 530), bf16\n"
        "  max |merged - float64| = %.3g, max |one GPU - float64| = %.3g, max |merged - one GPU| = "
        "%.3g (tolerance %.3g): %s\n",
        modelName(shape), numRanks, ops::kvShardSchemeName(options.scheme).c_str(), numSeqs, mergedError, wholeError,
        mergedVsWhole,
        kTolerance, passed ? "PASSED" : "FAILED");
    return passed ? 0 : 1;
  }

  auto stepMs = timeSteps(stream->handle(), step);
  if (!stepMs) {
    std::fprintf(stderr, "rank %d: %s\n", rank, stepMs.diagnostic().str().c_str());
    return 1;
  }
  // The shard's attention alone (no collective: each rank times its own).
  auto attentionMs = timeSteps(stream->handle(), [&] { return attend(*local); });
  if (!attentionMs) return 1;
  std::printf("rank %d: step %.4f ms (attention on %d keys/sequence %.4f ms, gather + merge %.4f ms)\n", rank, *stepMs,
              *std::max_element(shard.seqLens.begin(), shard.seqLens.end()), *attentionMs, *stepMs - *attentionMs);
  if (rank != 0) return 0;
  auto whole = makeDeviceProblem(batch, allBlocks, logicalTables, maxBlocks, seqLens);
  if (!whole) {
    std::fprintf(stderr, "rank 0: %s\n", whole.diagnostic().str().c_str());
    return 1;
  }
  auto wholeMs = timeSteps(stream->handle(), [&] { return attend(*whole); });
  if (!wholeMs) return 1;
  const double kvBytes = shape.mla ? numSeqs * static_cast<double>(seqLens[0]) * kLatentWidth * 2
                                   : 2.0 * numSeqs * static_cast<double>(seqLens[0]) * kKvHeads * kHeadSize * 2;
  std::printf(
      "context parallel bench: %s, B=%d, ctx %d, bf16, %s shards\n"
      "  one GPU:   %.4f ms per step (%.0f GB/s of KV)\n"
      "  %d GPUs:    %.4f ms per step incl. all-gather + merge (%.2fx)\n",
      modelName(shape), numSeqs, seqLens[0], ops::kvShardSchemeName(options.scheme).c_str(), *wholeMs,
      kvBytes / (*wholeMs * 1e6),
      numRanks, *stepMs, *wholeMs / *stepMs);
  return 0;
}

// The number of GPUs, counted in a child process: CUDA does not survive fork(),
// so the parent must not initialize the driver before forking the ranks.
int countDevicesInChild() {
  const pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) {
    auto count = runtime::deviceCount();
    if (!count) std::fprintf(stderr, "attnjit_context_parallel: %s\n", count.diagnostic().str().c_str());
    _exit(count ? std::min(*count, 100) : 0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) return 0;
  return WEXITSTATUS(status);
}

}  // namespace

int main(int argc, char** argv) {
  const Options options = parseOptions(argc, argv);
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  int numRanks = options.ranks;
  if (numRanks == 0) numRanks = countDevicesInChild();
  if (numRanks < 1) {
    std::fprintf(stderr, "attnjit_context_parallel: no GPU\n");
    return 1;
  }
  std::vector<int> readFds(numRanks, -1), writeFds;
  for (int r = 1; r < numRanks; ++r) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    readFds[r] = fds[0];
    writeFds.push_back(fds[1]);
  }
  std::vector<pid_t> children;
  for (int r = 0; r < numRanks; ++r) {
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      const int status = runRank(r, numRanks, options, readFds[r], r == 0 ? writeFds : std::vector<int>{});
      // _exit skips stdio's buffers (and the parent's atexit handlers, which a
      // forked child must not run): flush what the rank printed first.
      std::fflush(nullptr);
      _exit(status);
    }
    children.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : children) {
    int status = 0;
    if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  if (failures) std::fprintf(stderr, "attnjit_context_parallel: %d of %d ranks failed\n", failures, numRanks);
  return failures ? 1 : 0;
}
