"""vLLM's tests/kernels/attention/test_triton_unified_attention_diffkv.py (the
TRITON_ATTN_DIFFKV backend: QK and V head sizes differ, one packed cache
[num_blocks, block_size, Hkv, Dqk + Dv]) against attnjit.ops.paged_attention:

- test_triton_unified_attn_diffkv_vs_fa: mixed prefill/decode batches [(1, 1328),
  (5, 18), (129, 463)] and decode batches [(1, 523), (1, 37), (1, 2011)], heads
  (4, 4), (8, 2), (5, 1), head sizes 128/128 and 192/128, sliding window none /
  128, softcap none / 50, split-KV off (vLLM's seq_threshold_3D 0) or allowed
  (8); vLLM compares with FlashAttention 3, here with float64; atol = rtol = 2e-2;
- test_diffkv_spec3d_and_segments_vs_ref: speculative-decoding verify batches
  (4 or 8 query tokens per sequence) over [9000, 300] and [65, 9] keys, heads
  (8, 2) and (64, 1), 16 or 64 segments (vLLM skips windowed cases with 64),
  window none / 128, attention sinks or not, split-KV allowed;
- test_diffkv_prefill_tiles_vs_ref: a 256-token chunk after 2744 cached tokens,
  vLLM's prefill tile of 16 or 128 rows, window none / 128;
- test_diffkv_fp8_kv_vs_ref: a per-tensor fp8 e4m3 cache (scales 1.0 or amax /
  448, the cache drawn at 1.5 x randn), batches [9000, 300, qlen] for vLLM's five
  (qlen, window, sinks, split) cases and both of its dequantization modes (one
  path here: each mode runs the same call); the fp8 run's error against float64
  over the dequantized cache must stay within max(3 x the bf16-cache run's
  error against float64 over the bf16 cache, 1.5e-2).

vLLM's knobs that pick its own tilings and segment counts have no counterpart:
attnjit's op picks the tiling, and splits when the longest sequence is known
(max_seq_len) and the GPU would otherwise idle."""

import itertools

from conformance import assert_close, split_options

NUM_HEADS = [(4, 4), (8, 2), (5, 1)]
HEAD_SIZES = [(128, 128), (192, 128)]
SEQ_LENS = [[(1, 1328), (5, 18), (129, 463)], [(1, 523), (1, 37), (1, 2011)]]
SPEC_NUM_HEADS = [(8, 2), (64, 1)]
SPEC_KV_LENS = [[9000, 300], [65, 9]]
FP8_CASES = [(1, None, False, 64), (8, None, False, 64), (256, None, False, 0), (8, 128, True, 64),
             (128, 128, True, 0)]
FP8_MAX = 448.0


def cases(torch):
    for seq_lens, heads, sizes, window, softcap, threshold in itertools.product(
            SEQ_LENS, NUM_HEADS, HEAD_SIZES, [None, 128], [None, 50.0], [0, 8]):
        name = "vs_fa seqs=%s heads=%s D=%s window=%s softcap=%s 3d=%d" % (seq_lens, heads, sizes, window, softcap,
                                                                          threshold)
        yield name, dict(test="vs_fa", seq_lens=seq_lens, heads=heads, sizes=sizes, window=window, softcap=softcap,
                         split=threshold > 0, num_blocks=2048)
    for heads, qlen, kv_lens, segments, window, sinks in itertools.product(
            SPEC_NUM_HEADS, [4, 8], SPEC_KV_LENS, [16, 64], [None, 128], [False, True]):
        if window is not None and segments != 16:
            continue  # vLLM skips these: its windowed path ignores the segment count
        name = "spec3d heads=%s qlen=%d kv=%s segments=%d window=%s sinks=%d" % (heads, qlen, kv_lens, segments,
                                                                                 window, sinks)
        yield name, dict(test="spec3d", seq_lens=[(qlen, n) for n in kv_lens], heads=heads, sizes=(192, 128),
                         window=window, sinks=sinks, split=True, num_blocks=4096)
    for heads, block_m, window in itertools.product(SPEC_NUM_HEADS, [16, 128], [None, 128]):
        name = "prefill_tiles heads=%s block_m=%d window=%s" % (heads, block_m, window)
        yield name, dict(test="prefill_tiles", seq_lens=[(256, 3000)], heads=heads, sizes=(192, 128), window=window,
                         split=False, num_blocks=4096)
    for heads, mode, (qlen, window, sinks, threshold), scale_mode in itertools.product(
            SPEC_NUM_HEADS, ["lut", "native"], FP8_CASES, ["1.0", "amax"]):
        name = "fp8 heads=%s dequant=%s qlen=%d window=%s sinks=%d 3d=%d scale=%s" % (
            heads, mode, qlen, window, sinks, threshold, scale_mode)
        yield name, dict(test="fp8", seq_lens=[(qlen, n) for n in (9000, 300, qlen)], heads=heads, sizes=(192, 128),
                         window=window, sinks=sinks, split=threshold > 0, num_blocks=4096, amax=scale_mode == "amax")


def reference(torch, query, kv, d_qk, query_lens, kv_lens, block_tables, scale, window, softcap, sinks):
    """Causal attention in float64 over the packed cache, queries at the end of
    their sequence; a window of `window` keys ending at the query; softcap on
    the scaled scores; a sink joins each row's softmax as a key with score
    sinks[h] and a zero value (vLLM's reference)."""
    _, block_size, num_kv_heads, _ = kv.shape
    outputs, start = [], 0
    for i, (query_len, kv_len) in enumerate(zip(query_lens, kv_lens)):
        q = query[start:start + query_len].double()
        blocks = block_tables[i, :(kv_len + block_size - 1) // block_size].long()
        rows = kv[blocks].reshape(-1, num_kv_heads, kv.shape[-1])[:kv_len].double()
        k, v = rows[..., :d_qk], rows[..., d_qk:]
        group = q.shape[1] // num_kv_heads
        k = torch.repeat_interleave(k, group, dim=1)
        v = torch.repeat_interleave(v, group, dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k) * scale
        if softcap:
            scores = softcap * torch.tanh(scores / softcap)
        position = torch.arange(kv_len - query_len, kv_len, device=q.device)[:, None]
        key = torch.arange(kv_len, device=q.device)[None, :]
        visible = key <= position
        if window is not None:
            visible &= key > position - window
        scores = scores.masked_fill(~visible[None], float("-inf"))
        if sinks is not None:
            sink = sinks.double()[:, None, None].expand(q.shape[1], query_len, 1)
            probabilities = torch.softmax(torch.cat([scores, sink], dim=-1), dim=-1)[..., :-1]
        else:
            probabilities = torch.softmax(scores, dim=-1)
        outputs.append(torch.einsum("hqk,khd->qhd", probabilities, v))
        start += query_len
    return torch.cat(outputs, dim=0)


def attend(torch, attnjit, query, cache, d_v, block_tables, query_lens, kv_lens, scale, window, softcap, sinks,
           split, **options):
    cu = torch.tensor([0] + query_lens, dtype=torch.int32).cumsum(0, dtype=torch.int32).cuda()
    seq_lens = torch.tensor(kv_lens, dtype=torch.int32, device="cuda")
    out = torch.full((query.shape[0], query.shape[1], d_v), float("nan"), dtype=query.dtype, device="cuda")
    if window is not None:
        options.update(sliding_window=window)
    if softcap:
        options.update(softcap=softcap)
    if sinks is not None:
        options.update(sinks=sinks)
    options.update(split_options(split, kv_lens))
    attnjit.ops.paged_attention(query, cache, out, block_tables, seq_lens, cu, max(query_lens), scale=scale,
                                **options)
    torch.cuda.synchronize()
    return out


def run(torch, attnjit, test, seq_lens, heads, sizes, window=None, softcap=None, sinks=False, split=False,
        num_blocks=2048, amax=False):
    dtype, block_size = torch.bfloat16, 16
    d_qk, d_v = sizes
    num_query_heads, num_kv_heads = heads
    query_lens = [n for n, _ in seq_lens]
    kv_lens = [k for _, k in seq_lens]
    scale = d_qk ** -0.5
    query = torch.randn(sum(query_lens), num_query_heads, d_qk, dtype=dtype, device="cuda")
    kv = torch.randn(num_blocks, block_size, num_kv_heads, d_qk + d_v, dtype=dtype, device="cuda")
    if test == "fp8":
        kv = kv * 1.5
    max_blocks = (max(kv_lens) + block_size - 1) // block_size
    block_tables = torch.randint(0, num_blocks, (len(seq_lens), max_blocks), dtype=torch.int32, device="cuda")
    sink_logits = torch.randn(num_query_heads, dtype=torch.float32, device="cuda") if sinks else None
    common = (block_tables, query_lens, kv_lens, scale, window, softcap, sink_logits, split)
    out = attend(torch, attnjit, query, kv, d_v, *common)
    expected = reference(torch, query, kv, d_qk, query_lens, kv_lens, block_tables, scale, window, softcap,
                         sink_logits)
    if test != "fp8":
        assert not torch.isnan(out).any(), "NaN in the output"
        assert_close(torch, out.double(), expected.to(dtype).double(), 2e-2, 2e-2, "output")
        return
    if amax:
        k_scale = kv[..., :d_qk].abs().max().item() / FP8_MAX
        v_scale = kv[..., d_qk:].abs().max().item() / FP8_MAX
    else:
        k_scale = v_scale = 1.0
    k8 = (kv[..., :d_qk].float() / k_scale).to(torch.float8_e4m3fn)
    v8 = (kv[..., d_qk:].float() / v_scale).to(torch.float8_e4m3fn)
    cache8 = torch.cat([k8.view(torch.uint8), v8.view(torch.uint8)], dim=-1)
    dequantized = torch.cat([k8.double() * k_scale, v8.double() * v_scale], dim=-1)
    out8 = attend(torch, attnjit, query, cache8, d_v, *common, kv_cache_format="fp8_e4m3",
                  k_scale=torch.tensor([k_scale], dtype=torch.float32, device="cuda"),
                  v_scale=torch.tensor([v_scale], dtype=torch.float32, device="cuda"))
    expected8 = reference(torch, query, dequantized, d_qk, query_lens, kv_lens, block_tables, scale, window, softcap,
                          sink_logits)
    assert not torch.isnan(out8).any(), "NaN in the fp8-cache output"
    base_error = (out.double() - expected).abs().max().item()
    error = (out8.double() - expected8).abs().max().item()
    budget = max(3 * base_error, 1.5e-2)
    assert error <= budget, "fp8 cache: error %.4f against float64 over the dequantized cache exceeds %.4f" % (
        error, budget)
