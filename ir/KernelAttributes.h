// Typed access to a kernel's attributes (ir/KernelAttributes.def lists them with
// their ranges and meanings). Builders set them, the verifier checks them, and
// passes and codegen read them here, never by spelling.
#pragma once

#include <cstdint>
#include <string>

#include "ir/IR.h"
#include "support/Diagnostics.h"

namespace attnjit::ir {

enum class KernelAttribute {
#define ATTNJIT_KERNEL_ATTRIBUTE(Enum, spelling, min, max, defaultValue, meaning) Enum,
#include "ir/KernelAttributes.def"
};

struct KernelAttributeInfo {
  KernelAttribute attribute;
  const char* name;
  int64_t min, max, defaultValue;
  const char* meaning;
};

const KernelAttributeInfo& kernelAttributeInfo(KernelAttribute attribute);

// The attribute's value, or its default when the kernel does not set it. The
// kernel must have passed the verifier (a malformed value is a compiler bug here).
int64_t kernelAttribute(const Kernel& kernel, KernelAttribute attribute);
// kernelAttribute(...) != 0, for the 0/1 switches.
bool kernelFlag(const Kernel& kernel, KernelAttribute attribute);
// Sets the attribute (the verifier reports a value outside its range).
void setKernelAttribute(Kernel& kernel, KernelAttribute attribute, int64_t value);

// Every kernel attribute is listed in KernelAttributes.def and has an integer
// value in its range; the error names the attribute and the accepted values.
support::Status verifyKernelAttributes(const Kernel& kernel);

}  // namespace attnjit::ir
