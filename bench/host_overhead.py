#!/usr/bin/env python3
"""Host time per call of the ops an engine calls once per layer: paged_attention
(decode, 64 sequences) and cache_write (64 tokens), through attnjit.ops (Python
checks, ctypes) and through torch.ops.attnjit (C++ operators where attnjit's torch
extension builds; ATTNJIT_TORCH_EXTENSION=0 gives the Python operators), next to
torch's own add_ on a small tensor (the dispatcher's floor).

The calls queue behind a long sleep kernel, so the loop times the host side
alone (medians of 5 rounds of 400 calls).

    ATTNJIT_LIBRARY=build/lib/libattnjit.so python3 bench/host_overhead.py"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))


def host_us(torch, call, calls=400, rounds=5):
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    samples = []
    for _ in range(rounds):
        torch.cuda._sleep(200_000_000)
        start = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - start) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(samples)


def main():
    import torch
    import attnjit
    import attnjit.torch_ops

    batch, heads, kv_heads, d, block, context = 64, 32, 8, 128, 16, 1024
    blocks_per_seq = context // block
    cache = torch.randn(batch * blocks_per_seq, 2, block, kv_heads, d, device="cuda", dtype=torch.bfloat16)
    tables = torch.randperm(batch * blocks_per_seq, device="cuda", dtype=torch.int32).reshape(batch, blocks_per_seq)
    seq_lens = torch.full((batch,), context, device="cuda", dtype=torch.int32)
    cu = torch.arange(batch + 1, device="cuda", dtype=torch.int32)
    q = torch.randn(batch, heads, d, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(q)
    key = torch.randn(batch, kv_heads, d, device="cuda", dtype=torch.bfloat16)
    value = torch.randn_like(key)
    slots = (tables[:, -1].long() * block + block - 1).contiguous()
    small = torch.zeros(16, device="cuda")

    native = "C++" if attnjit.torch_ops.NATIVE else "Python"
    rows = [
        ("paged_attention, attnjit.ops", lambda: attnjit.ops.paged_attention(q, cache, out, tables, seq_lens, cu, 1,
                                                                             max_seq_len=context)),
        ("paged_attention, torch.ops.attnjit (%s)" % native,
         lambda: torch.ops.attnjit.paged_attention(q, cache, out, tables, seq_lens, cu, 1, max_seq_len=context)),
        ("cache_write, attnjit.ops", lambda: attnjit.ops.cache_write(key, value, cache, slots)),
        ("cache_write, torch.ops.attnjit (%s)" % native,
         lambda: torch.ops.attnjit.cache_write(key, value, cache, slots)),
        ("torch add_ (16 floats)", lambda: small.add_(1.0)),
    ]
    print("%-46s %12s" % ("call", "host us/call"))
    for name, call in rows:
        print("%-46s %12.2f" % (name, host_us(torch, call)))


if __name__ == "__main__":
    main()
