"""attnjit's per-layer ops as PyTorch custom operators, torch.ops.attnjit.*.

    import attnjit.torch_ops  # registers them (needs torch 2.4 or newer)
    torch.ops.attnjit.paged_attention(q, kv_cache, out, block_tables, seq_lens, cu_seqlens_q, max_query_len)

Each operator is attnjit.ops' function of the same name with the same
arguments (minus `stream` and `jit`: they launch on torch's current stream
through the default JIT), declared with the tensors it writes (its outputs, and
a split-KV workspace) and with a fake implementation, so that torch.compile
traces a model that calls them without graph breaks (fullgraph=True), and CUDA
graph capture records their launches (their split-KV scratch comes from the
runtime's stream-ordered pool, which capture turns into allocation nodes). They
return nothing: results are written into the tensors passed in, as vLLM's ops
do.

paged_attention and cache_write are C++ operators when attnjit's torch
extension builds (NATIVE is then True; attnjit/_torch_extension.py), else Python
ones like the rest.

The Python operators are defined through torch.library.Library with the schema
torch.library.custom_op would infer, not through custom_op itself: custom_op's
ADInplaceOrView kernel indexes the mutated arguments by their schema position,
and the dispatcher drops trailing arguments left at their defaults, so a call
that omits an optional written tensor (cache_write without k_scale_cache) fails
with an IndexError (pytorch/pytorch#176078, torch 2.10). Without that kernel the
dispatcher's fallthrough runs, as for the C++ operators; the written tensors'
version counters are then not bumped, which only autograd reads."""

from typing import Optional

import torch

from . import _torch_extension, ops

_LIBRARY = "attnjit"


def _writes_only(*args, **kwargs):
    """The fake implementation of every operator here: each returns nothing and
    only writes into tensors it is given, so fake tensors need no computation."""
    return None


_LIB = torch.library.Library(_LIBRARY, "FRAGMENT")

try:
    _infer_schema = torch.library.infer_schema
except AttributeError:  # torch 2.4
    from torch._library.infer_schema import infer_schema as _infer_schema


def _operator(mutates_args):
    """Defines torch.ops.attnjit.<function name> with the function's signature
    (the tensors named in `mutates_args` declared written), the function as its
    kernel for every device and _writes_only as its fake; returns the operator."""
    def define(function):
        name = function.__name__
        _LIB.define(name + _infer_schema(function, mutates_args=mutates_args))
        _LIB.impl(name, function, "CompositeExplicitAutograd")
        torch.library.register_fake(_LIBRARY + "::" + name, _writes_only, lib=_LIB)
        return getattr(torch.ops.attnjit, name)
    return define


# paged_attention and cache_write, called once per layer, are C++ operators
# where the extension builds (attnjit/_torch_extension.py): a call then costs
# the dispatcher and the C API, not the Python function of attnjit/ops.py. Their
# errors are then RuntimeErrors with the same messages.
NATIVE = _torch_extension.load(torch, ops.default_jit())

if not NATIVE:
    @_operator(mutates_args=("out", "lse", "workspace"))
    def paged_attention(q: torch.Tensor, kv_cache: torch.Tensor, out: torch.Tensor, block_tables: torch.Tensor,
                        seq_lens: torch.Tensor, cu_seqlens_q: torch.Tensor, max_query_len: int,
                        scale: Optional[float] = None, causal: bool = True, kv_cache_format: str = "auto",
                        k_scale: Optional[torch.Tensor] = None, v_scale: Optional[torch.Tensor] = None,
                        sliding_window: int = 0, softcap: float = 0.0,
                        alibi_slopes: Optional[torch.Tensor] = None,
                        sinks: Optional[torch.Tensor] = None, lse: Optional[torch.Tensor] = None,
                        workspace: Optional[torch.Tensor] = None, max_seq_len: int = 0,
                        batch_invariant: bool = False, min_seq_len: int = 0, alibi_sqrt: bool = False,
                        output_scale: Optional[torch.Tensor] = None, causal_flags: Optional[torch.Tensor] = None,
                        num_sms: int = 0, sliding_window_right: int = 0,
                        q_scale: Optional[torch.Tensor] = None, runtime_scratch: bool = True,
                        attention_chunk_size: int = 0, mm_prefix_range: Optional[torch.Tensor] = None,
                        qq_bias: Optional[torch.Tensor] = None, fp32_precision: str = "tf32",
                        plan_tuning: str = "environment", k_scale_cache: Optional[torch.Tensor] = None,
                        v_scale_cache: Optional[torch.Tensor] = None) -> None:
        ops.paged_attention(q, kv_cache, out, block_tables, seq_lens, cu_seqlens_q, max_query_len, scale=scale,
                            causal=causal, kv_cache_format=kv_cache_format, k_scale=k_scale, v_scale=v_scale,
                            sliding_window=sliding_window, softcap=softcap, alibi_slopes=alibi_slopes, sinks=sinks,
                            lse=lse, workspace=workspace, max_seq_len=max_seq_len, batch_invariant=batch_invariant,
                            min_seq_len=min_seq_len, alibi_sqrt=alibi_sqrt, output_scale=output_scale,
                            causal_flags=causal_flags, num_sms=num_sms, sliding_window_right=sliding_window_right,
                            q_scale=q_scale, runtime_scratch=runtime_scratch,
                            attention_chunk_size=attention_chunk_size, mm_prefix_range=mm_prefix_range,
                            qq_bias=qq_bias, fp32_precision=fp32_precision, plan_tuning=plan_tuning,
                            k_scale_cache=k_scale_cache, v_scale_cache=v_scale_cache)

    @_operator(mutates_args=("kv_cache", "k_scale_cache", "v_scale_cache"))
    def cache_write(key: torch.Tensor, value: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                    cache_format: str = "auto", k_scale: Optional[torch.Tensor] = None,
                    v_scale: Optional[torch.Tensor] = None, k_scale_cache: Optional[torch.Tensor] = None,
                    v_scale_cache: Optional[torch.Tensor] = None) -> None:
        ops.cache_write(key, value, kv_cache, slot_mapping, cache_format=cache_format, k_scale=k_scale,
                        v_scale=v_scale, k_scale_cache=k_scale_cache, v_scale_cache=v_scale_cache)
else:
    paged_attention = torch.ops.attnjit.paged_attention
    cache_write = torch.ops.attnjit.cache_write


@_operator(mutates_args=("output", "output_lse"))
def merge_attn_states(output: torch.Tensor, prefix_output: torch.Tensor, prefix_lse: torch.Tensor,
                      suffix_output: torch.Tensor, suffix_lse: torch.Tensor,
                      output_lse: Optional[torch.Tensor] = None, prefill_tokens_with_context: Optional[int] = None,
                      output_scale: Optional[torch.Tensor] = None) -> None:
    ops.merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=output_lse,
                          prefill_tokens_with_context=prefill_tokens_with_context, output_scale=output_scale)


@_operator(mutates_args=("kv_cache",))
def mla_cache_write(kv_c: torch.Tensor, k_pe: torch.Tensor, kv_cache: torch.Tensor, slot_mapping: torch.Tensor,
                    cache_format: str = "auto", scale: Optional[torch.Tensor] = None) -> None:
    ops.mla_cache_write(kv_c, k_pe, kv_cache, slot_mapping, cache_format=cache_format, scale=scale)


@_operator(mutates_args=("dst",))
def gather_cache(cache: torch.Tensor, dst: torch.Tensor, block_table: torch.Tensor, cu_seq_lens: torch.Tensor,
                 cache_format: str = "auto", scale: Optional[torch.Tensor] = None,
                 seq_starts: Optional[torch.Tensor] = None) -> None:
    ops.gather_cache(cache, dst, block_table, cu_seq_lens, cache_format=cache_format, scale=scale,
                     seq_starts=seq_starts)


@_operator(mutates_args=("dst",))
def convert_fp8(dst: torch.Tensor, src: torch.Tensor, scale: float = 1.0, kv_dtype: str = "fp8") -> None:
    ops.convert_fp8(dst, src, scale=scale, kv_dtype=kv_dtype)


@_operator(mutates_args=("dst",))
def swap_blocks(src: torch.Tensor, dst: torch.Tensor, block_mapping: torch.Tensor,
                block_size_in_bytes: Optional[int] = None) -> None:
    ops.swap_blocks(src, dst, block_mapping, block_size_in_bytes=block_size_in_bytes)


@_operator(mutates_args=("out", "lse", "workspace"))
def mla_decode(q: torch.Tensor, kv_cache: torch.Tensor, out: torch.Tensor, block_tables: torch.Tensor,
               seq_lens: torch.Tensor, max_seq_len: int = 0, scale: Optional[float] = None,
               kv_cache_format: str = "auto", kv_scale: Optional[torch.Tensor] = None,
               lse: Optional[torch.Tensor] = None, workspace: Optional[torch.Tensor] = None, sum_seq_lens: int = 0,
               batch_invariant: bool = False, split_rule: str = "balanced", num_sms: int = 0,
               runtime_scratch: bool = True, fp32_precision: str = "tf32") -> None:
    ops.mla_decode(q, kv_cache, out, block_tables, seq_lens, max_seq_len=max_seq_len, scale=scale,
                   kv_cache_format=kv_cache_format, kv_scale=kv_scale, lse=lse, workspace=workspace,
                   sum_seq_lens=sum_seq_lens, batch_invariant=batch_invariant, split_rule=split_rule, num_sms=num_sms,
                   runtime_scratch=runtime_scratch, fp32_precision=fp32_precision)

__all__ = ["cache_write", "convert_fp8", "gather_cache", "merge_attn_states", "mla_cache_write", "mla_decode", "paged_attention",
           "swap_blocks"]
