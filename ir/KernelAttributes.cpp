#include "ir/KernelAttributes.h"

#include <bit>

namespace attnjit::ir {

namespace {

constexpr KernelAttributeInfo kAttributes[] = {
#define ATTNJIT_KERNEL_ATTRIBUTE(Enum, spelling, min, max, defaultValue, meaning) \
  {KernelAttribute::Enum, spelling, min, max, defaultValue, meaning},
#include "ir/KernelAttributes.def"
};

const KernelAttributeInfo* findAttribute(const std::string& name) {
  for (const KernelAttributeInfo& info : kAttributes)
    if (name == info.name) return &info;
  return nullptr;
}

bool inRange(const KernelAttributeInfo& info, int64_t value) {
  if (value < info.min || value > info.max) return false;
  // The block is 32 x num_warps threads and layouts split warps in powers of two.
  if (info.attribute == KernelAttribute::NumWarps) return std::has_single_bit(static_cast<uint64_t>(value));
  // setmaxnreg takes multiples of 8 from 24 to 256.
  if (info.attribute == KernelAttribute::ProducerRegisters) return value == 0 || (value >= 24 && value % 8 == 0);
  return true;
}

std::string rangeText(const KernelAttributeInfo& info) {
  if (info.attribute == KernelAttribute::NumWarps)
    return "a power of two in " + std::to_string(info.min) + ".." + std::to_string(info.max);
  if (info.attribute == KernelAttribute::ProducerRegisters) return "0, or a multiple of 8 in 24..256";
  if (info.min == 0 && info.max == 1) return "0 or 1";
  return "an integer in " + std::to_string(info.min) + ".." + std::to_string(info.max);
}

}  // namespace

const KernelAttributeInfo& kernelAttributeInfo(KernelAttribute attribute) {
  return kAttributes[static_cast<size_t>(attribute)];
}

int64_t kernelAttribute(const Kernel& kernel, KernelAttribute attribute) {
  const KernelAttributeInfo& info = kernelAttributeInfo(attribute);
  const AttrValue* value = kernel.attrs().find(info.name);
  if (value == nullptr) return info.defaultValue;
  const auto* integer = std::get_if<int64_t>(value);
  ATTNJIT_CHECK(integer != nullptr && inRange(info, *integer),
                std::string("kernel attribute '") + info.name + "' read before the verifier checked it");
  return *integer;
}

bool kernelFlag(const Kernel& kernel, KernelAttribute attribute) { return kernelAttribute(kernel, attribute) != 0; }

void setKernelAttribute(Kernel& kernel, KernelAttribute attribute, int64_t value) {
  kernel.attrs().set(kernelAttributeInfo(attribute).name, value);
}

support::Status verifyKernelAttributes(const Kernel& kernel) {
  for (const auto& [name, value] : kernel.attrs().entries()) {
    const KernelAttributeInfo* info = findAttribute(name);
    if (info == nullptr) {
      std::string known;
      for (const KernelAttributeInfo& entry : kAttributes) known += std::string(known.empty() ? "" : ", ") + entry.name;
      return support::Status::error(kernel.location(), "kernel '" + kernel.name() + "': unknown kernel attribute '" +
                                                           name + "' (known: " + known + ")");
    }
    const auto* integer = std::get_if<int64_t>(&value);
    if (integer == nullptr || !inRange(*info, *integer))
      return support::Status::error(kernel.location(), "kernel '" + kernel.name() + "': " + name + " must be " +
                                                           rangeText(*info) + ", got " + attrValueStr(value));
  }
  return support::Status::ok();
}

}  // namespace attnjit::ir
