// Op-level API for the companion kernels of paged attention, on device
// pointers and a stream, in the style of compiler/ops/PagedAttentionOp.h:
//
//   cacheWrite       vLLM's reshape_and_cache_flash: new keys/values into the
//                    paged KV cache (compiler/kernels/CacheWrite.h has the
//                    layouts and cache formats);
//   mergeAttnStates  vLLM's merge_attn_states: two partial outputs merged by
//                    their LSEs (compiler/kernels/MergeAttnStates.h);
//   mergePartials    the N-way merge (context-parallel decode: N ranks'
//                    partial outputs and LSEs; compiler/kernels/MergePartials.h);
//   mlaCacheWrite    vLLM's concat_and_cache_mla: kv_c ‖ k_pe into the MLA
//                    latent cache (compiler/kernels/MlaCacheWrite.h).
//
// Each call validates its arguments without touching the GPU (the variant is
// supported; no pointer is null or misaligned; strides keep the promises the
// kernel is compiled with; errors name the argument), JIT-compiles or loads the
// kernel on first use in a context, and launches it on the caller's stream.
// Later calls for the same variant and context cost a lookup, argument packing
// and cuLaunchKernel: no allocation on the device, no host synchronization.
// Zero tokens is a valid call that launches nothing.
#pragma once

#include <cstdint>

#include "compiler/kernels/CacheWrite.h"
#include "compiler/kernels/MergeAttnStates.h"
#include "compiler/kernels/MergePartials.h"
#include "compiler/kernels/GatherCache.h"
#include "compiler/kernels/ConvertCache.h"
#include "compiler/kernels/MlaCacheWrite.h"
#include "support/Diagnostics.h"
#include "runtime/Driver.h"

namespace attnjit::ops {

struct CacheWriteParams {
  // ---- static: select the kernel ----
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // keys and values: f32, f16 or bf16
  compiler::KvCacheFormat cacheFormat = compiler::KvCacheFormat::Auto;
  int numKvHeads = 0;
  int headSize = 0;
  // DiffKV: the values' head size Dv (0 = headSize); the cache is then usually the
  // packed [num_blocks, block_size, Hkv, K row ‖ V row] (kv_stride_kv = the K row).
  int valueHeadSize = 0;
  int blockSize = 0;
  // Debugging: run the bounds-checked kernel, which skips and reports a
  // slot_mapping entry that is neither -1 nor inside the cache (numBlocks ·
  // blockSize slots) as this call's error. ATTNJIT_CHECK_BOUNDS=1 turns it on for
  // every call. Checked calls allocate a record buffer once per context and
  // synchronize the stream after the launch (compiler/ops/BoundsCheckedLaunch.h): not for
  // CUDA graphs. Requires numBlocks.
  bool checkBounds = false;
  int numBlocks = 0;  // blocks of the KV cache; checked mode only
  // Per-tensor fp8 formats: kScale and vScale point to one f32 per KV head
  // ([numKvHeads], vLLM's kv_scale_type "head") instead of one.
  bool perHeadScales = false;
  // Per-token-head formats: each row's f32 scale inline after its values, or in
  // kScaleCache / vScaleCache (vLLM's current layout; compiler/kernels/KvCacheFormat.h).
  compiler::KvScaleLayout scaleLayout = compiler::KvScaleLayout::Inline;
  // ---- the batch ----
  int64_t numTokens = 0;  // rows of key/value and entries of slot_mapping
  // ---- device pointers (slot_mapping 16-byte aligned; key, value and kv_cache at
  //      least element-aligned: the op runs the variant with the widest accesses
  //      the pointers and strides allow; kScale/vScale: f32 scalars, per-tensor fp8 only) ----
  uint64_t key = 0, value = 0, kvCache = 0, slotMapping = 0, kScale = 0, vScale = 0;
  // ---- strides, in elements (of the cache's element type for kv*) ----
  int64_t keyStrideToken = 0, keyStrideHead = 0, valueStrideToken = 0, valueStrideHead = 0;
  int64_t kvStrideBlock = 0, kvStrideKv = 0, kvStrideToken = 0, kvStrideHead = 0;
  runtime::StreamHandle stream = nullptr;  // null: the default stream
  // Separate scales only (else 0): f32 [num_blocks, block_size, Hkv] tensors of
  // the K and V row scales (4-byte aligned) and their shared strides in f32 elements.
  uint64_t kScaleCache = 0, vScaleCache = 0;
  int64_t scaleStrideBlock = 0, scaleStrideToken = 0, scaleStrideHead = 0;
};

struct MergeAttnStatesParams {
  // ---- static: select the kernel ----
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // the three outputs: f32, f16 or bf16
  int numHeads = 0;
  int headSize = 0;
  // ---- the batch ----
  int64_t numTokens = 0;
  // ---- device pointers (16-byte aligned; LSEs f32 [num_heads, num_tokens];
  //      outputLse may be 0: the merged LSE is then not written) ----
  uint64_t output = 0, outputLse = 0, prefixOutput = 0, prefixLse = 0, suffixOutput = 0, suffixLse = 0;
  // fp8 output: a f32 scalar in device memory; non-zero makes `output` fp8 e4m3,
  // merged · (1 / scale) saturated at ±448 (vLLM's output_scale). 0: output in dtype.
  uint64_t outputScale = 0;
  // vLLM's prefill_tokens_with_context: tokens at or after it take the suffix's
  // output and LSE as they are (their prefix rows and LSEs are not read). -1, or
  // any value >= numTokens: every token has a prefix state.
  int64_t prefillTokensWithContext = -1;
  // ---- strides of the [num_tokens, num_heads, head_size] outputs, in elements ----
  int64_t outputStrideToken = 0, outputStrideHead = 0, prefixStrideToken = 0, prefixStrideHead = 0;
  int64_t suffixStrideToken = 0, suffixStrideHead = 0;
  runtime::StreamHandle stream = nullptr;  // null: the default stream
};

struct MergePartialsParams {
  // ---- static: select the kernel ----
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // partial outputs and output: f32, f16 or bf16
  int numHeads = 0;
  int headSize = 0;
  // ---- the batch ----
  int numPartials = 0;    // N >= 1 (one kernel serves every N)
  int64_t numTokens = 0;
  // ---- device pointers (16-byte aligned; outputLse may be 0: the merged LSE is
  //      then not written) ----
  uint64_t output = 0;          // [num_tokens, num_heads, head_size]
  uint64_t outputLse = 0;       // f32 [num_heads, num_tokens], contiguous
  uint64_t partialOutputs = 0;  // [N, num_tokens, num_heads, head_size]
  uint64_t partialLses = 0;     // f32, partial i at i · lseStridePartial, then [num_heads, num_tokens]
  // ---- strides, in elements ----
  int64_t outputStrideToken = 0, outputStrideHead = 0;
  int64_t partialStridePartial = 0, partialStrideToken = 0, partialStrideHead = 0;
  int64_t lseStridePartial = 0;  // at least num_heads · num_tokens when N > 1
  runtime::StreamHandle stream = nullptr;  // null: the default stream
};

struct MlaCacheWriteParams {
  // ---- static: select the kernel ----
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // kv_c and k_pe: f32, f16 or bf16
  compiler::KvCacheFormat cacheFormat = compiler::KvCacheFormat::Auto;  // auto, fp8_e4m3 or fp8_e5m2
  int kvLoraRank = 0;  // 512 or 256
  int ropeDim = 0;     // 64
  int blockSize = 0;
  // ---- the batch ----
  int64_t numTokens = 0;  // rows of kv_c and k_pe and entries of slot_mapping
  // ---- device pointers (16-byte aligned; slot_mapping int64, -1 = skip;
  //      scale: one f32 in device memory, per-tensor fp8 only) ----
  uint64_t kvC = 0, kPe = 0, kvCache = 0, slotMapping = 0, scale = 0;
  // ---- strides, in elements (of the cache's element type for the cache) ----
  int64_t kvCStrideToken = 0, kPeStrideToken = 0;  // multiples of 8
  int64_t cacheStrideBlock = 0, cacheStrideToken = 0;  // multiples of 16; a row is kv_lora_rank + rope_dim wide
  runtime::StreamHandle stream = nullptr;  // null: the default stream
};

// vLLM's cp_gather_cache (auto) and gather_and_maybe_dequant_cache (fp8): a
// batch's cached rows gathered into dst (compiler/kernels/GatherCache.h).
struct GatherCacheParams {
  // ---- static: select the kernel ----
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // dst (and the cache for auto): f32, f16 or bf16
  compiler::KvCacheFormat cacheFormat = compiler::KvCacheFormat::Auto;  // auto, fp8_e4m3 or fp8_e5m2
  int entrySize = 0;  // elements of a cache row, e.g. 576 (kv_lora_rank + rope_dim)
  int blockSize = 0;
  // ---- the batch ----
  int numSeqs = 0;
  int64_t numTokens = 0;  // rows of dst: cu_seq_lens[num_seqs]
  // ---- device pointers (16-byte aligned; block_table [num_seqs, max_blocks],
  //      cu_seq_lens [num_seqs + 1] and seq_starts [num_seqs] int32; seq_starts
  //      optional: each sequence's first position, else 0; scale: one f32 in
  //      device memory, per-tensor fp8 only) ----
  uint64_t dst = 0, cache = 0, blockTable = 0, cuSeqLens = 0, seqStarts = 0, scale = 0;
  // ---- strides, in elements (of the cache's element type for the cache) ----
  int64_t dstStrideToken = 0, blockTableStride = 0, cacheStrideBlock = 0, cacheStrideToken = 0;
  runtime::StreamHandle stream = nullptr;  // null: the default stream
};

// vLLM's convert_fp8: num_elements contiguous elements converted between dtype
// and a per-tensor fp8 format (compiler/kernels/ConvertCache.h). src and dst must
// not overlap (their element sizes differ).
struct ConvertCacheParams {
  // ---- static: select the kernel ----
  ir::ScalarKind dtype = ir::ScalarKind::BF16;                               // the wide side: f32, f16 or bf16
  compiler::KvCacheFormat cacheFormat = compiler::KvCacheFormat::Fp8E4M3;  // fp8_e4m3 or fp8_e5m2
  bool toFp8 = true;  // src dtype -> dst fp8 (else src fp8 -> dst dtype)
  // ---- the call ----
  int64_t numElements = 0;
  uint64_t src = 0, dst = 0;  // device pointers (any alignment of their element type)
  float scale = 1.0f;         // to fp8: x / scale; from fp8: x * scale (finite, not 0)
  runtime::StreamHandle stream = nullptr;  // null: the default stream
};

// The kernel variants the calls run.
compiler::CacheWriteConfig selectCacheWriteVariant(const CacheWriteParams& params);
compiler::MergeAttnStatesConfig selectMergeAttnStatesVariant(const MergeAttnStatesParams& params);
compiler::MergePartialsConfig selectMergePartialsVariant(const MergePartialsParams& params);
compiler::MlaCacheWriteConfig selectMlaCacheWriteVariant(const MlaCacheWriteParams& params);
compiler::GatherCacheConfig selectGatherCacheVariant(const GatherCacheParams& params);
compiler::ConvertCacheConfig selectConvertCacheVariant(const ConvertCacheParams& params);

// Checks the arguments without touching the GPU.
support::Status validateCacheWrite(const CacheWriteParams& params);
support::Status validateMergeAttnStates(const MergeAttnStatesParams& params);
support::Status validateMergePartials(const MergePartialsParams& params);
support::Status validateMlaCacheWrite(const MlaCacheWriteParams& params);
support::Status validateGatherCache(const GatherCacheParams& params);
support::Status validateConvertCache(const ConvertCacheParams& params);

// Validate, then launch (compiling or loading the kernel on first use).
support::Status cacheWrite(const CacheWriteParams& params);
support::Status mergeAttnStates(const MergeAttnStatesParams& params);
support::Status mergePartials(const MergePartialsParams& params);
support::Status mlaCacheWrite(const MlaCacheWriteParams& params);
support::Status gatherCache(const GatherCacheParams& params);
support::Status convertCache(const ConvertCacheParams& params);

}  // namespace attnjit::ops
