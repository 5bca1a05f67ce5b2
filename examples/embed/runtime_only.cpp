// The runtime library alone (attnjit::runtime, no LLVM): the CUDA driver as
// attnjit loads it, which is all an ahead-of-time bundle needs besides its images.
#include <cstdio>

#include "attnjit/runtime/Driver.h"

int main() {
  if (attnjit::runtime::Status s = attnjit::runtime::driverStatus(); !s) {
    std::printf("runtime only: no GPU here: %s\n", s.message().c_str());
    return 0;
  }
  auto count = attnjit::runtime::deviceCount();
  if (!count) {
    std::printf("runtime only: %s\n", count.diagnostic().str().c_str());
    return 1;
  }
  for (int i = 0; i < *count; ++i)
    if (auto info = attnjit::runtime::deviceInfo(i))
      std::printf("runtime only: device %d: %s, sm_%d\n", i, info->name.c_str(), info->smVersion());
  return 0;
}
