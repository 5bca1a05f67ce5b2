#!/usr/bin/env python3
"""MLA latent decode through the op API (attnjit.ops.mla_decode) on the shapes of
the MLA issue's targets, with the op's own tiling and split choice.

Each point is a decode batch (one query token per sequence, H query heads over
one latent head of width L + 64, 16-token blocks, uniform lengths), called the
way an engine calls it: a split-KV workspace from mla_decode_workspace_bytes and
the max_seq_len / sum_seq_lens hints. Reported per point: the median GPU time
(CUDA events after warm-up, queued behind a sleep kernel as in decode_grid.py),
TFLOP/s (2·H·(W + L) per key), the cuBLAS bf16 GEMM rate measured in the same
process and the share of it, and the latent bytes' rate as % of the
device-copy rate. q and the cache are random (never zeros), the output is
poisoned with NaN, and the first sequences are checked against a float64
reference (the fp8 cache dequantized by torch's own float8 cast).

    ATTNJIT_LIBRARY=build/lib/libattnjit.so python3 bench/mla_op.py [--quick]"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from decode_grid import copy_rate, median_ms  # noqa: E402

# (batch, context, heads, kv_lora_rank, cache format)
POINTS = [
    (64, 4096, 128, 512, "auto"),
    (64, 4096, 128, 512, "fp8_e4m3"),
    (64, 4096, 128, 256, "auto"),
    (128, 8192, 128, 512, "auto"),
    (4, 65536, 128, 512, "auto"),
    (64, 4096, 64, 512, "auto"),
    (64, 4096, 32, 512, "auto"),
    (64, 4096, 16, 512, "auto"),
    (64, 4096, 32, 512, "fp8_e4m3"),
    (64, 4096, 16, 512, "fp8_e4m3"),
    (1, 4096, 128, 512, "auto"),
    (4, 65536, 16, 512, "auto"),
    (4, 65536, 16, 512, "fp8_e4m3"),
    (4, 65536, 32, 512, "auto"),
]
QUICK = POINTS[:2]
ROPE = 64
BLOCK = 16
CHECKED_SEQUENCES = 2


def gemm_rate(torch):
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    ms = median_ms(torch, lambda: torch.mm(a, b), 20)
    return 2 * 8192 ** 3 / (ms * 1e-3)


def reference(torch, q, latent, seq_len, kv_lora_rank, scale):
    """float64 attention of one sequence's heads over its latent rows."""
    q64 = q.double()
    k = latent[:seq_len].double()
    scores = (q64 @ k.t()) * scale
    return torch.softmax(scores, dim=-1) @ k[:, :kv_lora_rank]


def run_point(torch, attnjit, point, copy_bytes_per_s, gemm_flops_per_s):
    batch, context, heads, kv_lora_rank, cache = point
    width = kv_lora_rank + ROPE
    blocks_per_seq = (context + BLOCK - 1) // BLOCK
    num_blocks = batch * blocks_per_seq
    q = torch.randn(batch, heads, width, device="cuda", dtype=torch.bfloat16)
    values = torch.randn(num_blocks, BLOCK, width, device="cuda", dtype=torch.bfloat16)
    kv_scale = None
    if cache == "fp8_e4m3":
        kv_scale = torch.tensor([0.05], device="cuda", dtype=torch.float32)
        kv_cache = (values / kv_scale).to(torch.float8_e4m3fn).view(torch.uint8)
        dequantized = kv_cache.view(torch.float8_e4m3fn).float() * kv_scale
    else:
        kv_cache = values
        dequantized = values.float()
    # Each sequence's blocks in a shuffled order, as a paged cache holds them.
    block_tables = torch.randperm(num_blocks, device="cuda", dtype=torch.int64).to(torch.int32)
    block_tables = block_tables.view(batch, blocks_per_seq).contiguous()
    seq_lens = torch.full((batch,), context, device="cuda", dtype=torch.int32)
    out = torch.full((batch, heads, kv_lora_rank), float("nan"), device="cuda", dtype=torch.bfloat16)
    scale = width ** -0.5
    workspace = torch.empty(
        max(1, attnjit.ops.mla_decode_workspace_bytes(batch, heads, kv_lora_rank, context)),
        device="cuda", dtype=torch.uint8)

    def call():
        attnjit.ops.mla_decode(q, kv_cache, out, block_tables, seq_lens, max_seq_len=context, scale=scale,
                               kv_cache_format=cache, kv_scale=kv_scale, workspace=workspace,
                               sum_seq_lens=batch * context)

    ms = median_ms(torch, call, 20)
    torch.cuda.synchronize()
    worst = 0.0
    for s in range(min(batch, CHECKED_SEQUENCES)):
        rows = dequantized[block_tables[s].long()].reshape(-1, width)
        expected = reference(torch, q[s], rows, context, kv_lora_rank, scale)
        worst = max(worst, (out[s].double() - expected).abs().max().item())
    finite = bool(torch.isfinite(out).all().item())
    flops = 2.0 * batch * heads * context * (width + kv_lora_rank)
    latent_bytes = batch * context * width * kv_cache.element_size()
    tflops = flops / (ms * 1e-3) / 1e12
    print("B=%-4d ctx %-6d H=%-4d %d/%d %-9s %9.4f ms %7.1f TFLOP/s %5.1f%% of GEMM %6.1f%% of copy  "
          "max|err| %.2e %s" % (batch, context, heads, width, kv_lora_rank, cache, ms, tflops,
                                100 * flops / (ms * 1e-3) / gemm_flops_per_s,
                                100 * latent_bytes / (ms * 1e-3) / copy_bytes_per_s, worst,
                                "PASS" if finite and worst < 2e-2 else "FAIL"))
    return finite and worst < 2e-2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only B=64 ctx 4096, bf16 and fp8 latents")
    args = parser.parse_args()
    import torch
    import attnjit
    if not torch.cuda.is_available():
        print("mla_op: no CUDA device; nothing measured")
        return 0
    torch.manual_seed(0)
    copy_bytes_per_s = copy_rate(torch)
    gemm_flops_per_s = gemm_rate(torch)
    print("%s: copy %.0f GB/s, cuBLAS bf16 GEMM %.1f TFLOP/s" % (
        torch.cuda.get_device_name(), copy_bytes_per_s / 1e9, gemm_flops_per_s / 1e12))
    ok = all([run_point(torch, attnjit, point, copy_bytes_per_s, gemm_flops_per_s)
              for point in (QUICK if args.quick else POINTS)])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
