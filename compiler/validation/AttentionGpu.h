// Runs an attention problem on the GPU: JIT-compiles the variant for the local
// device, launches it on random inputs, checks the output against the float64
// reference, and (on request) times it with CUDA events next to a device-to-device
// copy of the same number of bytes.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "compiler/ops/PagedAttentionTuning.h"
#include "compiler/validation/AttentionProblem.h"

namespace attnjit::validation {

struct GpuRunOptions {
  int warmupIterations = 3;
  int timedIterations = 0;  // 0: correctness only
  // The PTX target to compile for; empty: the device's (localTarget). An older
  // target's PTX is JIT-compiled by the driver for the device, so a newer GPU
  // runs the code generated for, e.g., sm_80 (paths taken only there).
  std::string target;
  // runPagedAttentionOpGpu: what the call passes besides the batch.
  enum class OpCall {
    Engine,       // minSeqLen/maxSeqLen hints and a workspace from pagedAttentionWorkspaceBytes
    NoWorkspace,  // the hints, no workspace: split-KV into the runtime's scratch
    Plain,        // neither hints nor workspace
  };
  OpCall opCall = OpCall::Engine;
  // "engine", "no-workspace" or "plain" (the CLI's --op-call); nullopt for anything else.
  static std::optional<OpCall> opCallNamed(const std::string& name);
  // runPagedAttentionOpGpu: tune the call's bucket first (ops::tunePagedAttention,
  // recorded for later calls), then check and time the op with the chosen plan.
  bool tunePlan = false;
  // runPagedAttentionOpGpu: the call's plan tuning (PagedAttentionParams::tuning).
  ops::PlanTuning planTuning = ops::PlanTuning::FromEnvironment;
};

struct GpuRunResult {
  AttentionRunResult check;
  std::string target;          // e.g. sm_90a
  std::string cacheOrigin;     // "compiled", "disk" or "memory" (the kernel cache)
  double compilePassesMs = 0;  // tile-IR passes (they make the cache key); 0 when an alias skipped them
  double compileLlvmMs = 0;    // lowering + O3 + PTX emission (0 on a cache hit)
  double compileCubinMs = 0;   // PTX → cubin through the driver, and module load
  double warmDiskLoadMs = 0;   // a fresh cache finding the kernel on disk: build + alias + read + load
  int registers = 0, spillBytes = 0, sharedBytes = 0;
  // Timing (timedIterations > 0): median kernel time and what it means.
  double medianMs = 0;
  double gbPerSecond = 0;      // minimumBytes / median
  double tflops = 0;           // flops / median
  double copyGbPerSecond = 0;  // device-to-device copy, bytes read + written
  // Host time per launch of the loaded kernel: packing the scalar parameters and
  // cuLaunchKernel (measured over 200 back-to-back asynchronous launches).
  double launchOverheadMicroseconds = 0;
};

support::Expected<GpuRunResult> runUnifiedAttentionGpu(const compiler::UnifiedAttentionConfig& config,
                                                       const compiler::BatchShape& shape, const GpuRunOptions& options);

// The op API's arguments for `problem` (made from config and shape): the
// variant's static parameters, the batch with its min and max seq_len hints,
// each buffer at bufferAddress(its index in problem.buffers()) and the
// problem's strides. No workspace, default tuning.
ops::PagedAttentionParams pagedAttentionOpParams(const UnifiedAttentionProblem& problem,
                                                 const compiler::UnifiedAttentionConfig& config,
                                                 const compiler::BatchShape& shape,
                                                 const std::function<uint64_t(size_t)>& bufferAddress);

// The same problem run through the op API (ops::pagedAttention), as an engine
// calls it: the variant's static parameters (dtype, heads, head sizes, block
// size, cache format, score modifiers) with the batch's minSeqLen and maxSeqLen
// hints and a workspace from pagedAttentionWorkspaceBytes (options.opCall: or
// without them), so the op picks the tiling and the split plan itself (the
// variant's tiling options are ignored).
// Timed calls include the op's host work (validation, kernel lookup, launches).
struct PagedAttentionOpRun {
  GpuRunResult run;          // check, timing; compile fields stay 0 (the op compiles inside)
  std::string kernelName;    // the attention kernel the op chose
  int numSegments = 1;       // its split plan (1: a 2D launch)
  int segmentTiles = 0;
  bool tunedPlan = false;    // a tuned record chose the plan of the calls after the first (else the op's rules)
  std::string plan;          // split and occupancy (ops::describeSplitAndOccupancy)
  double firstCallMs = 0;    // the first call, compile or disk-cache load included, to completion
  std::optional<ops::PagedAttentionTuningReport> tuning;  // options.tunePlan
};
support::Expected<PagedAttentionOpRun> runPagedAttentionOpGpu(const compiler::UnifiedAttentionConfig& config,
                                                              const compiler::BatchShape& shape,
                                                              const GpuRunOptions& options);

}  // namespace attnjit::validation
