// vLLM's fp8 output (USE_FP8 with out_scale): out = e4m3(o / output_scale),
// saturating at ±448, in one launch (2D) and through split-KV's stage 2. The
// kernels on the interpreter against the float64 reference (with and without the
// pass pipeline, with per-tensor fp8 caches whose v_scale shares the row factor),
// saturation, kernel names and parameters, the targets with and without the fp8
// cvt, and [gpu] sm_80's kernels (no fp8 cvt) run by the driver's PTX JIT.
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "compiler/validation/AttentionGpu.h"
#include "compiler/validation/AttentionProblem.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/kernels/ReduceSegments.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "tests/test_attention_checks.h"
#include "tests/test_tools.h"

namespace validation = attnjit::validation;

using attnjit::compiler::BatchShape;
using attnjit::compiler::KvCacheFormat;
using attnjit::compiler::UnifiedAttentionConfig;
using attnjit::ir::ScalarKind;
using attnjit::tests::runAndCheck;
namespace compiler = attnjit::compiler;

namespace {

UnifiedAttentionConfig fp8OutputConfig(ScalarKind dtype, bool causal) {
  UnifiedAttentionConfig c;
  c.dtype = dtype;
  c.numQueryHeads = 8;
  c.numKvHeads = 2;
  c.headSize = 64;
  c.causal = causal;
  c.outputFp8 = true;
  return c;
}

// The shared mixed batch, split into segments of two tiles where a variant splits.
BatchShape mixedBatch(uint64_t seed) {
  BatchShape s = attnjit::tests::mixedAttentionBatch(seed);
  s.segmentTiles = 2;
  return s;
}

// The e4m3 bytes of ±448, e4m3fn's largest finite magnitude.
bool saturated(uint8_t byte) { return (byte & 0x7F) == 0x7E; }

}  // namespace

TEST_CASE("fp8 output: 2D and split-KV match the reference, also after the passes", "[attention][fp8out]") {
  for (ScalarKind dtype : {ScalarKind::BF16, ScalarKind::F16, ScalarKind::F32})
    for (bool causal : {true, false})
      for (bool split : {false, true}) {
        UnifiedAttentionConfig c = fp8OutputConfig(dtype, causal);
        c.splitKv = split;
        c.outputLse = split;
        runAndCheck(c, mixedBatch(11));
        runAndCheck(c, mixedBatch(12), /*afterPasses=*/true);
      }
  // With a per-tensor fp8 cache, v_scale and 1/output_scale share one row factor;
  // with sinks and 128 query rows over 4 warps (the op's prefill tiling).
  UnifiedAttentionConfig c = fp8OutputConfig(ScalarKind::BF16, true);
  c.kvCacheFormat = KvCacheFormat::Fp8E4M3;
  c.sinks = true;
  runAndCheck(c, mixedBatch(13), /*afterPasses=*/true);
  // DiffKV 192/128 over an int4 per-token-head cache (two value groups) with
  // sqrt-ALiBi, 2D and split.
  for (bool split : {false, true}) {
    c = fp8OutputConfig(ScalarKind::BF16, false);
    c.headSize = 192;
    c.valueHeadSize = 128;
    c.kvCacheFormat = KvCacheFormat::Int4PerTokenHead;
    c.alibi = true;
    c.alibiSqrt = true;
    c.splitKv = split;
    runAndCheck(c, mixedBatch(16));
  }
  c = fp8OutputConfig(ScalarKind::BF16, true);
  c.blockMRows = 128;
  c.qInShared = true;
  c.sinks = true;
  runAndCheck(c, mixedBatch(14), /*afterPasses=*/true);
}

TEST_CASE("fp8 output saturates at ±448 instead of overflowing", "[attention][fp8out]") {
  // Outputs are averages of values in (-1, 1); divided by 2^-10 the larger ones
  // pass 448. The reference is clamped the same way: check() compares them.
  for (bool split : {false, true}) {
    UnifiedAttentionConfig c = fp8OutputConfig(ScalarKind::BF16, true);
    c.splitKv = split;
    BatchShape shape = mixedBatch(15);
    shape.outputScale = 1.0 / 1024;
    const validation::AttentionRunResult result = runAndCheck(c, shape);
    int saturatedBytes = 0, finiteBytes = 0;
    for (uint8_t byte : result.output) {
      saturatedBytes += saturated(byte);
      finiteBytes += (byte & 0x7F) != 0x7F;
    }
    INFO(saturatedBytes << " of " << finiteBytes << " outputs saturated");
    CHECK(saturatedBytes > 0);
    CHECK(saturatedBytes < finiteBytes);
  }
  // The default scale (2^-8) keeps every output of this batch below 448.
  const validation::AttentionRunResult plain = runAndCheck(fp8OutputConfig(ScalarKind::BF16, true), mixedBatch(15));
  int saturatedPlain = 0;
  for (uint8_t byte : plain.output) saturatedPlain += saturated(byte);
  CHECK(saturatedPlain == 0);
}

TEST_CASE("fp8 output: kernel names, parameters and the shape key", "[attention][fp8out]") {
  UnifiedAttentionConfig c = fp8OutputConfig(ScalarKind::BF16, true);
  c.outputLse = true;
  CHECK(c.kernelName() == "unified_attention_bf16_h8kv2_d64_bs16_causal_outfp8_lse");
  auto kernel = compiler::buildUnifiedAttention(c);
  REQUIRE(kernel.isOk());
  CHECK((*kernel)->parameter(0)->name() == "out");
  CHECK((*kernel)->parameter(0)->type().scalarKind() == ScalarKind::F8E4M3);
  CHECK((*kernel)->parameter(6)->name() == "output_scale");
  CHECK((*kernel)->parameter(7)->name() == "lse");
  // Split-KV: stage 1 writes f32 scratch and takes no scale; stage 2 does both.
  c.splitKv = true;
  kernel = compiler::buildUnifiedAttention(c);
  REQUIRE(kernel.isOk());
  for (size_t i = 0; i < (*kernel)->numParameters(); ++i) CHECK((*kernel)->parameter(i)->name() != "output_scale");
  const compiler::ReduceSegmentsConfig reduce = compiler::reduceSegmentsFor(c);
  CHECK(reduce.kernelName() == "reduce_segments_bf16_h8_d64_lse_outfp8");
  auto reducer = compiler::buildReduceSegments(reduce);
  REQUIRE(reducer.isOk());
  CHECK((*reducer)->parameter(0)->type().scalarKind() == ScalarKind::F8E4M3);
  CHECK((*reducer)->parameter(4)->name() == "lse");
  CHECK((*reducer)->parameter(5)->name() == "output_scale");

  BatchShape shape;
  REQUIRE(shape.set("output_scale=0.125"));
  CHECK(shape.outputScale == 0.125);
  CHECK(shape.str().find(" output_scale=0.125") != std::string::npos);
  CHECK(BatchShape().str().find("output_scale") == std::string::npos);
  for (const char* bad : {"output_scale=0", "output_scale=-1", "output_scale=x", "output_scale=1e9"}) {
    INFO(bad);
    auto status = shape.set(bad);
    REQUIRE_FALSE(status);
    CHECK(status.diagnostic().message.find("is not a number between 1e-6 and 1e6") != std::string::npos);
  }
}

TEST_CASE("fp8 output assembles for sm_80, sm_89 and sm_90a", "[attention][fp8out][codegen]") {
  UnifiedAttentionConfig c = fp8OutputConfig(ScalarKind::BF16, true);
  compiler::CompileOptions options;
  if (!attnjit::tests::havePtxas()) {
    WARN("skipped: ptxas is not on the PATH; codegen is checked without assembling");
    return;
  }
  UnifiedAttentionConfig split = c;
  split.splitKv = true;
  for (const char* arch : {"sm_80", "sm_89", "sm_90a"}) {
    options.target = arch;
    // compileKernel runs the passes on the kernel it is given: fresh ones per target.
    auto attention = compiler::buildUnifiedAttention(c);
    auto reducer = compiler::buildReduceSegments(compiler::reduceSegmentsFor(split));
    REQUIRE(attention.isOk());
    REQUIRE(reducer.isOk());
    for (attnjit::ir::Kernel* k : {attention->get(), reducer->get()}) {
      INFO(k->name() << " for " << arch);
      auto compiled = compiler::compileKernel(*k, options);
      INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
      REQUIRE(compiled.isOk());
      // sm_80 has no fp8 cvt: codegen rounds in integer and f32 arithmetic.
      CHECK((compiled->ptx.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos) ==
            (std::string(arch) != "sm_80"));
      std::string log;
      const bool ok = attnjit::tests::assemblesWithPtxas(compiled->ptx, arch, &log);
      INFO(log);
      CHECK(ok);
    }
  }
}

TEST_CASE("GPU fp8 output from sm_80's kernels, 2D and split-KV", "[gpu][attention][fp8out]") {
  if (!attnjit::tests::gpuPresent()) return;
  // sm_80 has no fp8 cvt: its PTX rounds in integer and f32 arithmetic; the
  // driver compiles it for the local GPU.
  validation::GpuRunOptions options;
  options.target = "sm_80";
  for (ScalarKind dtype : {ScalarKind::BF16, ScalarKind::F32})
    for (bool split : {false, true}) {
      UnifiedAttentionConfig c = fp8OutputConfig(dtype, true);
      c.splitKv = split;
      auto result = validation::runUnifiedAttentionGpu(c, mixedBatch(5), options);
      INFO(c.kernelName());
      INFO((result.isOk() ? result->check.detail : result.diagnostic().str()));
      REQUIRE(result.isOk());
      CHECK(result->target == "sm_80");
      CHECK(result->check.passed);
    }
}
