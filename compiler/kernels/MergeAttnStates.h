// Kernel builder: vLLM's merge_attn_states. Two partial attention results over
// disjoint key sets (a prefix and a suffix: context-parallel shards, or chunked
// prefill's cached context and new tokens) are combined by their log-sum-exps:
//
//   m = max(p_lse, s_lse), p_se = exp(p_lse - m), s_se = exp(s_lse - m)
//   out = p_out · p_se / (p_se + s_se) + s_out · s_se / (p_se + s_se)
//   out_lse = log(p_se + s_se) + m
//
// Layouts (vLLM's): outputs [num_tokens, num_heads, head_size] with strides (token,
// head) and unit element stride; LSEs float32 [num_heads, num_tokens] contiguous
// (element h·num_tokens + t), natural log. An infinite LSE (+inf from FA2 for an
// empty key set, or -inf) means "no keys" and is treated as -inf; when both sides
// are empty the prefix output is copied and out_lse is -inf, exactly as vLLM's CUDA
// kernel does (its Triton kernel would produce NaN there).
//
// Grid: (ceil(num_tokens / BLOCK_TOKENS), num_heads). Each program merges a
// [BLOCK_TOKENS, HEAD_SIZE_PADDED] tile of one head; the padded columns are masked.
#pragma once

#include <memory>
#include <string>

#include "ir/IR.h"

namespace attnjit::compiler {

struct MergeAttnStatesConfig {
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // the three outputs (f32, f16, bf16); LSEs are f32
  // Heads of the problem: the grid's y extent (the kernel itself reads it from the
  // grid, as vLLM's does; it is part of the variant so specs can describe a problem).
  int numHeads = 32;
  int headSize = 128;
  bool outputLse = true;  // also write the merged LSE
  // The output is fp8 e4m3: merged / output_scale (a f32 scalar in device memory,
  // the output_scale parameter), saturated at ±448, rounded to nearest even.
  bool outputFp8 = false;
  // Tokens at or after the run-time prefill_tokens_with_context parameter have no
  // prefix state: their output and LSE are the suffix's, as they are (the prefix is
  // not read for them). vLLM's chunked prefill, where only the first tokens of the
  // batch have cached context.
  bool contextTokenLimit = false;
  int blockTokens = 16;   // tokens per program (a power of two)
  int numWarps = 4;

  int headSizePadded() const;  // next power of two >= headSize
  // e.g. "merge_attn_states_bf16_h32_d128_lse" ("_nolse" without the LSE output;
  // "_fp8out", "_ctxlimit"; tuning knobs that differ from the defaults are
  // appended: "_t32_w8").
  std::string kernelName() const;
  support::Status validate() const;
};

// Kernel parameters, in order:
//   output ptr<dtype>, [output_lse ptr<f32> when outputLse], prefix_output ptr<dtype>,
//   prefix_lse ptr<f32>, suffix_output ptr<dtype>, suffix_lse ptr<f32>,
//   [output_scale ptr<f32> when outputFp8; output is then ptr<f8e4m3>],
//   num_tokens i32, [prefill_tokens_with_context i32 when contextTokenLimit],
//   o_stride_token i64, o_stride_head i64, p_stride_token i64,
//   p_stride_head i64, s_stride_token i64, s_stride_head i64.
// Strides are in elements; the number of heads is the grid's y extent.
support::Expected<std::unique_ptr<ir::Kernel>> buildMergeAttnStates(const MergeAttnStatesConfig& config);

// Grid x for num_tokens tokens.
int64_t mergeAttnStatesGridX(const MergeAttnStatesConfig& config, int64_t numTokens);

}  // namespace attnjit::compiler
