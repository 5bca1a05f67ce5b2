// merge_partials, the N-way LSE merge (context-parallel decode), on the CPU
// interpreter against its float64 reference: the reference itself, the config,
// every dtype and the head sizes 64/80/128/256 for N = 1, 2, 3 and 8 with token
// counts that are not a multiple of the block, equality with merge_attn_states
// for N = 2, the spec family, the op API's validation, and PTX that ptxas
// assembles for sm_80 and sm_90a.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "compiler/ops/CompanionOps.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/validation/VariantRuns.h"
#include "compiler/validation/MergePartialsProblem.h"
#include "compiler/validation/ProblemData.h"
#include "compiler/spec/Spec.h"
#include "compiler/kernels/MergeAttnStates.h"
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
using attnjit::compiler::MergePartialsConfig;
using attnjit::ir::ScalarKind;
namespace compiler = attnjit::compiler;
namespace reference = attnjit::validation::reference;
namespace ir = attnjit::ir;
namespace ops = attnjit::ops;
namespace pd = attnjit::validation::problem_data;

namespace {

// 19 tokens in three sequences: not a multiple of any BLOCK_TOKENS.
BatchShape raggedBatch(int numPartials, uint64_t seed) {
  BatchShape s;
  s.queryLens = {5, 1, 13};
  s.contextLens = {0, 0, 0};
  s.seed = seed;
  s.numPartials = numPartials;
  return s;
}

void checkResult(const support::Expected<validation::AttentionRunResult>& result, const std::string& what) {
  INFO(what);
  if (!result) FAIL(result.diagnostic().str());
  INFO("max abs error " << result->maxAbsError << " (tolerance " << result->tolerance << "); " << result->detail);
  CHECK(result->passed);
}

std::string validationError(const MergePartialsConfig& c) {
  auto s = c.validate();
  return s ? std::string("ok") : s.diagnostic().message;
}

}  // namespace

TEST_CASE("merge_partials reference: weights, empty partials, all empty and NaN", "[merge_partials]") {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  reference::MergePartialsInputs in;
  in.numPartials = 3;
  in.numTokens = 4;
  in.numHeads = 1;
  in.headSize = 1;
  // [partial][token] outputs and LSEs (one head, one dim).
  in.partialOutputs = {1, 5, 7, 1, /**/ -1, nan, 9, 2, /**/ 3, 6, 8, 3};
  in.partialLses = {std::log(1.0), 0.5,  inf,  0.0,  // partial 0
                    std::log(2.0), -inf, -inf, nan,  // partial 1
                    std::log(5.0), 0.5,  inf,  0.0};
  const auto out = reference::referenceMergePartials(in);
  // Token 0: weights 1, 2, 5 of 8.
  CHECK(out.output[0] == Approx((1 * 1 + 2 * -1 + 5 * 3) / 8.0));
  CHECK(out.lse[0] == Approx(std::log(8.0)));
  // Token 1: partial 1 is empty (its NaN output is ignored), the others weigh equally.
  CHECK(out.output[1] == Approx(5.5));
  CHECK(out.lse[1] == Approx(0.5 + std::log(2.0)));
  // Token 2: every partial empty: partial 0's output, LSE -inf.
  CHECK(out.output[2] == 7);
  CHECK(out.lse[2] == -inf);
  // Token 3: a NaN LSE propagates.
  CHECK(std::isnan(out.output[3]));
  CHECK(std::isnan(out.lse[3]));

  // N = 2 is merge_attn_states' reference wherever outputs are finite.
  reference::MergeInputs two;
  two.numTokens = 3;
  two.numHeads = 1;
  two.headSize = 1;
  two.prefixOutput = {1, 2, 3};
  two.suffixOutput = {-1, 4, 0.5};
  two.prefixLse = {0.25, inf, -inf};
  two.suffixLse = {1.5, -3, -inf};
  reference::MergePartialsInputs asPartials;
  asPartials.numPartials = 2;
  asPartials.numTokens = 3;
  asPartials.numHeads = 1;
  asPartials.headSize = 1;
  asPartials.partialOutputs = {1, 2, 3, -1, 4, 0.5};
  asPartials.partialLses = {0.25, inf, -inf, 1.5, -3, -inf};
  const auto a = reference::referenceMergeAttnStates(two);
  const auto b = reference::referenceMergePartials(asPartials);
  for (int t = 0; t < 3; ++t) {
    CHECK(a.output[static_cast<size_t>(t)] == Approx(b.output[static_cast<size_t>(t)]));
    CHECK(a.lse[static_cast<size_t>(t)] == Approx(b.lse[static_cast<size_t>(t)]));
  }
}

TEST_CASE("merge_partials: names, validation and interface", "[merge_partials]") {
  MergePartialsConfig c;
  CHECK(c.kernelName() == "merge_partials_bf16_h32_d128_lse");
  c.dtype = ScalarKind::F16;
  c.headSize = 80;
  c.outputLse = false;
  c.blockTokens = 32;
  c.numWarps = 8;
  CHECK(c.kernelName() == "merge_partials_f16_h32_d80_nolse_t32_w8");
  CHECK(c.headSizePadded() == 128);
  CHECK(compiler::mergePartialsGridX(c, 65) == 3);

  MergePartialsConfig bad;
  bad.dtype = ScalarKind::F8E4M3;
  CHECK(validationError(bad) == "dtype (f8e4m3) is not supported; use f32, f16 or bf16");
  bad = {};
  bad.blockTokens = 12;
  CHECK(validationError(bad) == "block_tokens (12) must be a power of two between 1 and 256");
  bad = {};
  bad.headSize = 1025;
  CHECK(validationError(bad) == "head_size (1025) must be between 1 and 1024");
  bad = {};
  bad.numHeads = 0;
  auto refused = compiler::buildMergePartials(bad);
  REQUIRE_FALSE(refused);
  CHECK(refused.diagnostic().message == "num_heads (0) must be between 1 and 65535");

  for (bool lse : {true, false}) {
    MergePartialsConfig config;
    config.outputLse = lse;
    auto built = compiler::buildMergePartials(config);
    if (!built) FAIL(built.diagnostic().str());
    const auto& kernel = **built;
    std::vector<std::string> names;
    for (size_t i = 0; i < kernel.numParameters(); ++i) names.push_back(kernel.parameter(i)->name());
    std::vector<std::string> expected = {"output", "partial_outputs", "partial_lses", "num_partials", "num_tokens",
                                         "o_stride_token", "o_stride_head", "p_stride_partial", "p_stride_token",
                                         "p_stride_head", "lse_stride_partial"};
    if (lse) expected.insert(expected.begin() + 1, "output_lse");
    CHECK(names == expected);
    CHECK(kernel.parameterAttrs(0).getInt("align") == 16);
    CHECK(kernel.parameterAttrs(kernel.numParameters() - 2).getInt("divisibility") == 8);
    CHECK_FALSE(kernel.parameterAttrs(kernel.numParameters() - 1).has("divisibility"));
    CHECK(ir::verifyKernel(kernel).isOk());
    const std::string text = ir::printKernel(kernel);
    auto parsed = ir::parseModule(text, "merge_partials.tir");
    if (!parsed) FAIL(parsed.diagnostic().str());
    CHECK(ir::printKernel(*(*parsed)->kernels()[0]) == text);
  }
}

TEST_CASE("merge_partials matches the reference for 1 2 3 and 8 partials", "[merge_partials]") {
  const ScalarKind dtype = GENERATE(ScalarKind::F32, ScalarKind::F16, ScalarKind::BF16);
  const int headSize = GENERATE(64, 80, 128, 256);
  for (int numPartials : {1, 2, 3, 8}) {
    MergePartialsConfig config;
    config.dtype = dtype;
    config.headSize = headSize;
    config.numHeads = 3;
    config.outputLse = numPartials != 3;
    checkResult(validation::runMergePartialsInterpreted(
                    config, raggedBatch(numPartials, static_cast<uint64_t>(headSize * 10 + numPartials))),
                config.kernelName() + " with " + std::to_string(numPartials) + " partials");
  }
}

TEST_CASE("merge_partials: other token blocks and warps, odd head sizes", "[merge_partials]") {
  for (int blockTokens : {1, 4, 64}) {
    MergePartialsConfig config;
    config.blockTokens = blockTokens;
    config.numWarps = blockTokens == 64 ? 8 : 1;
    config.numHeads = 2;
    config.headSize = 96;
    checkResult(validation::runMergePartialsInterpreted(config, raggedBatch(5, 3)), config.kernelName());
  }
  MergePartialsConfig odd;  // no 16-byte promise: head size 36 is not a multiple of 8
  odd.dtype = ScalarKind::F32;
  odd.headSize = 36;
  odd.numHeads = 5;
  checkResult(validation::runMergePartialsInterpreted(odd, raggedBatch(4, 4)), odd.kernelName());
  // A single token: it is the empty one (no NaN planted).
  BatchShape one = raggedBatch(3, 5);
  one.queryLens = {1};
  one.contextLens = {0};
  checkResult(validation::runMergePartialsInterpreted(odd, one), odd.kernelName() + " on one token");
}

TEST_CASE("merge_partials with two partials equals merge_attn_states", "[merge_partials]") {
  const ScalarKind dtype = GENERATE(ScalarKind::F32, ScalarKind::F16, ScalarKind::BF16);
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t T = 19, H = 3, D = 80;
  pd::RandomStream random(77);
  // Contiguous [2, T, H, D] outputs (finite everywhere: merge_attn_states reads
  // empty sides too) and [2, H, T] LSEs with every empty-side combination.
  std::vector<uint8_t> outputs(static_cast<size_t>(2 * T * H * D) * pd::elementBytes(dtype));
  for (size_t i = 0; i < static_cast<size_t>(2 * T * H * D); ++i)
    pd::setFloat(outputs, dtype, i, random.uniform(-1, 1));
  std::vector<uint8_t> lses(static_cast<size_t>(2 * H * T) * 4);
  for (int64_t i = 0; i < H * T; ++i) {
    double p = static_cast<float>(random.uniform(-8, 8)), s = static_cast<float>(random.uniform(-8, 8));
    switch (i % 9) {
      case 0: p = inf; break;
      case 1: s = -inf; break;
      case 2: p = -inf, s = inf; break;
      case 3: p = inf, s = inf; break;
      default: break;
    }
    pd::setFloat(lses, ScalarKind::F32, static_cast<size_t>(i), p);
    pd::setFloat(lses, ScalarKind::F32, static_cast<size_t>(H * T + i), s);
  }
  const size_t half = outputs.size() / 2;
  std::vector<uint8_t> prefix(outputs.begin(), outputs.begin() + static_cast<std::ptrdiff_t>(half));
  std::vector<uint8_t> suffix(outputs.begin() + static_cast<std::ptrdiff_t>(half), outputs.end());
  std::vector<uint8_t> prefixLse(lses.begin(), lses.begin() + H * T * 4);
  std::vector<uint8_t> suffixLse(lses.begin() + H * T * 4, lses.end());

  auto run = [&](const ir::Kernel& kernel, std::vector<std::vector<uint8_t>*> buffers, std::vector<int64_t> scalars,
                 int64_t gridX) {
    ir::InterpreterMemory memory;
    std::vector<ir::KernelArgument> args;
    for (auto* buffer : buffers) args.push_back(ir::PointerArg{memory.map(buffer->data(), buffer->size(), "buffer")});
    for (int64_t s : scalars) args.push_back(s);
    ir::LaunchGrid grid;
    grid.x = gridX;
    grid.y = H;
    REQUIRE(ir::interpretKernel(kernel, grid, args, memory).isOk());
  };
  MergePartialsConfig partialsConfig;
  partialsConfig.dtype = dtype;
  partialsConfig.numHeads = static_cast<int>(H);
  partialsConfig.headSize = static_cast<int>(D);
  compiler::MergeAttnStatesConfig mergeConfig;
  mergeConfig.dtype = dtype;
  mergeConfig.numHeads = static_cast<int>(H);
  mergeConfig.headSize = static_cast<int>(D);
  auto partialsKernel = compiler::buildMergePartials(partialsConfig);
  auto mergeKernel = compiler::buildMergeAttnStates(mergeConfig);
  REQUIRE(partialsKernel.isOk());
  REQUIRE(mergeKernel.isOk());
  std::vector<uint8_t> out1 = pd::poisonedBuffer(dtype, static_cast<size_t>(T * H * D)), out2 = out1;
  std::vector<uint8_t> lse1 = pd::poisonedBuffer(ScalarKind::F32, static_cast<size_t>(H * T)), lse2 = lse1;
  run(**partialsKernel, {&out1, &lse1, &outputs, &lses}, {2, T, H * D, D, T * H * D, H * D, D, H * T},
      compiler::mergePartialsGridX(partialsConfig, T));
  run(**mergeKernel, {&out2, &lse2, &prefix, &prefixLse, &suffix, &suffixLse}, {T, H * D, D, H * D, D, H * D, D},
      compiler::mergeAttnStatesGridX(mergeConfig, T));
  // The two compute the same weights in a different order (one division per
  // weight vs one per output), so they agree to the dtype's rounding.
  const double tolerance = validation::MergePartialsProblem::tolerance(dtype, 2);
  for (size_t i = 0; i < static_cast<size_t>(T * H * D); ++i) {
    const double a = pd::getFloat(out1, dtype, i), b = pd::getFloat(out2, dtype, i);
    INFO("element " << i << ": merge_partials " << a << ", merge_attn_states " << b);
    REQUIRE(std::abs(a - b) <= tolerance);
  }
  for (size_t i = 0; i < static_cast<size_t>(H * T); ++i) {
    const double a = pd::getFloat(lse1, ScalarKind::F32, i), b = pd::getFloat(lse2, ScalarKind::F32, i);
    INFO("lse " << i << ": merge_partials " << a << ", merge_attn_states " << b);
    if (std::isinf(b))
      REQUIRE(a == b);
    else
      REQUIRE(std::abs(a - b) <= 1e-5);
  }
}

TEST_CASE("spec family merge_partials and the run field num_partials", "[merge_partials][specs]") {
  auto spec = compiler::loadSpecText(
      "family: merge_partials\nparams:\n  dtype: [f16, bf16]\n  num_heads: 8\n  head_size: [80, 128]\n"
      "  output_lse: false\nrun:\n  query_lens: [3, 9]\n  context_lens: [0, 0]\n  num_partials: 5\n",
      "merge_partials.yaml");
  if (!spec) FAIL(spec.diagnostic().str());
  REQUIRE(spec->variants.size() == 4);
  CHECK(spec->variants[0].name == "merge_partials_f16_h8_d80_nolse");
  CHECK(spec->variants[3].mergePartials.dtype == ScalarKind::BF16);
  CHECK(spec->shape.numPartials == 5);
  CHECK(spec->shape.str() == "query_lens=3,9 context_lens=0,0 seed=1 num_partials=5");
  CHECK(compiler::formatVariantParams(spec->variants[1]) ==
        "dtype=f16 num_heads=8 head_size=128 output_lse=false block_tokens=16 num_warps=4");
  auto kernel = compiler::buildVariantKernel(spec->variants[1]);
  REQUIRE(kernel.isOk());
  CHECK((*kernel)->name() == spec->variants[1].name);
  checkResult(validation::runVariantInterpreted(spec->variants[1], spec->shape), spec->variants[1].name);

  auto zero = compiler::loadSpecText(
      "family: merge_partials\nparams:\n  dtype: bf16\n  num_heads: 8\n  head_size: 64\nrun:\n  num_partials: 0\n",
      "bad.yaml");
  REQUIRE_FALSE(zero);
  CHECK(zero.diagnostic().str() == "bad.yaml:7:17: error: 'num_partials' must be between 1 and 1024, got 0");
  BatchShape shape;
  CHECK(shape.set("num_partials=7").isOk());
  CHECK(shape.numPartials == 7);
  auto refused = shape.set("num_partials=0");
  REQUIRE_FALSE(refused);
  CHECK(refused.diagnostic().message == "num_partials: '0' is not an integer between 1 and 1024");
}

TEST_CASE("merge_partials op: arguments are validated before the GPU is touched", "[merge_partials][op]") {
  ops::MergePartialsParams p;
  p.dtype = ScalarKind::BF16;
  p.numHeads = 4;
  p.headSize = 128;
  p.numPartials = 3;
  p.numTokens = 10;
  p.output = 0x10000;
  p.outputLse = 0x20000;
  p.partialOutputs = 0x30000;
  p.partialLses = 0x40000;
  p.outputStrideToken = 4 * 128;
  p.outputStrideHead = 128;
  p.partialStridePartial = 10 * 4 * 128;
  p.partialStrideToken = 4 * 128;
  p.partialStrideHead = 128;
  p.lseStridePartial = 40;
  REQUIRE(ops::validateMergePartials(p).isOk());
  CHECK(ops::selectMergePartialsVariant(p).kernelName() == "merge_partials_bf16_h4_d128_lse");
  auto message = [](const ops::MergePartialsParams& q) {
    auto s = ops::validateMergePartials(q);
    return s ? std::string("ok") : s.diagnostic().message;
  };
  ops::MergePartialsParams bad = p;
  bad.numPartials = 0;
  CHECK(message(bad) == "merge_partials: num_partials (0) must be at least 1");
  bad = p;
  bad.lseStridePartial = 39;
  CHECK(message(bad) == "merge_partials: lse_stride_partial (39) is smaller than one partial's LSE block, "
                        "num_heads · num_tokens = 40");
  bad = p;
  bad.partialStridePartial = 0;
  CHECK(message(bad) == "merge_partials: partial_stride_partial (0) must be positive");
  bad = p;
  bad.partialStrideToken = 4 * 128 + 4;
  CHECK(message(bad).find("p_stride_token") != std::string::npos);
  bad = p;
  bad.partialOutputs = 0x30008;
  CHECK(message(bad).find("partial_outputs") != std::string::npos);
  bad = p;
  bad.headSize = 2048;
  CHECK(message(bad) == "merge_partials: head_size (2048) must be between 1 and 1024");
  bad = p;
  bad.outputLse = 0;  // selects the variant without the LSE output
  CHECK(message(bad) == "ok");
  CHECK(ops::selectMergePartialsVariant(bad).kernelName() == "merge_partials_bf16_h4_d128_nolse");
  bad = p;
  bad.numTokens = 0;  // nothing to launch, even with null pointers
  bad.output = 0;
  CHECK(message(bad) == "ok");
}

TEST_CASE("merge_partials: 16-byte vectors and ptxas for sm_80 and sm_90a", "[merge_partials][codegen][ptxas]") {
  auto spec = compiler::loadSpecFile(attnjit::tests::sourceDir() + "/specs/merge_partials.yaml");
  if (!spec) FAIL(spec.diagnostic().str());
  REQUIRE(spec->variants.size() >= 6);
  const bool ptxas = attnjit::tests::havePtxas();
  if (!ptxas) WARN("ptxas is not on the PATH; PTX is checked without assembling");
  int assembled = 0;
  for (const auto& variant : spec->variants) {
    auto kernel = compiler::buildVariantKernel(variant);
    REQUIRE(kernel.isOk());
    for (const char* arch : {"sm_80", "sm_90a"}) {
      INFO(variant.name << " for " << arch);
      compiler::CompileOptions options;
      options.target = arch;
      auto compiled = compiler::compileKernel(**kernel, options);
      INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
      REQUIRE(compiled.isOk());
      CHECK(compiled->ptx.find(".entry " + variant.name) != std::string::npos);
      if (variant.mergePartials.dtype != ScalarKind::F32 && variant.mergePartials.headSize % 8 == 0) {
        CHECK(compiled->ptx.find("ld.global.v4.b32") != std::string::npos);
        CHECK(compiled->ptx.find("st.global.v4.b32") != std::string::npos);
      }
      if (!ptxas) continue;
      std::string log;
      const bool ok = attnjit::tests::assemblesWithPtxas(compiled->ptx, arch, &log);
      INFO(log);
      CHECK(ok);
      assembled += ok;
    }
  }
  if (ptxas) CHECK(assembled == static_cast<int>(2 * spec->variants.size()));
}
