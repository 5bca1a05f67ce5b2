// The companion kernels of unified attention — merge_attn_states and the KV cache
// write (reshape_and_cache) — on the CPU interpreter against their float64
// references, plus their configurations and spec families.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "compiler/ops/CompanionOps.h"
#include "compiler/validation/CacheWriteProblem.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/validation/MergeAttnStatesProblem.h"
#include "compiler/spec/Spec.h"
#include "ir/Interpreter.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "compiler/validation/reference/CompanionReference.h"

using attnjit::compiler::BatchShape;
using attnjit::compiler::CacheWriteConfig;
using attnjit::compiler::KvCacheFormat;
using attnjit::compiler::MergeAttnStatesConfig;
using attnjit::ir::ScalarKind;
namespace compiler = attnjit::compiler;
namespace support = attnjit::support;
namespace validation = attnjit::validation;
namespace reference = attnjit::validation::reference;

namespace {

// Ragged: 19 tokens (not a multiple of any BLOCK_TOKENS), in three sequences with
// contexts that end mid-block.
BatchShape raggedBatch(uint64_t seed) {
  BatchShape s;
  s.queryLens = {5, 1, 13};
  s.contextLens = {14, 40, 3};
  s.seed = seed;
  return s;
}

void checkResult(const support::Expected<validation::AttentionRunResult>& result, const std::string& what) {
  INFO(what);
  if (!result) FAIL(result.diagnostic().str());
  INFO("max abs error " << result->maxAbsError << " (tolerance " << result->tolerance << "); " << result->detail);
  CHECK(result->passed);
}

template <typename Config>
std::string validationError(const Config& c) {
  auto s = c.validate();
  return s ? std::string("ok") : s.diagnostic().message;
}

}  // namespace

// ---- merge_attn_states ----------------------------------------------------------

TEST_CASE("merge reference: weights, infinities and both sides empty", "[merge]") {
  const double inf = std::numeric_limits<double>::infinity();
  reference::MergeInputs in;
  in.numTokens = 4;
  in.numHeads = 1;
  in.headSize = 1;
  in.prefixOutput = {1, 1, 1, 0.5};
  in.suffixOutput = {-1, -1, -1, 2};
  in.prefixLse = {std::log(1.0), inf, -inf, -inf};
  in.suffixLse = {std::log(3.0), 1.5, -inf, inf};
  const auto out = reference::referenceMergeAttnStates(in);
  CHECK(out.output[0] == Approx(0.25 * 1 + 0.75 * -1));
  CHECK(out.lse[0] == Approx(std::log(4.0)));
  CHECK(out.output[1] == -1);  // +inf prefix is an empty prefix
  CHECK(out.lse[1] == 1.5);
  CHECK(out.output[2] == 1);   // both empty: the prefix output, LSE -inf
  CHECK(out.lse[2] == -inf);
  CHECK(out.output[3] == 0.5);  // -inf and +inf: both empty
  CHECK(out.lse[3] == -inf);
}

TEST_CASE("merge_attn_states: names, validation and interface", "[merge]") {
  MergeAttnStatesConfig c;
  CHECK(c.kernelName() == "merge_attn_states_bf16_h32_d128_lse");
  c.dtype = ScalarKind::F16;
  c.headSize = 80;
  c.outputLse = false;
  c.blockTokens = 32;
  c.numWarps = 8;
  CHECK(c.kernelName() == "merge_attn_states_f16_h32_d80_nolse_t32_w8");
  CHECK(c.headSizePadded() == 128);
  CHECK(compiler::mergeAttnStatesGridX(c, 65) == 3);

  MergeAttnStatesConfig bad;
  bad.dtype = ScalarKind::F8E4M3;
  CHECK(validationError(bad) == "dtype (f8e4m3) is not supported; use f32, f16 or bf16");
  bad = {};
  bad.blockTokens = 12;
  CHECK(validationError(bad) == "block_tokens (12) must be a power of two between 1 and 256");
  bad = {};
  bad.headSize = 0;
  CHECK(validationError(bad) == "head_size (0) must be between 1 and 1024");
  bad = {};
  bad.numHeads = 0;
  CHECK(validationError(bad) == "num_heads (0) must be between 1 and 65535");
  auto refused = compiler::buildMergeAttnStates(bad);
  REQUIRE_FALSE(refused);
  CHECK(refused.diagnostic().message == "num_heads (0) must be between 1 and 65535");

  for (bool lse : {true, false}) {
    MergeAttnStatesConfig config;
    config.outputLse = lse;
    auto built = compiler::buildMergeAttnStates(config);
    if (!built) FAIL(built.diagnostic().str());
    const auto& kernel = **built;
    REQUIRE(kernel.numParameters() == (lse ? 13u : 12u));
    CHECK(kernel.parameter(0)->name() == "output");
    CHECK(kernel.parameter(1)->name() == (lse ? "output_lse" : "prefix_output"));
    CHECK(kernel.parameterAttrs(0).getInt("align") == 16);
    CHECK(kernel.parameter(kernel.numParameters() - 1)->name() == "s_stride_head");
    CHECK(kernel.parameterAttrs(kernel.numParameters() - 1).getInt("divisibility") == 8);
    CHECK(attnjit::ir::verifyKernel(kernel).isOk());
    // The text form round-trips.
    const std::string text = attnjit::ir::printKernel(kernel);
    auto parsed = attnjit::ir::parseModule(text, "merge.tir");
    if (!parsed) FAIL(parsed.diagnostic().str());
    CHECK(attnjit::ir::printKernel(*(*parsed)->kernels()[0]) == text);
  }
}

TEST_CASE("merge_attn_states matches the reference (dtypes, head sizes, LSE output)", "[merge]") {
  const ScalarKind dtype = GENERATE(ScalarKind::F32, ScalarKind::F16, ScalarKind::BF16);
  const int headSize = GENERATE(64, 80, 128, 256);
  const bool outputLse = GENERATE(true, false);
  MergeAttnStatesConfig config;
  config.dtype = dtype;
  config.headSize = headSize;
  config.numHeads = 3;
  config.outputLse = outputLse;
  checkResult(validation::runMergeAttnStatesInterpreted(config, raggedBatch(static_cast<uint64_t>(headSize))),
              config.kernelName());
}

TEST_CASE("merge_attn_states: fp8 output and tokens without a prefix state", "[merge]") {
  const ScalarKind dtype = GENERATE(ScalarKind::F32, ScalarKind::BF16);
  const bool outputFp8 = GENERATE(false, true);
  const bool contextTokenLimit = GENERATE(false, true);
  const bool outputLse = GENERATE(true, false);
  if (!outputFp8 && !contextTokenLimit) return;  // the case above
  MergeAttnStatesConfig config;
  config.dtype = dtype;
  config.headSize = 80;
  config.numHeads = 3;
  config.outputLse = outputLse;
  config.outputFp8 = outputFp8;
  config.contextTokenLimit = contextTokenLimit;
  checkResult(validation::runMergeAttnStatesInterpreted(config, raggedBatch(7)), config.kernelName());
}

TEST_CASE("merge_attn_states: a token past prefill_tokens_with_context copies the suffix exactly", "[merge]") {
  // One head, D = 4, two tokens; token 1 has no context. Its prefix LSE and row
  // are NaN (never read), its suffix LSE +inf (copied as it is).
  MergeAttnStatesConfig config;
  config.dtype = ScalarKind::F32;
  config.numHeads = 1;
  config.headSize = 4;
  config.contextTokenLimit = true;
  auto kernel = compiler::buildMergeAttnStates(config);
  if (!kernel) FAIL(kernel.diagnostic().str());
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> output(8, -7), outputLse(2, -7);
  std::vector<float> prefix = {1, 2, 3, 4, nan, nan, nan, nan}, suffix = {5, 6, 7, 8, 0.5f, -0.25f, 3, -1};
  std::vector<float> prefixLse = {0, nan}, suffixLse = {0, inf};
  attnjit::ir::InterpreterMemory memory;
  std::vector<attnjit::ir::KernelArgument> args = {
      attnjit::ir::PointerArg{memory.map(output.data(), 32, "output")},
      attnjit::ir::PointerArg{memory.map(outputLse.data(), 8, "output_lse")},
      attnjit::ir::PointerArg{memory.map(prefix.data(), 32, "prefix_output")},
      attnjit::ir::PointerArg{memory.map(prefixLse.data(), 8, "prefix_lse")},
      attnjit::ir::PointerArg{memory.map(suffix.data(), 32, "suffix_output")},
      attnjit::ir::PointerArg{memory.map(suffixLse.data(), 8, "suffix_lse")},
      int64_t{2}, int64_t{1},  // num_tokens, prefill_tokens_with_context
      int64_t{4}, int64_t{4}, int64_t{4}, int64_t{4}, int64_t{4}, int64_t{4}};
  attnjit::ir::LaunchGrid grid;
  grid.x = compiler::mergeAttnStatesGridX(config, 2);
  grid.y = 1;
  auto status = attnjit::ir::interpretKernel(**kernel, grid, args, memory);
  if (!status) FAIL(status.diagnostic().str());
  // Token 0: equal LSEs, the mean of the rows; LSE log 2.
  CHECK(output[0] == Approx(3).epsilon(1e-6));
  CHECK(output[3] == Approx(6).epsilon(1e-6));
  CHECK(outputLse[0] == Approx(std::log(2.0)).epsilon(1e-6));
  for (int d = 0; d < 4; ++d) CHECK(output[4 + d] == suffix[4 + d]);
  CHECK(outputLse[1] == inf);
}

TEST_CASE("merge_attn_states: other token blocks and warps, odd head sizes", "[merge]") {
  for (int blockTokens : {1, 4, 64}) {
    MergeAttnStatesConfig config;
    config.blockTokens = blockTokens;
    config.numWarps = blockTokens == 64 ? 8 : 1;
    config.numHeads = 2;
    config.headSize = 96;
    checkResult(validation::runMergeAttnStatesInterpreted(config, raggedBatch(3)), config.kernelName());
  }
  MergeAttnStatesConfig odd;  // no 16-byte promise: head size 36 is not a multiple of 8
  odd.dtype = ScalarKind::F32;
  odd.headSize = 36;
  odd.numHeads = 5;
  checkResult(validation::runMergeAttnStatesInterpreted(odd, raggedBatch(4)), odd.kernelName());
}

// ---- reshape_and_cache ----------------------------------------------------------

TEST_CASE("fp8 reference decoding and quantization steps", "[cache_write]") {
  CHECK(reference::decodeFp8E4M3(0x7E) == 448);
  CHECK(std::isnan(reference::decodeFp8E4M3(0x7F)));
  CHECK(reference::decodeFp8E4M3(0x01) == std::ldexp(1.0, -9));
  CHECK(reference::decodeFp8E4M3(0xB8) == -1);
  CHECK(reference::decodeFp8E5M2(0x7B) == 57344);
  CHECK(std::isinf(reference::decodeFp8E5M2(0x7C)));
  CHECK(reference::decodeFp8E5M2(0x01) == std::ldexp(1.0, -16));
  CHECK(reference::halfQuantStep(1.5, reference::QuantFormat::Fp8E4M3) == 0.0625);
  CHECK(reference::halfQuantStep(300, reference::QuantFormat::Fp8E4M3) == 16);
  CHECK(reference::halfQuantStep(1e-4, reference::QuantFormat::Fp8E4M3) == std::ldexp(1.0, -10));
  CHECK(reference::halfQuantStep(3, reference::QuantFormat::Fp8E5M2) == 0.25);
  CHECK(reference::halfQuantStep(-100, reference::QuantFormat::Int8) == 0.5);
  const double row[3] = {0.5, -2.54, 1};
  CHECK(reference::perTokenHeadScale(row, 3, reference::QuantFormat::Int8) == static_cast<float>(2.54 / 127));
  const double zeros[2] = {0, 0};
  CHECK(reference::perTokenHeadScale(zeros, 2, reference::QuantFormat::Fp8E4M3) == 1e-6f);
}

TEST_CASE("reshape_and_cache: names, formats, validation and interface", "[cache_write]") {
  CacheWriteConfig c;
  CHECK(c.kernelName() == "reshape_and_cache_bf16_kv8_d128_bs16");
  CHECK(c.cacheElement() == ScalarKind::BF16);
  CHECK(c.cacheRowElements() == 128);
  CHECK(c.headsPerProgram() == 8);
  c.cacheFormat = KvCacheFormat::Int8PerTokenHead;
  c.headSize = 80;
  c.numWarps = 2;
  CHECK(c.kernelName() == "reshape_and_cache_bf16_int8_per_token_head_kv8_d80_bs16_w2");
  CHECK(c.cacheElement() == ScalarKind::I8);
  CHECK(c.cacheRowElements() == 84);
  CHECK(c.quantMax() == 127);
  c.cacheFormat = KvCacheFormat::Fp8E5M2;
  CHECK(c.cacheElement() == ScalarKind::F8E5M2);
  CHECK(c.quantMax() == 57344);
  c.numKvHeads = 16;
  c.headSize = 256;  // 1024 elements per tile: 4 heads per program
  CHECK(c.headsPerProgram() == 4);
  CHECK(compiler::cacheWriteGridY(c) == 4);

  CHECK(compiler::parseKvCacheFormat("fp8") == KvCacheFormat::Fp8E4M3);
  CHECK(compiler::parseKvCacheFormat("fp8_per_token_head") == KvCacheFormat::Fp8PerTokenHead);
  CHECK(compiler::parseKvCacheFormat("int4_per_token_head") == KvCacheFormat::Int4PerTokenHead);
  CHECK_FALSE(compiler::parseKvCacheFormat("int4"));
  for (auto f : {KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2, KvCacheFormat::Int8PerTokenHead,
                 KvCacheFormat::Fp8PerTokenHead, KvCacheFormat::Int4PerTokenHead})
    CHECK(compiler::parseKvCacheFormat(compiler::kvCacheFormatName(f)) == f);

  CacheWriteConfig bad;
  bad.numKvHeads = 0;
  CHECK(validationError(bad) == "num_kv_heads (0) must be between 1 and 256");
  bad = {};
  bad.blockSize = 0;
  CHECK(validationError(bad) == "block_size (0) must be between 1 and 4096");
  bad = {};
  bad.numWarps = 3;
  CHECK(validationError(bad) == "num_warps (3) must be a power of two between 1 and 16");

  CacheWriteConfig perTensor;
  perTensor.cacheFormat = KvCacheFormat::Fp8E4M3;
  auto built = compiler::buildCacheWrite(perTensor);
  if (!built) FAIL(built.diagnostic().str());
  REQUIRE((*built)->numParameters() == 14);
  CHECK((*built)->parameter(2)->type() == attnjit::ir::Type::pointer(ScalarKind::F8E4M3));
  CHECK((*built)->parameter(4)->name() == "k_scale");
  CHECK((*built)->parameter(13)->name() == "kv_stride_head");
  CacheWriteConfig plain;
  auto builtPlain = compiler::buildCacheWrite(plain);
  REQUIRE(builtPlain.isOk());
  CHECK((*builtPlain)->numParameters() == 12);
  CHECK((*builtPlain)->parameter(3)->type() == attnjit::ir::Type::pointer(ScalarKind::I64));
}

TEST_CASE("reshape_and_cache matches the reference in every cache format", "[cache_write]") {
  const KvCacheFormat format = GENERATE(KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2,
                                        KvCacheFormat::Int8PerTokenHead, KvCacheFormat::Fp8PerTokenHead,
                                        KvCacheFormat::Int4PerTokenHead);
  const ScalarKind dtype = GENERATE(ScalarKind::F32, ScalarKind::F16, ScalarKind::BF16);
  const int headSize = GENERATE(64, 80, 128, 256);
  CacheWriteConfig config;
  config.dtype = dtype;
  config.cacheFormat = format;
  config.headSize = headSize;
  config.numKvHeads = headSize == 256 ? 6 : 3;  // 256: 4 heads per program, two programs along y
  config.blockSize = headSize == 80 ? 32 : 16;
  checkResult(validation::runCacheWriteInterpreted(config, raggedBatch(static_cast<uint64_t>(headSize) + 1)),
              config.kernelName());
}

TEST_CASE("reshape_and_cache: fp8 with a scale per KV head", "[cache_write]") {
  for (auto format : {KvCacheFormat::Fp8E4M3, KvCacheFormat::Fp8E5M2})
    for (int heads : {3, 13}) {
      CacheWriteConfig config;
      config.cacheFormat = format;
      config.numKvHeads = heads;
      config.headSize = 64;
      config.perHeadScales = true;
      checkResult(validation::runCacheWriteInterpreted(config, raggedBatch(static_cast<uint64_t>(heads))),
                  config.kernelName());
    }
  CacheWriteConfig named;
  named.cacheFormat = KvCacheFormat::Fp8E4M3;
  named.perHeadScales = true;
  CHECK(named.kernelName() == "reshape_and_cache_bf16_fp8_e4m3_kv8_d128_bs16_headscales");
  named.cacheFormat = KvCacheFormat::Int8PerTokenHead;
  CHECK(validationError(named) ==
        "per_head_scales needs a per-tensor fp8 cache (fp8_e4m3 or fp8_e5m2); kv_cache_dtype is int8_per_token_head");
}

TEST_CASE("reshape_and_cache: separate per-token-head scales (vLLM's layout)", "[cache_write][sepscales]") {
  // The harness checks each scale in its tensor (padded block stride) and that
  // no scale of a slot without a token is written.
  for (auto format : {KvCacheFormat::Int8PerTokenHead, KvCacheFormat::Fp8PerTokenHead, KvCacheFormat::Int4PerTokenHead})
    for (int headSize : {64, 80}) {
      CacheWriteConfig config;
      config.cacheFormat = format;
      config.numKvHeads = 3;
      config.headSize = headSize;
      config.scaleLayout = attnjit::compiler::KvScaleLayout::Separate;
      checkResult(validation::runCacheWriteInterpreted(config, raggedBatch(static_cast<uint64_t>(headSize))),
                  config.kernelName());
    }
  CacheWriteConfig diffkv;  // DiffKV's packed rows, values only
  diffkv.cacheFormat = KvCacheFormat::Int8PerTokenHead;
  diffkv.headSize = 96;
  diffkv.valueHeadSize = 64;
  diffkv.numKvHeads = 2;
  diffkv.scaleLayout = attnjit::compiler::KvScaleLayout::Separate;
  CHECK(diffkv.cacheRowElements() == 96);
  CHECK(diffkv.cacheStrideDivisibility() == 16);  // gcd(96, 64) = 32 bytes
  checkResult(validation::runCacheWriteInterpreted(diffkv, raggedBatch(5)), diffkv.kernelName());
  CacheWriteConfig named;
  named.cacheFormat = KvCacheFormat::Fp8PerTokenHead;
  named.scaleLayout = attnjit::compiler::KvScaleLayout::Separate;
  CHECK(named.kernelName() == "reshape_and_cache_bf16_fp8_per_token_head_kv8_d128_bs16_sepscales");
  named.cacheFormat = KvCacheFormat::Fp8E4M3;
  CHECK(validationError(named) ==
        "kv_scales separate needs a per-token-head cache (int8_per_token_head, fp8_per_token_head or "
        "int4_per_token_head), got kv_cache_dtype fp8_e4m3");
}

TEST_CASE("reshape_and_cache: separate scales through the op's validation", "[cache_write][sepscales]") {
  attnjit::ops::CacheWriteParams p;
  p.dtype = ScalarKind::BF16;
  p.cacheFormat = KvCacheFormat::Int8PerTokenHead;
  p.scaleLayout = attnjit::compiler::KvScaleLayout::Separate;
  p.numKvHeads = 8;
  p.headSize = 128;
  p.blockSize = 16;
  p.numTokens = 3;
  p.key = 0x100000, p.value = 0x200000, p.kvCache = 0x300000, p.slotMapping = 0x400000;
  p.keyStrideToken = p.valueStrideToken = 8 * 128;
  p.keyStrideHead = p.valueStrideHead = 128;
  p.kvStrideHead = 128, p.kvStrideToken = 8 * 128, p.kvStrideKv = 16 * 8 * 128, p.kvStrideBlock = 2 * p.kvStrideKv;
  auto message = [&] {
    const attnjit::support::Status s = attnjit::ops::validateCacheWrite(p);
    return s ? std::string("ok") : s.diagnostic().message;
  };
  CHECK(message() == "cache write: scale_stride_block (0) must be positive");
  p.scaleStrideBlock = 128, p.scaleStrideToken = 8, p.scaleStrideHead = 1;
  CHECK(message().find("k_scale_cache") != std::string::npos);  // a null pointer
  p.kScaleCache = 0x500000, p.vScaleCache = 0x600000;
  CHECK(message() == "ok");
  CHECK(attnjit::ops::selectCacheWriteVariant(p).kernelName() ==
        "reshape_and_cache_bf16_int8_per_token_head_kv8_d128_bs16_sepscales");
  p.scaleLayout = attnjit::compiler::KvScaleLayout::Inline;
  p.kvStrideHead = 132, p.kvStrideToken = 8 * 132, p.kvStrideKv = 16 * 8 * 132, p.kvStrideBlock = 2 * p.kvStrideKv;
  CHECK(message() == "cache write: k_scale_cache/v_scale_cache and their strides are only used with separate "
                     "per-token-head scales (kv_scale_layout separate); the cache format is int8_per_token_head, "
                     "kv_scale_layout inline");
}

TEST_CASE("reshape_and_cache: vLLM's asymmetric int4 keeps its zero point in the scale's low bits",
          "[cache_write][sepscales]") {
  // One token, one head, D = 8, f32. Keys span [-1.5, 3]: scale 4.5 / 15 = 0.3,
  // zero point round(1.5 / 0.3) = 5, q = round(x / 0.3 + 5) clamped to [0, 15].
  CacheWriteConfig config;
  config.dtype = ScalarKind::F32;
  config.cacheFormat = KvCacheFormat::Int4PerTokenHead;
  config.scaleLayout = attnjit::compiler::KvScaleLayout::Separate;
  config.numKvHeads = 1;
  config.headSize = 8;
  config.blockSize = 2;
  auto kernel = compiler::buildCacheWrite(config);
  if (!kernel) FAIL(kernel.diagnostic().str());
  std::vector<float> key = {-1.5f, 3, 0, 0.3f, 0.45f, -0.75f, 1.2f, 2.99f};
  std::vector<float> value = {0, 0, 0, 0, 0, 0, 0, 0};  // all zero: scale 1e-6, zero point 0
  std::vector<uint8_t> cache(2 * 2 * 4, 0x55);          // (1 block, K/V, 2 slots, 1 head, 4 bytes)
  std::vector<float> scales(2 * 2, -1.0f);              // K scales, then V scales: [1 block, 2 slots, 1 head]
  std::vector<int64_t> slots = {1};
  attnjit::ir::InterpreterMemory memory;
  std::vector<attnjit::ir::KernelArgument> args = {
      attnjit::ir::PointerArg{memory.map(key.data(), key.size() * 4, "key")},
      attnjit::ir::PointerArg{memory.map(value.data(), value.size() * 4, "value")},
      attnjit::ir::PointerArg{memory.map(cache.data(), cache.size(), "kv_cache")},
      attnjit::ir::PointerArg{memory.map(slots.data(), slots.size() * 8, "slot_mapping")},
      attnjit::ir::PointerArg{memory.map(scales.data(), 8, "k_scale_cache")},
      attnjit::ir::PointerArg{memory.map(scales.data() + 2, 8, "v_scale_cache")},
      int64_t{8}, int64_t{8}, int64_t{8}, int64_t{8},  // key/value strides (token, head)
      int64_t{16}, int64_t{8}, int64_t{4}, int64_t{4},  // cache strides
      int64_t{2}, int64_t{1}, int64_t{1}};              // scale strides (block, token, head)
  attnjit::ir::LaunchGrid grid;
  grid.x = 1;
  grid.y = compiler::cacheWriteGridY(config);
  auto status = attnjit::ir::interpretKernel(**kernel, grid, args, memory);
  if (!status) FAIL(status.diagnostic().str());
  // q = 0, 15, 5, 6, 6.5 -> 7 (half away), 2.5 -> 3, 9, 14.97 -> 15; unsigned nibble pairs.
  CHECK(std::vector<int>(cache.begin() + 4, cache.begin() + 8) ==
        std::vector<int>{0 | 15 << 4, 5 | 6 << 4, 7 | 3 << 4, 9 | 15 << 4});
  uint32_t bits = 0;
  std::memcpy(&bits, &scales[1], 4);
  CHECK((bits & 15u) == 5u);
  const uint32_t clearedBits = bits & ~uint32_t{15};
  float scale = 0;
  std::memcpy(&scale, &clearedBits, 4);
  CHECK(std::abs(scale - 0.3f) <= 0.3f * 0x1p-19f);
  CHECK(scales[0] == -1.0f);  // slot 0 untouched
  CHECK(std::vector<int>(cache.begin() + 12, cache.end()) == std::vector<int>{0, 0, 0, 0});
  std::memcpy(&bits, &scales[3], 4);
  CHECK((bits & 15u) == 0u);
  CHECK(std::vector<int>(cache.begin(), cache.begin() + 4) == std::vector<int>{0x55, 0x55, 0x55, 0x55});
}

TEST_CASE("reshape_and_cache: odd block and head sizes", "[cache_write]") {
  CacheWriteConfig config;
  config.dtype = ScalarKind::F16;
  config.blockSize = 5;
  config.headSize = 36;
  config.numKvHeads = 1;
  for (auto format : {KvCacheFormat::Auto, KvCacheFormat::Int8PerTokenHead}) {
    config.cacheFormat = format;
    checkResult(validation::runCacheWriteInterpreted(config, raggedBatch(21)), config.kernelName());
  }
}

TEST_CASE("reshape_and_cache: variants for rows below 16-byte alignment match the reference", "[cache_write]") {
  // vLLM's regression shape for unaligned rows: 13 heads of 46, keys and values
  // sliced out of a fused qkv tensor (row pitch 13 · 46 · 2 bytes).
  const KvCacheFormat format = GENERATE(KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3, KvCacheFormat::Int8PerTokenHead,
                                        KvCacheFormat::Fp8PerTokenHead, KvCacheFormat::Int4PerTokenHead);
  CacheWriteConfig config;
  config.dtype = ScalarKind::BF16;
  config.cacheFormat = format;
  config.numKvHeads = 13;
  config.headSize = 46;
  config.sourceAlign = GENERATE(2, 4);  // a 92-byte head row keeps at most 4
  // Cache rows of 46 bf16 (92 bytes), 46 fp8 or int8 values + a 4-byte scale
  // (46, 50 bytes), or 23 int4 bytes + 4 (27 bytes).
  config.cacheAlign = format == KvCacheFormat::Auto ? 4 : format == KvCacheFormat::Int4PerTokenHead ? 1 : 2;
  REQUIRE(config.validate());
  checkResult(validation::runCacheWriteInterpreted(config, raggedBatch(46)), config.kernelName());
}

TEST_CASE("reshape_and_cache: the op picks the widest accesses a call's layout keeps", "[cache_write]") {
  attnjit::ops::CacheWriteParams p;
  p.dtype = ScalarKind::BF16;
  p.numKvHeads = 13;
  p.headSize = 46;
  p.blockSize = 16;
  p.numTokens = 42;
  const uint64_t qkv = 0x100000;        // [tokens, 3, 13, 46] bf16: key = qkv[:, 1], value = qkv[:, 2]
  const int64_t headsRow = 13 * 46;     // 1196 bytes: 4-byte aligned, not 8
  p.key = qkv + 2 * headsRow;
  p.value = qkv + 4 * headsRow;
  p.keyStrideToken = p.valueStrideToken = 3 * headsRow;
  p.keyStrideHead = p.valueStrideHead = 46;
  p.kvCache = 0x800000;
  p.slotMapping = 0x900000;
  // NHD: (blocks, 2, block_size, heads, D).
  p.kvStrideHead = 46;
  p.kvStrideToken = headsRow;
  p.kvStrideKv = 16 * headsRow;
  p.kvStrideBlock = 2 * p.kvStrideKv;
  compiler::CacheWriteConfig chosen = attnjit::ops::selectCacheWriteVariant(p);
  // The cache's base is aligned and rows of 46 promise nothing at 16 bytes: the
  // default cache side (scalar row accesses) serves it.
  CHECK(chosen.sourceAlign == 4);
  CHECK(chosen.cacheAlign == 16);
  CHECK(chosen.kernelName() == "reshape_and_cache_bf16_kv13_d46_bs16_align4x16");
  CHECK(attnjit::ops::validateCacheWrite(p));
  // HND: (blocks, 2, heads, block_size, D).
  p.kvStrideToken = 46;
  p.kvStrideHead = 16 * 46;
  CHECK(attnjit::ops::selectCacheWriteVariant(p).cacheAlign == 16);
  CHECK(attnjit::ops::validateCacheWrite(p));
  // A cache that is itself a view starting one row in: 92 bytes, 4-byte aligned.
  p.kvCache += 92;
  CHECK(attnjit::ops::selectCacheWriteVariant(p).cacheAlign == 4);
  CHECK(attnjit::ops::validateCacheWrite(p));
  // fp8: a one-byte cache; the view starts 92 bytes in, its 46-byte rows keep 2.
  p.cacheFormat = KvCacheFormat::Fp8E4M3;
  p.kScale = 0xA00000;
  p.vScale = 0xA00010;
  CHECK(attnjit::ops::selectCacheWriteVariant(p).cacheAlign == 2);
  CHECK(attnjit::ops::validateCacheWrite(p));
  // Aligned rows keep the default kernel.
  attnjit::ops::CacheWriteParams aligned = p;
  aligned.cacheFormat = KvCacheFormat::Auto;
  aligned.kScale = aligned.vScale = 0;
  aligned.headSize = aligned.keyStrideHead = aligned.valueStrideHead = 128;
  aligned.numKvHeads = 8;
  aligned.key = qkv;
  aligned.kvCache = 0x800000;
  aligned.value = qkv + 0x10000;
  aligned.keyStrideToken = aligned.valueStrideToken = 3 * 8 * 128;
  aligned.kvStrideHead = 128;
  aligned.kvStrideToken = 8 * 128;
  aligned.kvStrideKv = 16 * 8 * 128;
  aligned.kvStrideBlock = 2 * aligned.kvStrideKv;
  CHECK(attnjit::ops::selectCacheWriteVariant(aligned).kernelName() == "reshape_and_cache_bf16_kv8_d128_bs16");
  // A pointer off its element's alignment is an error naming it.
  attnjit::ops::CacheWriteParams odd = aligned;
  odd.key += 1;
  const support::Status s = attnjit::ops::validateCacheWrite(odd);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.diagnostic().message, Catch::Contains("'key'") && Catch::Contains("not 2-byte aligned"));

  CacheWriteConfig bad;
  bad.sourceAlign = 1;
  CHECK(validationError(bad) == "source_align (1) must be a power of two between 2 (the bf16 element) and 16");
  bad = {};
  bad.cacheAlign = 32;
  CHECK(validationError(bad) == "cache_align (32) must be a power of two between 2 (the cache element) and 16");
}

TEST_CASE("reshape_and_cache: int8 rounds half away from zero and stores the scale inline", "[cache_write]") {
  // One token, one head, D = 8, f32, slot 1 of a 2-slot, 1-block cache. max|x| = 127
  // makes the scale exactly 1, so x / scale are the values themselves.
  CacheWriteConfig config;
  config.dtype = ScalarKind::F32;
  config.cacheFormat = KvCacheFormat::Int8PerTokenHead;
  config.numKvHeads = 1;
  config.headSize = 8;
  config.blockSize = 2;
  auto kernel = compiler::buildCacheWrite(config);
  if (!kernel) FAIL(kernel.diagnostic().str());
  std::vector<float> key = {127, 2.5f, -2.5f, 0.5f, -0.5f, 1.5f, 0.49999997f, -126.5f};
  std::vector<float> value = {-127, 0, 0, 0, 0, 0, 0, 0.25f};
  const int64_t row = 12;                                   // 8 values + 4 scale bytes
  std::vector<int8_t> cache(static_cast<size_t>(2 * 2 * row), 0x55);  // (1 block, K/V, 2 slots, 1 head, 12)
  std::vector<int64_t> slots = {1};
  attnjit::ir::InterpreterMemory memory;
  std::vector<attnjit::ir::KernelArgument> args = {
      attnjit::ir::PointerArg{memory.map(key.data(), key.size() * 4, "key")},
      attnjit::ir::PointerArg{memory.map(value.data(), value.size() * 4, "value")},
      attnjit::ir::PointerArg{memory.map(cache.data(), cache.size(), "kv_cache")},
      attnjit::ir::PointerArg{memory.map(slots.data(), slots.size() * 8, "slot_mapping")},
      int64_t{8}, int64_t{8}, int64_t{8}, int64_t{8},   // key/value strides (token, head)
      int64_t{2 * 2 * row}, int64_t{2 * row}, int64_t{row}, int64_t{row}};  // cache strides
  attnjit::ir::LaunchGrid grid;
  grid.x = 1;
  grid.y = compiler::cacheWriteGridY(config);
  auto status = attnjit::ir::interpretKernel(**kernel, grid, args, memory);
  if (!status) FAIL(status.diagnostic().str());
  const int8_t* k = &cache[static_cast<size_t>(row)];  // slot 1 of K
  CHECK(std::vector<int>(k, k + 8) == std::vector<int>{127, 3, -3, 1, -1, 2, 0, -127});
  float scale = 0;
  std::memcpy(&scale, k + 8, 4);
  CHECK(scale == 1.0f);
  const int8_t* v = &cache[static_cast<size_t>(3 * row)];  // slot 1 of V
  CHECK(std::vector<int>(v, v + 8) == std::vector<int>{-127, 0, 0, 0, 0, 0, 0, 0});  // 0.25 rounds to 0
  std::memcpy(&scale, v + 8, 4);
  CHECK(scale == 1.0f);
  // Slot 0 (K and V) untouched.
  for (int64_t i = 0; i < row; ++i) {
    CHECK(cache[static_cast<size_t>(i)] == 0x55);
    CHECK(cache[static_cast<size_t>(2 * row + i)] == 0x55);
  }
}

// ---- spec families ---------------------------------------------------------------

TEST_CASE("spec families merge_attn_states and reshape_and_cache", "[merge][cache_write][specs]") {
  auto merge = compiler::loadSpecText(
      "family: merge_attn_states\nparams:\n  dtype: [f16, bf16]\n  num_heads: 8\n  head_size: [80, 128]\n"
      "  output_lse: false\n",
      "merge.yaml");
  if (!merge) FAIL(merge.diagnostic().str());
  REQUIRE(merge->variants.size() == 4);
  CHECK(merge->variants[0].name == "merge_attn_states_f16_h8_d80_nolse");
  CHECK(merge->variants[3].merge.dtype == ScalarKind::BF16);
  CHECK(compiler::formatVariantParams(merge->variants[1]) ==
        "dtype=f16 num_heads=8 head_size=128 output_lse=false block_tokens=16 num_warps=4");

  auto cache = compiler::loadSpecText(
      "family: reshape_and_cache\nparams:\n  dtype: bf16\n  kv_cache_dtype: [auto, fp8]\n  num_kv_heads: 8\n"
      "  head_size: 128\n  block_size: 16\n",
      "cache.yaml");
  if (!cache) FAIL(cache.diagnostic().str());
  REQUIRE(cache->variants.size() == 2);
  CHECK(cache->variants[1].name == "reshape_and_cache_bf16_fp8_e4m3_kv8_d128_bs16");
  CHECK(compiler::formatVariantParams(cache->variants[1]) ==
        "dtype=bf16 kv_cache_dtype=fp8_e4m3 num_kv_heads=8 head_size=128 block_size=16 num_warps=4");
  auto kernel = compiler::buildVariantKernel(cache->variants[1]);
  REQUIRE(kernel.isOk());
  CHECK((*kernel)->name() == cache->variants[1].name);

  auto badFormat = compiler::loadSpecText(
      "family: reshape_and_cache\nparams:\n  dtype: bf16\n  kv_cache_dtype: int4\n  num_kv_heads: 8\n"
      "  head_size: 128\n  block_size: 16\n",
      "bad.yaml");
  REQUIRE_FALSE(badFormat);
  CHECK(badFormat.diagnostic().str() ==
        "bad.yaml:4:19: error: 'kv_cache_dtype' must be one of auto, fp8_e4m3 (or fp8), fp8_e5m2, "
        "int8_per_token_head, fp8_per_token_head, int4_per_token_head, got 'int4'");
  auto unknownField = compiler::loadSpecText(
      "family: merge_attn_states\nparams:\n  dtype: bf16\n  num_heads: 8\n  head_size: 64\n  causal: true\n",
      "bad.yaml");
  REQUIRE_FALSE(unknownField);
  CHECK(unknownField.diagnostic().message.find("unknown field 'causal' in 'params' of family merge_attn_states") !=
        std::string::npos);
  auto invalid = compiler::loadSpecText(
      "family: merge_attn_states\nparams:\n  dtype: bf16\n  num_heads: 8\n  head_size: [64, 2000]\n", "bad.yaml");
  REQUIRE_FALSE(invalid);
  CHECK(invalid.diagnostic().str() ==
        "bad.yaml:5:19: error: invalid variant (dtype=bf16 num_heads=8 head_size=2000): head_size (2000) must be "
        "between 1 and 1024");
}
