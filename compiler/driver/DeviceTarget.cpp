#include "compiler/driver/DeviceTarget.h"

#include "codegen/Target.h"
#include "runtime/Driver.h"

namespace attnjit::compiler {

support::Expected<std::string> deviceTarget(int ordinal) {
  auto info = runtime::deviceInfo(ordinal);
  if (!info) return info.status();
  const int sm = info->smVersion();
  for (const char* suffix : {"a", ""}) {
    auto target = codegen::lookupTarget("sm_" + std::to_string(sm) + suffix);
    if (target) return target->name;
  }
  std::string known;
  for (const auto& t : codegen::allTargets()) known += " " + t.name;
  return support::Diagnostic{{},
                             "the GPU " + std::to_string(ordinal) + " (" + info->name + ", sm_" + std::to_string(sm) +
                                 ") has no attnjit target; supported:" + known};
}

support::Expected<std::string> localTarget() {
  auto context = runtime::activatePrimaryContext(0);
  if (!context) return context.status();
  return deviceTarget(0);
}

SharedMemoryLimits deviceZeroSharedMemoryLimits() {
  static const SharedMemoryLimits limits = [] {
    auto info = runtime::deviceInfo(0);
    if (!info) return SharedMemoryLimits{};
    return SharedMemoryLimits{info->maxSharedMemoryPerMultiprocessor, info->reservedSharedMemoryPerBlock,
                              info->maxSharedMemoryPerBlockOptin};
  }();
  return limits;
}

bool deviceZeroHasWarpgroupMma() {
  static const bool has = [] {
    auto name = deviceTarget(0);
    auto target = codegen::lookupTarget(name ? *name : "sm_90a");
    return target && target->hasWgmma;
  }();
  return has;
}

int deviceZeroSmCount() {
  static const int count = [] {
    auto info = runtime::deviceInfo(0);
    return info ? info->multiprocessorCount : 0;
  }();
  return count;
}

}  // namespace attnjit::compiler
