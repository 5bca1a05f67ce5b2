// gather_cache (vLLM's cp_gather_cache and gather_and_maybe_dequant_cache): the
// kernel on the interpreter against the float64 reference, bit for bit, across
// formats, entry widths, block sizes and start positions; names, validation,
// spec fields and the op's argument checks; the GPU run.
#include <catch2/catch.hpp>

#include <string>

#include "compiler/kernels/GatherCache.h"
#include "compiler/ops/CompanionOps.h"
#include "compiler/spec/Spec.h"
#include "compiler/validation/GatherCacheProblem.h"
#include "compiler/validation/reference/CompanionReference.h"
#include "tests/test_paths.h"
#include "tests/test_tools.h"

using namespace attnjit;
using compiler::BatchShape;
using compiler::GatherCacheConfig;
using compiler::KvCacheFormat;
using ir::ScalarKind;

namespace {

BatchShape gatherBatch(uint64_t seed) {
  BatchShape shape;
  shape.queryLens = {5, 40, 17, 1, 9};
  shape.contextLens = {30, 0, 75, 200, 3};
  shape.seed = seed;
  return shape;
}

void runChecked(const GatherCacheConfig& config, const BatchShape& shape) {
  INFO(config.kernelName() << " on " << shape.str());
  auto result = validation::runGatherCacheInterpreted(config, shape);
  if (!result) FAIL(result.diagnostic().str());
  INFO(result->detail);
  CHECK(result->passed);
}

}  // namespace

TEST_CASE("reference: the gather reads each sequence's rows from its start, scaled", "[gather_cache]") {
  validation::reference::GatherCacheInputs in;
  in.entrySize = 2;
  in.rows = {{1, 2, 3, 4, 5, 6}, {10, 20}};
  in.starts = {1, 0};
  in.counts = {2, 1};
  in.scale = 0.5;
  CHECK(validation::reference::referenceGatherCache(in) == std::vector<double>{1.5, 2, 2.5, 3, 5, 10});
}

TEST_CASE("gather_cache: copies and dequantizes bit for bit on the interpreter", "[gather_cache]") {
  for (KvCacheFormat format : {KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2}) {
    for (ScalarKind dtype : {ScalarKind::F32, ScalarKind::F16, ScalarKind::BF16}) {
      for (bool starts : {false, true}) {
        GatherCacheConfig config;
        config.dtype = dtype;
        config.cacheFormat = format;
        config.seqStarts = starts;
        runChecked(config, gatherBatch(7));
      }
    }
  }
  // Widths: DeepSeek's 576, 256 + 64, odd and tiny rows; blocks of 1, 5 and 64
  // tokens; 16 rows per program and one; many sequences (the binary search).
  GatherCacheConfig config;
  for (int entry : {320, 100, 1}) {
    config.entrySize = entry;
    runChecked(config, gatherBatch(8));
  }
  config.entrySize = 576;
  for (int block : {1, 5, 64}) {
    config.blockSize = block;
    config.seqStarts = true;
    runChecked(config, gatherBatch(9));
  }
  config.blockTokens = 16;
  runChecked(config, gatherBatch(10));
  // Narrower row-stride promises (the op's choice for strides 16 does not divide).
  config.entrySize = 100;
  for (int divisibility : {1, 4}) {
    config.strideDivisibility = divisibility;
    runChecked(config, gatherBatch(13));
  }
  config.strideDivisibility = 16;
  config.entrySize = 576;
  config.blockTokens = 1;
  BatchShape many;
  for (int s = 0; s < 37; ++s) {
    many.queryLens.push_back(1 + s % 4);
    many.contextLens.push_back((s * 13) % 50);
  }
  many.seed = 11;
  runChecked(config, many);
}

TEST_CASE("gather_cache: names, validation and spec fields", "[gather_cache]") {
  GatherCacheConfig config;
  CHECK(config.kernelName() == "gather_cache_bf16_e576_bs16");
  config.cacheFormat = KvCacheFormat::Fp8E4M3;
  config.seqStarts = true;
  config.blockTokens = 16;
  CHECK(config.kernelName() == "gather_cache_bf16_fp8_e4m3_e576_bs16_starts_t16");
  config.cacheFormat = KvCacheFormat::Int8PerTokenHead;
  CHECK(config.validate().diagnostic().message ==
        "kv_cache_dtype int8_per_token_head is not supported by gather_cache; use auto, fp8_e4m3 or fp8_e5m2");
  config = GatherCacheConfig{};
  config.entrySize = 5000;
  CHECK(config.validate().diagnostic().message == "entry_size (5000) must be between 1 and 4096");
  config.entrySize = 576;
  config.blockTokens = 3;
  CHECK(config.validate().diagnostic().message == "block_tokens (3) must be a power of two between 1 and 64");

  auto spec = compiler::loadSpecFile(tests::sourceDir() + "/specs/gather_cache.yaml");
  REQUIRE(spec.isOk());
  REQUIRE(spec->variants.size() == 4);
  CHECK(spec->variants[3].name == "gather_cache_bf16_fp8_e4m3_e576_bs16_starts");
  CHECK(compiler::formatSpecParams(spec->variants[3].gatherCache) ==
        "dtype=bf16 kv_cache_dtype=fp8_e4m3 entry_size=576 block_size=16 seq_starts=true block_tokens=8 num_warps=4");
  auto bad = compiler::loadSpecText("family: gather_cache\nparams:\n  dtype: bf16\n  entry_size: 576\n  block_size: 16\n"
                                    "  seq_starts: often\n",
                                    "g.yaml");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.diagnostic().str() == "g.yaml:6:15: error: 'seq_starts' must be true or false, got 'often'");
}

TEST_CASE("gather_cache op: arguments are validated before the GPU is touched", "[gather_cache][op]") {
  ops::GatherCacheParams p;
  p.entrySize = 576;
  p.blockSize = 16;
  p.numSeqs = 2;
  p.numTokens = 10;
  p.dst = 0x10000;
  p.cache = 0x20000;
  p.blockTable = 0x30000;
  p.cuSeqLens = 0x40000;
  p.dstStrideToken = p.cacheStrideToken = 576;
  p.cacheStrideBlock = 16 * 576;
  p.blockTableStride = 8;
  auto message = [](const ops::GatherCacheParams& params) {
    support::Status s = ops::validateGatherCache(params);
    return s ? std::string("ok") : s.diagnostic().message;
  };
  CHECK(message(p) == "ok");
  CHECK(ops::selectGatherCacheVariant(p).kernelName() == "gather_cache_bf16_e576_bs16");
  p.seqStarts = 0x50000;
  CHECK(ops::selectGatherCacheVariant(p).kernelName() == "gather_cache_bf16_e576_bs16_starts");
  p.scale = 0x60000;
  CHECK(message(p) == "gather cache: scale is given, but the cache format auto has no per-tensor scale (only "
                      "fp8_e4m3 and fp8_e5m2 do)");
  p.cacheFormat = KvCacheFormat::Fp8E4M3;
  CHECK(message(p) == "ok");
  p.scale = 0;
  CHECK(message(p).find("scale") != std::string::npos);
  p.scale = 0x60000;
  p.dstStrideToken = 500;
  CHECK(message(p) == "gather cache: dst_stride_token (500) and cache_stride_token (576) must be at least "
                      "entry_size (576): rows would overlap");
  p.dstStrideToken = 580;  // legal, and rows then move 4 elements at a time
  CHECK(message(p) == "ok");
  CHECK(ops::selectGatherCacheVariant(p).kernelName() == "gather_cache_bf16_fp8_e4m3_e576_bs16_starts_sd4");
  p.dstStrideToken = 576;
  p.numSeqs = 0;
  CHECK(message(p) == "gather cache: num_seqs (0) must be at least 1");
  p.numSeqs = 2;
  p.dst = 0x10004;
  CHECK(message(p).find("dst") != std::string::npos);
  p.dst = 0x10000;
  p.numTokens = 0;  // nothing to gather: nothing to check past the variant
  p.cache = 0;
  CHECK(message(p) == "ok");
}

TEST_CASE("gather_cache on the GPU matches the float64 reference", "[gpu][gather_cache]") {
  if (!tests::gpuPresent()) return;
  validation::GpuRunOptions options;
  options.timedIterations = 5;
  for (KvCacheFormat format : {KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3}) {
    for (bool starts : {false, true}) {
      GatherCacheConfig config;
      config.cacheFormat = format;
      config.seqStarts = starts;
      auto run = validation::runGatherCacheGpu(config, gatherBatch(12), options);
      if (!run) FAIL(run.diagnostic().str());
      INFO(config.kernelName() << ": " << run->check.detail);
      CHECK(run->check.passed);
    }
  }
}
