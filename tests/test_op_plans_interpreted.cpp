// Every plan the paged-attention op can launch computes attention: random
// batches and static parameters, planned on the host as the op plans them
// (its rules, the rules fitted to a kernel's CTAs per SM, and the tuner's
// candidate plans), each plan's kernels (split-KV's reduce included) run on the
// CPU interpreter and compared with the float64 reference. The [gpu] op tests
// launch a fixed list of batches; these reach the rules' corners at random
// (small SM counts make small batches split, plain calls cut segments per
// sequence on the device, uneven lengths take the 3/8 rule).
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "compiler/ops/MlaDecodeOp.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/ops/PagedAttentionPlanning.h"
#include "compiler/validation/AttentionGpu.h"
#include "compiler/validation/AttentionProblem.h"
#include "compiler/validation/MlaDecodeProblem.h"

using namespace attnjit;
using compiler::KvCacheFormat;
using ir::ScalarKind;

namespace {

struct RandomCall {
  compiler::UnifiedAttentionConfig config;  // the call's static parameters
  compiler::BatchShape shape;
  bool lengthHints = true;  // max_seq_len and min_seq_len given
  bool workspace = true;    // a workspace large enough for any split
  bool runtimeScratch = true;
  int numSms = 8;
};

template <typename T>
T pick(std::mt19937& rng, const std::vector<T>& values) {
  return values[std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng)];
}

int uniform(std::mt19937& rng, int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }

RandomCall randomCall(std::mt19937& rng) {
  RandomCall call;
  compiler::UnifiedAttentionConfig& c = call.config;
  c.dtype = pick(rng, std::vector<ScalarKind>{ScalarKind::BF16, ScalarKind::F16, ScalarKind::F32});
  const auto heads = pick(rng, std::vector<std::pair<int, int>>{{4, 1}, {4, 4}, {8, 2}, {6, 2}, {8, 1}});
  c.numQueryHeads = heads.first;
  c.numKvHeads = heads.second;
  c.headSize = pick(rng, std::vector<int>{32, 64, 80, 128});
  c.blockSize = pick(rng, std::vector<int>{1, 8, 16, 32});
  c.causal = uniform(rng, 0, 3) != 0;
  if (c.dtype != ScalarKind::F32)
    c.kvCacheFormat = pick(rng, std::vector<KvCacheFormat>{KvCacheFormat::Auto, KvCacheFormat::Auto,
                                                           KvCacheFormat::Fp8E4M3, KvCacheFormat::Int8PerTokenHead,
                                                           KvCacheFormat::Fp8PerTokenHead});
  if (c.dtype == ScalarKind::F32 && uniform(rng, 0, 1) == 0) c.fp32Precision = compiler::Fp32Precision::Ieee;
  if (c.kvCacheFormat == KvCacheFormat::Auto && c.dtype != ScalarKind::F32 && uniform(rng, 0, 5) == 0)
    c.kvCacheFormat = KvCacheFormat::Int4PerTokenHead;
  if (compiler::isPerTokenHead(c.kvCacheFormat) && uniform(rng, 0, 1) == 0)
    c.kvScaleLayout = compiler::KvScaleLayout::Separate;
  if (uniform(rng, 0, 4) == 0) c.slidingWindow = uniform(rng, 16, 400);
  if (c.slidingWindow > 0 && !c.causal && uniform(rng, 0, 1) == 0) c.slidingWindowRight = uniform(rng, 0, 30);
  if (uniform(rng, 0, 9) == 0) c.attentionChunkSize = pick(rng, std::vector<int>{64, 256});
  if (uniform(rng, 0, 5) == 0) c.softcap = 30.0;
  if (uniform(rng, 0, 4) == 0) c.sinks = c.outputLse = true;
  if (uniform(rng, 0, 6) == 0) c.alibi = true;
  if (uniform(rng, 0, 6) == 0) c.outputFp8 = true;
  if (uniform(rng, 0, 8) == 0) c.perSequenceCausal = true;
  if (uniform(rng, 0, 8) == 0) c.qqBias = true;
  if (uniform(rng, 0, 8) == 0) c.mmPrefixRanges = 2;
  if (uniform(rng, 0, 8) == 0) c.valueHeadSize = c.headSize / 2;  // DiffKV

  call.shape.queryLens.clear();
  call.shape.contextLens.clear();
  const int numSeqs = uniform(rng, 1, 5);
  const bool decode = uniform(rng, 0, 2) != 0;
  for (int s = 0; s < numSeqs; ++s) {
    call.shape.queryLens.push_back(decode ? 1 : pick(rng, std::vector<int>{1, 3, 17, 40, 64}));
    // Long enough for the fill rule's 512-key segments to split a small batch
    // (and for a per-sequence cut into 2-4 segments to round).
    const int context = pick(rng, std::vector<int>{0, 5, 63, 300, 1100, 2300, 4100});
    call.shape.contextLens.push_back(context + uniform(rng, 0, 40));
  }
  call.shape.seed = static_cast<uint64_t>(uniform(rng, 1, 1 << 20));
  call.lengthHints = uniform(rng, 0, 2) != 0;
  call.workspace = uniform(rng, 0, 1) != 0;
  call.runtimeScratch = uniform(rng, 0, 3) != 0;
  call.numSms = pick(rng, std::vector<int>{2, 4, 8, 16, 132});
  return call;
}

// The op's arguments for `call`, with placeholder (aligned, never
// dereferenced) addresses for the problem's buffers and its strides.
ops::PagedAttentionParams opParams(const RandomCall& call, const validation::UnifiedAttentionProblem& problem) {
  ops::PagedAttentionParams p = validation::pagedAttentionOpParams(
      problem, call.config, call.shape, [](size_t index) { return 0x100000ull * (index + 1); });
  p.numSms = call.numSms;
  p.runtimeScratch = call.runtimeScratch;
  p.tuning = ops::PlanTuning::Off;
  if (!call.lengthHints) p.minSeqLen = p.maxSeqLen = 0;
  if (call.workspace) {
    p.workspace = 0x40000000ull;
    p.workspaceBytes = uint64_t{1} << 32;
  }
  return p;
}

// Runs `plan`'s kernels for `call` on the interpreter; an empty string when
// they match the reference, else what went wrong.
std::string runPlan(const RandomCall& call, const ops::PagedAttentionPlan& plan) {
  compiler::BatchShape shape = call.shape;
  if (plan.config.splitKv) {
    if (plan.split.segmentTiles > 0) {
      shape.segmentTiles = plan.split.segmentTiles;
      shape.numSegments = 0;
    } else {
      shape.segmentTiles = -plan.split.segmentTiles;
      shape.numSegments = plan.split.numSegments;
    }
  }
  auto result = validation::runUnifiedAttentionInterpreted(plan.config, shape);
  if (!result) return result.diagnostic().message;
  if (!result->passed) return result->detail;
  return {};
}

}  // namespace

TEST_CASE("every plan the paged attention op launches matches the reference on the interpreter",
          "[op][interpreter]") {
  std::mt19937 rng(20261205);
  int calls = 0, plansRun = 0, candidatesRun = 0, splitPlans = 0, perSequenceSplits = 0;
  for (int attempt = 0; attempt < 600 && calls < 44; ++attempt) {
    const RandomCall call = randomCall(rng);
    auto problem = validation::UnifiedAttentionProblem::create(call.config, call.shape);
    REQUIRE(problem.isOk());
    const ops::PagedAttentionParams p = opParams(call, **problem);
    // A combination the op refuses is its validation tests' business (the
    // count below fails if the draw stops reaching the op).
    if (!ops::validatePagedAttention(p)) continue;
    ++calls;

    std::vector<std::pair<std::string, ops::PagedAttentionPlan>> plans;
    plans.push_back({"the op's plan", ops::pagedAttentionPlan(p)});
    const ops::PagedAttentionPlan heuristic = ops::detail::heuristicPagedAttentionPlan(p);
    const int resident = uniform(rng, 1, 4);
    plans.push_back({"fitted to " + std::to_string(resident) + " CTAs per SM",
                     ops::detail::fitPlanToWaves(p, heuristic, resident)});
    // One of the tuner's candidates (a plan tuning would launch and time).
    ops::PlanChoice choice{pick(rng, std::vector<int>{16, 32, 64, 128}), pick(rng, std::vector<int>{2, 4, 8}), false,
                           pick(rng, std::vector<int>{1, 2, 3, 5, 8}), 0};
    if (heuristic.config.blockMRows != 0)
      choice = {pick(rng, std::vector<int>{32, 64}), pick(rng, std::vector<int>{4, 8}), uniform(rng, 0, 1) != 0, 1, 0};
    if (auto candidate = ops::detail::pagedAttentionPlanWithChoice(p, choice))
      plans.push_back({"the tuner's candidate " + choice.str(), *candidate});

    for (const auto& [origin, plan] : plans) {
      INFO(origin << ": " << plan.config.kernelName() << ", " << ops::describeSplitAndOccupancy(plan) << "; batch "
                  << call.shape.str() << ", " << call.numSms << " SMs, hints " << call.lengthHints << ", workspace "
                  << call.workspace << ", runtime scratch " << call.runtimeScratch);
      const support::Status valid = ops::detail::validatePagedAttentionPlan(p, plan);
      if (origin == "the op's plan") REQUIRE(valid.isOk());
      if (!valid) continue;
      CHECK(runPlan(call, plan) == "");
      ++plansRun;
      if (origin.rfind("the tuner's", 0) == 0) ++candidatesRun;
      if (plan.config.splitKv) {
        ++splitPlans;
        if (plan.split.segmentTiles < 0) ++perSequenceSplits;
      }
    }
  }
  // The draw must reach the rules it is here for.
  CHECK(calls >= 40);
  CHECK(splitPlans >= 10);
  CHECK(perSequenceSplits >= 3);
  CHECK(plansRun >= 2 * calls);
  CHECK(candidatesRun >= calls / 3);
}

namespace {

// A random MLA decode call: its static parameters, its batch and what it
// hands the op, with placeholder (aligned, never dereferenced) addresses.
struct RandomMlaCall {
  ops::MlaDecodeParams params;
  validation::MlaDecodeBatch batch;
};

RandomMlaCall randomMlaCall(std::mt19937& rng) {
  RandomMlaCall call;
  ops::MlaDecodeParams& p = call.params;
  p.dtype = pick(rng, std::vector<ScalarKind>{ScalarKind::BF16, ScalarKind::F16, ScalarKind::F32});
  if (p.dtype != ScalarKind::F32 && uniform(rng, 0, 2) == 0) p.kvCacheFormat = KvCacheFormat::Fp8E4M3;
  p.kvLoraRank = pick(rng, std::vector<int>{512, 256});
  p.ropeDim = 64;
  p.numHeads = pick(rng, std::vector<int>{16, 16, 32, 64});
  p.blockSize = pick(rng, std::vector<int>{1, 16, 64});
  p.splitRule = uniform(rng, 0, 3) == 0 ? ops::MlaSplitRule::Vllm : ops::MlaSplitRule::Balanced;
  const int numSeqs = uniform(rng, 1, 4);
  call.batch.seqLens.clear();
  for (int s = 0; s < numSeqs; ++s)
    call.batch.seqLens.push_back(pick(rng, std::vector<int>{1, 17, 300, 1500, 3000}) + uniform(rng, 0, 40));
  call.batch.seed = static_cast<uint64_t>(uniform(rng, 1, 1 << 20));
  p.numSeqs = numSeqs;
  if (uniform(rng, 0, 3) != 0) {
    p.maxSeqLen = *std::max_element(call.batch.seqLens.begin(), call.batch.seqLens.end());
    if (uniform(rng, 0, 1) != 0)
      for (int len : call.batch.seqLens) p.sumSeqLens += len;
  }
  p.numSms = pick(rng, std::vector<int>{2, 4, 8, 132});
  p.scale = 0.07f;
  const int W = p.kvLoraRank + p.ropeDim, H = p.numHeads;
  p.out = 0x100000;
  p.q = 0x200000;
  p.kvCache = 0x300000;
  p.blockTables = 0x400000;
  p.seqLens = 0x500000;
  if (p.kvCacheFormat != KvCacheFormat::Auto) p.kvScale = 0x600000;
  if (uniform(rng, 0, 2) == 0) {
    p.lse = 0x700000;
    p.lseStrideBatch = H;
    p.lseStrideHead = 1;
  }
  p.qStrideBatch = int64_t{H} * W;
  p.qStrideHead = W;
  p.oStrideBatch = int64_t{H} * p.kvLoraRank;
  p.oStrideHead = p.kvLoraRank;
  p.blockTableStride = 64;
  p.kvStrideToken = W;
  p.kvStrideBlock = int64_t{p.blockSize} * W;
  p.runtimeScratch = uniform(rng, 0, 3) != 0;
  if (uniform(rng, 0, 1) != 0) {
    p.workspace = 0x40000000ull;
    p.workspaceBytes = uint64_t{1} << 32;
  }
  return call;
}

}  // namespace

TEST_CASE("every plan the MLA decode op launches matches the reference on the interpreter", "[op][mla][interpreter]") {
  std::mt19937 rng(1205);
  int calls = 0, splitPlans = 0;
  for (int attempt = 0; attempt < 100 && calls < 14; ++attempt) {
    RandomMlaCall call = randomMlaCall(rng);
    const ops::MlaDecodeParams& p = call.params;
    if (!ops::validateMlaDecode(p)) continue;
    ++calls;
    compiler::MlaDecodeConfig config = ops::selectMlaDecodeVariant(p);
    const ops::MlaSplitPlan plan = ops::mlaDecodeSplitPlan(p);
    config.outputLse = p.lse != 0;
    INFO(config.kernelName() << ", " << plan.numSegments << " segments of " << plan.segmentTiles << " tiles; "
                             << call.batch.seqLens.size() << " sequences, max_seq_len " << p.maxSeqLen << ", "
                             << p.numSms << " SMs");
    REQUIRE(config.splitKv == (plan.numSegments > 1));
    if (config.splitKv) {
      ++splitPlans;
      call.batch.segmentTiles = plan.segmentTiles;
      // The op sizes its grid from max_seq_len, the harness from the longest
      // sequence: the same count when the hint is exact.
      auto problem = validation::MlaDecodeProblem::create(config, call.batch);
      REQUIRE(problem.isOk());
      CHECK((*problem)->launches()[0].gridZ == plan.numSegments);
    }
    auto result = validation::runMlaDecodeInterpreted(config, call.batch);
    REQUIRE(result.isOk());
    CHECK(result->passed);
    if (!result->passed) WARN(result->detail);
  }
  CHECK(calls >= 12);
  CHECK(splitPlans >= 4);
}
