#include "compiler/validation/MlaDecodeProblem.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "compiler/passes/Pipeline.h"
#include "compiler/validation/ProblemData.h"
#include "compiler/kernels/ReduceSegments.h"
#include "support/ParallelFor.h"
#include "ir/Interpreter.h"
#include "ir/KernelAttributes.h"
#include "ir/Numeric.h"
#include "compiler/validation/reference/MlaReference.h"

namespace attnjit::validation {

using ir::ScalarKind;
using support::Status;
using namespace problem_data;

namespace {

support::Status batchError(const std::string& message) { return support::Status::error(support::Location{}, message); }

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Padding after each sequence's q and output rows (distinct, so a kernel that
// mixes the strides up reads or writes the wrong place), spare cache blocks and
// block-table columns nobody may touch, and the entry past a sequence's blocks:
// far outside the cache, so using it fails the interpreter's bounds check.
constexpr int64_t kQBatchPadding = 8;
constexpr int64_t kOutBatchPadding = 24;
constexpr int64_t kLseBatchPadding = 3;
constexpr int64_t kLseHeadPadding = 5;
constexpr int kSpareBlocks = 3;
constexpr int kSpareBlockTableColumns = 2;
constexpr int32_t kUnusedBlockEntry = std::numeric_limits<int32_t>::max();
// fp8 latents: values in [-1, 1] become up to 128, inside e4m3's 448.
constexpr float kFp8LatentScale = 1.0f / 128;
// DeepSeek-V3's softmax scale, 1/sqrt(qk_nope 128 + qk_rope 64): sharper than
// 1/sqrt(W), so the softmax is not flat.
const double kSoftmaxScale = 1.0 / std::sqrt(192.0);

// Same bound as unified attention (AttentionProblem.cpp): inputs are rounded to
// the dtype before kernel and reference see them; P rounded to the dtype for P·V
// and the rounded output give 2u; 4u leaves room for exp2.approx and summation order.
// f16/bf16: 4u of the output dtype (as unified attention's). f32 on TF32 dots:
// the reference rounds q and the latent as the kernel does, P's tf32 rounding
// remains: f16's bound. Exact f32 keeps every product and P in f32: a few
// hundred f32 ulps.
double mlaTolerance(ScalarKind dtype, bool tf32) {
  if (tf32) return 4 * std::ldexp(1.0, -11);
  if (dtype == ScalarKind::F32) return 2e-5;
  return 4 * std::ldexp(1.0, dtype == ScalarKind::F16 ? -11 : -8);
}

// Uniform in [-1, 1], never zero after rounding to `kind`.
double nonzeroValue(RandomStream& random, ScalarKind kind) {
  while (true) {
    const double value = ir::roundToFloatKind(random.uniform(-1, 1), kind);
    if (value != 0) return value;
  }
}

bool checkedSequence(int b, int numSeqs, int checkStride) { return b % checkStride == 0 || b + 1 == numSeqs; }

}  // namespace

support::Expected<MlaDecodeBatch> MlaDecodeBatch::fromShape(const compiler::BatchShape& shape) {
  if (support::Status s = shape.validate(); !s) return s;
  MlaDecodeBatch batch;
  batch.seqLens.clear();
  for (size_t i = 0; i < shape.queryLens.size(); ++i) {
    if (shape.queryLens[i] != 1)
      return batchError("mla_decode is decode only: query_lens[" + std::to_string(i) + "] is " +
                        std::to_string(shape.queryLens[i]) + ", expected 1 (one query token per sequence)");
    batch.seqLens.push_back(shape.contextLens[i] + 1);
  }
  batch.seed = shape.seed;
  batch.checkStride = shape.checkStride;
  batch.segmentTiles = shape.segmentTiles;
  return batch;
}

support::Status MlaDecodeBatch::validate() const {
  if (seqLens.empty()) return batchError("the batch is empty: mla_decode needs at least one sequence");
  int64_t keys = 0;
  for (size_t b = 0; b < seqLens.size(); ++b) {
    if (seqLens[b] < 0)
      return batchError("seq_lens[" + std::to_string(b) + "] (" + std::to_string(seqLens[b]) + ") is negative");
    keys += seqLens[b];
  }
  constexpr int64_t kMaxKeys = int64_t{1} << 24;
  if (keys > kMaxKeys || seqLens.size() > (1u << 16))
    return batchError("the batch has " + std::to_string(seqLens.size()) + " sequences and " + std::to_string(keys) +
                      " keys; at most 65536 sequences and " + std::to_string(kMaxKeys) + " keys");
  if (checkStride < 1) return batchError("check_stride must be at least 1");
  if (segmentTiles < 1) return batchError("segment_tiles must be at least 1");
  return support::Status::ok();
}

struct MlaDecodeProblem::Data {
  compiler::MlaDecodeConfig config;
  reference::MlaDecodeInputs logical;
  int numSeqs = 0, checkStride = 1;
  int64_t oStrideBatch = 0, oStrideHead = 0;
  int lseBuffer = -1;
  int64_t lseStrideBatch = 0, lseStrideHead = 0, lseElements = 0;
};

MlaDecodeProblem::~MlaDecodeProblem() = default;

support::Expected<std::unique_ptr<MlaDecodeProblem>> MlaDecodeProblem::create(const compiler::MlaDecodeConfig& config,
                                                                         const MlaDecodeBatch& batch) {
  if (support::Status s = config.validate(); !s) return s;
  if (support::Status s = batch.validate(); !s) return s;
  std::unique_ptr<MlaDecodeProblem> problem(new MlaDecodeProblem());
  problem->data_ = std::make_unique<Data>();
  Data& data = *problem->data_;
  data.config = config;
  data.numSeqs = static_cast<int>(batch.seqLens.size());
  data.checkStride = batch.checkStride;
  const ScalarKind dtype = config.dtype;
  const bool fp8 = config.kvCacheFormat == compiler::KvCacheFormat::Fp8E4M3;
  const int numSeqs = data.numSeqs;
  const int64_t H = config.numHeads, L = config.kvLoraRank, W = config.latentWidth(), bs = config.blockSize;

  reference::MlaDecodeInputs& logical = data.logical;
  logical.numHeads = config.numHeads;
  logical.kvLoraRank = config.kvLoraRank;
  logical.ropeDim = config.ropeDim;
  logical.scale = kSoftmaxScale;
  logical.tf32Queries = config.tf32Dots();
  logical.tf32Latent = config.tf32Dots() && !fp8;
  logical.q.resize(static_cast<size_t>(numSeqs * H * W));
  logical.latent.resize(static_cast<size_t>(numSeqs));

  // ---- Layouts. ----
  const int64_t qStrideBatch = H * W + kQBatchPadding, qStrideHead = W;
  data.oStrideBatch = H * L + kOutBatchPadding;
  data.oStrideHead = L;
  const ScalarKind cacheKind = compiler::kvCachePointerKind(config.kvCacheFormat, dtype);
  const int64_t kvStrideToken = W, kvStrideBlock = bs * W;
  std::vector<int> blocksPerSeq;
  int usedBlocks = 0;
  for (int seqLen : batch.seqLens) {
    blocksPerSeq.push_back(static_cast<int>((seqLen + bs - 1) / bs));
    usedBlocks += blocksPerSeq.back();
  }
  const int numBlocks = usedBlocks + kSpareBlocks;
  const int64_t blockTableStride =
      *std::max_element(blocksPerSeq.begin(), blocksPerSeq.end()) + kSpareBlockTableColumns;

  // Block tables: sequences own a random permutation of the physical blocks.
  RandomStream tableRandom(batch.seed ^ 0x9E3779B97F4A7C15ull);
  std::vector<int> physical(static_cast<size_t>(numBlocks));
  for (int i = 0; i < numBlocks; ++i) physical[static_cast<size_t>(i)] = i;
  for (int i = numBlocks - 1; i > 0; --i)
    std::swap(physical[static_cast<size_t>(i)], physical[tableRandom.below(static_cast<uint64_t>(i + 1))]);
  std::vector<int32_t> blockTables(static_cast<size_t>(numSeqs * blockTableStride), kUnusedBlockEntry);
  size_t nextPhysical = 0;
  for (int b = 0; b < numSeqs; ++b)
    for (int k = 0; k < blocksPerSeq[static_cast<size_t>(b)]; ++k)
      blockTables[static_cast<size_t>(b * blockTableStride + k)] = physical[nextPhysical++];

  // Every cache byte is poison (NaN in the dtype; 0xFF is NaN in e4m3) until a
  // sequence's row is written, so reading a row beyond seq_len or a spare block shows.
  std::vector<uint8_t> cache = fp8 ? std::vector<uint8_t>(static_cast<size_t>(numBlocks * kvStrideBlock), 0xFF)
                                   : poisonedBuffer(dtype, static_cast<size_t>(numBlocks * kvStrideBlock));
  std::vector<uint8_t> q = poisonedBuffer(dtype, static_cast<size_t>(numSeqs * qStrideBatch));
  // Each sequence's data comes from its own stream; only the sequences the check
  // samples keep their logical latent rows (a benchmark batch is gigabytes).
  support::parallelFor(numSeqs, [&](int b) {
    RandomStream random(batch.seed * 0x100000001B3ull + static_cast<uint64_t>(b) + 1);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < W; ++d) {
        const double value = nonzeroValue(random, dtype);
        logical.q[static_cast<size_t>((b * H + h) * W + d)] = value;
        setFloat(q, dtype, static_cast<size_t>(b * qStrideBatch + h * qStrideHead + d), value);
      }
    const bool keep = checkedSequence(b, numSeqs, batch.checkStride);
    const int64_t seqLen = batch.seqLens[static_cast<size_t>(b)];
    std::vector<double>& latent = logical.latent[static_cast<size_t>(b)];
    if (keep) latent.resize(static_cast<size_t>(seqLen * W));
    for (int64_t j = 0; j < seqLen; ++j) {
      const int64_t block = blockTables[static_cast<size_t>(b * blockTableStride + j / bs)];
      const size_t row = static_cast<size_t>(block * kvStrideBlock + (j % bs) * kvStrideToken);
      for (int64_t d = 0; d < W; ++d) {
        double value = nonzeroValue(random, dtype);
        if (fp8) {
          const double quantized =
              ir::roundToFloatKind(std::clamp(value / kFp8LatentScale, -448.0, 448.0), ScalarKind::F8E4M3);
          cache[row + static_cast<size_t>(d)] = static_cast<uint8_t>(ir::encodeFloat(quantized, ScalarKind::F8E4M3));
          value = quantized * static_cast<double>(kFp8LatentScale);
        } else {
          setFloat(cache, dtype, row + static_cast<size_t>(d), value);
        }
        if (keep) latent[static_cast<size_t>(j * W + d)] = value;
      }
    }
  });

  auto bytesOf = [](const void* p, size_t n) {
    const auto* bytes = static_cast<const uint8_t*>(p);
    return std::vector<uint8_t>(bytes, bytes + n);
  };
  std::vector<int32_t> seqLens(batch.seqLens.begin(), batch.seqLens.end());
  auto& buffers = problem->buffers_;
  buffers = {
      {"out", poisonedBuffer(dtype, static_cast<size_t>(numSeqs * data.oStrideBatch)), true},
      {"q", std::move(q), false},
      {"kv_cache", std::move(cache), false},
      {"block_tables", bytesOf(blockTables.data(), blockTables.size() * sizeof(int32_t)), false},
      {"seq_lens", bytesOf(seqLens.data(), seqLens.size() * sizeof(int32_t)), false},
  };
  if (fp8) buffers.push_back({"kv_scale", bytesOf(&kFp8LatentScale, sizeof kFp8LatentScale), false});
  if (config.outputLse) {
    // Both kernels take the LSE's two strides: 2D runs check vLLM's [B, H] layout
    // (padded batch stride), split-KV runs the merge kernels' [H, B] (padded head
    // stride).
    data.lseStrideBatch = config.splitKv ? 1 : H + kLseBatchPadding;
    data.lseStrideHead = config.splitKv ? numSeqs + kLseHeadPadding : 1;
    data.lseElements = config.splitKv ? H * data.lseStrideHead : numSeqs * data.lseStrideBatch;
    data.lseBuffer = static_cast<int>(buffers.size());
    buffers.push_back({"lse", poisonedBuffer(ScalarKind::F32, static_cast<size_t>(data.lseElements)), true});
  }
  const size_t inputPointers = buffers.size();

  Launch stage;
  stage.gridX = numSeqs * config.headBlocks();
  stage.scalars = {kSoftmaxScale, qStrideBatch, qStrideHead};
  if (!config.splitKv) stage.scalars.insert(stage.scalars.end(), {data.oStrideBatch, data.oStrideHead});
  stage.scalars.insert(stage.scalars.end(), {blockTableStride, kvStrideBlock, kvStrideToken});
  if (!config.splitKv) {
    for (size_t i = 0; i < inputPointers; ++i) stage.pointers.push_back(i);
    if (config.outputLse) stage.scalars.insert(stage.scalars.end(), {data.lseStrideBatch, data.lseStrideHead});
    problem->launches_ = {stage};
  } else {
    const int64_t maxSeqLen = *std::max_element(batch.seqLens.begin(), batch.seqLens.end());
    const int64_t tiles = (maxSeqLen + config.tileSize - 1) / config.tileSize;
    const int64_t numSegments = std::max<int64_t>(1, (tiles + batch.segmentTiles - 1) / batch.segmentTiles);
    stage.gridZ = numSegments;
    stage.scalars.insert(stage.scalars.end(), {numSegments, int64_t{batch.segmentTiles}});
    const int64_t rows = numSeqs * H * numSegments;
    const size_t segmOutput = buffers.size();
    buffers.push_back({"segm_output", poisonedBuffer(ScalarKind::F32, static_cast<size_t>(rows * L)), true});
    buffers.push_back({"segm_max", poisonedBuffer(ScalarKind::F32, static_cast<size_t>(rows)), true});
    buffers.push_back({"segm_expsum", poisonedBuffer(ScalarKind::F32, static_cast<size_t>(rows)), true});
    stage.pointers = {segmOutput, segmOutput + 1, segmOutput + 2};
    for (size_t i = 1; i < inputPointers; ++i)
      if (static_cast<int>(i) != data.lseBuffer) stage.pointers.push_back(i);
    Launch reduce;
    reduce.reduceSegments = true;
    reduce.pointers = {0, segmOutput, segmOutput + 1, segmOutput + 2};
    if (config.outputLse) reduce.pointers.push_back(static_cast<size_t>(data.lseBuffer));
    reduce.scalars = {numSegments, data.oStrideBatch, data.oStrideHead};
    if (config.outputLse) reduce.scalars.insert(reduce.scalars.end(), {data.lseStrideHead, data.lseStrideBatch});
    reduce.gridX = numSeqs;
    reduce.gridY = compiler::reduceSegmentsGridY(compiler::reduceSegmentsFor(data.config));
    problem->launches_ = {stage, reduce};
  }

  double keys = 0;
  for (int seqLen : batch.seqLens) keys += seqLen;
  const double dtypeBytes = static_cast<double>(elementBytes(dtype));
  problem->minimumBytes_ = dtypeBytes * static_cast<double>(numSeqs * H * (W + L)) +
                           keys * static_cast<double>(W) * static_cast<double>(elementBytes(cacheKind));
  problem->flops_ = 2.0 * static_cast<double>(H * (W + L)) * keys;
  return problem;
}

support::Expected<std::unique_ptr<ir::Kernel>> MlaDecodeProblem::buildKernel(const Launch& launch) const {
  if (launch.reduceSegments) return compiler::buildReduceSegments(compiler::reduceSegmentsFor(data_->config));
  return compiler::buildMlaDecode(data_->config);
}

void MlaDecodeProblem::check(const std::vector<Buffer>& after, AttentionRunResult& result) const {
  const Data& data = *data_;
  const ScalarKind dtype = data.config.dtype;
  const int64_t H = data.config.numHeads, L = data.config.kvLoraRank;
  result.tolerance = mlaTolerance(dtype, data.config.tf32Dots());
  result.outputStrideToken = data.oStrideBatch;
  result.maxAbsError = 0;
  result.maxRelError = 0;
  result.passed = false;
  const reference::MlaDecodeOutputs expected = reference::referenceMlaDecode(data.logical, data.checkStride);
  double maxAbsReference = 0;
  for (double x : expected.output)
    if (std::isfinite(x)) maxAbsReference = std::max(maxAbsReference, std::abs(x));
  const std::vector<uint8_t>& out = after[0].bytes;
  std::string worst;
  for (int64_t b = 0; b < data.numSeqs; ++b) {
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < L; ++d) {
        const double got = getFloat(out, dtype, static_cast<size_t>(b * data.oStrideBatch + h * data.oStrideHead + d));
        const double want = expected.output[static_cast<size_t>((b * H + h) * L + d)];
        if (!std::isfinite(got)) {
          std::ostringstream where;
          where << "non-finite output at sequence " << b << ", head " << h << ", dim " << d << ": got " << got;
          result.detail = where.str();
          result.maxAbsError = std::numeric_limits<double>::infinity();
          return;
        }
        if (std::isnan(want)) continue;  // outside the checked sample
        const double err = std::abs(got - want);
        result.maxRelError = std::max(result.maxRelError, err / (std::abs(want) + 1e-3 * maxAbsReference));
        if (err > result.maxAbsError || worst.empty()) {
          result.maxAbsError = err;
          std::ostringstream where;
          where << "largest error at sequence " << b << ", head " << h << ", dim " << d << ": got " << got
                << ", expected " << want;
          worst = where.str();
        }
      }
    for (int64_t i = H * L; i < data.oStrideBatch; ++i)
      if (getBits(out, dtype, static_cast<size_t>(b * data.oStrideBatch + i)) != poisonBits(dtype)) {
        result.detail = "the kernel wrote padding after sequence " + std::to_string(b) + "'s output rows";
        return;
      }
  }
  result.detail = worst;
  result.passed = result.maxAbsError <= result.tolerance;
  if (data.lseBuffer < 0) return;
  // f32 throughout (scores, exp2, the sum, lg2): a few ulps relative to the
  // magnitude plus the approximate exp2/lg2.
  const std::vector<uint8_t>& lse = after[static_cast<size_t>(data.lseBuffer)].bytes;
  std::vector<bool> written(static_cast<size_t>(data.lseElements), false);
  for (int64_t b = 0; b < data.numSeqs; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const size_t index = static_cast<size_t>(b * data.lseStrideBatch + h * data.lseStrideHead);
      written[index] = true;
      const double got = getFloat(lse, ScalarKind::F32, index);
      const double want = expected.lse[static_cast<size_t>(b * H + h)];
      if (std::isnan(want)) continue;
      const bool ok = std::isinf(want) ? got == want : std::abs(got - want) <= 2e-4 * (1.0 + std::abs(want));
      if (!ok) {
        std::ostringstream text;
        text << "lse of sequence " << b << ", head " << h << ": got " << got << ", expected " << want;
        result.detail = text.str();
        result.passed = false;
        return;
      }
    }
  for (size_t i = 0; i < written.size(); ++i)
    if (!written[i] && getBits(lse, ScalarKind::F32, i) != poisonBits(ScalarKind::F32)) {
      result.detail = "the kernel wrote lse padding at element " + std::to_string(i);
      result.passed = false;
      return;
    }
}

support::Expected<AttentionRunResult> runMlaDecodeInterpreted(const compiler::MlaDecodeConfig& config,
                                                              const MlaDecodeBatch& batch, bool afterPasses) {
  auto problem = MlaDecodeProblem::create(config, batch);
  if (!problem) return problem.status();
  AttentionRunResult result;
  std::vector<MlaDecodeProblem::Buffer> buffers = (*problem)->buffers();
  ir::InterpreterMemory memory;
  std::vector<uint64_t> addresses;
  for (auto& buffer : buffers) addresses.push_back(memory.map(buffer.bytes.data(), buffer.bytes.size(), buffer.label));
  const auto& launches = (*problem)->launches();
  result.gridX = launches[0].gridX;
  result.gridY = launches[0].gridY;
  for (const auto& launch : launches) {
    const auto buildStart = std::chrono::steady_clock::now();
    auto kernel = (*problem)->buildKernel(launch);
    if (!kernel) return kernel.status();
    if (afterPasses) {
      compiler::PipelineOptions pipeline;
      pipeline.pass.numWarps = static_cast<int>(ir::kernelAttribute(**kernel, ir::KernelAttribute::NumWarps));
      if (support::Status s = compiler::runPipeline(**kernel, pipeline, nullptr); !s) return s;
    }
    result.buildMs += millisecondsSince(buildStart);
    std::vector<ir::KernelArgument> args;
    for (size_t index : launch.pointers) args.push_back(ir::PointerArg{addresses[index]});
    for (const auto& scalar : launch.scalars) std::visit([&](auto v) { args.push_back(v); }, scalar);
    const auto runStart = std::chrono::steady_clock::now();
    if (support::Status s = ir::interpretKernel(**kernel, {launch.gridX, launch.gridY, launch.gridZ}, args, memory); !s)
      return s;
    result.runMs += millisecondsSince(runStart);
  }
  (*problem)->check(buffers, result);
  result.output = std::move(buffers[0].bytes);
  return result;
}

support::Expected<AttentionRunResult> runMlaDecodeInterpreted(const compiler::MlaDecodeConfig& config,
                                                              const compiler::BatchShape& shape) {
  auto batch = MlaDecodeBatch::fromShape(shape);
  if (!batch) return batch.status();
  return runMlaDecodeInterpreted(config, *batch);
}

support::Expected<GpuRunResult> runMlaDecodeGpu(const compiler::MlaDecodeConfig& config,
                                                const compiler::BatchShape& shape, const GpuRunOptions& options) {
  auto batch = MlaDecodeBatch::fromShape(shape);
  if (!batch) return batch.status();
  return runMlaDecodeGpu(config, *batch, options);
}

}  // namespace attnjit::validation
