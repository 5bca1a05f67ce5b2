"""vLLM's test_fp8_e4m3_conversion (tests/kernels/attention/test_cache.py)
against attnjit.ops.convert_fp8: a cache [num_blocks, 8 heads, head size,
block size] uniform in [-224, 224], head sizes 64/80/256, block sizes 8/16/32,
1024 or 10000 blocks, bf16 and f32, converted to fp8 (e4m3, scale 1) and back;
vLLM's check: the round trip within atol 1e-3 / rtol 0.1 of the original. Added
here: the fp8 bytes equal torch's own e4m3 cast (every value is in range)."""

import itertools

from conformance import assert_close

HEAD_SIZES = [64, 80, 256]
BLOCK_SIZES = [8, 16, 32]
NUM_BLOCKS = [1024, 10000]
NUM_HEADS = 8


def cases(torch):
    for head_size, block_size, num_blocks, dtype in itertools.product(
            HEAD_SIZES, BLOCK_SIZES, NUM_BLOCKS, ["bfloat16", "float32"]):
        name = "D=%d bs=%d blocks=%d %s" % (head_size, block_size, num_blocks, dtype)
        yield name, dict(head_size=head_size, block_size=block_size, num_blocks=num_blocks, dtype=dtype)


def run(torch, attnjit, head_size, block_size, num_blocks, dtype):
    dtype = getattr(torch, dtype)
    cache = torch.empty(num_blocks, NUM_HEADS, head_size, block_size, dtype=dtype, device="cuda")
    cache.uniform_(-224.0, 224.0)
    cache_fp8 = torch.empty_like(cache, dtype=torch.uint8)
    attnjit.ops.convert_fp8(cache_fp8, cache)
    converted = torch.full_like(cache, float("nan"))
    attnjit.ops.convert_fp8(converted, cache_fp8)
    torch.cuda.synchronize()
    assert torch.equal(cache_fp8, cache.float().to(torch.float8_e4m3fn).view(torch.uint8)), \
        "fp8 bytes differ from torch's e4m3 cast"
    assert_close(torch, cache, converted, 1e-3, 0.1, "round trip")
