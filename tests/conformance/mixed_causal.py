"""vLLM's tests/kernels/attention/test_mixed_causal_attn.py against
attnjit.ops.paged_attention with causal_flags (a causal or bidirectional mask
per sequence, DiffusionGemma's batches): test_triton_mixed_causal's batch
[(1, 128), (5, 64), (1, 256)], the three per-sequence patterns, heads (4, 4)
and (8, 2), D=128, block 16, bf16, each sequence in its own run of blocks;
vLLM's tolerance 1e-2. The NVFP4 variant (test_triton_nvfp4_mixed_causal) is
unsupported: Blackwell's FP4 cache, outside the Triton backends."""

import itertools

from conformance import Unsupported, assert_close
from unified_attention import reference

PATTERNS = [[True, False, True], [False, True, False], [True, True, False]]
NVFP4_CASES = 8 * 3 * 2  # its parametrization: 8 batches x 3 head sizes x 2 KV head counts


def cases(torch):
    for pattern, heads in itertools.product(PATTERNS, [(4, 4), (8, 2)]):
        yield "causal=%s heads=%s" % (pattern, heads), dict(pattern=pattern, heads=heads)
    for index in range(NVFP4_CASES):
        yield "nvfp4 mixed causal #%d" % index, dict(pattern=None, heads=None)


def run(torch, attnjit, pattern, heads):
    if pattern is None:
        raise Unsupported("nvfp4 KV cache (Blackwell's FP4 format; not a Triton-backend format)")
    seq_lens = [(1, 128), (5, 64), (1, 256)]
    query_lens = [n for n, _ in seq_lens]
    kv_lens = [k for _, k in seq_lens]
    num_query_heads, num_kv_heads = heads
    head_size, block_size, dtype = 128, 16, torch.bfloat16
    max_blocks = (max(kv_lens) + block_size - 1) // block_size
    num_blocks = max_blocks * len(seq_lens) + 10
    scale = head_size ** -0.5
    query = torch.randn(sum(query_lens), num_query_heads, head_size, dtype=dtype, device="cuda")
    kv = torch.randn(num_blocks, 2, block_size, num_kv_heads, head_size, dtype=dtype, device="cuda")
    rows = []
    for i, kv_len in enumerate(kv_lens):
        used = (kv_len + block_size - 1) // block_size
        rows.append(list(range(i * max_blocks, i * max_blocks + used)) + [0] * (max_blocks - used))
    block_tables = torch.tensor(rows, dtype=torch.int32, device="cuda")
    cu = torch.tensor([0] + query_lens, dtype=torch.int32).cumsum(0, dtype=torch.int32).cuda()
    output = torch.full_like(query, float("nan"))
    attnjit.ops.paged_attention(query, kv, output, block_tables, torch.tensor(kv_lens, dtype=torch.int32,
                                                                              device="cuda"),
                                cu, max(query_lens), scale=scale, max_seq_len=max(kv_lens),
                                causal_flags=torch.tensor(pattern, dtype=torch.bool, device="cuda"))
    torch.cuda.synchronize()
    key_cache, value_cache = kv.unbind(1)
    expected = reference(torch, query, key_cache, value_cache, query_lens, kv_lens, block_tables, scale, None, None,
                         causal=pattern)
    assert_close(torch, output.double(), expected.to(dtype).double(), 1e-2, 1e-2, "output")
