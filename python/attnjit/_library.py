"""Finding and loading libattnjit.so, and the C API's prototypes (ctypes).

Search order: the ATTNJIT_LIBRARY environment variable (a path to the .so);
an install prefix this package was installed into (PREFIX/share/attnjit/python/
attnjit -> PREFIX/lib); the repository's build folders when the package is used
from a checkout (build/lib first, then other build*/lib, newest first, never a
sanitizer build: an ASan-instrumented library cannot load into a plain python3);
then the system's loader (LD_LIBRARY_PATH, ldconfig)."""

import ctypes
import glob
import os

from . import _structs as s

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _sanitized(build_dir):
    """Whether the CMake build in `build_dir` was configured with ATTNJIT_SANITIZE."""
    try:
        with open(os.path.join(build_dir, "CMakeCache.txt")) as cache:
            return any(line.strip() == "ATTNJIT_SANITIZE:BOOL=ON" for line in cache)
    except OSError:
        return False


def _candidates():
    env = os.environ.get("ATTNJIT_LIBRARY")
    if env:
        yield env
        return
    prefix = os.path.normpath(os.path.join(_PACKAGE_DIR, "..", "..", "..", ".."))
    for libdir in ("lib", "lib64"):
        yield os.path.join(prefix, libdir, "libattnjit.so")
    repository = os.path.normpath(os.path.join(_PACKAGE_DIR, "..", ".."))
    builds = [path for path in glob.glob(os.path.join(repository, "build*", "lib", "libattnjit.so"))
              if not _sanitized(os.path.dirname(os.path.dirname(path)))]
    default = os.path.join(repository, "build", "lib", "libattnjit.so")
    for path in sorted(builds, key=lambda p: (p != default, -os.path.getmtime(p))):
        yield path
    yield "libattnjit.so"


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as error:
            tried.append("%s (%s)" % (path, error))
    raise ImportError(
        "attnjit: cannot load libattnjit.so; set ATTNJIT_LIBRARY to its path. Tried: " + "; ".join(tried)
    )


lib, path = _load()

_c_status = ctypes.c_int
_p = ctypes.POINTER
_jit = ctypes.c_void_p
_kernel = ctypes.c_void_p

_PROTOTYPES = {
    "attnjit_version": (ctypes.c_char_p, []),
    "attnjit_last_error_message": (ctypes.c_char_p, []),
    "attnjit_status_name": (ctypes.c_char_p, [ctypes.c_int]),
    "attnjit_driver_status": (_c_status, []),
    "attnjit_jit_options_init": (None, [_p(s.JitOptions)]),
    "attnjit_jit_create": (_c_status, [_p(s.JitOptions), _p(_jit)]),
    "attnjit_jit_destroy": (None, [_jit]),
    "attnjit_jit_target": (ctypes.c_char_p, [_jit]),
    "attnjit_kernel_from_spec_text": (_c_status, [_jit, ctypes.c_char_p, ctypes.c_char_p, _p(_kernel)]),
    "attnjit_kernel_from_spec_file": (_c_status, [_jit, ctypes.c_char_p, ctypes.c_char_p, _p(_kernel)]),
    "attnjit_kernel_destroy": (None, [_kernel]),
    "attnjit_kernel_name": (ctypes.c_char_p, [_kernel]),
    "attnjit_kernel_num_params": (_c_status, [_kernel, _p(ctypes.c_size_t)]),
    "attnjit_kernel_param": (_c_status, [_kernel, ctypes.c_size_t, _p(s.ParamInfo)]),
    "attnjit_kernel_compile": (_c_status, [_kernel]),
    "attnjit_kernel_ptx": (_c_status, [_kernel, _p(ctypes.c_char_p)]),
    "attnjit_kernel_load": (_c_status, [_kernel]),
    "attnjit_kernel_launch": (_c_status, [_kernel, s.Dim3, _p(s.Arg), ctypes.c_size_t, ctypes.c_void_p]),
    "attnjit_kernel_stats": (_c_status, [_kernel, _p(s.CompileStats)]),
    "attnjit_paged_attention_params_init": (None, [_p(s.PagedAttentionParams)]),
    "attnjit_paged_attention_workspace_bytes": (_c_status, [ctypes.c_int64, ctypes.c_int, ctypes.c_int,
                                                            ctypes.c_int, _p(ctypes.c_uint64)]),
    "attnjit_paged_attention_validate": (_c_status, [_jit, _p(s.PagedAttentionParams)]),
    "attnjit_paged_attention": (_c_status, [_jit, _p(s.PagedAttentionParams)]),
    "attnjit_paged_attention_warmup": (_c_status, [_jit, _p(s.PagedAttentionParams), ctypes.c_int,
                                                   _p(ctypes.c_int)]),
    "attnjit_paged_attention_tune": (_c_status, [_jit, _p(s.PagedAttentionParams), _p(ctypes.c_double),
                                                 _p(ctypes.c_double)]),
    "attnjit_cache_write_params_init": (None, [_p(s.CacheWriteParams)]),
    "attnjit_cache_write_validate": (_c_status, [_jit, _p(s.CacheWriteParams)]),
    "attnjit_cache_write": (_c_status, [_jit, _p(s.CacheWriteParams)]),
    "attnjit_merge_attn_states_params_init": (None, [_p(s.MergeAttnStatesParams)]),
    "attnjit_merge_attn_states_validate": (_c_status, [_jit, _p(s.MergeAttnStatesParams)]),
    "attnjit_merge_attn_states": (_c_status, [_jit, _p(s.MergeAttnStatesParams)]),
    "attnjit_merge_partials_params_init": (None, [_p(s.MergePartialsParams)]),
    "attnjit_merge_partials_validate": (_c_status, [_jit, _p(s.MergePartialsParams)]),
    "attnjit_merge_partials": (_c_status, [_jit, _p(s.MergePartialsParams)]),
    "attnjit_mla_cache_write_params_init": (None, [_p(s.MlaCacheWriteParams)]),
    "attnjit_mla_cache_write_validate": (_c_status, [_jit, _p(s.MlaCacheWriteParams)]),
    "attnjit_mla_cache_write": (_c_status, [_jit, _p(s.MlaCacheWriteParams)]),
    "attnjit_gather_cache_params_init": (None, [_p(s.GatherCacheParams)]),
    "attnjit_gather_cache_validate": (_c_status, [_jit, _p(s.GatherCacheParams)]),
    "attnjit_gather_cache": (_c_status, [_jit, _p(s.GatherCacheParams)]),
    "attnjit_swap_blocks_params_init": (None, [_p(s.SwapBlocksParams)]),
    "attnjit_swap_blocks_validate": (_c_status, [_jit, _p(s.SwapBlocksParams)]),
    "attnjit_swap_blocks": (_c_status, [_jit, _p(s.SwapBlocksParams)]),
    "attnjit_convert_cache_params_init": (None, [_p(s.ConvertCacheParams)]),
    "attnjit_convert_cache_validate": (_c_status, [_jit, _p(s.ConvertCacheParams)]),
    "attnjit_convert_cache": (_c_status, [_jit, _p(s.ConvertCacheParams)]),
    "attnjit_mla_decode_params_init": (None, [_p(s.MlaDecodeParams)]),
    "attnjit_mla_decode_workspace_bytes": (_c_status, [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                                       _p(ctypes.c_uint64)]),
    "attnjit_mla_decode_validate": (_c_status, [_jit, _p(s.MlaDecodeParams)]),
    "attnjit_mla_decode": (_c_status, [_jit, _p(s.MlaDecodeParams)]),
}

for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    _function = getattr(lib, _name)
    _function.restype = _restype
    _function.argtypes = _argtypes


def library_struct_size(struct, init_function):
    """The size of a C struct as the loaded library knows it: what its _init
    function writes into struct_size (into a buffer larger than any struct)."""
    buffer = ctypes.create_string_buffer(4096)
    init_function(ctypes.cast(buffer, ctypes.POINTER(struct)))
    return ctypes.c_size_t.from_buffer(buffer).value


def check_struct_layouts():
    """Raises ImportError when this package's ctypes structs differ in size from
    the library's (a package and a library of different versions)."""
    for struct, init in (
        (s.JitOptions, lib.attnjit_jit_options_init),
        (s.PagedAttentionParams, lib.attnjit_paged_attention_params_init),
        (s.CacheWriteParams, lib.attnjit_cache_write_params_init),
        (s.MergeAttnStatesParams, lib.attnjit_merge_attn_states_params_init),
        (s.MergePartialsParams, lib.attnjit_merge_partials_params_init),
        (s.MlaCacheWriteParams, lib.attnjit_mla_cache_write_params_init),
        (s.GatherCacheParams, lib.attnjit_gather_cache_params_init),
        (s.ConvertCacheParams, lib.attnjit_convert_cache_params_init),
        (s.SwapBlocksParams, lib.attnjit_swap_blocks_params_init),
        (s.MlaDecodeParams, lib.attnjit_mla_decode_params_init),
    ):
        expected = library_struct_size(struct, init)
        if expected != ctypes.sizeof(struct):
            raise ImportError(
                "attnjit: %s is %d bytes in %s but %d in this Python package: use the package of the same "
                "attnjit version as the library" % (struct.__name__, expected, path, ctypes.sizeof(struct))
            )


check_struct_layouts()
