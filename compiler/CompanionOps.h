// Op-level API for the companion kernels of paged attention, on device
// pointers and a stream, in the style of compiler/PagedAttentionOp.h:
//
//   cacheWrite       vLLM's reshape_and_cache_flash: new keys/values into the
//                    paged KV cache (compiler/kernels/CacheWrite.h has the
//                    layouts and cache formats);
//   mergeAttnStates  vLLM's merge_attn_states: two partial outputs merged by
//                    their LSEs (compiler/kernels/MergeAttnStates.h).
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
#include "ir/Diagnostics.h"
#include "runtime/Driver.h"

namespace attnjit::ops {

struct CacheWriteParams {
  // ---- static: select the kernel ----
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // keys and values: f32, f16 or bf16
  compiler::KvCacheFormat cacheFormat = compiler::KvCacheFormat::Auto;
  int numKvHeads = 0;
  int headSize = 0;
  int blockSize = 0;
  // ---- the batch ----
  int64_t numTokens = 0;  // rows of key/value and entries of slot_mapping
  // ---- device pointers (16-byte aligned; kScale/vScale: f32 scalars, per-tensor fp8 only) ----
  uint64_t key = 0, value = 0, kvCache = 0, slotMapping = 0, kScale = 0, vScale = 0;
  // ---- strides, in elements (of the cache's element type for kv*) ----
  int64_t keyStrideToken = 0, keyStrideHead = 0, valueStrideToken = 0, valueStrideHead = 0;
  int64_t kvStrideBlock = 0, kvStrideKv = 0, kvStrideToken = 0, kvStrideHead = 0;
  runtime::StreamHandle stream = nullptr;  // null: the default stream
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
  // ---- strides of the [num_tokens, num_heads, head_size] outputs, in elements ----
  int64_t outputStrideToken = 0, outputStrideHead = 0, prefixStrideToken = 0, prefixStrideHead = 0;
  int64_t suffixStrideToken = 0, suffixStrideHead = 0;
  runtime::StreamHandle stream = nullptr;  // null: the default stream
};

// The kernel variants the calls run.
compiler::CacheWriteConfig selectCacheWriteVariant(const CacheWriteParams& params);
compiler::MergeAttnStatesConfig selectMergeAttnStatesVariant(const MergeAttnStatesParams& params);

// Checks the arguments without touching the GPU.
ir::Status validateCacheWrite(const CacheWriteParams& params);
ir::Status validateMergeAttnStates(const MergeAttnStatesParams& params);

// Validate, then launch (compiling or loading the kernel on first use).
ir::Status cacheWrite(const CacheWriteParams& params);
ir::Status mergeAttnStates(const MergeAttnStatesParams& params);

}  // namespace attnjit::ops
