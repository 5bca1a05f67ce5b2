#!/usr/bin/env python3
"""attnjit's swap_blocks: whole cache blocks between pinned host memory and the
GPU, and inside the GPU cache, for mappings of consecutive blocks (a preempted
sequence swapped out whole: merged into one copy) and of scattered blocks (no two
pairs adjacent: where vLLM's swap_blocks issues one cudaMemcpyAsync per block,
attnjit issues one batch of copies host <-> GPU and one copy_blocks kernel
inside the GPU). Times are CUDA events around the call, so the call's host
time counts where the GPU waits for it. The ceiling is torch's one copy_ of the same bytes as a single
contiguous range. Blocks of 32 KiB (16 tokens x 8 heads x 128 x bf16). Prints
CUDA-event medians with GB/s.

    ATTNJIT_LIBRARY=build/lib/libattnjit.so python3 bench/swap_blocks.py"""

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def time_ms(torch, run, iterations):
    for _ in range(3):
        run()
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--blocks", type=int, default=1024, help="blocks moved per call")
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args()
    import torch
    import attnjit

    shape = (4 * args.blocks, 16, 8, 128)
    gpu = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    host = torch.empty(shape, dtype=torch.bfloat16).pin_memory()
    host.copy_(gpu.cpu())
    block_bytes = gpu[0].numel() * gpu.element_size()
    total = args.blocks * block_bytes
    consecutive = torch.stack([torch.arange(args.blocks), torch.arange(args.blocks) + args.blocks], 1)
    scattered = torch.stack([torch.arange(args.blocks) * 2, torch.arange(args.blocks) * 2 + 1], 1)
    print("%d blocks of %d KiB per call (%.1f MiB)" % (args.blocks, block_bytes // 1024, total / 2**20))
    print("%-34s %10s %9s %10s %9s" % ("case", "attnjit ms", "GB/s", "ceiling ms", "GB/s"))
    for direction, src, dst in (("host -> GPU", host, gpu), ("GPU -> host", gpu, host),
                                ("GPU -> GPU (one cache)", gpu, gpu)):
        n = args.blocks
        ceiling = time_ms(torch, lambda: dst[n:2 * n].copy_(src[:n], non_blocking=True), args.iterations)
        for name, mapping in (("consecutive", consecutive), ("scattered", scattered)):
            ours = time_ms(torch, lambda: attnjit.ops.swap_blocks(src, dst, mapping), args.iterations)
            expected = src[mapping[:, 0]].cpu()
            attnjit.ops.swap_blocks(src, dst, mapping)
            torch.cuda.synchronize()
            assert torch.equal(dst[mapping[:, 1]].cpu(), expected), (direction, name)
            print("%-34s %10.4f %9.1f %10.4f %9.1f" % ("%s, %s" % (direction, name), ours, total / ours / 1e6,
                                                     ceiling, total / ceiling / 1e6))


if __name__ == "__main__":
    main()
