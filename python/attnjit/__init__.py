"""attnjit for Python: the C API (include/attnjit/attnjit.h) through ctypes, no
build step. The library is found through ATTNJIT_LIBRARY, an install prefix,
or the repository's build folders (see _library.py).

    import attnjit
    jit = attnjit.Jit()                        # device 0; works without a GPU
    kernel = jit.kernel_from_spec_file("specs/merge_attn_states.yaml",
                                           "merge_attn_states_bf16_h32_d128_lse")
    print(kernel.compile().stats())                   # ms per stage, threads, ...
    attnjit.ops.paged_attention(q, kv_cache, out, block_tables, seq_lens,
                                cu_seqlens_q, max_query_len)   # torch tensors

Errors raise attnjit.AttnjitError subclasses carrying the library's message;
argument errors are ValueErrors (InvalidArgumentError, SpecError)."""

from . import ops
from ._library import lib as _lib
from ._library import path as library_path
from .errors import (AttnjitError, CompileError, CudaError, InternalError, InvalidArgumentError, NoDriverError,
                     SpecError)
from .jit import CompileStats, Kernel, Parameter, Jit, default_jit

__version__ = _lib.attnjit_version().decode()


def version():
    """The loaded library's version."""
    return __version__


def driver_status():
    """(True, "") when a CUDA driver and a GPU are usable, else (False, reason)."""
    if _lib.attnjit_driver_status() == 0:
        return True, ""
    return False, _lib.attnjit_last_error_message().decode("utf-8", "replace")


__all__ = [
    "AttnjitError", "CompileError", "CompileStats", "CudaError", "InternalError", "InvalidArgumentError", "Kernel",
    "NoDriverError", "Parameter", "Jit", "SpecError", "default_jit", "driver_status", "library_path", "ops",
    "version",
]
