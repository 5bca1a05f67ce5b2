// Kernel builder: N-way merge of partial attention results by their log-sum-exps,
// vLLM's merge_attn_states generalized from two inputs to any number. Context-
// parallel decode all-gathers, from each of N ranks, the attention output over
// its KV shard and the LSE of that shard; the merge gives the attention over the
// union of the shards:
//
//   M = max_i lse_i (over the non-empty partials), w_i = exp(lse_i - M)
//   out = Σ_i w_i · o_i / Σ_i w_i,   out_lse = log(Σ_i w_i) + M
//
// weights and sums in float32, the result rounded once to the dtype.
//
// Layouts: partial_outputs [N, num_tokens, num_heads, head_size] with strides
// (partial, token, head) in elements and unit element stride; partial_lses
// float32, partial i at i · lse_stride_partial, within a partial vLLM's
// [num_heads, num_tokens] (element h · num_tokens + t), natural log; output
// [num_tokens, num_heads, head_size] with strides (token, head); output_lse
// float32 [num_heads, num_tokens] contiguous.
//
// Empty partials. An infinite LSE (+inf, FA2's value for an empty key set, or
// -inf) means "no keys": weight 0, and its output row is not read (it may hold
// anything, NaN included). When every partial of a (token, head) is empty, the
// output is partial 0's row, copied, and out_lse is -inf: vLLM's CUDA behaviour
// for two inputs, generalized. A NaN LSE propagates: out and out_lse are NaN.
// With N = 2 and finite outputs this is merge_attn_states' result (up to the
// order of f32 rounding: one division per output instead of one per weight).
//
// The number of partials is a run-time argument (a loop), so one kernel serves
// every rank count. Grid: (ceil(num_tokens / BLOCK_TOKENS), num_heads); each
// program merges a [BLOCK_TOKENS, HEAD_SIZE_PADDED] tile of one head (padded
// columns masked), reading each partial's LSEs once in each of two passes (the
// maximum, then the weighted sums).
#pragma once

#include <memory>
#include <string>

#include "ir/IR.h"

namespace attnjit::compiler {

struct MergePartialsConfig {
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // partial outputs and output (f32, f16, bf16); LSEs are f32
  // Heads of the problem: the grid's y extent (the kernel reads the head from the
  // grid; part of the variant so specs describe a problem, as merge_attn_states).
  int numHeads = 32;
  int headSize = 128;
  bool outputLse = true;  // also write the merged LSE
  int blockTokens = 16;   // tokens per program (a power of two)
  int numWarps = 4;

  int headSizePadded() const;  // next power of two >= headSize
  // e.g. "merge_partials_bf16_h32_d128_lse" ("_nolse" without the LSE output;
  // knobs that differ from the defaults are appended: "_t32_w8").
  std::string kernelName() const;
  support::Status validate() const;
};

// Kernel parameters, in order:
//   output ptr<dtype>, [output_lse ptr<f32> when outputLse], partial_outputs ptr<dtype>,
//   partial_lses ptr<f32>, num_partials i32, num_tokens i32,
//   o_stride_token i64, o_stride_head i64, p_stride_partial i64, p_stride_token i64,
//   p_stride_head i64, lse_stride_partial i64.
// Strides are in elements. The output and partial strides are multiples of 8 when
// head_size is (a promise checked by the launchers: 16-byte vector accesses).
// num_partials must be at least 1 (the launcher checks it).
support::Expected<std::unique_ptr<ir::Kernel>> buildMergePartials(const MergePartialsConfig& config);

// Grid x for num_tokens tokens.
int64_t mergePartialsGridX(const MergePartialsConfig& config, int64_t numTokens);

}  // namespace attnjit::compiler
