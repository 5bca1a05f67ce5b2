#!/usr/bin/env bash
# The benchmark table of shared/REFERENCE.md's shapes on the local GPU, using a
# bundle's CLI (scripts/device-bundle) or the build tree's. Prints one block per
# shape: median kernel time, GB/s, TFLOP/s, ratio to a device-to-device copy,
# and compile times. Run from the repository root or a bundle.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
attnjit="${ATTNJIT_CLI:-$here/bin/attnjit}"
[ -x "$attnjit" ] || attnjit="$here/build/bin/attnjit"
spec="$here/specs/bench.yaml"
iterations="${ITERATIONS:-50}"

run() {
  local title="$1"; shift
  echo "== $title"
  "$attnjit" bench "$spec" --iterations="$iterations" "$@"
}

# Decode: B=64, 32/8 heads, D=128, ctx 4096 (vLLM Triton 0.290 ms).
run "decode B=64 ctx 4096" --variant=unified_attention_bf16_h32kv8_d128_bs16_causal \
  --shape query_lens=1x64 --shape context_lens=4095x64 --shape check_stride=5
# Prefill causal and non-causal: 8 x 2048 tokens (vLLM 3.89 / 6.98 ms).
run "prefill 8x2048" --shape query_lens=2048x8 --shape context_lens=0x8 --shape check_stride=257
