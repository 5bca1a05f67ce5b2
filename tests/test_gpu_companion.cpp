// [gpu] The companion kernels (merge_attn_states, reshape_and_cache) JIT-compiled
// for the local GPU and checked against their float64 references on poisoned
// buffers, in every dtype and cache format. Skips with a visible message where no
// CUDA driver or GPU is present.
#include <catch2/catch.hpp>

#include "tests/test_tools.h"
#include "compiler/validation/CacheWriteProblem.h"
#include "compiler/validation/MergeAttnStatesProblem.h"
#include "runtime/Driver.h"

using namespace attnjit;

namespace {
compiler::BatchShape raggedBatch() {
  compiler::BatchShape s;
  s.queryLens = {37, 1, 130, 5, 300};
  s.contextLens = {77, 300, 0, 61, 17};
  s.seed = 13;
  return s;
}

void expectPassed(const support::Expected<validation::GpuRunResult>& result, const std::string& name) {
  INFO(name);
  INFO((result.isOk() ? result->check.detail : result.diagnostic().str()));
  REQUIRE(result.isOk());
  CHECK(result->check.passed);
}
}  // namespace

TEST_CASE("GPU merge_attn_states across dtypes, head sizes and LSE output", "[gpu][merge]") {
  if (!tests::gpuPresent()) return;
  for (auto dtype : {ir::ScalarKind::BF16, ir::ScalarKind::F16, ir::ScalarKind::F32})
    for (int headSize : {64, 80, 128, 256})
      for (bool outputLse : {true, false}) {
        compiler::MergeAttnStatesConfig c;
        c.dtype = dtype;
        c.headSize = headSize;
        c.numHeads = 6;
        c.outputLse = outputLse;
        expectPassed(validation::runMergeAttnStatesGpu(c, raggedBatch(), {}), c.kernelName());
      }
}

TEST_CASE("GPU merge_attn_states with fp8 output and tokens without context", "[gpu][merge]") {
  if (!tests::gpuPresent()) return;
  for (auto dtype : {ir::ScalarKind::BF16, ir::ScalarKind::F32})
    for (bool outputFp8 : {false, true})
      for (bool contextTokenLimit : {false, true}) {
        if (!outputFp8 && !contextTokenLimit) continue;
        compiler::MergeAttnStatesConfig c;
        c.dtype = dtype;
        c.headSize = 128;
        c.numHeads = 6;
        c.outputFp8 = outputFp8;
        c.contextTokenLimit = contextTokenLimit;
        expectPassed(validation::runMergeAttnStatesGpu(c, raggedBatch(), {}), c.kernelName());
      }
}

TEST_CASE("GPU reshape_and_cache in every cache format", "[gpu][cache_write]") {
  if (!tests::gpuPresent()) return;
  for (auto format : {compiler::KvCacheFormat::Auto, compiler::KvCacheFormat::Fp8E4M3, compiler::KvCacheFormat::Fp8E5M2,
                      compiler::KvCacheFormat::Int8PerTokenHead, compiler::KvCacheFormat::Fp8PerTokenHead,
                      compiler::KvCacheFormat::Int4PerTokenHead})
    for (auto dtype : {ir::ScalarKind::BF16, ir::ScalarKind::F16, ir::ScalarKind::F32})
      for (int headSize : {64, 80, 128, 256}) {
        compiler::CacheWriteConfig c;
        c.dtype = dtype;
        c.cacheFormat = format;
        c.headSize = headSize;
        c.numKvHeads = headSize == 256 ? 8 : 4;
        c.blockSize = headSize == 80 ? 32 : 16;
        expectPassed(validation::runCacheWriteGpu(c, raggedBatch(), {}), c.kernelName());
      }
}

TEST_CASE("GPU fp8 cache writes and merges from sm_80's kernels (no fp8 cvt)", "[gpu][cache_write][merge]") {
  if (!tests::gpuPresent()) return;
  // The driver compiles sm_80's PTX for the local GPU: the software rounding runs there.
  validation::GpuRunOptions sm80;
  sm80.target = "sm_80";
  for (auto format : {compiler::KvCacheFormat::Fp8E4M3, compiler::KvCacheFormat::Fp8E5M2,
                      compiler::KvCacheFormat::Fp8PerTokenHead})
    for (auto dtype : {ir::ScalarKind::BF16, ir::ScalarKind::F32}) {
      compiler::CacheWriteConfig c;
      c.dtype = dtype;
      c.cacheFormat = format;
      auto result = validation::runCacheWriteGpu(c, raggedBatch(), sm80);
      if (result.isOk()) CHECK(result->target == "sm_80");
      expectPassed(result, c.kernelName() + " for sm_80");
    }
  compiler::MergeAttnStatesConfig merge;
  merge.outputFp8 = true;
  auto merged = validation::runMergeAttnStatesGpu(merge, raggedBatch(), sm80);
  if (merged.isOk()) CHECK(merged->target == "sm_80");
  expectPassed(merged, merge.kernelName() + " for sm_80");
}

TEST_CASE("GPU reshape_and_cache with a fp8 scale per KV head", "[gpu][cache_write]") {
  if (!tests::gpuPresent()) return;
  for (auto format : {compiler::KvCacheFormat::Fp8E4M3, compiler::KvCacheFormat::Fp8E5M2}) {
    compiler::CacheWriteConfig c;
    c.cacheFormat = format;
    c.numKvHeads = 13;
    c.headSize = 128;
    c.perHeadScales = true;
    expectPassed(validation::runCacheWriteGpu(c, raggedBatch(), {}), c.kernelName());
  }
}

TEST_CASE("GPU reshape_and_cache with separate per-token-head scales", "[gpu][cache_write][sepscales]") {
  if (!tests::gpuPresent()) return;
  for (auto format : {compiler::KvCacheFormat::Int8PerTokenHead, compiler::KvCacheFormat::Fp8PerTokenHead,
                      compiler::KvCacheFormat::Int4PerTokenHead}) {
    compiler::CacheWriteConfig c;
    c.cacheFormat = format;
    c.numKvHeads = 8;
    c.headSize = 128;
    c.scaleLayout = compiler::KvScaleLayout::Separate;
    expectPassed(validation::runCacheWriteGpu(c, raggedBatch(), {}), c.kernelName());
  }
}

TEST_CASE("GPU reshape_and_cache with rows below 16-byte alignment", "[gpu][cache_write]") {
  if (!tests::gpuPresent()) return;
  // The harness gives these variants token strides that are an odd multiple of
  // their alignment, so an access wider than the variant promises faults.
  for (auto format : {compiler::KvCacheFormat::Auto, compiler::KvCacheFormat::Fp8E4M3,
                      compiler::KvCacheFormat::Int8PerTokenHead, compiler::KvCacheFormat::Int4PerTokenHead})
    for (int headSize : {46, 128})
      for (int sourceAlign : {2, 4, 8}) {
        if (headSize * 2 % sourceAlign != 0) continue;  // a head's row must keep the alignment
        compiler::CacheWriteConfig c;
        c.dtype = ir::ScalarKind::BF16;
        c.cacheFormat = format;
        c.headSize = headSize;
        c.numKvHeads = 13;
        c.sourceAlign = sourceAlign;
        expectPassed(validation::runCacheWriteGpu(c, raggedBatch(), {}), c.kernelName());
      }
}
