#include "compiler/driver/DeviceTarget.h"

#include <utility>

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
  facts.gridDependencyControl = name && target && target->hasGridDependencyControl;
  if (auto info = runtime::deviceInfo(ordinal)) {
    facts.deviceName = info->name;
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

namespace {
std::atomic<const DeviceFacts*> plannedDeviceFacts{nullptr};
}  // namespace

const DeviceFacts& opDeviceFacts() {
  if (const DeviceFacts* planned = plannedDeviceFacts.load(std::memory_order_acquire)) return *planned;
  return deviceFacts(opDeviceOrdinal());
}

support::Expected<DeviceFacts> referenceDeviceFacts(const std::string& targetName) {
  auto target = codegen::lookupTarget(targetName);
  if (!target) return target.status();
  // Per SM: 164 KiB on sm_80, 100 KiB on the consumer-class parts (sm_86, sm_89,
  // sm_120), 228 KiB on sm_90 and sm_100; the driver reserves 1 KiB per block.
  struct Reference {
    int computeCapability;
    const char* name;
    int smCount;
    int64_t sharedPerSm;
  };
  static constexpr Reference kReferences[] = {
      {80, "A100", 108, 164 * 1024},     {86, "A10", 72, 100 * 1024},
      {89, "L40S", 142, 100 * 1024},     {90, "H100 SXM / H200", 132, 228 * 1024},
      {100, "B200", 148, 228 * 1024},    {120, "RTX 5090", 170, 100 * 1024},
  };
  for (const Reference& reference : kReferences) {
    if (reference.computeCapability != target->computeCapability) continue;
    DeviceFacts facts;
    facts.targetName = target->name;
    facts.deviceName = reference.name;
    facts.warpgroupMma = target->hasWgmma;
    facts.gridDependencyControl = target->hasGridDependencyControl;
    facts.smCount = reference.smCount;
    facts.sharedMemory = {reference.sharedPerSm, 1024, target->maxSharedBytesPerBlock};
    return facts;
  }
  return support::Diagnostic{{}, "no reference device for " + target->name};
}

ScopedOpDeviceFacts::ScopedOpDeviceFacts(DeviceFacts facts)
    : facts_(std::move(facts)), previous_(plannedDeviceFacts.exchange(&facts_, std::memory_order_acq_rel)) {}

ScopedOpDeviceFacts::~ScopedOpDeviceFacts() { plannedDeviceFacts.store(previous_, std::memory_order_release); }

}  // namespace attnjit::compiler
