// f32 attention on the TF32 tensor cores (the default: mma m16n8k8 with operands
// rounded by cvt.rna.tf32) and in exact f32 (fp32_precision: ieee, FMAs): the
// spec field, numerics on the interpreter against the float64 reference (which
// rounds q, k and v as the kernel does), PTX for sm_80 and sm_90a, and the GPU.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "compiler/kernels/UnifiedAttention.h"
#include "compiler/spec/Spec.h"
#include "compiler/validation/AttentionGpu.h"
#include "compiler/validation/AttentionProblem.h"
#include "tests/test_attention_checks.h"
#include "tests/test_tools.h"

namespace compiler = attnjit::compiler;
namespace validation = attnjit::validation;
using attnjit::compiler::BatchShape;
using attnjit::compiler::Fp32Precision;
using attnjit::compiler::UnifiedAttentionConfig;
using attnjit::ir::ScalarKind;
using attnjit::tests::compileAttention;
using attnjit::tests::countOf;
using attnjit::tests::gqaAttentionConfig;
using attnjit::tests::mixedAttentionBatch;
using attnjit::tests::runAndCheck;

namespace {

UnifiedAttentionConfig f32Config(Fp32Precision precision, int headSize, int tileSize) {
  UnifiedAttentionConfig c = gqaAttentionConfig(ScalarKind::F32, true, headSize);
  c.fp32Precision = precision;
  c.tileSize = tileSize;
  return c;
}

std::vector<float> outputFloats(const validation::AttentionRunResult& r) {
  std::vector<float> values(r.output.size() / sizeof(float));
  std::memcpy(values.data(), r.output.data(), values.size() * sizeof(float));
  return values;
}

}  // namespace

TEST_CASE("spec: fp32_precision picks TF32 tensor cores or exact f32 dots", "[spec][tf32]") {
  const std::string base =
      "family: unified_attention\nparams:\n  dtype: f32\n  num_query_heads: 8\n  num_kv_heads: 2\n"
      "  head_size: 64\n  block_size: 16\n  causal: true\n";
  auto spec = compiler::loadSpecText(base + "  fp32_precision: [tf32, ieee]\n", "p.yaml");
  INFO((spec.isOk() ? std::string() : spec.diagnostic().str()));
  REQUIRE(spec.isOk());
  REQUIRE(spec->variants.size() == 2);
  CHECK(spec->variants[0].attention.fp32Precision == Fp32Precision::Tf32);
  CHECK(spec->variants[1].attention.fp32Precision == Fp32Precision::Ieee);
  CHECK(spec->variants[0].name == "unified_attention_f32_h8kv2_d64_bs16_causal");
  CHECK(spec->variants[1].name == "unified_attention_f32_h8kv2_d64_bs16_causal_ieee");
  CHECK(compiler::formatSpecParams(spec->variants[0].attention).find("fp32_precision") == std::string::npos);
  CHECK(compiler::formatSpecParams(spec->variants[1].attention).find(" fp32_precision=ieee") != std::string::npos);

  // The field only concerns f32: a half-precision kernel is the same either way.
  std::string halfText = base;
  halfText.replace(halfText.find("dtype: f32"), 10, "dtype: bf16");
  auto half = compiler::loadSpecText(halfText + "  fp32_precision: ieee\n", "p.yaml");
  REQUIRE(half.isOk());
  CHECK(half->variants[0].name == "unified_attention_bf16_h8kv2_d64_bs16_causal");
  CHECK(half->variants[0].attention.tensorCoreDots());

  auto bad = compiler::loadSpecText(base + "  fp32_precision: tf16\n", "p.yaml");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.diagnostic().str() == "p.yaml:9:19: error: 'fp32_precision' must be tf32 or ieee, got 'tf16'");
  // MLA decode takes the field too.
  auto mla = compiler::loadSpecText(
      "family: mla_decode\nparams:\n  dtype: f32\n  fp32_precision: [tf32, ieee]\n  num_heads: 16\n"
      "  kv_lora_rank: 256\n  rope_dim: 64\n  block_size: 16\n",
      "m.yaml");
  INFO((mla.isOk() ? std::string() : mla.diagnostic().str()));
  REQUIRE(mla.isOk());
  REQUIRE(mla->variants.size() == 2);
  CHECK(mla->variants[0].name == "mla_decode_f32_h16_l256_r64_bs16");
  CHECK(mla->variants[1].name == "mla_decode_f32_h16_l256_r64_bs16_ieee");
  auto nested = compiler::loadSpecText(base + "  fp32_precision: {a: 1}\n", "p.yaml");
  REQUIRE_FALSE(nested.isOk());
  CHECK_THAT(nested.diagnostic().str(), Catch::StartsWith("p.yaml:9:"));
}

TEST_CASE("f32 attention on TF32 dots matches the float64 reference with tf32-rounded operands",
          "[attention][tf32]") {
  const BatchShape shape = mixedAttentionBatch(11);
  for (int headSize : {64, 80}) {
    for (int tile : {16, 32, 64}) {
      const UnifiedAttentionConfig tf32 = f32Config(Fp32Precision::Tf32, headSize, tile);
      const UnifiedAttentionConfig exact = f32Config(Fp32Precision::Ieee, headSize, tile);
      const auto tf32Run = runAndCheck(tf32, shape, true);
      const auto exactRun = runAndCheck(exact, shape, true);
      // TF32 rounding is visible: the two outputs differ by far more than exact
      // f32 arithmetic would (its tolerance), yet stay within the tf32 bound.
      const std::vector<float> a = outputFloats(tf32Run), b = outputFloats(exactRun);
      REQUIRE(a.size() == b.size());
      double largest = 0;
      for (size_t i = 0; i < a.size(); ++i) largest = std::max(largest, std::fabs(double(a[i]) - double(b[i])));
      INFO("tf32 vs exact f32: max difference " << largest << " (tolerances " << tf32Run.tolerance << ", "
                                                << exactRun.tolerance << ")");
      CHECK(largest > exactRun.tolerance);
      CHECK(largest < 2 * tf32Run.tolerance);
      CHECK(tf32Run.tolerance > exactRun.tolerance);
    }
  }
  // Prefill tiles (8 warps of 16 rows), split-KV, LSE and a window on TF32.
  UnifiedAttentionConfig prefill = f32Config(Fp32Precision::Tf32, 96, 32);
  prefill.blockMRows = 128;
  prefill.numWarps = 8;
  prefill.slidingWindow = 40;
  prefill.outputLse = true;
  runAndCheck(prefill, shape, true);
  UnifiedAttentionConfig split = f32Config(Fp32Precision::Tf32, 128, 32);
  split.splitKv = true;
  split.softcap = 30;
  runAndCheck(split, shape, true);
  // Exact f32 tiles hold one token's heads, not 16 rows: 1 row per program for
  // MHA, 4 at GQA 4 (prefill-like chunks then take many programs).
  UnifiedAttentionConfig mha = f32Config(Fp32Precision::Ieee, 64, 64);
  mha.numQueryHeads = mha.numKvHeads = 4;
  mha.numWarps = 2;
  CHECK(mha.blockM() == 1);
  runAndCheck(mha, shape, true);
  CHECK(f32Config(Fp32Precision::Ieee, 64, 64).blockM() == 4);
  CHECK(f32Config(Fp32Precision::Tf32, 64, 64).blockM() == 16);
  UnifiedAttentionConfig tooFew = f32Config(Fp32Precision::Ieee, 64, 64);
  tooFew.blockMRows = 2;  // half a token's heads
  auto refused = compiler::buildUnifiedAttention(tooFew);
  REQUIRE_FALSE(refused.isOk());
  CHECK_THAT(refused.diagnostic().str(),
             Catch::Contains("block_m (2) must be a power of two between 4 (one token's 4 query heads) and 256"));
  // The op's exact-f32 prefill tiling: 32 rows over 4 warps, 16-key tiles.
  UnifiedAttentionConfig exactPrefill = f32Config(Fp32Precision::Ieee, 128, 16);
  exactPrefill.blockMRows = 32;
  runAndCheck(exactPrefill, shape, true);
  // A per-token-head int8 cache under f32 queries: only q is rounded.
  UnifiedAttentionConfig quantized = f32Config(Fp32Precision::Tf32, 64, 32);
  quantized.kvCacheFormat = compiler::KvCacheFormat::Int8PerTokenHead;
  runAndCheck(quantized, shape, true);
}

TEST_CASE("TF32 attention kernels assemble for sm_80 and sm_90a", "[codegen][tf32][ptxas]") {
  std::vector<UnifiedAttentionConfig> configs;
  for (int tile : {16, 32, 64}) configs.push_back(f32Config(Fp32Precision::Tf32, 128, tile));
  UnifiedAttentionConfig mha = f32Config(Fp32Precision::Tf32, 80, 32);  // padded head, one head per KV head
  mha.numQueryHeads = mha.numKvHeads = 4;
  configs.push_back(mha);
  UnifiedAttentionConfig prefill = f32Config(Fp32Precision::Tf32, 128, 32);
  prefill.blockMRows = 128;
  prefill.numWarps = 8;
  configs.push_back(prefill);
  UnifiedAttentionConfig fp8Cache = f32Config(Fp32Precision::Tf32, 128, 32);
  fp8Cache.kvCacheFormat = compiler::KvCacheFormat::Fp8PerTokenHead;
  configs.push_back(fp8Cache);
  for (const UnifiedAttentionConfig& config : configs) {
    for (const char* target : {"sm_80", "sm_90a"}) {
      INFO(config.kernelName() << " for " << target);
      const std::string ptx = compileAttention(config, target).ptx;
      // Two m16n8k8 per k16 step of each dot; no f32 FMA dot remains (the
      // softmax's own FMAs are few: far fewer than one per product).
      const int tf32Mmas = countOf(ptx, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32");
      CHECK(tf32Mmas > 0);
      CHECK(tf32Mmas % 2 == 0);
      CHECK(countOf(ptx, "cvt.rna.tf32.f32") > 0);
      CHECK(countOf(ptx, "wgmma") == 0);
      CHECK(countOf(ptx, "fma.rn.f32") < tf32Mmas * 4);
      attnjit::tests::checkAssembles(ptx, target);
    }
  }
}

TEST_CASE("GPU: f32 attention on TF32 tensor cores and in exact f32", "[gpu]") {
  if (!attnjit::tests::gpuPresent()) return;
  std::vector<BatchShape> shapes = {mixedAttentionBatch(5)};
  BatchShape decode;  // long decodes: many KV tiles, the loop's steady state
  decode.queryLens = {1, 1, 1, 1, 1};
  decode.contextLens = {4095, 1000, 33, 2047, 517};
  decode.seed = 9;
  shapes.push_back(decode);
  for (Fp32Precision precision : {Fp32Precision::Tf32, Fp32Precision::Ieee}) {
    for (int headSize : {64, 80, 128}) {
      for (int tile : {16, 32, 64}) {
        UnifiedAttentionConfig config = f32Config(precision, headSize, tile);
        if (precision == Fp32Precision::Ieee && tile == 64) config.numWarps = 2;  // the op's exact-f32 decode
        if (precision == Fp32Precision::Ieee && headSize == 64) config.numQueryHeads = config.numKvHeads = 4;  // 1 row
        for (const BatchShape& shape : shapes) {
          INFO(config.kernelName() << " on " << shape.str());
          auto result = validation::runUnifiedAttentionGpu(config, shape, {});
          INFO((result.isOk() ? result->check.detail : result.diagnostic().str()));
          REQUIRE(result.isOk());
          CHECK(result->check.passed);
        }
      }
    }
  }
  // The op API with either precision, as an engine calls it.
  for (Fp32Precision precision : {Fp32Precision::Tf32, Fp32Precision::Ieee}) {
    UnifiedAttentionConfig config = f32Config(precision, 128, 32);
    config.numQueryHeads = 32;
    config.numKvHeads = 8;
    auto run = validation::runPagedAttentionOpGpu(config, decode, {});
    INFO((run.isOk() ? run->run.check.detail : run.diagnostic().str()));
    REQUIRE(run.isOk());
    CHECK(run->run.check.passed);
    CHECK((run->kernelName.find("_ieee") != std::string::npos) == (precision == Fp32Precision::Ieee));
  }
}
