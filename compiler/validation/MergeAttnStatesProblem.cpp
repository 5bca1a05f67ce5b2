#include "compiler/validation/MergeAttnStatesProblem.h"

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

// Distinct paddings after each token's row, so mixed-up strides read or write the
// wrong place (multiples of 8 keep the kernel's divisibility promise).
constexpr int64_t kPrefixPadding = 8, kSuffixPadding = 16, kOutputPadding = 24;
constexpr double kLseTolerance = 1e-5;
// fp8 outputs: merged / kOutputScale, a power of two that saturates rows of
// magnitude above 448/512 and leaves the rest in e4m3's normal range.
constexpr double kOutputScale = 1.0 / 512;

// Max abs error allowed for outputs of magnitude <= 1: the final rounding to the
// dtype (unit roundoff u) twice over for the f32 weights computed with the GPU's
// approximate exp; f32 outputs: a few ulp of the weights.
double mergeTolerance(ScalarKind dtype) {
  switch (dtype) {
    case ScalarKind::F16: return 2 * std::ldexp(1.0, -11);
    case ScalarKind::BF16: return 2 * std::ldexp(1.0, -8);
    default: return 5e-6;
  }
}

// An LSE pair for one (token, head): mostly finite, sometimes an empty side
// (either infinity) or both sides empty.
std::pair<double, double> randomLsePair(RandomStream& random) {
  const double inf = std::numeric_limits<double>::infinity();
  auto finite = [&] { return static_cast<double>(static_cast<float>(random.uniform(-8, 8))); };
  switch (random.below(40)) {
    case 0: return {-inf, finite()};
    case 1: return {finite(), -inf};
    case 2: return {inf, finite()};
    case 3: return {finite(), inf};
    case 4: return {-inf, -inf};
    case 5: return {inf, -inf};
    case 6: return {inf, inf};
    default: return {finite(), finite()};
  }
}

}  // namespace

support::Expected<std::unique_ptr<MergeAttnStatesProblem>> MergeAttnStatesProblem::create(
    const compiler::MergeAttnStatesConfig& config, const compiler::BatchShape& shape) {
  if (support::Status s = config.validate(); !s) return s;
  if (support::Status s = shape.validate(); !s) return s;
  std::unique_ptr<MergeAttnStatesProblem> problem(new MergeAttnStatesProblem());
  problem->config_ = config;
  const ScalarKind dt = config.dtype;
  const int64_t T = std::accumulate(shape.queryLens.begin(), shape.queryLens.end(), int64_t{0});
  const int64_t H = config.numHeads, D = config.headSize;
  reference::MergeInputs& in = problem->inputs_;
  in.numTokens = static_cast<int>(T);
  in.numHeads = config.numHeads;
  in.headSize = config.headSize;
  // Two thirds of the tokens have a prefix state; the rest take the suffix.
  if (config.contextTokenLimit) in.tokensWithContext = static_cast<int>(T * 2 / 3);
  RandomStream random(shape.seed);
  auto randomOutput = [&] { return ir::roundToFloatKind(random.uniform(-1, 1), dt); };
  in.prefixOutput.resize(static_cast<size_t>(T * H * D));
  in.suffixOutput.resize(in.prefixOutput.size());
  for (double& x : in.prefixOutput) x = randomOutput();
  for (double& x : in.suffixOutput) x = randomOutput();
  in.prefixLse.resize(static_cast<size_t>(H * T));
  in.suffixLse.resize(in.prefixLse.size());
  for (size_t i = 0; i < in.prefixLse.size(); ++i) std::tie(in.prefixLse[i], in.suffixLse[i]) = randomLsePair(random);

  const int64_t pStride = H * D + kPrefixPadding, sStride = H * D + kSuffixPadding, oStride = H * D + kOutputPadding;
  problem->oStrideToken_ = oStride;
  // The prefix rows end after the last token with context (a kernel that read
  // the prefix of a later token would read outside its buffer).
  auto rows = [&](const std::vector<double>& values, int64_t strideToken, int64_t tokens) {
    std::vector<uint8_t> bytes = poisonedBuffer(dt, static_cast<size_t>(tokens * strideToken));
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t i = 0; i < H * D; ++i)
        setFloat(bytes, dt, static_cast<size_t>(t * strideToken + i), values[static_cast<size_t>(t * H * D + i)]);
    return bytes;
  };
  auto lse = [&](const std::vector<double>& values) {
    std::vector<uint8_t> bytes(values.size() * 4);
    for (size_t i = 0; i < values.size(); ++i) setFloat(bytes, ScalarKind::F32, i, values[i]);
    return bytes;
  };
  auto& buffers = problem->buffers_;
  const ScalarKind outputKind = config.outputFp8 ? ScalarKind::F8E4M3 : dt;
  buffers.push_back({"output", poisonedBuffer(outputKind, static_cast<size_t>(T * oStride)), true});
  if (config.outputLse) buffers.push_back({"output_lse", poisonedBuffer(ScalarKind::F32, in.prefixLse.size()), true});
  const int64_t prefixTokens = in.tokensWithContext >= 0 ? in.tokensWithContext : T;
  buffers.push_back({"prefix_output", rows(in.prefixOutput, pStride, prefixTokens), false});
  buffers.push_back({"prefix_lse", lse(in.prefixLse), false});
  buffers.push_back({"suffix_output", rows(in.suffixOutput, sStride, T), false});
  buffers.push_back({"suffix_lse", lse(in.suffixLse), false});
  if (config.outputFp8) buffers.push_back({"output_scale", lse({kOutputScale}), false});
  problem->scalars_ = {T};
  if (config.contextTokenLimit) problem->scalars_.push_back(in.tokensWithContext);
  for (int64_t stride : {oStride, D, pStride, D, sStride, D}) problem->scalars_.push_back(stride);
  problem->grid_ = {compiler::mergeAttnStatesGridX(config, T), H, 1};
  problem->minimumBytes_ = 3.0 * static_cast<double>(T * H * D) * static_cast<double>(elementBytes(dt)) +
                           (config.outputLse ? 3.0 : 2.0) * static_cast<double>(T * H) * 4.0;
  return problem;
}

void MergeAttnStatesProblem::check(const std::vector<Buffer>& after, AttentionRunResult& result) const {
  const ScalarKind dt = config_.dtype;
  const int64_t T = inputs_.numTokens, H = inputs_.numHeads, D = inputs_.headSize;
  const reference::MergeOutputs expected = reference::referenceMergeAttnStates(inputs_);
  const std::vector<uint8_t>& out = after[0].bytes;
  const ScalarKind outputKind = config_.outputFp8 ? ScalarKind::F8E4M3 : dt;
  result.tolerance = mergeTolerance(dt);
  result.maxAbsError = 0;
  result.maxRelError = 0;
  std::string failure, worst;
  // fp8 outputs are compared in units of the output scale: within half a step of
  // the saturated reference, plus the f32 merge's error scaled alike.
  const double fp8Slack = mergeTolerance(ScalarKind::F32) / kOutputScale;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        const size_t at = static_cast<size_t>(t * oStrideToken_ + h * D + d);
        double want = expected.output[static_cast<size_t>((t * H + h) * D + d)];
        double got = 0;
        if (config_.outputFp8) {
          got = reference::decodeFp8E4M3(static_cast<uint8_t>(getBits(out, outputKind, at)));
          const double qmax = reference::quantMax(reference::QuantFormat::Fp8E4M3);
          want = std::clamp(want / kOutputScale, -qmax, qmax);
          const double allowed = reference::halfQuantStep(std::abs(want), reference::QuantFormat::Fp8E4M3) + fp8Slack;
          if (std::isfinite(got) && std::abs(got - want) > allowed && failure.empty()) {
            std::ostringstream text;
            text << "fp8 output of token " << t << ", head " << h << ", dim " << d << ": got " << got
                 << ", expected " << want << " (scaled by 1/" << kOutputScale << ") within " << allowed;
            failure = text.str();
          }
        } else {
          got = getFloat(out, dt, at);
        }
        const double err = std::isfinite(got) ? std::abs(got - want) : std::numeric_limits<double>::infinity();
        if (err > result.maxAbsError || worst.empty()) {
          std::ostringstream text;
          text << "token " << t << ", head " << h << ", dim " << d << ": got " << got << ", expected " << want;
          worst = text.str();
          result.maxAbsError = err;
        }
        result.maxRelError = std::max(result.maxRelError, err / (std::abs(want) + 1e-3));
      }
  for (int64_t t = 0; t < T && failure.empty(); ++t)
    for (int64_t i = H * D; i < oStrideToken_; ++i)
      if (getBits(out, outputKind, static_cast<size_t>(t * oStrideToken_ + i)) != poisonBits(outputKind)) {
        failure = "the kernel wrote the padding after token " + std::to_string(t) + "'s output row";
        break;
      }
  if (config_.outputLse && failure.empty()) {
    for (int64_t h = 0; h < H && failure.empty(); ++h)
      for (int64_t t = 0; t < T; ++t) {
        const double got = getFloat(after[1].bytes, ScalarKind::F32, static_cast<size_t>(h * T + t));
        const double want = expected.lse[static_cast<size_t>(h * T + t)];
        const bool ok = std::isnan(want) ? std::isnan(got)
                        : std::isinf(want) ? got == want
                                           : std::abs(got - want) <= kLseTolerance;
        if (!ok) {
          std::ostringstream text;
          text << "output_lse of head " << h << ", token " << t << ": got " << got << ", expected " << want;
          failure = text.str();
          break;
        }
      }
  }
  result.detail = failure.empty() ? "largest error at " + worst : failure;
  // fp8 outputs were judged per element (their step grows with the value).
  result.passed = failure.empty() && (config_.outputFp8 ? std::isfinite(result.maxAbsError)
                                                        : result.maxAbsError <= result.tolerance);
}

support::Expected<AttentionRunResult> runMergeAttnStatesInterpreted(const compiler::MergeAttnStatesConfig& config,
                                                               const compiler::BatchShape& shape) {
  auto problem = MergeAttnStatesProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemInterpreted([&] { return compiler::buildMergeAttnStates(config); }, **problem);
}

support::Expected<GpuRunResult> runMergeAttnStatesGpu(const compiler::MergeAttnStatesConfig& config,
                                                      const compiler::BatchShape& shape, const GpuRunOptions& options) {
  auto problem = MergeAttnStatesProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemGpu([&] { return compiler::buildMergeAttnStates(config); }, **problem, options);
}

}  // namespace attnjit::validation
