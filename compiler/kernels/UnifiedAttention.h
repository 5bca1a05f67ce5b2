// Kernel builder: vLLM's unified paged attention (TRITON_ATTN), 2D launch.
//
// One program per (query block, KV head): grid = (num_seqs + total_query_tokens / BLOCK_Q, Hkv).
// Each program finds its sequence by binary search over cu_seqlens_q (in
// query-block units), loads a [BLOCK_M, HEAD_SIZE_PADDED] tile of queries (BLOCK_Q
// tokens x the Hq/Hkv query heads of its KV head, packed into M), then walks the
// sequence's KV tiles through the block table with an online softmax (exp2, with
// the softmax scale times log2(e) folded into the scores), and writes the
// normalized output. Layouts exactly as in shared/REFERENCE.md:
//   q, o      [num_tokens, Hq, D] with strides (token, head) and unit element stride
//   kv cache  (num_blocks, 2, block_size, Hkv, D): K = [:, 0], V = [:, 1]
//             or, DiffKV (valueHeadSize != headSize), the packed
//             (num_blocks, block_size, Hkv, Dqk + Dv): K = [..., :Dqk], V = [..., Dqk:]
//   (the kernel reads V at kv_stride_kv from K either way: only the strides differ)
//   block_tables [num_seqs, max_blocks_per_seq] i32, seq_lens [num_seqs] i32 (context
//   + new queries), cu_seqlens_q [num_seqs + 1] i32.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "compiler/kernels/Fp32Precision.h"
#include "compiler/kernels/Fp8Dots.h"
#include "compiler/kernels/KvCacheFormat.h"
#include "ir/IR.h"

namespace attnjit::compiler {

struct UnifiedAttentionConfig {
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // q, kv cache and output (f32, f16, bf16)
  // f32 dtype: the dots' operand precision (Fp32Precision.h): tf32 tensor cores
  // (vLLM's numerics, the default) or exact f32 FMAs. Ignored for f16/bf16.
  Fp32Precision fp32Precision = Fp32Precision::Tf32;
  // Per-tensor fp8 caches with bf16 q: the dots in bf16 (Dtype, vLLM's numerics)
  // or f16 (one conversion per fp8 pair; Fp8Dots.h); int8 and fp8 per-token-head
  // caches: Q·K in f16, P·V in bf16. Requires such a cache and an f16/bf16
  // dtype when F16.
  Fp8DotDtype fp8DotDtype = Fp8DotDtype::Dtype;
  int numQueryHeads = 32;
  int numKvHeads = 8;
  int headSize = 128;   // of q and k (Dqk)
  // DiffKV (vLLM's TRITON_ATTN_DIFFKV): the head size of v and of the output, Dv;
  // 0 = headSize. Q·Kᵀ runs over Dqk — split into exact power-of-two column ranges
  // when Dqk is a multiple of 16 but no power of two (192 = 128 + 64), else padded
  // to its power of two and masked — and P·V over Dv (padded separately); out, the LSE and the split-KV scratch are Dv-sized. The
  // cache is then usually packed, [num_blocks, block_size, Hkv, Dqk + Dv] with
  // kv_stride_kv = Dqk: see kvCacheRowElements below and KvCacheFormat.h for the
  // per-token-head rows of that layout.
  int valueHeadSize = 0;
  int blockSize = 16;   // KV cache block size (tokens per block), 1 to 256
  bool causal = true;
  int tileSize = 32;    // KV tokens per loop iteration
  int numWarps = 4;
  // Query rows per program (BLOCK_M); 0 picks vLLM's max(16, next_pow2(Hq/Hkv)),
  // or next_pow2(Hq/Hkv) alone for exact f32 (FMA dots have no 16-row shape).
  // Prefill wants more (64, 128): K/V tiles are then read once for BLOCK_M / (Hq/Hkv)
  // tokens instead of a handful, and the warps split M so P stays in registers.
  int blockMRows = 0;
  // Software pipeline depth of the KV loop: 2 issues tile j+1's loads before tile
  // j's compute (compiler/passes/Pipelining.cpp); 1 turns it off. 3 and 4 (with
  // warpSpecialize) give the cp.async buffers that many slots, which the
  // producer warps fill up to num_stages - 1 tiles ahead.
  int numStages = 2;
  // With num_stages 2, the K/V tiles go from global to shared memory by cp.async
  // (codegen/lower/AsyncCopy.cpp) instead of through registers; false keeps the
  // register path (kernel attribute async_copy = 0), for comparison.
  bool asyncCopy = true;
  // The reads of those shared tiles move next to the mma that uses them
  // (codegen/lower/SinkSlotReads.cpp); false keeps them where the layout
  // conversion is (kernel attribute sink_slot_reads = 0), for comparison: the op
  // API keeps the default (docs/architecture.md, "Slot reads next to their uses").
  bool sinkSlotReads = true;
  // Where the warps split a tile's keys (fewer than 16 rows per warp: decode),
  // keep the softmax row sum per column through the loop and reduce it once
  // after it, instead of across warps every tile (two barriers). It costs ~11
  // registers: decode with 64-key tiles goes from three CTAs per SM to two,
  // which uniform batches gain from and mixed-length ones lose by, so the op
  // API turns it off where it keeps three (docs/architecture.md).
  bool deferRowSum = true;
  // Keep the Q tile in shared memory and read its mma fragments again for every
  // KV tile (kernel attribute shared_invariant_operands, codegen/lower/
  // SharedOperands.cpp) instead of holding them in registers through the loop:
  // 64 registers per thread for 32 query rows per warp at head size 128, which
  // is what FlashAttention-2's tiling (4 warps of 32 rows) needs to not spill.
  bool qInShared = false;
  // Software-pipelined P·V (FlashAttention-3's intra-warpgroup overlap): the
  // loop carries each tile's P into the next iteration, whose P·V is issued
  // together with that iteration's Q·Kᵀ; the last tile's runs after the loop.
  // With warpgroup MMAs (sm_90a) the softmax then runs while the tensor cores
  // do P·V. Same results up to the order of f32 additions.
  bool overlapSoftmax = false;
  // Software-pipelined Q·Kᵀ: each iteration computes the next tile's Q·Kᵀ
  // before this tile's softmax and carries it (the first tile's is computed in
  // front of the loops). With warpgroup MMAs (sm_90a) its wait comes at the
  // end of the iteration, so Q·Kᵀ runs while the warpgroup's softmax does;
  // the scores are held twice (32 more registers a thread at 64-key tiles).
  // The last iteration's Q·Kᵀ multiplies zeros. Same results.
  bool prefetchScores = false;
  // Producer warps (kernel attribute warp_specialize, codegen/lower/
  // WarpSpecialization.cpp): on sm_90a num_warps more warps issue the K/V
  // copies and hand the slots to the compute warps through mbarriers, which
  // then meet no CTA barrier inside the loop. Ignored where codegen finds the
  // loads unfit (other targets, no cp.async). Same results.
  bool warpSpecialize = false;
  // With producer warps: the two compute warpgroups of an 8-warp tiling (64
  // query rows each) take turns issuing their warpgroup MMAs (FlashAttention-
  // 3's ping-pong), so that one's softmax runs under the other's MMAs.
  // Needs warpSpecialize. Same results.
  bool pingPong = false;
  // With producer warps: the two compute warpgroups of an 8-warp tiling take
  // turns running their softmax (what lies between a KV loop's Q·Kᵀ and P·V
  // groups), so that the softmaxes never coincide: each has the exponential
  // unit to itself, and one warpgroup's MMAs run while the other's softmax
  // does. Needs warpSpecialize; exclusive with pingPong and overlapSoftmax.
  // Same results.
  bool softmaxTurns = false;
  // With producer warps on sm_90a: the K and V tiles of the unmasked KV loop
  // (prefill tiles before the diagonal) are read as load_tensor tiles of the
  // paged cache, which one producer thread copies with TMA boxes of a block's
  // rows (kernel attribute tma; tensor maps encoded at launch). Needs
  // warpSpecialize; applies to 16-bit K/V caches (kv_cache_dtype auto) with
  // equal head sizes padded to 64, 128 or 256, blocks of a multiple of 8 tokens
  // that divide the tile, no ALiBi, window, chunks or ranges; elsewhere the
  // tiles are gathered by cp.async as without it. Same results.
  bool tensorMemoryAccelerator = false;
  // With producer warps on an 8-warp tiling: the registers setmaxnreg leaves
  // each producer thread (a multiple of 8, 24 to 152; kernel attribute
  // producer_registers), the compute warps taking the rest of the launch's
  // 384 x 168. 0: codegen's rule (72 / 216). The 128-key prefill producers
  // copy without spilling at 104 / 200. Same results.
  int producerRegisters = 0;
  // Persistent programs: each program walks the work items (query block, KV
  // head), longest first, from its own index in steps of the launch's program
  // count, so a launch of one program per SM runs every item without a CTA
  // launch, barrier initialization and register moves per item. Any grid
  // gives the same results (the full one: one item per program). Prefill
  // tilings of the 2D launch only (no split_kv or cluster_split).
  bool persistent = false;
  // Lazy rescaling (FlashAttention-4's): the running maximum is a reference
  // that moves only when a tile's row maximum passes it by more than 8 (log2
  // units), so the accumulator's rescale is branched around on most tiles.
  // Unset: the kernel's rule (buildSoftmaxState says where it pays). Same
  // results up to the rounding of P.
  std::optional<bool> lazyRescale;

  // Optional score modifiers of vLLM's kernel_unified_attention_2d, each off by
  // default (the default kernel is unchanged). Scores below are in vLLM's units,
  // s = scale·(q·k), before the softmax's exp.
  // Sliding window: 0 = off. Causal kernels use the decoder window (sw-1, 0): the
  // query at absolute position p sees key j iff j <= p and p - j < sw. Non-causal
  // kernels use the encoder window (sw-1, sw-1): |p - j| < sw. KV tiles before the
  // window of every row of a program are skipped, and keys before the window are
  // never read (their block-table entries and cache rows may be stale).
  int slidingWindow = 0;
  // The right extent of a non-causal window, apart from the left (one-sided and
  // asymmetric windows): 0 = the encoder window's (sw - 1 with a window, else
  // none); r > 0: key j visible iff j - p < r; -1: no right bound (with a left
  // window). Causal rows never see keys after p, so causal kernels refuse it;
  // per-sequence causal kernels apply it to their non-causal sequences.
  int slidingWindowRight = 0;
  // Chunked local attention (Llama 4's attention_chunk_size; vLLM serves it by
  // cutting each sequence into virtual batches): 0 = off; C > 0: the sequence is
  // cut into chunks of C positions and the query at p sees key j only in its own
  // chunk, j / C == p / C (causal rows: j <= p too). ANDed with a sliding
  // window; keys before the first row's chunk are never read.
  int attentionChunkSize = 0;
  // Bidirectional ranges (vLLM's PrefixLM / multimodal mm_prefix_range): up to
  // this many [start, end] position ranges per sequence (inclusive; parameter
  // mm_prefix_range, i32 [num_seqs, ranges, 2]; a range with start >= end is
  // unused). A key j is then also visible to the query at p when both lie in one
  // range: visible = (causal, window and chunk rules) OR (p, j in a range), the
  // order of vLLM and FlexAttention. Each program walks the keys its rows' ranges
  // reach, not the whole sequence. 0 = off.
  int mmPrefixRanges = 0;
  // Query-query bias (vLLM's qq_bias, e.g. tree attention for speculative
  // decoding): parameter qq_bias, f32 [n, n] with row stride qq_bias_stride = n
  // (run time). The score of a query at index i of its sequence's queries and
  // the key of query index k (key position context_len + k, 0 <= k < n) gains
  // qq_bias[i·n + k] after masking, in the units of s; -inf hides the key. Rows
  // i >= n and other keys get no bias.
  bool qqBias = false;
  // Softcap c: 0 = off; else s = c·tanh(s / c), before masking (vLLM's order).
  double softcap = 0;
  // ALiBi: s += slope[h]·(j - context_len) after masking, with slope[h] from the
  // parameter alibi_slopes (f32 [Hq]); vLLM's formula. It differs from the
  // textbook slope·(j - p) by a constant per row, which cancels in the softmax
  // except against a sink: with sinks too, this (vLLM's) origin is the one served.
  bool alibi = false;
  // sqrt-ALiBi (with alibi; vLLM's USE_ALIBI_SQRT): s -= slope[h]·sqrt(p - j) for
  // keys j at or before the query's absolute position p = context_len + query_pos,
  // no bias for keys after it (non-causal rows only).
  bool alibiSqrt = false;
  // Attention sinks: one learned logit per query head (parameter sinks, f32 [Hq],
  // in the units of s) joins every row's softmax denominator without a value:
  // the online softmax starts from M = sink, L = 1 (as vLLM) instead of -inf.
  bool sinks = false;
  // Causal or not per sequence: parameter causal_flags (i8 [num_seqs], nonzero =
  // causal) decides for each sequence at run time, and `causal` is ignored. A
  // batch can then mix decoder requests with bidirectional (encoder or prefix-LM)
  // ones in one launch.
  bool perSequenceCausal = false;

  // The KV cache's format (compiler/kernels/KvCacheFormat.h). Quantized values are
  // converted to the data type in registers after the load (exactly); per-tensor
  // fp8 scales multiply the scores and the output, per-token-head scales the scores
  // (k_scale[j]) and P's columns (v_scale[j]), as vLLM does.
  KvCacheFormat kvCacheFormat = KvCacheFormat::Auto;
  // Per-token-head formats only: where the row scales are (KvCacheFormat.h).
  // Separate: rows hold only the quantized values and the scales are read from
  // the parameters k_scale_cache and v_scale_cache (f32) at block ·
  // scale_stride_block + token · scale_stride_token + head · scale_stride_head.
  KvScaleLayout kvScaleLayout = KvScaleLayout::Inline;
  // Also write each query row's natural-log LSE, log Σ exp(s) (sinks included),
  // to lse[head · lse_stride_head + token] (f32): what merge_attn_states and
  // context parallelism combine partial results by.
  bool outputLse = false;
  // fp8 output (vLLM's USE_FP8 with out_scale): out is e4m3, the normalized row
  // divided by the f32 in device memory at parameter output_scale and saturated
  // to ±448 (e4m3fn's largest finite value). Split-KV's reduce kernel does it.
  bool outputFp8 = false;
  // fp8 queries (vLLM's Q_IS_FP8): q holds fp8 e4m3 (one byte per element, strides
  // still in elements) that stand for q · q_scale, a f32 scalar in device memory
  // (parameter q_scale, after v_scale). The tiles are cast to dtype in registers
  // (exact) and q_scale joins the softmax scale; out stays in dtype.
  bool queryFp8 = false;
  // 3D launch (split-KV), stage 1: grid z = num_segments (a launch parameter), and
  // program z walks only KV tiles [z, z + 1)·segment_tiles of its range. Instead of
  // out it writes f32 partials: segm_output [tokens, Hq, num_segments, D_PADDED]
  // (unnormalized Σ P·V), segm_max and segm_expsum [tokens, Hq, num_segments] (the
  // running maximum in log2 units, -inf for a segment without keys, and the sum).
  // compiler/kernels/ReduceSegments.h combines them into out (and the LSE).
  bool splitKv = false;
  // Split-KV inside a thread-block cluster (sm_90 and newer; 0 off, else 2 to
  // 16, above 8 a non-portable size that H100 and H200 run): grid z = cluster_split programs, one cluster per (query block, KV head),
  // program z walking segment z of the range as split-KV does (the launch
  // parameter segment_tiles, after the strides, as split_kv's). The segments'
  // maxima, sums and outputs are all-reduced across the cluster through
  // distributed shared memory (cluster_reduce_*), and the cluster stores out
  // (and the LSE) itself: no partials in global memory and no second kernel.
  // Rank r stores columns [r, r + 1)·Dv/cluster_split of each row; rank 0 the LSE.
  int clusterSplit = 0;
  // Bounds-checked kernel (a debugging mode, compiler/kernels/BoundsCheck.h): the
  // kernel validates the query offsets of its sequence (0 = cu_seqlens_q[0] <=
  // cu_seqlens_q[s] <= cu_seqlens_q[s + 1] <= num_tokens), its seq_len (at least the
  // query length, at most block_table_stride · block_size) and every block-table
  // entry it is about to use (in [0, num_blocks)), records a violation in
  // bounds_record and never performs the out-of-range access: a sequence with bad
  // offsets or length is treated as empty, a bad block's keys as masked. Split-KV
  // stage 1 checks too (each segment the entries of its own tiles). Adds the
  // bounds_record, num_blocks and num_tokens parameters; off by default (the
  // default kernel's IR is unchanged).
  bool checkBounds = false;

  int queriesPerKv() const { return numQueryHeads / numKvHeads; }
  // Whether Q·Kᵀ and P·V run on the tensor cores (where the target has them):
  // f16/bf16, and f32 as tf32.
  bool tensorCoreDots() const { return dtype != ir::ScalarKind::F32 || tf32Dots(); }
  // f32 dots on the TF32 tensor cores (false for f16/bf16 and exact f32).
  bool tf32Dots() const { return dtype == ir::ScalarKind::F32 && fp32Precision == Fp32Precision::Tf32; }
  // The element type of the dots' operands on the tensor cores: q and K, P and V.
  ir::ScalarKind queryKeyDotKind() const { return fp8QueryKeyDotKind(fp8DotDtype, kvCacheFormat, dtype); }
  ir::ScalarKind valueDotKind() const { return fp8DotOperandKind(fp8DotDtype, kvCacheFormat, dtype); }
  // Rows of the query tile: blockMRows when set, else minimumBlockM().
  // that is larger.
  int blockM() const;
  // One token's heads, next_pow2(Hq/Hkv), at least 16 (an MMA's rows) when the
  // dots run on tensor cores.
  int minimumBlockM() const;
  // Query tokens per program: BLOCK_M / (Hq/Hkv).
  int blockQ() const;
  int headSizePadded() const;  // next power of two >= headSize
  int effectiveValueHeadSize() const { return valueHeadSize > 0 ? valueHeadSize : headSize; }  // Dv
  int valueHeadSizePadded() const;  // next power of two >= Dv: the scratch rows' width
  bool differentValueHeadSize() const { return effectiveValueHeadSize() != headSize; }
  // Per-token-head scales read from k_scale_cache / v_scale_cache.
  bool separateScales() const {
    return isPerTokenHead(kvCacheFormat) && kvScaleLayout == KvScaleLayout::Separate;
  }
  // int4 with separate scales is vLLM's int4_per_token_head: asymmetric, the
  // zero point in each scale's low mantissa bits (KvCacheFormat.h).
  bool asymmetricInt4() const { return separateScales() && kvCacheFormat == KvCacheFormat::Int4PerTokenHead; }
  // Cache elements of a K row and of a V row (kvCacheRowElements).
  int keyRowElements() const { return kvCacheRowElements(kvCacheFormat, headSize, kvScaleLayout); }
  int valueRowElements() const { return kvCacheRowElements(kvCacheFormat, effectiveValueHeadSize(), kvScaleLayout); }
  // The divisibility the KV cache strides (in cache elements) are promised to have.
  // The non-causal right bound in force: j - p < rightWindow(), 0 = none.
  int rightWindow() const;
  int kvStrideDivisibility() const;
  // The shared memory per block codegen plans for this kernel when its own
  // buffers fit (its cp.async slots, Q kept in shared memory, the conversion
  // buffers of quantized tiles, and the scratch area), estimated from the
  // tiling without compiling, at or slightly above the planned bytes. Where a
  // device's opt-in limit is below it, codegen gives the buffers up (copies
  // through registers, which spill; codegen/lower/Lowering.cpp,
  // fit-shared-memory): the op picks a smaller tiling instead. Held to codegen's
  // plan by tests/test_op_tilings_ptxas.cpp. `warpgroupMma`: the target feeds
  // wgmma (sm_90a), whose quantized tiles are dequantized into shared memory.
  int64_t estimatedSharedBytes(bool warpgroupMma) const;
  // A stable name for the variant, e.g. "unified_attention_bf16_h32kv8_d128_bs16_causal"
  // ("_d192v128" for DiffKV).
  std::string kernelName() const;
  // User-facing check of the combination (head counts divide, sizes supported, ...).
  support::Status validate() const;
};

// Kernel parameters, in order:
//   out ptr<dtype>, q ptr<dtype>, kv_cache ptr<dtype>, block_tables ptr<i32>,
//   seq_lens ptr<i32>, cu_seqlens_q ptr<i32>, scale f32, num_seqs i32,
//   seq_search_steps i32 (ceil(log2(num_seqs + 1)): binary-search iterations;
//     -1: every sequence has exactly one query token, found without the search),
//   q_stride_token i64, q_stride_head i64, o_stride_token i64, o_stride_head i64,
//   block_table_stride i64, kv_stride_block i64, kv_stride_kv i64 (K→V offset),
//   kv_stride_token i64, kv_stride_head i64.
// All strides are in elements (of the cache pointer's type for the kv strides:
// bytes for the per-token-head formats). Optional pointer parameters follow
// cu_seqlens_q (before scale), present only with their feature: causal_flags
// ptr<i8> [num_seqs] (per_sequence_causal), k_scale and
// v_scale ptr<f32> (per-tensor fp8 caches, one f32 each), alibi_slopes ptr<f32>
// [Hq] (alibi), sinks ptr<f32> [Hq] (sinks), qq_bias ptr<f32> (qq_bias),
// mm_prefix_range ptr<i32> [num_seqs, mm_prefix_ranges, 2] (mm_prefix_ranges),
// output_scale ptr<f32> (output_fp8, 2D; out is then ptr<f8e4m3>), lse ptr<f32>
// (output_lse, 2D), then k_scale_cache and v_scale_cache ptr<f32> (separate
// per-token-head scales).
// Pointers thus stay ahead of scalars, the order the problem harnesses pass
// arguments in. With output_lse (2D) lse_stride_head i64 follows the strides,
// then with qq_bias qq_bias_stride i64, then with separate scales
// scale_stride_block, scale_stride_token, scale_stride_head i64 (f32 elements;
// shared by both scale tensors).
// Split-KV (3D) replaces out by segm_output, segm_max, segm_expsum (f32), drops
// o_stride_token and o_stride_head, and ends with num_segments i32 and
// segment_tiles i32.
// Bounds-checked (check_bounds): bounds_record ptr<i32> (4 ints, BoundsCheck.h)
// follows the last pointer (before scale), and num_blocks i32 (cache blocks that
// exist) and num_tokens i32 (query tokens: rows of q and out) end the list, after
// segment_tiles in split-KV.
// DiffKV changes no parameter: q's strides count Dqk-wide rows, out's (and the
// split-KV scratch's) Dv-wide rows, and the packed cache's kv strides are
// kv_stride_kv = Dqk (the K row's elements, kvCacheRowElements(format, Dqk)),
// kv_stride_head = K row + V row, kv_stride_token = Hkv · that.
support::Expected<std::unique_ptr<ir::Kernel>> buildUnifiedAttention(const UnifiedAttentionConfig& config);

// Grid x for a batch: num_seqs + total_query_tokens / BLOCK_Q (as vLLM).
int64_t unifiedAttentionGridX(const UnifiedAttentionConfig& config, int64_t numSeqs, int64_t totalQueryTokens);

// The kernel's seq_search_steps for a launch over num_seqs sequences: -1 when
// every sequence has exactly one query token (the closed form, no search),
// else the binary search's ceil(log2(num_seqs + 1)) iterations.
int32_t unifiedAttentionSeqSearchSteps(int numSeqs, bool oneQueryTokenEach);

}  // namespace attnjit::compiler
