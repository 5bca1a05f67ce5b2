"""vLLM's tests/kernels/attention/test_triton_unified_attention.py against
attnjit.ops.paged_attention:

- test_triton_unified_attn: mixed prefill/decode batches [(1, 1328), (5, 18),
  (129, 463)] and decode batches [(1, 523), (1, 37), (1, 2011)] (query length,
  keys), heads (4, 4), (8, 2), (5, 1), head sizes 128 and 256, block size 16,
  sliding window none / 64 / 128 / 256, softcap none / 50, 32768 and 2048 cache
  blocks, bf16 queries or fp8 queries over an fp8 cache (q, k, v scales 0.75,
  0.5, 0.25), decode split off (vLLM's seq_threshold_3D 0) or allowed (8);
- test_triton_unified_attn_bf16_query_fp8_kv: bf16 queries over an fp8 cache;
- the NVFP4 tests: unsupported (Blackwell's FP4 cache, outside the Triton
  backends attnjit replaces).

vLLM's K and V caches are kv_cache.unbind(1) of one [num_blocks, 2, block_size,
Hkv, D] tensor in its backend; here too. Random block tables (blocks may repeat,
as vLLM's). The reference is vLLM's (causal, window, softcap), computed in
float64 on the unquantized inputs; tolerances are vLLM's: atol 1.5e-2 / rtol
1e-2, and 0.15 / 0.15 with fp8."""

import itertools

from conformance import Unsupported, assert_close, split_options

SEQ_LENS = [[(1, 1328), (5, 18), (129, 463)], [(1, 523), (1, 37), (1, 2011)]]
NUM_HEADS = [(4, 4), (8, 2), (5, 1)]
HEAD_SIZES = [128, 256]
NUM_BLOCKS = [32768, 2048]
NVFP4_HEAD_SIZES = [64, 128, 192, 256, 320, 384, 448, 512]


def cases(torch):
    for seq_lens, heads, head_size, window, softcap, num_blocks, fp8, threshold in itertools.product(
            SEQ_LENS, NUM_HEADS, HEAD_SIZES, [None, 64, 128, 256], [None, 50.0], NUM_BLOCKS, [False, True], [0, 8]):
        name = "unified seqs=%s heads=%s D=%d window=%s softcap=%s blocks=%d fp8=%d 3d=%d" % (
            seq_lens, heads, head_size, window, softcap, num_blocks, fp8, threshold)
        yield name, dict(test="unified", seq_lens=seq_lens, heads=heads, head_size=head_size, window=window,
                         softcap=softcap, num_blocks=num_blocks, fp8_query=fp8, fp8_cache=fp8, threshold=threshold)
    for seq_lens, heads, head_size, num_blocks, threshold in itertools.product(
            SEQ_LENS, NUM_HEADS, HEAD_SIZES, NUM_BLOCKS, [0, 8]):
        name = "bf16 q fp8 kv seqs=%s heads=%s D=%d blocks=%d 3d=%d" % (seq_lens, heads, head_size, num_blocks,
                                                                        threshold)
        yield name, dict(test="bf16_query_fp8_kv", seq_lens=seq_lens, heads=heads, head_size=head_size, window=None,
                         softcap=None, num_blocks=num_blocks, fp8_query=False, fp8_cache=True, threshold=threshold)
    for head_size, threshold in itertools.product(NVFP4_HEAD_SIZES, [0, 8]):
        yield "nvfp4 kv D=%d 3d=%d" % (head_size, threshold), dict(test="nvfp4")


def reference(torch, query, key_cache, value_cache, query_lens, kv_lens, block_tables, scale, window, softcap,
              causal=None):
    """vLLM's ref_paged_attn in float64: causal with the queries at the end of
    their sequence (or, where causal[i] is False, every key visible), an
    optional sliding window and softcap, GQA by repetition."""
    _, block_size, num_kv_heads, head_size = key_cache.shape
    outputs, start = [], 0
    for i, (query_len, kv_len) in enumerate(zip(query_lens, kv_lens)):
        q = query[start:start + query_len].double() * scale
        blocks = block_tables[i, :(kv_len + block_size - 1) // block_size].long()
        k = key_cache[blocks].reshape(-1, num_kv_heads, head_size)[:kv_len].double()
        v = value_cache[blocks].reshape(-1, num_kv_heads, value_cache.shape[-1])[:kv_len].double()
        if q.shape[1] != k.shape[1]:
            k = torch.repeat_interleave(k, q.shape[1] // k.shape[1], dim=1)
            v = torch.repeat_interleave(v, q.shape[1] // v.shape[1], dim=1)
        scores = torch.einsum("qhd,khd->hqk", q, k)
        ones = torch.ones(query_len, kv_len, device=query.device)
        if causal is None or causal[i]:
            mask = torch.triu(ones, diagonal=kv_len - query_len + 1).bool()
        else:
            mask = torch.zeros(query_len, kv_len, device=query.device).bool()
        if window is not None:
            mask |= torch.triu(ones, diagonal=kv_len - (query_len + window) + 1).bool().logical_not()
        if softcap is not None and softcap > 0:
            scores = softcap * torch.tanh(scores / softcap)
        scores.masked_fill_(mask, float("-inf"))
        outputs.append(torch.einsum("hqk,khd->qhd", torch.softmax(scores, dim=-1), v))
        start += query_len
    return torch.cat(outputs, dim=0)


def run(torch, attnjit, test, seq_lens=None, heads=None, head_size=None, window=None, softcap=None, num_blocks=None,
        fp8_query=False, fp8_cache=False, threshold=0):
    if test == "nvfp4":
        raise Unsupported("nvfp4 KV cache (Blackwell's FP4 format; not a Triton-backend format)")
    dtype = torch.bfloat16
    query_lens = [n for n, _ in seq_lens]
    kv_lens = [k for _, k in seq_lens]
    num_query_heads, num_kv_heads = heads
    block_size = 16
    scale = head_size ** -0.5
    query = torch.randn(sum(query_lens), num_query_heads, head_size, dtype=dtype, device="cuda")
    kv = torch.randn(num_blocks, 2, block_size, num_kv_heads, head_size, dtype=dtype, device="cuda")
    key_cache, value_cache = kv.unbind(1)
    cu = torch.tensor([0] + query_lens, dtype=torch.int32).cumsum(0, dtype=torch.int32).cuda()
    seq_lens_t = torch.tensor(kv_lens, dtype=torch.int32, device="cuda")
    max_blocks = (max(kv_lens) + block_size - 1) // block_size
    block_tables = torch.randint(0, num_blocks, (len(seq_lens), max_blocks), dtype=torch.int32, device="cuda")
    output = torch.full_like(query, float("nan"))
    options = {}
    q_in, kv_in = query, kv
    if fp8_cache:
        k_scale = torch.tensor([0.5], device="cuda")
        v_scale = torch.tensor([0.25], device="cuda")
        kv_in = torch.empty(kv.shape, dtype=torch.uint8, device="cuda")
        kv_in[:, 0] = (key_cache / 0.5).to(torch.float8_e4m3fn).view(torch.uint8)
        kv_in[:, 1] = (value_cache / 0.25).to(torch.float8_e4m3fn).view(torch.uint8)
        options.update(kv_cache_format="fp8_e4m3", k_scale=k_scale, v_scale=v_scale)
    if fp8_query:
        q_in = (query / 0.75).to(torch.float8_e4m3fn)
        options.update(q_scale=torch.tensor([0.75], device="cuda"))
    if window is not None:
        options.update(sliding_window=window)
    if softcap is not None:
        options.update(softcap=softcap)
    options.update(split_options(threshold > 0, kv_lens))
    attnjit.ops.paged_attention(q_in, kv_in, output, block_tables, seq_lens_t, cu, max(query_lens), scale=scale,
                                **options)
    torch.cuda.synchronize()
    expected = reference(torch, query, key_cache, value_cache, query_lens, kv_lens, block_tables, scale, window,
                         softcap)
    atol, rtol = (1.5e-1, 1.5e-1) if (fp8_query or fp8_cache) else (1.5e-2, 1e-2)
    assert_close(torch, output.double(), expected.to(dtype).double(), atol, rtol, "output")
