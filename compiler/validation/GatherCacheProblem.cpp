#include "compiler/validation/GatherCacheProblem.h"

#include <bit>
#include <cmath>
#include <sstream>

#include "compiler/validation/ProblemData.h"
#include "compiler/validation/reference/CompanionReference.h"

namespace attnjit::validation {

using ir::ScalarKind;
using namespace problem_data;

namespace {
constexpr int kSpareBlocks = 3;       // owned by no sequence, poisoned
constexpr int kSpareTableColumns = 2;  // block-table entries past every sequence
}  // namespace

struct GatherCacheProblem::Data {
  compiler::GatherCacheConfig config;
  reference::GatherCacheInputs inputs;
  int64_t numTokens = 0, dstStride = 0;
};

support::Expected<std::unique_ptr<GatherCacheProblem>> GatherCacheProblem::create(
    const compiler::GatherCacheConfig& config, const compiler::BatchShape& shape) {
  if (support::Status s = config.validate(); !s) return s;
  if (support::Status s = shape.validate(); !s) return s;
  auto data = std::make_shared<Data>();
  data->config = config;
  reference::GatherCacheInputs& in = data->inputs;
  const ScalarKind dt = config.dtype, cacheKind = config.cacheElement();
  const bool quantized = compiler::isPerTensorFp8(config.cacheFormat);
  const int64_t E = config.entrySize, bs = config.blockSize;
  const int numSeqs = static_cast<int>(shape.queryLens.size());
  RandomStream random(shape.seed);
  in.entrySize = config.entrySize;
  in.scale = quantized ? static_cast<double>(kScale) : 1.0;

  std::vector<int64_t> blocksPerSeq;
  int64_t usedBlocks = 0, maxBlocks = 0;
  for (int s = 0; s < numSeqs; ++s) {
    const int64_t seqLen = shape.queryLens[static_cast<size_t>(s)] + shape.contextLens[static_cast<size_t>(s)];
    blocksPerSeq.push_back((seqLen + bs - 1) / bs);
    usedBlocks += blocksPerSeq.back();
    maxBlocks = std::max(maxBlocks, blocksPerSeq.back());
  }
  const int64_t numBlocks = usedBlocks + kSpareBlocks;
  std::vector<int32_t> physical(static_cast<size_t>(numBlocks));
  for (size_t i = 0; i < physical.size(); ++i) physical[i] = static_cast<int32_t>(i);
  for (size_t i = physical.size() - 1; i > 0; --i) std::swap(physical[i], physical[random.below(i + 1)]);
  const int64_t tableStride = maxBlocks + kSpareTableColumns;
  std::vector<int32_t> blockTable(static_cast<size_t>(numSeqs * tableStride), -1);

  // Row strides rounded up to the divisibility the kernel is compiled to assume.
  const int64_t sd = config.strideDivisibility;
  const int64_t strideToken = (E + sd - 1) / sd * sd, strideBlock = bs * strideToken;
  std::vector<uint8_t> cache = poisonedBuffer(cacheKind, static_cast<size_t>(numBlocks * strideBlock));
  size_t nextBlock = 0;
  std::vector<int32_t> cuSeqLens = {0}, starts;
  for (int s = 0; s < numSeqs; ++s) {
    const int64_t context = shape.contextLens[static_cast<size_t>(s)];
    const int64_t seqLen = shape.queryLens[static_cast<size_t>(s)] + context;
    for (int64_t b = 0; b < blocksPerSeq[static_cast<size_t>(s)]; ++b)
      blockTable[static_cast<size_t>(s * tableStride + b)] = physical[nextBlock++];
    std::vector<double> rows(static_cast<size_t>(seqLen * E));
    for (int64_t pos = 0; pos < seqLen; ++pos) {
      const double magnitude = std::ldexp(1.0, static_cast<int>(random.below(9)) - 4);
      const int64_t base = blockTable[static_cast<size_t>(s * tableStride + pos / bs)] * strideBlock +
                           (pos % bs) * strideToken;
      for (int64_t e = 0; e < E; ++e) {
        double value = 0;
        if (quantized) {
          // A random finite byte (fp8 NaNs excluded: e4m3's S.1111.111, e5m2's exponent 31).
          uint32_t bits = 0;
          do {
            bits = static_cast<uint32_t>(random.below(256));
          } while (cacheKind == ScalarKind::F8E4M3 ? (bits & 0x7F) == 0x7F : (bits & 0x7C) == 0x7C);
          value = ir::decodeFloat(bits, cacheKind);
        } else {
          value = ir::roundToFloatKind(magnitude * random.uniform(-1, 1), dt);
        }
        rows[static_cast<size_t>(pos * E + e)] = value;
        setFloat(cache, cacheKind, static_cast<size_t>(base + e), value);
      }
    }
    in.rows.push_back(std::move(rows));
    const int start = config.seqStarts ? static_cast<int>(context) : 0;
    const int count = config.seqStarts ? shape.queryLens[static_cast<size_t>(s)] : static_cast<int>(seqLen);
    in.starts.push_back(start);
    in.counts.push_back(count);
    starts.push_back(start);
    cuSeqLens.push_back(cuSeqLens.back() + count);
  }
  data->numTokens = cuSeqLens.back();
  data->dstStride = (E + kDstPadding + sd - 1) / sd * sd;

  std::unique_ptr<GatherCacheProblem> problem(new GatherCacheProblem());
  auto& buffers = problem->buffers_;
  auto intBytes = [](const std::vector<int32_t>& values) {
    std::vector<uint8_t> bytes(values.size() * sizeof(int32_t));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
  };
  buffers.push_back({"dst", poisonedBuffer(dt, static_cast<size_t>(std::max<int64_t>(data->numTokens, 1) *
                                                                   data->dstStride)),
                     true});
  buffers.push_back({"cache", std::move(cache), false});
  buffers.push_back({"block_table", intBytes(blockTable), false});
  buffers.push_back({"cu_seq_lens", intBytes(cuSeqLens), false});
  if (config.seqStarts) buffers.push_back({"seq_starts", intBytes(starts), false});
  if (quantized) {
    std::vector<uint8_t> bytes(sizeof(float));
    const float scale = kScale;
    std::memcpy(bytes.data(), &scale, sizeof scale);
    buffers.push_back({"scale", std::move(bytes), false});
  }
  problem->scalars_ = {int64_t{numSeqs}, int64_t{std::bit_width(static_cast<unsigned>(numSeqs))}, data->numTokens,
                       data->dstStride, tableStride, strideBlock, strideToken};
  problem->grid_ = {std::max<int64_t>(compiler::gatherCacheGridX(config, data->numTokens), 1), 1, 1};
  problem->minimumBytes_ = static_cast<double>(data->numTokens * E) *
                           static_cast<double>(elementBytes(dt) + elementBytes(cacheKind));
  problem->data_ = std::move(data);
  return problem;
}

void GatherCacheProblem::check(const std::vector<Buffer>& after, AttentionRunResult& result) const {
  const Data& data = *data_;
  const compiler::GatherCacheConfig& config = data.config;
  const ScalarKind dt = config.dtype;
  const int64_t E = config.entrySize;
  const std::vector<uint8_t>& dst = after[0].bytes;
  const std::vector<double> expected = reference::referenceGatherCache(data.inputs);
  result.maxAbsError = result.maxRelError = result.tolerance = 0;
  std::string failure;
  for (int64_t t = 0; t < data.numTokens && failure.empty(); ++t) {
    for (int64_t e = 0; e < data.dstStride; ++e) {
      const size_t index = static_cast<size_t>(t * data.dstStride + e);
      const uint32_t got = getBits(dst, dt, index);
      if (e >= E) {
        if (got != poisonBits(dt)) {
          failure = "the kernel wrote dst row " + std::to_string(t) + " at padding column " + std::to_string(e);
          break;
        }
        continue;
      }
      // The f32 product, then the dtype (an exact product in float64 for fp8).
      const double want =
          ir::roundToFloatKind(ir::roundToFloatKind(expected[static_cast<size_t>(t * E + e)], ScalarKind::F32), dt);
      if (got != ir::encodeFloat(want, dt)) {
        std::ostringstream text;
        text << "dst row " << t << ", element " << e << ": got " << getFloat(dst, dt, index) << ", expected "
             << want;
        failure = text.str();
        result.maxAbsError = std::abs(getFloat(dst, dt, index) - want);
        break;
      }
    }
  }
  result.detail = failure.empty() ? "every row bit for bit" : failure;
  result.passed = failure.empty();
}

support::Expected<AttentionRunResult> runGatherCacheInterpreted(const compiler::GatherCacheConfig& config,
                                                               const compiler::BatchShape& shape) {
  auto problem = GatherCacheProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemInterpreted([&] { return compiler::buildGatherCache(config); }, **problem);
}

support::Expected<GpuRunResult> runGatherCacheGpu(const compiler::GatherCacheConfig& config,
                                                  const compiler::BatchShape& shape, const GpuRunOptions& options) {
  auto problem = GatherCacheProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemGpu([&] { return compiler::buildGatherCache(config); }, **problem, options);
}

}  // namespace attnjit::validation
