// runMlaDecodeGpu: the GPU path of MlaDecodeProblem, step for step as
// runUnifiedAttentionGpu (compiler/validation/AttentionGpu.cpp): JIT every launch's kernel
// through the process cache, upload, one checked run on the poisoned buffers, then
// CUDA-event timing of all launches next to a copy of as many bytes.
#include <algorithm>
#include <chrono>

#include "compiler/driver/DeviceTarget.h"
#include "compiler/driver/KernelArguments.h"
#include "compiler/validation/GpuTiming.h"
#include "compiler/driver/Jit.h"
#include "compiler/validation/MlaDecodeProblem.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/Module.h"
#include "runtime/Stream.h"

namespace attnjit::validation {

using support::Status;

support::Expected<GpuRunResult> runMlaDecodeGpu(const compiler::MlaDecodeConfig& config, const MlaDecodeBatch& batch,
                                           const GpuRunOptions& options) {
  auto target = compiler::localTarget();
  if (!target) return target.status();
  auto problem = MlaDecodeProblem::create(config, batch);
  if (!problem) return problem.status();
  GpuRunResult result;
  result.target = *target;

  compiler::CompileOptions compileOptions;
  compileOptions.target = *target;
  if (auto ptxIsa = runtime::driverMaxPtxIsa()) compileOptions.driverMaxPtx = ptxIsa->asNumber();
  const auto& launches = (*problem)->launches();
  std::vector<std::unique_ptr<ir::Kernel>> kernels;
  std::vector<compiler::JitKernel> jits;
  for (size_t i = 0; i < launches.size(); ++i) {
    const auto buildStart = std::chrono::steady_clock::now();
    auto kernel = (*problem)->buildKernel(launches[i]);  // describes the parameters below
    if (!kernel) return kernel.status();
    if (i == 0)
      result.check.buildMs =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - buildStart).count();
    auto jit = compiler::jitKernel([&, i] { return (*problem)->buildKernel(launches[i]); }, compileOptions);
    if (!jit) return jit.status();
    if (i == 0) {
      result.compilePassesMs = jit->passesSkipped ? 0.0 : jit->passesMs;
      result.cacheOrigin = jit->compiledNow ? "compiled" : jit->fromDisk ? "disk" : "memory";
      if (jit->compiledNow) {
        result.compileLlvmMs = jit->compiled.lowerMs + jit->compiled.llvmOptimizeMs + jit->compiled.ptxEmitMs;
        result.compileCubinMs = std::max(0.0, jit->lookupMs - result.compileLlvmMs - jit->compiled.passesMs);
      }
      if (auto attributes = jit->loaded->function.attributes()) {
        result.registers = attributes->numRegisters;
        result.spillBytes = attributes->localBytes;
      }
      result.sharedBytes = jit->sharedMemoryBytes;
    }
    kernels.push_back(std::move(*kernel));
    jits.push_back(std::move(*jit));
  }

  const auto& buffers = (*problem)->buffers();
  std::vector<runtime::DeviceBuffer> device;
  for (const auto& buffer : buffers) {
    auto d = runtime::DeviceBuffer::allocate(std::max<size_t>(buffer.bytes.size(), 16));
    if (!d) return d.status();
    if (support::Status s = d->copyFromHost(buffer.bytes.data(), buffer.bytes.size()); !s) return s;
    device.push_back(std::move(*d));
  }
  struct PreparedLaunch {
    std::vector<compiler::PackedParameter> scalars;
    std::vector<void*> params;
    runtime::LaunchConfig config;
  };
  std::vector<PreparedLaunch> prepared(launches.size());
  for (size_t l = 0; l < launches.size(); ++l) {
    const auto& launch = launches[l];
    const ir::Kernel& kernel = *kernels[l];
    PreparedLaunch& p = prepared[l];
    const size_t firstScalar = launch.pointers.size();
    for (size_t i = 0; i < launch.scalars.size(); ++i) {
      const auto& value = launch.scalars[i];
      const ir::AttrValue* divisibility = kernel.parameterAttrs(firstScalar + i).find("divisibility");
      if (divisibility && std::holds_alternative<int64_t>(value) &&
          std::get<int64_t>(value) % std::get<int64_t>(*divisibility) != 0)
        return support::Diagnostic{{}, "parameter '" + kernel.parameter(firstScalar + i)->name() + "' is " +
                                      std::to_string(std::get<int64_t>(value)) + ", not a multiple of " +
                                      std::to_string(std::get<int64_t>(*divisibility)) +
                                      " as the kernel was compiled to assume"};
      p.scalars.push_back(compiler::packParameter(kernel.parameter(firstScalar + i)->type(), value));
    }
    for (size_t index : launch.pointers) p.params.push_back(device[index].kernelArgument());
    for (auto& scalar : p.scalars) p.params.push_back(scalar.bytes);
    p.config.grid = {static_cast<unsigned>(launch.gridX), static_cast<unsigned>(launch.gridY),
                     static_cast<unsigned>(launch.gridZ)};
    p.config.block = {static_cast<unsigned>(jits[l].numThreads), 1, 1};
    p.config.dynamicSharedBytes = static_cast<unsigned>(jits[l].sharedMemoryBytes);
  }
  result.check.gridX = launches[0].gridX;
  result.check.gridY = launches[0].gridY;
  auto launchAll = [&]() -> support::Status {
    for (size_t l = 0; l < prepared.size(); ++l)
      if (support::Status s = jits[l].loaded->function.launch(prepared[l].config, prepared[l].params.data()); !s)
        return s;
    return support::Status::ok();
  };

  const auto runStart = std::chrono::steady_clock::now();
  if (support::Status s = launchAll(); !s) return s;
  if (support::Status s = runtime::synchronizeContext(); !s) return s;
  result.check.runMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - runStart).count();
  // The written buffers as the GPU left them; the inputs (the cache is gigabytes
  // in benchmarks) are not copied: the check reads only outputs.
  std::vector<MlaDecodeProblem::Buffer> after(buffers.size());
  for (size_t i = 0; i < after.size(); ++i) {
    after[i].label = buffers[i].label;
    after[i].written = buffers[i].written;
    if (!after[i].written) continue;
    after[i].bytes.resize(buffers[i].bytes.size());
    if (support::Status s = device[i].copyToHost(after[i].bytes.data(), after[i].bytes.size()); !s) return s;
  }
  (*problem)->check(after, result.check);
  result.check.output = std::move(after[0].bytes);

  if (options.timedIterations > 0) {
    for (int i = 0; i < options.warmupIterations; ++i)
      if (support::Status s = launchAll(); !s) return s;
    if (support::Status s = timeMedian(options.timedIterations, launchAll, &result.medianMs); !s) return s;
    result.gbPerSecond = (*problem)->minimumBytes() / (result.medianMs * 1e6);
    result.tflops = (*problem)->flops() / (result.medianMs * 1e9);
    result.copyGbPerSecond =
        copyCeilingGbPerSecond((*problem)->minimumBytes(), std::max(5, options.timedIterations / 2));
  }
  return result;
}

}  // namespace attnjit::validation
