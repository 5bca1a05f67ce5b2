"""vLLM's tests/kernels/attention/test_merge_attn_states.py against
attnjit.ops.merge_attn_states: the same parametrization (tokens, heads, head
sizes, dtypes, prefill_tokens_with_context, fp8 output), LSEs with +inf
entries (empty partials), and vLLM's tolerances. The reference is the float64
formula of the paper vLLM cites (section 2.2 of arXiv 2501.01005), written here."""

import itertools

from conformance import assert_close

NUM_BATCH_TOKENS = [256, 512, 613, 1024, 1536, 4096]
NUM_QUERY_HEADS = [4, 8, 16, 32, 48, 64]
HEAD_SIZES = [32, 48, 64, 96, 128, 256]


def cases(torch):
    dtypes = [torch.float32, torch.half, torch.bfloat16]
    for use_fp8, with_context, tokens, heads, head_size, dtype in itertools.product(
            [False, True], [None, 128], NUM_BATCH_TOKENS, NUM_QUERY_HEADS, HEAD_SIZES, dtypes):
        name = "fp8=%d ctx=%s T=%d H=%d D=%d %s" % (use_fp8, with_context, tokens, heads, head_size,
                                                    str(dtype).replace("torch.", ""))
        yield name, dict(use_fp8=use_fp8, prefill_tokens_with_context=with_context, num_tokens=tokens,
                         num_heads=heads, head_size=head_size, dtype=dtype)


def reference(torch, prefix_output, prefix_lse, suffix_output, suffix_lse, with_context):
    """float64 merge: an infinite LSE is an empty partial (treated as -inf);
    tokens at or past with_context take the suffix as it is."""
    p_lse = prefix_lse.double().clone()
    s_lse = suffix_lse.double().clone()
    p_lse[p_lse == float("inf")] = -float("inf")
    s_lse[s_lse == float("inf")] = -float("inf")
    top = torch.maximum(p_lse, s_lse)
    p_weight, s_weight = torch.exp(p_lse - top), torch.exp(s_lse - top)
    total = p_weight + s_weight
    out_lse = torch.log(total) + top
    p_share = (p_weight / total).t().unsqueeze(2)
    s_share = (s_weight / total).t().unsqueeze(2)
    out = prefix_output.double() * p_share + suffix_output.double() * s_share
    if with_context is not None:
        out[with_context:] = suffix_output[with_context:].double()
        out_lse[:, with_context:] = suffix_lse[:, with_context:].double()
    return out, out_lse


def run(torch, attnjit, num_tokens, num_heads, head_size, dtype, use_fp8, prefill_tokens_with_context):
    prefix_lse = torch.randn(num_heads, num_tokens, dtype=torch.float32, device="cuda")
    suffix_lse = torch.randn(num_heads, num_tokens, dtype=torch.float32, device="cuda")
    mask_prefix = torch.rand(num_heads, num_tokens) < 0.1
    mask_suffix = torch.rand(num_heads, num_tokens) < 0.1
    both = mask_prefix & mask_suffix
    prefix_lse[mask_prefix & ~both] = float("inf")
    suffix_lse[mask_suffix & ~both] = float("inf")
    prefix_output = torch.randn(num_tokens, num_heads, head_size, dtype=dtype, device="cuda")
    suffix_output = torch.randn(num_tokens, num_heads, head_size, dtype=dtype, device="cuda")
    output_scale = torch.tensor([0.05], dtype=torch.float32, device="cuda") if use_fp8 else None
    out_dtype = torch.float8_e4m3fn if use_fp8 else dtype
    output = torch.full((num_tokens, num_heads, head_size), float("nan"), device="cuda").to(out_dtype)
    output_lse = torch.full((num_heads, num_tokens), float("nan"), dtype=torch.float32, device="cuda")
    attnjit.ops.merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse,
                                  output_lse=output_lse, prefill_tokens_with_context=prefill_tokens_with_context,
                                  output_scale=output_scale)
    torch.cuda.synchronize()
    expected, expected_lse = reference(torch, prefix_output, prefix_lse, suffix_output, suffix_lse,
                                       prefill_tokens_with_context)
    if use_fp8:
        # vLLM compares fp8 outputs dequantized: x_fp8 * scale against the
        # reference quantized the same way (scaled_fp8_quant: saturate at 448).
        scale = output_scale.item()
        expected = (expected / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float() * scale
        got = output.float() * scale
        atol = rtol = 1e-1
    else:
        got = output
        expected = expected.to(dtype)
        atol, rtol = (1e-3, 1e-2) if dtype == torch.bfloat16 else (1e-3, 1e-3)
    assert_close(torch, got.float(), expected.float(), atol, rtol, "output")
    assert_close(torch, output_lse.float(), expected_lse.float(), atol, rtol, "output_lse")
