// Codegen of the companion kernels: they lower to PTX with 16-byte vector
// accesses where the layout allows, and ptxas (when on the PATH) assembles every
// shipped variant of specs/merge_attn_states.yaml and specs/reshape_and_cache.yaml
// for sm_80 and sm_90a (fp8 cache formats convert with the fp8 cvt on sm_90a, in
// integer and f32 arithmetic on sm_80).
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <regex>
#include <unistd.h>

#include "tests/test_tools.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/kernels/CacheWrite.h"
#include "compiler/spec/Spec.h"
#include "tests/test_paths.h"

using namespace attnjit;
using attnjit::tests::countOf;

namespace {

std::vector<compiler::Variant> shippedCompanionVariants() {
  std::vector<compiler::Variant> variants;
  for (const char* file : {"merge_attn_states.yaml", "reshape_and_cache.yaml", "gather_cache.yaml"}) {
    auto spec = compiler::loadSpecFile(tests::sourceDir() + "/specs/" + file);
    REQUIRE(spec.isOk());
    variants.insert(variants.end(), spec->variants.begin(), spec->variants.end());
  }
  return variants;
}

// The formats that convert to fp8 in the kernel.
bool writesFp8(const compiler::Variant& variant) {
  if (variant.family != attnjit::compiler::Family::ReshapeAndCache) return false;
  const auto format = variant.cacheWrite.cacheFormat;
  return format == compiler::KvCacheFormat::Fp8E4M3 || format == compiler::KvCacheFormat::Fp8E5M2 ||
         format == compiler::KvCacheFormat::Fp8PerTokenHead;
}

// `kernel` compiled to PTX for `arch`, every stage kept.
compiler::CompiledKernel compiledFor(ir::Kernel& kernel, const std::string& arch) {
  compiler::CompileOptions options;
  options.target = arch;
  auto compiled = compiler::compileKernel(kernel, options);
  INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
  REQUIRE(compiled.isOk());
  return std::move(*compiled);
}

std::string ptxFor(const compiler::Variant& variant, const std::string& arch) {
  auto kernel = compiler::buildVariantKernel(variant);
  REQUIRE(kernel.isOk());
  return compiledFor(**kernel, arch).ptx;
}


}  // namespace

TEST_CASE("cache writes store rows in the layout they were loaded in", "[codegen][cache_write][layouts]") {
  // The rows are loaded 16 bytes per thread (8 bf16); quantized to bytes they
  // are 8 bytes per thread (int4: 4). A per-tensor fp8 row (8-byte aligned) or a
  // per-token-head row (4-byte aligned) cannot be stored in wider vectors than
  // that, so no [H, D] tile goes through shared memory: only the per-token-head
  // scale rows change layout (to their 4-byte stores). int4 splits its rows
  // into [H, D/2, 2] pairs by a reshape that keeps each element in its register
  // and sums each pair's nibbles inside the thread.
  std::regex tileConversion(R"(convert_layout [^\n]*: tile<\d+x\d+x)");
  for (auto format : {compiler::KvCacheFormat::Fp8E4M3, compiler::KvCacheFormat::Int8PerTokenHead,
                      compiler::KvCacheFormat::Fp8PerTokenHead, compiler::KvCacheFormat::Int4PerTokenHead}) {
    compiler::CacheWriteConfig config;
    config.dtype = ir::ScalarKind::BF16;
    config.cacheFormat = format;
    config.numKvHeads = 8;
    config.headSize = 128;
    INFO(config.kernelName());
    auto kernel = compiler::buildCacheWrite(config);
    REQUIRE(kernel.isOk());
    const compiler::CompiledKernel compiled = compiledFor(**kernel, "sm_90a");
    INFO(compiled.tirOptimized);
    CHECK_FALSE(std::regex_search(compiled.tirOptimized, tileConversion));
    const bool perTokenHead = format != compiler::KvCacheFormat::Fp8E4M3;
    // Two barriers per conversion: one scale row each for keys and values.
    CHECK(countOf(compiled.ptx, "bar.sync") == (perTokenHead ? 4 : 0));
    // Both sources are loaded before the first store (a value load after the
    // keys' stores would wait for their whole conversion).
    const size_t valueLoad = compiled.tirOptimized.find("%v_rows = load");
    const size_t firstStore = compiled.tirOptimized.find("store ");
    REQUIRE(valueLoad != std::string::npos);
    REQUIRE(firstStore != std::string::npos);
    CHECK(valueLoad < firstStore);
    // Each row is read in 16-byte vectors (int4 once read its even and odd
    // columns one element at a time).
    CHECK(countOf(compiled.ptx, "ld.global.v4.b32") == 2);
    if (format == compiler::KvCacheFormat::Int4PerTokenHead)
      CHECK(compiled.tirOptimized.find("reshape") != std::string::npos);
    if (format == compiler::KvCacheFormat::Int8PerTokenHead) {
      // The float-to-integer casts are cvt.rzi, which saturates and maps NaN to
      // 0 itself: no compare-and-select around them.
      CHECK(countOf(compiled.ptx, "cvt.rzi.s32.f32") >= 16);
      CHECK(countOf(compiled.ptx, "setp.nan") == 0);
    }
  }
}

TEST_CASE("companion kernels use 16-byte vector accesses for 16-bit rows", "[codegen][merge][cache_write]") {
  for (const auto& variant : shippedCompanionVariants()) {
    const bool vectorizable =
        (variant.family == attnjit::compiler::Family::MergeAttnStates && variant.merge.dtype != ir::ScalarKind::F32 &&
         variant.merge.headSize % 8 == 0) ||
        (variant.family == attnjit::compiler::Family::ReshapeAndCache &&
         variant.cacheWrite.cacheFormat == compiler::KvCacheFormat::Auto && variant.cacheWrite.headSize % 8 == 0);
    if (!vectorizable) continue;
    INFO(variant.name);
    const std::string ptx = ptxFor(variant, "sm_90a");
    CHECK(ptx.find(".entry " + variant.name) != std::string::npos);
    CHECK(ptx.find("ld.global.v4.b32") != std::string::npos);
    CHECK(ptx.find("st.global.v4.b32") != std::string::npos);
  }
}

TEST_CASE("ptxas assembles every shipped companion variant for sm_80 and sm_90a", "[codegen][ptxas]") {
  if (!tests::havePtxas()) {
    WARN("skipped: ptxas is not on the PATH; codegen is checked without assembling");
    return;
  }
  int assembled = 0, total = 0;
  for (const auto& variant : shippedCompanionVariants())
    for (const char* arch : {"sm_80", "sm_90a"}) {
      INFO(variant.name << " for " << arch);
      // Conversions to fp8 take cvt.rn.satfinite from sm_89, integer and f32
      // arithmetic before.
      const std::string ptx = ptxFor(variant, arch);
      if (writesFp8(variant))
        CHECK((ptx.find("cvt.rn.satfinite.e") != std::string::npos) == (std::string(arch) == "sm_90a"));
      std::string log;
      const bool ok = tests::assemblesWithPtxas(ptx, arch, &log);
      INFO(log);
      CHECK(ok);
      assembled += ok;
      ++total;
    }
  WARN("ptxas assembled " << assembled << " companion kernels");
  CHECK(assembled == total);
}

TEST_CASE("cache writes with per-head fp8 scales assemble", "[codegen][cache_write][ptxas]") {
  compiler::CacheWriteConfig config;
  config.cacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  config.perHeadScales = true;
  auto kernel = compiler::buildCacheWrite(config);
  REQUIRE(kernel.isOk());
  const std::string ptx = compiledFor(**kernel, "sm_90a").ptx;
  CHECK(ptx.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos);
  tests::checkAssembles(ptx, "sm_90a");
}

TEST_CASE("cache writes below 16-byte alignment access rows no wider than promised", "[codegen][cache_write][ptxas]") {
  // The widest vector load or store of the key/value rows (bf16) and of the
  // bf16 cache: 16 bytes at the default alignment, the promised alignment below.
  const std::regex vectorAccess(R"((ld|st)\.global\.v(\d)\.(b32|b16|u32|u16|f32))");
  for (int align : {16, 8, 4, 2}) {
    compiler::CacheWriteConfig config;
    config.dtype = ir::ScalarKind::BF16;
    config.numKvHeads = 8;
    config.headSize = 128;
    config.sourceAlign = align;
    config.cacheAlign = align;
    INFO(config.kernelName());
    auto kernel = compiler::buildCacheWrite(config);
    REQUIRE(kernel.isOk());
    const std::string ptx = compiledFor(**kernel, "sm_90a").ptx;
    int widest = 2;  // bytes: a scalar bf16 access
    for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), vectorAccess); it != std::sregex_iterator(); ++it) {
      const int lanes = std::stoi((*it)[2]);
      const int laneBytes = (*it)[3].str().find("32") != std::string::npos ? 4 : 2;
      widest = std::max(widest, lanes * laneBytes);
    }
    if (align >= 4 && ptx.find("ld.global.b32") != std::string::npos) widest = std::max(widest, 4);
    CHECK(widest == align);
    tests::checkAssembles(ptx, "sm_90a");
  }
}

TEST_CASE("merge_attn_states with fp8 output and a context limit assembles, and sm_80 refuses fp8", "[codegen][merge][ptxas]") {
  compiler::MergeAttnStatesConfig config;
  config.dtype = ir::ScalarKind::BF16;
  config.outputFp8 = true;
  config.contextTokenLimit = true;
  auto kernel = compiler::buildMergeAttnStates(config);
  REQUIRE(kernel.isOk());
  const std::string ptx = compiledFor(**kernel, "sm_90a").ptx;
  CHECK(ptx.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos);
  CHECK(ptx.find(".param .u32 " + config.kernelName() + "_param_8") != std::string::npos);  // prefill_tokens_with_context
  tests::checkAssembles(ptx, "sm_90a");
  const std::string ampere = compiledFor(**kernel, "sm_80").ptx;
  CHECK(ampere.find("e4m3x2") == std::string::npos);
  tests::checkAssembles(ampere, "sm_80");
}
