#include "compiler/ops/ReadyKernels.h"

#include <algorithm>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "compiler/driver/DeviceTarget.h"
#include "runtime/Module.h"
#include "support/ParallelFor.h"

namespace attnjit::ops {

support::Expected<ReadyKernel> readyKernel(const std::string& name, const compiler::KernelFactory& build) {
  static std::mutex mutex;
  static std::unordered_map<std::string, ReadyKernel> ready;
  auto context = runtime::currentOrPrimaryContext();
  if (!context) return context.status();
  const std::string key = name + "@" + std::to_string(reinterpret_cast<uintptr_t>(*context));
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = ready.find(key); it != ready.end()) return it->second;
  }
  // The context is current now: its device's target.
  const compiler::DeviceFacts& device = compiler::opDeviceFacts();
  if (!device.target) return device.target;
  compiler::CompileOptions options;
  options.target = device.targetName;
  // Compiled outside the lock, so that first calls of different kernels (a
  // warm-up on several threads) compile in parallel; the kernel cache makes
  // concurrent requests for one kernel wait for a single compile.
  if (auto ptxIsa = runtime::driverMaxPtxIsa()) options.driverMaxPtx = ptxIsa->asNumber();
  auto jit = compiler::jitKernel(build, options);
  if (!jit) return jit.status();
  // Planning counts the CTAs an SM holds at the kernel's own launch size.
  auto resident = jit->loaded->function.residentBlocksPerMultiprocessor(
      jit->numThreads, static_cast<unsigned>(jit->sharedMemoryBytes));
  if (!resident) return resident.status();
  std::lock_guard<std::mutex> lock(mutex);
  return ready
      .try_emplace(key, ReadyKernel{jit->loaded, jit->numThreads, jit->sharedMemoryBytes, *resident,
                                    device.gridDependencyControl})
      .first->second;
}

std::vector<support::Status> readyEachKernel(const std::vector<WarmupKernel>& kernels, int threads) {
  std::vector<support::Status> outcomes(kernels.size(), support::Status::ok());
  auto context = runtime::currentOrPrimaryContext();
  if (!context) {
    for (support::Status& outcome : outcomes) outcome = context.status();
    return outcomes;
  }
  const int workers = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  support::parallelFor(
      static_cast<int>(kernels.size()),
      [&](int i) {
        const auto& [name, build] = kernels[static_cast<size_t>(i)];
        support::Status& outcome = outcomes[static_cast<size_t>(i)];
        if (outcome = runtime::makeContextCurrent(*context); !outcome) return;
        if (auto ready = readyKernel(name, build); !ready)
          outcome = support::Status::error({}, "warming up '" + name + "': " + ready.diagnostic().message);
      },
      workers);
  return outcomes;
}

support::Expected<int> readyKernels(const std::vector<WarmupKernel>& kernels, int threads) {
  if (auto context = runtime::currentOrPrimaryContext(); !context) return context.status();
  for (const support::Status& outcome : readyEachKernel(kernels, threads))
    if (!outcome) return outcome;
  return static_cast<int>(kernels.size());
}

}  // namespace attnjit::ops
