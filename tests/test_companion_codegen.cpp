// Codegen of the companion kernels: they lower to PTX with 16-byte vector
// accesses where the layout allows, and ptxas (when on the PATH) assembles every
// shipped variant of specs/merge_attn_states.yaml and specs/reshape_and_cache.yaml
// for sm_80 and sm_90a (fp8 cache formats: sm_90a only; codegen's fp8 conversion
// needs sm_89+, and sm_80 refuses them with a clear error).
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <unistd.h>

#include "tests/test_tools.h"
#include "compiler/CompileDriver.h"
#include "compiler/KernelFamily.h"
#include "compiler/Spec.h"
#include "tests/test_paths.h"

using namespace attnjit;

namespace {

std::vector<compiler::Variant> shippedCompanionVariants() {
  std::vector<compiler::Variant> variants;
  for (const char* file : {"merge_attn_states.yaml", "reshape_and_cache.yaml"}) {
    auto spec = compiler::loadSpecFile(tests::sourceDir() + "/specs/" + file);
    REQUIRE(spec.isOk());
    variants.insert(variants.end(), spec->variants.begin(), spec->variants.end());
  }
  return variants;
}

// The formats that convert to fp8 in the kernel.
bool needsHardwareFp8(const compiler::Variant& variant) {
  if (variant.family != "reshape_and_cache") return false;
  const auto format = variant.cacheWrite.cacheFormat;
  return format == compiler::KvCacheFormat::Fp8E4M3 || format == compiler::KvCacheFormat::Fp8E5M2 ||
         format == compiler::KvCacheFormat::Fp8PerTokenHead;
}

std::string ptxFor(const compiler::Variant& variant, const std::string& arch) {
  auto kernel = compiler::buildVariantKernel(variant);
  REQUIRE(kernel.isOk());
  compiler::CompileOptions options;
  options.target = arch;
  auto compiled = compiler::compileKernel(**kernel, options);
  INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
  REQUIRE(compiled.isOk());
  return compiled->ptx;
}

}  // namespace

TEST_CASE("companion kernels use 16-byte vector accesses for 16-bit rows", "[codegen][merge][cache_write]") {
  for (const auto& variant : shippedCompanionVariants()) {
    const bool vectorizable = (variant.family == "merge_attn_states" && variant.merge.dtype != ir::ScalarKind::F32 &&
                               variant.merge.headSize % 8 == 0) ||
                              (variant.family == "reshape_and_cache" &&
                               variant.cacheWrite.cacheFormat == compiler::KvCacheFormat::Auto &&
                               variant.cacheWrite.headSize % 8 == 0);
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
      if (needsHardwareFp8(variant) && std::string(arch) == "sm_80") {
        // Codegen converts to fp8 with cvt.rn.satfinite (sm_89+) only; on sm_80 the
        // variant is refused with a clear error rather than miscompiled.
        auto kernel = compiler::buildVariantKernel(variant);
        REQUIRE(kernel.isOk());
        compiler::CompileOptions options;
        options.target = arch;
        auto compiled = compiler::compileKernel(**kernel, options);
        REQUIRE_FALSE(compiled.isOk());
        CHECK(compiled.diagnostic().message.find("conversion to fp8 (needs sm_89 or newer)") != std::string::npos);
        continue;
      }
      std::string log;
      const bool ok = tests::assemblesWithPtxas(ptxFor(variant, arch), arch, &log);
      INFO(log);
      CHECK(ok);
      assembled += ok;
      ++total;
    }
  WARN("ptxas assembled " << assembled << " companion kernels");
  CHECK(assembled == total);
}
