// Kernel builder: stage 2 of split-KV (3D) unified attention, vLLM's
// reduce_segments. Stage 1 (UnifiedAttentionConfig::splitKv) leaves, for every
// (token, query head, segment), an unnormalized partial output acc_s = Σ P·V over
// the segment's keys, the segment's running maximum m_s (log2 units; -inf when the
// segment saw no key) and its sum l_s = Σ P. This kernel combines them:
//
//   M = max_s m_s,  w_s = exp2(m_s - M),  out = Σ_s w_s·acc_s / Σ_s w_s·l_s
//   lse = (M + log2 Σ_s w_s·l_s) · ln 2   (natural log, on request)
//
// Segments are added in index order whatever their number (pass 2 loads a
// round of them at a time, roundSegments(), and adds them one by one), so a
// row's result depends only on its own segments (the reduction order is fixed).
//
// Scratch layouts (f32, contiguous): segm_output [tokens, Hq, num_segments,
// HEAD_SIZE_PADDED], segm_max and segm_expsum [tokens, Hq, num_segments].
// Grid: (num_tokens, ceil(Hq / HEADS_PER_PROGRAM)).
#pragma once

#include <memory>
#include <string>

#include "ir/IR.h"

namespace attnjit::compiler {

struct UnifiedAttentionConfig;
struct MlaDecodeConfig;

struct ReduceSegmentsConfig {
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // out (f32, f16, bf16)
  int numQueryHeads = 32;
  int headSize = 128;  // of the output rows: the value head size Dv for DiffKV stage 1s
  bool outputLse = false;  // also write lse[head · lse_stride_head + token]
  // With outputLse: the token's stride is a parameter too, lse[head ·
  // lse_stride_head + token · lse_stride_token] (MLA's [B, H] layout is (1, H)).
  // Only meaningful with outputLse (validate() refuses it alone).
  bool lseTokenStride = false;
  // out in fp8 e4m3 (vLLM's fp8 output): out = e4m3(o / output_scale),
  // saturating, with output_scale an f32 in device memory (parameter output_scale).
  bool outputFp8 = false;
  int numWarps = 4;
  // Segments pass 2 loads per round, before it adds them in index order: a
  // round waits for memory once. 0 (auto): as many as keep the loaded rows
  // within 128 f32 registers a thread, at most 8; 1 waits for each segment.
  int segmentsPerRound = 0;
  // Query heads each program combines: 0 (auto) min(next_pow2(Hq), 16), else
  // a power of two up to 16. Fewer heads a program make more programs: a
  // decode batch of one token has ceil(Hq / 16) of them otherwise, each
  // reading every segment of 16 heads.
  int programHeads = 0;

  int headSizePadded() const;
  int headsPerProgram() const;  // programHeads, with auto resolved
  int roundSegments() const;    // segmentsPerRound, with auto resolved
  // e.g. "reduce_segments_bf16_h32_d128" (+ "_lse").
  std::string kernelName() const;
  support::Status validate() const;

  friend bool operator==(const ReduceSegmentsConfig&, const ReduceSegmentsConfig&) = default;
};

// The stage 2 of a split-KV variant (config.splitKv), the one definition the JIT
// paths (problems and ops) and `attnjit aot` share: same dtype and query heads,
// rows of the value head size (Dv; MLA: kv_lora_rank), the LSE when the variant
// outputs one (MLA's [B, H] LSE through lse_stride_token).
ReduceSegmentsConfig reduceSegmentsFor(const UnifiedAttentionConfig& config);
ReduceSegmentsConfig reduceSegmentsFor(const MlaDecodeConfig& config);

// `config` with its heads per program chosen for a launch over `numTokens`
// tokens on `smCount` SMs: where the auto choice (16 heads) leaves fewer than
// two programs per SM, 4 heads, or 1 where 4 still does (a small decode batch's
// stage 2 is a few programs otherwise, each reading every segment of 16 heads).
// A config that sets its heads per program keeps them; the pick that equals
// the auto choice stays 0, so the kernel keeps its name. Every choice gives the
// same bits.
ReduceSegmentsConfig reduceSegmentsForLaunch(ReduceSegmentsConfig config, int64_t numTokens, int smCount);

// Kernel parameters, in order:
//   out ptr<dtype> (ptr<f8e4m3> with outputFp8), segm_output ptr<f32>,
//   segm_max ptr<f32>, segm_expsum ptr<f32>, [lse ptr<f32>], [output_scale
//   ptr<f32> (outputFp8)], num_segments i32, o_stride_token i64, o_stride_head
//   i64, [lse_stride_head i64], [lse_stride_token i64 (lseTokenStride)].
support::Expected<std::unique_ptr<ir::Kernel>> buildReduceSegments(const ReduceSegmentsConfig& config);

// Grid y: ceil(Hq / headsPerProgram()).
int64_t reduceSegmentsGridY(const ReduceSegmentsConfig& config);

}  // namespace attnjit::compiler
