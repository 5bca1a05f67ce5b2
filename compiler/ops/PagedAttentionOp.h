// Op-level API: paged attention (vLLM's TRITON_ATTN unified kernel) on device
// pointers, for an engine that embeds libattnjit.so.
//
//   attnjit::ops::PagedAttentionParams p;   // shapes, pointers, strides, stream
//   ...
//   if (auto s = attnjit::ops::pagedAttention(p); !s) report(s.diagnostic().str());
//
// The call validates the arguments, picks a kernel variant for the call's static
// parameters (dtype, heads, head size, block size, causal) and its batch shape
// (decode-like batches and prefill-like ones get different tilings; see
// selectPagedAttentionVariant), JIT-compiles it on first use or loads it from the
// disk cache, and launches it on the caller's stream. After the first call for a
// variant in a context, a call costs a hash lookup, parameter packing and
// cuLaunchKernel (and, for a split without a workspace, a stream-ordered scratch
// allocation): no host synchronization, so it can be captured in a CUDA graph.
//
// Layouts are vLLM's (compiler/kernels/UnifiedAttention.h): q and out
// [num_tokens, Hq, D], the KV cache (num_blocks, 2, block_size, Hkv, D), block
// tables [num_seqs, max_blocks] i32, seq_lens [num_seqs] i32 (context + new
// tokens), cu_seqlens_q [num_seqs + 1] i32. Strides are in elements (the
// cache's in cache elements: bytes for the per-token-head formats).
//
// Split-KV. When a decode-like batch has too few (sequence, KV head) programs to
// fill the GPU, the call splits each sequence's keys into segments (3D launch,
// then a reduce kernel) so that about two CTAs per SM have work. With the
// maxSeqLen hint the host sizes the segments; without it each sequence's keys
// are cut evenly on the GPU. The partial results need a float32 workspace:
// either the caller's (ask pagedAttentionWorkspaceBytes once for the largest
// batch and pass it in), or, without one, scratch the runtime allocates
// stream-ordered for the call and frees after it (runtime/StreamScratch.h:
// no host synchronization, CUDA-graph capturable as allocation nodes).
// runtimeScratch = false or batch_invariant: calls without a workspace are 2D.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/kernels/UnifiedAttention.h"
#include "compiler/ops/ReadyKernels.h"
#include "support/Diagnostics.h"
#include "runtime/Driver.h"

namespace attnjit::compiler {
struct BatchShape;
}  // namespace attnjit::compiler

namespace attnjit::ops {

// Whether a call takes a plan measured for its bucket (compiler/ops/
// PagedAttentionTuning.h, compiler/ops/TunedPlans.h) over the heuristic one.
enum class PlanTuning {
  FromEnvironment,  // ATTNJIT_TUNE: recorded (unset), off, first-use
  Off,              // the heuristic plan
  Recorded,         // a tuned plan where this device has one for the bucket
  // Recorded, and a bucket without one is tuned by its first call (candidates
  // compiled and timed on the call's own buffers, its stream synchronized; the
  // winner runs last, so out holds its result). Inside a CUDA-graph capture,
  // and for batch-invariant or bounds-checked calls, the heuristic plan runs.
  OnFirstUse,
};

struct PagedAttentionParams {
  // ---- static: select the kernel ----
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // q, out and the cache: f32, f16 or bf16
  // f32 dtype only: Q·Kᵀ and P·V on the TF32 tensor cores (operands rounded to
  // 11 significant bits, f32 accumulation: vLLM's numerics, the default) or
  // exact f32 FMAs (Ieee). Ignored for f16/bf16.
  compiler::Fp32Precision fp32Precision = compiler::Fp32Precision::Tf32;
  int numQueryHeads = 0;
  int numKvHeads = 0;
  int headSize = 0;       // of q and k
  // DiffKV: the head size of v and out (Dv), 0 = headSize. The cache is then
  // usually vLLM's packed [num_blocks, block_size, Hkv, Dqk + Dv] (kv_stride_kv =
  // Dqk); out, o strides and the split-KV scratch are Dv-sized.
  int valueHeadSize = 0;
  int blockSize = 0;
  bool causal = true;
  compiler::KvCacheFormat kvCacheFormat = compiler::KvCacheFormat::Auto;
  // Per-token-head formats: the f32 row scales inline after each row's values
  // (attnjit's layout) or in kScaleCache / vScaleCache (vLLM's current layout;
  // compiler/kernels/KvCacheFormat.h).
  compiler::KvScaleLayout kvScaleLayout = compiler::KvScaleLayout::Inline;
  // Score modifiers (UnifiedAttentionConfig): 0 = off. The softcap and the window
  // are compiled into the kernel; ALiBi and sinks are on when their pointer is set.
  int slidingWindow = 0;
  // Non-causal rows' right bound (UnifiedAttentionConfig::slidingWindowRight):
  // 0 = the window's own, r > 0: keys j - p < r, -1: none.
  int slidingWindowRight = 0;
  // Chunked local attention (UnifiedAttentionConfig::attentionChunkSize): a
  // query sees only keys of its own chunk of this many positions; 0 = off.
  int attentionChunkSize = 0;
  double softcap = 0;
  // Results must not depend on the rest of the batch: one fixed tiling (vLLM's
  // 16 query rows, 64-key tiles) and no split-KV, whatever the batch looks like.
  bool batchInvariant = false;
  // Debugging: run the bounds-checked kernel (compiler/kernels/BoundsCheck.h), which
  // validates cu_seqlens_q, seq_lens and every block-table entry it uses and
  // reports a violation as this call's error instead of reading out of bounds.
  // The environment variable ATTNJIT_CHECK_BOUNDS=1 turns it on for every call.
  // Checked calls allocate a record buffer once per context and synchronize the
  // stream after the launch (compiler/ops/BoundsCheckedLaunch.h): not for CUDA graphs.
  // Split-KV calls check in stage 1. Requires numBlocks.
  bool checkBounds = false;
  int numBlocks = 0;       // blocks of the KV cache (entries must be in [0, numBlocks)); checked mode only
  PlanTuning tuning = PlanTuning::FromEnvironment;
  // ---- the batch ----
  int numSeqs = 0;
  int64_t numTokens = 0;   // total query tokens (cu_seqlens_q[num_seqs])
  int maxQueryLen = 0;     // longest query of the batch (picks the tiling)
  int maxSeqLen = 0;       // longest seq_len (context + query) of the batch; 0 = unknown (no split-KV)
  int minSeqLen = 0;       // shortest seq_len of the batch; 0 = unknown (see pagedAttentionCtasPerSm)
  int numSms = 0;          // SMs to fill when splitting; 0 = the op's device's (compiler::opDeviceFacts)
  float scale = 0;         // softmax scale, usually 1/sqrt(D)
  // ---- device pointers (16-byte aligned) ----
  uint64_t out = 0, q = 0, kvCache = 0, blockTables = 0, seqLens = 0, cuSeqlensQ = 0;
  // f32 scalars in device memory: the per-tensor fp8 scales (required for fp8_e4m3
  // and fp8_e5m2; read by the kernel, so a graph stays valid when they change).
  uint64_t kScale = 0, vScale = 0;
  // f32 [num_blocks, block_size, Hkv] in device memory (4-byte aligned), strides
  // scaleStride* below: the row scales of K and V with kvScaleLayout Separate
  // (required then, 0 otherwise). The two tensors share their strides.
  uint64_t kScaleCache = 0, vScaleCache = 0;
  // i8 [num_seqs] in device memory, or 0: per-sequence causal flags (nonzero =
  // causal); when set, `causal` is ignored.
  uint64_t causalFlags = 0;
  // f32 [Hq] in device memory, or 0: ALiBi slopes; sink logits.
  uint64_t alibiSlopes = 0, sinks = 0;
  // With alibiSlopes: vLLM's sqrt-ALiBi, s -= slope·sqrt(p - j) for keys at or
  // before the query p (UnifiedAttentionConfig::alibiSqrt).
  bool alibiSqrt = false;
  // i32 [num_seqs, mmPrefixRanges, 2] in device memory, or 0: vLLM's
  // mm_prefix_range, bidirectional [first, last] position ranges per sequence
  // (first >= last: unused); mmPrefixRanges is its second extent, 1 to 32
  // (UnifiedAttentionConfig::mmPrefixRanges).
  uint64_t mmPrefixRange = 0;
  int mmPrefixRanges = 0;
  // f32 [n, n] in device memory, or 0: vLLM's qq_bias, added to the scores of a
  // sequence's query i against the key of its query k (i, k < n); qqBiasStride
  // = n, its row stride (UnifiedAttentionConfig::qqBias).
  uint64_t qqBias = 0;
  int64_t qqBiasStride = 0;  // 1 to kMaxQqBiasSize
  // f32 scalar in device memory, or 0: vLLM's fp8 output. When set, out holds fp8
  // e4m3 (one byte per element; its strides still count elements), the output
  // divided by *output_scale and saturated at ±448.
  uint64_t outputScale = 0;
  // f32 scalar in device memory, or 0: fp8 queries. When set, q holds fp8 e4m3
  // (one byte per element; strides in elements) standing for q · *q_scale
  // (UnifiedAttentionConfig::queryFp8); dtype stays the compute and out dtype.
  uint64_t qScale = 0;
  // f32 natural-log LSE per (head, token) at lse[head · lse_stride_head + token], or 0.
  uint64_t lse = 0;
  int64_t lseStrideHead = 0;
  // Split-KV scratch (16-byte aligned) and its size; a smaller one only limits
  // the split. 0: the runtime's scratch (runtimeScratch) or 2D launches only.
  uint64_t workspace = 0;
  uint64_t workspaceBytes = 0;
  bool runtimeScratch = true;
  // ---- strides, in elements ----
  int64_t qStrideToken = 0, qStrideHead = 0, oStrideToken = 0, oStrideHead = 0;
  int64_t blockTableStride = 0;
  int64_t kvStrideBlock = 0, kvStrideKv = 0, kvStrideToken = 0, kvStrideHead = 0;
  // Of kScaleCache and vScaleCache, in f32 elements (separate scales only; else 0).
  int64_t scaleStrideBlock = 0, scaleStrideToken = 0, scaleStrideHead = 0;
  runtime::StreamHandle stream = nullptr;  // null: the default stream
};

// What pagedAttention launches for a call: the kernel, its split-KV plan, the
// CTAs-per-SM cap of a 2D launch, and whether a tuned record chose them.
enum class PlanOrigin { Heuristic, Tuned };
struct SplitKvPlan;
struct PagedAttentionPlan;
PagedAttentionPlan pagedAttentionPlan(const PagedAttentionParams& params);

// The kernel variant pagedAttention runs for `params`: vLLM's 16-row query tiles
// with 64-token KV tiles when every query is short (decode, mixed decode +
// short chunks; 128-token tiles where the launch has no more CTAs than SMs),
// 128 query rows over 8 warps when some sequence brings at least
// 128 / (Hq/Hkv) query tokens (prefill), where K/V tiles are shared by 32 tokens.
// splitKv is set when the call will split (see pagedAttentionSplitPlan).
compiler::UnifiedAttentionConfig selectPagedAttentionVariant(const PagedAttentionParams& params);

// The split-KV plan of a call: num_segments segments of segment_tiles KV tiles
// each (num_segments = 1: a 2D launch), or, when segmentTiles < 0, num_segments
// segments per sequence cut evenly on the GPU from its own length, each at
// least -segmentTiles tiles (the kernel's segment_tiles convention). Two rules,
// for decode-like batches:
// - Fill the GPU. A batch of S sequences has S·Hkv programs in 2D; when that is
//   less than two per SM, each sequence is cut into ceil(2·SMs / (S·Hkv))
//   segments, but never into segments shorter than kSplitKvMinSegmentKeys keys,
//   never more than kSplitKvMaxSegments, and never more than the workspace holds
//   for this batch. Without the maxSeqLen hint the segment count is the same
//   (short sequences then leave later segments empty) and segmentTiles is
//   -(kSplitKvMinSegmentKeys / tile). A batch of equal lengths that already
//   fills the GPU stays 2D: splitting it is slower (measured: docs/perf-log.md,
//   2026-11-29).
// - Uneven lengths. When the hints say the lengths differ (minSeqLen known and
//   below 90% of maxSeqLen, maxSeqLen at least kUnevenSplitMinMaxSeqLen, f16 or
//   bf16 queries, no sliding window), no segment is longer than 3/8 of the
//   longest sequence (kUnevenSplitSegmentEighths, rounded up to whole tiles),
//   full batch or not.
//   Grid z is the segment, so the CTAs that start last are the long sequences'
//   third segments, a quarter of their keys, instead of whole long sequences,
//   and the GPU's tail is short. 3/8 beats 2D (and the fill rule's two
//   segments) at every batch size and cache format measured; thirds of the
//   longest gain about half as much and halves lose to 2D (measured:
//   docs/perf-log.md, 2026-12-01).
// A caller's workspace bounds both (the runtime's scratch holds any plan): a
// plan it cannot hold falls back to fewer segments (the fill rule) or 2D.
// (vLLM: 16 segments for every sequence, when num_seqs <= 128 / Hkv.)
// The launch then fits the fill rule's segment count to the kernel's CTAs per
// SM (pagedAttentionLaunchPlan).
struct SplitKvPlan {
  int numSegments = 1;
  int segmentTiles = 0;  // < 0: per sequence, at least -segmentTiles tiles
};
struct PagedAttentionPlan {
  compiler::UnifiedAttentionConfig config;
  SplitKvPlan split;
  int ctasPerSm = 0;
  PlanOrigin origin = PlanOrigin::Heuristic;
  // The CTAs per SM of the kernel a launch fitted this plan to
  // (pagedAttentionLaunchPlan); 0: not fitted.
  int residentCtasPerSm = 0;
};
// What a launch of the call runs: pagedAttentionPlan's heuristic plan fitted
// to the CTAs an SM holds of its kernel (read from the loaded kernel, so this
// compiles or loads it; tuned plans run as recorded). A launch of equal CTAs
// that ends on a short last wave runs about as long as one more full wave: a
// fill-rule split takes the nearest segment count (one or two more or fewer)
// that ends on a full wave (B=32, 32/8 heads, three CTAs per SM: 2 segments are
// 1.29 waves, 3 are 1.94),
// and a 2D decode launch without min_seq_len (its lengths may be equal or not)
// splits into 2-4 segments when max_seq_len >= kWaveSplitMinMaxSeqLen, else
// runs at fewer CTAs per SM when that ends on a full wave (B=64: 1.29 waves at
// three, 1.94 at two). Measured: docs/perf-log.md, 2026-12-04. Errors: the call's
// validation errors, the kernel's compile or load error.
support::Expected<PagedAttentionPlan> pagedAttentionLaunchPlan(const PagedAttentionParams& params);
// "2D", "4 segments of 16 tiles (1024 keys)", "8 segments per sequence, cut
// on the GPU (at least 512 keys each)", with ", at most 2 CTAs per SM".
std::string describeSplitAndOccupancy(const PagedAttentionPlan& plan);
// CTAs of a 2D decode launch an SM may hold (0: as many as fit). A batch whose
// sequences all have about the same length (minSeqLen >= 90% of maxSeqLen) and
// that brings more than two CTAs per SM runs at most two per SM; the launch
// asks for enough dynamic shared memory that a third does not fit (registers
// alone would let three fit at 64-key tiles). Equal-length batches run faster
// at two; with uneven lengths the cap costs time (the third CTA takes over from
// sequences that finish early), so an unknown minSeqLen leaves this rule alone
// (measured: docs/perf-log.md, 2026-11-30) and only the launch's wave fit
// (pagedAttentionLaunchPlan) may cap such a call.
inline constexpr int kUniformDecodeCtasPerSm = 2;
int pagedAttentionCtasPerSm(const PagedAttentionParams& params);
// Dynamic shared memory for a kernel that needs kernelBytes so that at most
// ctasPerSm of its CTAs fit in perMultiprocessor bytes (each also costs
// reservedPerBlock); kernelBytes when that is already so, or when the cap
// would need more than maxPerBlock or would not leave room for ctasPerSm.
int64_t sharedBytesForCtasPerSm(int64_t kernelBytes, int ctasPerSm, int64_t perMultiprocessor,
                                int64_t reservedPerBlock, int64_t maxPerBlock);

// The largest qq_bias [n, n] the kernels index (32-bit offsets: n·n < 2^31).
inline constexpr int64_t kMaxQqBiasSize = 46340;

inline constexpr int kSplitKvMinSegmentKeys = 512;
inline constexpr int kUnevenSplitSegmentEighths = 3;
inline constexpr int kUnevenSplitMinMaxSeqLen = 3 * 1024;
// The shortest max_seq_len for which the launch's wave fit (pagedAttentionLaunchPlan)
// splits a 2D decode launch of unknown evenness instead of capping its CTAs per SM.
inline constexpr int kWaveSplitMinMaxSeqLen = 2048;
inline constexpr int kSplitKvMaxSegments = 64;
SplitKvPlan pagedAttentionSplitPlan(const PagedAttentionParams& params);

// SMs a workspace is sized for where no device says (the H200's).
inline constexpr int kWorkspaceSmsWithoutDevice = 132;

// Workspace bytes (headSize: the value head size Dv for DiffKV, the scratch's
// row width) for batches of at most maxNumTokens query tokens with
// sequences of at most maxSeqLen keys: room for 16 segments per token (or
// fewer, when maxSeqLen has fewer 512-key segments), and for the finer splits
// the fill rule gives small decode batches (s sequences of one KV head: up to
// ceil(2 SMs / s) segments, at most kSplitKvMaxSegments; the op's device's SMs). Call once, allocate, pass
// workspace/workspaceBytes to every call; a smaller workspace only limits how
// finely a batch is split (a batch it cannot split at all runs 2D). 0 when such batches never split; an error for sizes
// out of range (negative, or beyond what the op accepts).
support::Expected<uint64_t> pagedAttentionWorkspaceBytes(int64_t maxNumTokens, int numQueryHeads, int headSize,
                                                         int maxSeqLen);

// A call's parameters for a spec variant's static parameters (`config`: dtype,
// heads, head sizes, block size, cache format, score modifiers) and a batch
// (`shape`) with both seq_len hints, as an engine would pass them; no device
// pointers or strides, except that the optional pointers whose presence
// selects the kernel (ALiBi slopes, sinks, LSE, per-sequence causal flags)
// hold kFeaturePlaceholder where `config` turns the feature on. What
// selectPagedAttentionVariant and pagedAttentionSplitPlan read; `attnjit
// plan` prints their answers, `attnjit bench --op` fills in the rest.
inline constexpr uint64_t kFeaturePlaceholder = 0x100;
PagedAttentionParams pagedAttentionBatchParams(const compiler::UnifiedAttentionConfig& config,
                                               const compiler::BatchShape& shape);

// Warm-up: the kernels pagedAttention may launch for calls with `params`'s
// static parameters (dtype, heads, head sizes, block size, cache format, score
// modifiers, and the optional pointers that select features: ALiBi slopes,
// sinks, LSE, output and q scales, causal flags; any nonzero value) and its
// workspace policy, found by running the planner over batches that reach each
// of its rules (full and small decode batches with equal, uneven and unknown
// lengths, short chunks, prefill) on numSms SMs (0: the op's device's). The batch and
// pointer fields are otherwise ignored. reduce_segments kernels are included.
// An invalid static configuration is an error naming the field.
support::Expected<std::vector<WarmupKernel>> pagedAttentionWarmupKernels(const PagedAttentionParams& params);
// Makes those kernels ready (compiled, or loaded from the disk cache, into the
// calling thread's current context) on up to `threads` threads at once (0: every
// core), so that an engine's first steps launch without compiling: call it once
// per model configuration at start-up. Returns how many kernels are ready.
support::Expected<int> warmupPagedAttention(const PagedAttentionParams& params, int threads = 0);

// Checks the arguments without touching the GPU: the variant is supported, the
// batch is consistent, no pointer is null or misaligned, strides are positive
// and keep the promises the kernel is compiled with. Errors name the argument.
support::Status validatePagedAttention(const PagedAttentionParams& params);

// Validates, then launches (compiling or loading the kernel on first use).
support::Status pagedAttention(const PagedAttentionParams& params);

}  // namespace attnjit::ops
