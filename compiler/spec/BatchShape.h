// A batch of sequences as the CLI's `run`/`bench`, the op planner and the
// validation problems describe it: per sequence, new query tokens after cached
// context, plus the knobs of a checked run (seed, sampling stride, split-KV
// segment length, partial count, key ramp, fp8 output scale). Specs give a
// default (`shape:`), `--shape key=value` overrides it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/Diagnostics.h"

namespace attnjit::compiler {

// One batch: sequence i has queryLens[i] new query tokens after contextLens[i]
// tokens already in the cache (its seq_len is their sum).
struct BatchShape {
  std::vector<int> queryLens = {1, 17, 40};
  std::vector<int> contextLens = {33, 0, 70};
  uint64_t seed = 1;
  // Check every checkStride-th token against the float64 reference (and each
  // sequence's last): large benchmark batches check a sample.
  int checkStride = 1;
  // Split-KV (3D) launches: KV tiles per segment (the kernel's segment_tiles); the
  // segment count follows from the longest sequence. 1 splits the most.
  int segmentTiles = 1;
  // Unified attention split-KV with num_segments > 0: that many segments per
  // sequence, each sequence's key range cut evenly on the GPU into segments of
  // at least segmentTiles tiles (the op's split when it knows no max_seq_len;
  // the kernel's segment_tiles is then -segmentTiles). 0: as above.
  int numSegments = 0;
  // merge_partials: the number of partial results merged per token (ranks of a
  // context-parallel group); the kernel takes it at run time.
  int numPartials = 2;
  // Unified attention: key j of a sequence (0-based) is scaled by 1 + keyRamp·j,
  // so scores grow along the keys and a row's running maximum keeps moving (the
  // online softmax's rescaling under test). 0: plain random keys.
  double keyRamp = 0;
  // Unified attention: the KV cache's layout. false: NHD, vLLM's flash layout
  // ([blocks, 2, block_size, heads, D]); true: HND, head-major
  // ([blocks, 2, heads, block_size, D]). The kernels take the four strides either
  // way; DiffKV's packed cache is NHD only.
  bool headMajorCache = false;
  // Unified attention with fp8 output: the output_scale passed (rounded to f32).
  // The default turns outputs in (-1, 1) into e4m3 values in (-256, 256), the
  // top of its range short of saturation (448); smaller scales saturate.
  static constexpr double kDefaultOutputScale = 1.0 / 256;
  double outputScale = kDefaultOutputScale;
  // Unified attention with persistent programs: how many the launch has (one
  // grid row of them; capped at the work items). 0: the executor's choice, one
  // per SM on a GPU and one per work item (the full grid) in the interpreter.
  int programs = 0;
  // Parses "key=value" (keys: query_lens=1,7,..., context_lens=..., seed=N,
  // check_stride=N, segment_tiles=N, num_segments=N, num_partials=N, key_ramp=X, output_scale=X,
  // kv_layout=nhd|hnd, programs=N); a list entry
  // "VxN" repeats V N times
  // (query_lens=1x64). The error names the key.
  support::Status set(const std::string& keyEqualsValue);
  // "query_lens=1,17,40 context_lens=33,0,70 seed=1" (each part accepted by set();
  // check_stride only when it is not 1).
  std::string str() const;
  // At least one sequence, equal list lengths, query_len >= 1, context_len >= 0,
  // and sizes that fit the kernels' 32-bit token indices.
  support::Status validate() const;
};

}  // namespace attnjit::compiler
