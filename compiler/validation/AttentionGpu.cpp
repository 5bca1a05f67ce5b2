#include "compiler/validation/AttentionGpu.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>

#include "codegen/Target.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/driver/Jit.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/DiskCache.h"
#include "runtime/KernelCache.h"
#include "runtime/Driver.h"
#include "runtime/Module.h"
#include "compiler/driver/DeviceTarget.h"
#include "compiler/driver/KernelArguments.h"
#include "compiler/validation/GpuTiming.h"
#include "runtime/Stream.h"

namespace attnjit::validation {

using support::Status;

namespace {

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The problem's buffers on the device, in order.
support::Expected<std::vector<runtime::DeviceBuffer>> uploadBuffers(UnifiedAttentionProblem& problem) {
  std::vector<runtime::DeviceBuffer> device;
  for (auto& buffer : problem.buffers()) {
    auto d = runtime::DeviceBuffer::allocate(std::max<size_t>(buffer.bytes.size(), 16));
    if (!d) return d.status();
    if (support::Status s = d->copyFromHost(buffer.bytes.data(), buffer.bytes.size()); !s) return s;
    device.push_back(std::move(*d));
  }
  return device;
}

// Reads the output (and the LSE) back after a run and checks them against the
// float64 reference into `check`, which also keeps the output bytes.
support::Status checkOutputs(UnifiedAttentionProblem& problem, const std::vector<runtime::DeviceBuffer>& device,
                    AttentionRunResult& check) {
  auto& buffers = problem.buffers();
  std::vector<uint8_t> output(buffers[0].bytes.size());
  if (support::Status s = device[0].copyToHost(output.data(), output.size()); !s) return s;
  std::vector<uint8_t> lse;
  const int lseIndex = problem.lseBuffer();
  if (lseIndex >= 0) {
    lse.resize(buffers[static_cast<size_t>(lseIndex)].bytes.size());
    if (support::Status s = device[static_cast<size_t>(lseIndex)].copyToHost(lse.data(), lse.size()); !s) return s;
  }
  problem.check(output, check, lseIndex >= 0 ? &lse : nullptr);
  check.output = std::move(output);
  return support::Status::ok();
}

// Warm-up, then the median of options.timedIterations runs of `launch`, and the
// rates it means (GB/s, TFLOP/s) next to the copy ceiling.
support::Status timeRuns(const UnifiedAttentionProblem& problem, const GpuRunOptions& options,
                const std::function<support::Status()>& launch, GpuRunResult& result) {
  for (int i = 0; i < options.warmupIterations; ++i)
    if (support::Status s = launch(); !s) return s;
  if (support::Status s = timeMedian(options.timedIterations, launch, &result.medianMs); !s) return s;
  result.gbPerSecond = problem.minimumBytes() / (result.medianMs * 1e6);
  result.tflops = problem.flops() / (result.medianMs * 1e9);
  result.copyGbPerSecond = copyCeilingGbPerSecond(problem.minimumBytes(), std::max(5, options.timedIterations / 2));
  return support::Status::ok();
}

}  // namespace

support::Expected<GpuRunResult> runUnifiedAttentionGpu(const compiler::UnifiedAttentionConfig& config,
                                                       const compiler::BatchShape& shape,
                                                       const GpuRunOptions& options) {
  auto target = options.target.empty() ? compiler::localTarget() : support::Expected<std::string>(options.target);
  if (!target) return target.status();
  // Persistent programs: one per SM unless the shape says how many.
  compiler::BatchShape launchShape = shape;
  if (config.persistent && launchShape.programs == 0) launchShape.programs = compiler::deviceFacts(0).smCount;
  auto problem = UnifiedAttentionProblem::create(config, launchShape);
  if (!problem) return problem.status();
  GpuRunResult result;
  result.target = *target;

  // ---- Compile (or find in the kernel cache): tile IR → PTX → cubin → module. ----
  // Every launch of the problem (split-KV has two kernels); the attention kernel's
  // compile split and resources are the ones reported.
  compiler::CompileOptions compileOptions;
  compileOptions.target = *target;
  if (auto ptxIsa = runtime::driverMaxPtxIsa()) compileOptions.driverMaxPtx = ptxIsa->asNumber();
  const auto& launches = (*problem)->launches();
  std::vector<std::unique_ptr<ir::Kernel>> kernels;
  std::vector<compiler::JitKernel> jits;
  for (size_t i = 0; i < launches.size(); ++i) {
    auto buildStart = std::chrono::steady_clock::now();
    auto kernel = (*problem)->buildKernel(launches[i]);  // also describes the parameters below
    if (!kernel) return kernel.status();
    if (i == 0) result.check.buildMs = millisecondsSince(buildStart);
    compiler::KernelFactory factory = [&, i] { return (*problem)->buildKernel(launches[i]); };
    auto jit = compiler::jitKernel(factory, compileOptions);
    if (!jit) return jit.status();
    if (i == 0) {
      result.compilePassesMs = jit->passesSkipped ? 0.0 : jit->passesMs;
      result.cacheOrigin = jit->compiledNow ? "compiled" : jit->fromDisk ? "disk" : "memory";
      if (jit->compiledNow) {
        result.compileLlvmMs = jit->compiled.lowerMs + jit->compiled.llvmOptimizeMs + jit->compiled.ptxEmitMs;
        result.compileCubinMs = std::max(0.0, jit->lookupMs - result.compileLlvmMs - jit->compiled.passesMs);
      }
      // A warm start: a second cache (as a new process would have) finds the entry on disk.
      runtime::KernelCache fresh(runtime::makeDriverKernelLoader(), runtime::DiskCache::fromEnvironment());
      auto warm = compiler::jitKernel(factory, compileOptions, fresh);
      if (warm && warm->fromDisk) result.warmDiskLoadMs = warm->buildMs + warm->passesMs + warm->lookupMs;
      if (auto attributes = jit->loaded->function.attributes()) {
        result.registers = attributes->numRegisters;
        result.spillBytes = attributes->localBytes;
      }
      result.sharedBytes = jit->sharedMemoryBytes;
    }
    kernels.push_back(std::move(*kernel));
    jits.push_back(std::move(*jit));
  }

  // ---- Buffers and parameters. ----
  auto uploaded = uploadBuffers(**problem);
  if (!uploaded) return uploaded.status();
  std::vector<runtime::DeviceBuffer>& device = *uploaded;
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
      // A kernel compiled for {divisibility = N} may only see multiples of N.
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
  result.check.gridX = (*problem)->gridX();
  result.check.gridY = (*problem)->gridY();
  auto launchAll = [&]() -> support::Status {
    for (size_t l = 0; l < prepared.size(); ++l)
      if (support::Status s = jits[l].loaded->function.launch(prepared[l].config, prepared[l].params.data()); !s)
        return s;
    return support::Status::ok();
  };

  // ---- Correctness: one run on the poisoned outputs. ----
  auto runStart = std::chrono::steady_clock::now();
  if (support::Status s = launchAll(); !s) return s;
  if (support::Status s = runtime::synchronizeContext(); !s) return s;
  result.check.runMs = millisecondsSince(runStart);
  if (support::Status s = checkOutputs(**problem, device, result.check); !s) return s;

  // ---- Timing. ----
  if (options.timedIterations > 0) {
    if (support::Status s = timeRuns(**problem, options, launchAll, result); !s) return s;
    {
      constexpr int kLaunches = 200;
      if (support::Status s = runtime::synchronizeContext(); !s) return s;
      auto hostStart = std::chrono::steady_clock::now();
      for (int i = 0; i < kLaunches; ++i) {
        PreparedLaunch& p = prepared[0];
        const size_t firstScalar = launches[0].pointers.size();
        for (size_t j = 0; j < p.scalars.size(); ++j)
          p.scalars[j] =
              compiler::packParameter(kernels[0]->parameter(firstScalar + j)->type(), launches[0].scalars[j]);
        if (support::Status s = jits[0].loaded->function.launch(p.config, p.params.data()); !s) return s;
      }
      result.launchOverheadMicroseconds = millisecondsSince(hostStart) * 1000.0 / kLaunches;
      if (support::Status s = runtime::synchronizeContext(); !s) return s;
    }
  }
  return result;
}

std::optional<GpuRunOptions::OpCall> GpuRunOptions::opCallNamed(const std::string& name) {
  if (name == "engine") return OpCall::Engine;
  if (name == "no-workspace") return OpCall::NoWorkspace;
  if (name == "plain") return OpCall::Plain;
  return std::nullopt;
}

// ---- runPagedAttentionOpGpu: the problem launched through the op API. ----

ops::PagedAttentionParams pagedAttentionOpParams(const UnifiedAttentionProblem& problem,
                                                 const compiler::UnifiedAttentionConfig& config,
                                                 const compiler::BatchShape& shape,
                                                 const std::function<uint64_t(size_t)>& bufferAddress) {
  auto address = [&](const char* label) -> uint64_t {
    const int index = problem.bufferIndex(label);
    return index < 0 ? 0 : bufferAddress(static_cast<size_t>(index));
  };
  const auto& layout = problem.deviceLayout();
  ops::PagedAttentionParams p = ops::pagedAttentionBatchParams(config, shape);
  p.numBlocks = layout.numBlocks;
  p.scale = static_cast<float>(layout.scale);
  p.out = address("out");
  p.q = address("q");
  p.kvCache = address("kv_cache");
  p.blockTables = address("block_tables");
  p.seqLens = address("seq_lens");
  p.cuSeqlensQ = address("cu_seqlens_q");
  p.kScale = address("k_scale");
  p.vScale = address("v_scale");
  p.causalFlags = address("causal_flags");
  p.alibiSlopes = address("alibi_slopes");
  p.sinks = address("sinks");
  p.lse = address("lse");
  p.outputScale = address("output_scale");
  p.qScale = address("q_scale");
  p.qqBias = address("qq_bias");
  p.mmPrefixRange = address("mm_prefix_range");
  if (p.lse) p.lseStrideHead = layout.lseStrideHead;
  p.qStrideToken = layout.qStrideToken;
  p.qStrideHead = layout.qStrideHead;
  p.oStrideToken = layout.oStrideToken;
  p.oStrideHead = layout.oStrideHead;
  p.blockTableStride = layout.blockTableStride;
  p.kvStrideBlock = layout.kvStrideBlock;
  p.kvStrideKv = layout.kvStrideKv;
  p.kvStrideToken = layout.kvStrideToken;
  p.kvStrideHead = layout.kvStrideHead;
  p.kScaleCache = address("k_scale_cache");
  p.vScaleCache = address("v_scale_cache");
  if (p.kScaleCache) {
    p.scaleStrideBlock = layout.scaleStrideBlock;
    p.scaleStrideToken = layout.scaleStrideToken;
    p.scaleStrideHead = layout.scaleStrideHead;
  }
  return p;
}

support::Expected<PagedAttentionOpRun> runPagedAttentionOpGpu(const compiler::UnifiedAttentionConfig& config,
                                                              const compiler::BatchShape& shape,
                                                              const GpuRunOptions& options) {
  compiler::UnifiedAttentionConfig problemConfig = config;
  problemConfig.splitKv = false;  // the op decides; the problem's buffers are the same either way
  auto problem = UnifiedAttentionProblem::create(problemConfig, shape);
  if (!problem) return problem.status();
  if (auto context = runtime::activatePrimaryContext(0); !context) return context.status();

  auto uploaded = uploadBuffers(**problem);
  if (!uploaded) return uploaded.status();
  std::vector<runtime::DeviceBuffer>& device = *uploaded;
  ops::PagedAttentionParams p = pagedAttentionOpParams(**problem, config, shape, [&](size_t index) {
    return device[index].address();
  });
  if (options.opCall == GpuRunOptions::OpCall::Plain) p.minSeqLen = p.maxSeqLen = 0;
  p.tuning = options.planTuning;
  std::optional<runtime::DeviceBuffer> workspace;
  auto workspaceBytes =
      ops::pagedAttentionWorkspaceBytes(p.numTokens, p.numQueryHeads, config.effectiveValueHeadSize(), p.maxSeqLen);
  if (!workspaceBytes) return workspaceBytes.status();
  if (const uint64_t bytes = *workspaceBytes; bytes > 0 && options.opCall == GpuRunOptions::OpCall::Engine) {
    auto w = runtime::DeviceBuffer::allocate(bytes);
    if (!w) return w.status();
    workspace = std::move(*w);
    p.workspace = workspace->address();
    p.workspaceBytes = bytes;
  }
  if (support::Status s = ops::validatePagedAttention(p); !s) return s;

  PagedAttentionOpRun result;
  if (options.tunePlan) {
    auto report = ops::tunePagedAttention(p);
    if (!report) return report.status();
    result.tuning = std::move(*report);
    // The outputs start poisoned again: the check below sees the op's own call.
    auto& buffers = (*problem)->buffers();
    for (const int index : {0, (*problem)->lseBuffer()}) {
      if (index < 0) continue;
      const auto& bytes = buffers[static_cast<size_t>(index)].bytes;
      if (support::Status s = device[static_cast<size_t>(index)].copyFromHost(bytes.data(), bytes.size()); !s)
        return s;
    }
  }
  // ---- Correctness: the first call (compiling or loading) on the poisoned outputs. ----
  const auto firstStart = std::chrono::steady_clock::now();
  if (support::Status s = ops::pagedAttention(p); !s) return s;
  if (support::Status s = runtime::synchronizeContext(); !s) return s;
  result.firstCallMs = millisecondsSince(firstStart);
  // The plan of the timed calls (a first call under PlanTuning::OnFirstUse records one).
  auto launchPlan = ops::pagedAttentionLaunchPlan(p);
  if (!launchPlan) return launchPlan.status();
  const ops::PagedAttentionPlan& plan = *launchPlan;
  result.kernelName = plan.config.kernelName();
  result.numSegments = plan.split.numSegments;
  result.segmentTiles = plan.split.segmentTiles;
  result.tunedPlan = plan.origin == ops::PlanOrigin::Tuned;
  result.plan = ops::describeSplitAndOccupancy(plan);
  GpuRunResult& run = result.run;
  if (support::Status s = checkOutputs(**problem, device, run.check); !s) return s;
  run.check.gridX = (*problem)->gridX();
  run.check.gridY = (*problem)->gridY();

  // ---- Timing: the op's calls, host work included. ----
  if (options.timedIterations > 0)
    if (support::Status s = timeRuns(**problem, options, [&] { return ops::pagedAttention(p); }, run); !s) return s;
  return result;
}

}  // namespace attnjit::validation
