// The promises a kernel is compiled with about its arguments, checked before a
// launch: pointers are non-null and aligned as `{align = N}` says, integers are
// multiples of `{divisibility = N}`. A broken promise would make the kernel
// read the wrong memory silently; each check returns the reason instead. The
// JIT's launchers (compiler/driver/KernelArguments.h) and the bundle loader
// (runtime/Bundle.h) both check through these, so their messages agree.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace attnjit::runtime {

// Empty when `address` is non-null and a multiple of `alignBytes` (0: no
// promise); else "is a null pointer" / "is 0x..., not 16-byte aligned as the
// kernel was compiled to assume".
std::optional<std::string> pointerPromiseBroken(uint64_t address, int64_t alignBytes);
// Empty when `value` is a multiple of `divisibility` (0 or 1: no promise); else
// "is 250, not a multiple of 8 as the kernel was compiled to assume".
std::optional<std::string> divisibilityPromiseBroken(int64_t value, int64_t divisibility);

}  // namespace attnjit::runtime
