// DiffKV attention (vLLM's TRITON_ATTN_DIFFKV): QK head size != V head size over
// the packed cache [num_blocks, block_size, Hkv, Dqk + Dv]. The unified kernel with
// UnifiedAttentionConfig::valueHeadSize, on the interpreter against the float64
// reference (head-size pairs, GQA, masks and modifiers, quantized caches, split-KV,
// batch invariance), the packed cache write, the op API's checks, ptxas over the
// shipped spec, and [gpu] runs of the same.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "compiler/validation/AttentionGpu.h"
#include "compiler/validation/AttentionProblem.h"
#include "compiler/validation/CacheWriteProblem.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/spec/Spec.h"
#include "compiler/kernels/CacheWrite.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "ir/Printer.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "tests/test_paths.h"
#include "tests/test_attention_checks.h"
#include "tests/test_tools.h"

using namespace attnjit;
using attnjit::validation::AttentionRunResult;
using compiler::BatchShape;
using compiler::KvCacheFormat;
using compiler::UnifiedAttentionConfig;
using ir::ScalarKind;
using attnjit::tests::mixedAttentionBatch;
using attnjit::tests::runAndCheck;

namespace {

struct HeadSizes {
  int qk, v;
};
// The required pairs, and equal sizes (still the packed layout) as the degenerate case.
const HeadSizes kPairs[] = {{192, 128}, {128, 64}, {256, 128}, {128, 128}};

UnifiedAttentionConfig diffkvConfig(HeadSizes sizes, ScalarKind dtype = ScalarKind::BF16, bool causal = true) {
  UnifiedAttentionConfig c;
  c.dtype = dtype;
  c.numQueryHeads = 8;
  c.numKvHeads = 2;  // GQA 4
  c.headSize = sizes.qk;
  c.valueHeadSize = sizes.v;
  c.blockSize = 16;
  c.causal = causal;
  return c;
}

std::vector<uint8_t> leadingRows(const AttentionRunResult& r, int tokens, ScalarKind dtype) {
  const size_t bytes = static_cast<size_t>(tokens) * static_cast<size_t>(r.outputStrideToken) *
                       static_cast<size_t>(ir::storageBits(dtype) / 8);
  REQUIRE(r.output.size() >= bytes);
  return std::vector<uint8_t>(r.output.begin(), r.output.begin() + static_cast<ptrdiff_t>(bytes));
}

}  // namespace

TEST_CASE("DiffKV: every head-size pair against the float64 reference", "[diffkv]") {
  for (const HeadSizes pair : kPairs)
    for (bool causal : {true, false})
      runAndCheck(diffkvConfig(pair, ScalarKind::BF16, causal), mixedAttentionBatch(31));
  // Other data types, and the pipelined, layout-assigned kernel.
  runAndCheck(diffkvConfig({192, 128}, ScalarKind::F16), mixedAttentionBatch(32), /*afterPasses=*/true);
  runAndCheck(diffkvConfig({128, 64}, ScalarKind::F32, false), mixedAttentionBatch(33));
  // MHA and a large GQA ratio (one token's 16 heads fill the query tile).
  UnifiedAttentionConfig mha = diffkvConfig({192, 128});
  mha.numQueryHeads = mha.numKvHeads = 3;
  runAndCheck(mha, mixedAttentionBatch(34));
  UnifiedAttentionConfig wide = diffkvConfig({128, 64});
  wide.numQueryHeads = 16;
  wide.numKvHeads = 1;
  runAndCheck(wide, mixedAttentionBatch(35), /*afterPasses=*/true);
  // Non-power-of-two value head size (padded and masked separately from Dqk), and
  // Dv > Dqk with Dqk = 64 + 32 in two exact Q·Kᵀ pieces.
  runAndCheck(diffkvConfig({128, 80}), mixedAttentionBatch(36));
  runAndCheck(diffkvConfig({96, 128}, ScalarKind::F16, false), mixedAttentionBatch(36), /*afterPasses=*/true);
}

TEST_CASE("DiffKV: window, softcap, sinks and ALiBi together, per-sequence causal, LSE", "[diffkv]") {
  for (bool causal : {true, false}) {
    UnifiedAttentionConfig c = diffkvConfig({192, 128}, ScalarKind::BF16, causal);
    c.slidingWindow = 37;
    c.softcap = 1.5;
    c.sinks = true;
    c.alibi = true;
    c.outputLse = true;
    runAndCheck(c, mixedAttentionBatch(37));
    runAndCheck(c, mixedAttentionBatch(38), /*afterPasses=*/true);
  }
  UnifiedAttentionConfig perSequence = diffkvConfig({256, 128});
  perSequence.perSequenceCausal = true;
  perSequence.outputLse = true;
  runAndCheck(perSequence, mixedAttentionBatch(39));
}

TEST_CASE("DiffKV: quantized caches in the packed layout", "[diffkv][quant]") {
  for (KvCacheFormat format : {KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2, KvCacheFormat::Int8PerTokenHead,
                               KvCacheFormat::Fp8PerTokenHead, KvCacheFormat::Int4PerTokenHead})
    for (const HeadSizes pair : {HeadSizes{192, 128}, HeadSizes{128, 64}}) {
      UnifiedAttentionConfig c = diffkvConfig(pair, ScalarKind::BF16);
      c.kvCacheFormat = format;
      runAndCheck(c, mixedAttentionBatch(40));
    }
  UnifiedAttentionConfig f16 = diffkvConfig({256, 128}, ScalarKind::F16, /*causal=*/false);
  f16.kvCacheFormat = KvCacheFormat::Fp8PerTokenHead;
  f16.sinks = true;
  runAndCheck(f16, mixedAttentionBatch(41), /*afterPasses=*/true);
}

TEST_CASE("DiffKV: split-KV with 1, 2, 8 and 16 segments, LSE checked", "[diffkv][splitkv]") {
  // The longest sequence has 500 keys: 16 tiles of 32, so segments of 16, 8, 2
  // and 1 tiles make 1, 2, 8 and 16 segments.
  BatchShape shape;
  shape.queryLens = {1, 3, 1, 19};
  shape.contextLens = {499, 200, 77, 0};
  shape.seed = 42;
  for (const auto& [segmentTiles, segments] : {std::pair{16, 1}, std::pair{8, 2}, std::pair{2, 8}, std::pair{1, 16}}) {
    shape.segmentTiles = segmentTiles;
    UnifiedAttentionConfig c = diffkvConfig({192, 128});
    c.splitKv = true;
    c.outputLse = true;
    c.sinks = true;  // joins segment 0 only
    auto problem = validation::UnifiedAttentionProblem::create(c, shape);
    REQUIRE(problem.isOk());
    CHECK((*problem)->launches()[0].gridZ == segments);
    runAndCheck(c, shape);
  }
  // Quantized caches and a window through the split path, after the passes.
  shape.segmentTiles = 2;
  for (KvCacheFormat format : {KvCacheFormat::Fp8E4M3, KvCacheFormat::Int8PerTokenHead}) {
    UnifiedAttentionConfig c = diffkvConfig({128, 64}, ScalarKind::F16);
    c.kvCacheFormat = format;
    c.splitKv = true;
    c.outputLse = true;
    c.slidingWindow = 150;
    runAndCheck(c, shape, /*afterPasses=*/true);
  }
}

TEST_CASE("DiffKV: batch invariance, bit for bit", "[diffkv][invariance]") {
  // The same sequence (index 0, hence the same data) alone and next to other
  // sequences: its output rows are identical.
  UnifiedAttentionConfig c = diffkvConfig({192, 128});
  c.outputLse = true;
  BatchShape alone;
  alone.queryLens = {7};
  alone.contextLens = {90};
  alone.seed = 43;
  BatchShape withDecodes = alone, withPrefill = alone;
  withDecodes.queryLens = {7, 1, 1, 1};
  withDecodes.contextLens = {90, 300, 2, 64};
  withPrefill.queryLens = {7, 120};
  withPrefill.contextLens = {90, 0};
  const auto a = runAndCheck(c, alone), b = runAndCheck(c, withDecodes), d = runAndCheck(c, withPrefill);
  CHECK(leadingRows(a, 7, c.dtype) == leadingRows(b, 7, c.dtype));
  CHECK(leadingRows(a, 7, c.dtype) == leadingRows(d, 7, c.dtype));
}

TEST_CASE("DiffKV: names, parameters, stride promises and validation", "[diffkv]") {
  UnifiedAttentionConfig c = diffkvConfig({192, 128});
  CHECK(c.kernelName() == "unified_attention_bf16_h8kv2_d192v128_bs16_causal");
  CHECK(c.headSizePadded() == 256);
  CHECK(c.valueHeadSizePadded() == 128);
  CHECK(c.kvStrideDivisibility() == 8);  // gcd(192, 128) = 64 bf16 elements: 16-byte rows
  auto kernel = compiler::buildUnifiedAttention(c);
  REQUIRE(kernel.isOk());
  const std::string ir = ir::printKernel(**kernel);
  CHECK(ir.find("VALUE_HEAD_SIZE = 128") != std::string::npos);
  CHECK(ir.find("VALUE_HEAD_SIZE_PADDED = 128") != std::string::npos);
  // Q·Kᵀ over 128 + 64 exact columns, not one 256-wide padded tile.
  CHECK(ir.find("%q_tile_piece0 = load") != std::string::npos);
  CHECK(ir.find("%k_tile_piece1 = load") != std::string::npos);
  CHECK(ir.find("%q_tile = load") == std::string::npos);
  CHECK(ir.find("%k_tile = load") == std::string::npos);
  // Parameters are those of the equal-size kernel.
  compiler::UnifiedAttentionConfig equal = c;
  equal.valueHeadSize = 0;
  auto equalKernel = compiler::buildUnifiedAttention(equal);
  REQUIRE(equalKernel.isOk());
  REQUIRE((*kernel)->numParameters() == (*equalKernel)->numParameters());
  for (size_t i = 0; i < (*kernel)->numParameters(); ++i)
    CHECK((*kernel)->parameter(i)->name() == (*equalKernel)->parameter(i)->name());

  // Odd value head size: out's strides lose the 8-element promise, the cache's too.
  UnifiedAttentionConfig odd = diffkvConfig({128, 36});
  CHECK(odd.kvStrideDivisibility() == 4);  // gcd(128, 36) = 4
  odd.kvCacheFormat = KvCacheFormat::Int8PerTokenHead;
  CHECK(odd.kvStrideDivisibility() == 4);  // rows of 132 and 40 bytes
  odd.kvCacheFormat = KvCacheFormat::Int4PerTokenHead;
  CHECK(odd.kvStrideDivisibility() == 1);  // 68 and 22 bytes
  odd.valueHeadSize = 35;
  CHECK(odd.validate().diagnostic().message ==
        "value_head_size (35) must be even for kv_cache_dtype int4_per_token_head (two values per byte)");
  odd.kvCacheFormat = KvCacheFormat::Auto;
  odd.valueHeadSize = 1100;
  CHECK(odd.validate().diagnostic().message ==
        "value_head_size (1100) must be between 1 and 1024 (0 = head_size: equal QK and V head sizes)");
  odd.valueHeadSize = 16;
  CHECK(odd.validate().isOk());
  odd.valueHeadSize = -1;
  CHECK_FALSE(odd.validate().isOk());
}

TEST_CASE("DiffKV: equal head sizes leave the unified kernel unchanged", "[diffkv]") {
  // value_head_size = head_size builds the same IR as leaving it 0 (the packed
  // layout is only a choice of strides), for the 2D, split and int4 forms.
  for (KvCacheFormat format : {KvCacheFormat::Auto, KvCacheFormat::Int4PerTokenHead})
    for (bool split : {false, true}) {
      UnifiedAttentionConfig plain;
      plain.kvCacheFormat = format;
      plain.splitKv = split;
      plain.outputLse = true;
      UnifiedAttentionConfig same = plain;
      same.valueHeadSize = plain.headSize;
      CHECK(same.kernelName() == plain.kernelName());
      auto a = compiler::buildUnifiedAttention(plain), b = compiler::buildUnifiedAttention(same);
      REQUIRE(a.isOk());
      REQUIRE(b.isOk());
      CHECK(ir::printKernel(**a) == ir::printKernel(**b));
    }
}

TEST_CASE("DiffKV cache write: the packed layout in every format", "[diffkv][cache_write]") {
  BatchShape batch;
  batch.queryLens = {3, 17, 1, 40};
  batch.contextLens = {5, 0, 77, 31};
  batch.seed = 44;
  for (KvCacheFormat format : {KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2,
                               KvCacheFormat::Int8PerTokenHead, KvCacheFormat::Fp8PerTokenHead,
                               KvCacheFormat::Int4PerTokenHead})
    for (const HeadSizes pair : kPairs) {
      compiler::CacheWriteConfig config;
      config.dtype = format == KvCacheFormat::Auto ? ScalarKind::F16 : ScalarKind::BF16;
      config.cacheFormat = format;
      config.numKvHeads = 3;
      config.headSize = pair.qk;
      config.valueHeadSize = pair.v;
      INFO(config.kernelName());
      auto result = validation::runCacheWriteInterpreted(config, batch);
      if (!result) FAIL(result.diagnostic().str());
      INFO(result->detail);
      CHECK(result->passed);
    }
  compiler::CacheWriteConfig config;
  config.headSize = 192;
  config.valueHeadSize = 128;
  config.cacheFormat = KvCacheFormat::Int8PerTokenHead;
  CHECK(config.kernelName() == "reshape_and_cache_bf16_int8_per_token_head_kv8_d192v128_bs16");
  CHECK(config.cacheRowElements() == 196);
  CHECK(config.cacheValueRowElements() == 132);
  config.cacheFormat = KvCacheFormat::Int4PerTokenHead;
  config.valueHeadSize = 63;
  CHECK(config.validate().diagnostic().message ==
        "value_head_size (63) must be even and at least 4 for kv_cache_dtype int4_per_token_head (two values per "
        "byte)");
  // Equal sizes: the same kernel as without a value head size.
  config.cacheFormat = KvCacheFormat::Auto;
  config.valueHeadSize = 192;
  compiler::CacheWriteConfig plain = config;
  plain.valueHeadSize = 0;
  CHECK(config.kernelName() == plain.kernelName());
  auto a = compiler::buildCacheWrite(config), b = compiler::buildCacheWrite(plain);
  REQUIRE(a.isOk());
  REQUIRE(b.isOk());
  CHECK(ir::printKernel(**a) == ir::printKernel(**b));
}

TEST_CASE("DiffKV spec: value_head_size loads, names the variants and reads back", "[diffkv][spec]") {
  auto spec = compiler::loadSpecFile(tests::sourceDir() + "/specs/diffkv_attention.yaml");
  INFO((spec.isOk() ? std::string() : spec.diagnostic().str()));
  REQUIRE(spec.isOk());
  REQUIRE(spec->variants.size() == 12);
  CHECK(spec->variants[0].name == "unified_attention_bf16_h32kv8_d192v128_bs16_causal_lse");
  CHECK(spec->variants[3].name == "unified_attention_bf16_h32kv8_d192v64_bs16_causal_fp8_e4m3_lse");
  CHECK(compiler::formatSpecParams(spec->variants[0].attention).find(" head_size=192 value_head_size=128 ") !=
        std::string::npos);
  const std::string base =
      "family: unified_attention\nparams:\n  dtype: bf16\n  num_query_heads: 8\n  num_kv_heads: 2\n"
      "  head_size: 192\n  block_size: 16\n  causal: true\n";
  auto bad = compiler::loadSpecText(base + "  value_head_size: 2048\n", "d.yaml");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.diagnostic().str().find("value_head_size (2048) must be between 1 and 1024") != std::string::npos);
  auto text = compiler::loadSpecText(base + "  value_head_size: wide\n", "d.yaml");
  REQUIRE_FALSE(text.isOk());
  CHECK(text.diagnostic().str() == "d.yaml:9:20: error: 'value_head_size' must be an integer, got 'wide'");
  auto write = compiler::loadSpecText(
      "family: reshape_and_cache\nparams:\n  dtype: bf16\n  num_kv_heads: 8\n  head_size: 192\n"
      "  value_head_size: 128\n  block_size: 16\n",
      "w.yaml");
  REQUIRE(write.isOk());
  CHECK(write->variants[0].cacheWrite.valueHeadSize == 128);
}

TEST_CASE("ptxas assembles the DiffKV spec's variants for sm_80 and sm_90a", "[diffkv][ptxas]") {
  if (!tests::havePtxas()) {
    WARN("skipped: ptxas is not on the PATH");
    return;
  }
  auto spec = compiler::loadSpecFile(tests::sourceDir() + "/specs/diffkv_attention.yaml");
  REQUIRE(spec.isOk());
  std::vector<UnifiedAttentionConfig> configs;
  for (const auto& variant : spec->variants) configs.push_back(variant.attention);
  // The split-KV stage 1 and an int8 per-token-head cache of the MiMo shape.
  UnifiedAttentionConfig split = spec->variants[0].attention;
  split.splitKv = true;
  split.kvCacheFormat = KvCacheFormat::Int8PerTokenHead;
  configs.push_back(split);
  int assembled = 0;
  for (const auto& config : configs)
    for (const char* arch : {"sm_80", "sm_90a"}) {
      INFO(config.kernelName() << " for " << arch);
      auto kernel = compiler::buildUnifiedAttention(config);
      REQUIRE(kernel.isOk());
      compiler::CompileOptions options;
      options.target = arch;
      auto compiled = compiler::compileKernel(**kernel, options);
      INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
      REQUIRE(compiled.isOk());
      CHECK(compiled->ptx.find("mma.sync.aligned.m16n8k16.row.col.f32") != std::string::npos);
      std::string log;
      const bool ok = tests::assemblesWithPtxas(compiled->ptx, arch, &log);
      INFO(log);
      CHECK(ok);
      assembled += ok;
    }
  CHECK(assembled == static_cast<int>(configs.size() * 2));
}

TEST_CASE("DiffKV op API: value head size validated, workspace sized by Dv", "[diffkv][op]") {
  ops::PagedAttentionParams p;
  p.dtype = ScalarKind::BF16;
  p.numQueryHeads = 32;
  p.numKvHeads = 8;
  p.headSize = 192;
  p.valueHeadSize = 128;
  p.blockSize = 16;
  p.numSeqs = 4;
  p.numTokens = 4;
  p.maxQueryLen = 1;
  p.scale = 0.072f;
  p.out = 0x10000;
  p.q = 0x20000;
  p.kvCache = 0x30000;
  p.blockTables = 0x40000;
  p.seqLens = 0x50000;
  p.cuSeqlensQ = 0x60000;
  p.qStrideToken = 32 * 192;
  p.qStrideHead = 192;
  p.oStrideToken = 32 * 128;
  p.oStrideHead = 128;
  p.blockTableStride = 7;
  // Packed: [blocks, 16, 8, 192 + 128].
  p.kvStrideHead = 320;
  p.kvStrideToken = 8 * 320;
  p.kvStrideBlock = 16 * 8 * 320;
  p.kvStrideKv = 192;
  auto message = [](const ops::PagedAttentionParams& params) {
    support::Status s = ops::validatePagedAttention(params);
    return s ? std::string("ok") : s.diagnostic().message;
  };
  CHECK(message(p) == "ok");
  // 64-key tiles as for equal head sizes (measured faster with cp.async tiles).
  // Names without a split: where a GPU is present a call without a workspace
  // would split into the runtime's scratch.
  auto unsplit = [](ops::PagedAttentionParams params) {
    params.runtimeScratch = false;
    return ops::selectPagedAttentionVariant(params).kernelName();
  };
  CHECK(unsplit(p) == "unified_attention_bf16_h32kv8_d192v128_bs16_causal_t64");
  auto narrow = p;
  narrow.headSize = 128;
  narrow.valueHeadSize = 64;
  narrow.qStrideToken = 32 * 128;
  narrow.qStrideHead = 128;
  narrow.oStrideToken = 32 * 64;
  narrow.oStrideHead = 64;
  CHECK(unsplit(narrow) == "unified_attention_bf16_h32kv8_d128v64_bs16_causal_t64");
  auto bad = p;
  bad.valueHeadSize = 2000;
  CHECK(message(bad).find("value_head_size (2000) must be between 1 and 1024") != std::string::npos);
  bad = p;
  bad.valueHeadSize = 100;
  bad.oStrideHead = 100;
  bad.oStrideToken = 3204;  // Dv = 100 promises no multiple of 8 for out's rows
  CHECK(message(bad) == "ok");
  bad = p;
  bad.oStrideHead = 132;  // Dv = 128 promises multiples of 8
  CHECK(message(bad).find("o_stride_head (132) must be a multiple of 8 for head size 192 (value head size 128)") !=
        std::string::npos);
  // The workspace holds V-sized scratch rows: sized with Dv, it splits; sized for
  // less than two segments of Dv rows, it is refused.
  p.numSms = 132;
  p.maxSeqLen = 8192;
  p.workspace = 0x70000;
  p.workspaceBytes = ops::pagedAttentionWorkspaceBytes(p.numTokens, p.numQueryHeads, 128, p.maxSeqLen).value();
  CHECK(message(p) == "ok");
  CHECK(ops::selectPagedAttentionVariant(p).splitKv);
  const uint64_t rows = static_cast<uint64_t>(p.numTokens) * 32 * 2;  // tokens x heads x two segments
  const uint64_t twoSegmentsOfDv = rows * 128 * 4 + 2 * ((rows * 4 + 15) / 16 * 16);
  // The scratch rows are Dv wide: one byte less than two segments of them runs 2D.
  p.workspaceBytes = twoSegmentsOfDv - 16;
  CHECK(message(p) == "ok");
  CHECK_FALSE(ops::selectPagedAttentionVariant(p).splitKv);
  p.workspaceBytes = twoSegmentsOfDv;
  CHECK(message(p) == "ok");
  CHECK(ops::selectPagedAttentionVariant(p).splitKv);
}

// ---- The same on the GPU. ----

TEST_CASE("GPU: the DiffKV spec's variants, split-KV and quantized caches", "[gpu][diffkv]") {
  if (!tests::gpuPresent()) return;
  auto spec = compiler::loadSpecFile(tests::sourceDir() + "/specs/diffkv_attention.yaml");
  REQUIRE(spec.isOk());
  auto check = [](const UnifiedAttentionConfig& config, const BatchShape& shape) {
    INFO(config.kernelName() << " on " << shape.str());
    auto result = validation::runUnifiedAttentionGpu(config, shape, validation::GpuRunOptions{});
    INFO((result.isOk() ? result->check.detail : result.diagnostic().str()));
    REQUIRE(result.isOk());
    CHECK(result->check.passed);
    return result->check;
  };
  for (const auto& variant : spec->variants) check(variant.attention, spec->shape);
  BatchShape shape;
  shape.queryLens = {1, 37, 1, 130, 5};
  shape.contextLens = {777, 0, 300, 61, 1};
  shape.seed = 45;
  for (const HeadSizes pair : kPairs)
    for (KvCacheFormat format : {KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3, KvCacheFormat::Int8PerTokenHead,
                                 KvCacheFormat::Fp8PerTokenHead}) {
      UnifiedAttentionConfig c = diffkvConfig(pair);
      c.numQueryHeads = 32;
      c.numKvHeads = 8;
      c.kvCacheFormat = format;
      c.tileSize = format == KvCacheFormat::Auto ? 64 : 32;
      check(c, shape);
      c.slidingWindow = 100;
      c.softcap = 20;
      c.sinks = true;
      c.outputLse = true;
      check(c, shape);
      c.splitKv = true;
      for (int segmentTiles : {1, 3, 16}) {
        shape.segmentTiles = segmentTiles;
        check(c, shape);
      }
      shape.segmentTiles = 1;
    }
  // Prefill tiling (128 query rows over 8 warps), causal and not.
  for (bool causal : {true, false}) {
    UnifiedAttentionConfig c = diffkvConfig({192, 128}, ScalarKind::BF16, causal);
    c.numQueryHeads = 32;
    c.numKvHeads = 8;
    c.blockMRows = 128;
    c.numWarps = 8;
    check(c, shape);
  }
  // Batch invariance: segment-free 2D rows of sequence 0 equal alone and in a batch.
  UnifiedAttentionConfig c = diffkvConfig({192, 128});
  BatchShape alone;
  alone.queryLens = {7};
  alone.contextLens = {900};
  alone.seed = 46;
  BatchShape batch = alone;
  batch.queryLens = {7, 1, 200};
  batch.contextLens = {900, 3000, 0};
  const auto a = check(c, alone), b = check(c, batch);
  CHECK(leadingRows(a, 7, c.dtype) == leadingRows(b, 7, c.dtype));
  // DiffKV cache write on the device.
  for (KvCacheFormat format : {KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3, KvCacheFormat::Int8PerTokenHead}) {
    compiler::CacheWriteConfig write;
    write.cacheFormat = format;
    write.headSize = 192;
    write.valueHeadSize = 128;
    auto result = validation::runCacheWriteGpu(write, shape, validation::GpuRunOptions{});
    INFO(write.kernelName() << ": " << (result.isOk() ? result->check.detail : result.diagnostic().str()));
    REQUIRE(result.isOk());
    CHECK(result->check.passed);
  }
}

TEST_CASE("GPU: the op API runs DiffKV over the packed cache, 2D and split", "[gpu][diffkv][op]") {
  if (!tests::gpuPresent()) return;
  REQUIRE(runtime::activatePrimaryContext(0).isOk());
  for (const bool split : {false, true}) {
    UnifiedAttentionConfig config = diffkvConfig({192, 128});
    config.numQueryHeads = 32;
    config.numKvHeads = 8;
    config.outputLse = true;
    BatchShape shape;
    shape.queryLens = {1, 1, 1, 2};
    shape.contextLens = {5000, 17, 2100, 1024};
    shape.seed = 47;
    INFO(shape.str() << (split ? " split" : " 2D"));
    auto problem = validation::UnifiedAttentionProblem::create(config, shape);
    REQUIRE(problem.isOk());
    std::vector<runtime::DeviceBuffer> device;
    for (auto& buffer : (*problem)->buffers()) {
      auto d = runtime::DeviceBuffer::allocate(std::max<size_t>(buffer.bytes.size(), 16));
      REQUIRE(d.isOk());
      REQUIRE(d->copyFromHost(buffer.bytes.data(), buffer.bytes.size()).isOk());
      device.push_back(std::move(*d));
    }
    const auto& s = (*problem)->scalarArguments();
    REQUIRE(s.size() == 13u);  // scale, num_seqs, search steps, 9 strides, lse stride
    auto integer = [&](size_t i) { return std::get<int64_t>(s[i]); };
    ops::PagedAttentionParams p;
    p.dtype = config.dtype;
    p.numQueryHeads = config.numQueryHeads;
    p.numKvHeads = config.numKvHeads;
    p.headSize = 192;
    p.valueHeadSize = 128;
    p.blockSize = config.blockSize;
    p.numSeqs = 4;
    p.numTokens = 5;
    p.maxQueryLen = 2;
    p.maxSeqLen = 5001;
    p.scale = static_cast<float>(std::get<double>(s[0]));
    p.out = device[0].address();
    p.q = device[1].address();
    p.kvCache = device[2].address();
    p.blockTables = device[3].address();
    p.seqLens = device[4].address();
    p.cuSeqlensQ = device[5].address();
    p.lse = device[6].address();  // the only optional buffer here
    REQUIRE((*problem)->buffers()[6].label == "lse");
    p.qStrideToken = integer(3);
    p.qStrideHead = integer(4);
    p.oStrideToken = integer(5);
    p.oStrideHead = integer(6);
    p.blockTableStride = integer(7);
    p.kvStrideBlock = integer(8);
    p.kvStrideKv = integer(9);
    p.kvStrideToken = integer(10);
    p.kvStrideHead = integer(11);
    p.lseStrideHead = integer(12);
    CHECK(p.kvStrideKv == 192);  // the packed layout
    std::optional<runtime::DeviceBuffer> workspace;
    if (split) {
      p.numSms = 132;
      const uint64_t bytes = ops::pagedAttentionWorkspaceBytes(p.numTokens, p.numQueryHeads, 128, p.maxSeqLen).value();
      auto w = runtime::DeviceBuffer::allocate(bytes);
      REQUIRE(w.isOk());
      workspace = std::move(*w);
      p.workspace = workspace->address();
      p.workspaceBytes = bytes;
      CHECK(ops::selectPagedAttentionVariant(p).splitKv);
    }
    support::Status launched = ops::pagedAttention(p);
    INFO((launched ? std::string() : launched.diagnostic().str()));
    REQUIRE(launched.isOk());
    REQUIRE(runtime::synchronizeContext().isOk());
    std::vector<uint8_t> output((*problem)->buffers()[0].bytes.size());
    REQUIRE(device[0].copyToHost(output.data(), output.size()).isOk());
    std::vector<uint8_t> lse((*problem)->buffers()[6].bytes.size());
    REQUIRE(device[6].copyToHost(lse.data(), lse.size()).isOk());
    AttentionRunResult result;
    (*problem)->check(output, result, &lse);
    INFO("max abs error " << result.maxAbsError << " (tolerance " << result.tolerance << "); " << result.detail);
    CHECK(result.passed);
  }
}
