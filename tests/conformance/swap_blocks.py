"""vLLM's test_swap_blocks (tests/kernels/attention/test_cache.py) against
attnjit.ops.swap_blocks: 256 random (source, destination) pairs (disjoint when
both caches are on the GPU) between caches of 1024 or 10000 blocks, GPU to
host, GPU to GPU and host to GPU, head sizes 64/80/256, block sizes 8/16/32,
bf16 and f32, auto and fp8 caches (fp8 only GPU to GPU, as vLLM), K and V
caches each moved with vLLM's block_size_in_bytes; every moved block equal."""

import itertools
import random

from conformance import assert_close

DIRECTIONS = [("cuda", "cpu"), ("cuda", "cuda"), ("cpu", "cuda")]
HEAD_SIZES = [64, 80, 256]
BLOCK_SIZES = [8, 16, 32]
NUM_BLOCKS = [1024, 10000]
NUM_HEADS = 8
NUM_MAPPINGS = 256


def cases(torch):
    for direction, head_size, block_size, num_blocks, dtype, kv_dtype in itertools.product(
            DIRECTIONS, HEAD_SIZES, BLOCK_SIZES, NUM_BLOCKS, [torch.bfloat16, torch.float], ["auto", "fp8"]):
        if kv_dtype == "fp8" and ("cpu" in direction or head_size % 16):
            continue  # vLLM skips these
        name = "%s->%s D=%d bs=%d blocks=%d %s %s" % (direction[0], direction[1], head_size, block_size, num_blocks,
                                                     str(dtype).replace("torch.", ""), kv_dtype)
        yield name, dict(direction=direction, head_size=head_size, block_size=block_size, num_blocks=num_blocks,
                         dtype=dtype, kv_cache_dtype=kv_dtype)


def run(torch, attnjit, direction, head_size, block_size, num_blocks, dtype, kv_cache_dtype):
    src_device, dst_device = direction
    src_blocks = random.sample(range(num_blocks), NUM_MAPPINGS)
    if src_device == dst_device:
        dst_blocks = random.sample(sorted(set(range(num_blocks)) - set(src_blocks)), NUM_MAPPINGS)
    else:
        dst_blocks = random.sample(range(num_blocks), NUM_MAPPINGS)
    mapping = torch.tensor(list(zip(src_blocks, dst_blocks)), dtype=torch.int64).view(-1, 2)
    shape = (num_blocks, NUM_HEADS, head_size, block_size)

    def cache(device):
        # Drawn on the GPU (fast), then copied into pinned host memory for a host side.
        if kv_cache_dtype == "fp8":
            values = torch.randn(shape, device="cuda").to(torch.float8_e4m3fn).view(torch.uint8)
        else:
            values = torch.randn(shape, dtype=dtype, device="cuda")
        if device == "cuda":
            return values
        return torch.empty(shape, dtype=values.dtype, pin_memory=True).copy_(values)

    src_key, src_value, dst_key, dst_value = cache(src_device), cache(src_device), cache(dst_device), cache(dst_device)
    src_key_copy, src_value_copy = src_key.clone(), src_value.clone()
    block_bytes = src_key.element_size() * src_key.stride(0)
    attnjit.ops.swap_blocks(src_key, dst_key, mapping, block_size_in_bytes=block_bytes)
    attnjit.ops.swap_blocks(src_value, dst_value, mapping, block_size_in_bytes=block_bytes)
    torch.cuda.synchronize()
    for s, d in zip(src_blocks, dst_blocks):
        assert_close(torch, dst_key[d].cpu(), src_key_copy[s].cpu(), what="key block %d -> %d" % (s, d))
        assert_close(torch, dst_value[d].cpu(), src_value_copy[s].cpu(), what="value block %d -> %d" % (s, d))
