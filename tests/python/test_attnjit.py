"""Tests of the Python package (python/attnjit) over libattnjit.so.

Run by ctest (tests/CMakeLists.txt) with ATTNJIT_LIBRARY set to the build's
library; by hand: ATTNJIT_LIBRARY=build/lib/libattnjit.so python3 tests/python/test_attnjit.py
CPU parts always run; the torch parts skip (with the reason printed) without
torch, the GPU parts without a CUDA driver."""

import ctypes
import math
import os
import re
import sys
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


def merge_arguments(base=0x7F0000000000, tokens=37):
    return [base + 4096 * i for i in range(6)] + [tokens] + [4 * 64, 64] * 3


class CpuTests(unittest.TestCase):
    def test_version_and_library(self):
        self.assertRegex(attnjit.version(), r"^\d+\.\d+\.\d+$")
        self.assertTrue(os.path.exists(attnjit.library_path) or "/" not in attnjit.library_path)

    def test_struct_layouts_match_the_library(self):
        for struct, init in (
            (_structs.RuntimeOptions, _library.lib.attnjit_runtime_options_init),
            (_structs.PagedAttentionParams, _library.lib.attnjit_paged_attention_params_init),
            (_structs.CacheWriteParams, _library.lib.attnjit_cache_write_params_init),
            (_structs.MergeAttnStatesParams, _library.lib.attnjit_merge_attn_states_params_init),
        ):
            self.assertEqual(_library.library_struct_size(struct, init), ctypes.sizeof(struct), struct.__name__)

    def test_bad_runtime_options_raise_value_errors(self):
        with self.assertRaises(ValueError) as caught:
            attnjit.Runtime(device=-1)
        self.assertIsInstance(caught.exception, attnjit.InvalidArgumentError)
        self.assertIn("device -1 is not a device ordinal", str(caught.exception))
        with self.assertRaisesRegex(attnjit.InvalidArgumentError, "sm_99"):
            attnjit.Runtime(target="sm_99")
        self.assertEqual(attnjit.Runtime(target="sm_80").target, "sm_80")

    def test_kernel_compiles_from_spec_text(self):
        runtime = attnjit.Runtime(target="sm_80")
        kernel = runtime.kernel_from_spec_text(MERGE_SPEC)
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

    def test_spec_errors_are_located(self):
        runtime = attnjit.default_runtime()
        with self.assertRaises(attnjit.SpecError) as caught:
            runtime.kernel_from_spec_text("family: merge_attn_states\nparams:\n  dtype: f16\n  num_hedas: 4\n")
        self.assertIsInstance(caught.exception, ValueError)
        self.assertRegex(str(caught.exception), r"<spec text>:4:\d+: error: .*num_hedas")
        spec = os.path.join(HERE, "..", "..", "specs", "merge_attn_states.yaml")
        with self.assertRaisesRegex(attnjit.SpecError, "did you mean 'merge_attn_states_bf16_h32_d128_lse'"):
            runtime.kernel_from_spec_file(spec, "merge_attn_states_bf16_h32_d128_lsf")
        self.assertEqual(runtime.kernel_from_spec_file(spec, "merge_attn_states_bf16_h32_d128_lse").name,
                         "merge_attn_states_bf16_h32_d128_lse")

    def test_launch_arguments_are_checked(self):
        kernel = attnjit.default_runtime().kernel_from_spec_text(MERGE_SPEC)
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
        with self.assertRaisesRegex(TypeError, "float64"):
            attnjit.ops.merge_attn_states(q.double(), q, lse, q, lse)


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

    def test_wrong_tensor_shapes_raise(self):
        q = torch.zeros(4, 8, 64, device="cuda", dtype=torch.float16)
        cache = torch.zeros(3, 2, 16, 2, 64, device="cuda", dtype=torch.float16)
        tables = torch.zeros(2, 4, device="cuda", dtype=torch.int32)
        lens = torch.ones(2, device="cuda", dtype=torch.int32)
        with self.assertRaisesRegex(ValueError, "cu_seqlens_q has shape"):
            attnjit.ops.paged_attention(q, cache, q, tables, lens, lens, 1)
        with self.assertRaisesRegex(TypeError, "seq_lens has dtype torch.int64"):
            attnjit.ops.paged_attention(q, cache, q, tables, lens.long(), lens, 1)


if __name__ == "__main__":
    if not GPU:
        print("attnjit: GPU tests skip: %s" % NO_GPU_REASON)
    if not HAVE_TORCH:
        print("attnjit: torch tests skip: torch is not installed")
    result = unittest.main(verbosity=2, exit=False).result
    sys.exit(0 if result.wasSuccessful() else 1)
