// Plan tuning for the paged-attention op: the op's plan rules were measured on
// a few shapes (docs/perf-log.md); for the shapes an engine actually runs,
// tunePagedAttention measures the candidate plans on the call itself and
// records the fastest for the call's bucket (compiler/ops/TunedPlans.h), so
// that every later call of the bucket, in this process and later ones on the
// same device and build, launches it (PlanTuning::Recorded, the default).
//
// Candidates, in two rounds on the call's own buffers and stream:
//  1. kernels: KV tiles of 16 to 128 keys on 2, 4 or 8 warps (decode tilings;
//     each warp at least 8 keys), or, for prefill's 128-row query tiles, 32 and
//     64 keys on 4 warps (Q in shared memory or not) or 8, each with the
//     heuristic's split and cap;
//  2. decode only, for the winning kernel: 2D with and without a cap of two
//     CTAs per SM, and 2 to 64 split-KV segments (as many as the call's keys and
//     workspace allow).
// Each candidate is timed with CUDA events (the median of `samples` samples of
// `launchesPerSample` back-to-back calls, after two warm-up calls; split
// candidates include stage 2 and, without a workspace, the runtime scratch's
// allocation). The heuristic plan stays unless a candidate beats it by more
// than keepHeuristicWithin (noise must not flip plans); otherwise the first
// candidate measured within sameWithin of the fastest wins (a cap only where
// it gains, the fewest segments that reach the best time). The chosen plan
// then runs once more, so out (and the LSE) hold its result. A bucket whose
// rule stayed records that, and its calls take the rule's plan exactly.
//
// Tuning synchronizes the call's stream, compiles up to a few dozen kernels
// (in parallel, on compileThreads threads) and runs each candidate about 25
// times: seconds for a bucket, once per device and build. It refuses inside a
// CUDA-graph capture. The call's outputs must not alias its inputs (as in vLLM).
#pragma once

#include <string>
#include <vector>

#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/ops/TunedPlans.h"

namespace attnjit::ops {

struct PlanTuningOptions {
  int samples = 7;
  int launchesPerSample = 3;
  double keepHeuristicWithin = 0.02;
  double sameWithin = 0.01;  // candidates this close to the fastest tie: the first measured wins
  int compileThreads = 0;  // 0: every core
  bool record = true;      // false: measure and report only
};

struct PlanMeasurement {
  PlanChoice choice;
  std::string kernelName;
  std::string split;     // describeSplitAndOccupancy
  double medianMs = 0;   // per call; 0 when it did not run
  std::string error;     // why it did not run (compile or launch error)
};

struct PagedAttentionTuningReport {
  std::string bucket;
  PlanMeasurement heuristic;
  PlanMeasurement chosen;
  std::vector<PlanMeasurement> measurements;  // in the order measured, heuristic first
  bool recorded = false;      // remembered for the bucket (memory, at least)
  bool storedOnDisk = false;  // and in the disk cache
};

// Tunes the bucket of `params` (a valid call, outside graph capture) and runs
// the chosen plan. Errors: the call's own validation errors, a call that is
// never tuned (batch-invariant, bounds-checked), no GPU, a capture, or a plan
// that failed to run where the heuristic also failed.
support::Expected<PagedAttentionTuningReport> tunePagedAttention(const PagedAttentionParams& params,
                                                                 const PlanTuningOptions& options = {});

}  // namespace attnjit::ops
