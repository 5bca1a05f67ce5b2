// reduce_segments, stage 2 of split-KV attention, as a family of its own: the
// float64 reference on a hand-computed case, the configs the JIT derives from
// split-KV variants (reduceSegmentsFor), the kernel on the CPU interpreter
// against the reference for every dtype with empty segments and rows with every
// segment empty, the contract on empty segments' rows (between keyed segments:
// read, weighed by exactly 0, so finite garbage vanishes and NaN does not;
// before or after them: never read), the shipped specs on the
// interpreter and through ptxas, and [gpu] runs of the same.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <variant>
#include <vector>

#include "compiler/driver/CompileDriver.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/validation/VariantRuns.h"
#include "compiler/validation/ProblemData.h"
#include "compiler/validation/ReduceSegmentsProblem.h"
#include "compiler/spec/Spec.h"
#include "compiler/kernels/MlaDecode.h"
#include "compiler/kernels/ReduceSegments.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "ir/Interpreter.h"
#include "compiler/validation/reference/ReduceSegmentsReference.h"
#include "tests/test_paths.h"
#include "tests/test_tools.h"

namespace support = attnjit::support;
namespace validation = attnjit::validation;

using attnjit::compiler::BatchShape;
using attnjit::compiler::ReduceSegmentsConfig;
using attnjit::ir::ScalarKind;
namespace compiler = attnjit::compiler;
namespace reference = attnjit::validation::reference;
namespace ir = attnjit::ir;
namespace pd = attnjit::validation::problem_data;

namespace {

// 8 tokens in three sequences (only their sum matters).
BatchShape batch(int numSegments, uint64_t seed) {
  BatchShape s;
  s.queryLens = {3, 1, 4};
  s.contextLens = {0, 0, 0};
  s.seed = seed;
  s.numPartials = numSegments;
  return s;
}

void checkResult(const support::Expected<validation::AttentionRunResult>& result, const std::string& what) {
  INFO(what);
  if (!result) FAIL(result.diagnostic().str());
  INFO("max abs error " << result->maxAbsError << " (tolerance " << result->tolerance << "); " << result->detail);
  CHECK(result->passed);
}

std::vector<std::string> shippedSpecs() { return {"reduce_segments.yaml", "reduce_segments_mla.yaml"}; }

ReduceSegmentsConfig configOf(ScalarKind dtype, int numQueryHeads, int headSize, bool outputLse = false) {
  ReduceSegmentsConfig config;
  config.dtype = dtype;
  config.numQueryHeads = numQueryHeads;
  config.headSize = headSize;
  config.outputLse = outputLse;
  return config;
}

}  // namespace

TEST_CASE("reduce_segments reference: weights by maxima, empty segments and empty rows", "[reduce_segments]") {
  const double negInf = -std::numeric_limits<double>::infinity();
  reference::ReduceSegmentsInputs in;
  in.numTokens = 1;
  in.numHeads = 2;
  in.numSegments = 3;
  in.headSize = 2;
  // Head 0: segments with maxima 1 and 3 (weights 1/4 and 1), one empty with garbage.
  // Head 1: every segment empty.
  in.segmentMaxima = {1, negInf, 3, negInf, negInf, negInf};
  in.segmentSums = {2, 0, 4, 0, 0, 0};
  in.segmentOutputs = {2, -4, 1e30, 7, 8, 4, 0, 0, 0, 0, 0, 0};
  const reference::ReduceSegmentsOutputs out = reference::referenceReduceSegments(in);
  // out = (0.25·(2, -4) + (8, 4)) / (0.25·2 + 4) = (8.5, 3) / 4.5
  CHECK(out.output[0] == Approx(8.5 / 4.5).epsilon(1e-15));
  CHECK(out.output[1] == Approx(3.0 / 4.5).epsilon(1e-15));
  CHECK(out.lse[0] == Approx(std::numbers::ln2 * (3 + std::log2(4.5))).epsilon(1e-15));
  CHECK(out.output[2] == 0);
  CHECK(out.output[3] == 0);
  CHECK(out.lse[1] == negInf);
}

TEST_CASE("reduce_segments: the stage 2 the JIT derives from split-KV variants", "[reduce_segments]") {
  compiler::UnifiedAttentionConfig unified;
  unified.dtype = ScalarKind::F16;
  unified.numQueryHeads = 40;
  unified.numKvHeads = 8;
  unified.headSize = 192;
  unified.valueHeadSize = 128;  // DiffKV: the partials and the output are V-sized
  unified.outputLse = true;
  unified.splitKv = true;
  const ReduceSegmentsConfig fromUnified = compiler::reduceSegmentsFor(unified);
  CHECK(fromUnified.dtype == ScalarKind::F16);
  CHECK(fromUnified.numQueryHeads == 40);
  CHECK(fromUnified.headSize == 128);
  CHECK(fromUnified.outputLse);
  CHECK_FALSE(fromUnified.lseTokenStride);
  CHECK(fromUnified.kernelName() == "reduce_segments_f16_h40_d128_lse");

  compiler::MlaDecodeConfig mla;
  mla.numHeads = 128;
  mla.kvLoraRank = 512;
  mla.splitKv = true;
  ReduceSegmentsConfig fromMla = compiler::reduceSegmentsFor(mla);
  CHECK(fromMla.headSize == 512);
  CHECK(fromMla.numQueryHeads == 128);
  CHECK_FALSE(fromMla.outputLse);
  CHECK_FALSE(fromMla.lseTokenStride);  // no LSE: the same kernel as unified attention's
  CHECK(fromMla.validate().isOk());
  mla.outputLse = true;
  fromMla = compiler::reduceSegmentsFor(mla);
  CHECK(fromMla.lseTokenStride);  // MLA's [B, H] LSE
  CHECK(fromMla.kernelName() == "reduce_segments_bf16_h128_d512_lse_strided");
  CHECK(fromMla.validate().isOk());

  ReduceSegmentsConfig strideAlone;
  strideAlone.lseTokenStride = true;
  auto refused = strideAlone.validate();
  REQUIRE_FALSE(refused);
  CHECK(refused.diagnostic().message == "lse_token_stride describes the LSE output: it needs output_lse: true");
  REQUIRE_FALSE(compiler::buildReduceSegments(strideAlone));
}

TEST_CASE("reduce_segments matches the reference in every dtype with empty segments", "[reduce_segments]") {
  const ScalarKind dtype = GENERATE(ScalarKind::F32, ScalarKind::F16, ScalarKind::BF16);
  // 70 segments: pass 1 reads the maxima 64 segments at a time.
  for (int headSize : {64, 80, 128})
    for (int numSegments : {1, 2, 5, 70}) {
      ReduceSegmentsConfig config;
      config.dtype = dtype;
      config.headSize = headSize;
      config.numQueryHeads = 6;
      config.outputLse = numSegments != 2;
      config.lseTokenStride = numSegments == 5;
      checkResult(validation::runReduceSegmentsInterpreted(
                      config, batch(numSegments, static_cast<uint64_t>(headSize * 10 + numSegments))),
                  config.kernelName() + " with " + std::to_string(numSegments) + " segments");
    }
}

namespace {

// Runs config on the interpreter (checked against float64) and returns its
// output bytes, for tests that require the same bits across kernel knobs.
std::vector<uint8_t> interpretedOutput(const ReduceSegmentsConfig& config, const BatchShape& shape) {
  INFO(config.kernelName());
  auto problem = validation::ReduceSegmentsProblem::create(config, shape);
  REQUIRE(problem.isOk());
  auto result = validation::runProblemInterpreted([&] { return compiler::buildReduceSegments(config); }, **problem);
  checkResult(result, config.kernelName());
  REQUIRE(result.isOk());
  return result->output;
}

}  // namespace

TEST_CASE("reduce_segments: rounds of segments add in index order whatever their size", "[reduce_segments]") {
  // Pass 2 loads a round of segments before adding them one by one, so any
  // round size gives the same bits; 19 segments leave partial last rounds.
  ReduceSegmentsConfig config = configOf(ScalarKind::F32, 5, 72, /*outputLse=*/true);
  CHECK(config.roundSegments() == 8);  // 8 heads × 128 padded columns: 8 values a thread per segment
  config.numQueryHeads = 128;
  config.headSize = 512;
  CHECK(config.roundSegments() == 2);  // MLA's rows: 64 a thread
  config = configOf(ScalarKind::F32, 5, 72, true);
  const std::vector<uint8_t> first = interpretedOutput(config, batch(19, 41));
  for (int perRound : {1, 3, 16}) {
    config.segmentsPerRound = perRound;
    CHECK(interpretedOutput(config, batch(19, 41)) == first);
  }
}

TEST_CASE("reduce_segments: any number of heads a program gives the same bits", "[reduce_segments]") {
  // 5 heads: programs of 2 and 4 heads leave masked heads in the last one.
  ReduceSegmentsConfig config = configOf(ScalarKind::BF16, 5, 72, /*outputLse=*/true);
  CHECK(config.headsPerProgram() == 8);
  CHECK(compiler::reduceSegmentsGridY(config) == 1);
  const std::vector<uint8_t> first = interpretedOutput(config, batch(11, 43));
  for (int heads : {1, 2, 4, 16}) {
    config.programHeads = heads;
    CHECK(compiler::reduceSegmentsGridY(config) == (5 + heads - 1) / heads);
    CHECK(interpretedOutput(config, batch(11, 43)) == first);
  }
  config.programHeads = 1;
  CHECK(config.kernelName().ends_with("_hp1"));
  config.programHeads = 32;
  CHECK_FALSE(config.validate().isOk());
}

TEST_CASE("reduce_segments: a launch's heads per program fill the GPU's SMs", "[reduce_segments]") {
  // On 132 SMs, two programs per SM: 16 heads a program (the auto choice) where
  // that many programs come, else 4, else 1.
  const auto headsFor = [](int numQueryHeads, int64_t numTokens, int programHeads = 0) {
    ReduceSegmentsConfig config = configOf(ScalarKind::BF16, numQueryHeads, 128, false);
    config.programHeads = programHeads;
    return compiler::reduceSegmentsForLaunch(config, numTokens, 132).programHeads;
  };
  CHECK(headsFor(32, 1) == 1);      // 32 programs rather than 2
  CHECK(headsFor(32, 64) == 4);     // 512 rather than 128
  CHECK(headsFor(32, 512) == 0);    // 1,024 programs of 16 heads: the auto choice, its name unchanged
  CHECK(headsFor(128, 4) == 1);     // MLA's 128 heads at 4 sequences: 512 programs
  CHECK(headsFor(128, 20) == 4);    // 640 of 4 rather than 160 of 16
  CHECK(headsFor(128, 40) == 0);    // 320 of 16 are enough
  CHECK(headsFor(8, 1000) == 0);    // 8 heads: the auto choice is 8 a program
  CHECK(headsFor(8, 100) == 1);
  CHECK(headsFor(32, 1, 8) == 8);   // a config's own choice stays
  ReduceSegmentsConfig config = configOf(ScalarKind::BF16, 32, 128, false);
  CHECK(compiler::reduceSegmentsForLaunch(config, 1, 0).programHeads == 0);  // no SM count: as configured
}

TEST_CASE("reduce_segments: fp8 output, within e4m3's rounding and saturated at ±448", "[reduce_segments][fp8out]") {
  for (ScalarKind dtype : {ScalarKind::F32, ScalarKind::BF16})
    for (double outputScale : {1.0 / 256, 1.0 / 1024}) {  // the second saturates the larger outputs
      ReduceSegmentsConfig config;
      config.dtype = dtype;
      config.numQueryHeads = 6;
      config.headSize = 80;
      config.outputLse = true;
      config.outputFp8 = true;
      BatchShape shape = batch(4, 21);
      shape.outputScale = outputScale;
      checkResult(validation::runReduceSegmentsInterpreted(config, shape),
                  config.kernelName() + " with output_scale " + std::to_string(outputScale));
    }
  // The spec field, and the kernel's parameters: output_scale after lse.
  auto spec = compiler::loadSpecText(
      "family: reduce_segments\nparams:\n  dtype: bf16\n  num_query_heads: 8\n  head_size: 64\n"
      "  output_lse: true\n  output_fp8: true\n",
      "fp8.yaml");
  if (!spec) FAIL(spec.diagnostic().str());
  REQUIRE(spec->variants.size() == 1);
  CHECK(spec->variants[0].name == "reduce_segments_bf16_h8_d64_lse_outfp8");
  CHECK(compiler::formatVariantParams(spec->variants[0]).find(" output_fp8=true") != std::string::npos);
  auto kernel = compiler::buildVariantKernel(spec->variants[0]);
  REQUIRE(kernel.isOk());
  CHECK((*kernel)->parameter(5)->name() == "output_scale");
}

TEST_CASE("reduce_segments: head counts beyond one program and odd head sizes", "[reduce_segments]") {
  // 20 heads: two programs per token, the second with 12 masked heads.
  ReduceSegmentsConfig config;
  config.dtype = ScalarKind::BF16;
  config.numQueryHeads = 20;
  config.headSize = 36;  // not a multiple of 8: no divisibility promise, padded to 64
  config.outputLse = true;
  config.numWarps = 1;
  CHECK(compiler::reduceSegmentsGridY(config) == 2);
  checkResult(validation::runReduceSegmentsInterpreted(config, batch(4, 21)), config.kernelName());
  // One token: no row with every segment empty is planted (it would be the only token).
  BatchShape one = batch(3, 22);
  one.queryLens = {1};
  one.contextLens = {0};
  config.numQueryHeads = 3;
  checkResult(validation::runReduceSegmentsInterpreted(config, one), config.kernelName() + " on one token");
}

TEST_CASE("reduce_segments: the problem plants empty segments and rows with no key", "[reduce_segments]") {
  ReduceSegmentsConfig config;
  config.numQueryHeads = 4;
  config.headSize = 64;
  auto problem = validation::ReduceSegmentsProblem::create(config, batch(5, 3));
  REQUIRE(problem.isOk());
  const reference::ReduceSegmentsInputs& in = (*problem)->inputs();
  const int64_t T = in.numTokens, H = in.numHeads, S = in.numSegments;
  REQUIRE(T == 8);
  int empty = 0, emptyRows = 0;
  for (int64_t row = 0; row < T * H; ++row) {
    int emptyHere = 0;
    for (int64_t s = 0; s < S; ++s) emptyHere += std::isinf(in.segmentMaxima[static_cast<size_t>(row * S + s)]);
    empty += emptyHere;
    emptyRows += emptyHere == S;
  }
  CHECK(empty > emptyRows * S);  // empty segments next to ones with keys, too
  CHECK(emptyRows >= 2);         // the last token's heads 0 and 2
  const auto reference = reference::referenceReduceSegments(in);
  CHECK(reference.lse[static_cast<size_t>((T - 1) * H)] == -std::numeric_limits<double>::infinity());
}

TEST_CASE("reduce_segments reads empty segments' rows and weighs them by exactly 0", "[reduce_segments]") {
  // Stage 1 writes its zero accumulator for an empty segment; the kernel reads the
  // row of an empty segment between keyed ones and multiplies it by weight 0, so
  // finite garbage vanishes (the problem's data) but a NaN there would not. The
  // check sees it: the harness is not blind.
  const ReduceSegmentsConfig config = configOf(ScalarKind::F32, 2, 32);
  auto problem = validation::ReduceSegmentsProblem::create(config, batch(3, 5));
  REQUIRE(problem.isOk());
  auto build = [&] { return compiler::buildReduceSegments(config); };
  checkResult(validation::runProblemInterpreted(build, **problem), "finite garbage in empty segments");

  const reference::ReduceSegmentsInputs& in = (*problem)->inputs();
  std::vector<uint8_t>& scratch = (*problem)->buffers()[1].bytes;
  REQUIRE((*problem)->buffers()[1].label == "segm_output");
  int poisoned = 0;
  for (size_t row = 0; row < in.segmentMaxima.size(); ++row) {
    if (!std::isinf(in.segmentMaxima[row])) continue;
    pd::setFloat(scratch, ScalarKind::F32, row * static_cast<size_t>(config.headSizePadded()),
                 std::numeric_limits<double>::quiet_NaN());
    ++poisoned;
  }
  REQUIRE(poisoned > 0);
  auto withNan = validation::runProblemInterpreted(build, **problem);
  REQUIRE(withNan.isOk());
  CHECK_FALSE(withNan->passed);
  CHECK(std::isinf(withNan->maxAbsError));
}

TEST_CASE("reduce_segments never reads the segments outside a token's keyed run", "[reduce_segments]") {
  // Token 0's first and last segments are empty for every head (the problem
  // plants them): pass 1 finds the run of keyed segments from the maxima alone,
  // so even NaN in those segments' sums and accumulators leaves the output exact.
  const ReduceSegmentsConfig config = configOf(ScalarKind::F32, 4, 32, true);
  auto problem = validation::ReduceSegmentsProblem::create(config, batch(6, 11));
  REQUIRE(problem.isOk());
  const reference::ReduceSegmentsInputs& in = (*problem)->inputs();
  const int64_t H = in.numHeads, S = in.numSegments;
  REQUIRE((*problem)->buffers()[1].label == "segm_output");
  REQUIRE((*problem)->buffers()[3].label == "segm_expsum");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int64_t h = 0; h < H; ++h)
    for (int64_t s : {int64_t{0}, S - 1}) {
      const size_t row = static_cast<size_t>(h * S + s);
      REQUIRE(std::isinf(in.segmentMaxima[row]));
      for (int64_t d = 0; d < config.headSizePadded(); ++d)
        pd::setFloat((*problem)->buffers()[1].bytes, ScalarKind::F32,
                     row * static_cast<size_t>(config.headSizePadded()) + static_cast<size_t>(d), nan);
      pd::setFloat((*problem)->buffers()[3].bytes, ScalarKind::F32, row, nan);
    }
  auto build = [&] { return compiler::buildReduceSegments(config); };
  checkResult(validation::runProblemInterpreted(build, **problem), "NaN outside the keyed run");
}

TEST_CASE("reduce_segments: the check catches a wrong element and a written gap", "[reduce_segments]") {
  const ReduceSegmentsConfig config = configOf(ScalarKind::F16, 3, 64, true);
  auto problem = validation::ReduceSegmentsProblem::create(config, batch(2, 9));
  REQUIRE(problem.isOk());
  auto kernel = compiler::buildReduceSegments(config);
  REQUIRE(kernel.isOk());
  auto good = validation::runProblemInterpreted([&] { return compiler::buildReduceSegments(config); }, **problem);
  REQUIRE(good.isOk());
  CHECK(good->passed);
  // Rerun, keeping the buffers, then damage them.
  std::vector<validation::KernelProblem::Buffer> after = (*problem)->buffers();
  {
    ir::InterpreterMemory memory;
    std::vector<ir::KernelArgument> args;
    for (auto& buffer : after)
      args.push_back(ir::PointerArg{memory.map(buffer.bytes.data(), buffer.bytes.size(), buffer.label)});
    for (const auto& scalar : (*problem)->scalarArguments()) std::visit([&](auto v) { args.push_back(v); }, scalar);
    ir::LaunchGrid grid;
    grid.x = (*problem)->grid().x;
    grid.y = (*problem)->grid().y;
    REQUIRE(ir::interpretKernel(**kernel, grid, args, memory).isOk());
  }
  validation::AttentionRunResult result;
  (*problem)->check(after, result);
  CHECK(result.passed);
  std::vector<validation::KernelProblem::Buffer> wrong = after;
  pd::setFloat(wrong[0].bytes, ScalarKind::F16, 1, pd::getFloat(wrong[0].bytes, ScalarKind::F16, 1) + 0.25);
  (*problem)->check(wrong, result);
  CHECK_FALSE(result.passed);
  CHECK(result.detail.find("token 0, head 0, dim 1") != std::string::npos);
  std::vector<validation::KernelProblem::Buffer> gap = after;
  pd::setFloat(gap[0].bytes, ScalarKind::F16, 64, 0.0);  // right after head 0's row of token 0
  (*problem)->check(gap, result);
  CHECK_FALSE(result.passed);
  CHECK(result.detail == "the kernel wrote the gap at element 64 of token 0's output rows");
  std::vector<validation::KernelProblem::Buffer> lse = after;
  pd::setFloat(lse[4].bytes, ScalarKind::F32, 0, pd::getFloat(lse[4].bytes, ScalarKind::F32, 0) + 1e-3);
  (*problem)->check(lse, result);
  CHECK_FALSE(result.passed);
  CHECK(result.detail.find("lse of token 0, head 0") == 0);
}

TEST_CASE("reduce_segments: the shipped specs pass on the interpreter and through the family",
          "[reduce_segments][specs]") {
  for (const std::string& file : shippedSpecs()) {
    auto spec = compiler::loadSpecFile(attnjit::tests::sourceDir() + "/specs/" + file);
    if (!spec) FAIL(spec.diagnostic().str());
    for (const auto& variant : spec->variants) {
      INFO(variant.name);
      CHECK(compiler::formatVariantParams(variant) == compiler::formatSpecParams(variant.reduceSegments));
      auto kernel = compiler::buildVariantKernel(variant);
      REQUIRE(kernel.isOk());
      CHECK((*kernel)->name() == variant.name);
      checkResult(validation::runVariantInterpreted(variant, spec->shape), variant.name + " on " + spec->shape.str());
    }
  }
}

TEST_CASE("reduce_segments: ptxas assembles the shipped specs for sm_80 and sm_90a",
          "[reduce_segments][codegen][ptxas]") {
  const bool ptxas = attnjit::tests::havePtxas();
  if (!ptxas) WARN("ptxas is not on the PATH; PTX is checked without assembling");
  int assembled = 0, total = 0;
  for (const std::string& file : shippedSpecs()) {
    auto spec = compiler::loadSpecFile(attnjit::tests::sourceDir() + "/specs/" + file);
    if (!spec) FAIL(spec.diagnostic().str());
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
        ++total;
        if (!ptxas) continue;
        std::string log;
        const bool ok = attnjit::tests::assemblesWithPtxas(compiled->ptx, arch, &log);
        INFO(log);
        CHECK(ok);
        assembled += ok;
      }
    }
  }
  CHECK(total == 16);
  if (ptxas) CHECK(assembled == total);
}

TEST_CASE("GPU reduce_segments across dtypes head sizes and segment counts", "[gpu][reduce_segments]") {
  if (!attnjit::tests::gpuPresent()) return;
  BatchShape large;
  large.queryLens = {37, 1, 130, 5, 300};
  large.contextLens = {0, 0, 0, 0, 0};
  large.seed = 17;
  for (auto dtype : {ScalarKind::BF16, ScalarKind::F16, ScalarKind::F32})
    for (auto [heads, headSize] : {std::pair{32, 128}, std::pair{20, 80}, std::pair{128, 512}})
      for (int numSegments : {1, 3, 16}) {
        ReduceSegmentsConfig config;
        config.dtype = dtype;
        config.numQueryHeads = heads;
        config.headSize = headSize;
        config.outputLse = numSegments != 3;
        config.lseTokenStride = headSize == 512 && config.outputLse;
        large.numPartials = numSegments;
        auto result = validation::runReduceSegmentsGpu(config, large, {});
        INFO(config.kernelName() << " with " << numSegments << " segments");
        INFO((result.isOk() ? result->check.detail : result.diagnostic().str()));
        REQUIRE(result.isOk());
        CHECK(result->check.passed);
      }
}
