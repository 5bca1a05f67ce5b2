#include "compiler/driver/DeviceTarget.h"

#include "codegen/Target.h"
#include "runtime/Driver.h"
#include "runtime/Stream.h"

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

namespace {

DeviceFacts queryDeviceFacts(int ordinal) {
  DeviceFacts facts;
  auto name = deviceTarget(ordinal);
  if (name) {
    facts.targetName = *name;
  } else {
    facts.target = name.status();
  }
  auto target = codegen::lookupTarget(name ? *name : "sm_90a");
  facts.warpgroupMma = target && target->hasWgmma;
  if (auto info = runtime::deviceInfo(ordinal)) {
    facts.smCount = info->multiprocessorCount;
    facts.sharedMemory = {info->maxSharedMemoryPerMultiprocessor, info->reservedSharedMemoryPerBlock,
                          info->maxSharedMemoryPerBlockOptin};
  }
  return facts;
}

}  // namespace

const DeviceFacts& deviceFacts(int ordinal) { return perDevice<DeviceFacts, queryDeviceFacts>(ordinal); }

int opDeviceOrdinal() {
  const int device = runtime::driverAvailable() ? runtime::currentContextDevice() : -1;
  return device >= 0 ? device : 0;
}

const DeviceFacts& opDeviceFacts() { return deviceFacts(opDeviceOrdinal()); }

}  // namespace attnjit::compiler
