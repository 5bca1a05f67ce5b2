"""Tests of the Python package (python/attnjit) over libattnjit.so.

Run by ctest (tests/CMakeLists.txt) with ATTNJIT_LIBRARY set to the build's
library; by hand: ATTNJIT_LIBRARY=build/lib/libattnjit.so python3 tests/python/test_attnjit.py
CPU parts always run; the torch parts skip (with the reason printed) without
torch, the GPU parts without a CUDA driver."""

import ctypes
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import attnjit  # noqa: E402
from attnjit import _library, _structs  # noqa: E402

MERGE_SPEC = """family: merge_attn_states
params:
  dtype: f16
  num_heads: 4
  head_size: 64
  output_lse: true
"""

try:
    import torch  # noqa: F401

    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

GPU, NO_GPU_REASON = attnjit.driver_status()


# Fields that validate (fake, aligned pointers): a decode batch of 2 sequences,
# Hq 32 over Hkv 8, D 128, block 16.
PAGED_FIELDS = dict(num_query_heads=32, num_kv_heads=8, head_size=128, block_size=16, num_seqs=2, num_tokens=2,
                    max_query_len=1, scale=0.088, out=0x1000, q=0x2000, kv_cache=0x3000, block_tables=0x4000,
                    seq_lens=0x5000, cu_seqlens_q=0x6000, q_stride_token=4096, q_stride_head=128,
                    o_stride_token=4096, o_stride_head=128, block_table_stride=64, kv_stride_block=32768,
                    kv_stride_kv=16384, kv_stride_token=1024, kv_stride_head=128)
CACHE_WRITE_FIELDS = dict(dtype="bf16", num_kv_heads=8, head_size=128, block_size=16, num_tokens=3, key=0x1000,
                          value=0x2000, kv_cache=0x3000, slot_mapping=0x4000, key_stride_token=1024,
                          key_stride_head=128, value_stride_token=1024, value_stride_head=128,
                          kv_stride_block=32768, kv_stride_kv=16384, kv_stride_token=1024, kv_stride_head=128)
# MLA decode: 4 sequences, 16 heads, latent 512 + 64, block 64.
MLA_FIELDS = dict(num_heads=16, block_size=64, num_seqs=4, max_seq_len=1000, scale=0.0417, out=0x1000, q=0x2000,
                  kv_cache=0x3000, block_tables=0x4000, seq_lens=0x5000, q_stride_batch=16 * 576,
                  q_stride_head=576, o_stride_batch=16 * 512, o_stride_head=512, block_table_stride=32,
                  kv_stride_block=64 * 576, kv_stride_token=576)
# MLA cache write: 7 bf16 tokens into an fp8_e4m3 latent cache of 512 + 64, block
# 64; kv_c and k_pe are slices of one [7, 576] projection.
MLA_CACHE_WRITE_FIELDS = dict(cache_format="fp8_e4m3", block_size=64, num_tokens=7, kv_c=0x10000,
                              k_pe=0x10000 + 1024, kv_cache=0x20000, slot_mapping=0x30000, scale=0x40000,
                              kv_c_stride_token=576, k_pe_stride_token=576, cache_stride_block=64 * 576,
                              cache_stride_token=576)
# Four f16 partials of 5 tokens, 8 heads of 128.
MERGE_PARTIALS_FIELDS = dict(dtype="f16", num_heads=8, head_size=128, num_partials=4, num_tokens=5, output=0x1000,
                             partial_outputs=0x2000, partial_lses=0x3000, output_stride_token=1024,
                             output_stride_head=128, partial_stride_partial=5 * 1024, partial_stride_token=1024,
                             partial_stride_head=128, lse_stride_partial=40)


def random_block_tables(torch, seq_lens, block, spare_blocks=0):
    """Block tables [num_seqs, max blocks] (int32, host) over a random permutation
    of the cache's blocks, and the cache's block count."""
    blocks_per_seq = [(n + block - 1) // block for n in seq_lens]
    num_blocks = sum(blocks_per_seq) + spare_blocks
    order, start = torch.randperm(num_blocks).tolist(), 0
    tables = torch.zeros(len(seq_lens), max(blocks_per_seq), dtype=torch.int32)
    for b, count in enumerate(blocks_per_seq):
        tables[b, :count] = torch.tensor(order[start:start + count], dtype=torch.int32)
        start += count
    return tables, num_blocks


def cumulative(lengths):
    """cu_seqlens: [0, l0, l0 + l1, ...]."""
    sums = [0]
    for n in lengths:
        sums.append(sums[-1] + n)
    return sums


def merge_arguments(base=0x7F0000000000, tokens=37):
    return [base + 4096 * i for i in range(6)] + [tokens] + [4 * 64, 64] * 3


class CpuTests(unittest.TestCase):
    def test_version_and_library(self):
        self.assertRegex(attnjit.version(), r"^\d+\.\d+\.\d+$")
        self.assertTrue(os.path.exists(attnjit.library_path) or "/" not in attnjit.library_path)

    def test_a_checkout_never_loads_a_sanitizer_build_by_itself(self):
        import tempfile
        with tempfile.TemporaryDirectory() as repository:
            def build(name, sanitized, mtime):
                lib = os.path.join(repository, name, "lib")
                os.makedirs(lib)
                open(os.path.join(lib, "libattnjit.so"), "w").close()
                os.utime(os.path.join(lib, "libattnjit.so"), (mtime, mtime))
                with open(os.path.join(repository, name, "CMakeCache.txt"), "w") as cache:
                    cache.write("ATTNJIT_SANITIZE:BOOL=%s\n" % ("ON" if sanitized else "OFF"))
                return os.path.join(lib, "libattnjit.so")
            plain = build("build", False, 1000)
            build("build-asan", True, 2000)  # newer, as after scripts/test
            other = build("build-bundle", False, 1500)
            saved = (_library._PACKAGE_DIR, os.environ.pop("ATTNJIT_LIBRARY", None))
            try:
                _library._PACKAGE_DIR = os.path.join(repository, "python", "attnjit")
                candidates = [c for c in _library._candidates() if c.startswith(repository)]
            finally:
                _library._PACKAGE_DIR = saved[0]
                if saved[1] is not None:
                    os.environ["ATTNJIT_LIBRARY"] = saved[1]
            self.assertEqual(candidates, [plain, other])

    def test_struct_layouts_match_the_library(self):
        for struct, init in (
            (_structs.JitOptions, _library.lib.attnjit_jit_options_init),
            (_structs.PagedAttentionParams, _library.lib.attnjit_paged_attention_params_init),
            (_structs.CacheWriteParams, _library.lib.attnjit_cache_write_params_init),
            (_structs.MergeAttnStatesParams, _library.lib.attnjit_merge_attn_states_params_init),
            (_structs.MergePartialsParams, _library.lib.attnjit_merge_partials_params_init),
            (_structs.MlaCacheWriteParams, _library.lib.attnjit_mla_cache_write_params_init),
            (_structs.MlaDecodeParams, _library.lib.attnjit_mla_decode_params_init),
            (_structs.GatherCacheParams, _library.lib.attnjit_gather_cache_params_init),
            (_structs.SwapBlocksParams, _library.lib.attnjit_swap_blocks_params_init),
        ):
            self.assertEqual(_library.library_struct_size(struct, init), ctypes.sizeof(struct), struct.__name__)

    def test_appended_fields_are_last_and_reach_the_library(self):
        self.assertEqual([name for name, _ in _structs.PagedAttentionParams._fields_[-22:]],
                         ["value_head_size", "check_bounds", "num_blocks", "min_seq_len", "alibi_sqrt",
                          "output_scale", "sliding_window_right", "q_scale", "no_runtime_scratch",
                          "attention_chunk_size", "mm_prefix_range", "mm_prefix_ranges", "qq_bias",
                          "qq_bias_stride", "fp32_precision", "plan_tuning", "kv_scale_layout", "k_scale_cache",
                          "v_scale_cache", "scale_stride_block", "scale_stride_token", "scale_stride_head"])
        self.assertEqual([name for name, _ in _structs.MlaDecodeParams._fields_[-2:]],
                         ["no_runtime_scratch", "fp32_precision"])
        self.assertEqual([name for name, _ in _structs.MergeAttnStatesParams._fields_[-2:]],
                         ["output_scale", "prefill_tokens_with_context"])
        self.assertEqual([name for name, _ in _structs.CacheWriteParams._fields_[-10:]],
                         ["value_head_size", "check_bounds", "num_blocks", "per_head_scales", "kv_scale_layout",
                          "k_scale_cache", "v_scale_cache", "scale_stride_block", "scale_stride_token",
                          "scale_stride_head"])
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"scale_stride_block \(0\) must be positive"):
            attnjit.ops.cache_write_raw(validate_only=True, kv_scale_layout="separate", k_scale_cache=0x90000,
                                        v_scale_cache=0x98000, **dict(CACHE_WRITE_FIELDS,
                                                                      cache_format="int8_per_token_head"))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, "per_head_scales needs a per-tensor fp8 cache"):
            attnjit.ops.cache_write_raw(validate_only=True, per_head_scales=1, **CACHE_WRITE_FIELDS)
        # check_bounds is read: the op then needs num_blocks.
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"paged attention: num_blocks \(0\) must be"):
            attnjit.ops.paged_attention_raw(validate_only=True, check_bounds=True, **PAGED_FIELDS)
        attnjit.ops.paged_attention_raw(validate_only=True, check_bounds=True, num_blocks=40, **PAGED_FIELDS)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"min_seq_len \(5\) must be 0 \(unknown\)"):
            attnjit.ops.paged_attention_raw(validate_only=True, min_seq_len=5, **PAGED_FIELDS)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"alibi_sqrt needs alibi_slopes"):
            attnjit.ops.paged_attention_raw(validate_only=True, alibi_sqrt=1, **PAGED_FIELDS)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"output_scale \(0x90002\) is not 4-byte aligned"):
            attnjit.ops.paged_attention_raw(validate_only=True, output_scale=0x90002, **PAGED_FIELDS)
        attnjit.ops.paged_attention_raw(validate_only=True, output_scale=0x90000, **PAGED_FIELDS)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"q_scale \(0x90001\) is not 4-byte aligned"):
            attnjit.ops.paged_attention_raw(validate_only=True, q_scale=0x90001, **PAGED_FIELDS)
        attnjit.ops.paged_attention_raw(validate_only=True, q_scale=0x90000, **PAGED_FIELDS)
        # sliding_window_right is read: causal kernels refuse it.
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"sliding_window_right \(8\) needs non-causal"):
            attnjit.ops.paged_attention_raw(validate_only=True, sliding_window_right=8, **PAGED_FIELDS)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"value_head_size \(1100\)"):
            attnjit.ops.paged_attention_raw(validate_only=True, value_head_size=1100, **PAGED_FIELDS)
        # The mask fields are read: chunk size, ranges and the bias.
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"attention_chunk_size \(-1\) must not be"):
            attnjit.ops.paged_attention_raw(validate_only=True, attention_chunk_size=-1, **PAGED_FIELDS)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"mm_prefix_ranges \(0\) must be the ranges"):
            attnjit.ops.paged_attention_raw(validate_only=True, mm_prefix_range=0x90000, **PAGED_FIELDS)
        attnjit.ops.paged_attention_raw(validate_only=True, mm_prefix_range=0x90000, mm_prefix_ranges=2,
                                        **PAGED_FIELDS)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"qq_bias_stride \(0\) must be"):
            attnjit.ops.paged_attention_raw(validate_only=True, qq_bias=0x90000, **PAGED_FIELDS)
        attnjit.ops.paged_attention_raw(validate_only=True, qq_bias=0x90000, qq_bias_stride=4, **PAGED_FIELDS)
        # fp32_precision is read: values outside the enum are refused by name.
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"fp32_precision 7 is not an attnjit_fp32_precision"):
            attnjit.ops.paged_attention_raw(validate_only=True, fp32_precision=7, **PAGED_FIELDS)
        with self.assertRaisesRegex(ValueError, r"fp32_precision 'fast' is not one of tf32, ieee"):
            attnjit.ops.paged_attention_raw(validate_only=True, fp32_precision="fast", **PAGED_FIELDS)
        attnjit.ops.paged_attention_raw(validate_only=True, fp32_precision="ieee", **PAGED_FIELDS)
        # plan_tuning is read likewise.
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"plan_tuning 9 is not an attnjit_plan_tuning"):
            attnjit.ops.paged_attention_raw(validate_only=True, plan_tuning=9, **PAGED_FIELDS)
        with self.assertRaisesRegex(ValueError, r"plan_tuning 'always' is not one of environment, off"):
            attnjit.ops.paged_attention_raw(validate_only=True, plan_tuning="always", **PAGED_FIELDS)
        attnjit.ops.paged_attention_raw(validate_only=True, plan_tuning="first-use", **PAGED_FIELDS)
        # Separate per-token-head scales: the layout, the tensors and their strides are read.
        with self.assertRaisesRegex(ValueError, r"kv_scale_layout 'apart' is not one of inline, separate"):
            attnjit.ops.paged_attention_raw(validate_only=True, kv_scale_layout="apart", **PAGED_FIELDS)
        separate = dict(PAGED_FIELDS, kv_cache_format="fp8_per_token_head", kv_scale_layout="separate",
                        k_scale_cache=0x90000, v_scale_cache=0x98000)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"scale_stride_block \(0\) must be positive"):
            attnjit.ops.paged_attention_raw(validate_only=True, **separate)
        attnjit.ops.paged_attention_raw(validate_only=True, scale_stride_block=128, scale_stride_token=8,
                                        scale_stride_head=1, **separate)
        # Tuning refuses calls that always keep the rules (before touching the GPU).
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"always takes the op's rules"):
            attnjit.ops.paged_attention_tune_raw(batch_invariant=1, **PAGED_FIELDS)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"num_blocks \(0\) must be"):
            attnjit.ops.cache_write_raw(validate_only=True, check_bounds=True, **CACHE_WRITE_FIELDS)
        attnjit.ops.cache_write_raw(validate_only=True, check_bounds=True, num_blocks=40, **CACHE_WRITE_FIELDS)

    def test_warmup_names_a_bad_static_field(self):
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"head_size \(1100\)"):
            attnjit.ops.paged_attention_warmup(num_query_heads=32, num_kv_heads=8, head_size=1100, block_size=16)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"threads \(-2\) must be 0"):
            attnjit.ops.paged_attention_warmup(threads=-2, num_query_heads=32, num_kv_heads=8, head_size=128,
                                               block_size=16)

    def test_integers_outside_their_c_type_raise_before_the_library(self):
        # ctypes would pass 2**32 + 32 as 32 and -16 as a huge pointer.
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"num_query_heads \(4294967328\) is outside"):
            attnjit.ops.paged_attention_raw(validate_only=True, **dict(PAGED_FIELDS, num_query_heads=2**32 + 32))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"^out \(-16\) is outside the range"):
            attnjit.ops.paged_attention_raw(validate_only=True, **dict(PAGED_FIELDS, out=-16))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, "num_tokens must be an integer"):
            attnjit.ops.paged_attention_raw(validate_only=True, **dict(PAGED_FIELDS, num_tokens=2.5))
        # In range for C, out of range for the op: the op's own message (no crash
        # from deriving tile sizes out of it).
        with self.assertRaisesRegex(attnjit.InvalidArgumentError,
                                    r"num_query_heads \(1073741825\) must be between 1 and 1024"):
            attnjit.ops.paged_attention_raw(validate_only=True,
                                            **dict(PAGED_FIELDS, num_query_heads=2**30 + 1, num_kv_heads=1))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"num_tokens \(-1\) must be between"):
            attnjit.ops.paged_attention_workspace_bytes(-1, 32, 128, 4096)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"max_num_tokens \(18446744073709551616\)"):
            attnjit.ops.paged_attention_workspace_bytes(2**64, 32, 128, 4096)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"num_heads \(0\) must be between 1 and 128"):
            attnjit.ops.mla_decode_workspace_bytes(4, 0, 512, 4096)

    def test_mla_decode_raw_errors_carry_the_c_message(self):
        params = _structs.MlaDecodeParams()
        _library.lib.attnjit_mla_decode_params_init(ctypes.byref(params))
        self.assertEqual((params.dtype, params.kv_lora_rank, params.rope_dim, params.split_rule), (2, 512, 64, 0))
        attnjit.ops.mla_decode_raw(validate_only=True, **MLA_FIELDS)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"^mla decode: q is a null pointer$"):
            attnjit.ops.mla_decode_raw(validate_only=True, **dict(MLA_FIELDS, q=0))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, "kv_scale is a null pointer"):
            attnjit.ops.mla_decode_raw(validate_only=True, **dict(MLA_FIELDS, kv_cache_format="fp8_e4m3"))
        attnjit.ops.mla_decode_raw(validate_only=True, **dict(MLA_FIELDS, split_rule="vllm"))
        with self.assertRaisesRegex(ValueError, "split_rule 'even'"):
            attnjit.ops.mla_decode_raw(validate_only=True, **dict(MLA_FIELDS, split_rule="even"))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, "split_rule 5 is not an attnjit_mla_split_rule"):
            attnjit.ops.mla_decode_raw(validate_only=True, **dict(MLA_FIELDS, split_rule=5))
        with self.assertRaisesRegex(TypeError, "did you mean 'kv_lora_rank'"):
            attnjit.ops.mla_decode_raw(kv_lora_rnk=512)
        self.assertGreater(attnjit.ops.mla_decode_workspace_bytes(4, 16, 512, 4096), 0)
        self.assertEqual(attnjit.ops.mla_decode_workspace_bytes(4, 16, 512, 200), 0)
        if not GPU:
            with self.assertRaisesRegex(attnjit.NoDriverError, "CUDA driver not available"):
                attnjit.ops.mla_decode_raw(**MLA_FIELDS)

    def test_mla_cache_write_raw_errors_carry_the_c_message(self):
        params = _structs.MlaCacheWriteParams()
        _library.lib.attnjit_mla_cache_write_params_init(ctypes.byref(params))
        self.assertEqual((params.struct_size, params.dtype, params.cache_format, params.kv_lora_rank,
                          params.rope_dim, params.block_size),
                         (ctypes.sizeof(_structs.MlaCacheWriteParams), 2, 0, 512, 64, 0))
        attnjit.ops.mla_cache_write_raw(validate_only=True, **MLA_CACHE_WRITE_FIELDS)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError,
                                    r"^mla cache write: parameter 'kv_c' \(ptr<global, bf16>\) is a null pointer$"):
            attnjit.ops.mla_cache_write_raw(validate_only=True, **dict(MLA_CACHE_WRITE_FIELDS, kv_c=0))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"kv_lora_rank \+ rope_dim = 448 \+ 64"):
            attnjit.ops.mla_cache_write_raw(validate_only=True, **dict(MLA_CACHE_WRITE_FIELDS, kv_lora_rank=448))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"cache_stride_token \(560\) is smaller"):
            attnjit.ops.mla_cache_write_raw(validate_only=True,
                                            **dict(MLA_CACHE_WRITE_FIELDS, cache_stride_token=560))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, "int8_per_token_head is not supported"):
            attnjit.ops.mla_cache_write_raw(validate_only=True,
                                            **dict(MLA_CACHE_WRITE_FIELDS, cache_format="int8_per_token_head"))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, "the cache format auto has no per-tensor scale"):
            attnjit.ops.mla_cache_write_raw(validate_only=True, **dict(MLA_CACHE_WRITE_FIELDS, cache_format="auto"))
        attnjit.ops.mla_cache_write_raw(validate_only=True,
                                        **dict(MLA_CACHE_WRITE_FIELDS, cache_format="auto", scale=0))
        with self.assertRaisesRegex(TypeError, "did you mean 'kv_c_stride_token'"):
            attnjit.ops.mla_cache_write_raw(kv_c_stride=576)
        attnjit.ops.mla_cache_write_raw(**dict(MLA_CACHE_WRITE_FIELDS, num_tokens=0))  # launches nothing
        if not GPU:
            with self.assertRaisesRegex(attnjit.NoDriverError, "CUDA driver not available"):
                attnjit.ops.mla_cache_write_raw(**MLA_CACHE_WRITE_FIELDS)

    def test_gather_cache_raw_errors_carry_the_c_message(self):
        fields = dict(block_size=16, num_seqs=2, num_tokens=10, dst=0x10000, cache=0x20000, block_table=0x30000,
                      cu_seq_lens=0x40000, dst_stride_token=576, cache_stride_token=576, cache_stride_block=16 * 576,
                      block_table_stride=8)
        attnjit.ops.gather_cache_raw(validate_only=True, **fields)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"gather cache: num_seqs \(0\) must be at least 1"):
            attnjit.ops.gather_cache_raw(validate_only=True, **dict(fields, num_seqs=0))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"entry_size \(5000\) must be between 1 and 4096"):
            attnjit.ops.gather_cache_raw(validate_only=True, **dict(fields, entry_size=5000))

    def test_convert_cache_raw_errors_carry_the_c_message(self):
        fields = dict(num_elements=4096, src=0x100000, dst=0x800000, scale=0.5)
        attnjit.ops.convert_cache_raw(validate_only=True, **fields)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"convert cache: src and dst overlap"):
            attnjit.ops.convert_cache_raw(validate_only=True, **dict(fields, dst=0x100100))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"scale \(0\.000000\) must be finite and not zero"):
            attnjit.ops.convert_cache_raw(validate_only=True, **dict(fields, scale=0.0))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"kv_cache_dtype auto is not supported"):
            attnjit.ops.convert_cache_raw(validate_only=True, **dict(fields, cache_format="auto"))

    def test_swap_blocks_raw_checks_the_mapping(self):
        mapping = (ctypes.c_int64 * 4)(0, 1, 2, 9)
        fields = dict(block_bytes=64, src_num_blocks=4, dst_num_blocks=4, src=0x10000, dst=0x20000,
                      block_mapping=ctypes.addressof(mapping), num_pairs=2)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError,
                                    r"swap_blocks: block_mapping\[1\]: destination block 9 is outside dst's 4 blocks"):
            attnjit.ops.swap_blocks_raw(validate_only=True, **fields)
        attnjit.ops.swap_blocks_raw(validate_only=True, **dict(fields, dst_num_blocks=10))
        attnjit.ops.swap_blocks_raw(**dict(fields, num_pairs=0))  # copies nothing

    def test_merge_partials_raw_errors_carry_the_c_message(self):
        attnjit.ops.merge_partials_raw(validate_only=True, **MERGE_PARTIALS_FIELDS)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError,
                                    r"^merge_partials: num_partials \(0\) must be at least 1$"):
            attnjit.ops.merge_partials_raw(validate_only=True, **dict(MERGE_PARTIALS_FIELDS, num_partials=0))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"lse_stride_partial \(39\) is smaller"):
            attnjit.ops.merge_partials_raw(validate_only=True, **dict(MERGE_PARTIALS_FIELDS, lse_stride_partial=39))
        attnjit.ops.merge_partials_raw(**dict(MERGE_PARTIALS_FIELDS, num_tokens=0))  # launches nothing
        if not GPU:
            with self.assertRaisesRegex(attnjit.NoDriverError, "CUDA driver not available"):
                attnjit.ops.merge_partials_raw(**MERGE_PARTIALS_FIELDS)

    def test_bad_runtime_options_raise_value_errors(self):
        with self.assertRaises(ValueError) as caught:
            attnjit.Jit(device=-1)
        self.assertIsInstance(caught.exception, attnjit.InvalidArgumentError)
        self.assertIn("device -1 is not a device ordinal", str(caught.exception))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, "sm_99"):
            attnjit.Jit(target="sm_99")
        self.assertEqual(attnjit.Jit(target="sm_80").target, "sm_80")

    def test_kernel_compiles_from_spec_text(self):
        jit = attnjit.Jit(target="sm_80")
        kernel = jit.kernel_from_spec_text(MERGE_SPEC)
        self.assertEqual(kernel.name, "merge_attn_states_f16_h4_d64_lse")
        self.assertEqual(len(kernel.parameters), 13)
        self.assertEqual(kernel.parameters[0], attnjit.Parameter("output", "ptr<global, f16>", "pointer", 16, 0))
        self.assertEqual(kernel.stats().origin, "not-loaded")
        ptx = kernel.compile().ptx
        self.assertIn(".entry merge_attn_states_f16_h4_d64_lse", ptx)
        self.assertIn(".target sm_80", ptx)
        stats = kernel.stats()
        self.assertEqual(stats.target, "sm_80")
        self.assertGreater(stats.passes_ms, 0)
        self.assertGreater(stats.llvm_optimize_ms, 0)
        self.assertGreater(stats.ptx_emit_ms, 0)
        self.assertEqual(stats.threads, 128)
        self.assertEqual(stats.registers, -1)

    def test_timeline_instruments_the_prefill_schedules(self):
        # bench/timeline.py finds its events in the PTX of each schedule the
        # prefill kernels have; a change of the PTX's shape shows here first.
        spec_loader = importlib.util.spec_from_file_location(
            "timeline", os.path.join(HERE, "..", "..", "bench", "timeline.py"))
        timeline = importlib.util.module_from_spec(spec_loader)
        spec_loader.loader.exec_module(timeline)
        jit = attnjit.Jit(target="sm_90a")
        base = ("family: unified_attention\nparams:\n  dtype: bf16\n  num_query_heads: 32\n  num_kv_heads: 8\n"
                "  head_size: 128\n  block_size: 16\n  causal: true\n  block_m: 128\n  num_warps: 8\n"
                "  tile_size: 64\n  warp_specialize: true\n")
        expected = {
            "": ["top", "mbarrier wait 0", "MMA issue 0", "MMA wait 0 #1", "slot arrive 0", "mbarrier wait 1",
                 "MMA issue 1", "MMA wait 0 #2", "slot arrive 1"],
            "  softmax_turns: true\n": ["top", "mbarrier wait 0", "MMA issue 0", "MMA wait 0 #1", "slot arrive 0",
                                         "turn taken 0", "turn handed 0", "mbarrier wait 1", "MMA issue 1",
                                         "MMA wait 0 #2", "slot arrive 1"],
            "  ping_pong: true\n  overlap_softmax: true\n": [
                "top", "mbarrier wait 0", "mbarrier wait 1", "turn taken 0", "MMA issue 0", "turn handed 0",
                "MMA wait 1 #1", "slot arrive 0", "MMA wait 0 #2", "slot arrive 1"],
        }
        with tempfile.TemporaryDirectory() as directory:
            for knobs, events in expected.items():
                kernel = jit.kernel_from_spec_text(base + knobs)
                source = os.path.join(directory, "in.ptx")
                with open(source, "w") as f:
                    f.write(kernel.compile().ptx)
                timeline.instrument(source, directory)
                stamped = os.path.join(directory, kernel.name + ".ptx")
                with open(stamped + ".json") as f:
                    loops = json.load(f)
                roles = sorted(loop["role"] for loop in loops.values())
                self.assertEqual(roles, ["compute", "compute", "producer", "producer"], kernel.name)
                for loop in loops.values():
                    if loop["role"] == "compute":
                        self.assertEqual(loop["events"], events, kernel.name)
                ptxas = shutil.which("ptxas")
                if ptxas:
                    run = subprocess.run([ptxas, "-arch=sm_90a", stamped, "-o", os.devnull], capture_output=True,
                                         text=True)
                    self.assertEqual(run.returncode, 0, run.stderr)

    def test_spec_errors_are_located(self):
        jit = attnjit.default_jit()
        with self.assertRaises(attnjit.SpecError) as caught:
            jit.kernel_from_spec_text("family: merge_attn_states\nparams:\n  dtype: f16\n  num_hedas: 4\n")
        self.assertIsInstance(caught.exception, ValueError)
        self.assertRegex(str(caught.exception), r"<spec text>:4:\d+: error: .*num_hedas")
        spec = os.path.join(HERE, "..", "..", "specs", "merge_attn_states.yaml")
        with self.assertRaisesRegex(attnjit.SpecError, "did you mean 'merge_attn_states_bf16_h32_d128_lse'"):
            jit.kernel_from_spec_file(spec, "merge_attn_states_bf16_h32_d128_lsf")
        self.assertEqual(jit.kernel_from_spec_file(spec, "merge_attn_states_bf16_h32_d128_lse").name,
                         "merge_attn_states_bf16_h32_d128_lse")

    def test_launch_arguments_are_checked(self):
        kernel = attnjit.default_jit().kernel_from_spec_text(MERGE_SPEC)
        with self.assertRaisesRegex(ValueError, "takes 13 arguments, got 12"):
            kernel.launch((3, 4), merge_arguments()[:-1])
        bad = merge_arguments()
        bad[7] = 250
        with self.assertRaisesRegex(ValueError, r"parameter 'o_stride_token' \(i64\) is 250, not a multiple of 8"):
            kernel.launch((3, 4), bad)
        bad = merge_arguments()
        bad[6] = 3.5
        with self.assertRaisesRegex(ValueError, "takes an integer, got a real number"):
            kernel.launch((3, 4), bad)
        with self.assertRaisesRegex(ValueError, "empty dimension"):
            kernel.launch((0, 4), merge_arguments())
        if not GPU:
            with self.assertRaisesRegex(attnjit.NoDriverError, "CUDA driver not available"):
                kernel.launch((3, 4), merge_arguments())

    def test_raw_ops_validate_with_the_c_message(self):
        strides = dict(output_stride_token=256, output_stride_head=64, prefix_stride_token=256,
                       prefix_stride_head=64, suffix_stride_token=256, suffix_stride_head=64)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"merge_attn_states: parameter 'output' .*null"):
            attnjit.ops.merge_attn_states_raw(validate_only=True, dtype="f16", num_heads=4, head_size=64,
                                              num_tokens=3, **strides)
        attnjit.ops.merge_attn_states_raw(validate_only=True, dtype="f16", num_heads=4, head_size=64, num_tokens=3,
                                          output=0x1000, prefix_output=0x2000, prefix_lse=0x3000,
                                          suffix_output=0x4000, suffix_lse=0x5000, stream=0, **strides)
        merge = dict(validate_only=True, dtype="f16", num_heads=4, head_size=64, num_tokens=3, output=0x1000,
                     prefix_output=0x2000, prefix_lse=0x3000, suffix_output=0x4000, suffix_lse=0x5000, **strides)
        attnjit.ops.merge_attn_states_raw(output_scale=0x6000, prefill_tokens_with_context=1, **merge)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, r"prefill_tokens_with_context \(-2\) must be -1"):
            attnjit.ops.merge_attn_states_raw(prefill_tokens_with_context=-2, **merge)
        with self.assertRaisesRegex(TypeError, "did you mean 'num_heads'"):
            attnjit.ops.merge_attn_states_raw(num_head=4)
        with self.assertRaisesRegex(ValueError, "dtype 'f8'"):
            attnjit.ops.cache_write_raw(dtype="f8")
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, "num_seqs \\(0\\) must be at least 1"):
            attnjit.ops.paged_attention_raw(validate_only=True, num_query_heads=32, num_kv_heads=8, head_size=128,
                                            block_size=16)
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, "has no per-tensor scales"):
            attnjit.ops.cache_write_raw(validate_only=True, dtype="bf16", cache_format="auto", num_kv_heads=8,
                                        head_size=128, block_size=16, num_tokens=2, key=0x1000, value=0x2000,
                                        kv_cache=0x3000, slot_mapping=0x4000, k_scale=0x5000,
                                        key_stride_token=1024, key_stride_head=128, value_stride_token=1024,
                                        value_stride_head=128, kv_stride_block=32768, kv_stride_kv=16384,
                                        kv_stride_token=1024, kv_stride_head=128)

    def test_tensor_ops_without_torch_say_so(self):
        if HAVE_TORCH:
            self.skipTest("torch is installed: the tensor ops are tested below")
        with self.assertRaisesRegex(TypeError, "need torch"):
            attnjit.ops.merge_attn_states(None, None, None, None, None)


@unittest.skipUnless(HAVE_TORCH, "torch is not installed: tensor checks skipped")
class TorchArgumentTests(unittest.TestCase):
    def test_cpu_tensors_and_bad_dtypes_are_refused_before_the_library(self):
        q = torch.zeros(4, 8, 64, dtype=torch.float16)
        with self.assertRaisesRegex(ValueError, "q is on cpu"):
            attnjit.ops.paged_attention(q, q, q, q, q, q, 1)
        lse = torch.zeros(8, 4)
        # The device is checked with the rank, before the dtype (tested on the GPU).
        with self.assertRaisesRegex(ValueError, "output is on cpu"):
            attnjit.ops.merge_attn_states(q.double(), q, lse, q, lse)
        with self.assertRaisesRegex(ValueError, "output is on cpu"):
            attnjit.ops.merge_partials(q, q.unsqueeze(0), lse.unsqueeze(0))
        mla_q = torch.zeros(2, 16, 576, dtype=torch.bfloat16)
        # float32 is an MLA dtype too: the device is what fails here.
        with self.assertRaisesRegex(ValueError, "q is on cpu"):
            attnjit.ops.mla_decode(mla_q.float(), mla_q, mla_q, mla_q, mla_q)
        with self.assertRaisesRegex(ValueError, "q is on cpu"):
            attnjit.ops.mla_decode(mla_q, mla_q, mla_q, mla_q, mla_q)
        kv_c = torch.zeros(3, 512, dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, "kv_c must have 2 dimensions"):
            attnjit.ops.mla_cache_write(kv_c.unsqueeze(1), kv_c, kv_c, kv_c)
        with self.assertRaisesRegex(ValueError, "kv_c is on cpu"):
            attnjit.ops.mla_cache_write(kv_c, kv_c, kv_c, kv_c)


def sequence_slots(torch, tables_host, seq_lens_host, block):
    """The cache slots of every key of every sequence, in order (int64, on the GPU)."""
    return torch.cat([tables_host[b, torch.arange(n) // block].long() * block + torch.arange(n) % block
                      for b, n in enumerate(seq_lens_host)]).cuda()


def decode_over_slots(torch, cache, slots, seq_lens_host, q, scale):
    """float64 decode (one query per sequence) over a [blocks, 2, block_size,
    Hkv, D] cache whose sequences' keys sit at consecutive runs of `slots`."""
    block, kv_heads = cache.shape[2], cache.shape[3]
    heads = q.shape[1]
    out = torch.empty(len(seq_lens_host), heads, cache.shape[4], dtype=torch.float64, device=cache.device)
    key_start = 0
    for b, seq_len in enumerate(seq_lens_host):
        positions = slots[key_start:key_start + seq_len]
        key_start += seq_len
        k = cache[positions // block, 0, positions % block]
        v = cache[positions // block, 1, positions % block]
        for h in range(heads):
            g = h // (heads // kv_heads)
            out[b, h] = torch.softmax(k[:, g] @ q[b, h].double() * scale, dim=0) @ v[:, g]
    return out


@unittest.skipUnless(HAVE_TORCH and GPU, "needs torch and a GPU (%s)" % (NO_GPU_REASON or "no torch"))
class GpuTests(unittest.TestCase):
    def test_merge_attn_states_matches_torch(self):
        torch.manual_seed(0)
        tokens, heads, head_size = 77, 8, 128
        prefix = torch.randn(tokens, heads, head_size, device="cuda", dtype=torch.bfloat16)
        suffix = torch.randn_like(prefix)
        prefix_lse = torch.randn(heads, tokens, device="cuda") * 3
        suffix_lse = torch.randn(heads, tokens, device="cuda") * 3
        out = torch.empty_like(prefix)
        out_lse = torch.empty_like(prefix_lse)
        attnjit.ops.merge_attn_states(out, prefix, prefix_lse, suffix, suffix_lse, output_lse=out_lse)
        torch.cuda.synchronize()
        lse = torch.logaddexp(prefix_lse, suffix_lse)
        weight_p = torch.exp(prefix_lse - lse).t().unsqueeze(-1)
        weight_s = torch.exp(suffix_lse - lse).t().unsqueeze(-1)
        expected = prefix.double() * weight_p.double() + suffix.double() * weight_s.double()
        self.assertLess((out.double() - expected).abs().max().item(), 2e-2)
        self.assertLess((out_lse - lse).abs().max().item(), 1e-4)

    def test_merge_attn_states_fp8_output_and_tokens_without_context(self):
        torch.manual_seed(3)
        tokens, heads, head_size, with_context = 40, 4, 96, 25
        prefix = torch.randn(tokens, heads, head_size, device="cuda", dtype=torch.float16)
        suffix = torch.randn_like(prefix)
        prefix_lse = torch.randn(heads, tokens, device="cuda") * 3
        suffix_lse = torch.randn(heads, tokens, device="cuda") * 3
        prefix[with_context:] = float("nan")  # never read
        scale = torch.tensor([1.0 / 256], device="cuda")
        out = torch.full((tokens, heads, head_size), float("nan"), device="cuda").to(torch.float8_e4m3fn)
        out_lse = torch.full((heads, tokens), float("nan"), device="cuda")
        attnjit.ops.merge_attn_states(out, prefix, prefix_lse, suffix, suffix_lse, output_lse=out_lse,
                                      prefill_tokens_with_context=with_context, output_scale=scale)
        torch.cuda.synchronize()
        lse = torch.logaddexp(prefix_lse.double(), suffix_lse.double())
        weight_p = torch.exp(prefix_lse.double() - lse).t().unsqueeze(-1)
        weight_s = torch.exp(suffix_lse.double() - lse).t().unsqueeze(-1)
        merged = prefix.double() * weight_p + suffix.double() * weight_s
        merged[with_context:] = suffix[with_context:].double()
        expected = (merged * 256).clamp(-448, 448)
        got = out.double()
        # e4m3 keeps 3 mantissa bits: half a step is 1/16 of the value's binade.
        allowed = expected.abs().clamp(min=2.0 ** -6) / 16 + 1e-3
        self.assertTrue(bool(((got - expected).abs() <= allowed).all()))
        lse[:, with_context:] = suffix_lse[:, with_context:].double()
        self.assertLess((out_lse.double() - lse).abs().max().item(), 1e-4)

    def test_merge_partials_matches_float64(self):
        torch.manual_seed(1)
        partials, tokens, heads, head_size = 3, 19, 8, 128
        outputs = torch.randn(partials, tokens, heads, head_size, device="cuda", dtype=torch.float16)
        lses = torch.randn(partials, heads, tokens, device="cuda") * 4
        lses[1, 0, 0] = float("-inf")  # an empty partial: weight 0
        out = torch.full((tokens, heads, head_size), float("nan"), device="cuda", dtype=torch.float16)
        out_lse = torch.full((heads, tokens), float("nan"), device="cuda")
        attnjit.ops.merge_partials(out, outputs, lses, output_lse=out_lse)
        torch.cuda.synchronize()
        lse = torch.logsumexp(lses.double(), dim=0)  # [H, T]
        weights = torch.exp(lses.double() - lse).permute(0, 2, 1).unsqueeze(-1)  # [N, T, H, 1]
        expected = (outputs.double() * weights).sum(dim=0)
        self.assertFalse(torch.isnan(out).any().item())
        self.assertLess((out.double() - expected).abs().max().item(), 1e-2)
        self.assertLess((out_lse.double() - lse).abs().max().item(), 1e-4)

    def test_mla_decode_matches_float64(self):
        torch.manual_seed(2)
        seqs, heads, rank, rope, block = 3, 16, 512, 64, 64
        seq_lens_host = [1, 300, 1100]
        tables_host, num_blocks = random_block_tables(torch, seq_lens_host, block, spare_blocks=2)  # scattered
        cache = torch.randn(num_blocks, block, rank + rope, device="cuda", dtype=torch.bfloat16)
        q = torch.randn(seqs, heads, rank + rope, device="cuda", dtype=torch.bfloat16)
        tables = tables_host.cuda()
        seq_lens = torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda")
        scale = 1.0 / math.sqrt(rank + rope)
        workspace = torch.empty(attnjit.ops.mla_decode_workspace_bytes(seqs, heads, rank, max(seq_lens_host)),
                                dtype=torch.uint8, device="cuda")
        for use_workspace in (False, True):
            out = torch.full((seqs, heads, rank), float("nan"), device="cuda", dtype=torch.bfloat16)
            lse = torch.full((heads, seqs), float("nan"), device="cuda")  # the merge kernels' [H, B]
            attnjit.ops.mla_decode(q, cache, out, tables, seq_lens, max_seq_len=max(seq_lens_host), scale=scale,
                                   lse=lse.t(), workspace=workspace if use_workspace else None,
                                   sum_seq_lens=sum(seq_lens_host))
            torch.cuda.synchronize()
            for b, length in enumerate(seq_lens_host):
                rows = [int(tables_host[b, i // block]) * block + i % block for i in range(length)]
                keys = cache.reshape(-1, rank + rope)[rows].double()  # [S, L + R]
                scores = q[b].double() @ keys.t() * scale  # [H, S]
                expected_lse = torch.logsumexp(scores, dim=-1)
                expected = torch.softmax(scores, dim=-1) @ keys[:, :rank]
                self.assertLess((out[b].double() - expected).abs().max().item(), 2e-2, (use_workspace, b))
                self.assertLess((lse[:, b].double() - expected_lse).abs().max().item(), 1e-3, (use_workspace, b))

    def test_mla_cache_write_matches_torch(self):
        torch.manual_seed(3)
        tokens, rank, rope, block, num_blocks = 37, 512, 64, 16, 4
        # kv_c and k_pe: slices of one projection output (token stride 592).
        projection = torch.randn(tokens, rank + rope + 16, device="cuda", dtype=torch.bfloat16) * 300
        kv_c, k_pe = projection[:, :rank], projection[:, rank:rank + rope]
        slots = torch.randperm(num_blocks * block)[:tokens]
        slots[[3, 20]] = -1  # padding tokens: skipped
        slot_mapping = slots.cuda()
        written = slots[slots >= 0]
        untouched = torch.ones(num_blocks * block, dtype=torch.bool)
        untouched[written] = False
        rows = torch.cat([kv_c, k_pe], dim=1).float().cpu()[slots >= 0]  # in slot order of `written`
        cache = torch.full((num_blocks, block, rank + rope), float("nan"), device="cuda", dtype=torch.bfloat16)
        attnjit.ops.mla_cache_write(kv_c, k_pe, cache, slot_mapping)
        torch.cuda.synchronize()
        flat = cache.reshape(-1, rank + rope).float().cpu()
        self.assertTrue(torch.equal(flat[written], rows))
        self.assertTrue(torch.isnan(flat[untouched]).all().item())
        # fp8_e4m3 with one scale: x / scale, saturated to +-448, rounded to nearest.
        scale = torch.tensor([1.5], device="cuda")
        cache8 = torch.full((num_blocks, block, rank + rope), 0x7F, device="cuda", dtype=torch.uint8)  # NaN
        attnjit.ops.mla_cache_write(kv_c, k_pe, cache8, slot_mapping, cache_format="fp8_e4m3", scale=scale)
        torch.cuda.synchronize()
        got = cache8.reshape(-1, rank + rope).cpu().view(torch.float8_e4m3fn).float()
        want = (rows.double() / 1.5).clamp(-448, 448)
        step = want.abs() * 2.0 ** -3 + 2.0 ** -9  # one e4m3 step: 3 mantissa bits, subnormals 2^-9
        self.assertTrue(((got[written].double() - want).abs() <= step / 2 + want.abs() * 2.0 ** -22).all().item())
        self.assertTrue(torch.isnan(got[untouched]).all().item())

    def test_ops_run_on_their_tensors_device(self):
        # Tensors on the last GPU while torch's current device is 0: each op runs
        # on its tensors' device (its stream's context), on torch's default
        # stream there, and leaves torch's current device alone.
        if torch.cuda.device_count() < 2:
            self.skipTest("needs two GPUs (%d here)" % torch.cuda.device_count())
        import attnjit.torch_ops  # noqa: F401  (registers the operators)
        device = torch.device("cuda", torch.cuda.device_count() - 1)
        torch.cuda.set_device(0)
        kv_heads, head_size, block = 2, 64, 16
        keys = torch.randn(20, kv_heads, head_size, device=device, dtype=torch.bfloat16)
        values = torch.randn_like(keys)
        slots = torch.randperm(4 * block, device=device)[:20]
        for write in (attnjit.ops.cache_write, torch.ops.attnjit.cache_write):
            cache = torch.full((4, 2, block, kv_heads, head_size), float("nan"), device=device, dtype=torch.bfloat16)
            write(keys, values, cache, slots)
            torch.cuda.synchronize(device)
            self.assertEqual(torch.cuda.current_device(), 0)
            flat = cache.transpose(0, 1).reshape(2, -1, kv_heads, head_size)  # [K/V, slot, head, dim]
            self.assertTrue(torch.equal(flat[0][slots], keys))
            self.assertTrue(torch.equal(flat[1][slots], values))

    def test_diffkv_cache_write_and_paged_attention_match_float64(self):
        torch.manual_seed(4)
        heads, kv_heads, dqk, dv, block = 4, 2, 192, 128, 16
        query_lens, seq_lens_host = [1, 1, 4], [5, 40, 23]
        tables_host, num_blocks = random_block_tables(torch, seq_lens_host, block, spare_blocks=1)
        # Every key of every sequence through the DiffKV cache write, into vLLM's packed cache.
        slots = sequence_slots(torch, tables_host, seq_lens_host, block).cpu()
        keys = torch.randn(len(slots), kv_heads, dqk, device="cuda", dtype=torch.bfloat16)
        values = torch.randn(len(slots), kv_heads, dv, device="cuda", dtype=torch.bfloat16)
        cache = torch.full((num_blocks, block, kv_heads, dqk + dv), float("nan"), device="cuda",
                           dtype=torch.bfloat16)
        attnjit.ops.cache_write(keys, values, cache, slots.cuda())
        torch.cuda.synchronize()
        flat = cache.reshape(-1, kv_heads, dqk + dv)
        self.assertTrue(torch.equal(flat[slots.cuda(), :, :dqk], keys))
        self.assertTrue(torch.equal(flat[slots.cuda(), :, dqk:], values))

        num_tokens = sum(query_lens)
        q = torch.randn(num_tokens, heads, dqk, device="cuda", dtype=torch.bfloat16)
        out = torch.full((num_tokens, heads, dv), float("nan"), device="cuda", dtype=torch.bfloat16)
        cu_host = cumulative(query_lens)
        scale = 1.0 / math.sqrt(dqk)
        attnjit.ops.paged_attention(q, cache, out, tables_host.cuda(),
                                    torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda"),
                                    torch.tensor(cu_host, dtype=torch.int32, device="cuda"), max(query_lens),
                                    scale=scale, max_seq_len=max(seq_lens_host))
        torch.cuda.synchronize()
        key_start = 0
        for b, (query_len, seq_len) in enumerate(zip(query_lens, seq_lens_host)):
            k = keys[key_start:key_start + seq_len].double()  # [S, Hkv, Dqk], the sequence's keys in order
            v = values[key_start:key_start + seq_len].double()
            key_start += seq_len
            for i in range(query_len):
                position = seq_len - query_len + i  # causal: keys 0..position
                for h in range(heads):
                    g = h // (heads // kv_heads)
                    scores = k[:position + 1, g] @ q[cu_host[b] + i, h].double() * scale
                    expected = torch.softmax(scores, dim=0) @ v[:position + 1, g]
                    error = (out[cu_host[b] + i, h].double() - expected).abs().max().item()
                    self.assertLess(error, 2e-2, (b, i, h))

    def test_separate_per_token_head_scales_match_float64(self):
        # vLLM's current per-token-head layout: rows of D int8 values, the f32
        # scales in views of one [blocks, 2, block, Hkv] tensor (equal strides).
        import attnjit.torch_ops  # noqa: F401  (registers the operators)
        torch.manual_seed(8)
        heads, kv_heads, head_size, block = 8, 2, 128, 16
        query_lens, seq_lens_host = [1, 1, 6], [300, 17, 40]
        tables_host, num_blocks = random_block_tables(torch, seq_lens_host, block, spare_blocks=1)
        cache = torch.full((num_blocks, 2, block, kv_heads, head_size), 0x7F, device="cuda", dtype=torch.uint8)
        scales = torch.full((num_blocks, 2, block, kv_heads), float("nan"), device="cuda")
        dequantized = []
        for b, seq_len in enumerate(seq_lens_host):
            kv = torch.randn(2, seq_len, kv_heads, head_size, device="cuda", dtype=torch.float32)
            row_scale = (kv.abs().amax(-1) / 127).clamp(min=1e-6)
            quantized = torch.round(kv / row_scale.unsqueeze(-1)).clamp(-127, 127)
            dequantized.append((quantized * row_scale.unsqueeze(-1)).double())
            positions = torch.arange(seq_len)
            blocks, offsets = tables_host[b, positions // block].long().cuda(), (positions % block).cuda()
            for kv_index in range(2):
                cache[blocks, kv_index, offsets] = quantized[kv_index].to(torch.int8).view(torch.uint8)
                scales[blocks, kv_index, offsets] = row_scale[kv_index]
        num_tokens = sum(query_lens)
        q = torch.randn(num_tokens, heads, head_size, device="cuda", dtype=torch.bfloat16)
        cu_host = cumulative(query_lens)
        args = (tables_host.cuda(), torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda"),
                torch.tensor(cu_host, dtype=torch.int32, device="cuda"), max(query_lens))
        scale = 1.0 / math.sqrt(head_size)
        outputs = []
        for call in (attnjit.ops.paged_attention, torch.ops.attnjit.paged_attention):
            out = torch.full((num_tokens, heads, head_size), float("nan"), device="cuda", dtype=torch.bfloat16)
            call(q, cache, out, *args, scale=scale, kv_cache_format="int8_per_token_head",
                 k_scale_cache=scales[:, 0], v_scale_cache=scales[:, 1], max_seq_len=max(seq_lens_host))
            outputs.append(out)
        torch.cuda.synchronize()
        for b, (query_len, seq_len) in enumerate(zip(query_lens, seq_lens_host)):
            k, v = dequantized[b][0], dequantized[b][1]
            for i in range(query_len):
                position = seq_len - query_len + i
                for h in range(heads):
                    g = h // (heads // kv_heads)
                    scores = k[:position + 1, g] @ q[cu_host[b] + i, h].double() * scale
                    expected = torch.softmax(scores, dim=0) @ v[:position + 1, g]
                    for out in outputs:
                        self.assertLess((out[cu_host[b] + i, h].double() - expected).abs().max().item(), 2e-2)
        with self.assertRaisesRegex((ValueError, RuntimeError), "k_scale_cache and v_scale_cache go together"):
            attnjit.ops.paged_attention(q, cache, outputs[0], *args, kv_cache_format="int8_per_token_head",
                                        k_scale_cache=scales[:, 0])
        with self.assertRaisesRegex(ValueError, r"v_scale_cache has shape .*; expected"):
            attnjit.ops.paged_attention(q, cache, outputs[0], *args, kv_cache_format="int8_per_token_head",
                                        k_scale_cache=scales[:, 0], v_scale_cache=scales[:, 1, :8])

    def test_cache_write_with_separate_scales_feeds_attention(self):
        # fp8 per-token-head through the cache write into vLLM's layout (scale
        # tensors apart from the rows), read back, then attention over it.
        import attnjit.torch_ops  # noqa: F401  (registers the operators)
        torch.manual_seed(9)
        heads, kv_heads, head_size, block = 8, 2, 64, 16
        seq_lens_host = [33, 70]
        tables_host, num_blocks = random_block_tables(torch, seq_lens_host, block, spare_blocks=1)
        slots = sequence_slots(torch, tables_host, seq_lens_host, block)
        keys = torch.randn(len(slots), kv_heads, head_size, device="cuda", dtype=torch.bfloat16)
        values = torch.randn_like(keys)
        cache = torch.full((num_blocks, 2, block, kv_heads, head_size), 0x7F, device="cuda", dtype=torch.uint8)
        scales = torch.full((num_blocks, 2, block, kv_heads), float("nan"), device="cuda")
        torch.ops.attnjit.cache_write(keys, values, cache, slots, cache_format="fp8_per_token_head",
                                      k_scale_cache=scales[:, 0], v_scale_cache=scales[:, 1])
        torch.cuda.synchronize()
        rows = cache.view(torch.float8_e4m3fn).float().reshape(num_blocks, 2, block * kv_heads, head_size)
        flat_scales = scales.reshape(num_blocks, 2, block * kv_heads, 1)
        stored = (rows * flat_scales).reshape(num_blocks * 2, block, kv_heads, head_size)
        for kv_index, source in enumerate((keys, values)):
            expected_scale = source.float().abs().amax(-1) / 448
            got_scale = scales[:, kv_index].reshape(-1, kv_heads)[slots]
            self.assertTrue(torch.allclose(got_scale, expected_scale, rtol=1e-6, atol=0))
            got = stored.reshape(num_blocks, 2, block, kv_heads, head_size)[:, kv_index].reshape(
                -1, kv_heads, head_size)[slots]
            # e4m3: 3 mantissa bits, half a step is 1/16 of the binade (plus subnormals near 0).
            allowed = source.float().abs() / 16 + expected_scale.unsqueeze(-1) / 256
            self.assertTrue(bool(((got - source.float()).abs() <= allowed).all()))
        q = torch.randn(len(seq_lens_host), heads, head_size, device="cuda", dtype=torch.bfloat16)
        out = torch.full_like(q, float("nan"))
        attnjit.ops.paged_attention(q, cache, out, tables_host.cuda(),
                                    torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda"),
                                    torch.arange(len(seq_lens_host) + 1, dtype=torch.int32, device="cuda"), 1,
                                    kv_cache_format="fp8_per_token_head", k_scale_cache=scales[:, 0],
                                    v_scale_cache=scales[:, 1], max_seq_len=max(seq_lens_host))
        torch.cuda.synchronize()
        stored5 = stored.reshape(num_blocks, 2, block, kv_heads, head_size).double()
        expected = decode_over_slots(torch, stored5, slots, seq_lens_host, q, 1 / math.sqrt(head_size))
        self.assertLess((out.double() - expected).abs().max().item(), 2e-2)

    def test_vllm_int4_cache_write_rotation_and_attention(self):
        # vLLM's int4_per_token_head: keys and values rotated by its RHT,
        # written asymmetric (zero point in the scale's low mantissa bits), read
        # with a rotated q at scale / D, the output rotated back and divided by D.
        torch.manual_seed(10)
        heads, kv_heads, head_size, block = 8, 2, 64, 16
        x = torch.randn(5, head_size, device="cuda")
        back = attnjit.ops.int4_rht(attnjit.ops.int4_rht(x), inverse=True) / head_size
        self.assertLess((back - x).abs().max().item(), 1e-5)
        signs = attnjit.ops.int4_rht_signs(head_size)
        self.assertTrue(bool((signs.abs() == 1).all()))
        self.assertTrue(torch.equal(signs, attnjit.ops.int4_rht_signs(head_size)))
        seq_lens_host = [45, 20]
        tables_host, num_blocks = random_block_tables(torch, seq_lens_host, block, spare_blocks=1)
        slots = sequence_slots(torch, tables_host, seq_lens_host, block)
        keys = torch.randn(len(slots), kv_heads, head_size, device="cuda", dtype=torch.bfloat16)
        values = torch.randn_like(keys)
        cache = torch.full((num_blocks, 2, block, kv_heads, head_size // 2), 0x77, device="cuda", dtype=torch.uint8)
        scales = torch.full((num_blocks, 2, block, kv_heads), float("nan"), device="cuda")
        attnjit.ops.cache_write(attnjit.ops.int4_rht(keys), attnjit.ops.int4_rht(values), cache, slots,
                                cache_format="int4_per_token_head", k_scale_cache=scales[:, 0],
                                v_scale_cache=scales[:, 1])
        torch.cuda.synchronize()
        # What the cache stands for: (nibble - zero point) * (scale with the zero point's bits cleared).
        bits = scales.view(torch.int32)
        zero_points = (bits & 15).float()
        cleared = (bits & ~15).view(torch.float32)
        nibbles = torch.stack(((cache & 15), (cache >> 4)), dim=-1).reshape(num_blocks, 2, block, kv_heads,
                                                                              head_size).float()
        stored = ((nibbles - zero_points.unsqueeze(-1)) * cleared.unsqueeze(-1)).double()
        rotated_keys = attnjit.ops.int4_rht(keys).float()
        got_keys = stored[:, 0].reshape(-1, kv_heads, head_size)[slots]
        half_step = cleared[:, 0].reshape(-1, kv_heads)[slots].double().unsqueeze(-1) / 2
        self.assertTrue(bool(((got_keys - rotated_keys.double()).abs() <= half_step * 1.01 + 1e-3).all()))
        q = torch.randn(len(seq_lens_host), heads, head_size, device="cuda", dtype=torch.bfloat16)
        q_rotated = attnjit.ops.int4_rht(q)
        out = torch.full_like(q, float("nan"))
        scale = 1.0 / math.sqrt(head_size)
        attnjit.ops.paged_attention(q_rotated, cache, out, tables_host.cuda(),
                                    torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda"),
                                    torch.arange(len(seq_lens_host) + 1, dtype=torch.int32, device="cuda"), 1,
                                    scale=scale / head_size, kv_cache_format="int4_per_token_head",
                                    k_scale_cache=scales[:, 0], v_scale_cache=scales[:, 1],
                                    max_seq_len=max(seq_lens_host))
        result = attnjit.ops.int4_rht(out.float(), inverse=True) / head_size
        torch.cuda.synchronize()
        # The kernel's bf16 output, compared in the rotated space.
        rotated_out = decode_over_slots(torch, stored, slots, seq_lens_host, q_rotated, scale / head_size)
        bound = 2e-2 * rotated_out.abs().amax(dim=-1, keepdim=True).clamp(min=1.0)
        self.assertTrue(bool(((out.double() - rotated_out).abs() <= bound).all()))
        self.assertFalse(bool(torch.isnan(result).any()))

    def test_fp8_output_and_sqrt_alibi_match_float64(self):
        # vLLM's fp8 output (out = e4m3(o / output_scale), saturating) with
        # sqrt-ALiBi slopes, over a plain bf16 cache [num_blocks, 2, block, Hkv, D].
        torch.manual_seed(7)
        heads, kv_heads, d, block = 8, 2, 64, 16
        query_lens, seq_lens_host = [1, 6, 1], [37, 20, 70]
        tables_host, num_blocks = random_block_tables(torch, seq_lens_host, block)
        cache = torch.randn(num_blocks, 2, block, kv_heads, d, device="cuda", dtype=torch.bfloat16)
        num_tokens = sum(query_lens)
        q = torch.randn(num_tokens, heads, d, device="cuda", dtype=torch.bfloat16)
        out = torch.full((num_tokens, heads, d), float("nan"), device="cuda").to(torch.float8_e4m3fn)
        slopes = torch.rand(heads, device="cuda") * 0.5
        output_scale = torch.tensor([2.0 ** -7], device="cuda")
        cu_host = cumulative(query_lens)
        scale = 1.0 / math.sqrt(d)
        attnjit.ops.paged_attention(q, cache, out, tables_host.cuda(),
                                    torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda"),
                                    torch.tensor(cu_host, dtype=torch.int32, device="cuda"), max(query_lens),
                                    scale=scale, alibi_slopes=slopes, alibi_sqrt=True, output_scale=output_scale)
        torch.cuda.synchronize()
        got = out.float().double() * output_scale.item()
        for b, (query_len, seq_len) in enumerate(zip(query_lens, seq_lens_host)):
            positions = torch.arange(seq_len)
            rows = tables_host[b, positions // block].long() * block + positions % block
            k = cache[:, 0].reshape(-1, kv_heads, d)[rows.cuda()].double()
            v = cache[:, 1].reshape(-1, kv_heads, d)[rows.cuda()].double()
            for i in range(query_len):
                position = seq_len - query_len + i
                distance = (position - torch.arange(position + 1, device="cuda")).double()
                for h in range(heads):
                    g = h // (heads // kv_heads)
                    scores = k[:position + 1, g] @ q[cu_host[b] + i, h].double() * scale
                    scores -= slopes[h].double() * distance.sqrt()
                    limit = 448 * output_scale.item()
                    expected = (torch.softmax(scores, dim=0) @ v[:position + 1, g]).clamp(-limit, limit)
                    # e4m3 keeps 3 mantissa bits: half a step is 2^-4 of the value; bf16 P·V adds ~1%.
                    allowed = expected.abs() * (2.0 ** -4 + 1e-2) + 2e-2 * output_scale.item() * 64
                    error = (got[cu_host[b] + i, h] - expected).abs()
                    self.assertTrue((error <= allowed).all().item(), (b, i, h, error.max().item()))

    def test_per_sequence_causal_flags_match_float64(self):
        # causal_flags: sequences 0 and 2 causal, sequence 1 bidirectional (its
        # queries see every key of the sequence); `causal` is ignored.
        torch.manual_seed(11)
        heads, kv_heads, d, block = 8, 2, 64, 16
        query_lens, seq_lens_host = [5, 7, 1], [21, 7, 40]
        tables_host, num_blocks = random_block_tables(torch, seq_lens_host, block)
        cache = torch.randn(num_blocks, 2, block, kv_heads, d, device="cuda", dtype=torch.bfloat16)
        num_tokens = sum(query_lens)
        q = torch.randn(num_tokens, heads, d, device="cuda", dtype=torch.bfloat16)
        out = torch.full((num_tokens, heads, d), float("nan"), device="cuda", dtype=torch.bfloat16)
        flags = torch.tensor([1, 0, 1], dtype=torch.int8, device="cuda")
        cu_host = cumulative(query_lens)
        scale = 1.0 / math.sqrt(d)
        attnjit.ops.paged_attention(q, cache, out, tables_host.cuda(),
                                    torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda"),
                                    torch.tensor(cu_host, dtype=torch.int32, device="cuda"), max(query_lens),
                                    scale=scale, causal=False, causal_flags=flags, num_sms=132)
        torch.cuda.synchronize()
        for b, (query_len, seq_len) in enumerate(zip(query_lens, seq_lens_host)):
            positions = torch.arange(seq_len)
            rows = tables_host[b, positions // block].long() * block + positions % block
            k = cache[:, 0].reshape(-1, kv_heads, d)[rows.cuda()].double()
            v = cache[:, 1].reshape(-1, kv_heads, d)[rows.cuda()].double()
            for i in range(query_len):
                visible = seq_len - query_len + i + 1 if flags[b].item() else seq_len
                for h in range(heads):
                    g = h // (heads // kv_heads)
                    scores = k[:visible, g] @ q[cu_host[b] + i, h].double() * scale
                    expected = torch.softmax(scores, dim=0) @ v[:visible, g]
                    error = (out[cu_host[b] + i, h].double() - expected).abs().max().item()
                    self.assertLess(error, 2e-2, (b, i, h))
        with self.assertRaisesRegex(ValueError, "causal_flags must be int8 or bool"):
            attnjit.ops.paged_attention(q, cache, out, tables_host.cuda(),
                                        torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda"),
                                        torch.tensor(cu_host, dtype=torch.int32, device="cuda"), max(query_lens),
                                        causal_flags=flags.int())

    def test_chunked_local_attention_ranges_and_qq_bias_match_float64(self):
        # Chunks of 16 positions, vLLM's mm_prefix_range ([num_seqs, 2, 2]
        # int32, inclusive, the second unused) and qq_bias over the queries.
        torch.manual_seed(13)
        heads, kv_heads, d, block, chunk = 8, 2, 64, 16, 16
        query_lens, seq_lens_host = [5, 12, 1], [40, 12, 70]
        tables_host, num_blocks = random_block_tables(torch, seq_lens_host, block)
        cache = torch.randn(num_blocks, 2, block, kv_heads, d, device="cuda", dtype=torch.bfloat16)
        num_tokens = sum(query_lens)
        q = torch.randn(num_tokens, heads, d, device="cuda", dtype=torch.bfloat16)
        out = torch.full((num_tokens, heads, d), float("nan"), device="cuda", dtype=torch.bfloat16)
        ranges = torch.tensor([[[20, 37], [0, 0]], [[2, 9], [-1, -1]], [[30, 69], [5, 5]]], dtype=torch.int32)
        n = max(query_lens)
        bias = torch.randn(n, n)
        bias[torch.rand(n, n) < 0.2] = float("-inf")
        bias.fill_diagonal_(0.0)
        cu_host = cumulative(query_lens)
        scale = 1.0 / math.sqrt(d)
        attnjit.ops.paged_attention(q, cache, out, tables_host.cuda(),
                                    torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda"),
                                    torch.tensor(cu_host, dtype=torch.int32, device="cuda"), n, scale=scale,
                                    attention_chunk_size=chunk, mm_prefix_range=ranges.cuda(), qq_bias=bias.cuda())
        torch.cuda.synchronize()
        for b, (query_len, seq_len) in enumerate(zip(query_lens, seq_lens_host)):
            positions = torch.arange(seq_len)
            rows = tables_host[b, positions // block].long() * block + positions % block
            k = cache[:, 0].reshape(-1, kv_heads, d)[rows.cuda()].double()
            v = cache[:, 1].reshape(-1, kv_heads, d)[rows.cuda()].double()
            context = seq_len - query_len
            for i in range(query_len):
                p = context + i
                keys = torch.arange(seq_len)
                visible = (keys <= p) & (keys // chunk == p // chunk)
                for first, last in ranges[b].tolist():
                    if first < last and first <= p <= last:
                        visible |= (keys >= first) & (keys <= last)
                extra = torch.zeros(seq_len, dtype=torch.float64)
                if i < n:
                    extra[context:context + n] = bias[i, :seq_len - context].double()
                for h in range(heads):
                    g = h // (heads // kv_heads)
                    scores = k[:, g] @ q[cu_host[b] + i, h].double() * scale
                    scores = torch.where(visible.cuda(), scores, torch.tensor(float("-inf"), device="cuda"))
                    scores = scores + extra.cuda()
                    expected = torch.softmax(scores, dim=0) @ v[:, g]
                    error = (out[cu_host[b] + i, h].double() - expected).abs().max().item()
                    self.assertLess(error, 2e-2, (b, i, h))
        with self.assertRaisesRegex(ValueError, "qq_bias must be a contiguous square"):
            attnjit.ops.paged_attention(q, cache, out, tables_host.cuda(),
                                        torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda"),
                                        torch.tensor(cu_host, dtype=torch.int32, device="cuda"), n,
                                        qq_bias=bias.cuda()[:, :3])
        with self.assertRaisesRegex(ValueError, r"mm_prefix_range has shape \(3, 2\)|mm_prefix_range must have 3"):
            attnjit.ops.paged_attention(q, cache, out, tables_host.cuda(),
                                        torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda"),
                                        torch.tensor(cu_host, dtype=torch.int32, device="cuda"), n,
                                        mm_prefix_range=ranges.cuda()[:, 0])

    def test_gather_cache_matches_the_cache_rows(self):
        # cp_gather_cache (auto) and gather_and_maybe_dequant_cache (fp8 · scale)
        # of 576-wide latent rows, from position 0 and from unaligned starts.
        torch.manual_seed(19)
        block, entry = 16, 576
        lengths, starts_host = [37, 5, 70], [3, 0, 21]
        tables_host, num_blocks = random_block_tables(torch, [n + s for n, s in zip(lengths, starts_host)], block)
        tables = tables_host.cuda()
        cu = torch.tensor(cumulative(lengths), dtype=torch.int32, device="cuda")
        starts = torch.tensor(starts_host, dtype=torch.int32, device="cuda")
        for cache_format in ("auto", "fp8_e4m3"):
            if cache_format == "auto":
                cache = torch.randn(num_blocks, block, entry, device="cuda", dtype=torch.bfloat16)
                scale = None
            else:
                cache = (torch.randn(num_blocks, block, entry, device="cuda") * 8).to(torch.float8_e4m3fn)
                scale = torch.tensor([0.25], device="cuda")
            for use_starts in (False, True):
                dst = torch.full((sum(lengths), entry), float("nan"), device="cuda", dtype=torch.bfloat16)
                attnjit.ops.gather_cache(cache, dst, tables, cu, cache_format=cache_format, scale=scale,
                                         seq_starts=starts if use_starts else None)
                torch.cuda.synchronize()
                rows = []
                for b, n in enumerate(lengths):
                    positions = torch.arange(n) + (starts_host[b] if use_starts else 0)
                    flat = cache.reshape(-1, entry)[(tables_host[b, positions // block].long() * block
                                                     + positions % block).cuda()]
                    rows.append(flat.float() * (scale.item() if scale is not None else 1.0))
                expected = torch.cat(rows).to(torch.bfloat16)
                self.assertTrue(torch.equal(dst, expected), (cache_format, use_starts))

    def test_convert_fp8_round_trips_and_matches_torch(self):
        # vLLM's convert_fp8 both ways, e4m3 and e5m2, with a scale, on a cache
        # view that starts one element in and has an odd element count (the op's
        # narrow variant), against torch's own float8 casts (in range: torch's
        # e4m3fn cast does not saturate, vLLM's and attnjit's do).
        import attnjit.torch_ops  # noqa: F401  (registers the operators)
        torch.manual_seed(29)
        base = torch.randn(3 * 16 * 8 * 64 + 1, device="cuda", dtype=torch.bfloat16) * 40
        for kv_dtype, float8 in (("fp8", torch.float8_e4m3fn), ("fp8_e5m2", torch.float8_e5m2)):
            for source in (base[:-1].view(3, 16, 8, 64), base[1:-2]):
                scale = 0.5
                quantized = torch.empty(source.shape, device="cuda", dtype=torch.uint8)
                attnjit.ops.convert_fp8(quantized, source, scale=scale, kv_dtype=kv_dtype)
                expected = (source.float() / scale).to(float8).view(torch.uint8)
                self.assertTrue(torch.equal(quantized, expected), (kv_dtype, source.shape))
                back = torch.full(source.shape, float("nan"), device="cuda", dtype=torch.float32)
                torch.ops.attnjit.convert_fp8(back, quantized, scale, kv_dtype)
                torch.cuda.synchronize()
                self.assertTrue(torch.equal(back, quantized.view(float8).float() * scale), (kv_dtype, source.shape))
        # Saturation: beyond e4m3's 448 the largest finite value, never NaN.
        big = torch.tensor([1000.0, -1e6, 448.0, 464.0] * 4, device="cuda")
        out = torch.empty(big.shape, device="cuda", dtype=torch.float8_e4m3fn)
        attnjit.ops.convert_fp8(out, big)
        self.assertEqual(out.float().tolist(), [448.0, -448.0, 448.0, 448.0] * 4)
        with self.assertRaisesRegex(TypeError, "kv_dtype 'fp8_e5m2' is fp8_e5m2"):
            attnjit.ops.convert_fp8(out, big, kv_dtype="fp8_e5m2")
        with self.assertRaisesRegex(ValueError, "src has 16 elements, dst 15"):
            attnjit.ops.convert_fp8(out[:15], big)

    def test_swap_blocks_moves_blocks_between_host_and_device(self):
        # vLLM's swap_blocks both ways (pinned host memory) and copy_blocks inside
        # each layer's caches, against the same pairs applied one at a time.
        import attnjit.torch_ops  # noqa: F401  (registers the operators)
        torch.manual_seed(23)
        shape = (10, 16, 2, 72)  # num_blocks, block_size, kv heads, head size
        gpu = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
        host = torch.randn(shape, dtype=torch.bfloat16).pin_memory()
        mapping = torch.tensor([[1, 7], [2, 8], [3, 9], [6, 0]], dtype=torch.int64)
        expected = gpu.clone()
        for s, d in mapping.tolist():
            expected[d] = host[s].cuda()
        attnjit.ops.swap_blocks(host, gpu, mapping)
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(gpu, expected))
        out = torch.zeros(shape, dtype=torch.bfloat16).pin_memory()
        torch.ops.attnjit.swap_blocks(gpu, out, torch.tensor([[0, 4], [9, 5]], dtype=torch.int64))
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out[4], gpu[0].cpu()) and torch.equal(out[5], gpu[9].cpu()))
        self.assertEqual(int(torch.count_nonzero(out[:4].float())), 0)
        # copy_blocks: a chain inside one cache carries block 0 on to block 2.
        layers = [torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(2)]
        values = [torch.randn(shape, device="cuda", dtype=torch.float16) for _ in range(2)]
        chain = torch.tensor([[0, 1], [1, 2], [5, 6]], dtype=torch.int64)
        expected = [cache.clone() for cache in layers + values]
        for cache in expected:
            for s, d in chain.tolist():
                cache[d] = cache[s].clone()
        attnjit.ops.copy_blocks(layers, values, chain)
        torch.cuda.synchronize()
        for got, want in zip(layers + values, expected):
            self.assertTrue(torch.equal(got, want))
        with self.assertRaisesRegex(ValueError, "block_mapping is on cuda"):
            attnjit.ops.swap_blocks(host, gpu, mapping.cuda())
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, "source block 10 is outside src's 10 blocks"):
            attnjit.ops.swap_blocks(host, gpu, torch.tensor([[10, 0]], dtype=torch.int64))

    def test_custom_ops_trace_without_graph_breaks_and_replay_in_cuda_graphs(self):
        # torch.ops.attnjit.*: a layer's cache write and attention traced whole by
        # torch.compile (fullgraph: a graph break raises; aot_eager runs the fake
        # implementations and functionalizes the writes), then captured in a
        # CUDA graph and replayed on new inputs; both against the eager ops.
        import attnjit.torch_ops  # noqa: F401  (registers the operators)
        torch.manual_seed(17)
        heads, kv_heads, d, block = 8, 2, 64, 16
        seq_lens_host = [37, 20, 70, 5]
        tables_host, num_blocks = random_block_tables(torch, seq_lens_host, block)
        tables = tables_host.cuda()
        seq_lens = torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda")
        cu = torch.arange(len(seq_lens_host) + 1, dtype=torch.int32, device="cuda")
        cache = torch.randn(num_blocks, 2, block, kv_heads, d, device="cuda", dtype=torch.bfloat16)
        # Each decode token's new key and value land in its last slot.
        last = torch.tensor([n - 1 for n in seq_lens_host])
        slots = (tables_host[torch.arange(len(seq_lens_host)), last // block].long() * block + last % block).cuda()

        def layer(q, key, value, kv_cache, out):
            torch.ops.attnjit.cache_write(key, value, kv_cache, slots)
            torch.ops.attnjit.paged_attention(q, kv_cache, out, tables, seq_lens, cu, 1, max_seq_len=70)
            return out.float() * 2.0

        def inputs():
            q = torch.randn(len(seq_lens_host), heads, d, device="cuda", dtype=torch.bfloat16)
            key = torch.randn(len(seq_lens_host), kv_heads, d, device="cuda", dtype=torch.bfloat16)
            return q, key, torch.randn_like(key)

        def eager(q, key, value):
            expected_cache = cache.clone()
            attnjit.ops.cache_write(key, value, expected_cache, slots)
            expected = torch.empty_like(q)
            attnjit.ops.paged_attention(q, expected_cache, expected, tables, seq_lens, cu, 1, max_seq_len=70)
            return expected.float() * 2.0, expected_cache

        q, key, value = inputs()
        expected, expected_cache = eager(q, key, value)
        compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
        work_cache = cache.clone()
        got = compiled(q, key, value, work_cache, torch.empty_like(q))
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(work_cache, expected_cache))
        self.assertTrue(torch.allclose(got, expected, atol=1e-2, rtol=1e-2))

        static_q, static_key, static_value = inputs()
        graph_cache, graph_out = cache.clone(), torch.empty_like(static_q)
        layer(static_q, static_key, static_value, graph_cache, graph_out)  # warm: compiled and loaded
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            result = layer(static_q, static_key, static_value, graph_cache, graph_out)
        q, key, value = inputs()
        static_q.copy_(q)
        static_key.copy_(key)
        static_value.copy_(value)
        graph_cache.copy_(cache)
        graph.replay()
        torch.cuda.synchronize()
        expected, expected_cache = eager(q, key, value)
        self.assertTrue(torch.equal(graph_cache, expected_cache))
        self.assertTrue(torch.allclose(result, expected, atol=1e-2, rtol=1e-2))

        # Host time per call, printed, not asserted: the calls queue behind a
        # 50 ms sleep kernel, so the loop measures the host side alone.
        out = torch.empty_like(q)
        for label, call in (("attnjit.ops", attnjit.ops.paged_attention),
                            ("torch.ops.attnjit", torch.ops.attnjit.paged_attention)):
            for _ in range(20):
                call(q, graph_cache, out, tables, seq_lens, cu, 1, max_seq_len=70)
            torch.cuda.synchronize()
            torch.cuda._sleep(100_000_000)
            start = time.perf_counter()
            calls = 400
            for _ in range(calls):
                call(q, graph_cache, out, tables, seq_lens, cu, 1, max_seq_len=70)
            host = (time.perf_counter() - start) / calls * 1e6
            torch.cuda.synchronize()
            print("\nattnjit: paged_attention through %s: %.1f us of host time per call" % (label, host))

    def test_torch_operators_check_their_arguments(self):
        # The per-layer operators (C++ where attnjit's torch extension builds) refuse
        # what attnjit.ops refuses, with its messages; the C API's own checks
        # come through too.
        import attnjit.torch_ops
        print("\nattnjit: torch.ops.attnjit.paged_attention is %s" % (
            "C++" if attnjit.torch_ops.NATIVE else "Python"))
        errors = (RuntimeError, ValueError, TypeError, attnjit.InvalidArgumentError)
        cache = torch.randn(8, 2, 16, 2, 64, device="cuda", dtype=torch.bfloat16)
        q = torch.randn(3, 8, 64, device="cuda", dtype=torch.bfloat16)
        tables = torch.zeros(3, 4, device="cuda", dtype=torch.int32)
        seq_lens = torch.full((3,), 5, device="cuda", dtype=torch.int32)
        cu = torch.arange(4, device="cuda", dtype=torch.int32)
        with self.assertRaisesRegex(errors, r"block_tables has 2 rows for 3 sequences"):
            torch.ops.attnjit.paged_attention(q, cache, torch.empty_like(q), tables[:2], seq_lens, cu, 1)
        with self.assertRaisesRegex(errors, r"out has dtype torch.float16; expected torch.bfloat16"):
            torch.ops.attnjit.paged_attention(q, cache, q.half(), tables, seq_lens, cu, 1)
        with self.assertRaisesRegex(errors, r"kv_cache_format 'fp9' is not one of"):
            torch.ops.attnjit.paged_attention(q, cache, torch.empty_like(q), tables, seq_lens, cu, 1,
                                              kv_cache_format="fp9")
        with self.assertRaisesRegex(errors, r"sliding_window"):
            torch.ops.attnjit.paged_attention(q, cache, torch.empty_like(q), tables, seq_lens, cu, 1,
                                              sliding_window=-3)
        with self.assertRaisesRegex(errors, r"plan_tuning 'always' is not one of environment, off"):
            torch.ops.attnjit.paged_attention(q, cache, torch.empty_like(q), tables, seq_lens, cu, 1,
                                              plan_tuning="always")
        key = torch.randn(2, 2, 64, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(errors, r"slot_mapping has dtype torch.int32; expected torch.int64"):
            torch.ops.attnjit.cache_write(key, key, cache, torch.zeros(2, device="cuda", dtype=torch.int32))
        with self.assertRaisesRegex(errors, r"kv_cache has shape \(8, 2, 16, 2, 64\) with 2 KV heads; the keys have 4"):
            wide = torch.randn(2, 4, 64, device="cuda", dtype=torch.bfloat16)
            torch.ops.attnjit.cache_write(wide, wide, cache, torch.zeros(2, device="cuda", dtype=torch.int64))
        # A valid call after the refusals: the outputs are attnjit.ops'.
        out, expected = torch.empty_like(q), torch.empty_like(q)
        tables = torch.arange(12, device="cuda", dtype=torch.int32).reshape(3, 4) % 8
        torch.ops.attnjit.paged_attention(q, cache, out, tables, seq_lens, cu, 1, max_seq_len=5, plan_tuning="off")
        attnjit.ops.paged_attention(q, cache, expected, tables, seq_lens, cu, 1, max_seq_len=5, plan_tuning="off")
        torch.cuda.synchronize()
        self.assertTrue(torch.equal(out, expected))

    def test_split_without_a_workspace_matches_float64_and_replays_in_a_cuda_graph(self):
        # Three long decodes on 2 KV heads fill 6 programs: the op splits them
        # into segments whose partials live in the runtime's stream-ordered
        # scratch (no workspace given). Captured in a CUDA graph, the scratch
        # becomes the graph's allocation nodes; replays see new queries.
        torch.manual_seed(5)
        heads, kv_heads, d, block = 8, 2, 64, 16
        seq_lens_host = [3000, 1700, 2600]
        tables_host, num_blocks = random_block_tables(torch, seq_lens_host, block)
        cache = torch.randn(num_blocks, 2, block, kv_heads, d, device="cuda", dtype=torch.bfloat16)
        q = torch.randn(3, heads, d, device="cuda", dtype=torch.bfloat16)
        out = torch.full((3, heads, d), float("nan"), device="cuda", dtype=torch.bfloat16)
        tables = tables_host.cuda()
        seq_lens = torch.tensor(seq_lens_host, dtype=torch.int32, device="cuda")
        cu = torch.arange(4, dtype=torch.int32, device="cuda")
        scale = 1.0 / math.sqrt(d)

        def call(runtime_scratch=True, max_seq_len=max(seq_lens_host), **extra):
            attnjit.ops.paged_attention(q, cache, out, tables, seq_lens, cu, 1, scale=scale,
                                        max_seq_len=max_seq_len, runtime_scratch=runtime_scratch,
                                        **dict(dict(num_sms=132), **extra))

        def check(label):
            torch.cuda.synchronize()
            for b, seq_len in enumerate(seq_lens_host):
                positions = torch.arange(seq_len)
                rows = (tables_host[b, positions // block].long() * block + positions % block).cuda()
                k = cache[:, 0].reshape(-1, kv_heads, d)[rows].double()
                v = cache[:, 1].reshape(-1, kv_heads, d)[rows].double()
                for h in range(heads):
                    g = h // (heads // kv_heads)
                    expected = torch.softmax(k[:, g] @ q[b, h].double() * scale, dim=0) @ v[:, g]
                    error = (out[b, h].double() - expected).abs().max().item()
                    self.assertLess(error, 1e-2, (label, b, h))

        call()
        check("eager")
        out.fill_(float("nan"))
        call(runtime_scratch=False)  # unsplit: the same numbers within bf16 rounding
        check("unsplit")
        out.fill_(float("nan"))
        call(max_seq_len=0)  # no lengths: each sequence cut evenly on the GPU
        check("unsized segments")
        # Tuned: the candidates run on these buffers, the chosen plan last.
        out.fill_(float("nan"))
        call(tune=True)
        check("tuned")
        out.fill_(float("nan"))
        call()  # the recorded plan
        check("recorded plan")
        # First-use tuning inside a capture runs the rules' plan (an unseen bucket: 66 SMs).
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call(plan_tuning="first-use", num_sms=66)
        out.fill_(float("nan"))
        graph.replay()
        check("first-use inside a capture")
        for max_seq_len in (max(seq_lens_host), 0):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                call(max_seq_len=max_seq_len)
            for replay in range(2):
                q.copy_(torch.randn_like(q))
                out.fill_(float("nan"))
                graph.replay()
                check("max_seq_len %d, replay %d" % (max_seq_len, replay))

    def test_warmup_readies_the_kernels_a_model_config_needs(self):
        # bf16 32/8 heads of 128, block 16, with LSE: the decode tilings (2D with
        # and without the row-sum register, split with and without lengths),
        # prefill and the reduce kernel.
        ready = attnjit.ops.paged_attention_warmup(num_query_heads=32, num_kv_heads=8, head_size=128, block_size=16,
                                                   lse=1, threads=4)
        self.assertGreaterEqual(ready, 5)
        self.assertEqual(attnjit.ops.paged_attention_warmup(num_query_heads=32, num_kv_heads=8, head_size=128,
                                                            block_size=16, lse=1), ready)

    def test_diffkv_and_mla_cache_write_shapes_raise(self):
        q = torch.zeros(4, 8, 192, device="cuda", dtype=torch.bfloat16)
        out = torch.zeros(4, 8, 128, device="cuda", dtype=torch.bfloat16)
        tables = torch.zeros(4, 4, device="cuda", dtype=torch.int32)
        lens = torch.ones(4, device="cuda", dtype=torch.int32)
        cu = torch.arange(5, device="cuda", dtype=torch.int32)
        unpacked = torch.zeros(3, 2, 16, 2, 192, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, r"a value head size \(128\) other than the key head size \(192\) "
                                                r"\(DiffKV\) needs vLLM's packed cache \(num_blocks, block_size, "
                                                r"num_kv_heads, 192 \+ 128\)"):
            attnjit.ops.paged_attention(q, unpacked, out, tables, lens, cu, 1)
        packed = torch.zeros(3, 16, 2, 192 + 64, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(ValueError, r"the packed layout for key head size 192 and value head size 128"):
            attnjit.ops.paged_attention(q, packed, out, tables, lens, cu, 1)
        int8_packed = torch.zeros(3, 16, 2, 192 + 64, device="cuda", dtype=torch.uint8)
        with self.assertRaisesRegex(ValueError, r"\(num_blocks, block_size, num_kv_heads, 196 \+ 132\)"):
            attnjit.ops.paged_attention(q, int8_packed, out, tables, lens, cu, 1,
                                        kv_cache_format="int8_per_token_head")
        with self.assertRaisesRegex(ValueError, r"out has shape \(4, 4, 128\); expected \(4, 8, value_head_size\)"):
            attnjit.ops.paged_attention(q, packed, out[:, :4], tables, lens, cu, 1)
        with self.assertRaisesRegex(ValueError, "kv_cache must have 5 dimensions .* or 4"):
            attnjit.ops.paged_attention(q, packed[0], out, tables, lens, cu, 1)
        key = torch.zeros(4, 2, 192, device="cuda", dtype=torch.bfloat16)
        value = torch.zeros(4, 2, 128, device="cuda", dtype=torch.bfloat16)
        slots = torch.zeros(4, device="cuda", dtype=torch.int64)
        with self.assertRaisesRegex(ValueError, r"value has shape \(4, 1, 128\); expected \(4, 2, value_head_size\)"):
            attnjit.ops.cache_write(key, value[:, :1], packed, slots)
        with self.assertRaisesRegex(ValueError, "DiffKV"):
            attnjit.ops.cache_write(key, value, unpacked, slots)
        with self.assertRaisesRegex(ValueError, "with 1 KV heads; the keys have 2"):
            attnjit.ops.cache_write(key, value, torch.zeros(3, 16, 1, 320, device="cuda", dtype=torch.bfloat16),
                                    slots)
        kv_c = torch.zeros(4, 512, device="cuda", dtype=torch.bfloat16)
        k_pe = torch.zeros(4, 64, device="cuda", dtype=torch.bfloat16)
        latent = torch.zeros(2, 16, 576, device="cuda", dtype=torch.bfloat16)
        with self.assertRaisesRegex(TypeError, "kv_c has dtype torch.float64; attnjit takes float32"):
            attnjit.ops.mla_cache_write(kv_c.double(), k_pe, latent, slots)
        with self.assertRaisesRegex(TypeError, "k_pe has dtype torch.float16; expected torch.bfloat16"):
            attnjit.ops.mla_cache_write(kv_c, k_pe.half(), latent, slots)
        with self.assertRaisesRegex(ValueError, "k_pe must have unit stride in its last dimension"):
            attnjit.ops.mla_cache_write(kv_c, kv_c[:, ::8], latent, slots)
        with self.assertRaisesRegex(ValueError, r"k_pe has shape \(3, 64\); expected \(4, rope_dim\)"):
            attnjit.ops.mla_cache_write(kv_c, k_pe[:3], latent, slots)
        with self.assertRaisesRegex(ValueError, r"kv_cache has shape \(2, 16, 560\); expected \(num_blocks, "
                                                r"block_size, 512 \+ 64\)"):
            attnjit.ops.mla_cache_write(kv_c, k_pe, latent[:, :, :560], slots)
        with self.assertRaisesRegex(TypeError, "slot_mapping has dtype torch.int32"):
            attnjit.ops.mla_cache_write(kv_c, k_pe, latent, slots.int())
        with self.assertRaisesRegex(ValueError, "cache_format 'int8_per_token_head' is not one the MLA cache write"):
            attnjit.ops.mla_cache_write(kv_c, k_pe, latent, slots, cache_format="int8_per_token_head")
        with self.assertRaisesRegex(TypeError, "stores one-byte elements"):
            attnjit.ops.mla_cache_write(kv_c, k_pe, latent, slots, cache_format="fp8_e4m3")
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, "parameter 'scale' .* is a null pointer"):
            attnjit.ops.mla_cache_write(kv_c, k_pe, latent.to(torch.uint8), slots, cache_format="fp8_e4m3")
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, "kv_lora_rank \\+ rope_dim = 448 \\+ 64"):
            attnjit.ops.mla_cache_write(kv_c[:, :448], k_pe, latent[:, :, :512], slots)

    def test_wrong_tensor_shapes_raise(self):
        q = torch.zeros(4, 8, 64, device="cuda", dtype=torch.float16)
        cache = torch.zeros(3, 2, 16, 2, 64, device="cuda", dtype=torch.float16)
        tables = torch.zeros(2, 4, device="cuda", dtype=torch.int32)
        lens = torch.ones(2, device="cuda", dtype=torch.int32)
        with self.assertRaisesRegex(ValueError, "cu_seqlens_q has shape"):
            attnjit.ops.paged_attention(q, cache, q, tables, lens, lens, 1)
        with self.assertRaisesRegex(TypeError, "seq_lens has dtype torch.int64"):
            attnjit.ops.paged_attention(q, cache, q, tables, lens.long(), lens, 1)
        lse = torch.zeros(8, 4, device="cuda")
        with self.assertRaisesRegex(TypeError, "float64"):
            attnjit.ops.merge_attn_states(q.double(), q, lse, q, lse)


if __name__ == "__main__":
    if not GPU:
        print("attnjit: GPU tests skip: %s" % NO_GPU_REASON)
    if not HAVE_TORCH:
        print("attnjit: torch tests skip: torch is not installed")
    result = unittest.main(verbosity=2, exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)
