"""vLLM's tests/kernels/attention/test_triton_decode_attention.py
(decode_attention_fwd, the Triton decode kernel with separate K and V head
sizes) against attnjit.ops.paged_attention: batches of 3 and 5 decodes over
1025 or 1027 cached tokens, 32 query heads over 32 or 8 KV heads, QK head
sizes 128, 192 and 576 with V head sizes 128 and 512, pages of 1 and 16 tokens
picked at random (repeats allowed) from a 16384-token cache. vLLM compares its
page-size-1 run with its paged run; here each run is compared with a float64
reference at vLLM's bf16 attention tolerance (atol 1.5e-2, rtol 1e-2). K and V
live in vLLM's packed DiffKV cache [pages, page, Hkv, Dqk + Dv]."""

import itertools

from conformance import assert_close
from unified_attention import reference

CACHE_SIZE = 16384


def cases(torch):
    for batch, length, kv_heads, d_qk, d_v, page in itertools.product(
            [3, 5], [1027, 1025], [32, 8], [128, 192, 576], [128, 512], [1, 16]):
        name = "B=%d L=%d Hkv=%d Dqk=%d Dv=%d page=%d" % (batch, length, kv_heads, d_qk, d_v, page)
        yield name, dict(batch=batch, length=length, kv_heads=kv_heads, d_qk=d_qk, d_v=d_v, page=page)


def run(torch, attnjit, batch, length, kv_heads, d_qk, d_v, page):
    dtype, heads = torch.bfloat16, 32
    scale = d_qk ** -0.5
    pages = CACHE_SIZE // page
    kv = torch.randn(pages, page, kv_heads, d_qk + d_v, dtype=dtype, device="cuda")
    pages_per_seq = (length + page - 1) // page
    block_tables = torch.randint(0, pages, (batch, pages_per_seq), dtype=torch.int32, device="cuda")
    q = torch.randn(batch, heads, d_qk, dtype=dtype, device="cuda")
    out = torch.full((batch, heads, d_v), float("nan"), dtype=dtype, device="cuda")
    seq_lens = torch.full((batch,), length, dtype=torch.int32, device="cuda")
    cu = torch.arange(batch + 1, dtype=torch.int32, device="cuda")
    attnjit.ops.paged_attention(q, kv, out, block_tables, seq_lens, cu, 1, scale=scale, max_seq_len=length)
    torch.cuda.synchronize()
    expected = reference(torch, q, kv[..., :d_qk], kv[..., d_qk:], [1] * batch, [length] * batch, block_tables,
                         scale, None, None)
    assert_close(torch, out.double(), expected.to(dtype).double(), 1.5e-2, 1e-2, "output")
