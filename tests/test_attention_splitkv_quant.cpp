// Unified attention with quantized KV caches (per-tensor fp8, per-token-head
// int8/fp8/int4), the LSE output, split-KV (3D: segments + reduce_segments) and
// batch invariance, on the interpreter against the float64 reference run on the
// dequantized cache. [gpu] cases run the same on the GPU.
#include <catch2/catch.hpp>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "compiler/driver/CompileDriver.h"
#include "compiler/validation/AttentionGpu.h"
#include "compiler/validation/AttentionProblem.h"
#include "compiler/spec/Spec.h"
#include "compiler/kernels/ReduceSegments.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "tests/test_attention_checks.h"
#include "tests/test_tools.h"

namespace validation = attnjit::validation;
using attnjit::validation::AttentionRunResult;
using attnjit::compiler::BatchShape;
using attnjit::compiler::KvCacheFormat;
using attnjit::compiler::KvScaleLayout;
using attnjit::compiler::UnifiedAttentionConfig;
using attnjit::ir::ScalarKind;
using attnjit::tests::mixedAttentionBatch;
using attnjit::tests::runAndCheck;

namespace {

UnifiedAttentionConfig smallConfig(ScalarKind dtype, KvCacheFormat format, bool causal = true) {
  UnifiedAttentionConfig c;
  c.dtype = dtype;
  c.numQueryHeads = 8;
  c.numKvHeads = 2;
  c.headSize = 80;  // padded to 128 and masked; 40 bytes of int4 per row
  c.blockSize = 16;
  c.causal = causal;
  c.kvCacheFormat = format;
  return c;
}

const KvCacheFormat kQuantizedFormats[] = {KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2,
                                           KvCacheFormat::Int8PerTokenHead, KvCacheFormat::Fp8PerTokenHead,
                                           KvCacheFormat::Int4PerTokenHead};

// The kernel of `c` compiled for sm_90a (PTX and the optimized tile IR).
attnjit::compiler::CompiledKernel compileForHopper(const UnifiedAttentionConfig& c) {
  auto kernel = attnjit::compiler::buildUnifiedAttention(c);
  REQUIRE(kernel.isOk());
  attnjit::compiler::CompileOptions options;
  options.target = "sm_90a";
  auto compiled = attnjit::compiler::compileKernel(**kernel, options);
  INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
  REQUIRE(compiled.isOk());
  return std::move(*compiled);
}

// The output rows of the batch's first `tokens` tokens, as bytes.
std::vector<uint8_t> leadingRows(const AttentionRunResult& r, int tokens, ScalarKind dtype) {
  const size_t bytes = static_cast<size_t>(tokens) * static_cast<size_t>(r.outputStrideToken) *
                       static_cast<size_t>(attnjit::ir::storageBits(dtype) / 8);
  REQUIRE(r.output.size() >= bytes);
  return std::vector<uint8_t>(r.output.begin(), r.output.begin() + static_cast<ptrdiff_t>(bytes));
}

}  // namespace

TEST_CASE("per-token-head scales read as f32 or assembled from bytes, as the rows' alignment allows",
          "[attention][quant]") {
  // D = 52 (int4: 56): rows of 56 (32) bytes, the scale loaded as an f32
  // through a reinterpreted byte pointer; D = 50 (int4: 58, 29 + 4 bytes): rows
  // that are not 4-byte multiples, the scale's four bytes loaded and assembled.
  // Both through the whole pass pipeline, where the scales are pipelined.
  for (KvCacheFormat format : {KvCacheFormat::Int8PerTokenHead, KvCacheFormat::Fp8PerTokenHead,
                               KvCacheFormat::Int4PerTokenHead}) {
    const bool int4 = format == KvCacheFormat::Int4PerTokenHead;
    for (bool aligned : {true, false}) {
      UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, format);
      c.headSize = int4 ? (aligned ? 56 : 58) : (aligned ? 52 : 50);
      INFO("head size " << c.headSize << ", scale loaded as " << (aligned ? "f32" : "bytes"));
      CHECK((c.kvStrideDivisibility() >= 4) == aligned);
      runAndCheck(c, mixedAttentionBatch(11), /*afterPasses=*/true);
    }
  }
}

TEST_CASE("quantized KV caches: every format, f32/f16/bf16, causal and not", "[attention][quant]") {
  for (KvCacheFormat format : kQuantizedFormats)
    for (ScalarKind dtype : {ScalarKind::F32, ScalarKind::F16, ScalarKind::BF16})
      for (bool causal : {true, false}) runAndCheck(smallConfig(dtype, format, causal), mixedAttentionBatch(3));
}

TEST_CASE("quantized KV caches: with GQA, sliding window, softcap and sinks, after the passes", "[attention][quant]") {
  for (KvCacheFormat format : kQuantizedFormats) {
    UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, format);
    c.numQueryHeads = 16;
    c.numKvHeads = 4;
    c.headSize = 64;
    c.slidingWindow = 37;
    c.softcap = 1.5;
    c.sinks = true;
    runAndCheck(c, mixedAttentionBatch(5));
    runAndCheck(c, mixedAttentionBatch(6), /*afterPasses=*/true);
  }
}

TEST_CASE("quantized KV caches: names, parameters, stride promises, validation", "[attention][quant]") {
  UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, KvCacheFormat::Fp8E4M3);
  CHECK(c.kernelName() == "unified_attention_bf16_h8kv2_d80_bs16_causal_fp8_e4m3");
  auto perTensor = attnjit::compiler::buildUnifiedAttention(c);
  REQUIRE(perTensor.isOk());
  CHECK((*perTensor)->parameter(2)->type().str() == "ptr<global, f8e4m3>");
  CHECK((*perTensor)->parameter(6)->name() == "k_scale");
  CHECK((*perTensor)->parameter(7)->name() == "v_scale");
  CHECK(c.kvStrideDivisibility() == 16);  // 80 one-byte values: 16-byte rows
  c.kvCacheFormat = KvCacheFormat::Int4PerTokenHead;
  CHECK(c.kernelName() == "unified_attention_bf16_h8kv2_d80_bs16_causal_int4_per_token_head");
  auto int4 = attnjit::compiler::buildUnifiedAttention(c);
  REQUIRE(int4.isOk());
  CHECK((*int4)->parameter(2)->type().str() == "ptr<global, i8>");
  CHECK(c.kvStrideDivisibility() == 4);  // 40 + 4 bytes per row
  c.headSize = 81;
  CHECK(c.validate().diagnostic().message ==
        "head_size (81) must be even for kv_cache_dtype int4_per_token_head (two values per byte)");
  c.kvCacheFormat = KvCacheFormat::Int8PerTokenHead;
  CHECK(c.validate().isOk());
  CHECK(c.kvStrideDivisibility() == 1);  // 85-byte rows promise nothing
}

TEST_CASE("separate per-token-head scales (vLLM's layout): every format, dtypes, split-KV, DiffKV",
          "[attention][quant][sepscales]") {
  // The harness keeps the scales in [blocks, block_size, Hkv] tensors with a
  // padded block stride and NaN wherever no key was written.
  for (KvCacheFormat format : {KvCacheFormat::Int8PerTokenHead, KvCacheFormat::Fp8PerTokenHead,
                               KvCacheFormat::Int4PerTokenHead})
    for (ScalarKind dtype : {ScalarKind::F16, ScalarKind::BF16, ScalarKind::F32}) {
      UnifiedAttentionConfig c = smallConfig(dtype, format);
      c.kvScaleLayout = attnjit::compiler::KvScaleLayout::Separate;
      INFO(c.kernelName());
      runAndCheck(c, mixedAttentionBatch(21));
      if (dtype != ScalarKind::BF16) continue;
      runAndCheck(c, mixedAttentionBatch(22), /*afterPasses=*/true);
      BatchShape split = mixedAttentionBatch(23);
      split.segmentTiles = 2;
      c.splitKv = true;
      c.outputLse = true;
      c.sinks = true;
      c.slidingWindow = 45;
      runAndCheck(c, split);
    }
  // DiffKV's packed rows: a K row and a V row of values only.
  UnifiedAttentionConfig diffkv = smallConfig(ScalarKind::BF16, KvCacheFormat::Fp8PerTokenHead);
  diffkv.kvScaleLayout = attnjit::compiler::KvScaleLayout::Separate;
  diffkv.headSize = 96;
  diffkv.valueHeadSize = 64;
  CHECK(diffkv.keyRowElements() == 96);
  CHECK(diffkv.valueRowElements() == 64);
  runAndCheck(diffkv, mixedAttentionBatch(24), /*afterPasses=*/true);
}

TEST_CASE("separate per-token-head scales: names, parameters, stride promises, validation", "[attention][quant][sepscales]") {
  UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, KvCacheFormat::Int8PerTokenHead);
  c.kvScaleLayout = attnjit::compiler::KvScaleLayout::Separate;
  CHECK(c.kernelName() == "unified_attention_bf16_h8kv2_d80_bs16_causal_int8_per_token_head_sepscales");
  CHECK(c.kvStrideDivisibility() == 16);  // rows of 80 bytes, no scale
  auto kernel = attnjit::compiler::buildUnifiedAttention(c);
  REQUIRE(kernel.isOk());
  std::vector<std::string> names;
  for (size_t i = 0; i < (*kernel)->numParameters(); ++i) names.push_back((*kernel)->parameter(i)->name());
  auto position = [&](const std::string& name) {
    return std::find(names.begin(), names.end(), name) - names.begin();
  };
  CHECK(position("k_scale_cache") == 6);
  CHECK(position("v_scale_cache") == 7);
  CHECK(position("scale_stride_block") + 3 == static_cast<ptrdiff_t>(names.size()));
  CHECK(names.back() == "scale_stride_head");
  c.kvCacheFormat = KvCacheFormat::Int4PerTokenHead;
  CHECK(c.kvStrideDivisibility() == 8);  // 40 bytes
  c.headSize = 50;
  CHECK(c.kvStrideDivisibility() == 1);  // 25 bytes
  c.kvCacheFormat = KvCacheFormat::Fp8E4M3;
  CHECK(c.validate().diagnostic().message ==
        "kv_scales separate needs a per-token-head cache (int8_per_token_head, fp8_per_token_head or "
        "int4_per_token_head), got kv_cache_dtype fp8_e4m3");
}

TEST_CASE("LSE output: 2D, with sinks and a window, GQA", "[attention][lse]") {
  for (ScalarKind dtype : {ScalarKind::F32, ScalarKind::BF16}) {
    UnifiedAttentionConfig c = smallConfig(dtype, KvCacheFormat::Auto);
    c.outputLse = true;
    runAndCheck(c, mixedAttentionBatch(7));
    c.sinks = true;
    c.slidingWindow = 20;
    runAndCheck(c, mixedAttentionBatch(8), /*afterPasses=*/true);
  }
}

TEST_CASE("split-KV: segments of 1, 2 and 8 tiles agree with the reference", "[attention][splitkv]") {
  for (int segmentTiles : {1, 2, 8}) {
    BatchShape shape = mixedAttentionBatch(9);
    shape.segmentTiles = segmentTiles;
    UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, KvCacheFormat::Auto);
    c.splitKv = true;
    runAndCheck(c, shape);
    c.outputLse = true;
    c.sinks = true;  // counted once, by segment 0
    runAndCheck(c, shape, /*afterPasses=*/true);
  }
}

TEST_CASE("split-KV: segments cut per sequence on the GPU agree with the reference", "[attention][splitkv]") {
  // num_segments per sequence of at least segment_tiles tiles (the kernel's
  // segment_tiles = -minimum): what the op launches when it knows no
  // max_seq_len. More segments than a short sequence has tiles leave the rest
  // empty; a sliding window cuts only the tiles it keeps.
  for (const auto& [numSegments, minimumTiles] : {std::pair{3, 1}, std::pair{5, 2}, std::pair{64, 1}}) {
    BatchShape shape = mixedAttentionBatch(12);
    shape.numSegments = numSegments;
    shape.segmentTiles = minimumTiles;
    INFO(shape.str());
    UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, KvCacheFormat::Auto);
    c.splitKv = true;
    runAndCheck(c, shape);
    c.outputLse = true;
    c.sinks = true;
    c.slidingWindow = 45;
    runAndCheck(c, shape, /*afterPasses=*/true);
    UnifiedAttentionConfig quantized = smallConfig(ScalarKind::F16, KvCacheFormat::Int8PerTokenHead, false);
    quantized.splitKv = true;
    quantized.outputLse = true;
    runAndCheck(quantized, shape);
  }
}

TEST_CASE("split-KV: with every feature and quantized caches", "[attention][splitkv]") {
  BatchShape shape = mixedAttentionBatch(10);
  shape.segmentTiles = 2;
  for (KvCacheFormat format : {KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3, KvCacheFormat::Int8PerTokenHead,
                               KvCacheFormat::Int4PerTokenHead}) {
    for (bool causal : {true, false}) {
      UnifiedAttentionConfig c = smallConfig(ScalarKind::F16, format, causal);
      c.splitKv = true;
      c.outputLse = true;
      c.slidingWindow = 45;  // segment 0 is empty for the long decode
      c.softcap = 2;
      c.alibi = true;
      c.sinks = true;
      runAndCheck(c, shape);
    }
  }
}

TEST_CASE("split-KV: kernel parameters and the reduce kernel", "[attention][splitkv]") {
  UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, KvCacheFormat::Auto);
  c.splitKv = true;
  c.outputLse = true;
  CHECK(c.kernelName() == "unified_attention_bf16_h8kv2_d80_bs16_causal_lse_3d");
  auto stage1 = attnjit::compiler::buildUnifiedAttention(c);
  REQUIRE(stage1.isOk());
  const auto& k = **stage1;
  CHECK(k.parameter(0)->name() == "segm_output");
  CHECK(k.parameter(2)->name() == "segm_expsum");
  CHECK(k.parameter(k.numParameters() - 2)->name() == "num_segments");
  CHECK(k.parameter(k.numParameters() - 1)->name() == "segment_tiles");
  attnjit::compiler::ReduceSegmentsConfig reduce;
  reduce.numQueryHeads = 40;
  reduce.headSize = 96;
  reduce.outputLse = true;
  CHECK(reduce.kernelName() == "reduce_segments_bf16_h40_d96_lse");
  CHECK(attnjit::compiler::reduceSegmentsGridY(reduce) == 3);  // 16 heads per program
  auto built = attnjit::compiler::buildReduceSegments(reduce);
  REQUIRE(built.isOk());
  CHECK((*built)->parameter(4)->name() == "lse");
}

TEST_CASE("batch invariance: a sequence's output does not depend on the rest of the batch", "[attention][invariance]") {
  // The same sequence (index 0, so the same data) alone, next to a decode batch,
  // and next to a long prefill: the 2D kernel's rows for it are bit for bit equal.
  UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, KvCacheFormat::Auto);
  c.outputLse = true;
  BatchShape alone;
  alone.queryLens = {7};
  alone.contextLens = {90};
  alone.seed = 12;
  BatchShape withDecodes = alone, withPrefill = alone;
  withDecodes.queryLens = {7, 1, 1, 1};
  withDecodes.contextLens = {90, 300, 2, 64};
  withPrefill.queryLens = {7, 120};
  withPrefill.contextLens = {90, 0};
  const auto a = runAndCheck(c, alone), b = runAndCheck(c, withDecodes), d = runAndCheck(c, withPrefill);
  CHECK(leadingRows(a, 7, c.dtype) == leadingRows(b, 7, c.dtype));
  CHECK(leadingRows(a, 7, c.dtype) == leadingRows(d, 7, c.dtype));
}

TEST_CASE("spec: kv_cache_dtype, output_lse and split_kv fields", "[spec][quant]") {
  const std::string base =
      "family: unified_attention\nparams:\n  dtype: bf16\n  num_query_heads: 8\n  num_kv_heads: 2\n"
      "  head_size: 64\n  block_size: 16\n  causal: true\n";
  auto spec = attnjit::compiler::loadSpecText(
      base + "  kv_cache_dtype: [auto, fp8, int4_per_token_head]\n  output_lse: true\n  split_kv: true\n", "q.yaml");
  REQUIRE(spec.isOk());
  REQUIRE(spec->variants.size() == 3);
  CHECK(spec->variants[1].attention.kvCacheFormat == KvCacheFormat::Fp8E4M3);
  CHECK(spec->variants[2].name == "unified_attention_bf16_h8kv2_d64_bs16_causal_int4_per_token_head_lse_3d");
  CHECK(attnjit::compiler::formatSpecParams(spec->variants[2].attention)
            .find(" kv_cache_dtype=int4_per_token_head output_lse=true split_kv=true") != std::string::npos);
  auto bad = attnjit::compiler::loadSpecText(base + "  kv_cache_dtype: int3\n", "q.yaml");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.diagnostic().str() ==
        "q.yaml:9:19: error: 'kv_cache_dtype' must be one of auto, fp8_e4m3 (or fp8), fp8_e5m2, int8_per_token_head, "
        "fp8_per_token_head, int4_per_token_head, got 'int3'");
  auto separate = attnjit::compiler::loadSpecText(
      base + "  kv_cache_dtype: int8_per_token_head\n  kv_scales: [inline, separate]\n", "q.yaml");
  REQUIRE(separate.isOk());
  REQUIRE(separate->variants.size() == 2);
  CHECK(separate->variants[1].name == "unified_attention_bf16_h8kv2_d64_bs16_causal_int8_per_token_head_sepscales");
  CHECK(attnjit::compiler::formatSpecParams(separate->variants[1].attention).find(" kv_scales=separate") !=
        std::string::npos);
  auto badLayout = attnjit::compiler::loadSpecText(base + "  kv_scales: outside\n", "q.yaml");
  REQUIRE_FALSE(badLayout.isOk());
  CHECK(badLayout.diagnostic().str() == "q.yaml:9:14: error: 'kv_scales' must be inline or separate, got 'outside'");
  auto notPerTokenHead = attnjit::compiler::loadSpecText(base + "  kv_scales: separate\n", "q.yaml");
  REQUIRE_FALSE(notPerTokenHead.isOk());
  CHECK(notPerTokenHead.diagnostic().message.find("kv_scales separate needs a per-token-head cache") !=
        std::string::npos);
}

TEST_CASE("per-tensor fp8 caches meet bf16 q in f16 with fp8_dot_dtype f16", "[attention][quant][fp8dots]") {
  using attnjit::compiler::Fp8DotDtype;
  // Against the float64 reference, both fp8 formats, decode and prefill rows,
  // split-KV with the LSE, and through the pass pipeline.
  for (KvCacheFormat format : {KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2}) {
    UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, format);
    c.fp8DotDtype = Fp8DotDtype::F16;
    runAndCheck(c, mixedAttentionBatch(3));
    runAndCheck(c, mixedAttentionBatch(4), /*afterPasses=*/true);
    c.splitKv = true;
    c.outputLse = true;
    runAndCheck(c, mixedAttentionBatch(5), /*afterPasses=*/true);
  }
  // The name says so only where the kernel differs: bf16 q (f16 q already
  // multiplies in f16).
  UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, KvCacheFormat::Fp8E4M3);
  c.fp8DotDtype = Fp8DotDtype::F16;
  CHECK(c.kernelName() == "unified_attention_bf16_h8kv2_d80_bs16_causal_fp8_e4m3_f16dots");
  UnifiedAttentionConfig half = c;
  half.dtype = ScalarKind::F16;
  CHECK(half.kernelName() == "unified_attention_f16_h8kv2_d80_bs16_causal_fp8_e4m3");
  // The decode kernel converts each pair of cache bytes with one instruction
  // and multiplies f16 operands; the default goes on through f32 into bf16.
  c.headSize = 128;
  c.tileSize = 128;
  for (Fp8DotDtype choice : {Fp8DotDtype::Dtype, Fp8DotDtype::F16}) {
    c.fp8DotDtype = choice;
    const bool f16 = choice == Fp8DotDtype::F16;
    INFO(c.kernelName());
    const auto compiled = compileForHopper(c);
    const std::string& ptx = compiled.ptx;
    CHECK(attnjit::tests::countOf(ptx, "cvt.rn.f16x2.e4m3x2") > 0);
    CHECK((attnjit::tests::countOf(ptx, "cvt.f32.f16") == 0) == f16);
    CHECK((attnjit::tests::countOf(ptx, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") > 0) == f16);
    CHECK((attnjit::tests::countOf(ptx, "bf16.bf16") == 0) == f16);
    if (attnjit::tests::havePtxas()) attnjit::tests::checkAssembles(ptx, "sm_90a");
  }
  // Only fp8 and int8 caches, only f16/bf16 q; the spec field parses.
  c = smallConfig(ScalarKind::BF16, KvCacheFormat::Int4PerTokenHead);
  c.fp8DotDtype = Fp8DotDtype::F16;
  CHECK(c.validate().diagnostic().message ==
        "fp8_dot_dtype f16 needs an fp8 or int8 cache (kv_cache_dtype fp8_e4m3, fp8_e5m2, int8_per_token_head or "
        "fp8_per_token_head), got kv_cache_dtype int4_per_token_head");
  c = smallConfig(ScalarKind::F32, KvCacheFormat::Fp8E4M3);
  c.fp8DotDtype = Fp8DotDtype::F16;
  CHECK(c.validate().diagnostic().message == "fp8_dot_dtype f16 needs dtype bf16 or f16, got f32");
  const std::string base =
      "family: unified_attention\nparams:\n  dtype: bf16\n  num_query_heads: 8\n  num_kv_heads: 2\n"
      "  head_size: 64\n  block_size: 16\n  causal: true\n  kv_cache_dtype: fp8_e5m2\n";
  auto spec = attnjit::compiler::loadSpecText(base + "  fp8_dot_dtype: [dtype, f16]\n", "d.yaml");
  REQUIRE(spec.isOk());
  REQUIRE(spec->variants.size() == 2);
  CHECK(spec->variants[0].attention.fp8DotDtype == Fp8DotDtype::Dtype);
  CHECK(spec->variants[1].name == "unified_attention_bf16_h8kv2_d64_bs16_causal_fp8_e5m2_f16dots");
  CHECK(attnjit::compiler::formatSpecParams(spec->variants[1].attention).find(" fp8_dot_dtype=f16") !=
        std::string::npos);
  auto bad = attnjit::compiler::loadSpecText(base + "  fp8_dot_dtype: bf16\n", "d.yaml");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.diagnostic().str() == "d.yaml:10:18: error: 'fp8_dot_dtype' must be dtype or f16, got 'bf16'");
}

TEST_CASE("int8 and fp8 per-token-head caches meet bf16 q in f16 for Q·K only", "[attention][quant][fp8dots]") {
  using attnjit::compiler::Fp8DotDtype;
  for (KvCacheFormat format : {KvCacheFormat::Int8PerTokenHead, KvCacheFormat::Fp8PerTokenHead})
    for (auto layout : {attnjit::compiler::KvScaleLayout::Inline, attnjit::compiler::KvScaleLayout::Separate}) {
      UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, format);
      c.fp8DotDtype = Fp8DotDtype::F16;
      c.kvScaleLayout = layout;
      CHECK(c.queryKeyDotKind() == ScalarKind::F16);
      CHECK(c.valueDotKind() == ScalarKind::BF16);  // P times a value scale stays in bf16's range
      INFO(c.kernelName());
      CHECK(c.kernelName().find("_f16dots") != std::string::npos);
      runAndCheck(c, mixedAttentionBatch(31), /*afterPasses=*/true);
      c.splitKv = true;
      c.outputLse = true;
      BatchShape split = mixedAttentionBatch(32);
      split.segmentTiles = 2;
      runAndCheck(c, split);
    }
  // Q·K on f16 mma, P·V on bf16 mma, in one decode kernel.
  UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, KvCacheFormat::Int8PerTokenHead);
  c.fp8DotDtype = Fp8DotDtype::F16;
  c.kvScaleLayout = attnjit::compiler::KvScaleLayout::Separate;
  c.headSize = 128;
  c.tileSize = 128;
  auto kernel = attnjit::compiler::buildUnifiedAttention(c);
  REQUIRE(kernel.isOk());
  attnjit::compiler::CompileOptions options;
  options.target = "sm_90a";
  auto compiled = attnjit::compiler::compileKernel(**kernel, options);
  REQUIRE(compiled.isOk());
  CHECK(attnjit::tests::countOf(compiled->ptx, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") > 0);
  CHECK(attnjit::tests::countOf(compiled->ptx, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") > 0);
  if (attnjit::tests::havePtxas()) attnjit::tests::checkAssembles(compiled->ptx, "sm_90a");
}

// ---- The same on the GPU. ----

namespace {
AttentionRunResult checkOnGpu(const UnifiedAttentionConfig& config, const BatchShape& shape,
                              const validation::GpuRunOptions& options = {}) {
  INFO(config.kernelName() << " on " << shape.str() << (options.target.empty() ? "" : " for " + options.target));
  auto result = validation::runUnifiedAttentionGpu(config, shape, options);
  INFO((result.isOk() ? result->check.detail : result.diagnostic().str()));
  REQUIRE(result.isOk());
  CHECK(result->check.passed);
  return result->check;
}
}  // namespace

TEST_CASE("GPU: quantized caches, LSE, split-KV and batch invariance", "[gpu]") {
  if (!attnjit::tests::gpuPresent()) return;
  BatchShape shape;
  shape.queryLens = {1, 37, 1, 130, 5};
  shape.contextLens = {777, 0, 300, 61, 1};
  shape.seed = 13;
  for (KvCacheFormat format : kQuantizedFormats)
    for (ScalarKind dtype : {ScalarKind::BF16, ScalarKind::F16})
      for (bool causal : {true, false}) {
        UnifiedAttentionConfig c = smallConfig(dtype, format, causal);
        c.numQueryHeads = 32;
        c.numKvHeads = 8;
        c.headSize = 128;
        checkOnGpu(c, shape);
        c.tileSize = 64;
        c.sinks = true;
        c.slidingWindow = 100;
        checkOnGpu(c, shape);
      }
  // fp8 caches compiled for sm_80, which has no fp8 cvt (the packed bit decode of
  // ElementwiseLowering's castFp8Pair), run through the driver's PTX JIT.
  validation::GpuRunOptions sm80;
  sm80.target = "sm_80";
  for (KvCacheFormat format : {KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2, KvCacheFormat::Fp8PerTokenHead})
    for (ScalarKind dtype : {ScalarKind::BF16, ScalarKind::F16}) {
      UnifiedAttentionConfig c = smallConfig(dtype, format);
      c.headSize = 128;
      checkOnGpu(c, shape, sm80);
    }
  // Separate per-token-head scales (vLLM's layout) on the op's 128-key decode
  // tiles and the prefill tiles.
  for (KvCacheFormat format : {KvCacheFormat::Int8PerTokenHead, KvCacheFormat::Fp8PerTokenHead,
                               KvCacheFormat::Int4PerTokenHead})
    for (int tileSize : {32, 128}) {
      UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, format);
      c.numQueryHeads = 32;
      c.numKvHeads = 8;
      c.headSize = 128;
      c.tileSize = tileSize;
      c.kvScaleLayout = attnjit::compiler::KvScaleLayout::Separate;
      checkOnGpu(c, shape);
    }
  for (int segmentTiles : {1, 3, 16}) {
    BatchShape split = shape;
    split.segmentTiles = segmentTiles;
    for (KvCacheFormat format : {KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3, KvCacheFormat::Int8PerTokenHead}) {
      UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, format);
      c.splitKv = true;
      c.outputLse = true;
      c.sinks = segmentTiles == 3;
      checkOnGpu(c, split);
    }
  }
  UnifiedAttentionConfig lse = smallConfig(ScalarKind::F16, KvCacheFormat::Auto);
  lse.outputLse = true;
  checkOnGpu(lse, shape);

  // Batch invariance, bit for bit on the GPU.
  UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, KvCacheFormat::Auto);
  c.tileSize = 64;
  BatchShape alone;
  alone.queryLens = {3};
  alone.contextLens = {2000};
  alone.seed = 14;
  BatchShape crowded = alone;
  crowded.queryLens = {3, 1, 1, 500, 1};
  crowded.contextLens = {2000, 5, 4000, 0, 77};
  const auto a = checkOnGpu(c, alone), b = checkOnGpu(c, crowded);
  CHECK(leadingRows(a, 3, c.dtype) == leadingRows(b, 3, c.dtype));
}

TEST_CASE("GPU: thread-major quantized operands across head sizes, tiles and GQA ratios", "[gpu][quant]") {
  if (!attnjit::tests::gpuPresent()) return;
  // The decode tiles whose K and V are read straight into thread-major mma
  // operands: head sizes padded (80, 96: k renumbered past the real head
  // size) and wide (256: 64 head dims per thread), the op API's 128-key tiles,
  // and GQA ratios from 1 to 16 (BLOCK_M 16 either way, the warps splitting the
  // keys and the output columns).
  BatchShape shape;
  shape.queryLens = {1, 1, 9, 1};
  shape.contextLens = {1000, 129, 40, 3};
  shape.seed = 21;
  for (KvCacheFormat format : {KvCacheFormat::Fp8E4M3, KvCacheFormat::Int8PerTokenHead, KvCacheFormat::Fp8PerTokenHead})
    for (int headSize : {64, 80, 96, 256})
      for (int tileSize : {64, 128}) {
        UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, format);
        c.headSize = headSize;
        c.tileSize = tileSize;
        checkOnGpu(c, shape);
      }
  for (auto [hq, hkv] : {std::pair{8, 8}, std::pair{32, 2}})
    for (KvCacheFormat format : {KvCacheFormat::Fp8E5M2, KvCacheFormat::Int8PerTokenHead}) {
      UnifiedAttentionConfig c = smallConfig(ScalarKind::F16, format, /*causal=*/false);
      c.numQueryHeads = hq;
      c.numKvHeads = hkv;
      c.headSize = 128;
      c.tileSize = 128;
      checkOnGpu(c, shape);
    }
}

// ---- Codegen: every new variant assembles for sm_80 and sm_90a. ----


TEST_CASE("ptxas assembles quantized, LSE and split-KV variants and reduce_segments for sm_80 and sm_90a",
          "[codegen][ptxas][quant]") {
  if (!attnjit::tests::havePtxas()) {
    WARN("skipped: ptxas is not on the PATH; codegen is checked without assembling");
    return;
  }
  std::vector<UnifiedAttentionConfig> configs;
  // 64- and 128-key tiles; the op API decodes quantized caches with 128, whose
  // kernels load their block numbers two tiles ahead (prefetch_indices).
  for (KvCacheFormat format : kQuantizedFormats)
    for (int tileSize : {64, 128}) {
      UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, format);
      c.numQueryHeads = 32;
      c.numKvHeads = 8;
      c.headSize = 128;
      c.tileSize = tileSize;
      configs.push_back(c);
    }
  for (KvCacheFormat format : {KvCacheFormat::Int8PerTokenHead, KvCacheFormat::Int4PerTokenHead}) {
    UnifiedAttentionConfig separate = configs[format == KvCacheFormat::Int8PerTokenHead ? 5 : 9];
    REQUIRE(separate.kvCacheFormat == format);
    separate.kvScaleLayout = attnjit::compiler::KvScaleLayout::Separate;
    configs.push_back(separate);
  }
  UnifiedAttentionConfig split = smallConfig(ScalarKind::F16, KvCacheFormat::Int4PerTokenHead);
  split.splitKv = true;
  split.outputLse = true;
  split.sinks = true;
  configs.push_back(split);
  UnifiedAttentionConfig lse = smallConfig(ScalarKind::F32, KvCacheFormat::Fp8E5M2);
  lse.outputLse = true;
  configs.push_back(lse);
  int assembled = 0;
  for (const char* arch : {"sm_80", "sm_90a"}) {
    attnjit::compiler::CompileOptions options;
    options.target = arch;
    for (const auto& config : configs) {
      INFO(config.kernelName() << " for " << arch);
      auto kernel = attnjit::compiler::buildUnifiedAttention(config);
      REQUIRE(kernel.isOk());
      auto compiled = attnjit::compiler::compileKernel(**kernel, options);
      INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
      REQUIRE(compiled.isOk());
      std::string log;
      const bool ok = attnjit::tests::assemblesWithPtxas(compiled->ptx, arch, &log);
      INFO(log);
      CHECK(ok);
      assembled += ok;
    }
    attnjit::compiler::ReduceSegmentsConfig reduce;
    reduce.outputLse = true;
    auto kernel = attnjit::compiler::buildReduceSegments(reduce);
    REQUIRE(kernel.isOk());
    auto compiled = attnjit::compiler::compileKernel(**kernel, options);
    REQUIRE(compiled.isOk());
    std::string log;
    CHECK(attnjit::tests::assemblesWithPtxas(compiled->ptx, arch, &log));
  }
  CHECK(assembled == static_cast<int>(configs.size() * 2));
}

TEST_CASE("quantized K and V tiles go from their cp.async slots straight into thread-major mma operands",
          "[codegen][quant]") {
  // The raw fp8 / int8 tiles are read from the slot in the operand layout (K:
  // 16-byte vectors along the head dimension; V: 4-byte vectors, the output
  // columns renumbered) and converted in registers: no 16-bit tile is stored
  // and read back with ldmatrix, and no byte is read on its own. The kernel
  // attribute thread_major_operands = 0 restores the conversion through shared
  // memory (which needs the larger buffer).
  // fp8 per-token-head rows are loaded as bytes and reinterpreted (bitcast)
  // before the cast: the reinterpretation happens in the operand layout too.
  auto lineOf = [](const std::string& text, const std::string& what) {
    const size_t at = text.find(what);
    if (at == std::string::npos) return std::string();
    return text.substr(at, text.find('\n', at) - at);
  };
  for (KvCacheFormat format :
       {KvCacheFormat::Fp8E4M3, KvCacheFormat::Int8PerTokenHead, KvCacheFormat::Fp8PerTokenHead}) {
    UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, format);
    c.numQueryHeads = 32;
    c.numKvHeads = 8;
    c.headSize = 128;
    c.tileSize = 128;
    INFO(c.kernelName());
    attnjit::compiler::CompileOptions options;
    options.target = "sm_90a";
    auto kernel = attnjit::compiler::buildUnifiedAttention(c);
    REQUIRE(kernel.isOk());
    auto direct = attnjit::compiler::compileKernel(**kernel, options);
    REQUIRE(direct.isOk());
    CHECK(direct->tirOptimized.find("thread_major=1, parent=#mma") != std::string::npos);  // K and Q
    CHECK(direct->tirOptimized.find("instr=[16,8], thread_major=1>") != std::string::npos);  // V and acc
    for (const char* read : {"%k_fp8 = bitcast %k_tile", "%v_fp8 = bitcast %v_tile"})
      if (format == KvCacheFormat::Fp8PerTokenHead)
        CHECK(lineOf(direct->tirOptimized, read).find("thread_major=1") != std::string::npos);
    // The raw tiles are read from their slots next to their dots: V after
    // Q·Kᵀ, where the tile IR dequantizes it, and K after the next tile's
    // copies are issued, except in the 4-byte-aligned per-token-head rows,
    // whose K is read at the top of the body, before those copies.
    const std::string& tir = direct->tirOptimized;
    const size_t kRead = tir.find("= convert_layout %k_tile"), vRead = tir.find("= convert_layout %v_tile");
    const size_t nextCopies = tir.find("%k_tile_next = load"), qk = tir.find("%qk = dot");
    REQUIRE(kRead != std::string::npos);
    REQUIRE(vRead != std::string::npos);
    REQUIRE(nextCopies != std::string::npos);
    REQUIRE(qk != std::string::npos);
    CHECK(vRead > qk);
    CHECK((kRead > nextCopies) == (format == KvCacheFormat::Fp8E4M3));
    CHECK(direct->ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans") == std::string::npos);
    CHECK(direct->ptx.find("ld.shared.v4.b32") != std::string::npos);
    CHECK(direct->ptx.find("ld.shared.u8") == std::string::npos);
    CHECK(direct->ptx.find("ld.shared.b8") == std::string::npos);

    auto viaShared = attnjit::compiler::buildUnifiedAttention(c);
    REQUIRE(viaShared.isOk());
    (*viaShared)->attrs().set("thread_major_operands", int64_t{0});
    auto converted = attnjit::compiler::compileKernel(**viaShared, options);
    REQUIRE(converted.isOk());
    CHECK(converted->tirOptimized.find("thread_major=1") == std::string::npos);
    CHECK(converted->ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans") != std::string::npos);  // V
    CHECK(converted->ptx.find("ld.shared.u8") == std::string::npos);
    // Two slots each of K and V (16 KiB apiece) either way, then the scratch
    // area: a few KiB, or the 32 KiB of a converted bf16 tile.
    CHECK(direct->sharedMemoryBytes < 80 * 1024);
    CHECK(converted->sharedMemoryBytes >= (64 + 32) * 1024);
  }
  // Prefill tiles put the warps along M, so each warp needs the whole K and V
  // tile: read into its own operand layout, every byte would be converted
  // once per warp. They keep the conversion through shared memory (sm_80 and
  // sm_90 read it with ldmatrix, sm_90a's wgmma through descriptors).
  UnifiedAttentionConfig tall = smallConfig(ScalarKind::BF16, KvCacheFormat::Fp8E4M3);
  tall.numQueryHeads = 32;
  tall.numKvHeads = 8;
  tall.headSize = 128;
  tall.blockMRows = 128;
  tall.numWarps = 8;
  for (const char* target : {"sm_90", "sm_90a"}) {
    INFO(target);
    auto tallKernel = attnjit::compiler::buildUnifiedAttention(tall);
    REQUIRE(tallKernel.isOk());
    attnjit::compiler::CompileOptions options;
    options.target = target;
    auto tallCompiled = attnjit::compiler::compileKernel(**tallKernel, options);
    REQUIRE(tallCompiled.isOk());
    CHECK(tallCompiled->tirOptimized.find("thread_major=1") == std::string::npos);
    if (std::string(target) == "sm_90a")
      CHECK(tallCompiled->ptx.find("wgmma.mma_async") != std::string::npos);
    else
      CHECK(tallCompiled->ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans") != std::string::npos);
  }
}

TEST_CASE("int4 decode reads K nibbles thread-major, and V where its rows are not 16-byte copies", "[codegen][quant]") {
  // Both nibble dots (even and odd head dims) read one K slot read in the
  // operand layout. V with separate scales (rows of D/2 bytes, 16-byte copies)
  // is unpacked in the blocked layout and goes through ldmatrix.trans; inline
  // rows (D/2 + 4 bytes, 4-byte copies) go thread-major like K.
  for (KvScaleLayout scales : {KvScaleLayout::Separate, KvScaleLayout::Inline}) {
    UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, KvCacheFormat::Int4PerTokenHead);
    c.kvScaleLayout = scales;
    c.numQueryHeads = 32;
    c.numKvHeads = 8;
    c.headSize = 128;
    c.tileSize = 128;
    INFO(c.kernelName());
    const auto compiled = compileForHopper(c);
    const std::string& tir = compiled.tirOptimized;
    auto lineOf = [&](const std::string& what) {
      const size_t at = tir.find(what);
      REQUIRE(at != std::string::npos);
      return tir.substr(at, tir.find('\n', at) - at);
    };
    for (const char* k : {"%k_even = unpack_nibbles", "%k_odd = unpack_nibbles"})
      CHECK(lineOf(k).find("thread_major=1") != std::string::npos);
    const bool vThreadMajor = scales == KvScaleLayout::Inline;
    for (const char* v : {"%v_even = unpack_nibbles", "%v_odd = unpack_nibbles"})
      CHECK((lineOf(v).find("thread_major=1") != std::string::npos) == vThreadMajor);
    CHECK((compiled.ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans") != std::string::npos) == !vThreadMajor);
    // Two nibbles per packed add, no f32 on the way.
    CHECK(compiled.ptx.find("add.bf16x2") != std::string::npos);
    // P's and the output's conversions only (the f32 path took 144).
    CHECK(attnjit::tests::countOf(compiled.ptx, "cvt.rn.bf16x2.f32") <= 16);
  }
}

TEST_CASE("per-sequence causal flags: a batch mixing causal and bidirectional sequences", "[attention][seqcausal]") {
  // The harness alternates causal (flags 1, 0, 2, 0, ...) per sequence; the
  // reference applies each sequence's own mask.
  for (ScalarKind dtype : {ScalarKind::F32, ScalarKind::BF16}) {
    UnifiedAttentionConfig c = smallConfig(dtype, KvCacheFormat::Auto);
    c.perSequenceCausal = true;
    CHECK(c.kernelName().find("_seqcausal") != std::string::npos);
    runAndCheck(c, mixedAttentionBatch(15));
    runAndCheck(c, mixedAttentionBatch(16), /*afterPasses=*/true);
    c.slidingWindow = 30;  // decoder windows for the causal ones, encoder windows for the others
    c.sinks = true;
    runAndCheck(c, mixedAttentionBatch(17));
    c.splitKv = true;
    BatchShape split = mixedAttentionBatch(18);
    split.segmentTiles = 2;
    runAndCheck(c, split);
  }
  UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, KvCacheFormat::Int8PerTokenHead);
  c.perSequenceCausal = true;
  auto kernel = attnjit::compiler::buildUnifiedAttention(c);
  REQUIRE(kernel.isOk());
  CHECK((*kernel)->parameter(6)->name() == "causal_flags");
}

TEST_CASE("GPU: per-sequence causal flags", "[gpu][seqcausal]") {
  if (!attnjit::tests::gpuPresent()) return;
  BatchShape shape;
  shape.queryLens = {1, 37, 100, 130, 5};
  shape.contextLens = {777, 0, 30, 61, 1};
  shape.seed = 19;
  UnifiedAttentionConfig c = smallConfig(ScalarKind::BF16, KvCacheFormat::Auto);
  c.numQueryHeads = 32;
  c.numKvHeads = 8;
  c.headSize = 128;
  c.perSequenceCausal = true;
  checkOnGpu(c, shape);
  c.blockMRows = 128;
  c.numWarps = 8;
  c.slidingWindow = 64;
  checkOnGpu(c, shape);
}
