#include "compiler/validation/ReduceSegmentsProblem.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "compiler/validation/ProblemData.h"

namespace attnjit::validation {

using ir::ScalarKind;
using namespace problem_data;

namespace {

// Poisoned gaps after each head's output row and after each token's rows (multiples
// of 8 where the head size is, the kernel's divisibility promise for the strides),
// and in the LSE buffer between blocks.
constexpr int64_t kLseGap = 3;
constexpr double kLseTolerance = 1e-5;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

double asF32(double x) { return static_cast<double>(static_cast<float>(x)); }

}  // namespace

double ReduceSegmentsProblem::tolerance(ScalarKind dtype, int numSegments) {
  // exp2 weights instead of exp: the same error model as merge_partials.
  return weightedCombineTolerance(dtype, numSegments);
}

support::Expected<std::unique_ptr<ReduceSegmentsProblem>> ReduceSegmentsProblem::create(
    const compiler::ReduceSegmentsConfig& config, const compiler::BatchShape& shape) {
  if (support::Status s = config.validate(); !s) return s;
  if (support::Status s = shape.validate(); !s) return s;
  std::unique_ptr<ReduceSegmentsProblem> problem(new ReduceSegmentsProblem());
  problem->config_ = config;
  const ScalarKind dt = config.dtype, F32 = ScalarKind::F32;
  const int64_t T = std::accumulate(shape.queryLens.begin(), shape.queryLens.end(), int64_t{0});
  const int64_t S = shape.numPartials, H = config.numQueryHeads, D = config.headSize, Dp = config.headSizePadded();
  reference::ReduceSegmentsInputs& in = problem->inputs_;
  in.numTokens = static_cast<int>(T);
  in.numHeads = config.numQueryHeads;
  in.numSegments = static_cast<int>(S);
  in.headSize = config.headSize;
  RandomStream random(shape.seed);

  // Per segment: one in five empty; else a maximum in [-12, 12] (log2 units), a sum
  // in [1, 64] (the maximum's own term is 1) and acc = sum · v with |v| < 1, as
  // Σ P·V is for values of magnitude below 1. Everything is f32, as stage 1 stores it.
  // With three segments or more, token 0's first and last segments are empty for
  // every head, as stage 1 leaves the segments before a sliding window and after
  // a short sequence.
  in.segmentMaxima.resize(static_cast<size_t>(T * H * S));
  in.segmentSums.resize(static_cast<size_t>(T * H * S));
  in.segmentOutputs.resize(static_cast<size_t>(T * H * S * D));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < S; ++s) {
        const size_t row = static_cast<size_t>((t * H + h) * S + s);
        const bool allEmpty = T >= 2 && t == T - 1 && h % 2 == 0;
        const bool edgeEmpty = S >= 3 && t == 0 && (s == 0 || s == S - 1);
        const bool empty = allEmpty || edgeEmpty || random.below(5) == 0;
        const double sum = empty ? 0.0 : asF32(random.uniform(1, 64));
        in.segmentMaxima[row] = empty ? kNegInf : asF32(random.uniform(-12, 12));
        in.segmentSums[row] = sum;
        for (int64_t d = 0; d < D; ++d)
          in.segmentOutputs[row * static_cast<size_t>(D) + static_cast<size_t>(d)] =
              empty ? asF32(random.uniform(-1e4, 1e4)) : asF32(sum * random.uniform(-1, 1));
      }

  std::vector<uint8_t> outputBytes = poisonedBuffer(F32, static_cast<size_t>(T * H * S * Dp));
  for (size_t row = 0; row < static_cast<size_t>(T * H * S); ++row)
    for (int64_t d = 0; d < D; ++d)
      setFloat(outputBytes, F32, row * static_cast<size_t>(Dp) + static_cast<size_t>(d),
               in.segmentOutputs[row * static_cast<size_t>(D) + static_cast<size_t>(d)]);
  std::vector<uint8_t> maxBytes(static_cast<size_t>(T * H * S) * 4), sumBytes(maxBytes.size());
  for (size_t row = 0; row < static_cast<size_t>(T * H * S); ++row) {
    setFloat(maxBytes, F32, row, in.segmentMaxima[row]);
    setFloat(sumBytes, F32, row, in.segmentSums[row]);
  }

  const int64_t rowGap = D % 8 == 0 ? 8 : 3, tokenGap = D % 8 == 0 ? 16 : 5;
  problem->oStrideHead_ = D + rowGap;
  problem->oStrideToken_ = H * problem->oStrideHead_ + tokenGap;
  if (config.lseTokenStride) {  // MLA's [tokens, H] layout, with a gap after each token
    problem->lseStrideHead_ = 1;
    problem->lseStrideToken_ = H + kLseGap;
    problem->lseElements_ = T * problem->lseStrideToken_;
  } else {  // [H, tokens], a gap after each head
    problem->lseStrideHead_ = T + kLseGap;
    problem->lseStrideToken_ = 1;
    problem->lseElements_ = H * problem->lseStrideHead_;
  }

  auto& buffers = problem->buffers_;
  const ScalarKind outKind = config.outputFp8 ? ScalarKind::F8E4M3 : dt;
  buffers.push_back({"out", poisonedBuffer(outKind, static_cast<size_t>(T * problem->oStrideToken_)), true});
  buffers.push_back({"segm_output", std::move(outputBytes), false});
  buffers.push_back({"segm_max", std::move(maxBytes), false});
  buffers.push_back({"segm_expsum", std::move(sumBytes), false});
  if (config.outputLse)
    buffers.push_back({"lse", poisonedBuffer(F32, static_cast<size_t>(problem->lseElements_)), true});
  if (config.outputFp8) {  // the kernel's parameter after lse
    problem->outputScale_ = static_cast<float>(shape.outputScale);
    std::vector<uint8_t> scale(4);
    setFloat(scale, F32, 0, problem->outputScale_);
    buffers.push_back({"output_scale", std::move(scale), false});
  }
  problem->scalars_ = {S, problem->oStrideToken_, problem->oStrideHead_};
  if (config.outputLse) problem->scalars_.push_back(problem->lseStrideHead_);
  if (config.outputLse && config.lseTokenStride) problem->scalars_.push_back(problem->lseStrideToken_);
  problem->grid_ = {T, compiler::reduceSegmentsGridY(config), 1};
  problem->minimumBytes_ = static_cast<double>(T * H * S) * static_cast<double>(D * 4 + 8) +
                           static_cast<double>(T * H * D) * static_cast<double>(elementBytes(outKind)) +
                           (config.outputLse ? static_cast<double>(T * H) * 4.0 : 0.0);
  return problem;
}

void ReduceSegmentsProblem::check(const std::vector<Buffer>& after, AttentionRunResult& result) const {
  const ScalarKind dt = config_.dtype;
  const ScalarKind outKind = config_.outputFp8 ? ScalarKind::F8E4M3 : dt;
  const int64_t T = inputs_.numTokens, H = inputs_.numHeads, D = inputs_.headSize;
  const reference::ReduceSegmentsOutputs expected = reference::referenceReduceSegments(inputs_);
  const std::vector<uint8_t>& out = after[0].bytes;
  result.tolerance = tolerance(dt, inputs_.numSegments);
  result.outputStrideToken = oStrideToken_;
  result.maxAbsError = 0;
  result.maxRelError = 0;
  std::string failure, worst;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        double got = getFloat(out, outKind, static_cast<size_t>(t * oStrideToken_ + h * oStrideHead_ + d));
        double want = expected.output[static_cast<size_t>((t * H + h) * D + d)];
        // fp8 output: compared in o's units beyond e4m3's own rounding.
        double allowance = 0;
        if (config_.outputFp8) {
          const Fp8OutputComparison compared = compareFp8Output(got, want, outputScale_, result.tolerance);
          got = compared.got;
          want = compared.want;
          allowance = compared.roundingAllowance;
        }
        const double err = std::isfinite(got) ? std::max(0.0, std::abs(got - want) - allowance)
                                              : std::numeric_limits<double>::infinity();
        if (err > result.maxAbsError || worst.empty()) {
          std::ostringstream text;
          text << "token " << t << ", head " << h << ", dim " << d << ": got " << got << ", expected " << want;
          worst = text.str();
          result.maxAbsError = err;
        }
        result.maxRelError = std::max(result.maxRelError, err / (std::abs(want) + 1e-3));
      }
  // Every element outside the rows must keep its poison.
  for (int64_t i = 0; i < T * oStrideToken_ && failure.empty(); ++i) {
    const int64_t t = i / oStrideToken_, inToken = i % oStrideToken_;
    const bool inRow = inToken < H * oStrideHead_ && inToken % oStrideHead_ < D;
    if (!inRow && getBits(out, outKind, static_cast<size_t>(i)) != poisonBits(outKind))
      failure = "the kernel wrote the gap at element " + std::to_string(inToken) + " of token " + std::to_string(t) +
                "'s output rows";
  }
  if (config_.outputLse && failure.empty()) {
    const std::vector<uint8_t>& lse = after[4].bytes;
    std::vector<bool> isLse(static_cast<size_t>(lseElements_), false);
    for (int64_t t = 0; t < T && failure.empty(); ++t)
      for (int64_t h = 0; h < H; ++h) {
        const size_t at = static_cast<size_t>(h * lseStrideHead_ + t * lseStrideToken_);
        isLse[at] = true;
        const double got = getFloat(lse, ScalarKind::F32, at);
        const double want = expected.lse[static_cast<size_t>(t * H + h)];
        const bool ok =
            std::isinf(want) ? got == want : std::abs(got - want) <= kLseTolerance * std::max(1.0, std::abs(want));
        if (!ok) {
          std::ostringstream text;
          text << "lse of token " << t << ", head " << h << ": got " << got << ", expected " << want;
          failure = text.str();
          break;
        }
      }
    for (int64_t i = 0; i < lseElements_ && failure.empty(); ++i)
      if (!isLse[static_cast<size_t>(i)] &&
          getBits(lse, ScalarKind::F32, static_cast<size_t>(i)) != poisonBits(ScalarKind::F32))
        failure = "the kernel wrote the LSE buffer's gap at element " + std::to_string(i);
  }
  result.detail = failure.empty() ? "largest error at " + worst : failure;
  result.passed = failure.empty() && result.maxAbsError <= result.tolerance;
}

support::Expected<AttentionRunResult> runReduceSegmentsInterpreted(const compiler::ReduceSegmentsConfig& config,
                                                              const compiler::BatchShape& shape) {
  auto problem = ReduceSegmentsProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemInterpreted([&] { return compiler::buildReduceSegments(config); }, **problem);
}

support::Expected<GpuRunResult> runReduceSegmentsGpu(const compiler::ReduceSegmentsConfig& config,
                                                     const compiler::BatchShape& shape, const GpuRunOptions& options) {
  auto problem = ReduceSegmentsProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemGpu([&] { return compiler::buildReduceSegments(config); }, **problem, options);
}

}  // namespace attnjit::validation
