"""Exceptions raised for the C API's status codes. Each carries the C message
(`attnjit_last_error_message`) and the code; argument errors are also
ValueErrors, so callers may catch either."""


class AttnjitError(Exception):
    """Base of every attnjit error; `status` is the C status name."""

    status = "internal"


class InvalidArgumentError(AttnjitError, ValueError):
    status = "invalid-argument"


class SpecError(AttnjitError, ValueError):
    status = "spec"


class CompileError(AttnjitError, RuntimeError):
    status = "compile"


class NoDriverError(AttnjitError, RuntimeError):
    status = "no-driver"


class CudaError(AttnjitError, RuntimeError):
    status = "cuda"


class InternalError(AttnjitError, RuntimeError):
    status = "internal"


# attnjit_status values (include/attnjit/attnjit.h) -> exception class.
BY_STATUS = {
    1: InvalidArgumentError,
    2: SpecError,
    3: CompileError,
    4: NoDriverError,
    5: CudaError,
    6: InternalError,
}


def check(status):
    """Raises the exception for a failed C call, with the C message."""
    if status == 0:
        return
    from ._library import lib

    message = lib.attnjit_last_error_message().decode("utf-8", "replace")
    raise BY_STATUS.get(status, InternalError)(message)
