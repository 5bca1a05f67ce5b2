// mla_cache_write, vLLM's concat_and_cache_mla, on the CPU interpreter: the
// config (only the 512 + 64 and 256 + 64 latent widths; auto and per-tensor fp8
// caches), a hand-checked scatter with skipped slots and fp8 saturation, the
// harness against the float64 reference in every dtype, format, width and block
// sizes 16 and 64, the spec family, the op API's validation, and PTX that ptxas
// assembles (fp8 variants convert with the fp8 cvt from sm_89, in integer and f32
// arithmetic before).
#include <catch2/catch.hpp>

#include <cstring>
#include <string>

#include "compiler/ops/CompanionOps.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/validation/VariantRuns.h"
#include "compiler/validation/MlaCacheWriteProblem.h"
#include "compiler/validation/ProblemData.h"
#include "compiler/spec/Spec.h"
#include "ir/Interpreter.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "compiler/validation/reference/CompanionReference.h"
#include "tests/test_paths.h"
#include "tests/test_tools.h"

namespace support = attnjit::support;
namespace validation = attnjit::validation;

using attnjit::compiler::BatchShape;
using attnjit::compiler::KvCacheFormat;
using attnjit::compiler::MlaCacheWriteConfig;
using attnjit::ir::ScalarKind;
namespace compiler = attnjit::compiler;
namespace reference = attnjit::validation::reference;
namespace ir = attnjit::ir;
namespace ops = attnjit::ops;
namespace pd = attnjit::validation::problem_data;

namespace {

BatchShape raggedBatch(uint64_t seed) {
  BatchShape s;
  s.queryLens = {5, 1, 13, 20};
  s.contextLens = {14, 70, 3, 0};
  s.seed = seed;
  return s;
}

void checkResult(const support::Expected<validation::AttentionRunResult>& result, const std::string& what) {
  INFO(what);
  if (!result) FAIL(result.diagnostic().str());
  INFO("max abs error " << result->maxAbsError << " (tolerance " << result->tolerance << "); " << result->detail);
  CHECK(result->passed);
}

std::string validationError(const MlaCacheWriteConfig& c) {
  auto s = c.validate();
  return s ? std::string("ok") : s.diagnostic().message;
}

}  // namespace

TEST_CASE("mla_cache_write: names, widths, formats and interface", "[mla_cache_write]") {
  MlaCacheWriteConfig c;
  CHECK(c.kernelName() == "mla_cache_write_bf16_l512_r64_bs16");
  CHECK(c.cacheRowElements() == 576);
  c.cacheFormat = KvCacheFormat::Fp8E4M3;
  c.kvLoraRank = 256;
  c.blockSize = 64;
  c.numWarps = 8;
  CHECK(c.kernelName() == "mla_cache_write_bf16_fp8_e4m3_l256_r64_bs64_w8");
  CHECK(c.cacheElement() == ScalarKind::F8E4M3);
  CHECK(validationError(c) == "ok");

  MlaCacheWriteConfig bad;
  bad.kvLoraRank = 128;
  CHECK(validationError(bad) ==
        "unsupported MLA latent width kv_lora_rank + rope_dim = 128 + 64; supported: 512 + 64 and 256 + 64");
  bad = {};
  bad.ropeDim = 32;
  CHECK(validationError(bad) ==
        "unsupported MLA latent width kv_lora_rank + rope_dim = 512 + 32; supported: 512 + 64 and 256 + 64");
  bad = {};
  bad.cacheFormat = KvCacheFormat::Int8PerTokenHead;
  CHECK(validationError(bad) ==
        "kv_cache_dtype int8_per_token_head is not supported for the MLA cache; use auto, fp8_e4m3 or fp8_e5m2");
  bad = {};
  bad.dtype = ScalarKind::F8E5M2;
  CHECK(validationError(bad) == "dtype (f8e5m2) is not supported; use f32, f16 or bf16");
  bad = {};
  bad.blockSize = 0;
  auto refused = compiler::buildMlaCacheWrite(bad);
  REQUIRE_FALSE(refused);
  CHECK(refused.diagnostic().message == "block_size (0) must be between 1 and 4096");

  for (auto format : {KvCacheFormat::Auto, KvCacheFormat::Fp8E5M2}) {
    MlaCacheWriteConfig config;
    config.cacheFormat = format;
    auto built = compiler::buildMlaCacheWrite(config);
    if (!built) FAIL(built.diagnostic().str());
    const auto& kernel = **built;
    std::vector<std::string> names;
    for (size_t i = 0; i < kernel.numParameters(); ++i) names.push_back(kernel.parameter(i)->name());
    std::vector<std::string> expected = {"kv_c", "k_pe", "kv_cache", "slot_mapping", "kv_c_stride_token",
                                         "k_pe_stride_token", "cache_stride_block", "cache_stride_token"};
    if (format != KvCacheFormat::Auto) expected.insert(expected.begin() + 4, "scale");
    CHECK(names == expected);
    const ScalarKind cacheKind = format == KvCacheFormat::Auto ? ScalarKind::BF16 : ScalarKind::F8E5M2;
    CHECK(kernel.parameter(2)->type().scalarKind() == cacheKind);
    CHECK(ir::verifyKernel(kernel).isOk());
    const std::string text = ir::printKernel(kernel);
    auto parsed = ir::parseModule(text, "mla_cache_write.tir");
    if (!parsed) FAIL(parsed.diagnostic().str());
    CHECK(ir::printKernel(*(*parsed)->kernels()[0]) == text);
  }
}

TEST_CASE("mla_cache_write: concatenation, skipped slots and fp8 saturation by hand", "[mla_cache_write]") {
  // Four tokens into a 2-block cache of block size 2 (4 slots): tokens 0 and 2
  // are padding (slot -1), token 1 goes to slot 3, token 3 to slot 0; slots 1
  // and 2 stay poisoned. e4m3 with scale 0.5: kv_c = t + 0.25·l (l < 4, then 0),
  // k_pe = -(t + 1)·128 (saturates to -448 after dividing by the scale).
  for (auto format : {KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3}) {
    MlaCacheWriteConfig config;
    config.dtype = ScalarKind::F32;
    config.cacheFormat = format;
    config.kvLoraRank = 256;
    config.blockSize = 2;
    auto kernel = compiler::buildMlaCacheWrite(config);
    REQUIRE(kernel.isOk());
    const int64_t T = 4, L = 256, R = 64, W = L + R;
    const ScalarKind cacheKind = config.cacheElement();
    std::vector<uint8_t> kvC(static_cast<size_t>(T * L * 4)), kPe(static_cast<size_t>(T * R * 4));
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t l = 0; l < L; ++l)
        pd::setFloat(kvC, ScalarKind::F32, static_cast<size_t>(t * L + l),
                     l < 4 ? static_cast<double>(t) + 0.25 * static_cast<double>(l) : 0.0);
      for (int64_t r = 0; r < R; ++r)
        pd::setFloat(kPe, ScalarKind::F32, static_cast<size_t>(t * R + r), -128.0 * static_cast<double>(t + 1));
    }
    std::vector<uint8_t> cache = pd::poisonedBuffer(cacheKind, static_cast<size_t>(4 * W));
    const int64_t slots[] = {-1, 3, -1, 0};
    std::vector<uint8_t> slotBytes(sizeof slots);
    std::memcpy(slotBytes.data(), slots, sizeof slots);
    std::vector<uint8_t> scaleBytes(4);
    const float half = 0.5f;
    std::memcpy(scaleBytes.data(), &half, 4);
    ir::InterpreterMemory memory;
    std::vector<ir::KernelArgument> args = {ir::PointerArg{memory.map(kvC.data(), kvC.size(), "kv_c")},
                                            ir::PointerArg{memory.map(kPe.data(), kPe.size(), "k_pe")},
                                            ir::PointerArg{memory.map(cache.data(), cache.size(), "kv_cache")},
                                            ir::PointerArg{memory.map(slotBytes.data(), slotBytes.size(), "slots")}};
    if (format != KvCacheFormat::Auto) args.push_back(ir::PointerArg{memory.map(scaleBytes.data(), 4, "scale")});
    for (int64_t stride : {L, R, 2 * W, W}) args.push_back(stride);
    ir::LaunchGrid grid;
    grid.x = T;
    auto ran = ir::interpretKernel(**kernel, grid, args, memory);
    INFO((ran ? std::string() : ran.diagnostic().str()));
    REQUIRE(ran.isOk());
    const double divisor = format == KvCacheFormat::Auto ? 1.0 : 0.5;
    for (int64_t slot = 0; slot < 4; ++slot) {
      INFO("slot " << slot << ", " << compiler::kvCacheFormatName(format));
      const int64_t token = slot == 3 ? 1 : slot == 0 ? 3 : -1;
      for (int64_t i = 0; i < W; ++i) {
        const size_t index = static_cast<size_t>(slot * W + i);
        if (token < 0) {
          REQUIRE(pd::getBits(cache, cacheKind, index) == pd::poisonBits(cacheKind));
          continue;
        }
        double want = i < L ? (i < 4 ? static_cast<double>(token) + 0.25 * static_cast<double>(i) : 0.0) / divisor
                            : -128.0 * static_cast<double>(token + 1) / divisor;
        if (format != KvCacheFormat::Auto) want = std::max(want, -448.0);  // saturation
        INFO("element " << i);
        REQUIRE(pd::getFloat(cache, cacheKind, index) == want);
      }
    }
  }
}

TEST_CASE("mla_cache_write matches the reference (dtypes, formats, widths, block sizes)", "[mla_cache_write]") {
  const ScalarKind dtype = GENERATE(ScalarKind::F32, ScalarKind::F16, ScalarKind::BF16);
  const KvCacheFormat format = GENERATE(KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2);
  for (int kvLoraRank : {512, 256})
    for (int blockSize : {16, 64}) {
      MlaCacheWriteConfig config;
      config.dtype = dtype;
      config.cacheFormat = format;
      config.kvLoraRank = kvLoraRank;
      config.blockSize = blockSize;
      const BatchShape shape = raggedBatch(static_cast<uint64_t>(kvLoraRank + blockSize));
      checkResult(validation::runMlaCacheWriteInterpreted(config, shape), config.kernelName());
    }
}

TEST_CASE("spec family mla_cache_write", "[mla_cache_write][specs]") {
  auto spec = compiler::loadSpecText(
      "family: mla_cache_write\nparams:\n  dtype: bf16\n  kv_cache_dtype: [auto, fp8]\n  kv_lora_rank: [512, 256]\n"
      "  rope_dim: 64\n  block_size: 64\n",
      "mla.yaml");
  if (!spec) FAIL(spec.diagnostic().str());
  REQUIRE(spec->variants.size() == 4);
  CHECK(spec->variants[2].name == "mla_cache_write_bf16_fp8_e4m3_l512_r64_bs64");
  CHECK(compiler::formatVariantParams(spec->variants[3]) ==
        "dtype=bf16 kv_cache_dtype=fp8_e4m3 kv_lora_rank=256 rope_dim=64 block_size=64 num_warps=4");
  auto kernel = compiler::buildVariantKernel(spec->variants[3]);
  REQUIRE(kernel.isOk());
  CHECK((*kernel)->name() == spec->variants[3].name);
  checkResult(validation::runVariantInterpreted(spec->variants[0], spec->shape), spec->variants[0].name);

  auto width = compiler::loadSpecText(
      "family: mla_cache_write\nparams:\n  dtype: bf16\n  kv_lora_rank: [512, 384]\n  rope_dim: 64\n"
      "  block_size: 16\n",
      "bad.yaml");
  REQUIRE_FALSE(width);
  CHECK(width.diagnostic().str() ==
        "bad.yaml:4:23: error: invalid variant (dtype=bf16 kv_lora_rank=384 rope_dim=64 block_size=16): unsupported "
        "MLA latent width kv_lora_rank + rope_dim = 384 + 64; supported: 512 + 64 and 256 + 64");
}

TEST_CASE("mla_cache_write op: arguments are validated before the GPU is touched", "[mla_cache_write][op]") {
  ops::MlaCacheWriteParams p;
  p.dtype = ScalarKind::BF16;
  p.cacheFormat = KvCacheFormat::Fp8E4M3;
  p.kvLoraRank = 512;
  p.ropeDim = 64;
  p.blockSize = 64;
  p.numTokens = 7;
  p.kvC = 0x10000;
  p.kPe = 0x10000 + 1024;
  p.kvCache = 0x20000;
  p.slotMapping = 0x30000;
  p.scale = 0x40000;
  p.kvCStrideToken = 576;
  p.kPeStrideToken = 576;
  p.cacheStrideBlock = 64 * 576;
  p.cacheStrideToken = 576;
  REQUIRE(ops::validateMlaCacheWrite(p).isOk());
  CHECK(ops::selectMlaCacheWriteVariant(p).kernelName() == "mla_cache_write_bf16_fp8_e4m3_l512_r64_bs64");
  auto message = [](const ops::MlaCacheWriteParams& q) {
    auto s = ops::validateMlaCacheWrite(q);
    return s ? std::string("ok") : s.diagnostic().message;
  };
  ops::MlaCacheWriteParams bad = p;
  bad.kvLoraRank = 448;
  CHECK(message(bad) == "mla cache write: unsupported MLA latent width kv_lora_rank + rope_dim = 448 + 64; "
                        "supported: 512 + 64 and 256 + 64");
  bad = p;
  bad.scale = 0;
  CHECK(message(bad).find("'scale'") != std::string::npos);
  bad = p;
  bad.cacheFormat = KvCacheFormat::Auto;
  CHECK(message(bad) == "mla cache write: scale is given, but the cache format auto has no per-tensor scale "
                        "(only fp8_e4m3 and fp8_e5m2 do)");
  bad.scale = 0;
  CHECK(message(bad) == "ok");
  bad = p;
  bad.cacheStrideToken = 560;
  CHECK(message(bad) == "mla cache write: cache_stride_token (560) is smaller than a cache row, kv_lora_rank + "
                        "rope_dim = 576");
  bad = p;
  bad.kPeStrideToken = 0;
  CHECK(message(bad) == "mla cache write: k_pe_stride_token (0) must be positive");
  bad = p;
  bad.kvCStrideToken = 580;
  CHECK(message(bad).find("kv_c_stride_token") != std::string::npos);
  bad = p;
  bad.kPe = 0x10000 + 8;
  CHECK(message(bad).find("k_pe") != std::string::npos);
  bad = p;
  bad.numTokens = -1;
  CHECK(message(bad).find("num_tokens (-1)") != std::string::npos);
}

TEST_CASE("mla_cache_write: ptxas for sm_80 and sm_90a", "[mla_cache_write][codegen][ptxas]") {
  auto spec = compiler::loadSpecFile(attnjit::tests::sourceDir() + "/specs/mla_cache_write.yaml");
  if (!spec) FAIL(spec.diagnostic().str());
  REQUIRE(spec->variants.size() >= 4);
  const bool ptxas = attnjit::tests::havePtxas();
  if (!ptxas) WARN("ptxas is not on the PATH; PTX is checked without assembling");
  int assembled = 0, expected = 0;
  for (const auto& variant : spec->variants) {
    auto kernel = compiler::buildVariantKernel(variant);
    REQUIRE(kernel.isOk());
    const bool fp8 = variant.mlaCacheWrite.cacheFormat != KvCacheFormat::Auto;
    for (const char* arch : {"sm_80", "sm_90a"}) {
      INFO(variant.name << " for " << arch);
      compiler::CompileOptions options;
      options.target = arch;
      auto compiled = compiler::compileKernel(**kernel, options);
      INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
      REQUIRE(compiled.isOk());
      CHECK(compiled->ptx.find(".entry " + variant.name) != std::string::npos);
      if (fp8)
        CHECK((compiled->ptx.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos) ==
              (std::string(arch) == "sm_90a"));
      if (variant.mlaCacheWrite.dtype != ScalarKind::F32 && !fp8) {
        CHECK(compiled->ptx.find("ld.global.v4.b32") != std::string::npos);
        CHECK(compiled->ptx.find("st.global.v4.b32") != std::string::npos);
      }
      if (!ptxas) continue;
      ++expected;
      std::string log;
      const bool ok = attnjit::tests::assemblesWithPtxas(compiled->ptx, arch, &log);
      INFO(log);
      CHECK(ok);
      assembled += ok;
    }
  }
  if (ptxas) CHECK(assembled == expected);
}
