// The formats a paged KV cache can hold (vLLM's kv_cache_dtype), shared by the
// cache writer and the attention kernels that read the cache. shared/REFERENCE.md,
// "Quantized KV cache", has vLLM's definitions; in short:
// - auto: the data type of q and o (f32, f16, bf16);
// - fp8_e4m3 / fp8_e5m2: one f32 scale for all of K (k_scale) and one for V
//   (v_scale), per layer; a cache value x stands for x · scale;
// - int8 / fp8 (e4m3) / int4 per token-head: each (token, head) row holds its
//   quantized values and then, inline, the row's f32 scale (little-endian, at byte
//   offset D, or D/2 for int4). Rows are D + 4 bytes (D/2 + 4 for int4): the cache's
//   element type is bytes and its strides count bytes.
// DiffKV's packed cache (QK head size Dqk != V head size Dv, vLLM's
// [num_blocks, block_size, Hkv, Dqk + Dv]) holds per (token, head) a K row and then
// a V row, each in the format above with its own inline scale for the
// per-token-head formats: Dqk bytes + f32, then Dv bytes + f32 (int4: Dqk/2 + 4,
// then Dv/2 + 4), i.e. kvCacheRowElements(f, Dqk) + kvCacheRowElements(f, Dv)
// bytes, and kv_stride_kv = kvCacheRowElements(f, Dqk). Equal-size caches keep
// their (num_blocks, 2, block_size, Hkv, row) layout.
// int4 rows pack two values per byte: element 2i in the low nibble of byte i,
// element 2i + 1 in the high nibble, each a two's-complement number in [-8, 7]
// (the writer uses [-7, 7]: QMAX = 7).
//
// Scale layout (KvScaleLayout) of the per-token-head formats: `inline` is the
// layout above; `separate` is vLLM's current one, whose (token, head) rows hold
// only the D quantized bytes (D/2 for int4) and whose f32 scales live in two
// tensors of their own, k_scale_cache and v_scale_cache [num_blocks, block_size,
// Hkv] with strides (block, token, head) in f32 elements (possibly views into the
// cache's own allocation). Rows of D bytes keep the cache 16-byte aligned where D
// is a multiple of 16, so K and V move in 16-byte copies.
// int4 with separate scales is vLLM's int4_per_token_head: asymmetric, unsigned
// nibbles q in [0, 15] (element 2i low) with scale = max((max - min) / 15,
// 1e-6) and zero point zp = clamp(round(-min / scale), 0, 15) stored in the
// scale's low four mantissa bits (bits & ~15 | zp); q stands for (q - zp) · (the
// scale with those bits cleared). vLLM writes and reads it in a rotated space (a
// randomized Hadamard transform of K, V and q, the output rotated back), which
// stays outside the kernels, as in vLLM.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "ir/Types.h"

namespace attnjit::compiler {

enum class KvCacheFormat {
  Auto,               // same dtype as q and o
  Fp8E4M3,            // per-tensor scale
  Fp8E5M2,            // per-tensor scale
  Int8PerTokenHead,   // inline f32 scale per (token, head) row
  Fp8PerTokenHead,    // e4m3, inline f32 scale per (token, head) row
  Int4PerTokenHead,   // two values per byte, inline f32 scale per (token, head) row
};

enum class KvScaleLayout {
  Inline,    // the f32 scale after the row's values
  Separate,  // scales in k_scale_cache / v_scale_cache, rows hold values only
};

// "inline" or "separate".
const char* kvScaleLayoutName(KvScaleLayout layout);
std::optional<KvScaleLayout> parseKvScaleLayout(std::string_view name);

// vLLM's kv_cache_dtype spelling: "auto", "fp8_e4m3", "fp8_e5m2",
// "int8_per_token_head", "fp8_per_token_head", "int4_per_token_head" ("fp8" is
// accepted for fp8_e4m3).
const char* kvCacheFormatName(KvCacheFormat format);
std::optional<KvCacheFormat> parseKvCacheFormat(const std::string& name);
// The accepted spellings, for error messages.
const char* kvCacheFormatChoices();
bool isPerTokenHead(KvCacheFormat format);
bool isPerTensorFp8(KvCacheFormat format);

// The type of one quantized value: `dtype` (auto), f8e4m3, f8e5m2, i8 or i4.
ir::ScalarKind kvCacheValueKind(KvCacheFormat format, ir::ScalarKind dtype);
// The cache pointer's element type: the value type, except i8 (bytes) for the
// per-token-head formats, whose rows mix values and an f32 scale.
ir::ScalarKind kvCachePointerKind(KvCacheFormat format, ir::ScalarKind dtype);
// Cache pointer elements per (token, head) row: D, D + 4, or D/2 + 4 (int4);
// with separate scales D, or D/2 (int4).
int kvCacheRowElements(KvCacheFormat format, int headSize, KvScaleLayout layout = KvScaleLayout::Inline);
// What byte strides built from K rows and V rows of these sizes (values only,
// separate scales) are multiples of: the largest power of two up to 16
// dividing both.
int byteRowStrideDivisibility(int keyRowBytes, int valueRowBytes);
// Where the inline scale starts in a per-token-head row, in bytes: D, or D/2 (int4).
int kvCacheScaleByteOffset(KvCacheFormat format, int headSize);
// Largest quantized magnitude: 127 (int8), 7 (int4), 448 (e4m3), 57344 (e5m2); 0 for auto.
double kvCacheQuantMax(KvCacheFormat format);

}  // namespace attnjit::compiler
