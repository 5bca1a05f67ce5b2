// What split-KV's paged-attention and MLA decode ops share: the scratch layout
// in a workspace, the runtime's scratch for calls without one, and the stage-2
// launch of reduce_segments (compiler/kernels/ReduceSegments.h) that combines
// the segments.
#pragma once

#include <cstdint>

#include "compiler/kernels/ReduceSegments.h"
#include "runtime/Driver.h"
#include "runtime/StreamScratch.h"
#include "support/Diagnostics.h"

namespace attnjit::ops {

// Rows (token, query head, segment) of next_pow2(rowWidth) f32 partial outputs
// (segm_output, at the workspace's start), then one f32 maximum per row
// (segm_max), then one f32 sum per row (segm_expsum), each array 16-byte
// aligned. For MLA a "token" is a sequence and the row width kv_lora_rank.
struct SplitKvScratch {
  uint64_t outputBytes = 0;
  uint64_t rowBytes = 0;
  uint64_t totalBytes() const { return outputBytes + 2 * rowBytes; }

  struct Pointers {
    uint64_t output = 0, maximum = 0, expsum = 0;
  };
  Pointers at(uint64_t workspace) const { return {workspace, workspace + outputBytes, workspace + outputBytes + rowBytes}; }
};
SplitKvScratch splitKvScratch(int64_t numTokens, int numQueryHeads, int rowWidth, int64_t numSegments);

// The reduce_segments kernel a stage-2 launch over `numTokens` tokens runs on
// the op's device: `config` with its heads per program chosen for the launch
// (compiler::reduceSegmentsForLaunch). The warm-up and the plan tuner ready the
// same kernel the launch takes.
compiler::ReduceSegmentsConfig launchedReduceSegments(const compiler::ReduceSegmentsConfig& config, int64_t numTokens);

// One stage-2 launch: the reduce kernel `config` over `numSegments` segments of
// `scratch`, writing numTokens rows of out (and the LSE where config has it).
struct ReduceSegmentsLaunch {
  compiler::ReduceSegmentsConfig config;
  int64_t numTokens = 0;
  int32_t numSegments = 0;
  SplitKvScratch::Pointers scratch;
  uint64_t out = 0, lse = 0, outputScale = 0;
  // Element strides of out's rows and heads, and of the LSE's heads and tokens
  // (the token stride only with config.lseTokenStride).
  int64_t oStrideToken = 0, oStrideHead = 0, lseStrideHead = 0, lseStrideToken = 0;
  runtime::StreamHandle stream = nullptr;
};
support::Status launchReduceSegments(const ReduceSegmentsLaunch& launch);

// A split call that brought no workspace (params.workspace == 0): `bytes` of the
// runtime's stream-ordered scratch (runtime/StreamScratch.h) become its
// workspace for `split`, and are returned on its stream after the launches.
// Where there is none (no memory pools, out of memory) `unsplit` runs the call
// with runtimeScratch off, which its planner turns into an unsplit launch.
template <typename Params, typename Split, typename Unsplit>
support::Status launchWithRuntimeScratch(const Params& params, uint64_t bytes, Split split, Unsplit unsplit) {
  auto scratch = runtime::allocateStreamScratch(bytes, params.stream);
  if (!scratch) {
    Params withoutScratch = params;
    withoutScratch.runtimeScratch = false;
    return unsplit(withoutScratch);
  }
  Params withScratch = params;
  withScratch.workspace = *scratch;
  withScratch.workspaceBytes = bytes;
  const support::Status launched = split(withScratch);
  const support::Status released = runtime::releaseStreamScratch(*scratch, params.stream);
  return launched ? released : launched;
}

}  // namespace attnjit::ops
