#!/usr/bin/env bash
# The benchmark table of shared/REFERENCE.md's shapes on the local GPU, using a
# bundle's CLI (scripts/device-bundle) or the build tree's. Prints one block per
# shape: median kernel time, GB/s, TFLOP/s, ratio to a device-to-device copy,
# and compile times. Run from the repository root or a bundle.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
attnjit="${ATTNJIT_CLI:-$here/bin/attnjit}"
[ -x "$attnjit" ] || attnjit="$here/build/bin/attnjit"
iterations="${ITERATIONS:-50}"

run() {
  local title="$1" spec="$2"; shift 2
  echo "== $title"
  "$attnjit" bench "$here/$spec" --iterations="$iterations" "$@"
}

prefill=(--shape query_lens=2048x8 --shape context_lens=0x8 --shape check_stride=257)
decode=(--shape query_lens=1x64 --shape context_lens=4095x64 --shape check_stride=5)

# Decode: B=64, 32/8 heads, D=128, ctx 4096 (vLLM Triton 0.290 ms), with the
# op API's tiling (64-token KV tiles) and with vLLM's (32).
run "decode B=64 ctx 4096" bench/decode.yaml "${decode[@]}"
run "decode B=64 ctx 4096, vLLM's tiling" specs/bench.yaml \
  --variant=unified_attention_bf16_h32kv8_d128_bs16_causal "${decode[@]}"
# The same decode split into 1024-key segments (3D + reduce): a full batch, which
# the op API keeps 2D because of this number; then context lengths uniform in
# 1..8192 (fixed draw; vLLM 0.435 ms 3D, 0.485 ms 2D), 2D and split; then B=8 at
# ctx 32768, which the op API splits into 5 segments.
run "decode B=64 ctx 4096, split-KV 1024-key segments" bench/decode_split.yaml "${decode[@]}" --shape segment_tiles=16
mixed=(--shape query_lens=1x64 --shape check_stride=5
  --shape context_lens=1951,5234,1681,3658,6891,8042,7226,3931,41,1322,1814,4706,1606,7367,188,8032,5148,3444,6508,4120,5696,5843,6166,1250,5577,1469,4786,4712,7494,2308,5062,405,6043,5956,7554,6917,1485,6533,8166,1907,6970,8045,6523,4237,6880,7851,415,3678,2113,800,1680,7035,7701,2333,7898,3750,1999,7484,7690,4112,6587,5040,7846,6585)
# The op API splits such uneven full batches (minSeqLen hint below 90% of
# maxSeqLen) into segments of 3/8 of the longest (48 tiles of 64 keys for
# 8192), with the per-tile row sum (defer_row_sum: false keeps three CTAs per
# SM); the 2D kernels for comparison.
run "decode B=64 ctx uniform 1..8192, split-KV 3072-key segments (op API)" bench/decode_split_mixed.yaml \
  "${mixed[@]}" --shape segment_tiles=48
run "decode B=64 ctx uniform 1..8192, 2D, per-tile row sum" bench/defer_row_sum.yaml \
  --variant=unified_attention_bf16_h32kv8_d128_bs16_causal_t64_rowsum "${mixed[@]}"
run "decode B=64 ctx uniform 1..8192, 2D, per-column row sum" bench/decode.yaml "${mixed[@]}"
# That draw is heavy: mean seq_len 4743, 2.2 standard errors above the
# distribution's 4096, so its K/V (1.24 GB) take 0.305 ms even at copy speed.
# The stratified batch below has the distribution's mean (seq_len (i + 0.5) ·
# 128 for i = 0..63, shuffled with seed 15): 1.07 GB (docs/perf-log.md, 2026-12-01).
stratified=(--shape query_lens=1x64 --shape check_stride=5
  --shape context_lens=6719,831,703,4415,7231,6847,6207,575,4671,4799,1087,5311,7103,7999,3519,3647,5439,1599,7743,7487,6463,3135,1471,3903,5951,7615,6335,4927,7871,4031,2367,4543,8127,4159,2495,5055,2623,5183,1727,1855,6975,2111,3263,2239,2879,5823,3775,2751,959,7359,3007,5695,1215,5567,6591,447,191,1983,1343,319,6079,4287,63,3391)
run "decode B=64 ctx stratified 1..8192 (mean 4096), split-KV 3072-key segments (op API)" \
  bench/decode_split_mixed.yaml "${stratified[@]}" --shape segment_tiles=48
run "decode B=64 ctx stratified 1..8192 (mean 4096), 2D, per-tile row sum" bench/defer_row_sum.yaml \
  --variant=unified_attention_bf16_h32kv8_d128_bs16_causal_t64_rowsum "${stratified[@]}"
run "decode B=8 ctx 32768, 2D" bench/decode.yaml --shape query_lens=1x8 --shape context_lens=32767x8
run "decode B=8 ctx 32768, split into 5" bench/decode_split.yaml --shape query_lens=1x8 \
  --shape context_lens=32767x8 --shape segment_tiles=103
# Quantized KV caches (vLLM 0.352 ms fp8 per-tensor, 0.859 / 0.814 ms fp8 / int8
# per-token-head).
run "decode B=64 ctx 4096, quantized KV" bench/decode_quant.yaml "${decode[@]}"
# Prefill causal and non-causal: 8 x 2048 tokens (vLLM 3.89 / 6.98 ms) with 128
# query rows per program (the op API's choice for long queries).
run "prefill 8x2048, BLOCK_M 128" bench/prefill.yaml "${prefill[@]}"
# Head sizes below their power of two (80, 96, 112; 128 for reference): prefill
# skips the padding's mma steps (dot k_extent / n_extent), decode keeps them.
run "prefill 8x2048 causal, head sizes 80/96/112/128" bench/head_sizes_prefill.yaml "${prefill[@]}"
run "decode B=64 ctx 4096, head sizes 80/96/112/128" bench/head_sizes_decode.yaml "${decode[@]}"
# DiffKV, QK 192 / V 128 over the packed cache: decode B=64 32/8 ctx 4096 (vLLM
# 0.384 ms 2D) and causal prefill 8 x 2048 (vLLM 5.42 ms).
run "DiffKV 192/128 decode B=64 ctx 4096" bench/diffkv.yaml "${decode[@]}"
run "DiffKV 192/128 prefill causal 8x2048" bench/diffkv_prefill.yaml "${prefill[@]}"
# The op API as an engine calls it (bench --op: the batch's min/max seq_len
# hints and a workspace; the op picks the kernel and split plan, printed):
# decode, the two mixed batches, fp8 per-tensor and per-token-head caches on
# the stratified batch, B=8 ctx 32768, and causal prefill.
run "op API: decode B=64 ctx 4096" bench/decode.yaml --op "${decode[@]}"
run "op API: decode B=64 ctx uniform 1..8192 (fixed draw)" bench/decode.yaml --op "${mixed[@]}"
run "op API: decode B=64 ctx stratified 1..8192" bench/decode.yaml --op "${stratified[@]}"
run "op API: decode stratified, quantized KV (tile 128)" bench/decode_quant_async.yaml --op "${stratified[@]}" \
  --variant=unified_attention_bf16_h32kv8_d128_bs16_causal_fp8_e4m3_t128
run "op API: decode stratified, int8 per-token-head KV" bench/decode_quant_async.yaml --op "${stratified[@]}" \
  --variant=unified_attention_bf16_h32kv8_d128_bs16_causal_int8_per_token_head_t128
run "op API: decode B=8 ctx 32768" bench/decode.yaml --op --shape query_lens=1x8 --shape context_lens=32767x8
run "op API: prefill causal 8x2048" bench/prefill.yaml --op "${prefill[@]}" \
  --variant=unified_attention_bf16_h32kv8_d128_bs16_causal_m128_qs
# vLLM's ALiBi, sqrt-ALiBi and fp8 output through the op API (their cost on
# causal prefill and decode; docs/perf-log.md, 2026-12-01).
run "op API: ALiBi / sqrt-ALiBi, bf16 / fp8 output, prefill causal 8x2048" bench/alibi_fp8_output.yaml --op \
  "${prefill[@]}"
run "op API: ALiBi / sqrt-ALiBi, bf16 / fp8 output, decode B=64 ctx 4096" bench/alibi_fp8_output.yaml --op \
  "${decode[@]}"
# Bidirectional ranges, qq_bias and chunked local attention through the op API
# (their cost on causal prefill and decode).
run "op API: mm_prefix ranges / + qq_bias, prefill causal 8x2048" bench/masks.yaml --op "${prefill[@]}"
run "op API: mm_prefix ranges / + qq_bias, decode B=64 ctx 4096" bench/masks.yaml --op "${decode[@]}"
run "op API: chunked local attention 1024 / 8192, prefill causal 8x2048" bench/chunked_local.yaml --op "${prefill[@]}"
run "op API: chunked local attention 1024 / 8192, decode B=64 ctx 4096" bench/chunked_local.yaml --op "${decode[@]}"
# Companion kernels, 16384 tokens (vLLM 0.345 ms merge, 0.055 ms cache write).
tokens=(--shape query_lens=16384 --shape context_lens=0)
run "merge_attn_states T=16384 32 heads D=128 (op API: 4 warps)" bench/merge_attn_states.yaml \
  --variant=merge_attn_states_bf16_h32_d128_lse "${tokens[@]}"
run "reshape_and_cache T=16384 8 heads D=128" specs/reshape_and_cache.yaml \
  --variant=reshape_and_cache_bf16_kv8_d128_bs16 "${tokens[@]}"

# MLA latent decode: B=64, 128 heads, 576/512, ctx 4096 (vLLM TRITON_MLA 1.29 ms
# with 8 splits, fp8 latent 1.25 ms; target <= 0.40 ms): bf16 and fp8 latents,
# 2D and split into 8 segments of 512 keys, 4 and 8 warps. Then B=128 ctx 8192
# (vLLM 5.22 ms), 2D and 16 segments.
mla=(--shape query_lens=1x64 --shape context_lens=4095x64 --shape check_stride=16 --shape segment_tiles=32)
run "MLA decode B=64 H=128 576/512 ctx 4096" bench/mla_decode.yaml "${mla[@]}"
mla_long=(--shape query_lens=1x128 --shape context_lens=8191x128 --shape check_stride=32 --shape segment_tiles=32)
run "MLA decode B=128 H=128 576/512 ctx 8192, 2D" bench/mla_decode.yaml \
  --variant=mla_decode_bf16_h128_l512_r64_bs16 "${mla_long[@]}"
run "MLA decode B=128 H=128 576/512 ctx 8192, 16 splits" bench/mla_decode.yaml \
  --variant=mla_decode_bf16_h128_l512_r64_bs16_3d "${mla_long[@]}"

if [ "${SWEEP:-0}" = 1 ]; then
  # vLLM's BLOCK_M (16: 4 tokens x 4 heads per program) for comparison.
  run "prefill 8x2048, BLOCK_M 16" specs/bench.yaml "${prefill[@]}"
  run "prefill sweep" bench/prefill_sweep.yaml "${prefill[@]}"
  run "decode sweep: stages x tile" bench/decode_stages.yaml "${decode[@]}"
  for tiles in 8 32; do
    run "decode split-KV, segments of $tiles tiles" bench/decode_split.yaml "${decode[@]}" --shape segment_tiles=$tiles
    run "decode mixed split-KV, segments of $tiles tiles" bench/decode_split.yaml "${mixed[@]}" --shape segment_tiles=$tiles
  done
fi
