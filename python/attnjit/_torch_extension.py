"""Builds and loads attnjit's C++ torch operators (csrc/torch_ops.cpp):
torch.ops.attnjit.paged_attention and torch.ops.attnjit.cache_write registered
with the dispatcher in C++, so that a call skips the Python function of
attnjit/ops.py (the per-call host time an engine pays once per layer).

The source compiles once per machine, torch version and attnjit header, with
torch.utils.cpp_extension (a C++ compiler and the CUDA toolkit's headers are
needed), into ATTNJIT_TORCH_EXTENSION_DIR or ~/.cache/attnjit/torch_extension;
later imports load the cached library. ATTNJIT_TORCH_EXTENSION=0 skips it, and
so does a failed build (with a warning): attnjit/torch_ops.py then defines the
same operators in Python."""

import ctypes
import hashlib
import os
import warnings

from . import _library

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_SOURCE = os.path.join(_PACKAGE_DIR, "csrc", "torch_ops.cpp")


def _header_dir():
    """The folder holding attnjit/attnjit.h: ATTNJIT_INCLUDE_DIR, the checkout's
    include/ (package used from the repository), or the install prefix's."""
    candidates = [os.environ.get("ATTNJIT_INCLUDE_DIR"),
                  os.path.join(_PACKAGE_DIR, "..", "..", "include"),
                  os.path.join(_PACKAGE_DIR, "..", "..", "..", "..", "include")]
    if os.path.dirname(_library.path):  # not a bare name the system loader resolved
        candidates.append(os.path.join(os.path.dirname(_library.path), "..", "include"))
    for candidate in candidates:
        if candidate and os.path.isfile(os.path.join(candidate, "attnjit", "attnjit.h")):
            return os.path.normpath(candidate)
    return None


def _build_key(torch, header):
    digest = hashlib.sha256()
    for path in (_SOURCE, os.path.join(header, "attnjit", "attnjit.h")):
        with open(path, "rb") as source:
            digest.update(source.read())
    digest.update(("%s|%s" % (torch.__version__, torch.version.cuda)).encode())
    return digest.hexdigest()[:16]


def load(torch, jit):
    """Registers the C++ operators and points them at `jit`; False (with a
    warning saying why, unless switched off) when they are not available."""
    if os.environ.get("ATTNJIT_TORCH_EXTENSION", "1") == "0":
        return False
    header = _header_dir()
    if header is None:
        warnings.warn("attnjit: attnjit/attnjit.h not found (set ATTNJIT_INCLUDE_DIR); torch.ops.attnjit uses the "
                      "Python operators")
        return False
    key = _build_key(torch, header)
    root = os.environ.get("ATTNJIT_TORCH_EXTENSION_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "attnjit", "torch_extension")
    build_directory = os.path.join(root, key)
    try:
        from torch.utils import cpp_extension

        os.makedirs(build_directory, exist_ok=True)
        cpp_extension.load(name="attnjit_torch_ops_" + key, sources=[_SOURCE], extra_include_paths=[header],
                           extra_cflags=["-O2"], with_cuda=True, is_python_module=False,
                           build_directory=build_directory, verbose=False)
    except Exception as error:  # a compiler, header or toolkit problem: the Python operators serve
        warnings.warn("attnjit: the C++ torch operators did not build (%s); torch.ops.attnjit uses the Python "
                      "operators" % (str(error).strip().splitlines() or ["unknown error"])[-1])
        return False
    lib = _library.lib

    def address(function):
        return ctypes.cast(function, ctypes.c_void_p).value

    torch.ops.attnjit._set_entry_points(
        ctypes.cast(jit._handle, ctypes.c_void_p).value, address(lib.attnjit_paged_attention_params_init),
        address(lib.attnjit_paged_attention), address(lib.attnjit_cache_write_params_init),
        address(lib.attnjit_cache_write), address(lib.attnjit_last_error_message))
    return True
