#include "runtime/ArgumentPromises.h"

#include <cinttypes>
#include <cstdio>

namespace attnjit::runtime {

std::optional<std::string> pointerPromiseBroken(uint64_t address, int64_t alignBytes) {
  if (address == 0) return "is a null pointer";
  if (alignBytes > 0 && address % static_cast<uint64_t>(alignBytes) != 0) {
    char text[24];
    std::snprintf(text, sizeof text, "0x%" PRIx64, address);
    return "is " + std::string(text) + ", not " + std::to_string(alignBytes) +
           "-byte aligned as the kernel was compiled to assume";
  }
  return std::nullopt;
}

std::optional<std::string> divisibilityPromiseBroken(int64_t value, int64_t divisibility) {
  if (divisibility > 1 && value % divisibility != 0)
    return "is " + std::to_string(value) + ", not a multiple of " + std::to_string(divisibility) +
           " as the kernel was compiled to assume";
  return std::nullopt;
}

}  // namespace attnjit::runtime
