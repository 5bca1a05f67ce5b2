"""vLLM's per-token-head KV cache tests (tests/quantization/test_per_token_kv_cache.py)
against attnjit.ops.cache_write and attnjit.ops.paged_attention, in vLLM's
layout: rows of D quantized values and the f32 scales in k_scale_cache /
v_scale_cache [num_blocks, block_size, Hkv] (attnjit's kv_scales separate):

- test_reshape_and_cache_per_token_head: 1, 7 or 42 bf16 tokens, 1, 4 or 8 KV
  heads, head sizes 64 and 128, block size 16, random distinct slots; the
  cache dequantized is within atol/rtol 0.1 of the reference's quantization
  dequantized, the scales within atol 1e-4 / rtol 1e-3 of max|x| / QMAX;
- test_per_token_head_round_trip_accuracy: 1 or 16 tokens (values times 0.5),
  4 heads of 128: the dequantized cache within 0.1 of the input;
- test_per_token_head_negative_slot_skipped: slots [0, -1, 1, -1] write
  slots 0 and 1 and nothing else;
- test_triton_unified_attention_per_token_head_scale: decode of 128 keys, or
  of 64 and 32, 4/4 heads of 128, over a quantized cache of 2048 random bf16
  blocks against attention over the same cache dequantized (atol/rtol 5e-2).

vLLM's K and V caches are separate tensors there; here they are the two halves
of one [num_blocks, 2, block_size, Hkv, D] tensor (as in vLLM's backend), and
its scale caches the halves of one [num_blocks, 2, block_size, Hkv] tensor.
int8, fp8 (e4m3) and int4 run. vLLM's int4 is asymmetric: rows of D/2 bytes,
element 2i in the low nibble of byte i and 2i + 1 in the high one, the scale's
low 4 mantissa bits holding the zero point, a value (q - zp) · scale with the
zero point's bits cleared from the scale. Its write checks are dequantized
values against the input within atol/rtol 0.5 (its quantization clips, so the
test has no reference for the bytes); its attention case writes a symmetric
[-8, 7] quantization with zero point 8 itself and compares with 0.5."""

import itertools
import random

from conformance import assert_close

FORMATS = {"int8": ("int8_per_token_head", 127.0), "fp8": ("fp8_per_token_head", 448.0),
           "int4": ("int4_per_token_head", 7.0)}


def cases(torch):
    for fmt, tokens, heads, head_size in itertools.product(FORMATS, [1, 7, 42], [1, 4, 8], [64, 128]):
        yield ("reshape_and_cache %s tokens=%d heads=%d D=%d" % (fmt, tokens, heads, head_size),
               dict(test="reshape", fmt=fmt, tokens=tokens, heads=heads, head_size=head_size))
    for fmt, tokens in itertools.product(FORMATS, [1, 16]):
        yield ("round trip %s tokens=%d" % (fmt, tokens),
               dict(test="round_trip", fmt=fmt, tokens=tokens, heads=4, head_size=128))
    for fmt in FORMATS:
        yield "negative slots %s" % fmt, dict(test="negative_slots", fmt=fmt, tokens=4, heads=2, head_size=64)
    for fmt, seq_lens in itertools.product(FORMATS, [[(1, 128)], [(1, 64), (1, 32)]]):
        yield ("unified attention %s seqs=%s" % (fmt, seq_lens),
               dict(test="attention", fmt=fmt, seq_lens=seq_lens, heads=4, head_size=128))


def _caches(torch, fmt, num_blocks, block_size, heads, head_size):
    """The quantized cache (bytes; int4: two values a byte) and its scale
    tensors, K and V halves of one each."""
    row_bytes = head_size // 2 if fmt == "int4" else head_size
    cache = torch.zeros(num_blocks, 2, block_size, heads, row_bytes, dtype=torch.uint8, device="cuda")
    scales = torch.ones(num_blocks, 2, block_size, heads, device="cuda")
    return cache, scales


def _dequantized(torch, fmt, rows, scales):
    if fmt == "int4":
        # vLLM's asymmetric int4: the zero point in the scale's low 4 bits.
        bits = scales.contiguous().view(torch.int32)
        zero_points = (bits & 0xF).float()
        clean_scales = (bits & -16).view(torch.float32)
        low, high = (rows & 0xF).float(), ((rows >> 4) & 0xF).float()
        values = torch.stack((low, high), dim=-1).flatten(-2)  # element 2i low, 2i + 1 high
        return (values - zero_points.unsqueeze(-1)) * clean_scales.unsqueeze(-1)
    values = rows.view(torch.int8).float() if fmt == "int8" else rows.view(torch.float8_e4m3fn).float()
    return values * scales.unsqueeze(-1)


def _write(attnjit, fmt, key, value, cache, scales, slots):
    attnjit.ops.cache_write(key, value, cache, slots, cache_format=FORMATS[fmt][0], k_scale_cache=scales[:, 0],
                            v_scale_cache=scales[:, 1])


def run(torch, attnjit, test, fmt, heads, head_size, tokens=None, seq_lens=None):
    quant_max = FORMATS[fmt][1]
    block_size = 16
    if test in ("reshape", "round_trip", "negative_slots"):
        if test == "negative_slots":
            num_blocks = 2
            slots = torch.tensor([0, -1, 1, -1], dtype=torch.long, device="cuda")
        elif test == "round_trip":
            num_blocks = (tokens + block_size - 1) // block_size + 2
            slots = torch.arange(tokens, dtype=torch.long, device="cuda")
        else:
            num_blocks = (tokens + block_size - 1) // block_size + 4
            slots = torch.tensor(random.sample(range(block_size * num_blocks), tokens), dtype=torch.long,
                                 device="cuda")
        factor = 0.5 if test == "round_trip" else 1.0
        key = torch.randn(tokens, heads, head_size, dtype=torch.bfloat16, device="cuda") * factor
        value = torch.randn(tokens, heads, head_size, dtype=torch.bfloat16, device="cuda") * factor
        cache, scales = _caches(torch, fmt, num_blocks, block_size, heads, head_size)
        before = cache.clone()
        _write(attnjit, fmt, key, value, cache, scales, slots)
        torch.cuda.synchronize()
        if test == "negative_slots":
            # vLLM's checks: slots 0 and 1 of block 0 written, the rest untouched.
            for kv in range(2):
                assert not torch.equal(cache[0, kv, 0], before[0, kv, 0]), "slot 0 not written"
                assert not torch.equal(cache[0, kv, 1], before[0, kv, 1]), "slot 1 not written"
                assert torch.equal(cache[0, kv, 2:], before[0, kv, 2:]), "padding tokens wrote slots"
                assert torch.equal(cache[1, kv], before[1, kv]), "padding tokens wrote block 1"
            return
        blocks, offsets = slots // block_size, slots % block_size
        for kv, data in enumerate((key, value)):
            got = _dequantized(torch, fmt, cache[blocks, kv, offsets], scales[blocks, kv, offsets])
            if fmt == "int4":
                # vLLM's int4 checks: dequantized against the input, atol/rtol 0.5.
                assert_close(torch, got, data.float(), 0.5, 0.5, "dequantized cache")
                continue
            if test == "round_trip":
                assert_close(torch, got, data.float(), 0.1, 0.1, "dequantized cache")
                continue
            # vLLM's reference quantization: scale max|x| / QMAX (floor 1e-6),
            # x · (1 / scale) rounded (int8) or cast (fp8), clamped.
            ref_scales = (data.float().abs().amax(dim=-1) / quant_max).clamp(min=1e-6)
            scaled = data.float() * (1.0 / ref_scales.unsqueeze(-1))
            if fmt == "int8":
                ref_q = scaled.round().clamp(-128, 127).to(torch.int8).view(torch.uint8)
            else:
                ref_q = scaled.clamp(-quant_max, quant_max).to(torch.float8_e4m3fn).view(torch.uint8)
            expected = _dequantized(torch, fmt, ref_q, ref_scales)
            assert_close(torch, got, expected, 0.1, 0.1, "dequantized cache")
            assert_close(torch, scales[blocks, kv, offsets], ref_scales, 1e-4, 1e-3, "scales")
        return

    # test == "attention": decode over a quantized cache of random bf16 blocks.
    query_lens = [n for n, _ in seq_lens]
    kv_lens = [k for _, k in seq_lens]
    num_blocks = 2048
    scale = head_size ** -0.5
    query = torch.randn(sum(query_lens), heads, head_size, dtype=torch.bfloat16, device="cuda")
    kv_bf16 = torch.randn(num_blocks, 2, block_size, heads, head_size, dtype=torch.bfloat16, device="cuda")
    scales = (kv_bf16.float().abs().amax(dim=-1) / quant_max).clamp(min=1e-6)
    scaled = kv_bf16.float() / scales.unsqueeze(-1)
    if fmt == "int4":
        # vLLM's int4 case: symmetric [-8, 7] values stored with zero point 8,
        # the reference dequantized with the scales before the zero point is
        # packed into their low bits.
        values = scaled.round().clamp(-8, 7)
        dequantized = (values * scales.unsqueeze(-1)).to(torch.bfloat16)
        unsigned = (values + 8).to(torch.uint8)
        cache = (unsigned[..., 0::2] & 0xF) | ((unsigned[..., 1::2] & 0xF) << 4)
        scales = ((scales.view(torch.int32) & -16) | 8).view(torch.float32)
    elif fmt == "int8":
        cache = scaled.round().clamp(-128, 127).to(torch.int8).view(torch.uint8)
        dequantized = _dequantized(torch, fmt, cache, scales).to(torch.bfloat16)
    else:
        cache = scaled.clamp(-quant_max, quant_max).to(torch.float8_e4m3fn).view(torch.uint8)
        dequantized = _dequantized(torch, fmt, cache, scales).to(torch.bfloat16)
    cu = torch.tensor([0] + query_lens, dtype=torch.int32).cumsum(0, dtype=torch.int32).cuda()
    seq_lens_t = torch.tensor(kv_lens, dtype=torch.int32, device="cuda")
    max_blocks = (max(kv_lens) + block_size - 1) // block_size
    block_tables = torch.randint(0, num_blocks, (len(seq_lens), max_blocks), dtype=torch.int32, device="cuda")
    output = torch.full_like(query, float("nan"))
    attnjit.ops.paged_attention(query, cache, output, block_tables, seq_lens_t, cu, max(query_lens), scale=scale,
                                kv_cache_format=FORMATS[fmt][0], k_scale_cache=scales[:, 0],
                                v_scale_cache=scales[:, 1], runtime_scratch=False)
    reference = torch.full_like(query, float("nan"))
    attnjit.ops.paged_attention(query, dequantized, reference, block_tables, seq_lens_t, cu, max(query_lens),
                                scale=scale, runtime_scratch=False)
    torch.cuda.synchronize()
    tolerance = 0.5 if fmt == "int4" else 5e-2  # vLLM's: int4's 4 bits take the wider one
    assert_close(torch, output.float(), reference.float(), tolerance, tolerance, "output")
