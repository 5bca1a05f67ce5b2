// Kernel builder: vLLM's cp_gather_cache and gather_and_maybe_dequant_cache, the
// gather of a batch's cached rows out of a paged cache into one contiguous
// tensor (chunked MLA prefill reads a sequence's cached latent context this
// way, dequantized, before its up-projection):
//
//   dst[cu_seq_lens[s] + i, :] = cache[block_table[s, p / block_size], p % block_size, :]
//   with p = seq_starts[s] + i (seq_starts optional, else 0), for i < seq_len(s)
//
// where seq_len(s) = cu_seq_lens[s + 1] - cu_seq_lens[s]. vLLM applies only
// seq_starts[s] / block_size (its callers pass block-aligned starts); here the
// start is a position, the same for aligned starts and exact for the others.
//
// Layouts: cache (num_blocks, block_size, entry) with strides (block, token) in
// cache elements and unit element stride (MLA's latent cache, entry = kv_lora_rank
// + rope_dim; any entry width); dst [num_tokens, entry] with a token stride;
// block_table [num_seqs, max_blocks] i32, cu_seq_lens [num_seqs + 1] i32,
// seq_starts [num_seqs] i32.
//
// Cache formats: auto (cache and dst of dtype: rows copied bit for bit, vLLM's
// cp_gather_cache) or per-tensor fp8 (fp8_e4m3, fp8_e5m2; one f32 scale in
// device memory): dst = fp8 value · scale in dtype, vLLM's
// gather_and_maybe_dequant_cache.
//
// Grid: (ceil(num_tokens / block_tokens)); program p gathers dst rows
// [p · block_tokens, (p + 1) · block_tokens), each row finding its sequence by a
// branch-free binary search over cu_seq_lens.
#pragma once

#include <memory>
#include <string>

#include "compiler/kernels/KvCacheFormat.h"
#include "ir/IR.h"

namespace attnjit::compiler {

struct GatherCacheConfig {
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // dst (and the cache for auto): f32, f16, bf16
  KvCacheFormat cacheFormat = KvCacheFormat::Auto;  // auto, fp8_e4m3 or fp8_e5m2
  int entrySize = 576;  // elements of a cache row (and a dst row), 1 to 4096
  int blockSize = 16;
  bool seqStarts = false;  // parameter seq_starts: each sequence's first position
  int blockTokens = 8;     // dst rows per program, a power of two
  int numWarps = 4;
  // The divisibility (in elements) promised for the dst and cache strides, a
  // power of two up to 16: rows then move in vectors of up to 16 bytes. The op
  // picks the widest its call's strides keep (1 always holds).
  int strideDivisibility = 16;

  ir::ScalarKind cacheElement() const;  // dtype, f8e4m3 or f8e5m2
  // e.g. "gather_cache_bf16_fp8_e4m3_e576_bs16_starts" (no format part for auto;
  // "_t16", "_w8", "_sd4" for non-default tuning and stride divisibility).
  std::string kernelName() const;
  support::Status validate() const;
};

// Kernel parameters, in order:
//   dst ptr<dtype>, cache ptr<cacheElement>, block_table ptr<i32>, cu_seq_lens ptr<i32>,
//   [seq_starts ptr<i32>], [scale ptr<f32> for the per-tensor fp8 formats],
//   num_seqs i32, seq_search_steps i32 (ceil(log2(num_seqs + 1))), num_tokens i32,
//   dst_stride_token i64, block_table_stride i64, cache_stride_block i64,
//   cache_stride_token i64.
// Strides are in elements, multiples of stride_divisibility. Pointers are 16-byte aligned.
support::Expected<std::unique_ptr<ir::Kernel>> buildGatherCache(const GatherCacheConfig& config);

// Grid x for num_tokens dst rows.
int64_t gatherCacheGridX(const GatherCacheConfig& config, int64_t numTokens);

}  // namespace attnjit::compiler
