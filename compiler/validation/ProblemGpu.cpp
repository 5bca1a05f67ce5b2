// runProblemGpu: the GPU path of KernelProblem, following runUnifiedAttentionGpu
// (compiler/validation/AttentionGpu.cpp) step for step: JIT through the process kernel cache,
// upload, one checked launch, then CUDA-event timing next to a copy of as many bytes.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "compiler/driver/Jit.h"
#include "compiler/validation/KernelProblem.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/KernelCache.h"
#include "runtime/Module.h"
#include "compiler/driver/DeviceTarget.h"
#include "compiler/driver/KernelArguments.h"
#include "compiler/validation/GpuTiming.h"
#include "runtime/Stream.h"

namespace attnjit::validation {

using support::Status;

support::Expected<GpuRunResult> runProblemGpu(const ProblemKernelBuilder& build, const KernelProblem& problem,
                                         const GpuRunOptions& options) {
  // localTarget also makes device 0's primary context current.
  auto local = compiler::localTarget();
  if (!local) return local.status();
  const std::string target = options.target.empty() ? *local : options.target;
  GpuRunResult result;
  result.target = target;
  auto buildStart = std::chrono::steady_clock::now();
  auto kernel = build();  // also describes the parameters below
  if (!kernel) return kernel.status();
  result.check.buildMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - buildStart).count();
  compiler::CompileOptions compileOptions;
  compileOptions.target = target;
  if (auto ptxIsa = runtime::driverMaxPtxIsa()) compileOptions.driverMaxPtx = ptxIsa->asNumber();
  auto jit = compiler::jitKernel(build, compileOptions);
  if (!jit) return jit.status();
  result.compilePassesMs = jit->passesSkipped ? 0.0 : jit->passesMs;
  result.cacheOrigin = jit->compiledNow ? "compiled" : jit->fromDisk ? "disk" : "memory";
  if (jit->compiledNow) {
    result.compileLlvmMs = jit->compiled.lowerMs + jit->compiled.llvmOptimizeMs + jit->compiled.ptxEmitMs;
    result.compileCubinMs = std::max(0.0, jit->lookupMs - result.compileLlvmMs - jit->compiled.passesMs);
  }
  const runtime::Function& function = jit->loaded->function;
  if (auto attributes = function.attributes()) {
    result.registers = attributes->numRegisters;
    result.spillBytes = attributes->localBytes;
  }
  result.sharedBytes = jit->sharedMemoryBytes;

  const auto& buffers = problem.buffers();
  std::vector<runtime::DeviceBuffer> device;
  for (const auto& buffer : buffers) {
    auto d = runtime::DeviceBuffer::allocate(std::max<size_t>(buffer.bytes.size(), 16));
    if (!d) return d.status();
    if (support::Status s = d->copyFromHost(buffer.bytes.data(), buffer.bytes.size()); !s) return s;
    device.push_back(std::move(*d));
  }
  std::vector<compiler::PackedParameter> scalars;
  const size_t firstScalar = buffers.size();
  for (size_t i = 0; i < problem.scalarArguments().size(); ++i) {
    const auto& value = problem.scalarArguments()[i];
    const ir::AttrValue* divisibility = (*kernel)->parameterAttrs(firstScalar + i).find("divisibility");
    if (divisibility && std::holds_alternative<int64_t>(value) &&
        std::get<int64_t>(value) % std::get<int64_t>(*divisibility) != 0)
      return support::Diagnostic{{}, "parameter '" + (*kernel)->parameter(firstScalar + i)->name() + "' is " +
                                    std::to_string(std::get<int64_t>(value)) + ", not a multiple of " +
                                    std::to_string(std::get<int64_t>(*divisibility)) +
                                    " as the kernel was compiled to assume"};
    scalars.push_back(compiler::packParameter((*kernel)->parameter(firstScalar + i)->type(), value));
  }
  std::vector<void*> params;
  for (auto& d : device) params.push_back(d.kernelArgument());
  for (auto& p : scalars) params.push_back(p.bytes);
  runtime::LaunchConfig launch;
  const KernelProblem::Grid grid = problem.grid();
  launch.grid = {static_cast<unsigned>(grid.x), static_cast<unsigned>(grid.y), static_cast<unsigned>(grid.z)};
  launch.block = {static_cast<unsigned>(jit->numThreads), 1, 1};
  launch.dynamicSharedBytes = static_cast<unsigned>(jit->sharedMemoryBytes);
  result.check.gridX = grid.x;
  result.check.gridY = grid.y;

  auto runStart = std::chrono::steady_clock::now();
  if (support::Status s = function.launch(launch, params.data()); !s) return s;
  if (support::Status s = runtime::synchronizeContext(); !s) return s;
  result.check.runMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - runStart).count();
  std::vector<KernelProblem::Buffer> after = buffers;
  for (size_t i = 0; i < after.size(); ++i)
    if (after[i].written)
      if (support::Status s = device[i].copyToHost(after[i].bytes.data(), after[i].bytes.size()); !s) return s;
  problem.check(after, result.check);

  if (options.timedIterations > 0) {
    for (int i = 0; i < options.warmupIterations; ++i)
      if (support::Status s = function.launch(launch, params.data()); !s) return s;
    if (support::Status s = timeMedian(options.timedIterations, [&] { return function.launch(launch, params.data()); },
                              &result.medianMs);
        !s)
      return s;
    result.gbPerSecond = problem.minimumBytes() / (result.medianMs * 1e6);
    result.copyGbPerSecond = copyCeilingGbPerSecond(problem.minimumBytes(), std::max(5, options.timedIterations / 2));
  }
  return result;
}

}  // namespace attnjit::validation
