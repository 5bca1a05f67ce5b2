#include "compiler/ops/ReadyKernels.h"

#include <mutex>
#include <unordered_map>

#include "compiler/driver/DeviceTarget.h"
#include "runtime/Module.h"

namespace attnjit::ops {

support::Expected<ReadyKernel> readyKernel(const std::string& name, const compiler::KernelFactory& build) {
  static std::mutex mutex;
  static std::string target;
  static std::unordered_map<std::string, ReadyKernel> ready;
  auto context = runtime::currentOrPrimaryContext();
  if (!context) return context.status();
  const std::string key = name + "@" + std::to_string(reinterpret_cast<uintptr_t>(*context));
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = ready.find(key); it != ready.end()) return it->second;
  if (target.empty()) {
    auto deviceZero = compiler::deviceTarget(0);
    if (!deviceZero) return deviceZero.status();
    target = *deviceZero;
  }
  compiler::CompileOptions options;
  options.target = target;
  if (auto ptxIsa = runtime::driverMaxPtxIsa()) options.driverMaxPtx = ptxIsa->asNumber();
  auto jit = compiler::jitKernel(build, options);
  if (!jit) return jit.status();
  ReadyKernel loaded{jit->loaded, jit->numThreads, jit->sharedMemoryBytes};
  ready.emplace(key, loaded);
  return loaded;
}

}  // namespace attnjit::ops
