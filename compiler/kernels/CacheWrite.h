// Kernel builder: vLLM's reshape_and_cache_flash. The keys and values of new
// tokens, [num_tokens, Hkv, D] each (strides (token, head), unit element stride),
// are scattered into the paged KV cache at slot_mapping[t] (int64; slot =
// block · block_size + offset; -1 = padding token, skipped). The cache has the
// layout the unified attention kernel reads, (num_blocks, 2, block_size, Hkv, row)
// with K = [:, 0] and V = [:, 1], strides in cache elements.
//
// Cache formats (shared/REFERENCE.md, "Quantized KV cache"):
// - auto: the input's dtype (f32, f16, bf16), values copied;
// - fp8_e4m3 / fp8_e5m2: per-tensor scales k_scale, v_scale (float32 scalars in
//   device memory, read by the kernel so graphs stay valid when they change);
//   stores x / scale rounded to fp8, saturating at the largest finite value;
// - int8_per_token_head / fp8_per_token_head (e4m3): each (token, head) row stores
//   D quantized values and then, at byte offset D, its float32 scale
//   max|x| / QMAX (QMAX 127 or 448; at least 1e-6), in a row of D + 4 bytes. Values
//   are x / scale; int8 rounds half away from zero, fp8 to nearest even.
//
// DiffKV (value_head_size != head_size): values are [num_tokens, Hkv, Dv] and the
// cache is vLLM's packed (num_blocks, block_size, Hkv, K row ‖ V row), i.e.
// kv_stride_kv = the K row's elements (Dqk, or kvCacheRowElements(format, Dqk) bytes
// for the per-token-head formats, each part keeping its own inline scale); only
// the strides and the V rows' width differ, the kernel is the same.
//
// Grid: (num_tokens, ceil(Hkv / HEADS_PER_PROGRAM)); a program writes the K and V
// rows of HEADS_PER_PROGRAM heads of one token.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "compiler/kernels/KvCacheFormat.h"
#include "ir/IR.h"

namespace attnjit::compiler {


struct CacheWriteConfig {
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // keys and values (f32, f16, bf16)
  KvCacheFormat cacheFormat = KvCacheFormat::Auto;
  int numKvHeads = 8;
  int headSize = 128;       // of the keys (Dqk)
  int valueHeadSize = 0;    // of the values (Dv, DiffKV); 0 = headSize
  int blockSize = 16;
  int numWarps = 4;
  // Bounds-checked kernel (a debugging mode, compiler/kernels/BoundsCheck.h): a
  // slot_mapping entry that is neither -1 nor in [0, num_blocks · block_size) is
  // recorded in bounds_record and its token skipped. Adds the bounds_record and
  // num_blocks parameters; off by default (the default kernel is unchanged).
  bool checkBounds = false;
  // Alignments the kernel may assume, in bytes (16, 8, 4, 2 or 1, at least the
  // element's size): `sourceAlign` for the key and value pointers and the byte
  // size of their strides, `cacheAlign` for kv_cache and its strides. 16 is the
  // default kernel (16-byte vector accesses); the op picks the widest alignment a
  // call's pointers and strides keep, so a legal layout whose rows are not 16-byte
  // aligned (keys and values sliced out of a fused qkv tensor, head sizes such as
  // 46) runs a variant with narrower accesses instead of failing.
  int sourceAlign = 16;
  int cacheAlign = 16;
  // Per-tensor fp8 formats: k_scale and v_scale hold one f32 per KV head ([Hkv],
  // vLLM's kv_scale_type "head") instead of one for the tensor.
  bool perHeadScales = false;
  // Per-token-head formats: each row's f32 scale inline after its values, or in
  // the tensors k_scale_cache / v_scale_cache (vLLM's current layout;
  // KvCacheFormat.h) at block · scale_stride_block + offset · scale_stride_token
  // + head · scale_stride_head, the rows then holding only the values.
  KvScaleLayout scaleLayout = KvScaleLayout::Inline;

  bool separateScales() const { return isPerTokenHead(cacheFormat) && scaleLayout == KvScaleLayout::Separate; }
  // int4 with separate scales is vLLM's asymmetric int4_per_token_head (KvCacheFormat.h).
  bool asymmetricInt4() const { return separateScales() && cacheFormat == KvCacheFormat::Int4PerTokenHead; }

  // The divisibility (in elements) the kernel is compiled to assume of the key
  // strides, the value strides and the cache strides; 1 = none. At alignment 16:
  // 8 where the rows' widths allow it (key/value head sizes multiples of 8; cache
  // rows by the format), else none. Below 16: the alignment in elements.
  int keyStrideDivisibility() const;
  int valueStrideDivisibility() const;
  int cacheStrideDivisibility() const;

  int effectiveValueHeadSize() const { return valueHeadSize > 0 ? valueHeadSize : headSize; }
  // The cache's element type: dtype, f8e4m3, f8e5m2 or i8.
  ir::ScalarKind cacheElement() const;
  // The kv_cache parameter's element type: cacheElement(), except i8 (bytes) for the
  // per-token-head formats, whose rows mix quantized values and a float32 scale.
  ir::ScalarKind cachePointerElement() const;
  // Cache elements per (token, head) key row: D, or D + 4 for the per-token-head
  // formats with inline scales (D/2 and D/2 + 4 for int4).
  int cacheRowElements() const;
  // The same for a value row (value_head_size).
  int cacheValueRowElements() const;
  // Largest quantized magnitude: 127 (int8), 448 (e4m3), 57344 (e5m2); 0 for auto.
  double quantMax() const;
  int headsPerProgram() const;
  // e.g. "reshape_and_cache_bf16_int8_per_token_head_kv8_d128_bs16" ("_d192v128": DiffKV;
  // "_checked": check_bounds; "_align4x16": source and cache alignments below 16;
  // "_headscales": per-head fp8 scales).
  std::string kernelName() const;
  support::Status validate() const;
};

// Kernel parameters, in order:
//   key ptr<dtype>, value ptr<dtype>, kv_cache ptr<cachePointerElement>, slot_mapping ptr<i64>,
//   [k_scale ptr<f32>, v_scale ptr<f32> for the per-tensor fp8 formats],
//   [k_scale_cache ptr<f32>, v_scale_cache ptr<f32> for separate scales],
//   key_stride_token i64, key_stride_head i64, value_stride_token i64,
//   value_stride_head i64, kv_stride_block i64, kv_stride_kv i64 (K→V offset),
//   kv_stride_token i64, kv_stride_head i64,
//   [scale_stride_block i64, scale_stride_token i64, scale_stride_head i64 (f32
//   elements, shared by both scale tensors) for separate scales].
// Bounds-checked (check_bounds): bounds_record ptr<i32> (4 ints, BoundsCheck.h)
// follows the last pointer (before the strides) and num_blocks i32 ends the list.
support::Expected<std::unique_ptr<ir::Kernel>> buildCacheWrite(const CacheWriteConfig& config);

// Grid y: ceil(Hkv / headsPerProgram).
int64_t cacheWriteGridY(const CacheWriteConfig& config);

}  // namespace attnjit::compiler
