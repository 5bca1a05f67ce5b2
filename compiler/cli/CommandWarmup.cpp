// attnjit warmup: compiles, on every core at once, the kernels a spec's variants
// need on this machine's GPU, so that the disk kernel cache (ATTNJIT_CACHE_DIR)
// holds them before an engine's first step: each unified_attention variant
// stands for the op API's calls with its static parameters (every kernel the
// op may pick for them, ops::warmupPagedAttention); every other variant is
// compiled as it is (and a split-KV variant's reduce kernel with it).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "compiler/cli/Command.h"
#include "compiler/kernels/ReduceSegments.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/ops/ReadyKernels.h"
#include "compiler/spec/VariantKernel.h"
#include "runtime/Driver.h"

namespace attnjit::compiler::cli {
namespace {

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
  if (!runtime::driverAvailable()) {
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
              threads > 0 ? ("on " + std::to_string(threads) + " threads").c_str() : "on every core");
  return kExitSuccess;
}

}  // namespace

Command warmupCommand() {
  return Command{
      "warmup",
      "Compile the kernels a spec's variants need on this GPU, on every core at once, into the disk kernel cache.",
      "attnjit warmup <spec.yaml> [--variant=NAME] [--threads=N]",
      "A model needs a dozen or more kernels; compiled one at a time on first use they\n"
      "cost an engine's first steps seconds. warmup compiles them in parallel (and loads\n"
      "them, which is where the driver turns PTX into machine code) so that the disk\n"
      "kernel cache (ATTNJIT_CACHE_DIR, default ~/.cache/attnjit) has every one: later\n"
      "processes load them in milliseconds. A unified_attention variant stands for the\n"
      "op API's calls with its static parameters (dtype, heads, head sizes, block size,\n"
      "cache format, score modifiers): every kernel the op may pick for them, decode and\n"
      "prefill tilings, split-KV and reduce kernels (ops::warmupPagedAttention; `attnjit\n"
      "plan` shows which one a batch gets). Other families' variants compile as they are.\n"
      "Prints each kernel and the wall time. Needs the GPU the cache is for.\n",
      {
          {"--variant", "NAME", false, "only this variant"},
          {"--threads", "N", false, "compile on N threads (default: every core)"},
          {"--help", "", false, "show this help"},
      },
      runWarmup,
  };
}

}  // namespace attnjit::compiler::cli
