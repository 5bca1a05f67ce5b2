"""The ops: paged attention, KV-cache write, merge of partial attention states
(two-way and N-way), MLA latent cache write and MLA latent decode.

With torch: the functions below take CUDA tensors, check dtype, shape, device
and unit last-dimension stride (TypeError / ValueError before any C call), read
the strides from the tensors and launch on torch's current stream (or
`stream=`). The library then validates the rest (alignment, stride promises,
batch consistency); its errors surface as attnjit.InvalidArgumentError (a
ValueError) with the C message.

Without torch (or for full control): the *_raw functions take the C struct's
fields as keyword arguments, pointers as ints; names are those of
include/attnjit/attnjit.h (num_query_heads, q_stride_token, ...)."""

import ctypes
import difflib
import math

from . import _structs as s
from ._library import lib
from .errors import InvalidArgumentError, check
from .jit import _torch, default_jit, device_scope, stream_handle

DTYPES = {"f32": 0, "float32": 0, "f16": 1, "float16": 1, "fp16": 1, "bf16": 2, "bfloat16": 2}
CACHE_FORMATS = {
    "auto": 0,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 2,
    "int8_per_token_head": 3,
    "fp8_per_token_head": 4,
    "int4_per_token_head": 5,
}
SPLIT_RULES = {"balanced": 0, "vllm": 1}
FP32_PRECISIONS = {"tf32": 0, "ieee": 1}
# attnjit_plan_tuning: "environment" follows ATTNJIT_TUNE.
PLAN_TUNINGS = {"environment": 0, "off": 1, "recorded": 2, "first-use": 3}
# attnjit_kv_scale_layout: where the per-token-head formats keep their row scales.
KV_SCALE_LAYOUTS = {"inline": 0, "separate": 1}


# The C integer types' ranges: ctypes would wrap a value outside them silently
# (2**32 + 32 heads would reach C as 32), so every integer is checked first.
_INTEGER_RANGES = {
    ctypes.c_int: (-(2**31), 2**31 - 1),
    ctypes.c_int64: (-(2**63), 2**63 - 1),
    ctypes.c_uint64: (0, 2**64 - 1),
    ctypes.c_size_t: (0, 2**64 - 1),
}


def _checked_integer(what, value, c_type):
    """`value` as an int that `c_type` holds exactly, else InvalidArgumentError."""
    if isinstance(value, bool):
        value = int(value)
    if not isinstance(value, int):
        try:
            value = value.__index__()
        except (AttributeError, TypeError):
            raise InvalidArgumentError("%s must be an integer, got %r" % (what, value)) from None
    low, high = _INTEGER_RANGES[c_type]
    if not low <= value <= high:
        raise InvalidArgumentError("%s (%d) is outside the range of its C type [%d, %d]" % (what, value, low, high))
    return value


# Per struct type: its bytes after the C _init (defaults, struct_size), its
# field types, and the names a caller may set. Built once: every op call fills
# one struct, and this is most of its host time.
_STRUCT_LAYOUTS = {}


def _struct_layout(struct_type, init):
    layout = _STRUCT_LAYOUTS.get(struct_type)
    if layout is None:
        template = struct_type()
        init(ctypes.byref(template))
        types = dict(struct_type._fields_)
        del types["struct_size"]
        layout = _STRUCT_LAYOUTS[struct_type] = (bytes(template), types)
    return layout


def _fill(struct_type, init, fields):
    template, types = _struct_layout(struct_type, init)
    params = struct_type.from_buffer_copy(template)
    for name, value in fields.items():
        c_type = types.get(name)
        if c_type is None:
            close = difflib.get_close_matches(name, list(types), n=1)
            hint = "; did you mean %r?" % close[0] if close else ""
            raise TypeError("%s has no field %r%s" % (struct_type.__name__, name, hint))
        if name == "dtype" and isinstance(value, str):
            if value not in DTYPES:
                raise ValueError("dtype %r is not one of %s" % (value, ", ".join(sorted(DTYPES))))
            value = DTYPES[value]
        elif name in ("cache_format", "kv_cache_format") and isinstance(value, str):
            if value not in CACHE_FORMATS:
                raise ValueError("%s %r is not one of %s" % (name, value, ", ".join(CACHE_FORMATS)))
            value = CACHE_FORMATS[value]
        elif name == "fp32_precision" and isinstance(value, str):
            if value not in FP32_PRECISIONS:
                raise ValueError("fp32_precision %r is not one of %s" % (value, ", ".join(FP32_PRECISIONS)))
            value = FP32_PRECISIONS[value]
        elif name == "kv_scale_layout" and isinstance(value, str):
            if value not in KV_SCALE_LAYOUTS:
                raise ValueError("kv_scale_layout %r is not one of %s" % (value, ", ".join(KV_SCALE_LAYOUTS)))
            value = KV_SCALE_LAYOUTS[value]
        elif name == "plan_tuning" and isinstance(value, str):
            if value not in PLAN_TUNINGS:
                raise ValueError("plan_tuning %r is not one of %s" % (value, ", ".join(PLAN_TUNINGS)))
            value = PLAN_TUNINGS[value]
        elif name == "split_rule" and isinstance(value, str):
            if value not in SPLIT_RULES:
                raise ValueError("split_rule %r is not one of %s" % (value, ", ".join(SPLIT_RULES)))
            value = SPLIT_RULES[value]
        elif name == "stream":
            value = stream_handle(value) if value is not None else ctypes.c_void_p(None)
        limits = _INTEGER_RANGES.get(c_type)
        if limits is not None and not (type(value) is int and limits[0] <= value <= limits[1]):
            value = _checked_integer(name, value, c_type)
        setattr(params, name, value)
    return params


def _run(struct_type, init, run, validate, jit, validate_only, fields):
    jit = jit or default_jit()
    params = _fill(struct_type, init, fields)
    function = validate if validate_only else run
    check(function(jit._handle, ctypes.byref(params)))


def paged_attention_raw(jit=None, validate_only=False, **fields):
    """Paged attention from the C struct's fields (pointers as ints)."""
    _run(s.PagedAttentionParams, lib.attnjit_paged_attention_params_init, lib.attnjit_paged_attention,
         lib.attnjit_paged_attention_validate, jit, validate_only, fields)


def paged_attention_tune_raw(jit=None, **fields):
    """Measures this call's candidate plans on its buffers (KV tile and warps;
    for decode the split-KV segments and the CTAs-per-SM cap), records the
    fastest for the call's bucket on this device (memory and the disk cache;
    later calls of the bucket take it) and runs it, so out holds its result.
    Synchronizes the stream; seconds per bucket. Calls without max_seq_len,
    batch-invariant and bounds-checked ones are refused (they keep the op's
    rules), and so is a stream capturing a CUDA graph. Returns (rule_ms,
    tuned_ms): the medians of the op's own plan and of the recorded one."""
    jit = jit or default_jit()
    params = _fill(s.PagedAttentionParams, lib.attnjit_paged_attention_params_init, fields)
    rule_ms, tuned_ms = ctypes.c_double(0), ctypes.c_double(0)
    check(lib.attnjit_paged_attention_tune(jit._handle, ctypes.byref(params), ctypes.byref(rule_ms),
                                           ctypes.byref(tuned_ms)))
    return rule_ms.value, tuned_ms.value


def paged_attention_warmup(threads=0, jit=None, **fields):
    """Compiles or loads every kernel paged_attention may launch for calls with
    these static fields of the C struct (dtype, num_query_heads, num_kv_heads,
    head_size, value_head_size, block_size, causal, kv_cache_format,
    sliding_window, softcap, ...; a nonzero alibi_slopes, sinks, lse,
    output_scale, q_scale or causal_flags selects that feature), on up to
    `threads` threads (0: every core): call once at start-up so that the first
    steps do not compile. Returns how many kernels are ready."""
    jit = jit or default_jit()
    params = _fill(s.PagedAttentionParams, lib.attnjit_paged_attention_params_init, fields)
    ready = ctypes.c_int(0)
    check(lib.attnjit_paged_attention_warmup(jit._handle, ctypes.byref(params),
                                             _checked_integer("threads", threads, ctypes.c_int), ctypes.byref(ready)))
    return ready.value


def cache_write_raw(jit=None, validate_only=False, **fields):
    """KV-cache write from the C struct's fields (pointers as ints)."""
    _run(s.CacheWriteParams, lib.attnjit_cache_write_params_init, lib.attnjit_cache_write,
         lib.attnjit_cache_write_validate, jit, validate_only, fields)


def merge_attn_states_raw(jit=None, validate_only=False, **fields):
    """merge_attn_states from the C struct's fields (pointers as ints)."""
    _run(s.MergeAttnStatesParams, lib.attnjit_merge_attn_states_params_init, lib.attnjit_merge_attn_states,
         lib.attnjit_merge_attn_states_validate, jit, validate_only, fields)


def merge_partials_raw(jit=None, validate_only=False, **fields):
    """The N-way merge from the C struct's fields (pointers as ints)."""
    _run(s.MergePartialsParams, lib.attnjit_merge_partials_params_init, lib.attnjit_merge_partials,
         lib.attnjit_merge_partials_validate, jit, validate_only, fields)


def mla_cache_write_raw(jit=None, validate_only=False, **fields):
    """The MLA latent cache write from the C struct's fields (pointers as ints)."""
    _run(s.MlaCacheWriteParams, lib.attnjit_mla_cache_write_params_init, lib.attnjit_mla_cache_write,
         lib.attnjit_mla_cache_write_validate, jit, validate_only, fields)


def mla_decode_raw(jit=None, validate_only=False, **fields):
    """MLA decode from the C struct's fields (pointers as ints)."""
    _run(s.MlaDecodeParams, lib.attnjit_mla_decode_params_init, lib.attnjit_mla_decode,
         lib.attnjit_mla_decode_validate, jit, validate_only, fields)


# ---- torch tensors ----


def _require_torch():
    torch = _torch()
    if torch is None:
        raise TypeError("attnjit: the tensor ops need torch; without it use the *_raw functions with pointers")
    return torch


def _float_dtype(torch, name, tensor):
    dtypes = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
    if tensor.dtype not in dtypes:
        raise TypeError("%s has dtype %s; attnjit takes float32, float16 or bfloat16" % (name, tensor.dtype))
    return dtypes[tensor.dtype]


def _check_tensor(torch, name, tensor, ndim, dtype=None, device=None, unit_last_stride=True):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, got %s" % (name, type(tensor).__name__))
    if tensor.dim() != ndim:
        raise ValueError("%s must have %d dimensions, got shape %s" % (name, ndim, tuple(tensor.shape)))
    if dtype is not None and tensor.dtype != dtype:
        raise TypeError("%s has dtype %s; expected %s" % (name, tensor.dtype, dtype))
    if tensor.device.type != "cuda":
        raise ValueError("%s is on %s; attnjit ops take CUDA tensors" % (name, tensor.device))
    if device is not None and tensor.device != device:
        raise ValueError("%s is on %s, the other tensors on %s" % (name, tensor.device, device))
    if unit_last_stride and tensor.numel() > 0 and tensor.stride(-1) != 1:
        raise ValueError("%s must have unit stride in its last dimension, got strides %s" % (name, tensor.stride()))


def _check_shape(name, tensor, expected):
    if tuple(tensor.shape) != tuple(expected):
        raise ValueError("%s has shape %s; expected %s" % (name, tuple(tensor.shape), tuple(expected)))


def _cache_row_elements(cache_format, head_size, separate_scales=False):
    """Elements of one (token, head) K or V row of the paged cache
    (kvCacheRowElements in compiler/kernels/KvCacheFormat.h): D, then the inline
    f32 scale of the per-token-head formats (4 bytes, none when the scales are
    separate; int4 packs two values per byte)."""
    scale_bytes = 0 if separate_scales else 4
    if cache_format == "int4_per_token_head":
        return head_size // 2 + scale_bytes
    if cache_format.endswith("per_token_head"):
        return head_size + scale_bytes
    return head_size


def _paged_cache_layout(torch, kv_cache, device, dtype, format_name, cache_format, head_size, value_head_size,
                        num_kv_heads=None, separate_scales=False):
    """Checks the paged KV cache against the head sizes and returns its shape
    and strides as C fields. Two layouts (docs/architecture.md, DiffKV):
    (num_blocks, 2, block_size, Hkv, row), K = [:, 0] and V = [:, 1], for equal
    head sizes; vLLM's packed (num_blocks, block_size, Hkv, K row + V row), K =
    [..., :K row] and V after it, for any head sizes (the only DiffKV layout).
    Rows count elements of the cache's dtype (bytes for the quantized formats)."""
    if not isinstance(kv_cache, torch.Tensor):
        raise TypeError("kv_cache must be a torch.Tensor, got %s" % type(kv_cache).__name__)
    if cache_format not in CACHE_FORMATS:
        raise ValueError("%s %r is not one of %s" % (format_name, cache_format, ", ".join(CACHE_FORMATS)))
    key_row = _cache_row_elements(cache_format, head_size, separate_scales)
    value_row = _cache_row_elements(cache_format, value_head_size, separate_scales)
    packed = "(num_blocks, block_size, num_kv_heads, %d + %d)" % (key_row, value_row)
    if kv_cache.dim() not in (4, 5):
        raise ValueError("kv_cache must have 5 dimensions (num_blocks, 2, block_size, num_kv_heads, %d) or 4 (the "
                         "packed %s), got shape %s" % (key_row, packed, tuple(kv_cache.shape)))
    _check_tensor(torch, "kv_cache", kv_cache, kv_cache.dim(), None, device)
    if cache_format == "auto" and kv_cache.dtype != dtype:
        raise TypeError("kv_cache has dtype %s; %s 'auto' stores %s" % (kv_cache.dtype, format_name, dtype))
    if cache_format != "auto" and kv_cache.element_size() != 1:
        raise TypeError("kv_cache has dtype %s; %s %r stores one-byte elements (uint8, int8 or float8)" % (
            kv_cache.dtype, format_name, cache_format))
    if kv_cache.dim() == 5:
        num_blocks, two, block_size, heads, row = kv_cache.shape
        if value_head_size != head_size:
            raise ValueError("kv_cache has shape %s; a value head size (%d) other than the key head size (%d) "
                             "(DiffKV) needs vLLM's packed cache %s" % (tuple(kv_cache.shape), value_head_size,
                                                                        head_size, packed))
        if two != 2 or row != key_row:
            raise ValueError("kv_cache has shape %s; expected (num_blocks, 2, block_size, num_kv_heads, %d)" % (
                tuple(kv_cache.shape), key_row))
        strides = dict(kv_stride_block=kv_cache.stride(0), kv_stride_kv=kv_cache.stride(1),
                       kv_stride_token=kv_cache.stride(2), kv_stride_head=kv_cache.stride(3))
    else:
        num_blocks, block_size, heads, row = kv_cache.shape
        if row != key_row + value_row:
            raise ValueError("kv_cache has shape %s; the packed layout for key head size %d and value head size %d "
                             "is %s" % (tuple(kv_cache.shape), head_size, value_head_size, packed))
        # V starts right after the K part of the same (token, head) row.
        strides = dict(kv_stride_block=kv_cache.stride(0), kv_stride_kv=key_row,
                       kv_stride_token=kv_cache.stride(1), kv_stride_head=kv_cache.stride(2))
    if num_kv_heads is not None and heads != num_kv_heads:
        raise ValueError("kv_cache has shape %s with %d KV heads; the keys have %d" % (
            tuple(kv_cache.shape), heads, num_kv_heads))
    return dict(num_blocks=num_blocks, block_size=block_size, num_kv_heads=heads,
                value_head_size=value_head_size if value_head_size != head_size else 0, **strides)


def _scale_cache_fields(torch, k_scale_cache, v_scale_cache, cache, cache_format, device):
    """The C fields of separate per-token-head scales: both float32 tensors
    [num_blocks, block_size, Hkv] with the same strides (views into one
    allocation, as vLLM's, included)."""
    if k_scale_cache is None or v_scale_cache is None:
        raise ValueError("k_scale_cache and v_scale_cache go together: pass both or neither")
    if not cache_format.endswith("per_token_head"):
        raise ValueError("k_scale_cache/v_scale_cache need a per-token-head kv_cache_format, got %r" % cache_format)
    expected = (cache["num_blocks"], cache["block_size"], cache["num_kv_heads"])
    for name, tensor in (("k_scale_cache", k_scale_cache), ("v_scale_cache", v_scale_cache)):
        _check_tensor(torch, name, tensor, 3, torch.float32, device)
        _check_shape(name, tensor, expected)
    if k_scale_cache.stride() != v_scale_cache.stride():
        raise ValueError("k_scale_cache and v_scale_cache must have the same strides, got %s and %s" % (
            k_scale_cache.stride(), v_scale_cache.stride()))
    return dict(kv_scale_layout="separate", k_scale_cache=k_scale_cache.data_ptr(),
                v_scale_cache=v_scale_cache.data_ptr(), scale_stride_block=k_scale_cache.stride(0),
                scale_stride_token=k_scale_cache.stride(1), scale_stride_head=k_scale_cache.stride(2))


def paged_attention(q, kv_cache, out, block_tables, seq_lens, cu_seqlens_q, max_query_len, scale=None,
                    causal=True, kv_cache_format="auto", k_scale=None, v_scale=None, sliding_window=0,
                    softcap=0.0, alibi_slopes=None, sinks=None, lse=None, workspace=None, max_seq_len=0,
                    batch_invariant=False, check_bounds=False, stream=None, jit=None, min_seq_len=0,
                    alibi_sqrt=False, output_scale=None, causal_flags=None, num_sms=0, sliding_window_right=0,
                    q_scale=None, runtime_scratch=True, attention_chunk_size=0, mm_prefix_range=None,
                    qq_bias=None, fp32_precision="tf32", plan_tuning="environment", tune=False,
                    k_scale_cache=None, v_scale_cache=None):
    """out = attention of q over the paged KV cache (vLLM's unified attention).

    q [num_tokens, Hq, D] and out [num_tokens, Hq, Dv] of one float dtype; Dv =
    D, or DiffKV (vLLM's TRITON_ATTN_DIFFKV): another value head size, read
    from out. kv_cache: [num_blocks, 2, block_size, Hkv, row] (K =
    kv_cache[:, 0], V = kv_cache[:, 1]; equal head sizes only) or vLLM's packed
    [num_blocks, block_size, Hkv, K row + V row] (K = [..., :K row], V after
    it; any head sizes), in q's dtype for kv_cache_format "auto", else of
    one-byte elements (a row is D, or D + 4 bytes for the int8/fp8
    per-token-head formats, D/2 + 4 for int4). block_tables [num_seqs,
    max_blocks], seq_lens [num_seqs] (context + new tokens) and cu_seqlens_q
    [num_seqs + 1], int32. max_query_len is the longest query of the batch
    (given, to avoid a device synchronization); scale defaults to 1/sqrt(D).
    Optional: k_scale/v_scale (float32, one element: per-tensor fp8),
    alibi_slopes and sinks (float32 [Hq]; alibi_sqrt: vLLM's sqrt-ALiBi,
    -slope * sqrt(p - j) for keys at or before the query), output_scale
    (float32, one element: out is then torch.float8_e4m3fn, the output divided
    by it and saturated, vLLM's fp8 output), lse (float32 [Hq, num_tokens]
    output). Split-KV (decode batches too small to fill the GPU) sizes its
    segments by max_seq_len (the longest seq_lens entry, as vLLM's
    max_seqlen_k), or, with max_seq_len=0, cuts each sequence evenly on the
    GPU; its scratch is workspace (a byte tensor of at least
    paged_attention_workspace_bytes(..., Dv, ...)) or, without one, memory the
    library allocates stream-ordered for the call (runtime_scratch=False: such
    calls run unsplit).
    q_scale (float32, one element): q is torch.float8_e4m3fn standing for
    q * q_scale (vLLM's fp8 queries), computed in out's dtype.
    sliding_window_right bounds non-causal rows on the right apart from
    sliding_window (0: the window's own; r > 0: keys j - p < r; -1: none).
    check_bounds runs the bounds-checked kernel (block-table entries against
    kv_cache.shape[0], and the batch's lengths): a violation raises instead of
    reading out of bounds; it synchronizes the stream (debugging, not for CUDA
    graphs). min_seq_len (with max_seq_len; 0: unknown) marks batches of nearly
    equal lengths, which decode launches run at two CTAs per SM, and batches of
    uneven lengths, which a call with a workspace splits into segments of at
    most 3/8 of the longest sequence. causal_flags (int8 or bool [num_seqs],
    nonzero = causal) makes causality per sequence and overrides causal.
    num_sms is the SM count the split plan fills (0: the device's).
    attention_chunk_size > 0: chunked local attention (Llama 4), a query sees
    only keys of its own chunk of that many positions. mm_prefix_range (int32
    [num_seqs, ranges, 2], vLLM's PrefixLM ranges, [first, last] inclusive,
    first >= last unused): a query inside a range also sees its keys.
    qq_bias (float32 [n, n], vLLM's tree-attention bias): added to the score
    of query i of a sequence against the key of its query k, for i, k < n.
    fp32_precision (float32 q only): "tf32" runs the dots on the TF32 tensor
    cores (operands rounded to 11 significant bits, float32 sums: vLLM's
    numerics), "ieee" in exact float32.
    plan_tuning: "environment" (ATTNJIT_TUNE), "off" (the op's rules),
    "recorded" (a plan measured for the call's bucket on this device, where
    there is one) or "first-use" (recorded; an unseen bucket is tuned by this
    call). tune=True measures this call's candidate plans now and records the
    fastest (paged_attention_tune_raw; needs max_seq_len).
    k_scale_cache, v_scale_cache (float32 [num_blocks, block_size, Hkv], equal
    strides; per-token-head formats): the row scales kept apart from the cache,
    vLLM's current layout, whose rows are then D bytes (D/2 for int4). int4
    with them is vLLM's asymmetric int4_per_token_head (unsigned nibbles, the
    zero point in each scale's low mantissa bits), written in the rotated
    space of int4_rht."""
    torch = _require_torch()
    _check_tensor(torch, "q", q, 3)
    device = q.device
    num_tokens, num_query_heads, head_size = q.shape
    if q_scale is None:
        dtype = _float_dtype(torch, "q", q)
        compute_dtype = q.dtype
    else:
        # fp8 queries: the compute dtype is out's.
        _check_tensor(torch, "q", q, 3, torch.float8_e4m3fn, device)
        if output_scale is not None:
            raise ValueError("q_scale (fp8 q) with output_scale (fp8 out) leaves no tensor of the compute dtype; "
                             "use paged_attention_raw with dtype=")
        _check_tensor(torch, "out", out, 3, None, device)
        dtype = _float_dtype(torch, "out", out)
        compute_dtype = out.dtype
    out_dtype = compute_dtype if output_scale is None else torch.float8_e4m3fn
    _check_tensor(torch, "out", out, 3, out_dtype, device)
    if tuple(out.shape[:2]) != (num_tokens, num_query_heads):
        raise ValueError("out has shape %s; expected (%d, %d, value_head_size)" % (
            tuple(out.shape), num_tokens, num_query_heads))
    separate_scales = k_scale_cache is not None or v_scale_cache is not None
    cache = _paged_cache_layout(torch, kv_cache, device, compute_dtype, "kv_cache_format", kv_cache_format, head_size,
                                out.shape[2], separate_scales=separate_scales)
    if separate_scales:
        cache.update(_scale_cache_fields(torch, k_scale_cache, v_scale_cache, cache, kv_cache_format, device))
    _check_tensor(torch, "block_tables", block_tables, 2, torch.int32, device)
    _check_tensor(torch, "seq_lens", seq_lens, 1, torch.int32, device)
    _check_tensor(torch, "cu_seqlens_q", cu_seqlens_q, 1, torch.int32, device)
    num_seqs = seq_lens.shape[0]
    _check_shape("cu_seqlens_q", cu_seqlens_q, (num_seqs + 1,))
    if block_tables.shape[0] != num_seqs:
        raise ValueError("block_tables has %d rows for %d sequences" % (block_tables.shape[0], num_seqs))
    optional = {}
    for name, tensor, shape in (("k_scale", k_scale, (1,)), ("v_scale", v_scale, (1,)),
                                ("alibi_slopes", alibi_slopes, (num_query_heads,)),
                                ("sinks", sinks, (num_query_heads,)), ("output_scale", output_scale, (1,)),
                                ("q_scale", q_scale, (1,))):
        if tensor is not None:
            _check_tensor(torch, name, tensor.reshape(-1), 1, torch.float32, device)
            _check_shape(name, tensor.reshape(-1), shape)
            optional[name] = tensor.data_ptr()
    if lse is not None:
        _check_tensor(torch, "lse", lse, 2, torch.float32, device)
        if lse.shape[0] != num_query_heads or lse.shape[1] < num_tokens:
            raise ValueError("lse has shape %s; expected (%d, >= %d)" % (tuple(lse.shape), num_query_heads,
                                                                         num_tokens))
        optional.update(lse=lse.data_ptr(), lse_stride_head=lse.stride(0))
    if causal_flags is not None:
        if causal_flags.dtype not in (torch.int8, torch.bool):
            raise ValueError("causal_flags must be int8 or bool, got %s" % causal_flags.dtype)
        _check_tensor(torch, "causal_flags", causal_flags, 1, None, device)
        _check_shape("causal_flags", causal_flags, (num_seqs,))
        optional["causal_flags"] = causal_flags.data_ptr()
    if mm_prefix_range is not None:
        _check_tensor(torch, "mm_prefix_range", mm_prefix_range, 3, torch.int32, device)
        if mm_prefix_range.shape[0] != num_seqs or mm_prefix_range.shape[2] != 2:
            raise ValueError("mm_prefix_range has shape %s; expected (%d, ranges, 2)" % (
                tuple(mm_prefix_range.shape), num_seqs))
        if not mm_prefix_range.is_contiguous():
            raise ValueError("mm_prefix_range must be contiguous")
        optional.update(mm_prefix_range=mm_prefix_range.data_ptr(), mm_prefix_ranges=mm_prefix_range.shape[1])
    if qq_bias is not None:
        _check_tensor(torch, "qq_bias", qq_bias, 2, torch.float32, device)
        if qq_bias.shape[0] != qq_bias.shape[1] or qq_bias.stride(0) != qq_bias.shape[1]:
            raise ValueError("qq_bias must be a contiguous square [n, n] tensor, got shape %s strides %s" % (
                tuple(qq_bias.shape), qq_bias.stride()))
        optional.update(qq_bias=qq_bias.data_ptr(), qq_bias_stride=qq_bias.stride(0))
    if workspace is not None:
        _check_tensor(torch, "workspace", workspace.reshape(-1), 1, None, device)
        optional.update(workspace=workspace.data_ptr(),
                        workspace_bytes=workspace.numel() * workspace.element_size())
    with device_scope(device):
        (paged_attention_tune_raw if tune else paged_attention_raw)(
            jit=jit,
            dtype=dtype,
            plan_tuning=plan_tuning,
            num_query_heads=num_query_heads,
            head_size=head_size,
            causal=bool(causal),
            kv_cache_format=kv_cache_format,
            fp32_precision=fp32_precision,
            sliding_window=int(sliding_window),
            sliding_window_right=int(sliding_window_right),
            attention_chunk_size=int(attention_chunk_size),
            softcap=float(softcap),
            batch_invariant=bool(batch_invariant),
            check_bounds=bool(check_bounds),
            num_seqs=num_seqs,
            num_tokens=num_tokens,
            max_query_len=int(max_query_len),
            max_seq_len=int(max_seq_len),
            min_seq_len=int(min_seq_len),
            num_sms=int(num_sms),
            alibi_sqrt=int(bool(alibi_sqrt)),
            no_runtime_scratch=int(not runtime_scratch),
            scale=float(scale) if scale is not None else 1.0 / math.sqrt(head_size),
            out=out.data_ptr(),
            q=q.data_ptr(),
            kv_cache=kv_cache.data_ptr(),
            block_tables=block_tables.data_ptr(),
            seq_lens=seq_lens.data_ptr(),
            cu_seqlens_q=cu_seqlens_q.data_ptr(),
            q_stride_token=q.stride(0),
            q_stride_head=q.stride(1),
            o_stride_token=out.stride(0),
            o_stride_head=out.stride(1),
            block_table_stride=block_tables.stride(0),
            stream=stream_handle(stream, device).value,
            **cache,
            **optional,
        )
    return out


_RHT_SIGNS = {}


def int4_rht_signs(head_size):
    """vLLM's ±1 sign vector of the randomized Hadamard transform its int4
    per-token-head format is written and read in: float32 [head_size], drawn by
    torch's CPU generator seeded 0x9E3779B9, as vLLM draws it (the same vector
    for the same torch)."""
    torch = _require_torch()
    signs = _RHT_SIGNS.get(head_size)
    if signs is None:
        generator = torch.Generator(device="cpu")
        generator.manual_seed(0x9E3779B9)
        signs = 2.0 * torch.bernoulli(torch.full((head_size,), 0.5), generator=generator) - 1.0
        _RHT_SIGNS[head_size] = signs
    return signs


def int4_rht(x, inverse=False):
    """vLLM's randomized Hadamard transform along the last dimension (a power of
    two), computed in float32 and returned in x's dtype: H·(signs ∘ x), or with
    inverse=True signs ∘ (H·x), H the unnormalized Walsh-Hadamard matrix (H·H =
    D·I). vLLM's int4_per_token_head cache (kv_cache_format "int4_per_token_head"
    with k_scale_cache / v_scale_cache) holds rotated keys and values: rotate K
    and V before cache_write, q before paged_attention with scale / D, and the
    output back with int4_rht(out, inverse=True) / D."""
    torch = _require_torch()
    d = x.shape[-1]
    if d < 1 or d & (d - 1):
        raise ValueError("int4_rht needs a power-of-two last dimension, got %d" % d)
    signs = int4_rht_signs(d).to(x.device)
    y = x.float()
    if not inverse:
        y = y * signs
    shape = y.shape
    h = 1
    while h < d:
        pairs = y.reshape(*shape[:-1], d // (2 * h), 2, h)
        y = torch.stack((pairs[..., 0, :] + pairs[..., 1, :], pairs[..., 0, :] - pairs[..., 1, :]), dim=-2)
        y = y.reshape(shape)
        h *= 2
    if inverse:
        y = y * signs
    return y.to(x.dtype)


def paged_attention_workspace_bytes(max_num_tokens, num_query_heads, head_size, max_seq_len):
    """Bytes of split-KV workspace for batches up to these sizes (allocate once;
    head_size: the value head size Dv for DiffKV)."""
    sizes = [_checked_integer("max_num_tokens", max_num_tokens, ctypes.c_int64),
             _checked_integer("num_query_heads", num_query_heads, ctypes.c_int),
             _checked_integer("head_size", head_size, ctypes.c_int),
             _checked_integer("max_seq_len", max_seq_len, ctypes.c_int)]
    result = ctypes.c_uint64()
    check(lib.attnjit_paged_attention_workspace_bytes(*sizes, ctypes.byref(result)))
    return result.value


def cache_write(key, value, kv_cache, slot_mapping, cache_format="auto", k_scale=None, v_scale=None,
                check_bounds=False, stream=None, jit=None, k_scale_cache=None, v_scale_cache=None):
    """Scatters key [num_tokens, Hkv, D] and value [num_tokens, Hkv, Dv] into
    kv_cache at slot_mapping (int64; -1 skips a token). The cache is
    [num_blocks, 2, block_size, Hkv, row] (Dv = D only) or vLLM's packed
    [num_blocks, block_size, Hkv, K row + V row] (DiffKV: any Dv), with the
    keys' dtype for cache_format "auto", one-byte elements otherwise (a row is
    D, or D + 4 bytes for the int8/fp8 per-token-head formats, D/2 + 4 for
    int4). k_scale and v_scale (float32 tensors of one element, or of
    num_kv_heads elements: a scale per head) are for "fp8_e4m3" / "fp8_e5m2".
    check_bounds runs the bounds-checked kernel: a
    slot_mapping entry outside the cache raises instead of writing out of
    bounds (synchronizes the stream; debugging, not for CUDA graphs).
    k_scale_cache, v_scale_cache (float32 [num_blocks, block_size, Hkv], equal
    strides; per-token-head formats): the row scales go there instead of after
    each row's values (vLLM's current layout; rows are then D or D/2 bytes).
    int4 with them writes vLLM's asymmetric int4_per_token_head: scale (max -
    min) / 15, zero point round(-min / scale) in the scale's low four mantissa
    bits, unsigned nibbles; vLLM rotates keys and values by int4_rht first."""
    torch = _require_torch()
    _check_tensor(torch, "key", key, 3)
    dtype = _float_dtype(torch, "key", key)
    device = key.device
    num_tokens, num_kv_heads, head_size = key.shape
    _check_tensor(torch, "value", value, 3, key.dtype, device)
    if tuple(value.shape[:2]) != (num_tokens, num_kv_heads):
        raise ValueError("value has shape %s; expected (%d, %d, value_head_size)" % (
            tuple(value.shape), num_tokens, num_kv_heads))
    separate_scales = k_scale_cache is not None or v_scale_cache is not None
    cache = _paged_cache_layout(torch, kv_cache, device, key.dtype, "cache_format", cache_format, head_size,
                                value.shape[2], num_kv_heads, separate_scales=separate_scales)
    _check_tensor(torch, "slot_mapping", slot_mapping, 1, torch.int64, device)
    _check_shape("slot_mapping", slot_mapping, (num_tokens,))
    scales = {}
    per_head = k_scale is not None and k_scale.numel() == num_kv_heads and num_kv_heads > 1
    for name, scale in (("k_scale", k_scale), ("v_scale", v_scale)):
        if scale is not None:
            _check_tensor(torch, name, scale.reshape(-1), 1, torch.float32, device)
            _check_shape(name, scale.reshape(-1), (num_kv_heads if per_head else 1,))
            if not scale.is_contiguous():
                raise ValueError("%s must be contiguous" % name)
            scales[name] = scale.data_ptr()
    if per_head:
        scales["per_head_scales"] = 1
    if separate_scales:
        scales.update(_scale_cache_fields(torch, k_scale_cache, v_scale_cache, cache, cache_format, device))
    with device_scope(device):
        cache_write_raw(
            jit=jit,
            dtype=dtype,
            cache_format=cache_format,
            head_size=head_size,
            check_bounds=bool(check_bounds),
            num_tokens=num_tokens,
            key=key.data_ptr(),
            value=value.data_ptr(),
            kv_cache=kv_cache.data_ptr(),
            slot_mapping=slot_mapping.data_ptr(),
            key_stride_token=key.stride(0),
            key_stride_head=key.stride(1),
            value_stride_token=value.stride(0),
            value_stride_head=value.stride(1),
            stream=stream_handle(stream, device).value,
            **cache,
            **scales,
        )
    return kv_cache


def merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse, output_lse=None, stream=None,
                      jit=None, prefill_tokens_with_context=None, output_scale=None):
    """output = merge of two partial attention results by their LSEs (vLLM's
    merge_attn_states). Partial outputs [num_tokens, num_heads, head_size] of one
    float dtype, output of the same shape and dtype; LSEs float32 [num_heads,
    num_tokens], contiguous; output_lse (optional) receives the merged LSE.
    prefill_tokens_with_context (optional int): tokens at or after it take the
    suffix's output and LSE as they are. output_scale (optional float32 tensor of
    one element): output is then torch.float8_e4m3fn, merged * (1 / scale)
    saturated at +-448."""
    torch = _require_torch()
    _check_tensor(torch, "output", output, 3)
    device = output.device
    num_tokens, num_heads, head_size = output.shape
    scale_pointer = 0
    if output_scale is None:
        dtype = _float_dtype(torch, "output", output)
        partial_dtype = output.dtype
    else:
        if not isinstance(output_scale, torch.Tensor) or output_scale.numel() != 1:
            raise ValueError("output_scale must be a tensor of one float32")
        _check_tensor(torch, "output_scale", output_scale, output_scale.dim(), torch.float32, device)
        _check_tensor(torch, "output", output, 3, torch.float8_e4m3fn, device)
        _check_tensor(torch, "prefix_output", prefix_output, 3, None, device)
        dtype = _float_dtype(torch, "prefix_output", prefix_output)
        partial_dtype = prefix_output.dtype
        scale_pointer = output_scale.data_ptr()
    for name, tensor in (("prefix_output", prefix_output), ("suffix_output", suffix_output)):
        _check_tensor(torch, name, tensor, 3, partial_dtype, device)
        _check_shape(name, tensor, output.shape)
    lses = [("prefix_lse", prefix_lse), ("suffix_lse", suffix_lse)]
    if output_lse is not None:
        lses.append(("output_lse", output_lse))
    for name, tensor in lses:
        _check_tensor(torch, name, tensor, 2, torch.float32, device)
        _check_shape(name, tensor, (num_heads, num_tokens))
        if not tensor.is_contiguous():
            raise ValueError("%s must be contiguous ([num_heads, num_tokens] row-major)" % name)
    if prefill_tokens_with_context is None:
        prefill_tokens_with_context = -1
    elif isinstance(prefill_tokens_with_context, bool) or not isinstance(prefill_tokens_with_context, int) \
            or prefill_tokens_with_context < 0:
        raise ValueError("prefill_tokens_with_context must be a token count (an int >= 0) or None, got %r"
                         % (prefill_tokens_with_context,))
    with device_scope(device):
        merge_attn_states_raw(
            jit=jit,
            dtype=dtype,
            num_heads=num_heads,
            head_size=head_size,
            num_tokens=num_tokens,
            output=output.data_ptr(),
            output_lse=output_lse.data_ptr() if output_lse is not None else 0,
            prefix_output=prefix_output.data_ptr(),
            prefix_lse=prefix_lse.data_ptr(),
            suffix_output=suffix_output.data_ptr(),
            suffix_lse=suffix_lse.data_ptr(),
            output_stride_token=output.stride(0),
            output_stride_head=output.stride(1),
            prefix_stride_token=prefix_output.stride(0),
            prefix_stride_head=prefix_output.stride(1),
            suffix_stride_token=suffix_output.stride(0),
            suffix_stride_head=suffix_output.stride(1),
            stream=stream_handle(stream, device).value,
            output_scale=scale_pointer,
            prefill_tokens_with_context=prefill_tokens_with_context,
        )
    return output


def merge_partials(output, partial_outputs, partial_lses, output_lse=None, stream=None, jit=None):
    """output = merge of N partial attention results by their LSEs (the N-way
    merge of context-parallel decode). output [num_tokens, num_heads,
    head_size] of one float dtype; partial_outputs [N, num_tokens, num_heads,
    head_size] of that dtype; partial_lses float32 [N, num_heads, num_tokens],
    each partial's block contiguous; output_lse (optional, float32 [num_heads,
    num_tokens], contiguous) receives the merged LSE."""
    torch = _require_torch()
    _check_tensor(torch, "output", output, 3)
    dtype = _float_dtype(torch, "output", output)
    device = output.device
    num_tokens, num_heads, head_size = output.shape
    _check_tensor(torch, "partial_outputs", partial_outputs, 4, output.dtype, device)
    num_partials = partial_outputs.shape[0]
    _check_shape("partial_outputs", partial_outputs, (num_partials, num_tokens, num_heads, head_size))
    _check_tensor(torch, "partial_lses", partial_lses, 3, torch.float32, device)
    _check_shape("partial_lses", partial_lses, (num_partials, num_heads, num_tokens))
    if partial_lses.numel() > 0 and partial_lses.stride(1) != num_tokens:
        raise ValueError("partial_lses must hold each partial's [num_heads, num_tokens] block row-major, got "
                         "strides %s" % (partial_lses.stride(),))
    if output_lse is not None:
        _check_tensor(torch, "output_lse", output_lse, 2, torch.float32, device)
        _check_shape("output_lse", output_lse, (num_heads, num_tokens))
        if not output_lse.is_contiguous():
            raise ValueError("output_lse must be contiguous ([num_heads, num_tokens] row-major)")
    with device_scope(device):
        merge_partials_raw(
            jit=jit,
            dtype=dtype,
            num_heads=num_heads,
            head_size=head_size,
            num_partials=num_partials,
            num_tokens=num_tokens,
            output=output.data_ptr(),
            output_lse=output_lse.data_ptr() if output_lse is not None else 0,
            partial_outputs=partial_outputs.data_ptr(),
            partial_lses=partial_lses.data_ptr(),
            output_stride_token=output.stride(0),
            output_stride_head=output.stride(1),
            partial_stride_partial=partial_outputs.stride(0),
            partial_stride_token=partial_outputs.stride(1),
            partial_stride_head=partial_outputs.stride(2),
            lse_stride_partial=partial_lses.stride(0),
            stream=stream_handle(stream, device).value,
        )
    return output


def mla_cache_write(kv_c, k_pe, kv_cache, slot_mapping, cache_format="auto", scale=None, stream=None,
                    jit=None):
    """Writes token t's kv_c ‖ k_pe into row slot_mapping[t] of the MLA latent
    cache (vLLM's concat_and_cache_mla; -1 skips a token), the cache mla_decode
    reads.

    kv_c [num_tokens, L] and k_pe [num_tokens, R] of one float dtype, unit
    stride in their last dimension (any token stride: often two slices of one
    projection output); L = kv_lora_rank and R = rope_dim are read from the
    shapes (512 + 64 or 256 + 64). kv_cache [num_blocks, block_size, L + R] in
    kv_c's dtype for cache_format "auto", of one-byte elements for "fp8_e4m3"
    / "fp8_e5m2", which store x / scale (scale: a float32 tensor of one
    element, read on the device). slot_mapping [num_tokens], int64."""
    torch = _require_torch()
    _check_tensor(torch, "kv_c", kv_c, 2)
    dtype = _float_dtype(torch, "kv_c", kv_c)
    device = kv_c.device
    num_tokens, kv_lora_rank = kv_c.shape
    _check_tensor(torch, "k_pe", k_pe, 2, kv_c.dtype, device)
    if k_pe.shape[0] != num_tokens:
        raise ValueError("k_pe has shape %s; expected (%d, rope_dim): one row per kv_c row" % (
            tuple(k_pe.shape), num_tokens))
    rope_dim = k_pe.shape[1]
    _check_tensor(torch, "kv_cache", kv_cache, 3, None, device)
    if cache_format not in ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"):
        raise ValueError("cache_format %r is not one the MLA cache write takes (auto, fp8_e4m3, fp8_e5m2)" % (
            cache_format,))
    if cache_format == "auto" and kv_cache.dtype != kv_c.dtype:
        raise TypeError("kv_cache has dtype %s; cache_format 'auto' stores kv_c's %s" % (kv_cache.dtype, kv_c.dtype))
    if cache_format != "auto" and kv_cache.element_size() != 1:
        raise TypeError("kv_cache has dtype %s; cache_format %r stores one-byte elements (uint8 or float8)" % (
            kv_cache.dtype, cache_format))
    if kv_cache.shape[2] != kv_lora_rank + rope_dim:
        raise ValueError("kv_cache has shape %s; expected (num_blocks, block_size, %d + %d): kv_c's and k_pe's widths"
                         % (tuple(kv_cache.shape), kv_lora_rank, rope_dim))
    _check_tensor(torch, "slot_mapping", slot_mapping, 1, torch.int64, device)
    _check_shape("slot_mapping", slot_mapping, (num_tokens,))
    optional = {}
    if scale is not None:
        _check_tensor(torch, "scale", scale.reshape(-1), 1, torch.float32, device)
        _check_shape("scale", scale.reshape(-1), (1,))
        optional["scale"] = scale.data_ptr()
    with device_scope(device):
        mla_cache_write_raw(
            jit=jit,
            dtype=dtype,
            cache_format=cache_format,
            kv_lora_rank=kv_lora_rank,
            rope_dim=rope_dim,
            block_size=kv_cache.shape[1],
            num_tokens=num_tokens,
            kv_c=kv_c.data_ptr(),
            k_pe=k_pe.data_ptr(),
            kv_cache=kv_cache.data_ptr(),
            slot_mapping=slot_mapping.data_ptr(),
            kv_c_stride_token=kv_c.stride(0),
            k_pe_stride_token=k_pe.stride(0),
            cache_stride_block=kv_cache.stride(0),
            cache_stride_token=kv_cache.stride(1),
            stream=stream_handle(stream, device).value,
            **optional,
        )
    return kv_cache


def gather_cache_raw(jit=None, validate_only=False, **fields):
    """The cache gather from the C struct's fields (pointers as ints)."""
    _run(s.GatherCacheParams, lib.attnjit_gather_cache_params_init, lib.attnjit_gather_cache,
         lib.attnjit_gather_cache_validate, jit, validate_only, fields)


def gather_cache(cache, dst, block_table, cu_seq_lens, cache_format="auto", scale=None, seq_starts=None,
                 stream=None, jit=None):
    """Gathers a batch's cached rows into dst (vLLM's cp_gather_cache; with an
    fp8 cache_format and scale, gather_and_maybe_dequant_cache): dst[cu_seq_lens[s]
    + i] = the cache row of position seq_starts[s] + i of sequence s, through
    its block_table row, times scale for fp8 caches.

    cache [num_blocks, block_size, entry] (dst's dtype for "auto", one-byte
    elements for "fp8_e4m3" / "fp8_e5m2"); dst [num_tokens, entry] of a float
    dtype, num_tokens = cu_seq_lens[-1] (dst's rows); block_table [num_seqs,
    max_blocks], cu_seq_lens [num_seqs + 1] and seq_starts [num_seqs] int32
    (seq_starts: each sequence's first position, default 0); scale: a float32
    tensor of one element, read on the device."""
    torch = _require_torch()
    _check_tensor(torch, "dst", dst, 2)
    dtype = _float_dtype(torch, "dst", dst)
    device = dst.device
    _check_tensor(torch, "cache", cache, 3, None, device)
    if cache_format not in ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"):
        raise ValueError("cache_format %r is not one the gather takes (auto, fp8_e4m3, fp8_e5m2)" % (cache_format,))
    if cache_format == "auto" and cache.dtype != dst.dtype:
        raise TypeError("cache has dtype %s; cache_format 'auto' copies into dst's %s" % (cache.dtype, dst.dtype))
    if cache_format != "auto" and cache.element_size() != 1:
        raise TypeError("cache has dtype %s; cache_format %r reads one-byte elements (uint8 or float8)" % (
            cache.dtype, cache_format))
    if dst.shape[1] != cache.shape[2]:
        raise ValueError("dst has shape %s; expected (num_tokens, %d): the cache's row width" % (
            tuple(dst.shape), cache.shape[2]))
    _check_tensor(torch, "block_table", block_table, 2, torch.int32, device)
    _check_tensor(torch, "cu_seq_lens", cu_seq_lens, 1, torch.int32, device)
    num_seqs = block_table.shape[0]
    _check_shape("cu_seq_lens", cu_seq_lens, (num_seqs + 1,))
    optional = {}
    if seq_starts is not None:
        _check_tensor(torch, "seq_starts", seq_starts, 1, torch.int32, device)
        _check_shape("seq_starts", seq_starts, (num_seqs,))
        optional["seq_starts"] = seq_starts.data_ptr()
    if scale is not None:
        _check_tensor(torch, "scale", scale.reshape(-1), 1, torch.float32, device)
        _check_shape("scale", scale.reshape(-1), (1,))
        optional["scale"] = scale.data_ptr()
    with device_scope(device):
        gather_cache_raw(
            jit=jit,
            dtype=dtype,
            cache_format=cache_format,
            entry_size=cache.shape[2],
            block_size=cache.shape[1],
            num_seqs=num_seqs,
            num_tokens=dst.shape[0],
            dst=dst.data_ptr(),
            cache=cache.data_ptr(),
            block_table=block_table.data_ptr(),
            cu_seq_lens=cu_seq_lens.data_ptr(),
            dst_stride_token=dst.stride(0),
            block_table_stride=block_table.stride(0),
            cache_stride_block=cache.stride(0),
            cache_stride_token=cache.stride(1),
            stream=stream_handle(stream, device).value,
            **optional,
        )
    return dst


def swap_blocks_raw(jit=None, validate_only=False, **fields):
    """Block copies from the C struct's fields (addresses as ints; block_mapping
    a ctypes pointer to int64 pairs in host memory)."""
    _run(s.SwapBlocksParams, lib.attnjit_swap_blocks_params_init, lib.attnjit_swap_blocks,
         lib.attnjit_swap_blocks_validate, jit, validate_only, fields)


def _block_cache(torch, name, cache):
    if not isinstance(cache, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, got %s" % (name, type(cache).__name__))
    if cache.dim() < 1 or cache.shape[0] == 0:
        raise ValueError("%s must have a block dimension first, got shape %s" % (name, tuple(cache.shape)))
    if not cache[0].is_contiguous():
        raise ValueError("%s's blocks must each be contiguous (strides %s)" % (name, cache.stride()))
    if cache.device.type not in ("cuda", "cpu"):
        raise ValueError("%s is on %s; block copies take CUDA or CPU tensors" % (name, cache.device))


def swap_blocks(src, dst, block_mapping, block_size_in_bytes=None, stream=None, jit=None):
    """Copies whole cache blocks (vLLM's swap_blocks): for each row (s, d) of
    block_mapping, in order, dst[d] = src[s].

    src and dst: caches with the block index first, each block contiguous, on
    the GPU or on the host (pinned host memory for a copy that overlaps other
    work and for CUDA-graph capture; at least one side on the GPU); src may be
    dst (a copy inside one cache). block_mapping: int64 [num_pairs, 2] on the
    CPU (vLLM keeps it there too: reading a GPU tensor would synchronize).
    block_size_in_bytes defaults to one src block; vLLM's argument of that name
    is accepted. Runs of consecutive blocks become one copy; many blocks inside one
    GPU run as one copy_blocks kernel, host <-> GPU as one batch of copies."""
    torch = _require_torch()
    _block_cache(torch, "src", src)
    _block_cache(torch, "dst", dst)
    if src.device.type == "cpu" and dst.device.type == "cpu":
        raise ValueError("src and dst are both on the CPU; one side must be a CUDA tensor")
    if src.device.type == "cuda" and dst.device.type == "cuda" and src.device != dst.device:
        raise ValueError("src is on %s and dst on %s; copies between GPUs are not supported" % (src.device, dst.device))
    if not isinstance(block_mapping, torch.Tensor):
        block_mapping = torch.tensor(block_mapping, dtype=torch.int64).reshape(-1, 2)
    if block_mapping.device.type != "cpu":
        raise ValueError("block_mapping is on %s; it must be on the CPU" % (block_mapping.device,))
    if block_mapping.dtype != torch.int64 or block_mapping.dim() != 2 or block_mapping.shape[1] != 2:
        raise ValueError("block_mapping must be int64 [num_pairs, 2], got %s %s" % (
            block_mapping.dtype, tuple(block_mapping.shape)))
    block_mapping = block_mapping.contiguous()
    src_block_bytes = src[0].numel() * src.element_size()
    dst_block_bytes = dst[0].numel() * dst.element_size()
    block_bytes = src_block_bytes if block_size_in_bytes is None else int(block_size_in_bytes)
    if block_bytes > min(src_block_bytes, dst_block_bytes):
        raise ValueError("block_size_in_bytes %d exceeds a block of src (%d bytes) or dst (%d bytes)" % (
            block_bytes, src_block_bytes, dst_block_bytes))
    device = src.device if src.device.type == "cuda" else dst.device
    with device_scope(device):
        swap_blocks_raw(
            jit=jit,
            block_bytes=block_bytes,
            src_block_stride=src.stride(0) * src.element_size(),
            dst_block_stride=dst.stride(0) * dst.element_size(),
            src_num_blocks=src.shape[0],
            dst_num_blocks=dst.shape[0],
            src=src.data_ptr(),
            dst=dst.data_ptr(),
            block_mapping=block_mapping.data_ptr(),
            num_pairs=block_mapping.shape[0],
            stream=stream_handle(stream, device).value,
        )
    return dst


def copy_blocks(key_caches, value_caches, block_mapping, stream=None, jit=None):
    """vLLM's copy_blocks: inside every layer's key and value cache, block d =
    block s for each row (s, d) of block_mapping (int64 [num_pairs, 2] on the CPU),
    in order."""
    for cache in list(key_caches) + list(value_caches):
        swap_blocks(cache, cache, block_mapping, stream=stream, jit=jit)


def convert_cache_raw(jit=None, validate_only=False, **fields):
    """The fp8 conversion from the C struct's fields (pointers as ints)."""
    _run(s.ConvertCacheParams, lib.attnjit_convert_cache_params_init, lib.attnjit_convert_cache,
         lib.attnjit_convert_cache_validate, jit, validate_only, fields)


def convert_fp8(dst, src, scale=1.0, kv_dtype="fp8", stream=None, jit=None):
    """vLLM's convert_fp8: converts a whole cache (any contiguous tensor) to or
    from per-tensor fp8. With a one-byte dst (uint8 or a float8 dtype) and a
    float src: dst = fp8(src / scale), rounded to nearest even and saturated;
    with a one-byte src and a float dst: dst = src * scale. kv_dtype: "fp8" or
    "fp8_e4m3" (e4m3fn), or "fp8_e5m2"; a float8 tensor must be of that format.
    src and dst: CUDA tensors of equal element counts, contiguous, not
    overlapping; scale: a Python float (finite, not 0). Returns dst."""
    torch = _require_torch()
    formats = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
    if kv_dtype not in formats:
        raise ValueError("kv_dtype %r is not one convert_fp8 takes (fp8, fp8_e4m3, fp8_e5m2)" % (kv_dtype,))
    cache_format = formats[kv_dtype]
    for name, tensor in (("dst", dst), ("src", src)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError("%s must be a torch.Tensor, got %s" % (name, type(tensor).__name__))
        if tensor.device.type != "cuda":
            raise ValueError("%s is on %s; attnjit ops take CUDA tensors" % (name, tensor.device))
        if not tensor.is_contiguous():
            raise ValueError("%s must be contiguous (convert_fp8 walks both tensors as one flat range)" % name)
        float8 = {torch.float8_e4m3fn: "fp8_e4m3", torch.float8_e5m2: "fp8_e5m2"}.get(tensor.dtype)
        if float8 is not None and float8 != cache_format:
            raise TypeError("%s has dtype %s, but kv_dtype %r is %s" % (name, tensor.dtype, kv_dtype, cache_format))
    if src.device != dst.device:
        raise ValueError("src is on %s, dst on %s" % (src.device, dst.device))
    if src.numel() != dst.numel():
        raise ValueError("src has %d elements, dst %d" % (src.numel(), dst.numel()))
    if dst.element_size() == 1 and src.element_size() != 1:
        to_fp8, wide = True, src
    elif src.element_size() == 1 and dst.element_size() != 1:
        to_fp8, wide = False, dst
    else:
        raise TypeError("convert_fp8 converts between a float tensor and a one-byte one; got src %s and dst %s" % (
            src.dtype, dst.dtype))
    with device_scope(dst.device):
        convert_cache_raw(
            jit=jit,
            dtype=_float_dtype(torch, "src" if to_fp8 else "dst", wide),
            cache_format=cache_format,
            to_fp8=int(to_fp8),
            num_elements=src.numel(),
            src=src.data_ptr(),
            dst=dst.data_ptr(),
            scale=float(scale),
            stream=stream_handle(stream, dst.device).value,
        )
    return dst


def mla_decode(q, kv_cache, out, block_tables, seq_lens, max_seq_len=0, scale=None, kv_cache_format="auto",
               kv_scale=None, lse=None, workspace=None, sum_seq_lens=0, batch_invariant=False, split_rule="balanced",
               num_sms=0, stream=None, jit=None, runtime_scratch=True, fp32_precision="tf32"):
    """out = MLA latent decode of q over the latent cache (vLLM's TRITON_MLA decode).

    q [B, H, L + R] and out [B, H, L] of one dtype (float32, float16 or bfloat16; L =
    kv_lora_rank, R = rope_dim, read from the shapes); kv_cache [num_blocks,
    block_size, L + R] in q's dtype for kv_cache_format "auto", of one-byte
    elements for "fp8_e4m3" (with kv_scale, a float32 tensor of one element);
    block_tables [B, max_blocks] and seq_lens [B], int32. scale defaults to
    1/sqrt(L + R) (pass the model's). Optional: lse, a float32 [B, H] view
    (any strides: lse.t() of an [H, B] tensor gives the merge kernels' layout)
    that receives the natural-log LSE. Split-KV needs max_seq_len; its scratch
    is workspace (a tensor of at least mla_decode_workspace_bytes bytes) or,
    without one, memory the library allocates stream-ordered for the call
    (runtime_scratch=False: such calls run unsplit); sum_seq_lens
    (the batch's total keys, when known on the host) refines the "balanced"
    split rule; "vllm" is vLLM's rule. fp32_precision (float32 q): "tf32"
    (the default, vLLM's numerics) or "ieee", as paged_attention's."""
    torch = _require_torch()
    _check_tensor(torch, "q", q, 3)
    dtype = _float_dtype(torch, "q", q)
    device = q.device
    num_seqs, num_heads, q_width = q.shape
    _check_tensor(torch, "out", out, 3, q.dtype, device)
    if out.shape[0] != num_seqs or out.shape[1] != num_heads or out.shape[2] >= q_width:
        raise ValueError("out has shape %s; expected (%d, %d, kv_lora_rank) with kv_lora_rank < q's %d" % (
            tuple(out.shape), num_seqs, num_heads, q_width))
    kv_lora_rank = out.shape[2]
    rope_dim = q_width - kv_lora_rank
    _check_tensor(torch, "kv_cache", kv_cache, 3, None, device)
    if kv_cache_format not in ("auto", "fp8", "fp8_e4m3"):
        raise ValueError("kv_cache_format %r is not one the MLA decode takes (auto, fp8_e4m3)" % (kv_cache_format,))
    if kv_cache_format == "auto" and kv_cache.dtype != q.dtype:
        raise TypeError("kv_cache has dtype %s; kv_cache_format 'auto' stores q's %s" % (kv_cache.dtype, q.dtype))
    if kv_cache_format != "auto" and kv_cache.element_size() != 1:
        raise TypeError("kv_cache has dtype %s; kv_cache_format %r stores one-byte elements" % (
            kv_cache.dtype, kv_cache_format))
    if kv_cache.shape[2] != q_width:
        raise ValueError("kv_cache has shape %s; expected (num_blocks, block_size, %d)" % (
            tuple(kv_cache.shape), q_width))
    _check_tensor(torch, "block_tables", block_tables, 2, torch.int32, device)
    _check_tensor(torch, "seq_lens", seq_lens, 1, torch.int32, device)
    _check_shape("seq_lens", seq_lens, (num_seqs,))
    if block_tables.shape[0] != num_seqs:
        raise ValueError("block_tables has %d rows for %d sequences" % (block_tables.shape[0], num_seqs))
    optional = {}
    if kv_scale is not None:
        _check_tensor(torch, "kv_scale", kv_scale.reshape(-1), 1, torch.float32, device)
        _check_shape("kv_scale", kv_scale.reshape(-1), (1,))
        optional["kv_scale"] = kv_scale.data_ptr()
    if lse is not None:
        _check_tensor(torch, "lse", lse, 2, torch.float32, device, unit_last_stride=False)
        _check_shape("lse", lse, (num_seqs, num_heads))
        optional.update(lse=lse.data_ptr(), lse_stride_batch=lse.stride(0), lse_stride_head=lse.stride(1))
    if workspace is not None:
        _check_tensor(torch, "workspace", workspace.reshape(-1), 1, None, device)
        optional.update(workspace=workspace.data_ptr(),
                        workspace_bytes=workspace.numel() * workspace.element_size())
    with device_scope(device):
        mla_decode_raw(
            jit=jit,
            dtype=dtype,
            kv_cache_format=kv_cache_format,
            kv_lora_rank=kv_lora_rank,
            rope_dim=rope_dim,
            num_heads=num_heads,
            block_size=kv_cache.shape[1],
            batch_invariant=bool(batch_invariant),
            split_rule=split_rule,
            num_seqs=num_seqs,
            max_seq_len=int(max_seq_len),
            sum_seq_lens=int(sum_seq_lens),
            num_sms=int(num_sms),
            fp32_precision=fp32_precision,
            no_runtime_scratch=int(not runtime_scratch),
            scale=float(scale) if scale is not None else 1.0 / math.sqrt(q_width),
            out=out.data_ptr(),
            q=q.data_ptr(),
            kv_cache=kv_cache.data_ptr(),
            block_tables=block_tables.data_ptr(),
            seq_lens=seq_lens.data_ptr(),
            q_stride_batch=q.stride(0),
            q_stride_head=q.stride(1),
            o_stride_batch=out.stride(0),
            o_stride_head=out.stride(1),
            block_table_stride=block_tables.stride(0),
            kv_stride_block=kv_cache.stride(0),
            kv_stride_token=kv_cache.stride(1),
            stream=stream_handle(stream, device).value,
            **optional,
        )
    return out


def mla_decode_workspace_bytes(max_num_seqs, num_heads, kv_lora_rank, max_seq_len):
    """Bytes of MLA split-KV workspace for batches up to these sizes (0: such
    batches never split). Allocate once, pass to every call."""
    sizes = [_checked_integer(name, value, ctypes.c_int) for name, value in
             (("max_num_seqs", max_num_seqs), ("num_heads", num_heads), ("kv_lora_rank", kv_lora_rank),
              ("max_seq_len", max_seq_len))]
    result = ctypes.c_uint64()
    check(lib.attnjit_mla_decode_workspace_bytes(*sizes, ctypes.byref(result)))
    return result.value
