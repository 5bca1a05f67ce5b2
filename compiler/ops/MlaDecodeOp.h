// Op-level API: MLA latent decode (vLLM's TRITON_MLA decode) on device pointers,
// in the style of compiler/ops/PagedAttentionOp.h.
//
//   attnjit::ops::MlaDecodeParams p;   // shapes, pointers, strides, stream
//   ...
//   if (auto s = attnjit::ops::mlaDecode(p); !s) report(s.diagnostic().str());
//
// Layouts (compiler/kernels/MlaDecode.h): q [B, H, L + R], out [B, H, L], the
// latent cache (num_blocks, block_size, L + R), block_tables [B, max_blocks] i32,
// seq_lens [B] i32, and optionally the LSE at lse[b · lse_stride_batch +
// h · lse_stride_head] (f32, natural log): vLLM's [B, H] is strides (H, 1); the
// merge kernels' [H, B] is (1, B).
//
// Split-KV. Stage 1 walks segments of each sequence's keys and writes f32
// partials into the caller's workspace; stage 2 (reduce_segments) combines them
// by their LSEs in a fixed order. Splitting needs the maxSeqLen hint. Ask
// mlaDecodeWorkspaceBytes once for the largest batch, allocate, and pass it to
// every call: such calls never allocate. Without a workspace a split call takes
// stream-ordered scratch the runtime owns (runtime/StreamScratch.h). Calls never
// synchronize (CUDA-graph-capturable). With runtimeScratch = false and no
// workspace, or in batch-invariant mode, calls run unsplit (2D).
#pragma once

#include <cstdint>

#include "compiler/kernels/MlaDecode.h"
#include "support/Diagnostics.h"
#include "runtime/Driver.h"

namespace attnjit::ops {

// How mlaDecode chooses the number of KV splits.
enum class MlaSplitRule {
  // Cut only where the GPU would otherwise wait on a few long programs: each
  // program gets about (total key work) / (resident programs) keys, and a
  // sequence is cut only where it holds two such shares or more, so a batch that fills
  // the GPU stays unsplit, a small batch of long sequences is cut finely, and in
  // a mixed batch only the long sequences are cut (their extra segments past a
  // short sequence's end are empty programs). Uses sumSeqLens when the caller
  // knows it (vLLM's scheduler does, on the host), else assumes every sequence
  // is maxSeqLen long.
  Balanced,
  // vLLM's: min(next_pow2(max(1, max_seq_len / 512)), 2 · SMs) splits, whatever
  // the batch (kept for comparison and for bit-compatibility studies).
  Vllm,
};

struct MlaDecodeParams {
  // ---- static: select the kernel ----
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // q and out: f32, f16 or bf16
  // f32: TF32 tensor-core dots (default) or exact f32 (PagedAttentionParams's).
  compiler::Fp32Precision fp32Precision = compiler::Fp32Precision::Tf32;
  compiler::KvCacheFormat kvCacheFormat = compiler::KvCacheFormat::Auto;  // auto (dtype) or fp8_e4m3
  int kvLoraRank = 512;  // L: 512 or 256
  int ropeDim = 64;      // R: 64
  int numHeads = 0;      // H: 16 to 128
  int blockSize = 0;     // 1 to 256
  // One split, one tiling: a sequence's result does not depend on the batch.
  bool batchInvariant = false;
  MlaSplitRule splitRule = MlaSplitRule::Balanced;
  // ---- the batch ----
  int numSeqs = 0;         // B
  int maxSeqLen = 0;       // longest seq_lens entry; 0 = unknown (no split-KV)
  int64_t sumSeqLens = 0;  // Σ seq_lens when known on the host (0 = unknown), for the Balanced rule
  int numSms = 0;          // SMs to fill; 0 = the op's device's (compiler::opDeviceFacts)
  float scale = 0;         // softmax scale
  // ---- device pointers (16-byte aligned) ----
  uint64_t out = 0, q = 0, kvCache = 0, blockTables = 0, seqLens = 0;
  uint64_t kvScale = 0;  // f32 scalar in device memory (fp8_e4m3 only)
  uint64_t lse = 0;      // f32, or 0: no LSE
  int64_t lseStrideBatch = 0, lseStrideHead = 0;
  // Split-KV scratch; a smaller one only limits the split. 0: the runtime's
  // scratch (runtimeScratch) or unsplit only.
  uint64_t workspace = 0, workspaceBytes = 0;
  bool runtimeScratch = true;
  // ---- strides, in elements ----
  int64_t qStrideBatch = 0, qStrideHead = 0, oStrideBatch = 0, oStrideHead = 0;
  int64_t blockTableStride = 0, kvStrideBlock = 0, kvStrideToken = 0;
  runtime::StreamHandle stream = nullptr;  // null: the default stream
};

// The kernel a call runs (splitKv set when it splits).
compiler::MlaDecodeConfig selectMlaDecodeVariant(const MlaDecodeParams& params);

struct MlaSplitPlan {
  int numSegments = 1;   // 1: unsplit
  int segmentTiles = 0;  // KV tiles per segment
};
inline constexpr int kMlaMinSegmentKeys = 256;
inline constexpr int kMlaMaxSegments = 64;
MlaSplitPlan mlaDecodeSplitPlan(const MlaDecodeParams& params);

// Workspace bytes for batches of at most maxNumSeqs sequences of at most
// maxSeqLen keys (room for the most segments either rule asks for, up to 64).
// 0 when such batches never split; an error for sizes out of range. A smaller
// workspace only limits the split: a batch it cannot split runs unsplit.
support::Expected<uint64_t> mlaDecodeWorkspaceBytes(int maxNumSeqs, int numHeads, int kvLoraRank, int maxSeqLen);

// Checks the arguments without touching the GPU; errors name the argument.
support::Status validateMlaDecode(const MlaDecodeParams& params);

// Validates, then launches stage 1 (and stage 2 when split).
support::Status mlaDecode(const MlaDecodeParams& params);

}  // namespace attnjit::ops
