"""vLLM's tests/kernels/attention/test_mla_decode_cpu.py (MLA latent decode:
one latent row of 576 = 512 + 64 per token serves as K, its first 512 columns
as V) against attnjit.ops.mla_decode: 4 sequences of 256 keys, or of lengths
drawn from normal(256, 128) clipped at 2 (varlen), 16 query heads, block size
16, float32, float16 and bfloat16. The cache past each sequence's end is NaN,
so a read out of bounds shows. vLLM's reference is SDPA in the test's dtype;
here float64. float32 keeps vLLM's tolerance (torch.testing.assert_close's
default), which holds the kernel to exact float32 products, as the CPU kernel
under test computes them: those cases ask for fp32_precision="ieee" (attnjit's
default for float32, like vLLM's Triton kernels, is TF32). For float16 and bfloat16 that default (atol 1e-5) holds a kernel to
the rounded exact result, which a CPU kernel with float32 probabilities meets;
attnjit's GPU kernel, like vLLM's Triton MLA decode and FlashMLA, rounds the
probabilities to the 16-bit type for the tensor cores' P·V (measured: up to
6e-5 from float64 in float16, 1e-3 in bfloat16), so these take the tolerance of
vLLM's test for its Triton decode kernel (atol 1.5e-2, rtol 1e-2). Each case
runs twice: unsplit (runtime_scratch=False) and with max_seq_len, which lets the
op split the keys across CTAs."""

import itertools

from conformance import assert_close

BATCH, MEAN_SEQ_LEN, HEADS, D, DV, BLOCK_SIZE = 4, 256, 16, 576, 512, 16


def cases(torch):
    for dtype, varlen in itertools.product(["float32", "float16", "bfloat16"], [False, True]):
        yield "dtype=%s varlen=%d" % (dtype, varlen), dict(dtype=dtype, varlen=varlen)


def reference(torch, q, kv_cache, scale, block_table, seq_lens):
    out = []
    for i, seq_len in enumerate(seq_lens):
        rows = kv_cache[block_table[i].long()].reshape(-1, D)[:seq_len].double()
        scores = torch.einsum("hd,kd->hk", q[i].double(), rows) * scale
        out.append(torch.softmax(scores, dim=-1) @ rows[:, :DV])
    return torch.stack(out)


def run(torch, attnjit, dtype, varlen):
    dtype = getattr(torch, dtype)
    scale = D ** -0.5
    if varlen:
        seq_lens = torch.empty(BATCH).normal_(MEAN_SEQ_LEN, MEAN_SEQ_LEN / 2).clip(2).to(torch.int32)
    else:
        seq_lens = torch.full((BATCH,), MEAN_SEQ_LEN, dtype=torch.int32)
    max_seq_len = int(seq_lens.max())
    padded = (max_seq_len + 255) // 256 * 256
    block_table = torch.arange(BATCH * padded // BLOCK_SIZE, dtype=torch.int32).view(BATCH, padded // BLOCK_SIZE)
    q = torch.randn(BATCH, HEADS, D, dtype=dtype, device="cuda")
    kv_cache = torch.randn(block_table.numel(), BLOCK_SIZE, D, dtype=dtype, device="cuda")
    for i, seq_len in enumerate(seq_lens.tolist()):
        kv_cache.view(BATCH, padded, D)[i, seq_len:] = float("nan")
    block_table, seq_lens_gpu = block_table.cuda(), seq_lens.cuda()
    expected = reference(torch, q, kv_cache, scale, block_table, seq_lens.tolist()).to(dtype)
    for options in (dict(runtime_scratch=False), dict(max_seq_len=max_seq_len)):
        out = torch.full((BATCH, HEADS, DV), float("nan"), dtype=dtype, device="cuda")
        precision = "ieee" if dtype == torch.float32 else "tf32"
        attnjit.ops.mla_decode(q, kv_cache, out, block_table, seq_lens_gpu, scale=scale, fp32_precision=precision,
                               **options)
        torch.cuda.synchronize()
        assert not out.isnan().any(), "NaN in the output (%s): a read past a sequence's end?" % options
        if dtype == torch.float32:
            assert_close(torch, out, expected, what="output (%s)" % options)
        else:
            assert_close(torch, out.double(), expected.double(), 1.5e-2, 1e-2, "output (%s)" % options)
