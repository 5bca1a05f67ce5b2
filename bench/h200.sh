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

# Decode: B=64, 32/8 heads, D=128, ctx 4096 (vLLM Triton 0.290 ms).
run "decode B=64 ctx 4096" specs/bench.yaml --variant=unified_attention_bf16_h32kv8_d128_bs16_causal "${decode[@]}"
# Prefill causal and non-causal: 8 x 2048 tokens (vLLM 3.89 / 6.98 ms), with
# vLLM's BLOCK_M (16: 4 tokens x 4 heads per program) and with 128 query rows.
run "prefill 8x2048, BLOCK_M 16" specs/bench.yaml "${prefill[@]}"
run "prefill 8x2048, BLOCK_M 128" bench/prefill.yaml "${prefill[@]}"

if [ "${SWEEP:-0}" = 1 ]; then
  run "prefill sweep" bench/prefill_sweep.yaml "${prefill[@]}"
  run "decode sweep: stages x tile" bench/decode_stages.yaml "${decode[@]}"
fi
