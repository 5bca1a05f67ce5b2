// convert_cache (vLLM's convert_fp8): the kernel on the interpreter against the
// float64 reference, bit for bit, both directions, both fp8 formats and every
// wide dtype, narrow alignment and count promises; names, validation and spec
// fields; the op's variant choice and argument checks; ptxas; the GPU run.
#include <catch2/catch.hpp>

#include <limits>
#include <string>

#include "compiler/driver/CompileDriver.h"
#include "compiler/kernels/ConvertCache.h"
#include "compiler/ops/CompanionOps.h"
#include "compiler/spec/Spec.h"
#include "compiler/validation/ConvertCacheProblem.h"
#include "compiler/validation/reference/CompanionReference.h"
#include "tests/test_paths.h"
#include "tests/test_tools.h"

using namespace attnjit;
using compiler::BatchShape;
using compiler::ConvertCacheConfig;
using compiler::KvCacheFormat;
using ir::ScalarKind;

namespace {

BatchShape convertBatch(uint64_t seed) {
  BatchShape shape;
  shape.queryLens = {1, 7};
  shape.contextLens = {300, 64};
  shape.seed = seed;
  return shape;
}

void runChecked(const ConvertCacheConfig& config, const BatchShape& shape) {
  INFO(config.kernelName() << " on " << shape.str());
  auto result = validation::runConvertCacheInterpreted(config, shape);
  if (!result) FAIL(result.diagnostic().str());
  INFO(result->detail);
  CHECK(result->passed);
}

std::string ptxFor(const ConvertCacheConfig& config, const std::string& arch) {
  auto kernel = compiler::buildConvertCache(config);
  REQUIRE(kernel.isOk());
  compiler::CompileOptions options;
  options.target = arch;
  auto compiled = compiler::compileKernel(**kernel, options);
  INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
  REQUIRE(compiled.isOk());
  return compiled->ptx;
}

}  // namespace

TEST_CASE("reference: convert_fp8 divides on the way to fp8 and multiplies on the way back", "[convert_cache]") {
  CHECK(validation::reference::referenceConvertFp8(3.0, 0.5, true) == 6.0);
  CHECK(validation::reference::referenceConvertFp8(3.0, 0.5, false) == 1.5);
}

TEST_CASE("convert_cache: converts bit for bit on the interpreter", "[convert_cache]") {
  for (KvCacheFormat format : {KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2})
    for (ScalarKind dtype : {ScalarKind::F32, ScalarKind::F16, ScalarKind::BF16})
      for (bool toFp8 : {true, false}) {
        ConvertCacheConfig config;
        config.dtype = dtype;
        config.cacheFormat = format;
        config.toFp8 = toFp8;
        runChecked(config, convertBatch(3));
      }
  // The op's narrow variants (pointers off 16 bytes, counts not multiples of
  // 16) and other block sizes: the masked tail stays exact.
  ConvertCacheConfig config;
  for (int alignment : {1, 2, 8}) {
    config.alignment = alignment;
    config.countDivisibility = alignment;
    runChecked(config, convertBatch(4));
  }
  config = ConvertCacheConfig{};
  config.toFp8 = false;
  for (int block : {256, 65536}) {
    config.blockElements = block;
    runChecked(config, convertBatch(5));
  }
}

TEST_CASE("convert_cache: names, validation and spec fields", "[convert_cache]") {
  ConvertCacheConfig config;
  CHECK(config.kernelName() == "convert_cache_bf16_to_fp8_e4m3");
  config.toFp8 = false;
  config.cacheFormat = KvCacheFormat::Fp8E5M2;
  config.dtype = ScalarKind::F16;
  config.alignment = 4;
  config.countDivisibility = 2;
  CHECK(config.kernelName() == "convert_cache_fp8_e5m2_to_f16_a4_n2");
  CHECK(config.srcElement() == ScalarKind::F8E5M2);
  CHECK(config.dstElement() == ScalarKind::F16);
  config = ConvertCacheConfig{};
  config.cacheFormat = KvCacheFormat::Auto;
  CHECK(config.validate().diagnostic().message ==
        "kv_cache_dtype auto is not supported by convert_cache; use fp8_e4m3 or fp8_e5m2");
  config = ConvertCacheConfig{};
  config.blockElements = 100;
  CHECK(config.validate().diagnostic().message ==
        "block_elements (100) must be a power of two between 256 and 65536");
  config = ConvertCacheConfig{};
  config.alignment = 32;
  CHECK(config.validate().diagnostic().message == "alignment (32) must be a power of two between 1 and 16");
  config = ConvertCacheConfig{};
  config.countDivisibility = 3;
  CHECK(config.validate().diagnostic().message == "count_divisibility (3) must be a power of two between 1 and 16");
  config = ConvertCacheConfig{};
  config.dtype = ScalarKind::I8;
  CHECK_FALSE(config.validate().isOk());

  auto spec = compiler::loadSpecFile(tests::sourceDir() + "/specs/convert_cache.yaml");
  REQUIRE(spec.isOk());
  REQUIRE(spec->variants.size() == 12);
  CHECK(spec->variants[1].name == "convert_cache_fp8_e4m3_to_bf16");
  CHECK(compiler::formatSpecParams(spec->variants[1].convertCache) ==
        "dtype=bf16 kv_cache_dtype=fp8_e4m3 to_fp8=false block_elements=4096 num_warps=4");
  auto bad = compiler::loadSpecText("family: convert_cache\nparams:\n  dtype: bf16\n  kv_cache_dtype: fp8_e4m3\n"
                                    "  to_fp8: sometimes\n",
                                    "c.yaml");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.diagnostic().str() == "c.yaml:5:11: error: 'to_fp8' must be true or false, got 'sometimes'");
  auto missing = compiler::loadSpecText("family: convert_cache\nparams:\n  dtype: bf16\n  kv_cache_dtype: fp8_e4m3\n",
                                        "c.yaml");
  REQUIRE_FALSE(missing.isOk());
  CHECK(missing.diagnostic().str().find("missing required field 'to_fp8'") != std::string::npos);
}

TEST_CASE("convert_cache op: variants follow the pointers and the count, arguments are checked", "[convert_cache][op]") {
  ops::ConvertCacheParams p;
  p.numElements = 1 << 20;
  p.src = 0x100000;
  p.dst = 0x800000;
  auto message = [](const ops::ConvertCacheParams& params) {
    support::Status s = ops::validateConvertCache(params);
    return s ? std::string("ok") : s.diagnostic().message;
  };
  CHECK(message(p) == "ok");
  CHECK(ops::selectConvertCacheVariant(p).kernelName() == "convert_cache_bf16_to_fp8_e4m3");
  // A bf16 view starting 2 bytes in, an fp8 one 1 byte in, an odd count: narrower
  // vectors, never an error.
  p.src = 0x100002;
  CHECK(ops::selectConvertCacheVariant(p).kernelName() == "convert_cache_bf16_to_fp8_e4m3_b1024_a2");
  p.dst = 0x800001;
  p.numElements = 1001;
  CHECK(ops::selectConvertCacheVariant(p).kernelName() == "convert_cache_bf16_to_fp8_e4m3_b1024_a1_n1");
  CHECK(message(p) == "ok");
  p.src = 0x100001;  // not a bf16 address
  CHECK(message(p).find("src") != std::string::npos);
  p.src = 0x100000;
  p.dst = 0x100010;  // inside the source's 2002 bytes
  CHECK(message(p) == "convert cache: src and dst overlap; the conversion changes the element size, so it cannot "
                      "run in place");
  p.src = 0xFFFFFFFFFFFFFC00ull;  // both ranges end past 2^64: they overlap, no wrap hides it
  p.dst = 0xFFFFFFFFFFFFFF00ull;
  CHECK(message(p).find("overlap") != std::string::npos);
  p.src = 0x100000;
  p.dst = 0x800000;
  p.scale = 0;
  CHECK(message(p) == "convert cache: scale (0.000000) must be finite and not zero");
  p.scale = std::numeric_limits<float>::quiet_NaN();
  CHECK(message(p).find("must be finite") != std::string::npos);
  p.scale = 2;
  p.numElements = -1;
  CHECK(message(p) == "convert cache: num_elements (-1) must be between 0 and 2^39");
  p.numElements = 10;
  p.dst = 0;
  CHECK(message(p).find("dst") != std::string::npos);
  p.numElements = 0;  // nothing to convert: nothing to check past the variant
  CHECK(message(p) == "ok");
  p.cacheFormat = KvCacheFormat::Int8PerTokenHead;
  CHECK(message(p) ==
        "convert cache: kv_cache_dtype int8_per_token_head is not supported by convert_cache; use fp8_e4m3 or "
        "fp8_e5m2");
}

TEST_CASE("convert_cache kernels assemble for sm_89 and sm_90a", "[convert_cache][ptxas]") {
  for (KvCacheFormat format : {KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2})
    for (bool toFp8 : {true, false})
      for (int alignment : {16, 1}) {
        ConvertCacheConfig config;
        config.cacheFormat = format;
        config.toFp8 = toFp8;
        config.alignment = alignment;
        config.countDivisibility = alignment;
        if (alignment < 16) config.blockElements = 1024;
        INFO(config.kernelName());
        for (const char* target : {"sm_89", "sm_90a"}) {
          const std::string ptx = ptxFor(config, target);
          // With 16-byte vectors no tile changes layout between the load and
          // the store (no shared memory); scalar accesses convert through it.
          if (alignment == 16) CHECK(ptx.find(".shared") == std::string::npos);
          tests::checkAssembles(ptx, target);
        }
      }
}

TEST_CASE("convert_cache on the GPU matches the float64 reference", "[gpu][convert_cache]") {
  if (!tests::gpuPresent()) return;
  validation::GpuRunOptions options;
  options.timedIterations = 5;
  for (KvCacheFormat format : {KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2})
    for (ScalarKind dtype : {ScalarKind::BF16, ScalarKind::F32})
      for (bool toFp8 : {true, false})
        for (int alignment : {16, 1}) {
          ConvertCacheConfig config;
          config.dtype = dtype;
          config.cacheFormat = format;
          config.toFp8 = toFp8;
          config.alignment = alignment;
          config.countDivisibility = alignment;
          auto run = validation::runConvertCacheGpu(config, convertBatch(6), options);
          if (!run) FAIL(run.diagnostic().str());
          INFO(config.kernelName() << ": " << run->check.detail);
          CHECK(run->check.passed);
        }
}
