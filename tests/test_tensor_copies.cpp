// TMA copies of the paged cache (unified attention's `tma`): the builder reads
// the unmasked loop's K and V as load_tensor tiles; the sm_90a passes keep
// them, code generation copies them with cp.async.bulk.tensor from one
// producer thread and records the tensor map the launch encodes
// (runtime/TensorMap.h's recipes); other targets get the masked loads they
// stand for. The GPU side is test_gpu_attention.cpp's "[tma]" case.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "compiler/driver/CompileDriver.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "compiler/validation/AttentionProblem.h"
#include "runtime/TensorMap.h"
#include "test_attention_checks.h"
#include "test_tools.h"

namespace compiler = attnjit::compiler;
namespace runtime = attnjit::runtime;
namespace tests = attnjit::tests;
using attnjit::ir::ScalarKind;

namespace {

compiler::UnifiedAttentionConfig tmaConfig(bool causal, int headSize, int blockSize) {
  compiler::UnifiedAttentionConfig c = tests::hopperPrefillTiling();
  c.dtype = ScalarKind::BF16;
  c.numQueryHeads = 8;
  c.numKvHeads = 2;
  c.headSize = headSize;
  c.blockSize = blockSize;
  c.causal = causal;
  c.warpSpecialize = true;
  c.tensorMemoryAccelerator = true;
  return c;
}

// Prefill rows whose unmasked loops run several tiles, a decode and a chunk.
compiler::BatchShape prefillBatch() {
  compiler::BatchShape shape;
  shape.queryLens = {200, 1, 77};
  shape.contextLens = {0, 300, 130};
  shape.seed = 5;
  return shape;
}

compiler::CompiledKernel compileFor(const compiler::UnifiedAttentionConfig& config, const std::string& target) {
  return tests::compileBuilt(compiler::buildUnifiedAttention(config), target);
}

size_t parameterCount(const compiler::UnifiedAttentionConfig& config) {
  auto kernel = compiler::buildUnifiedAttention(config);
  REQUIRE(kernel.isOk());
  return (*kernel)->numParameters();
}

size_t parameterIndex(const compiler::UnifiedAttentionConfig& config, const std::string& name) {
  auto kernel = compiler::buildUnifiedAttention(config);
  REQUIRE(kernel.isOk());
  for (size_t i = 0; i < (*kernel)->numParameters(); ++i)
    if ((*kernel)->parameter(i)->name() == name) return i;
  FAIL("no parameter " << name);
  return 0;
}

}  // namespace

TEST_CASE("tma: the cache tiles read what the gathered loads read, as built and after either target's passes",
          "[tma][attention]") {
  for (bool causal : {true, false})
    for (int headSize : {64, 128})
      for (int blockSize : {16, 32}) {
        const compiler::UnifiedAttentionConfig tma = tmaConfig(causal, headSize, blockSize);
        compiler::UnifiedAttentionConfig plain = tma;
        plain.tensorMemoryAccelerator = false;
        INFO(tma.kernelName());
        auto reference = attnjit::validation::runUnifiedAttentionInterpreted(plain, prefillBatch());
        REQUIRE(reference.isOk());
        REQUIRE(reference->passed);
        for (int run = 0; run < 3; ++run) {
          INFO((run == 0 ? "as built" : run == 1 ? "after the sm_90a passes (kept)" : "after the passes (expanded)"));
          auto result =
              attnjit::validation::runUnifiedAttentionInterpreted(tma, prefillBatch(), run > 0, /*wgmmaTarget=*/run == 1);
          INFO((result.isOk() ? result->detail : result.diagnostic().str()));
          REQUIRE(result.isOk());
          CHECK(result->passed);
          CHECK(result->output == reference->output);
        }
      }
}

TEST_CASE("tma: sm_90a copies the cache tiles with TMA boxes and records their tensor map", "[tma][codegen]") {
  const compiler::UnifiedAttentionConfig config = tmaConfig(true, 128, 16);
  const compiler::CompiledKernel compiled = compileFor(config, "sm_90a");
  // K and V, before the loop and at its top.
  CHECK(tests::countOf(compiled.tirOptimized, "= load_tensor ") == 4);
  // 4 loads × 4 blocks of 16 keys × 2 column blocks of 64 elements.
  CHECK(tests::countOf(compiled.ptx, "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes") ==
        32);
  CHECK(tests::countOf(compiled.ptx, "mbarrier.arrive.expect_tx.shared.b64") == 4);
  const size_t first = parameterCount(config);
  CHECK(compiled.ptx.find(".param .align 64 .b8 " + compiled.name + "_param_" + std::to_string(first) + "[128]") !=
        std::string::npos);
  tests::checkAssembles(compiled.ptx, "sm_90a");

  auto maps = runtime::parseTensorMapRecipes(compiled.tensorMaps);
  INFO(compiled.tensorMaps);
  REQUIRE(maps.isOk());
  CHECK(maps->first == static_cast<int>(first));
  REQUIRE(maps->maps.size() == 1);  // K and V are one tensor
  auto p = [&](const std::string& name) { return "p" + std::to_string(parameterIndex(config, name)) + ":8"; };
  CHECK(maps->maps[0].str() == "bf16 address=" + p("kv_cache") + " dims=c128,c2,c16,c2,c2147483647 strides=" +
                                   p("kv_stride_head") + "," + p("kv_stride_token") + "," + p("kv_stride_kv") + "," +
                                   p("kv_stride_block") + " box=64,1,16,1,1 swizzle=128");

  // Head size 64 is one column block; blocks of 32 keys two entries a tile.
  const compiler::CompiledKernel narrow = compileFor(tmaConfig(false, 64, 32), "sm_90a");
  CHECK(tests::countOf(narrow.ptx, "cp.async.bulk.tensor.5d") == 4 * 2 * 1);
  CHECK(narrow.tensorMaps.find("box=64,1,32,1,1") != std::string::npos);
  tests::checkAssembles(narrow.ptx, "sm_90a");
}

TEST_CASE("tma: other targets and unfit tilings read the cache tiles as masked loads", "[tma][codegen]") {
  const compiler::CompiledKernel ampere = compileFor(tmaConfig(true, 128, 16), "sm_80");
  CHECK(ampere.tirOptimized.find("= load_tensor ") == std::string::npos);
  CHECK(ampere.ptx.find("cp.async.bulk.tensor") == std::string::npos);
  CHECK(ampere.tensorMaps.empty());
  tests::checkAssembles(ampere.ptx, "sm_80");
  // Blocks of 8 tokens are 8 rows, still a whole swizzle atom: TMA. Head size
  // 96 pads to 128 columns, of which the tensor has 96: TMA zero-fills the rest.
  compiler::UnifiedAttentionConfig odd = tmaConfig(true, 96, 8);
  CHECK(compileFor(odd, "sm_90a").ptx.find("cp.async.bulk.tensor") != std::string::npos);
  // Head size 32: rows of 64 bytes, half a swizzle span, so the builder
  // gathers the tiles as without tma.
  odd.headSize = 32;
  const compiler::CompiledKernel gathered = compileFor(odd, "sm_90a");
  CHECK(gathered.ptx.find("cp.async.bulk.tensor") == std::string::npos);
  CHECK(gathered.tensorMaps.empty());
}

TEST_CASE("tma: the validation names what tma needs", "[tma][attention]") {
  compiler::UnifiedAttentionConfig c = tmaConfig(true, 128, 16);
  c.warpSpecialize = false;
  auto status = c.validate();
  REQUIRE_FALSE(status.isOk());
  CHECK(status.diagnostic().message ==
        "tma needs warp_specialize: true (a producer thread issues the TMA copies)");
}

TEST_CASE("tensor map recipes: text round trip, the launch's arguments and bad text", "[runtime][tma]") {
  const std::string line =
      "bf16 address=p2:8 dims=c128,p7:4,c16,c2,c2147483647 strides=p15:8,p14:8,p13:8,p12:8 box=64,1,16,1,1 swizzle=128";
  auto recipe = runtime::parseTensorMapRecipe(line);
  REQUIRE(recipe.isOk());
  CHECK(recipe->str() == line);
  auto all = runtime::parseTensorMapRecipes("first=16\n" + line);
  REQUIRE(all.isOk());
  CHECK(all->first == 16);
  CHECK(runtime::tensorMapRecipesText(*all) == "first=16\n" + line);

  // Arguments as a launch passes them: params[i] points at argument i's bytes.
  std::vector<uint64_t> storage(16, 0);
  std::vector<void*> params(16);
  for (size_t i = 0; i < params.size(); ++i) params[i] = &storage[i];
  storage[2] = 0x7f0000001000;
  const int32_t heads = 8;
  std::memcpy(&storage[7], &heads, sizeof heads);
  storage[15] = 128;             // head stride, elements
  storage[14] = 8 * 128;         // token stride
  storage[13] = 16 * 8 * 128;    // K/V stride
  storage[12] = 2 * 16 * 8 * 128;
  const runtime::TensorMapShape shape = runtime::tensorMapShapeFor(*recipe, params.data());
  CHECK(shape.str() == "bf16 [128, 8, 16, 2, 2147483647] strides [256, 2048, 32768, 65536] box [64, 1, 16, 1, 1] "
                       "swizzle 128B");
  CHECK(shape.address == 0x7f0000001000);
  CHECK(runtime::validateTensorMap(shape).isOk());
  storage[14] = 8 * 128 + 4;  // rows 8 bytes off the 16-byte grid: no map, with the rule
  CHECK_THAT(runtime::validateTensorMap(runtime::tensorMapShapeFor(*recipe, params.data())).message(),
             Catch::Contains("dimension 2's stride (2056 bytes) must be a multiple of 16"));

  auto message = [](const std::string& text) {
    auto parsed = runtime::parseTensorMapRecipes(text);
    return parsed.isOk() ? std::string("ok") : parsed.diagnostic().message;
  };
  CHECK_THAT(message("first=x\n" + line), Catch::Contains("the first line must be first=N"));
  CHECK_THAT(message("first=2\n" + line), Catch::Contains("parameter 2 is not one of the 2 ordinary parameters"));
  CHECK_THAT(message("first=16\nbf16 address=c5 dims=c1 strides= box=8 swizzle=0"),
             Catch::Contains("the address must be a pointer parameter"));
  CHECK_THAT(message("first=16\nbf16 address=p1:8 dims=c1,c2 strides=p3:8 box=8,1,1 swizzle=0"),
             Catch::Contains("do not agree on a rank"));
  CHECK_THAT(message("first=16\nbf16 address=p1:8 dims=c1 strides= box=8 swizzle=48"),
             Catch::Contains("the swizzle is 0, 32, 64 or 128 bytes"));
  CHECK_THAT(message("first=16\nbf16 address=p1:3 dims=c1 strides= box=8 swizzle=0"),
             Catch::Contains("the address must be a pointer parameter"));
  CHECK_THAT(message("first=16\nf64 address=p1:8 dims=c1 strides= box=8 swizzle=0"),
             Catch::Contains("unknown element type"));
  CHECK_THAT(message("first=16\nbf16 address=p1:8 dims=c99999999999999999999 strides= box=8 swizzle=0"),
             Catch::Contains("bad extent"));
}
