#include "compiler/ops/PagedAttentionTuning.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <set>

#include "compiler/driver/DeviceTarget.h"
#include "compiler/ops/SplitKv.h"
#include "compiler/kernels/ReduceSegments.h"
#include "compiler/ops/PagedAttentionPlanning.h"
#include "compiler/ops/ReadyKernels.h"
#include "runtime/Stream.h"

namespace attnjit::ops {

namespace {

support::Status tuningError(const std::string& message) {
  return support::Status::error({}, "paged attention tuning: " + message);
}

// A plan to measure, with what identifies it (two choices can give one plan:
// a segment count capped by the call's tiles, say).
struct Candidate {
  PlanChoice choice;
  PagedAttentionPlan plan;
  std::string identity;
};

std::string identityOf(const PagedAttentionPlan& plan) {
  return plan.config.kernelName() + " | " + describeSplitAndOccupancy(plan);
}

// Round 1: the kernels, each with the heuristic's split and cap.
std::vector<PlanChoice> kernelChoices(const PagedAttentionPlan& heuristic) {
  const PlanChoice base = detail::planChoiceOf(heuristic);
  std::vector<PlanChoice> choices{base};
  const int rows = heuristic.config.blockMRows;
  if (rows == 0) {
    // Decode tilings: the warps split a tile's keys, at least 8 each (one mma n-tile).
    for (int tile : {16, 32, 64, 128})
      for (int warps : {2, 4, 8})
        if (warps * 8 <= tile) choices.push_back({tile, warps, false, base.numSegments, base.ctasPerSm});
  } else {
    // Prefill tilings: the warps split the rows, at least 16 each.
    for (int tile : {32, 64})
      for (int warps : {4, 8})
        for (bool qInShared : {false, true})
          if (rows / warps >= 16) choices.push_back({tile, warps, qInShared, 1, 0});
    // Producer warps issuing the copies (warpgroup-MMA targets): 2–5% faster
    // than the same 8-warp tiling without them at 16-bit caches, and on 128-key
    // tiles with Q in shared memory (in registers the compute warps run out)
    // 8% on bidirectional prefill (docs/architecture.md, "Producer warps").
    // Softmax turns are no candidate: 3-6% slower than producers alone on
    // every tiling measured (H100, 8 x 2048, docs/perf-log.md 2026-12-07);
    // a recorded plan that names them still loads.
    if (compiler::opDeviceFacts().warpgroupMma && rows / 8 >= 16) {
      for (bool qInShared : {false, true})
        choices.push_back({64, 8, qInShared, 1, 0, PlanChoice::Producers::Copies, 2});
      choices.push_back({128, 8, true, 1, 0, PlanChoice::Producers::Copies, 2});
    }
  }
  return choices;
}

// Round 2 (decode): the split and cap for the winning kernel (a cap the call
// cannot take gives the uncapped plan, measured once).
std::vector<PlanChoice> splitChoices(const PlanChoice& kernel) {
  std::vector<PlanChoice> choices;
  for (int ctas : {0, 2}) choices.push_back({kernel.tileSize, kernel.numWarps, kernel.qInShared, 1, ctas});
  for (int segments : {2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32, 48, 64})
    choices.push_back({kernel.tileSize, kernel.numWarps, kernel.qInShared, segments, 0});
  return choices;
}

// Compiles (or loads) every kernel the candidates launch, in parallel; the
// error of each kernel that failed, by name.
std::map<std::string, std::string> readyCandidateKernels(const std::vector<Candidate>& candidates, int64_t numTokens,
                                                          int threads) {
  std::vector<WarmupKernel> kernels;
  std::set<std::string> names;
  for (const Candidate& candidate : candidates) {
    const compiler::UnifiedAttentionConfig config = candidate.plan.config;
    if (names.insert(config.kernelName()).second)
      kernels.push_back({config.kernelName(), [config] { return compiler::buildUnifiedAttention(config); }});
    if (config.splitKv) {
      const compiler::ReduceSegmentsConfig reduce = launchedReduceSegments(compiler::reduceSegmentsFor(config), numTokens);
      if (names.insert(reduce.kernelName()).second)
        kernels.push_back({reduce.kernelName(), [reduce] { return compiler::buildReduceSegments(reduce); }});
    }
  }
  const std::vector<support::Status> outcomes = readyEachKernel(kernels, threads);
  std::map<std::string, std::string> failed;
  for (size_t i = 0; i < kernels.size(); ++i)
    if (!outcomes[i]) failed[kernels[i].name] = outcomes[i].diagnostic().message;
  return failed;
}

// The median time of one call with `plan`, in ms.
support::Expected<double> timePlan(const PagedAttentionParams& p, const PagedAttentionPlan& plan,
                                   const PlanTuningOptions& options) {
  for (int i = 0; i < 2; ++i)
    if (support::Status s = detail::launchPagedAttentionPlan(p, plan); !s) return s;
  auto start = runtime::Event::create();
  if (!start) return start.status();
  auto stop = runtime::Event::create();
  if (!stop) return stop.status();
  std::vector<double> samples;
  for (int sample = 0; sample < options.samples; ++sample) {
    if (support::Status s = start->record(p.stream); !s) return s;
    for (int i = 0; i < options.launchesPerSample; ++i)
      if (support::Status s = detail::launchPagedAttentionPlan(p, plan); !s) return s;
    if (support::Status s = stop->record(p.stream); !s) return s;
    auto elapsed = runtime::Event::elapsedMilliseconds(*start, *stop);
    if (!elapsed) return elapsed.status();
    samples.push_back(*elapsed / options.launchesPerSample);
  }
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

// Makes the candidates of `choices` (deduplicated against `seen`), compiles
// their kernels and measures them, appending to report.measurements.
void measureChoices(const PagedAttentionParams& p, const std::vector<PlanChoice>& choices,
                    const PlanTuningOptions& options, std::set<std::string>& seen,
                    PagedAttentionTuningReport& report) {
  std::vector<Candidate> candidates;
  for (const PlanChoice& choice : choices) {
    std::optional<PagedAttentionPlan> plan = detail::pagedAttentionPlanWithChoice(p, choice);
    if (!plan || !detail::validatePagedAttentionPlan(p, *plan)) continue;
    std::string identity = identityOf(*plan);
    if (!seen.insert(identity).second) continue;
    candidates.push_back({detail::planChoiceOf(*plan), *plan, std::move(identity)});
  }
  const std::map<std::string, std::string> failed = readyCandidateKernels(candidates, p.numTokens, options.compileThreads);
  for (const Candidate& candidate : candidates) {
    PlanMeasurement measured{candidate.choice, candidate.plan.config.kernelName(),
                             describeSplitAndOccupancy(candidate.plan), 0, {}};
    if (auto it = failed.find(measured.kernelName); it != failed.end()) {
      measured.error = it->second;
    } else if (auto ms = timePlan(p, candidate.plan, options); ms) {
      measured.medianMs = *ms;
    } else {
      measured.error = ms.diagnostic().message;
    }
    report.measurements.push_back(std::move(measured));
  }
}

const PlanMeasurement* fastest(const std::vector<PlanMeasurement>& measurements) {
  const PlanMeasurement* best = nullptr;
  for (const PlanMeasurement& m : measurements)
    if (m.medianMs > 0 && (best == nullptr || m.medianMs < best->medianMs)) best = &m;
  return best;
}

}  // namespace

support::Expected<PagedAttentionTuningReport> tunePagedAttention(const PagedAttentionParams& p,
                                                                 const PlanTuningOptions& options) {
  if (options.samples < 1 || options.launchesPerSample < 1 || !(options.keepHeuristicWithin >= 0) ||
      options.keepHeuristicWithin >= 1 || !(options.sameWithin >= 0) || options.sameWithin >= 1 ||
      options.compileThreads < 0)
    return tuningError("options out of range: samples and launches per sample at least 1, margins in [0, 1), "
                       "compile threads 0 (every core) or more");
  if (support::Status s = validatePagedAttention(p); !s) return s;
  const std::optional<std::string> bucket = detail::pagedAttentionTuningBucket(p);
  if (!bucket)
    return tuningError("this call always takes the op's rules (it has no max_seq_len, or is batch-invariant or "
                       "bounds-checked)");
  if (!tunedPlanDeviceKey()) return tuningError("no CUDA device to measure on");
  auto capturing = runtime::streamIsCapturing(p.stream);
  if (!capturing) return capturing.status();
  if (*capturing) return tuningError("the stream is capturing a CUDA graph; tune outside the capture");

  PagedAttentionTuningReport report;
  report.bucket = *bucket;
  // The rules' plan as a launch runs it (fitted to its kernel's waves).
  auto fitted = detail::fittedPlan(p, detail::heuristicPagedAttentionPlan(p));
  if (!fitted) return fitted.status();
  const PagedAttentionPlan heuristic = *fitted;
  std::set<std::string> seen;
  // The heuristic plan itself first (its split may differ from what its
  // choice reproduces: the uneven-length rule's segment length).
  {
    Candidate self{detail::planChoiceOf(heuristic), heuristic, identityOf(heuristic)};
    seen.insert(self.identity);
    const auto failed = readyCandidateKernels({self}, p.numTokens, options.compileThreads);
    report.heuristic = {self.choice, heuristic.config.kernelName(), describeSplitAndOccupancy(heuristic), 0, {}};
    if (!failed.empty())
      return tuningError("the heuristic plan's kernel " + failed.begin()->first + " failed: " + failed.begin()->second);
    auto ms = timePlan(p, heuristic, options);
    if (!ms) return ms.status();
    report.heuristic.medianMs = *ms;
    report.measurements.push_back(report.heuristic);
  }
  measureChoices(p, kernelChoices(heuristic), options, seen, report);
  if (heuristic.config.blockMRows == 0) {
    const PlanMeasurement* bestKernel = fastest(report.measurements);
    measureChoices(p, splitChoices(bestKernel->choice), options, seen, report);
  }

  // The heuristic plan stays unless beaten by more than keepHeuristicWithin;
  // otherwise the first candidate measured within sameWithin of the fastest
  // (2D before a cap, fewer segments before more), so that noise does not
  // pick a plan that only ties.
  const PlanMeasurement* best = fastest(report.measurements);
  const bool keepHeuristic = best->medianMs >= report.heuristic.medianMs * (1.0 - options.keepHeuristicWithin);
  if (!keepHeuristic)
    for (const PlanMeasurement& m : report.measurements)
      if (m.medianMs > 0 && m.medianMs <= best->medianMs * (1.0 + options.sameWithin)) {
        best = &m;
        break;
      }
  report.chosen = keepHeuristic ? report.heuristic : *best;
  if (options.record) {
    report.recorded = true;
    report.storedOnDisk = TunedPlans::process().record(
        *bucket, {report.chosen.choice, report.chosen.medianMs, report.heuristic.medianMs, keepHeuristic});
  }
  // The chosen plan runs last: out holds its result.
  std::optional<PagedAttentionPlan> chosen =
      keepHeuristic ? std::optional<PagedAttentionPlan>(heuristic)
                    : detail::pagedAttentionPlanWithChoice(p, report.chosen.choice);
  if (!chosen) return tuningError("the chosen plan " + report.chosen.choice.str() + " no longer fits the call");
  if (support::Status s = detail::launchPagedAttentionPlan(p, *chosen); !s) return s;
  if (support::Status s = runtime::synchronizeStream(p.stream); !s) return s;
  return report;
}

namespace detail {

std::optional<support::Status> tuneOnFirstUse(const PagedAttentionParams& p) {
  const std::optional<std::string> bucket = pagedAttentionTuningBucket(p);
  if (!bucket || !tunedPlanDeviceKey() || TunedPlans::process().find(*bucket)) return std::nullopt;
  auto capturing = runtime::streamIsCapturing(p.stream);
  if (!capturing || *capturing) return std::nullopt;
  // One tuning at a time: concurrent first calls of a bucket tune it once.
  static std::mutex mutex;
  static std::set<std::string> failed;
  std::lock_guard<std::mutex> lock(mutex);
  if (failed.count(*bucket) != 0) return std::nullopt;
  if (TunedPlans::process().find(*bucket)) return launchPagedAttentionPlan(p, pagedAttentionPlan(p));
  if (auto report = tunePagedAttention(p); report) return support::Status::ok();
  failed.insert(*bucket);
  return std::nullopt;
}

}  // namespace detail

}  // namespace attnjit::ops
