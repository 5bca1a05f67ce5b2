#include "compiler/validation/MergePartialsProblem.h"

#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "compiler/validation/ProblemData.h"

namespace attnjit::validation {

using ir::ScalarKind;
using namespace problem_data;

namespace {

// Gaps (poisoned) after each token's row, after each partial and after each
// partial's LSE block, so mixed-up strides read or write the wrong place. Row and
// partial gaps are multiples of 8 (the kernel's divisibility promise).
constexpr int64_t kPartialRowPadding = 16, kPartialPadding = 32, kOutputPadding = 24, kLsePadding = 3;
constexpr double kLseTolerance = 1e-5;

}  // namespace

double MergePartialsProblem::tolerance(ScalarKind dtype, int numPartials) {
  return weightedCombineTolerance(dtype, numPartials);
}

support::Expected<std::unique_ptr<MergePartialsProblem>> MergePartialsProblem::create(
    const compiler::MergePartialsConfig& config, const compiler::BatchShape& shape) {
  if (support::Status s = config.validate(); !s) return s;
  if (support::Status s = shape.validate(); !s) return s;
  std::unique_ptr<MergePartialsProblem> problem(new MergePartialsProblem());
  problem->config_ = config;
  const ScalarKind dt = config.dtype;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  const int64_t T = std::accumulate(shape.queryLens.begin(), shape.queryLens.end(), int64_t{0});
  const int64_t N = shape.numPartials, H = config.numHeads, D = config.headSize;
  reference::MergePartialsInputs& in = problem->inputs_;
  in.numPartials = static_cast<int>(N);
  in.numTokens = static_cast<int>(T);
  in.numHeads = config.numHeads;
  in.headSize = config.headSize;
  RandomStream random(shape.seed);

  // LSEs [N][H][T]: one in twelve -inf, one in twelve +inf; the last token empty in
  // every partial and head; a NaN at token 0, head 0 of the last partial (when
  // the batch has a second token to hold the empty one).
  auto lseAt = [&](int64_t i, int64_t h, int64_t t) -> double& {
    return in.partialLses[static_cast<size_t>((i * H + h) * T + t)];
  };
  in.partialLses.resize(static_cast<size_t>(N * H * T));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const uint64_t kind = random.below(12);
        const double finite = static_cast<double>(static_cast<float>(random.uniform(-8, 8)));
        lseAt(i, h, t) = kind == 0 ? -inf : kind == 1 ? inf : finite;
        if (t == T - 1) lseAt(i, h, t) = random.below(2) == 0 ? -inf : inf;
      }
  if (T >= 2) lseAt(N - 1, 0, 0) = nan;

  // Outputs [N][T][H][D]: random, except the rows of empty partials, which hold
  // NaN (never read), unless they are partial 0 of a row with every partial empty
  // (copied to the output).
  auto allInfinite = [&](int64_t h, int64_t t) {
    for (int64_t i = 0; i < N; ++i)
      if (!std::isinf(lseAt(i, h, t))) return false;
    return true;
  };
  in.partialOutputs.resize(static_cast<size_t>(N * T * H * D));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const bool unread = std::isinf(lseAt(i, h, t)) && !(i == 0 && allInfinite(h, t));
        for (int64_t d = 0; d < D; ++d)
          in.partialOutputs[static_cast<size_t>(((i * T + t) * H + h) * D + d)] =
              unread ? nan : ir::roundToFloatKind(random.uniform(-1, 1), dt);
      }

  const int64_t pStrideToken = H * D + kPartialRowPadding, pStridePartial = T * pStrideToken + kPartialPadding;
  const int64_t lseStridePartial = H * T + kLsePadding, oStrideToken = H * D + kOutputPadding;
  problem->oStrideToken_ = oStrideToken;
  std::vector<uint8_t> partialBytes = poisonedBuffer(dt, static_cast<size_t>(N * pStridePartial));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t e = 0; e < H * D; ++e)
        setFloat(partialBytes, dt, static_cast<size_t>(i * pStridePartial + t * pStrideToken + e),
                 in.partialOutputs[static_cast<size_t>((i * T + t) * H * D + e)]);
  std::vector<uint8_t> lseBytes = poisonedBuffer(ScalarKind::F32, static_cast<size_t>(N * lseStridePartial));
  for (int64_t i = 0; i < N; ++i)
    for (int64_t e = 0; e < H * T; ++e)
      setFloat(lseBytes, ScalarKind::F32, static_cast<size_t>(i * lseStridePartial + e),
               in.partialLses[static_cast<size_t>(i * H * T + e)]);

  auto& buffers = problem->buffers_;
  buffers.push_back({"output", poisonedBuffer(dt, static_cast<size_t>(T * oStrideToken)), true});
  if (config.outputLse)
    buffers.push_back({"output_lse", poisonedBuffer(ScalarKind::F32, static_cast<size_t>(H * T)), true});
  buffers.push_back({"partial_outputs", std::move(partialBytes), false});
  buffers.push_back({"partial_lses", std::move(lseBytes), false});
  problem->scalars_ = {N, T, oStrideToken, D, pStridePartial, pStrideToken, D, lseStridePartial};
  problem->grid_ = {compiler::mergePartialsGridX(config, T), H, 1};
  const double rowBytes = static_cast<double>(T * H * D) * static_cast<double>(elementBytes(dt));
  problem->minimumBytes_ = static_cast<double>(N + 1) * rowBytes +
                           static_cast<double>(N + (config.outputLse ? 1 : 0)) * static_cast<double>(T * H) * 4.0;
  return problem;
}

void MergePartialsProblem::check(const std::vector<Buffer>& after, AttentionRunResult& result) const {
  const ScalarKind dt = config_.dtype;
  const int64_t T = inputs_.numTokens, H = inputs_.numHeads, D = inputs_.headSize;
  const reference::MergeOutputs expected = reference::referenceMergePartials(inputs_);
  const std::vector<uint8_t>& out = after[0].bytes;
  result.tolerance = tolerance(dt, inputs_.numPartials);
  result.maxAbsError = 0;
  result.maxRelError = 0;
  std::string failure, worst;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t d = 0; d < D; ++d) {
        const double got = getFloat(out, dt, static_cast<size_t>(t * oStrideToken_ + h * D + d));
        const double want = expected.output[static_cast<size_t>((t * H + h) * D + d)];
        double err = 0;
        if (std::isnan(want))
          err = std::isnan(got) ? 0 : std::numeric_limits<double>::infinity();
        else
          err = std::isfinite(got) ? std::abs(got - want) : std::numeric_limits<double>::infinity();
        if (err > result.maxAbsError || worst.empty()) {
          std::ostringstream text;
          text << "token " << t << ", head " << h << ", dim " << d << ": got " << got << ", expected " << want;
          worst = text.str();
          result.maxAbsError = err;
        }
        if (!std::isnan(want)) result.maxRelError = std::max(result.maxRelError, err / (std::abs(want) + 1e-3));
      }
  for (int64_t t = 0; t < T && failure.empty(); ++t)
    for (int64_t i = H * D; i < oStrideToken_; ++i)
      if (getBits(out, dt, static_cast<size_t>(t * oStrideToken_ + i)) != poisonBits(dt)) {
        failure = "the kernel wrote the padding after token " + std::to_string(t) + "'s output row";
        break;
      }
  if (config_.outputLse && failure.empty()) {
    for (int64_t h = 0; h < H && failure.empty(); ++h)
      for (int64_t t = 0; t < T; ++t) {
        const double got = getFloat(after[1].bytes, ScalarKind::F32, static_cast<size_t>(h * T + t));
        const double want = expected.lse[static_cast<size_t>(h * T + t)];
        const bool ok = std::isnan(want)   ? std::isnan(got)
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
  result.passed = failure.empty() && result.maxAbsError <= result.tolerance;
}

support::Expected<AttentionRunResult> runMergePartialsInterpreted(const compiler::MergePartialsConfig& config,
                                                             const compiler::BatchShape& shape) {
  auto problem = MergePartialsProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemInterpreted([&] { return compiler::buildMergePartials(config); }, **problem);
}

support::Expected<GpuRunResult> runMergePartialsGpu(const compiler::MergePartialsConfig& config,
                                                    const compiler::BatchShape& shape, const GpuRunOptions& options) {
  auto problem = MergePartialsProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemGpu([&] { return compiler::buildMergePartials(config); }, **problem, options);
}

}  // namespace attnjit::validation
