"""Jit and Kernel: the C API's JIT and kernel handles as Python objects."""

import contextlib
import ctypes
from collections import namedtuple

from . import _structs as s
from ._library import lib
from .errors import check

# attnjit_arg_kind values.
ARG_POINTER, ARG_INT, ARG_REAL = 0, 1, 2
_KIND_NAMES = {ARG_POINTER: "pointer", ARG_INT: "int", ARG_REAL: "real"}
_ORIGINS = {0: "not-loaded", 1: "compiled", 2: "disk", 3: "memory"}

Parameter = namedtuple("Parameter", "name type kind align_bytes divisibility")
CompileStats = namedtuple(
    "CompileStats",
    "target origin passes_ms llvm_lower_ms llvm_optimize_ms ptx_emit_ms load_ms threads "
    "dynamic_shared_bytes registers spill_bytes static_shared_bytes",
)


def _text(value):
    return None if value is None else str(value).encode("utf-8")


def _torch():
    try:
        import torch  # noqa: F401  (optional dependency)

        return torch
    except ImportError:
        return None


def stream_handle(stream, device=None):
    """A CUstream for the C API: None -> torch's current stream on `device` where
    torch with CUDA is importable, else the default stream; an int is taken as a
    CUstream; a torch.cuda.Stream gives its handle."""
    if stream is None:
        torch = _torch()
        if torch is not None and torch.cuda.is_available():
            return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)
        return ctypes.c_void_p(None)
    if isinstance(stream, int):
        return ctypes.c_void_p(stream)
    handle = getattr(stream, "cuda_stream", None)
    if handle is None:
        raise TypeError("stream must be None, an int (CUstream) or a torch.cuda.Stream, got %r" % (stream,))
    return ctypes.c_void_p(handle)


def device_scope(device):
    """torch.cuda.device(device) where `device` is a CUDA device other than
    torch's current one, else a context that does nothing. An op runs on its
    stream's device, and the default stream (handle 0) stands for the current
    device's: the ops switch to their tensors' device around the call."""
    torch = _torch()
    if (torch is None or getattr(device, "type", None) != "cuda" or device.index is None
            or device.index == torch.cuda.current_device()):
        return contextlib.nullcontext()
    return torch.cuda.device(device)


class Kernel:
    """One kernel variant of a spec; compiled to PTX on request (no GPU needed),
    loaded on the JIT's device on first launch."""

    def __init__(self, handle, jit):
        self._handle = handle
        self._jit = jit  # kept for its device when picking torch's stream
        count = ctypes.c_size_t()
        check(lib.attnjit_kernel_num_params(self._handle, ctypes.byref(count)))
        self.parameters = []
        for index in range(count.value):
            info = s.ParamInfo(struct_size=ctypes.sizeof(s.ParamInfo))
            check(lib.attnjit_kernel_param(self._handle, index, ctypes.byref(info)))
            self.parameters.append(
                Parameter(info.name.decode(), info.type.decode(), _KIND_NAMES[info.kind], info.align_bytes,
                          info.divisibility)
            )

    def __del__(self):
        if getattr(self, "_handle", None):
            lib.attnjit_kernel_destroy(self._handle)
            self._handle = None

    @property
    def name(self):
        return lib.attnjit_kernel_name(self._handle).decode()

    def compile(self):
        """Compiles to PTX for the JIT's target."""
        check(lib.attnjit_kernel_compile(self._handle))
        return self

    @property
    def ptx(self):
        text = ctypes.c_char_p()
        check(lib.attnjit_kernel_ptx(self._handle, ctypes.byref(text)))
        return text.value.decode()

    def load(self):
        """Loads on the JIT's device (memory cache, disk cache, else compile)."""
        check(lib.attnjit_kernel_load(self._handle))
        return self

    def launch(self, grid, args, stream=None):
        """Launches `grid` (x, y, z; missing dimensions are 1) blocks. `args`, one
        per parameter in order: an int or a torch tensor (its data_ptr) for a
        pointer, an int for an integer, a float for a real. The library checks
        count, kinds, null/misaligned pointers and stride divisibility."""
        grid = tuple(grid) + (1,) * (3 - len(tuple(grid)))
        packed = (s.Arg * max(1, len(args)))()
        for i, value in enumerate(args):
            parameter_kind = self.parameters[i].kind if i < len(self.parameters) else None
            if hasattr(value, "data_ptr"):
                packed[i] = s.Arg(kind=ARG_POINTER, pointer=value.data_ptr())
            elif isinstance(value, bool):
                packed[i] = s.Arg(kind=ARG_INT, integer=int(value))
            elif isinstance(value, float):
                packed[i] = s.Arg(kind=ARG_REAL, real=value)
            elif isinstance(value, int):
                if parameter_kind == "pointer":
                    packed[i] = s.Arg(kind=ARG_POINTER, pointer=value)
                elif parameter_kind == "real":
                    packed[i] = s.Arg(kind=ARG_REAL, real=float(value))
                else:
                    packed[i] = s.Arg(kind=ARG_INT, integer=value)
            else:
                raise TypeError("argument %d (%s) must be an int, a float or a tensor, got %s" % (
                    i, self.parameters[i].name if parameter_kind else "?", type(value).__name__))
        dims = s.Dim3(*[int(d) for d in grid[:3]])
        device = self._jit.device if self._jit is not None else None
        check(lib.attnjit_kernel_launch(self._handle, dims, packed, len(args), stream_handle(stream, device)))

    def stats(self):
        """Compile statistics: milliseconds per stage (0 for stages a cache hit
        skipped), threads, shared memory, and once loaded registers and spills."""
        stats = s.CompileStats(struct_size=ctypes.sizeof(s.CompileStats))
        check(lib.attnjit_kernel_stats(self._handle, ctypes.byref(stats)))
        return CompileStats(
            stats.target.decode(), _ORIGINS.get(stats.origin, "unknown"), stats.passes_ms, stats.llvm_lower_ms,
            stats.llvm_optimize_ms, stats.ptx_emit_ms, stats.load_ms, stats.threads, stats.dynamic_shared_bytes,
            stats.registers, stats.spill_bytes, stats.static_shared_bytes,
        )

    def __repr__(self):
        return "attnjit.Kernel(%r)" % self.name


class Jit:
    """The JIT for one device. Creating one needs no GPU (compile and validate
    on a CPU machine); loading and launching do."""

    def __init__(self, device=0, cache_dir=None, bypass_cache=False, target=None):
        options = s.JitOptions()
        lib.attnjit_jit_options_init(ctypes.byref(options))
        options.device = device
        options.cache_dir = _text(cache_dir)
        options.bypass_cache = 1 if bypass_cache else 0
        options.target = _text(target)
        handle = ctypes.c_void_p()
        check(lib.attnjit_jit_create(ctypes.byref(options), ctypes.byref(handle)))
        self._handle = handle
        self.device = device

    def __del__(self):
        if getattr(self, "_handle", None):
            lib.attnjit_jit_destroy(self._handle)
            self._handle = None

    @property
    def target(self):
        """The code generation target ("" when none is known)."""
        return lib.attnjit_jit_target(self._handle).decode()

    def kernel_from_spec_text(self, yaml, variant=None):
        handle = ctypes.c_void_p()
        check(lib.attnjit_kernel_from_spec_text(self._handle, _text(yaml), _text(variant), ctypes.byref(handle)))
        return Kernel(handle, self)

    def kernel_from_spec_file(self, path, variant=None):
        handle = ctypes.c_void_p()
        check(lib.attnjit_kernel_from_spec_file(self._handle, _text(path), _text(variant), ctypes.byref(handle)))
        return Kernel(handle, self)

    def __repr__(self):
        return "attnjit.Jit(device=%d, target=%r)" % (self.device, self.target)


_default = None


def default_jit():
    """The process's Jit for device 0 (created on first use). The ops run on
    their tensors' device whatever the Jit's; its device is where its spec
    kernels launch."""
    global _default
    if _default is None:
        _default = Jit()
    return _default
