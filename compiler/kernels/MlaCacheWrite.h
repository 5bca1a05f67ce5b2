// Kernel builder: vLLM's concat_and_cache_mla, the KV cache write of MLA
// (DeepSeek-style multi-head latent attention). Each new token has a compressed
// latent kv_c [kv_lora_rank] and a rotary key part k_pe [rope_dim]; the cache holds
// one row per token, kv_c ‖ k_pe, shared by every head:
//
//   kv_cache[slot / block_size, slot % block_size, 0 : L]     = kv_c[t]
//   kv_cache[slot / block_size, slot % block_size, L : L + R] = k_pe[t]
//
// with slot = slot_mapping[t] (int64, as reshape_and_cache; -1 marks a padding
// token, which writes nothing).
//
// Layouts: kv_c [num_tokens, L] and k_pe [num_tokens, R] with a token stride each
// and unit element stride (they are often two slices of one projection output);
// cache (num_blocks, block_size, L + R) with strides (block, token) in cache
// elements and unit element stride. Widths: L + R = 512 + 64 (DeepSeek-V2/V3) or
// 256 + 64; any other pair is rejected (shared/REFERENCE.md, "MLA decode").
//
// Cache formats: auto (the input dtype: values copied) or per-tensor fp8
// (fp8_e4m3, fp8_e5m2) with one float32 scale in device memory (read by the
// kernel, so CUDA graphs stay valid when it changes): stores x / scale rounded
// to nearest even and saturated to the largest finite value, exactly as the
// per-tensor fp8 reshape_and_cache. Per-token-head formats are not MLA formats
// and are rejected.
//
// Grid: (num_tokens); a program writes one token's row.
#pragma once

#include <memory>
#include <string>

#include "compiler/kernels/KvCacheFormat.h"
#include "ir/IR.h"

namespace attnjit::compiler {

struct MlaCacheWriteConfig {
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // kv_c and k_pe (f32, f16, bf16)
  KvCacheFormat cacheFormat = KvCacheFormat::Auto;
  int kvLoraRank = 512;  // L
  int ropeDim = 64;      // R
  int blockSize = 16;
  int numWarps = 4;

  // The cache's element type: dtype, f8e4m3 or f8e5m2.
  ir::ScalarKind cacheElement() const;
  int cacheRowElements() const;  // L + R
  // e.g. "mla_cache_write_bf16_fp8_e4m3_l512_r64_bs16" (no format part for auto;
  // "_w8" when num_warps differs from the default).
  std::string kernelName() const;
  support::Status validate() const;
};

// Kernel parameters, in order:
//   kv_c ptr<dtype>, k_pe ptr<dtype>, kv_cache ptr<cacheElement>, slot_mapping ptr<i64>,
//   [scale ptr<f32> for the per-tensor fp8 formats],
//   kv_c_stride_token i64, k_pe_stride_token i64, cache_stride_block i64,
//   cache_stride_token i64.
// Strides are in elements. Pointers are 16-byte aligned; the input token strides
// are multiples of 8 and the cache strides multiples of 16 (true of every
// L + R row above; promises checked by the launchers: 16-byte vector accesses).
support::Expected<std::unique_ptr<ir::Kernel>> buildMlaCacheWrite(const MlaCacheWriteConfig& config);

}  // namespace attnjit::compiler
