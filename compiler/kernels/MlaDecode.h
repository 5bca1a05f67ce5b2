// Kernel builder: MLA latent decode (vLLM's TRITON_MLA decode, stage 1 and the
// unsplit kernel), multi-head latent attention as DeepSeek-V2/V3 serve it.
//
// The paged cache holds one latent row per token, `(num_blocks, block_size, W)`
// with W = L + R: the compressed KV `kv_c` (L = kv_lora_rank: 512 or 256) followed
// by the rotary key part `k_pe` (R = 64). Every query head attends to that one
// latent "head" (MQA): the key is the whole W-wide row, the value its first L
// entries. One query token per sequence (decode):
//   q             [B, H, W]   strides (q_stride_batch, q_stride_head), unit element stride
//   out           [B, H, L]   strides (o_stride_batch, o_stride_head)
//   lse           f32, lse[b · lse_stride_batch + h · lse_stride_head] (natural log; -inf for
//                 an empty sequence): vLLM's [B, H] is strides (H, 1), the merge kernels' [H, B] (1, B)
//   block_tables  [B, max_blocks] i32, seq_lens [B] i32 (keys per sequence, may be 0)
//   kv_cache      strides (kv_stride_block, kv_stride_token), unit element stride
//
// Grid (B · ceil(H / BLOCK_H), 1, num_segments): program (p, 0, z) takes query
// heads [y·BLOCK_H, (y + 1)·BLOCK_H) of sequence b = p / ceil(H / BLOCK_H), y =
// p mod ceil(H / BLOCK_H) (a sequence's head blocks run side by side and share
// its latent tiles through L2), loads q_nope [BLOCK_H, L] and
// q_pe [BLOCK_H, R] once, and walks the sequence's keys in tiles of TILE_SIZE
// tokens; each latent tile is read once for all its heads.
#pragma once

#include <memory>
#include <string>

#include "compiler/kernels/Fp32Precision.h"
#include "compiler/kernels/Fp8Dots.h"
#include "compiler/kernels/KvCacheFormat.h"
#include "ir/IR.h"

namespace attnjit::compiler {

struct MlaDecodeConfig {
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // q, out and (auto) the cache: f32, f16 or bf16
  // f32 dtype: both dots on the TF32 tensor cores (the default, vLLM's numerics)
  // or exact f32 FMAs (Fp32Precision.h).
  Fp32Precision fp32Precision = Fp32Precision::Tf32;
  // auto (the cache holds dtype) or fp8_e4m3 with one per-tensor f32 scale in
  // device memory (kv_scale): a cache value x stands for x · kv_scale, for the key
  // and the value alike (they are the same row).
  KvCacheFormat kvCacheFormat = KvCacheFormat::Auto;
  // An fp8 latent with bf16 q: the dots in bf16 (Dtype, vLLM's numerics) or f16
  // (one conversion per fp8 pair; Fp8Dots.h). F16 requires the fp8 cache.
  Fp8DotDtype fp8DotDtype = Fp8DotDtype::Dtype;
  int kvLoraRank = 512;  // L: 512 (DeepSeek-V2/V3) or 256
  int ropeDim = 64;      // R: 64
  int numHeads = 128;    // H: query heads sharing the latent head
  int blockSize = 16;    // cache tokens per block, 1 to 256
  int blockH = 16;       // query heads per program: 16, 32 or 64
  int tileSize = 16;     // keys per loop iteration: 16, 32 or 64
  int numWarps = 4;
  int numStages = 2;     // 2: the next tile's loads in flight during this tile's compute; 3-4: slots for
                         // producer warps running further ahead (needs warpSpecialize)
  // q (BLOCK_H × W) loaded once before the loop into shared memory, each dot reading
  // its fragments there with ldmatrix (kernel attribute shared_invariant_operands;
  // f16 and bf16 only); false: q re-read from global memory (L1) every tile.
  bool qInShared = false;
  // Producer warps (kernel attribute warp_specialize, codegen/lower/
  // WarpSpecialization.cpp): on sm_90a a warpgroup more issues the latent
  // chunks' copies and hands the slots to the compute warps through mbarriers.
  // Ignored where codegen finds the loads unfit. Same results.
  bool warpSpecialize = false;
  // 3D launch (split-KV), stage 1: program z walks only KV tiles
  // [z, z + 1)·segment_tiles and writes reduce_segments' partials
  // (compiler/kernels/ReduceSegments.h, with tokens = B, Hq = H, head size = L).
  bool splitKv = false;
  bool outputLse = false;  // 2D: write lse; split-KV: reduce_segments (lseTokenStride) writes it
  // Score modifiers MLA decode does not have (vLLM rejects them too). They exist so
  // that a spec asking for one gets a clear error instead of an unknown field.
  bool alibi = false;
  int slidingWindow = 0;
  double softcap = 0;

  int latentWidth() const { return kvLoraRank + ropeDim; }  // W = L + R
  int64_t headBlocks() const { return (numHeads + blockH - 1) / blockH; }  // programs per sequence
  // The divisibility promised for the cache strides, in cache elements (16-byte rows).
  int kvStrideDivisibility() const;
  bool tf32Dots() const { return dtype == ir::ScalarKind::F32 && fp32Precision == Fp32Precision::Tf32; }
  // The element type of both dots' operands (q, the latent, P).
  ir::ScalarKind dotKind() const { return fp8DotOperandKind(fp8DotDtype, kvCacheFormat, dtype); }
  // e.g. "mla_decode_bf16_h128_l512_r64_bs16" (+ "_fp8_e4m3", "_ieee", "_lse", "_3d", tuning knobs).
  std::string kernelName() const;
  // User-facing check: the latent widths served (576 and 320), the dtype, the cache
  // format, the tiling knobs, and no score modifier.
  support::Status validate() const;
};

// Kernel parameters, in order:
//   2D:  out ptr<dtype>, q ptr<dtype>, kv_cache ptr<cache>, block_tables ptr<i32>,
//        seq_lens ptr<i32>, [kv_scale ptr<f32>], [lse ptr<f32>], scale f32,
//        q_stride_batch i64, q_stride_head i64, o_stride_batch i64, o_stride_head i64,
//        block_table_stride i64, kv_stride_block i64, kv_stride_token i64,
//        [lse_stride_batch i64, lse_stride_head i64].
//   3D:  segm_output ptr<f32>, segm_max ptr<f32>, segm_expsum ptr<f32>, q, kv_cache,
//        block_tables, seq_lens, [kv_scale], scale, q_stride_batch, q_stride_head,
//        block_table_stride, kv_stride_block, kv_stride_token, num_segments i32,
//        segment_tiles i32.
// `cache` is dtype (auto) or f8e4m3; kv_scale only with fp8_e4m3. Strides are in
// elements of their tensor.
support::Expected<std::unique_ptr<ir::Kernel>> buildMlaDecode(const MlaDecodeConfig& config);

}  // namespace attnjit::compiler
