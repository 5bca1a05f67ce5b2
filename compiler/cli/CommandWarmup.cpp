// attnjit warmup: compiles, on every core at once, the kernels a spec's variants
// need on this machine's GPU, so that the disk kernel cache (ATTNJIT_CACHE_DIR)
// holds them before an engine's first step: each unified_attention variant
// stands for the op API's calls with its static parameters (every kernel the
// op may pick for them, ops::warmupPagedAttention); every other variant is
// compiled as it is (and a split-KV variant's reduce kernel with it).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "compiler/cli/Command.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/driver/DeviceTarget.h"
#include "compiler/kernels/ReduceSegments.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/ops/ReadyKernels.h"
#include "compiler/spec/VariantKernel.h"
#include "runtime/Driver.h"
#include "support/ParallelFor.h"

namespace attnjit::compiler::cli {
namespace {

std::string threadsText(int threads) {
  if (threads <= 0) return "on every core";
  return "on " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
}

// --ptx: each kernel built and compiled to PTX as the JIT would (passes, codegen,
// no LLVM IR kept), on `threads` workers, timed one by one. Needs no GPU: the op's
// kernel list is the one it picks for device 0, for --arch's reference device, or
// for an H200 where there is neither.
int compileKernelsToPtx(const std::vector<ops::WarmupKernel>& kernels, int threads) {
  const compiler::DeviceFacts& facts = compiler::opDeviceFacts();
  compiler::CompileOptions options;
  options.target = facts.targetName.empty() ? "sm_90a" : facts.targetName;
  options.keepLlvmIr = false;
  std::vector<double> milliseconds(kernels.size(), 0.0);
  std::vector<support::Status> outcomes(kernels.size(), support::Status::ok());
  const auto start = std::chrono::steady_clock::now();
  support::parallelFor(
      static_cast<int>(kernels.size()),
      [&](int i) {
        const ops::WarmupKernel& kernel = kernels[static_cast<size_t>(i)];
        const auto kernelStart = std::chrono::steady_clock::now();
        auto built = kernel.build();
        if (!built) {
          outcomes[static_cast<size_t>(i)] = built.status();
          return;
        }
        auto compiled = compiler::compileKernel(**built, options);
        if (!compiled) {
          outcomes[static_cast<size_t>(i)] = compiled.status();
          return;
        }
        milliseconds[static_cast<size_t>(i)] =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - kernelStart).count();
      },
      threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (size_t i = 0; i < kernels.size(); ++i) {
    if (!outcomes[i]) {
      reportError(support::Diagnostic{{}, "compiling '" + kernels[i].name + "': " + outcomes[i].diagnostic().message});
      return kExitUserError;
    }
    std::printf("%-90s %8.1f ms\n", kernels[i].name.c_str(), milliseconds[i]);
  }
  if (kernels.empty()) return kExitSuccess;
  std::vector<double> sorted = milliseconds;
  std::sort(sorted.begin(), sorted.end());
  const size_t slowest = static_cast<size_t>(std::max_element(milliseconds.begin(), milliseconds.end()) -
                                             milliseconds.begin());
  std::printf("%zu kernels to PTX for %s in %.2f s (%s); spec -> PTX per kernel: median %.1f ms, max %.1f ms (%s)\n",
              kernels.size(), options.target.c_str(), seconds,
              threadsText(threads).c_str(), sorted[sorted.size() / 2], sorted.back(), kernels[slowest].name.c_str());
  return kExitSuccess;
}

int runWarmup(const ParsedArguments& args) {
  auto path = singleInput(args, "warmup", "spec file");
  if (!path) {
    reportError(path.diagnostic());
    return kExitUserError;
  }
  auto spec = loadSpecForCommand(*path, "warmup");
  if (!spec) {
    reportError(spec.diagnostic());
    return kExitUserError;
  }
  auto selected = selectVariants(*spec, args, "warmup");
  if (!selected) {
    reportError(selected.diagnostic());
    return kExitUserError;
  }
  int threads = 0;
  if (args.has("--threads")) {
    const std::string text = args.value("--threads");
    char* end = nullptr;
    const long n = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || n < 1 || n > 1024) {
      reportUsageError("warmup", "--threads must be 1..1024, got '" + text + "'");
      return kExitUserError;
    }
    threads = static_cast<int>(n);
  }
  const bool ptxOnly = args.has("--ptx");
  std::optional<ScopedOpDeviceFacts> plannedDevice;
  if (args.has("--arch")) {
    if (!ptxOnly) {
      reportUsageError("warmup", "--arch plans for another device: it needs --ptx (the cache is for this GPU)");
      return kExitUserError;
    }
    auto facts = referenceDeviceFacts(args.value("--arch"));
    if (!facts) {
      reportUsageError("warmup", "--arch: " + facts.diagnostic().message);
      return kExitUserError;
    }
    plannedDevice.emplace(std::move(*facts));
  }
  if (!ptxOnly && !runtime::driverAvailable()) {
    reportUsageError("warmup", runtime::driverStatus().diagnostic().message +
                                   " (warm-up loads each kernel: it needs the GPU the cache is for)");
    return kExitUserError;
  }

  // The unified_attention variants' op kernels, and every other variant as it is.
  std::vector<ops::WarmupKernel> kernels;
  auto add = [&](ops::WarmupKernel kernel) {
    for (const ops::WarmupKernel& known : kernels)
      if (known.name == kernel.name) return;
    kernels.push_back(std::move(kernel));
  };
  for (const Variant* variant : *selected) {
    if (variant->family == Family::UnifiedAttention) {
      auto opKernels =
          ops::pagedAttentionWarmupKernels(ops::pagedAttentionBatchParams(variant->attention, BatchShape{}));
      if (!opKernels) {
        reportError(support::Diagnostic{variant->location,
                                        "variant '" + variant->name + "': " + opKernels.diagnostic().message});
        return kExitUserError;
      }
      for (ops::WarmupKernel& kernel : *opKernels) add(std::move(kernel));
      continue;
    }
    add({variant->name, [variant] { return buildVariantKernel(*variant); }});
    if (auto reduce = splitKvStage2(*variant))
      add({reduce->kernelName(), [config = *reduce] { return buildReduceSegments(config); }});
  }
  if (ptxOnly) return compileKernelsToPtx(kernels, threads);
  for (const ops::WarmupKernel& kernel : kernels) std::printf("%s\n", kernel.name.c_str());
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  auto ready = ops::readyKernels(kernels, threads);
  if (!ready) {
    reportError(ready.diagnostic());
    return kExitUserError;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%d kernels ready in %.2f s (%s)\n", *ready, seconds,
              threadsText(threads).c_str());
  return kExitSuccess;
}

}  // namespace

Command warmupCommand() {
  return Command{
      "warmup",
      "Compile the kernels a spec's variants need on this GPU, on every core at once, into the disk kernel cache.",
      "attnjit warmup <spec.yaml> [--variant=NAME] [--threads=N] [--ptx [--arch=sm_XX]]",
      "A model needs a dozen or more kernels; compiled one at a time on first use they\n"
      "cost an engine's first steps seconds. warmup compiles them in parallel (and loads\n"
      "them, which is where the driver turns PTX into machine code) so that the disk\n"
      "kernel cache (ATTNJIT_CACHE_DIR, default ~/.cache/attnjit) has every one: later\n"
      "processes load them in milliseconds. A unified_attention variant stands for the\n"
      "op API's calls with its static parameters (dtype, heads, head sizes, block size,\n"
      "cache format, score modifiers): every kernel the op may pick for them, decode and\n"
      "prefill tilings, split-KV and reduce kernels (ops::warmupPagedAttention; `attnjit\n"
      "plan` shows which one a batch gets). Other families' variants compile as they are.\n"
      "Prints each kernel and the wall time. Needs the GPU the cache is for.\n"
      "\n"
      "--ptx compiles the same kernels to PTX only, as the JIT would, and prints each\n"
      "one's spec -> PTX time (build, passes, codegen) and the median and maximum: no GPU,\n"
      "no cache. The kernel list and target are device 0's, or an H200's (sm_90a, 132 SMs)\n"
      "where there is no GPU; --arch=sm_XX takes a typical device of that target instead\n"
      "(`attnjit plan --help` lists them). --threads=1 times them one after the other.\n",
      {
          {"--variant", "NAME", false, "only this variant"},
          {"--threads", "N", false, "compile on N threads (default: every core)"},
          {"--ptx", "", false, "compile to PTX only and time each kernel (no GPU, no cache)"},
          {"--arch", "sm_XX", false, "with --ptx: the kernels the op picks on a typical device of this target"},
          {"--help", "", false, "show this help"},
      },
      runWarmup,
  };
}

}  // namespace attnjit::compiler::cli
