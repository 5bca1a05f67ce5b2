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
// cuLaunchKernel: no allocation and no host synchronization, so it can be captured
// in a CUDA graph.
//
// Layouts are vLLM's (compiler/kernels/UnifiedAttention.h): q and out
// [num_tokens, Hq, D], the KV cache (num_blocks, 2, block_size, Hkv, D), block
// tables [num_seqs, max_blocks] i32, seq_lens [num_seqs] i32 (context + new
// tokens), cu_seqlens_q [num_seqs + 1] i32. Strides are in elements.
#pragma once

#include <cstdint>

#include "compiler/kernels/UnifiedAttention.h"
#include "ir/Diagnostics.h"
#include "runtime/Driver.h"

namespace attnjit::ops {

struct PagedAttentionParams {
  // ---- static: select the kernel ----
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // q, out and the cache: f32, f16 or bf16
  int numQueryHeads = 0;
  int numKvHeads = 0;
  int headSize = 0;
  int blockSize = 0;
  bool causal = true;
  // ---- the batch ----
  int numSeqs = 0;
  int64_t numTokens = 0;   // total query tokens (cu_seqlens_q[num_seqs])
  int maxQueryLen = 0;     // longest query of the batch (picks the tiling)
  float scale = 0;         // softmax scale, usually 1/sqrt(D)
  // ---- device pointers (16-byte aligned) ----
  uint64_t out = 0, q = 0, kvCache = 0, blockTables = 0, seqLens = 0, cuSeqlensQ = 0;
  // ---- strides, in elements ----
  int64_t qStrideToken = 0, qStrideHead = 0, oStrideToken = 0, oStrideHead = 0;
  int64_t blockTableStride = 0;
  int64_t kvStrideBlock = 0, kvStrideKv = 0, kvStrideToken = 0, kvStrideHead = 0;
  runtime::StreamHandle stream = nullptr;  // null: the default stream
};

// The kernel variant pagedAttention runs for `params`: vLLM's 16-row query tiles
// with 64-token KV tiles when every query is short (decode, mixed decode +
// short chunks), 128 query rows over 8 warps when some sequence brings at least
// 128 / (Hq/Hkv) query tokens (prefill), where K/V tiles are shared by 32 tokens.
compiler::UnifiedAttentionConfig selectPagedAttentionVariant(const PagedAttentionParams& params);

// Checks the arguments without touching the GPU: the variant is supported, the
// batch is consistent, no pointer is null or misaligned, strides are positive
// and keep the promises the kernel is compiled with. Errors name the argument.
ir::Status validatePagedAttention(const PagedAttentionParams& params);

// Validates, then launches (compiling or loading the kernel on first use).
ir::Status pagedAttention(const PagedAttentionParams& params);

}  // namespace attnjit::ops
