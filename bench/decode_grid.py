#!/usr/bin/env python3
"""Decode across the shapes an engine meets, as % of the device-copy rate.

Each grid point is a decode batch (one query token per sequence) through
attnjit.ops.paged_attention, timed two ways:

- plain: what an engine passes without tuning (no workspace, no length hints);
- engine: a split-KV workspace from paged_attention_workspace_bytes and the
  batch's min/max seq_len hints;
- tuned (with --tuned): the engine call after tuning its bucket on this batch
  (paged_attention(..., tune=True): the plan measured fastest, recorded in the
  disk cache), then timed with that plan; the engine column then keeps the
  op's rules (plan_tuning="off").

The roofline is the bytes the call must move (every visible K/V row with its
scales, q, out) at the rate of a device-to-device copy measured in the same
process (torch's copy_ of 1 GiB: read + write bytes over time). Times are
medians of CUDA-event timings after warm-up, the timed calls queued behind a
sleep kernel (GPU time, not Python's time to issue a call); q, K/V and the scales are random
(never zeros), the output poisoned with NaN and checked finite after the run.

The grid: one-axis sweeps around the base point (bf16, 32/8 heads, D=128, block
16, B=64, ctx 4096, uniform lengths, bf16 cache) over head sizes 64/96/128/192/
256, GQA ratios 1/4/8/16 and MQA, block sizes 16/32/64, batches 1-256 (odd ones
included), contexts 64-131072 uniform and skewed, f32/f16/bf16 and every cache
format (the per-token-head ones also with their scales in tensors of their
own, vLLM's layout: "format:separate"); then --random points drawn (seeded) from the whole product. Points past
--max-gib of K/V are skipped. The report: every point, the distribution of % of
copy for each call, the 10 worst points, and the points with >= 64 MB of K/V
below 90%.

    ATTNJIT_LIBRARY=build/lib/libattnjit.so python3 bench/decode_grid.py [--random 40] [--quick] [--tuned]"""

import argparse
import itertools
import os
import random
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

BASE = dict(dtype="bf16", head_size=128, query_heads=32, kv_heads=8, block=16, batch=64, context=4096,
            lengths="uniform", cache="auto")
AXES = dict(
    head_size=[64, 96, 128, 192, 256],
    heads=[(8, 8), (32, 8), (64, 8), (128, 8), (32, 1)],  # GQA 1, 4, 8, 16 and MQA
    block=[16, 32, 64],
    batch=[1, 3, 7, 32, 64, 129, 256],
    context=[64, 512, 4096, 32768, 131072],
    lengths=["uniform", "skewed"],
    dtype=["f32", "f16", "bf16"],
    # ":separate": the per-token-head scales in tensors of their own (vLLM's layout).
    cache=["auto", "fp8_e4m3", "int8_per_token_head", "fp8_per_token_head", "int4_per_token_head",
           "int8_per_token_head:separate", "fp8_per_token_head:separate", "int4_per_token_head:separate"],
)


def points(random_count, quick):
    seen, out = set(), []

    def add(point):
        key = tuple(sorted(point.items()))
        if key not in seen:
            seen.add(key)
            out.append(point)

    add(dict(BASE))
    for axis, values in AXES.items():
        if quick and axis == "lengths":
            continue
        for value in values:
            point = dict(BASE)
            if axis == "heads":
                point["query_heads"], point["kv_heads"] = value
            else:
                point[axis] = value
            add(point)
    rng = random.Random(1234)
    product = list(itertools.product(*AXES.values()))
    for combo in rng.sample(product, min(random_count, len(product))):
        point = dict(zip(AXES.keys(), combo))
        point["query_heads"], point["kv_heads"] = point.pop("heads")
        add(point)
    return out


def cache_format(point):
    """(kv_cache_format, whether the scales are separate) of a point's cache."""
    name, _, layout = point["cache"].partition(":")
    return name, layout == "separate"


def row_bytes(point, element_bytes):
    """(bytes of a stored K or V row, its scale included, elements of its tensor row)."""
    d = point["head_size"]
    cache, separate = cache_format(point)
    if cache == "auto":
        return d * element_bytes, d
    if cache == "fp8_e4m3":
        return d, d
    values = d // 2 if cache == "int4_per_token_head" else d
    return values + 4, values if separate else values + 4


def lengths_of(point, rng):
    b, ctx = point["batch"], point["context"]
    if point["lengths"] == "uniform":
        return [ctx] * b
    # Skewed: mean about ctx, from 1 to 2 ctx, a few long ones.
    return [max(1, min(2 * ctx, int(rng.expovariate(1.0 / ctx)))) for _ in range(b)]


def median_ms(torch, call, iterations):
    """The median GPU time of `call`. The timed calls queue behind a sleep
    kernel, so the GPU runs them back to back: a short kernel's time is its
    own, not the host's time to issue it (tens of microseconds through Python)."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    start = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    end = [torch.cuda.Event(enable_timing=True) for _ in range(iterations)]
    torch.cuda._sleep(100_000_000)
    for s, e in zip(start, end):
        s.record()
        call()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(start, end))


def copy_rate(torch):
    src = torch.randn(256 * 1024 * 1024, device="cuda")  # 1 GiB
    dst = torch.empty_like(src)
    ms = median_ms(torch, lambda: dst.copy_(src), 20)
    return 2 * src.numel() * 4 / (ms * 1e-3)


def torch_dtype(torch, name):
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[name]


def fill_cache(torch, point, num_blocks, width):
    """A random cache of the point's format: values for auto, finite fp8 bytes,
    int8/int4 bytes, and per-row float32 scales of 0.01 for the per-token-head
    formats (inline, or a [num_blocks, 2, block, Hkv] tensor, returned second)."""
    shape = (num_blocks, 2, point["block"], point["kv_heads"], width)
    name, separate = cache_format(point)
    if name == "auto":
        return torch.randn(shape, device="cuda", dtype=torch_dtype(torch, point["dtype"])), None
    cache = torch.randint(0, 256, shape, device="cuda", dtype=torch.uint8)
    if name in ("fp8_e4m3", "fp8_per_token_head"):
        cache &= 0xF7  # clears the exponent's low bit: never S.1111.111 (NaN)
    if separate:
        return cache, torch.full(shape[:-1], 0.01, device="cuda")
    if name.endswith("per_token_head"):
        scales = torch.full(shape[:-1] + (1,), 0.01, device="cuda").view(torch.uint8)
        cache[..., -4:] = scales
    return cache, None


def run_point(torch, attnjit, point, copy_bytes_per_s, max_gib, rng, tuned=False):
    dtype = torch_dtype(torch, point["dtype"])
    element = torch.tensor([], dtype=dtype).element_size()
    if point["cache"] != "auto" and point["dtype"] == "f32":
        return None  # quantized caches decode into f16/bf16 queries in vLLM's backends
    if cache_format(point)[0] == "int4_per_token_head" and point["head_size"] % 2:
        return None
    stored, width = row_bytes(point, element)
    seq_lens_host = lengths_of(point, rng)
    block = point["block"]
    blocks_per_seq = [(n + block - 1) // block for n in seq_lens_host]
    num_blocks = sum(blocks_per_seq)
    kv_bytes = 2 * sum(seq_lens_host) * point["kv_heads"] * stored
    if num_blocks * 2 * block * point["kv_heads"] * stored > max_gib * 2**30:
        return None
    cache, scales = fill_cache(torch, point, num_blocks, width)
    tables = torch.zeros(point["batch"], max(blocks_per_seq), dtype=torch.int32)
    order = torch.randperm(num_blocks, dtype=torch.int32)
    at = 0
    for b, n in enumerate(blocks_per_seq):
        tables[b, :n] = order[at:at + n]
        at += n
    tables = tables.cuda()
    seq_lens = torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda")
    cu = torch.arange(point["batch"] + 1, dtype=torch.int32, device="cuda")
    q = torch.randn(point["batch"], point["query_heads"], point["head_size"], device="cuda", dtype=dtype)
    out = torch.full_like(q, float("nan"))
    fmt = dict(kv_cache_format=cache_format(point)[0])
    if scales is not None:
        fmt.update(k_scale_cache=scales[:, 0], v_scale_cache=scales[:, 1])
    if point["cache"] == "fp8_e4m3":
        fmt.update(k_scale=torch.tensor([0.01], device="cuda"), v_scale=torch.tensor([0.01], device="cuda"))
    workspace_bytes = attnjit.ops.paged_attention_workspace_bytes(point["batch"], point["query_heads"],
                                                                  point["head_size"], max(seq_lens_host))
    workspace = torch.empty(max(workspace_bytes, 1), dtype=torch.uint8, device="cuda")
    def engine(**extra):
        attnjit.ops.paged_attention(q, cache, out, tables, seq_lens, cu, 1, workspace=workspace,
                                    max_seq_len=max(seq_lens_host), min_seq_len=min(seq_lens_host),
                                    **dict(fmt, **extra))

    calls = {
        "plain": lambda: attnjit.ops.paged_attention(q, cache, out, tables, seq_lens, cu, 1, **fmt),
        # With --tuned the engine column keeps the op's rules; the tuned one takes the record.
        "engine": (lambda: engine(plan_tuning="off")) if tuned else engine,
    }
    if tuned:
        engine(tune=True)
        calls["tuned"] = lambda: engine(plan_tuning="recorded")
    moved = kv_bytes + 2 * q.numel() * element
    result = dict(point=point, kv_mb=kv_bytes / 1e6)
    for name, call in calls.items():
        out.fill_(float("nan"))
        iterations = 10 if moved > 2e9 else 30
        ms = median_ms(torch, call, iterations)
        if not torch.isfinite(out).all():
            raise RuntimeError("non-finite output at %s (%s call)" % (describe(point), name))
        result[name] = (ms, 100.0 * moved / (ms * 1e-3) / copy_bytes_per_s)
    del cache, scales, workspace
    return result


def describe(point):
    return "%s %d/%d D=%d bs=%d B=%d ctx=%d %s %s" % (
        point["dtype"], point["query_heads"], point["kv_heads"], point["head_size"], point["block"],
        point["batch"], point["context"], point["lengths"], point["cache"])


def distribution(values):
    values = sorted(values)
    pick = lambda f: values[min(len(values) - 1, int(f * (len(values) - 1) + 0.5))]
    return "min %.0f%%  p10 %.0f%%  median %.0f%%  p90 %.0f%%  max %.0f%%" % (
        values[0], pick(0.1), pick(0.5), pick(0.9), values[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--random", type=int, default=40, help="random points from the whole grid (default 40)")
    parser.add_argument("--quick", action="store_true", help="the one-axis sweeps without skewed lengths")
    parser.add_argument("--max-gib", type=float, default=16, help="skip points whose cache exceeds this many GiB")
    parser.add_argument("--tuned", action="store_true",
                        help="also time the engine call with the plan tuned on each point (recorded in the disk cache)")
    args = parser.parse_args()
    import torch
    import attnjit

    rate = copy_rate(torch)
    print("device-to-device copy: %.0f GB/s" % (rate / 1e9))
    names = ("plain", "engine", "tuned") if args.tuned else ("plain", "engine")
    print("%-62s %9s" % ("point", "K/V MB") + "".join(" %10s %7s" % (name + " ms", "copy%") for name in names))
    rng = random.Random(7)
    results = []
    for point in points(args.random, args.quick):
        result = run_point(torch, attnjit, point, rate, args.max_gib, rng, args.tuned)
        if result is None:
            continue
        results.append(result)
        print("%-62s %9.1f" % (describe(point), result["kv_mb"]) +
              "".join(" %10.4f %6.0f%%" % result[name] for name in names), flush=True)
        torch.cuda.empty_cache()
    for name in names:
        print("\n%s call, %% of copy over %d points: %s" % (name, len(results),
                                                          distribution([r[name][1] for r in results])))
        large = [r for r in results if r["kv_mb"] >= 64]
        if large:
            print("  points with >= 64 MB of K/V (%d): %s" % (len(large), distribution([r[name][1] for r in large])))
        print("  worst 10:")
        for r in sorted(results, key=lambda r: r[name][1])[:10]:
            print("    %-62s %8.1f MB %9.4f ms %5.0f%%" % (describe(r["point"]), r["kv_mb"], r[name][0], r[name][1]))
        below = [r for r in results if r["kv_mb"] >= 64 and r[name][1] < 90]
        print("  >= 64 MB and below 90%%: %d of %d" % (len(below), len([r for r in results if r["kv_mb"] >= 64])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
