"""vLLM's test_reshape_and_cache_flash (tests/kernels/attention/test_cache.py)
against attnjit.ops.cache_write: 21 tokens (vLLM halves its 42) into a cache of
half of 1024 or 10000 blocks, head sizes 64/80/256, block sizes 8/16/32, bf16
and f32, cache dtypes auto / fp8 (e4m3) / nvfp4, NHC and HNC layouts, a scale
per tensor or per KV head (attn_head). vLLM runs each case through its CUDA and
its Triton writer; attnjit is one writer, so a case runs once. Checks as vLLM's:
auto caches equal the reference exactly; fp8 caches, dequantized to f16, within
atol 1e-3 / rtol 0.1 of the reference (the untouched rows included)."""

import itertools
import random

from conformance import Unsupported, assert_close

HEAD_SIZES = [64, 80, 256]
BLOCK_SIZES = [8, 16, 32]
NUM_BLOCKS = [1024, 10000]
NUM_HEADS = 8
NUM_TOKENS = 42


def cases(torch):
    for head_size, block_size, num_blocks, dtype, kv_dtype, layout, scale_type in itertools.product(
            HEAD_SIZES, BLOCK_SIZES, NUM_BLOCKS, [torch.bfloat16, torch.float], ["auto", "fp8", "nvfp4"],
            ["NHC", "HNC"], ["tensor", "attn_head"]):
        name = "D=%d bs=%d blocks=%d %s %s %s scale=%s" % (head_size, block_size, num_blocks,
                                                          str(dtype).replace("torch.", ""), kv_dtype, layout,
                                                          scale_type)
        yield name, dict(head_size=head_size, block_size=block_size, num_blocks=num_blocks, dtype=dtype,
                         kv_cache_dtype=kv_dtype, layout=layout, scale_type=scale_type)


def run(torch, attnjit, head_size, block_size, num_blocks, dtype, kv_cache_dtype, layout, scale_type):
    if kv_cache_dtype == "nvfp4":
        raise Unsupported("nvfp4 KV cache (Blackwell's FP4 format; not a Triton-backend format)")
    num_tokens, num_blocks = NUM_TOKENS // 2, num_blocks // 2
    slots = torch.tensor(random.sample(range(block_size * num_blocks), num_tokens), dtype=torch.long, device="cuda")
    qkv = torch.randn(num_tokens, 3, NUM_HEADS, head_size, dtype=dtype, device="cuda")
    _, key, value = qkv.unbind(dim=1)
    # The cache: [num_blocks, 2, block_size, heads, D] logically; HNC stores
    # heads before tokens (vLLM's kv_cache_factory_flashinfer permutes the same way).
    cache_dtype = dtype if kv_cache_dtype == "auto" else torch.uint8
    if layout == "NHC":
        storage = torch.empty(num_blocks, 2, block_size, NUM_HEADS, head_size, dtype=cache_dtype, device="cuda")
        kv_cache = storage
    else:
        storage = torch.empty(num_blocks, 2, NUM_HEADS, block_size, head_size, dtype=cache_dtype, device="cuda")
        kv_cache = storage.permute(0, 1, 3, 2, 4)
    if kv_cache_dtype == "auto":
        kv_cache.copy_(torch.randn(kv_cache.shape, dtype=dtype, device="cuda"))
    else:
        kv_cache.copy_(torch.randn(kv_cache.shape, device="cuda").to(torch.float8_e4m3fn).view(torch.uint8))
    if scale_type == "tensor":
        k_scale = (key.amax() / 64.0).float().reshape(1)
        v_scale = (value.amax() / 64.0).float().reshape(1)
    else:
        k_scale = (key.amax(dim=(0, 2)) / 64.0).float().contiguous()
        v_scale = (value.amax(dim=(0, 2)) / 64.0).float().contiguous()

    def dequantized(cache, scale):
        # [num_blocks, block_size, heads, D] in f16, the scale per tensor or head.
        values = cache.view(torch.float8_e4m3fn).float()
        return (values * (scale.view(1, 1, -1, 1) if scale.numel() > 1 else scale)).half()

    if kv_cache_dtype == "fp8":
        expected_key, expected_value = dequantized(kv_cache[:, 0], k_scale), dequantized(kv_cache[:, 1], v_scale)
    else:
        expected_key, expected_value = kv_cache[:, 0].clone(), kv_cache[:, 1].clone()
    attnjit.ops.cache_write(key, value, kv_cache, slots, cache_format="auto" if kv_cache_dtype == "auto" else "fp8",
                            k_scale=k_scale if kv_cache_dtype != "auto" else None,
                            v_scale=v_scale if kv_cache_dtype != "auto" else None)
    torch.cuda.synchronize()
    blocks, offsets = (slots // block_size).tolist(), (slots % block_size).tolist()
    for i in range(num_tokens):
        expected_key[blocks[i], offsets[i]] = key[i].to(expected_key.dtype)
        expected_value[blocks[i], offsets[i]] = value[i].to(expected_value.dtype)
    if kv_cache_dtype == "fp8":
        assert_close(torch, dequantized(kv_cache[:, 0], k_scale), expected_key, 0.001, 0.1, "key cache")
        assert_close(torch, dequantized(kv_cache[:, 1], v_scale), expected_value, 0.001, 0.1, "value cache")
    else:
        assert_close(torch, kv_cache[:, 0], expected_key, what="key cache")
        assert_close(torch, kv_cache[:, 1], expected_value, what="value cache")
