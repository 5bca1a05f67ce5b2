#!/usr/bin/env python3
"""attnjit's paged attention next to torch's scaled_dot_product_attention
(flash and cuDNN backends) on the same inputs.

For each case the script draws Q, K and V once, packs K/V into a paged cache
(vLLM layout, blocks in a random order, through block tables) for attnjit, and
hands the same K/V as dense [B, H, L, D] tensors to SDPA. It checks that every
implementation agrees with a float32 reference (max abs error) and prints CUDA-
event medians side by side, with the bandwidth (decode: KV bytes / time) or
FLOP rate (prefill) each reaches.

    ATTNJIT_LIBRARY=build/lib/libattnjit.so python3 bench/compare_torch.py
    python3 bench/compare_torch.py --cases decode --iterations 50

Needs a CUDA GPU, torch with CUDA (2.5+ for enable_gqa; older versions expand
K/V heads for SDPA, noted in the output) and libattnjit.so (ATTNJIT_LIBRARY, or
a build folder of this checkout)."""

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mla_op import gemm_rate  # noqa: E402  the cuBLAS bf16 GEMM rate, measured as bench/mla_op.py does


class Case:
    """A uniform batch: `batch` sequences of `context` cached tokens plus
    `query` new ones (decode: query 1; prefill: context 0), causal (a query
    sees the keys up to its own position) or bidirectional."""

    def __init__(self, name, batch, query, context, heads_q=32, heads_kv=8, head_size=128, block_size=16,
                 causal=True):
        self.name, self.batch, self.query, self.context = name, batch, query, context
        self.heads_q, self.heads_kv, self.head_size, self.block_size = heads_q, heads_kv, head_size, block_size
        self.causal = causal

    @property
    def kv_len(self):
        return self.context + self.query

    def bytes_moved(self, element_bytes):
        """Minimum bytes: Q and O once, K and V of every sequence once."""
        qo = 2 * self.batch * self.query * self.heads_q * self.head_size
        kv = 2 * self.batch * self.kv_len * self.heads_kv * self.head_size
        return (qo + kv) * element_bytes

    def flops(self):
        """QK^T and PV, 2 FLOPs per multiply-add; causal prefill does about half."""
        pairs = self.query * self.kv_len
        if self.causal and self.context == 0:
            pairs = self.query * (self.query + 1) / 2
        return 4 * self.batch * self.heads_q * self.head_size * pairs


CASES = {
    "decode": Case("decode B=64 ctx 4096", batch=64, query=1, context=4095),
    "prefill": Case("prefill causal 8 x 2048", batch=8, query=2048, context=0),
    "prefill-noncausal": Case("prefill bidir 8 x 2048", batch=8, query=2048, context=0, causal=False),
    "prefill-d64": Case("prefill causal D=64", batch=8, query=2048, context=0, head_size=64),
    "prefill-d256": Case("prefill causal D=256", batch=8, query=2048, context=0, head_size=256),
    "prefill-gqa1": Case("prefill causal 32/32", batch=8, query=2048, context=0, heads_kv=32),
    "prefill-gqa16": Case("prefill causal 32/2", batch=8, query=2048, context=0, heads_kv=2),
}
PREFILL_CASES = [key for key, case in CASES.items() if case.query > 1]



def median_ms(torch, fn, warmup, iterations, repeat):
    """Median over `iterations` samples of the GPU time per call; a sample is
    `repeat` back-to-back calls between two events, so the host's per-call cost
    (Python, argument checks, ctypes) overlaps the previous call's kernel
    instead of showing up as idle GPU time."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iterations):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeat):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / repeat)
    return statistics.median(times)


def make_inputs(torch, case, dtype, seed):
    generator = torch.Generator(device="cuda").manual_seed(seed)
    B, L, S, D = case.batch, case.query, case.kv_len, case.head_size
    q = torch.randn(B, L, case.heads_q, D, device="cuda", dtype=dtype, generator=generator)
    k = torch.randn(B, S, case.heads_kv, D, device="cuda", dtype=dtype, generator=generator)
    v = torch.randn(B, S, case.heads_kv, D, device="cuda", dtype=dtype, generator=generator)

    # The paged cache: each sequence's S tokens in ceil(S / block_size) blocks,
    # scattered over the cache in a random order recorded in the block tables.
    bs = case.block_size
    blocks_per_seq = (S + bs - 1) // bs
    padded = blocks_per_seq * bs
    total_blocks = B * blocks_per_seq + 7  # a few blocks no sequence owns
    order = torch.randperm(total_blocks, device="cuda", generator=generator)[: B * blocks_per_seq]
    kv_cache = torch.zeros(total_blocks, 2, bs, case.heads_kv, D, device="cuda", dtype=dtype)
    for index, dense in enumerate((k, v)):
        padded_dense = torch.zeros(B, padded, case.heads_kv, D, device="cuda", dtype=dtype)
        padded_dense[:, :S] = dense
        kv_cache[order, index] = padded_dense.reshape(B * blocks_per_seq, bs, case.heads_kv, D)
    block_tables = order.reshape(B, blocks_per_seq).to(torch.int32).contiguous()
    seq_lens = torch.full((B,), S, device="cuda", dtype=torch.int32)
    cu_seqlens_q = torch.arange(0, (B + 1) * L, L, device="cuda", dtype=torch.int32)
    return dict(q=q, k=k, v=v, kv_cache=kv_cache, block_tables=block_tables, seq_lens=seq_lens,
                cu_seqlens_q=cu_seqlens_q)


def reference(torch, case, inputs, scale):
    """float32 attention with bottom-right causal alignment (a query at position
    p sees keys j <= p, positions counted from the sequence start), one
    sequence at a time to bound memory."""
    F = torch.nn.functional
    group = case.heads_q // case.heads_kv
    out = torch.empty(case.batch, case.query, case.heads_q, case.head_size, device="cuda", dtype=torch.float32)
    positions = torch.arange(case.context, case.kv_len, device="cuda").unsqueeze(1)
    keys = torch.arange(case.kv_len, device="cuda").unsqueeze(0)
    mask = keys <= positions if case.causal else None  # [L, S]
    for b in range(case.batch):
        q = inputs["q"][b].float().transpose(0, 1)  # [Hq, L, D]
        k = inputs["k"][b].float().transpose(0, 1).repeat_interleave(group, dim=0)
        v = inputs["v"][b].float().transpose(0, 1).repeat_interleave(group, dim=0)
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            out[b] = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale).transpose(0, 1)
    return out


def sdpa_runner(torch, case, inputs, scale, backend):
    """A callable running SDPA with one backend, or the reason it cannot."""
    F = torch.nn.functional
    from torch.nn.attention import sdpa_kernel

    q = inputs["q"].transpose(1, 2).contiguous()  # [B, Hq, L, D]
    k = inputs["k"].transpose(1, 2).contiguous()  # [B, Hkv, S, D]
    v = inputs["v"].transpose(1, 2).contiguous()
    # SDPA's is_causal aligns the mask top-left; it matches paged attention's
    # bottom-right alignment only when L == S (prefill without context). A
    # single decode query sees every key: no mask.
    causal = case.causal and case.query == case.kv_len
    if case.causal and case.query != 1 and not causal:
        return None, "SDPA has no bottom-right causal mask for chunked prefill"
    note = ""

    def run_gqa():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)

    group = case.heads_q // case.heads_kv
    k_expanded = v_expanded = None

    def run_expanded():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k_expanded, v_expanded, is_causal=causal, scale=scale)

    try:
        run_gqa()
        run = run_gqa
    except (RuntimeError, TypeError) as gqa_error:
        k_expanded = k.repeat_interleave(group, dim=1)
        v_expanded = v.repeat_interleave(group, dim=1)
        try:
            run_expanded()
        except RuntimeError as error:
            return None, "unavailable: %s" % str(error).splitlines()[0][:100]
        run = run_expanded
        note = "K/V heads expanded (%s)" % str(gqa_error).splitlines()[0][:60]

    def call():
        return run().transpose(1, 2)  # back to [B, L, Hq, D]

    return call, note


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="decode,prefill",
                        help="comma-separated: %s, or 'all-prefill'" % ", ".join(CASES))
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "f16"])
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=10, help="back-to-back calls per timed sample")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    try:
        import torch
    except ImportError:
        sys.exit("compare_torch: torch is not installed")
    if not torch.cuda.is_available():
        sys.exit("compare_torch: torch sees no CUDA device")
    import attnjit

    ok, reason = attnjit.driver_status()
    if not ok:
        sys.exit("compare_torch: attnjit sees no GPU: " + reason)
    from torch.nn.attention import SDPBackend

    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    element_bytes = 2
    device = torch.cuda.get_device_name()
    print("attnjit %s (%s), torch %s, %s, %s" % (attnjit.version(), attnjit.library_path, torch.__version__,
                                                device, args.dtype))
    print("medians of %d CUDA-event samples of %d back-to-back calls after %d warm-up calls; "
          "errors: max |x - float32 reference|" % (args.iterations, args.repeat, args.warmup))
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)]

    keys = []
    for key in [c.strip() for c in args.cases.split(",") if c.strip()]:
        if key != "all-prefill" and key not in CASES:
            sys.exit("compare_torch: unknown case %r (known: %s)" % (key, ", ".join(CASES)))
        keys += PREFILL_CASES if key == "all-prefill" else [key]
    gemm = None
    if any(CASES[key].query > 1 for key in keys):
        gemm = gemm_rate(torch)
        print("cuBLAS bf16 GEMM 8192^3: %.1f TFLOP/s (the prefill rows' %% of GEMM)" % (gemm / 1e12))
    rows = []
    for key in keys:
        case = CASES[key]
        scale = 1.0 / math.sqrt(case.head_size)
        inputs = make_inputs(torch, case, dtype, args.seed)
        expected = reference(torch, case, inputs, scale)

        q_packed = inputs["q"].reshape(case.batch * case.query, case.heads_q, case.head_size)
        out = torch.empty_like(q_packed)

        def run_attnjit():
            attnjit.ops.paged_attention(q_packed, inputs["kv_cache"], out, inputs["block_tables"],
                                        inputs["seq_lens"], inputs["cu_seqlens_q"], max_query_len=case.query,
                                        scale=scale, causal=case.causal, max_seq_len=case.context + case.query,
                                        min_seq_len=case.context + case.query)

        start = time.perf_counter()
        run_attnjit()
        torch.cuda.synchronize()
        first_call_ms = (time.perf_counter() - start) * 1e3
        error = (out.reshape_as(expected).float() - expected).abs().max().item()
        attnjit_ms = median_ms(torch, run_attnjit, args.warmup, args.iterations, args.repeat)
        results = [("attnjit", attnjit_ms, error, "first call (JIT or disk cache) %.0f ms" % first_call_ms)]

        for name, backend in backends:
            call, note = sdpa_runner(torch, case, inputs, scale, backend)
            if call is None:
                results.append(("sdpa-" + name, None, None, note))
                continue
            error = (call().float() - expected).abs().max().item()
            ms = median_ms(torch, call, args.warmup, args.iterations, args.repeat)
            results.append(("sdpa-" + name, ms, error, note))
        rows.append((case, results))
        del inputs, expected, out, q_packed
        torch.cuda.empty_cache()

    print()
    print("%-26s %-12s %10s %9s %9s %7s %10s %8s  %s" % ("case", "impl", "median ms", "TB/s", "TFLOP/s", "% GEMM",
                                                          "max err", "vs attnjit", "note"))
    for case, results in rows:
        attnjit_ms = results[0][1]
        for name, ms, error, note in results:
            if ms is None:
                print("%-26s %-12s %10s %9s %9s %7s %10s %8s  %s" % (case.name, name, "-", "-", "-", "-", "-", "-",
                                                                      note))
                continue
            tbs = case.bytes_moved(element_bytes) / (ms * 1e-3) / 1e12
            tflops = case.flops() / (ms * 1e-3) / 1e12
            share = "%6.0f%%" % (100 * tflops * 1e12 / gemm) if gemm and case.query > 1 else "      -"
            print("%-26s %-12s %10.3f %9.2f %9.1f %s %10.2e %7.2fx  %s" % (
                case.name, name, ms, tbs, tflops, share, error, ms / attnjit_ms, note))
    print("\n'vs attnjit' > 1 means attnjit is faster. Decode is bandwidth-bound (TB/s: compare with the GPU's "
          "copy bandwidth), prefill compute-bound (TFLOP/s).")


if __name__ == "__main__":
    main()
