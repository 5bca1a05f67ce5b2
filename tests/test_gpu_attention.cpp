// [gpu] Every shipped spec's variants, JIT-compiled for the local GPU and run on
// random data (output poisoned with NaN first) against the float64 reference.
// Skips with a visible message where no CUDA driver or GPU is present.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <unistd.h>

#include "tests/test_attention_checks.h"
#include "tests/test_tools.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/driver/DeviceTarget.h"
#include "compiler/validation/AttentionGpu.h"
#include "compiler/driver/Jit.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/validation/VariantRuns.h"
#include "runtime/DiskCache.h"
#include "runtime/KernelCache.h"
#include "compiler/spec/Spec.h"
#include "ir/Numeric.h"
#include "runtime/Driver.h"
#include "tests/test_op_params.h"
#include "tests/test_paths.h"

using namespace attnjit;

namespace {
void checkOnGpu(const compiler::UnifiedAttentionConfig& config, const compiler::BatchShape& shape) {
  INFO(config.kernelName() << " on " << shape.str());
  auto result = validation::runUnifiedAttentionGpu(config, shape, validation::GpuRunOptions{});
  INFO((result.isOk() ? result->check.detail : result.diagnostic().str()));
  REQUIRE(result.isOk());
  CHECK(result->check.passed);
  CHECK(result->check.maxAbsError <= result->check.tolerance);
}

// Producer warps change only who copies and how the slots are handed over: a
// warp-specialized kernel must write what the same tiling without them writes,
// bit for bit. On a difference: how many elements, where (head-dim blocks of
// 16, sequences) and the first few, which says more than the largest error.
// Where the kernel of `specialized` writes other bits than that of `plain` on
// `shape` (empty when none), or why either did not run.
std::string differencesBetween(const compiler::UnifiedAttentionConfig& specialized,
                               const compiler::UnifiedAttentionConfig& plain, const compiler::BatchShape& shape) {
  auto a = validation::runUnifiedAttentionGpu(specialized, shape, validation::GpuRunOptions{});
  auto b = validation::runUnifiedAttentionGpu(plain, shape, validation::GpuRunOptions{});
  if (!a.isOk()) return a.diagnostic().str();
  if (!b.isOk()) return b.diagnostic().str();
  const int headSize = specialized.valueHeadSize ? specialized.valueHeadSize : specialized.headSize;
  const int64_t stride = a->check.outputStrideToken;
  const size_t bytes = static_cast<size_t>(ir::storageBytes(specialized.dtype));
  auto element = [&](const std::vector<uint8_t>& out, int64_t index) {
    uint32_t bits = 0;
    std::memcpy(&bits, &out[static_cast<size_t>(index) * bytes], bytes);
    return ir::decodeFloat(bits, specialized.dtype);
  };
  int64_t differing = 0, token = 0;
  std::map<int, int64_t> byDimBlock, bySequence;
  std::ostringstream first;
  for (size_t sequence = 0; sequence < shape.queryLens.size(); ++sequence)
    for (int64_t t = 0; t < shape.queryLens[sequence]; ++t, ++token)
      for (int h = 0; h < specialized.numQueryHeads; ++h)
        for (int d = 0; d < headSize; ++d) {
          const int64_t index = token * stride + static_cast<int64_t>(h) * headSize + d;
          const double x = element(a->check.output, index), y = element(b->check.output, index);
          if (x == y || (std::isnan(x) && std::isnan(y))) continue;
          if (differing++ < 6)
            first << " (token " << token << " head " << h << " dim " << d << ": " << x << " vs " << y << ")";
          ++byDimBlock[d / 16];
          ++bySequence[static_cast<int>(sequence)];
        }
  if (differing == 0) return a->check.passed ? std::string() : "the kernel's output fails its float64 check";
  std::ostringstream text;
  text << differing << " elements differ from " << plain.kernelName() << "; by head-dim block of 16:";
  for (auto [block, count] : byDimBlock) text << " " << block << ":" << count;
  text << "; by sequence:";
  for (auto [sequence, count] : bySequence) text << " " << sequence << ":" << count;
  text << "; first:" << first.str();
  return text.str();
}

std::string differencesFromUnspecialized(const compiler::UnifiedAttentionConfig& specialized,
                                         const compiler::BatchShape& shape) {
  compiler::UnifiedAttentionConfig plain = specialized;
  plain.warpSpecialize = false;
  plain.pingPong = false;
  plain.softmaxTurns = false;
  plain.producerRegisters = 0;
  plain.tensorMemoryAccelerator = false;
  return differencesBetween(specialized, plain, shape);
}

// The producer-warp float64 cases' batch: 2800 keys are 44 fills of each
// 64-key slot, and the short rows leave a loop empty; every fifth row is
// checked against float64 (dozens of kernels in minutes).
compiler::BatchShape producerWarpBatch() {
  compiler::BatchShape mixed;
  mixed.queryLens = {150, 37, 1, 70, 129, 700};
  mixed.contextLens = {0, 91, 300, 5, 64, 2100};
  mixed.seed = 37;
  mixed.checkStride = 5;
  return mixed;
}

// The batch of the bit-for-bit comparisons: prefill, chunked prefill and a
// decode row; every 31st row is checked against float64 (the comparison
// matters more here than the reference).
compiler::BatchShape bitComparisonBatch(uint64_t seed) {
  compiler::BatchShape mixed;
  mixed.queryLens = {150, 37, 1, 70, 129, 300};
  mixed.contextLens = {0, 91, 300, 5, 64, 700};
  mixed.seed = seed;
  mixed.checkStride = 31;
  return mixed;
}

compiler::UnifiedAttentionConfig producerWarpTiling() {
  compiler::UnifiedAttentionConfig c = tests::hopperPrefillTiling();
  c.warpSpecialize = true;
  return c;
}
}  // namespace

TEST_CASE("every shipped spec runs correctly on the GPU", "[gpu]") {
  if (!tests::gpuPresent()) return;
  int variants = 0;
  for (const auto& entry : std::filesystem::directory_iterator(attnjit::tests::sourceDir() + "/specs")) {
    if (entry.path().extension() != ".yaml") continue;
    auto spec = compiler::loadSpecFile(entry.path().string());
    REQUIRE(spec.isOk());
    for (const auto& variant : spec->variants) {
      INFO(variant.name << " on " << spec->shape.str());
      auto result = validation::runVariantGpu(variant, spec->shape, validation::GpuRunOptions{});
      INFO((result.isOk() ? result->check.detail : result.diagnostic().str()));
      REQUIRE(result.isOk());
      CHECK(result->check.passed);
      ++variants;
    }
  }
  WARN("checked " << variants << " variants on the GPU");
  CHECK(variants >= 6);
}

TEST_CASE("GPU attention over cache blocks of 1, 5 and 24 tokens, decode and prefill tilings", "[gpu]") {
  if (!tests::gpuPresent()) return;
  compiler::BatchShape mixed;
  mixed.queryLens = {1, 37, 1, 130, 5};
  mixed.contextLens = {77, 0, 300, 61, 1};
  mixed.seed = 17;
  for (int blockSize : {1, 5, 24})
    for (int blockMRows : {0, 128}) {
      compiler::UnifiedAttentionConfig config;
      config.numQueryHeads = 8;
      config.numKvHeads = 2;
      config.blockSize = blockSize;
      config.blockMRows = blockMRows;
      config.tileSize = blockMRows ? 64 : 32;
      config.numWarps = blockMRows ? 8 : 4;
      checkOnGpu(config, mixed);
    }
}

TEST_CASE("GPU attention with one-sided windows, fp8 queries and head sizes 24 to 1024", "[gpu]") {
  if (!tests::gpuPresent()) return;
  compiler::BatchShape mixed;
  mixed.queryLens = {1, 37, 1, 130, 5};
  mixed.contextLens = {77, 0, 300, 61, 1};
  mixed.seed = 19;
  const std::pair<int, int> windows[] = {{33, -1}, {0, 1}, {5, 70}};
  for (const auto& [left, right] : windows)
    for (int blockMRows : {0, 128}) {
      compiler::UnifiedAttentionConfig config;
      config.numQueryHeads = 8;
      config.numKvHeads = 2;
      config.causal = false;
      config.slidingWindow = left;
      config.slidingWindowRight = right;
      config.blockMRows = blockMRows;
      config.tileSize = blockMRows ? 64 : 32;
      config.numWarps = blockMRows ? 8 : 4;
      checkOnGpu(config, mixed);
    }
  for (auto format : {compiler::KvCacheFormat::Fp8E4M3, compiler::KvCacheFormat::Auto}) {
    compiler::UnifiedAttentionConfig config;  // fp8 queries
    config.numQueryHeads = 8;
    config.numKvHeads = 2;
    config.queryFp8 = true;
    config.kvCacheFormat = format;
    checkOnGpu(config, mixed);
  }
  const std::pair<int, int> heads[] = {{24, 0}, {512, 0}, {576, 512}, {1024, 0}};
  for (const auto& [headSize, valueHeadSize] : heads) {
    compiler::UnifiedAttentionConfig config;
    config.numQueryHeads = 8;
    config.numKvHeads = 2;
    config.headSize = headSize;
    config.valueHeadSize = valueHeadSize;
    config.tileSize = headSize > 256 ? 16 : 32;
    checkOnGpu(config, mixed);
  }
}

TEST_CASE("GPU attention across dtypes, GQA ratios, head sizes and ragged batches", "[gpu]") {
  if (!tests::gpuPresent()) return;
  compiler::BatchShape mixed;
  mixed.queryLens = {1, 37, 1, 130, 5};
  mixed.contextLens = {77, 0, 300, 61, 1};
  mixed.seed = 11;
  for (auto dtype : {ir::ScalarKind::BF16, ir::ScalarKind::F16, ir::ScalarKind::F32})
    for (bool causal : {true, false})
      for (auto [hq, hkv] : {std::pair{8, 8}, std::pair{16, 4}, std::pair{32, 4}})
        for (int headSize : {64, 80, 128}) {
          compiler::UnifiedAttentionConfig c;
          c.dtype = dtype;
          c.causal = causal;
          c.numQueryHeads = hq;
          c.numKvHeads = hkv;
          c.headSize = headSize;
          c.blockSize = headSize == 80 ? 32 : 16;
          checkOnGpu(c, mixed);
        }
}

TEST_CASE("GPU prefill tilings: Q in shared memory, 4 warps of 32 rows and 8 of 16", "[gpu]") {
  if (!tests::gpuPresent()) return;
  // Fresh prefills, a chunked prefill after cached context and decode rows in
  // one batch, none a multiple of the 32-token query blocks.
  compiler::BatchShape mixed;
  mixed.queryLens = {150, 37, 1, 70};
  mixed.contextLens = {0, 91, 300, 5};
  mixed.seed = 23;
  for (auto dtype : {ir::ScalarKind::BF16, ir::ScalarKind::F16})
    for (bool causal : {true, false})
      for (int headSize : {64, 96, 128})
        for (int warps : {4, 8}) {
          compiler::UnifiedAttentionConfig c;
          c.dtype = dtype;
          c.causal = causal;
          c.headSize = headSize;
          c.blockMRows = 128;
          c.numWarps = warps;
          c.qInShared = true;
          checkOnGpu(c, mixed);
        }
  // DiffKV 192/128 (QK wider than the accumulator's V): both tilings with Q in shared memory.
  for (int warps : {4, 8}) {
    compiler::UnifiedAttentionConfig c;
    c.headSize = 192;
    c.valueHeadSize = 128;
    c.blockMRows = 128;
    c.numWarps = warps;
    c.qInShared = true;
    checkOnGpu(c, mixed);
  }
  compiler::UnifiedAttentionConfig wideTiles;  // 64-key tiles: two K reads per Q read
  wideTiles.blockMRows = 128;
  wideTiles.numWarps = 4;
  wideTiles.qInShared = true;
  wideTiles.tileSize = 64;
  checkOnGpu(wideTiles, mixed);
  // Scores growing along the keys: 4 warps of 32 rows rescale lazily, and their
  // threads branch around the accumulator's rescale on some tiles but not on
  // others (a thread whose rows' references moved multiplies, the rest skip).
  compiler::BatchShape growing = mixed;
  growing.keyRamp = 0.4;
  for (bool causal : {true, false})
    for (int warps : {4, 8}) {
      compiler::UnifiedAttentionConfig c;
      c.causal = causal;
      c.blockMRows = 128;
      c.numWarps = warps;
      c.qInShared = true;
      checkOnGpu(c, growing);
    }
}

TEST_CASE("GPU prefill on warpgroup MMAs: the op's Hopper tiling across head sizes, GQA and features", "[gpu]") {
  if (!tests::gpuPresent()) return;
  // 8 warps of 16 rows, 64-key tiles, Q in registers: both dots run as wgmma on
  // sm_90a (codegen/lower/WarpgroupMma.cpp); elsewhere the same kernels take
  // mma.sync. Fresh and chunked prefills after context, lengths that are not
  // multiples of any tile, and decode rows in one batch.
  compiler::BatchShape mixed;
  mixed.queryLens = {150, 37, 1, 70, 129};
  mixed.contextLens = {0, 91, 300, 5, 64};
  mixed.seed = 31;
  for (bool causal : {true, false})
    for (auto [hq, hkv] : {std::pair{8, 8}, std::pair{32, 8}, std::pair{32, 2}})
      for (int headSize : {64, 80, 96, 128, 256}) {
        compiler::UnifiedAttentionConfig c = tests::hopperPrefillTiling();
        c.causal = causal;
        c.numQueryHeads = hq;
        c.numKvHeads = hkv;
        c.headSize = headSize;
        checkOnGpu(c, mixed);
      }
  compiler::UnifiedAttentionConfig diffKv = tests::hopperPrefillTiling();
  diffKv.headSize = 192;
  diffKv.valueHeadSize = 128;
  checkOnGpu(diffKv, mixed);
  // The score modifiers and outputs of the family, one at a time.
  std::vector<compiler::UnifiedAttentionConfig> features(8, tests::hopperPrefillTiling());
  features[0].slidingWindow = 64;
  features[1].softcap = 30.0;
  features[2].alibi = true;
  features[3].sinks = true;
  features[4].outputLse = true;
  features[5].perSequenceCausal = true;
  features[6].dtype = ir::ScalarKind::F16;
  features[7].alibi = true;
  features[7].alibiSqrt = true;
  for (const auto& c : features) checkOnGpu(c, mixed);
  // Quantized caches, dequantized in registers: wgmma reads each K and V tile
  // from one store of the dequantized tile (codegen/lower/SharedConversions.cpp).
  for (compiler::KvCacheFormat format :
       {compiler::KvCacheFormat::Fp8E4M3, compiler::KvCacheFormat::Fp8E5M2, compiler::KvCacheFormat::Int8PerTokenHead,
        compiler::KvCacheFormat::Fp8PerTokenHead, compiler::KvCacheFormat::Int4PerTokenHead})
    for (int headSize : {64, 128}) {
      compiler::UnifiedAttentionConfig c = tests::hopperPrefillTiling();
      c.kvCacheFormat = format;
      c.headSize = headSize;
      c.causal = headSize == 128;
      checkOnGpu(c, mixed);
    }
  // Where the device is sm_90a these kernels did run on wgmma.
  auto target = compiler::deviceTarget(0);
  REQUIRE(target.isOk());
  if (*target == "sm_90a") {
    for (compiler::KvCacheFormat format : {compiler::KvCacheFormat::Auto, compiler::KvCacheFormat::Int8PerTokenHead}) {
      compiler::UnifiedAttentionConfig c = tests::hopperPrefillTiling();
      c.kvCacheFormat = format;
      auto kernel = compiler::buildUnifiedAttention(c);
      REQUIRE(kernel.isOk());
      compiler::CompileOptions options;
      options.target = *target;
      auto compiled = compiler::compileKernel(**kernel, options);
      REQUIRE(compiled.isOk());
      CHECK(compiled->ptx.find("wgmma.mma_async") != std::string::npos);
    }
  } else {
    WARN("device 0 is " << *target << ": the wgmma path is not exercised here");
  }
}

TEST_CASE("GPU prefill: the op's bidirectional tiling (128-key tiles, producer warps) across GQA and features",
          "[gpu]") {
  if (!tests::gpuPresent()) return;
  // What the op picks for bidirectional prefill on warpgroup-MMA devices (D=128,
  // 16-bit cache): 128-key tiles, Q in shared memory, producer warps. Taken from
  // the op's own choice so that the test follows the rule.
  ops::PagedAttentionParams call = tests::validPagedAttentionParams();
  call.causal = false;
  call.numTokens = 1200;
  call.maxQueryLen = 700;
  const compiler::UnifiedAttentionConfig chosen = ops::selectPagedAttentionVariant(call);
  INFO(chosen.kernelName());
  if (compiler::opDeviceFacts().warpgroupMma) {
    CHECK(chosen.tileSize == 128);
    CHECK(chosen.warpSpecialize);
  }
  compiler::BatchShape mixed;
  mixed.queryLens = {150, 37, 1, 70, 129, 700};
  mixed.contextLens = {0, 91, 300, 5, 64, 2100};
  mixed.seed = 41;
  mixed.checkStride = 5;
  std::vector<compiler::UnifiedAttentionConfig> cases;
  for (auto [hq, hkv] : {std::pair{32, 8}, std::pair{8, 8}, std::pair{32, 2}}) {
    compiler::UnifiedAttentionConfig c = chosen;
    c.numQueryHeads = hq;
    c.numKvHeads = hkv;
    cases.push_back(c);
  }
  std::vector<compiler::UnifiedAttentionConfig> features(9, chosen);
  features[0].slidingWindow = 200;
  features[1].slidingWindowRight = 50;  // one-sided extents
  features[1].slidingWindow = 300;
  features[2].softcap = 30.0;
  features[3].alibi = true;
  features[4].sinks = true;
  features[4].outputLse = true;
  features[5].dtype = ir::ScalarKind::F16;
  features[6].blockSize = 32;
  // Per-sequence flags and fp8 queries on the same 128-key producer tiling.
  features[7].perSequenceCausal = true;
  features[8].queryFp8 = true;
  cases.insert(cases.end(), features.begin(), features.end());
  for (const auto& c : cases) checkOnGpu(c, mixed);
}

// Producer warps must not change a result: the warpgroup MMAs read slots the
// producers filled, at offsets that keep the 128-byte swizzle on the 1024-byte
// grid the hardware applies (docs/architecture.md, "Producer warps").
TEST_CASE("GPU prefill with producer warps (warp_specialize) agrees with float64", "[gpu]") {
  if (!tests::gpuPresent()) return;
  // codegen/lower/WarpSpecialization.cpp: producer warps copy K/V tiles and hand
  // slots to the compute warps through mbarriers. A protocol error shows as a
  // wrong result (a slot read before it is full or after it is refilled) or a
  // hang (the shard timeout).
  const compiler::BatchShape mixed = producerWarpBatch();
  const auto specialized = producerWarpTiling;
  for (bool causal : {true, false})
    for (auto [hq, hkv] : {std::pair{32, 8}, std::pair{8, 8}})
      for (int headSize : {64, 96, 128}) {
        compiler::UnifiedAttentionConfig c = specialized();
        c.causal = causal;
        c.numQueryHeads = hq;
        c.numKvHeads = hkv;
        c.headSize = headSize;
        checkOnGpu(c, mixed);
      }
  std::vector<compiler::UnifiedAttentionConfig> others(9, specialized());
  others[0].headSize = 192;  // DiffKV: three buffers a loop
  others[0].valueHeadSize = 128;
  others[1].kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  others[2].kvCacheFormat = compiler::KvCacheFormat::Int8PerTokenHead;
  others[3].kvCacheFormat = compiler::KvCacheFormat::Int4PerTokenHead;
  others[4].qInShared = true;
  others[4].tileSize = 32;
  others[5].slidingWindow = 200;  // windows skip tiles: loops start past 0
  others[6].sinks = true;
  others[6].outputLse = true;
  others[7].perSequenceCausal = true;  // the op's tiling for per-sequence flags
  others[8].queryFp8 = true;
  for (const auto& c : others) checkOnGpu(c, mixed);
}

// The producer schedules beyond the plain one, on the same batch: a case of
// its own so that the GPU shards run it beside the one above (each takes
// over a minute).
TEST_CASE("GPU producer-warp schedules (ping-pong, 3-4 slots, 128-key tiles) agree with float64", "[gpu]") {
  if (!tests::gpuPresent()) return;
  const compiler::BatchShape mixed = producerWarpBatch();
  const auto specialized = producerWarpTiling;
  // Ping-pong: the two compute warpgroups take turns issuing their MMAs (a
  // turn handed over wrongly hangs), also with P·V one tile late.
  for (bool causal : {true, false})
    for (bool overlapSoftmax : {false, true}) {
      compiler::UnifiedAttentionConfig c = specialized();
      c.pingPong = true;
      c.causal = causal;
      c.overlapSoftmax = overlapSoftmax;
      checkOnGpu(c, mixed);
    }
  // Three and four slots: the producers run up to three tiles ahead.
  for (int stages : {3, 4}) {
    compiler::UnifiedAttentionConfig c = specialized();
    c.numStages = stages;
    c.pingPong = stages == 4;
    checkOnGpu(c, mixed);
  }
  // 128-key tiles (the op's tuner measures them with producer warps).
  for (int stages : {2, 3}) {
    compiler::UnifiedAttentionConfig c = specialized();
    c.tileSize = 128;
    c.pingPong = true;
    c.numStages = stages;
    checkOnGpu(c, mixed);
  }
  compiler::UnifiedAttentionConfig pingPongFp8 = specialized();
  pingPongFp8.pingPong = true;
  pingPongFp8.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  checkOnGpu(pingPongFp8, mixed);
  compiler::UnifiedAttentionConfig decode;  // 4 compute warps, mma.sync, no register moves
  decode.tileSize = 64;
  decode.warpSpecialize = true;
  compiler::BatchShape decodeRows;
  decodeRows.queryLens = {1, 1, 1, 1, 1};
  decodeRows.contextLens = {4095, 17, 0, 1000, 63};
  decodeRows.seed = 41;
  checkOnGpu(decode, decodeRows);
}

// Bit for bit: the compute warps' arithmetic is the unspecialized kernel's,
// only who copies the tiles and how the slots are handed over differ. A wgmma
// operand off the swizzle grid shows here as most elements differing while the
// slots hold the right bytes.
TEST_CASE("GPU producer-warp kernels write what the same tiling without them writes", "[gpu]") {
  if (!tests::gpuPresent()) return;
  const compiler::BatchShape mixed = bitComparisonBatch(37);
  std::vector<compiler::UnifiedAttentionConfig> configs;
  for (bool causal : {true, false})
    for (int headSize : {64, 128}) {
      compiler::UnifiedAttentionConfig c = tests::hopperPrefillTiling();
      c.warpSpecialize = true;
      c.causal = causal;
      c.headSize = headSize;
      configs.push_back(c);
    }
  // Softmax turns on the op's 64- and 128-key tilings: the compute warpgroups
  // take turns running their softmax (a turn handed over wrongly hangs); the
  // arithmetic is the same.
  for (bool causal : {true, false})
    for (int tileSize : {64, 128}) {
      compiler::UnifiedAttentionConfig c = tests::hopperPrefillTiling();
      c.warpSpecialize = true;
      c.softmaxTurns = true;
      c.causal = causal;
      c.tileSize = tileSize;
      c.qInShared = tileSize == 128;
      configs.push_back(c);
    }
  // The 128-key tilings with the producers at 104 registers (the compute
  // warps at 200): only the split moves.
  for (bool causal : {true, false}) {
    compiler::UnifiedAttentionConfig c = tests::hopperPrefillTiling();
    c.warpSpecialize = true;
    c.causal = causal;
    c.tileSize = 128;
    c.qInShared = true;
    c.producerRegisters = 104;
    configs.push_back(c);
  }
  // fp8 K and V cast by the producers on the way (AsyncBuffer::castOnCopy):
  // the same values the compute warps' casts give.
  for (bool causal : {true, false}) {
    compiler::UnifiedAttentionConfig c = tests::hopperPrefillTiling();
    c.warpSpecialize = true;
    c.causal = causal;
    c.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
    configs.push_back(c);
  }
  compiler::UnifiedAttentionConfig decode;
  decode.tileSize = 64;
  decode.warpSpecialize = true;
  configs.push_back(decode);
  for (const auto& c : configs) {
    INFO(c.kernelName() << " on " << mixed.str());
    const std::string differences = differencesFromUnspecialized(c, mixed);
    INFO(differences);
    CHECK(differences.empty());
  }
}

// prefetch_scores issues each tile's Q·Kᵀ an iteration early and waits for it
// at the loop's end (a wait miscounted reads an accumulator in flight); the
// arithmetic is the same, so the kernels write the same bits as without it,
// with and without producer warps, and with P·V one tile late beside it.
TEST_CASE("GPU prefetch_scores kernels write what the same tiling without it writes", "[gpu]") {
  if (!tests::gpuPresent()) return;
  const compiler::BatchShape mixed = bitComparisonBatch(43);
  std::vector<compiler::UnifiedAttentionConfig> configs;
  for (bool causal : {true, false})
    for (bool producers : {false, true})
      for (bool qInShared : {false, true}) {
        compiler::UnifiedAttentionConfig c = tests::hopperPrefillTiling();
        c.causal = causal;
        c.warpSpecialize = producers;
        c.qInShared = qInShared;
        configs.push_back(c);
      }
  compiler::UnifiedAttentionConfig overlapped = producerWarpTiling();
  overlapped.qInShared = overlapped.overlapSoftmax = true;
  overlapped.producerRegisters = 96;
  configs.push_back(overlapped);
  compiler::UnifiedAttentionConfig fp8 = producerWarpTiling();
  fp8.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  configs.push_back(fp8);
  compiler::UnifiedAttentionConfig diffKv = producerWarpTiling();
  diffKv.headSize = 192;
  diffKv.valueHeadSize = 128;
  configs.push_back(diffKv);
  compiler::UnifiedAttentionConfig pingPong = producerWarpTiling();
  pingPong.pingPong = true;
  configs.push_back(pingPong);
  compiler::UnifiedAttentionConfig decode;  // mma.sync
  decode.tileSize = 64;
  configs.push_back(decode);
  for (const auto& plain : configs) {
    compiler::UnifiedAttentionConfig prefetched = plain;
    prefetched.prefetchScores = true;
    INFO(prefetched.kernelName() << " on " << mixed.str());
    const std::string differences = differencesBetween(prefetched, plain, mixed);
    INFO(differences);
    CHECK(differences.empty());
  }
}

// TMA copies (tma: true) fill the unmasked loop's slots with boxes of whole
// cache blocks where the producers gathered rows with cp.async: the same bytes
// land, so the kernels write the same bits (and pass their float64 check).
TEST_CASE("GPU TMA copies write what the cp.async producers write", "[gpu][tma]") {
  if (!tests::gpuPresent()) return;
  const compiler::BatchShape mixed = bitComparisonBatch(41);
  for (bool causal : {true, false})
    for (int headSize : {64, 128})
      for (int blockSize : {16, 32}) {
        compiler::UnifiedAttentionConfig plain = tests::hopperPrefillTiling();
        plain.warpSpecialize = true;
        plain.causal = causal;
        plain.headSize = headSize;
        plain.blockSize = blockSize;
        compiler::UnifiedAttentionConfig tma = plain;
        tma.tensorMemoryAccelerator = true;
        INFO(tma.kernelName() << " on " << mixed.str());
        const std::string differences = differencesBetween(tma, plain, mixed);
        INFO(differences);
        CHECK(differences.empty());
      }
}

// Persistent programs (persistent: true) compute each (query block, KV head)
// item as the plain kernel's program for it does, one SM each (programs 0) or a
// few programs with uneven shares: the same bits.
TEST_CASE("GPU persistent programs write what one program per item writes", "[gpu][persistent]") {
  if (!tests::gpuPresent()) return;
  compiler::BatchShape mixed;
  mixed.queryLens = {150, 37, 1, 70, 129, 300, 2000};
  mixed.contextLens = {0, 91, 300, 5, 64, 700, 33};
  mixed.seed = 43;
  mixed.checkStride = 31;
  for (bool causal : {true, false})
    for (bool producers : {false, true})
      for (int programs : {0, 7}) {
        compiler::UnifiedAttentionConfig plain = tests::hopperPrefillTiling();
        plain.causal = causal;
        plain.warpSpecialize = producers;
        compiler::UnifiedAttentionConfig persistent = plain;
        persistent.persistent = true;
        mixed.programs = programs;
        INFO(persistent.kernelName() << " on " << mixed.str());
        const std::string differences = differencesBetween(persistent, plain, mixed);
        INFO(differences);
        CHECK(differences.empty());
      }
}

TEST_CASE("the JIT compiles once, then serves memory and disk cache hits", "[gpu]") {
  if (!tests::gpuPresent()) return;
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("attnjit_jit_cache_" + std::to_string(getpid()));
  fs::remove_all(dir);
  compiler::UnifiedAttentionConfig config;
  config.numQueryHeads = 8;
  config.numKvHeads = 2;
  config.headSize = 64;
  compiler::KernelFactory factory = [&] { return compiler::buildUnifiedAttention(config); };
  compiler::CompileOptions options;
  auto target = compiler::localTarget();
  REQUIRE(target.isOk());
  options.target = *target;
  runtime::KernelCache cache(runtime::makeDriverKernelLoader(), runtime::DiskCache(dir), false);
  auto first = compiler::jitKernel(factory, options, cache);
  INFO((first.isOk() ? std::string() : first.diagnostic().str()));
  REQUIRE(first.isOk());
  CHECK(first->compiledNow);
  CHECK(first->numThreads == config.numWarps * 32);
  auto second = compiler::jitKernel(factory, options, cache);
  REQUIRE(second.isOk());
  CHECK_FALSE(second->compiledNow);
  CHECK(second->loaded == first->loaded);  // the same loaded module from memory
  runtime::KernelCache another(runtime::makeDriverKernelLoader(), runtime::DiskCache(dir), false);
  auto third = compiler::jitKernel(factory, options, another);
  REQUIRE(third.isOk());
  CHECK(third->fromDisk);
  CHECK(third->passesSkipped);  // the alias recorded by the first call gave the key
  CHECK(third->sharedMemoryBytes == first->sharedMemoryBytes);
  WARN("JIT: cold " << first->passesMs + first->lookupMs << " ms, memory hit " << second->passesMs + second->lookupMs
                    << " ms, disk hit " << third->passesMs + third->lookupMs << " ms");
  fs::remove_all(dir);
}
