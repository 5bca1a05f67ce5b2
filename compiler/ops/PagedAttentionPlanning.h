// The paged-attention op's planning steps that plan tuning
// (compiler/ops/PagedAttentionTuning.cpp) builds on; the op's callers use
// compiler/ops/PagedAttentionOp.h.
#pragma once

#include <optional>
#include <string>

#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/ops/TunedPlans.h"

namespace attnjit::ops::detail {

// The plan the op's rules give a call (no tuned record consulted).
PagedAttentionPlan heuristicPagedAttentionPlan(const PagedAttentionParams& params);

// The bucket of calls that share a tuned plan with this one: the static
// variant (its kernel name before tuning), prefill or decode tiling, the
// power-of-two classes of the batch's sequences, longest query and longest
// sequence, whether the lengths are even, uneven or unknown, what a split may
// use (workspace, runtime scratch, none) and the SMs. nullopt for calls that
// always take the heuristic plan: batch-invariant, bounds-checked, sizes the
// kernel rejects, and calls without max_seq_len (nothing would tell their
// short batches from long ones).
std::optional<std::string> pagedAttentionTuningBucket(const PagedAttentionParams& params);

// The plan `choice` gives this call: its kernel tile, warps and Q placement,
// its segment count (capped by the call's tiles and workspace) and its cap
// (only where the hints say the lengths are equal). nullopt when the choice
// does not fit the call (an implausible field, a variant the kernel rejects,
// an untunable call).
std::optional<PagedAttentionPlan> pagedAttentionPlanWithChoice(const PagedAttentionParams& params,
                                                               const PlanChoice& choice);
PlanChoice planChoiceOf(const PagedAttentionPlan& plan);

// The heuristic plan of a decode-like call fitted to the CTAs an SM holds of
// its kernel (`residentCtasPerSm`, from the loaded kernel), so that a launch of
// equal CTAs does not end on a short last wave: a fill-rule split takes the
// nearest segment count that fits, one or two more or fewer (B=32, 32/8 heads:
// 512 CTAs are 1.29 waves at three per SM, 768 are 1.94); a 2D launch of unknown evenness (no min_seq_len) splits into
// 2-4 segments when max_seq_len >= kWaveSplitMinMaxSeqLen and split-KV is
// allowed, and is otherwise capped at fewer CTAs per SM (B=64: 1.94 waves at
// two). Tuned plans, prefill tilings, batch-invariant calls, hinted equal or
// uneven lengths and plans that already fit are returned as they are.
PagedAttentionPlan fitPlanToWaves(const PagedAttentionParams& params, const PagedAttentionPlan& heuristic,
                                  int residentCtasPerSm);

// params.tuning, or ATTNJIT_TUNE's mode for PlanTuning::FromEnvironment.
support::Expected<PlanTuningMode> planTuningMode(const PagedAttentionParams& params);

// validatePagedAttention's checks for a given plan.
support::Status validatePagedAttentionPlan(const PagedAttentionParams& params, const PagedAttentionPlan& plan);

// The plan a launch of `planned` runs: a heuristic plan fitted to its kernel's
// CTAs per SM (fitPlanToWaves; compiles or loads the kernel), others as they are.
support::Expected<PagedAttentionPlan> fittedPlan(const PagedAttentionParams& params, const PagedAttentionPlan& planned);

// Launches a validated call's plan (fitted as fittedPlan says): into the caller's workspace, or into the
// runtime's scratch (the plan's 2D variant where there is none).
support::Status launchPagedAttentionPlan(const PagedAttentionParams& params, const PagedAttentionPlan& plan);

// A first call of an unseen bucket under PlanTuning::OnFirstUse: tunes it and
// returns the status of the call (the winning plan ran last); nullopt when the
// call should launch its heuristic plan instead (a recorded or untunable
// bucket, a CUDA-graph capture, a bucket whose tuning failed before).
std::optional<support::Status> tuneOnFirstUse(const PagedAttentionParams& params);

}  // namespace attnjit::ops::detail
