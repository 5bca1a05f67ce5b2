"""ctypes mirrors of the structs in include/attnjit/attnjit.h, field for field
and in the same order (a new C field is one line here; _library checks at
import that the sizes agree with the loaded library)."""

import ctypes

_size = ctypes.c_size_t
_i32 = ctypes.c_int
_i64 = ctypes.c_int64
_u64 = ctypes.c_uint64
_f32 = ctypes.c_float
_f64 = ctypes.c_double
_str = ctypes.c_char_p
_ptr = ctypes.c_void_p


class JitOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("device", _i32),
        ("cache_dir", _str),
        ("bypass_cache", _i32),
        ("target", _str),
    ]


class ParamInfo(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("name", _str),
        ("type", _str),
        ("kind", _i32),
        ("align_bytes", _i64),
        ("divisibility", _i64),
    ]


class Arg(ctypes.Structure):
    _fields_ = [("kind", _i32), ("pointer", _u64), ("integer", _i64), ("real", _f64)]


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


class CompileStats(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("target", ctypes.c_char * 16),
        ("origin", _i32),
        ("passes_ms", _f64),
        ("llvm_lower_ms", _f64),
        ("llvm_optimize_ms", _f64),
        ("ptx_emit_ms", _f64),
        ("load_ms", _f64),
        ("threads", _i32),
        ("dynamic_shared_bytes", _i32),
        ("registers", _i32),
        ("spill_bytes", _i32),
        ("static_shared_bytes", _i32),
    ]


# The per-token-head scale layout and the separate scale tensors, last in both
# the paged-attention and the cache-write structs.
_SEPARATE_SCALE_FIELDS = [
    ("kv_scale_layout", _i32),
    ("k_scale_cache", _u64),
    ("v_scale_cache", _u64),
    ("scale_stride_block", _i64),
    ("scale_stride_token", _i64),
    ("scale_stride_head", _i64),
]


class PagedAttentionParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("dtype", _i32),
        ("num_query_heads", _i32),
        ("num_kv_heads", _i32),
        ("head_size", _i32),
        ("block_size", _i32),
        ("causal", _i32),
        ("kv_cache_format", _i32),
        ("sliding_window", _i32),
        ("softcap", _f64),
        ("batch_invariant", _i32),
        ("num_seqs", _i32),
        ("num_tokens", _i64),
        ("max_query_len", _i32),
        ("max_seq_len", _i32),
        ("scale", _f32),
        ("out", _u64),
        ("q", _u64),
        ("kv_cache", _u64),
        ("block_tables", _u64),
        ("seq_lens", _u64),
        ("cu_seqlens_q", _u64),
        ("k_scale", _u64),
        ("v_scale", _u64),
        ("alibi_slopes", _u64),
        ("sinks", _u64),
        ("lse", _u64),
        ("lse_stride_head", _i64),
        ("workspace", _u64),
        ("workspace_bytes", _u64),
        ("q_stride_token", _i64),
        ("q_stride_head", _i64),
        ("o_stride_token", _i64),
        ("o_stride_head", _i64),
        ("block_table_stride", _i64),
        ("kv_stride_block", _i64),
        ("kv_stride_kv", _i64),
        ("kv_stride_token", _i64),
        ("kv_stride_head", _i64),
        ("stream", _ptr),
        ("causal_flags", _u64),
        ("num_sms", _i32),
        ("value_head_size", _i32),
        ("check_bounds", _i32),
        ("num_blocks", _i32),
        ("min_seq_len", _i32),
        ("alibi_sqrt", _i32),
        ("output_scale", _u64),
        ("sliding_window_right", _i32),
        ("q_scale", _u64),
        ("no_runtime_scratch", _i32),
        ("attention_chunk_size", _i32),
        ("mm_prefix_range", _u64),
        ("mm_prefix_ranges", _i32),
        ("qq_bias", _u64),
        ("qq_bias_stride", _i64),
        ("fp32_precision", _i32),
        ("plan_tuning", _i32),
    ] + _SEPARATE_SCALE_FIELDS


class CacheWriteParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("dtype", _i32),
        ("cache_format", _i32),
        ("num_kv_heads", _i32),
        ("head_size", _i32),
        ("block_size", _i32),
        ("num_tokens", _i64),
        ("key", _u64),
        ("value", _u64),
        ("kv_cache", _u64),
        ("slot_mapping", _u64),
        ("k_scale", _u64),
        ("v_scale", _u64),
        ("key_stride_token", _i64),
        ("key_stride_head", _i64),
        ("value_stride_token", _i64),
        ("value_stride_head", _i64),
        ("kv_stride_block", _i64),
        ("kv_stride_kv", _i64),
        ("kv_stride_token", _i64),
        ("kv_stride_head", _i64),
        ("stream", _ptr),
        ("value_head_size", _i32),
        ("check_bounds", _i32),
        ("num_blocks", _i32),
        ("per_head_scales", _i32),
    ] + _SEPARATE_SCALE_FIELDS


class MergeAttnStatesParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("dtype", _i32),
        ("num_heads", _i32),
        ("head_size", _i32),
        ("num_tokens", _i64),
        ("output", _u64),
        ("output_lse", _u64),
        ("prefix_output", _u64),
        ("prefix_lse", _u64),
        ("suffix_output", _u64),
        ("suffix_lse", _u64),
        ("output_stride_token", _i64),
        ("output_stride_head", _i64),
        ("prefix_stride_token", _i64),
        ("prefix_stride_head", _i64),
        ("suffix_stride_token", _i64),
        ("suffix_stride_head", _i64),
        ("stream", _ptr),
        ("output_scale", _u64),
        ("prefill_tokens_with_context", _i64),
    ]


class MergePartialsParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("dtype", _i32),
        ("num_heads", _i32),
        ("head_size", _i32),
        ("num_partials", _i32),
        ("num_tokens", _i64),
        ("output", _u64),
        ("output_lse", _u64),
        ("partial_outputs", _u64),
        ("partial_lses", _u64),
        ("output_stride_token", _i64),
        ("output_stride_head", _i64),
        ("partial_stride_partial", _i64),
        ("partial_stride_token", _i64),
        ("partial_stride_head", _i64),
        ("lse_stride_partial", _i64),
        ("stream", _ptr),
    ]


class MlaCacheWriteParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("dtype", _i32),
        ("cache_format", _i32),
        ("kv_lora_rank", _i32),
        ("rope_dim", _i32),
        ("block_size", _i32),
        ("num_tokens", _i64),
        ("kv_c", _u64),
        ("k_pe", _u64),
        ("kv_cache", _u64),
        ("slot_mapping", _u64),
        ("scale", _u64),
        ("kv_c_stride_token", _i64),
        ("k_pe_stride_token", _i64),
        ("cache_stride_block", _i64),
        ("cache_stride_token", _i64),
        ("stream", _ptr),
    ]


class GatherCacheParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("dtype", _i32),
        ("cache_format", _i32),
        ("entry_size", _i32),
        ("block_size", _i32),
        ("num_seqs", _i32),
        ("num_tokens", _i64),
        ("dst", _u64),
        ("cache", _u64),
        ("block_table", _u64),
        ("cu_seq_lens", _u64),
        ("seq_starts", _u64),
        ("scale", _u64),
        ("dst_stride_token", _i64),
        ("block_table_stride", _i64),
        ("cache_stride_block", _i64),
        ("cache_stride_token", _i64),
        ("stream", _ptr),
    ]


class SwapBlocksParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("block_bytes", _i64),
        ("src_block_stride", _i64),
        ("dst_block_stride", _i64),
        ("src_num_blocks", _i64),
        ("dst_num_blocks", _i64),
        ("src", _u64),
        ("dst", _u64),
        ("block_mapping", _ptr),
        ("num_pairs", _i64),
        ("stream", _ptr),
    ]


class ConvertCacheParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("dtype", _i32),
        ("cache_format", _i32),
        ("to_fp8", _i32),
        ("num_elements", _i64),
        ("src", _u64),
        ("dst", _u64),
        ("scale", _f32),
        ("stream", _ptr),
    ]


class MlaDecodeParams(ctypes.Structure):
    _fields_ = [
        ("struct_size", _size),
        ("dtype", _i32),
        ("kv_cache_format", _i32),
        ("kv_lora_rank", _i32),
        ("rope_dim", _i32),
        ("num_heads", _i32),
        ("block_size", _i32),
        ("batch_invariant", _i32),
        ("split_rule", _i32),
        ("num_seqs", _i32),
        ("max_seq_len", _i32),
        ("sum_seq_lens", _i64),
        ("num_sms", _i32),
        ("scale", _f32),
        ("out", _u64),
        ("q", _u64),
        ("kv_cache", _u64),
        ("block_tables", _u64),
        ("seq_lens", _u64),
        ("kv_scale", _u64),
        ("lse", _u64),
        ("lse_stride_batch", _i64),
        ("lse_stride_head", _i64),
        ("workspace", _u64),
        ("workspace_bytes", _u64),
        ("q_stride_batch", _i64),
        ("q_stride_head", _i64),
        ("o_stride_batch", _i64),
        ("o_stride_head", _i64),
        ("block_table_stride", _i64),
        ("kv_stride_block", _i64),
        ("kv_stride_token", _i64),
        ("stream", _ptr),
        ("no_runtime_scratch", _i32),
        ("fp32_precision", _i32),
    ]
