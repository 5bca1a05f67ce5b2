// attnjit run: build every variant of a spec, run it on the spec's batch (on the
// GPU, or on the CPU interpreter with --interpret), and check it against the
// float64 reference.
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "compiler/validation/AttentionGpu.h"
#include "compiler/validation/AttentionProblem.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/validation/VariantRuns.h"
#include "compiler/cli/Command.h"
#include "compiler/driver/DeviceTarget.h"
#include "ir/Interpreter.h"
#include "runtime/Driver.h"

namespace attnjit::compiler::cli {
namespace {

void printRow(size_t nameWidth, const std::string& variant, const std::string& buildMs, const std::string& runMs,
              const std::string& absErr, const std::string& relErr, const std::string& tolerance,
              const std::string& result) {
  std::printf("%-*s  %9s  %9s  %11s  %11s  %9s  %s\n", static_cast<int>(nameWidth), variant.c_str(),
              buildMs.c_str(), runMs.c_str(), absErr.c_str(), relErr.c_str(), tolerance.c_str(), result.c_str());
  std::fflush(stdout);
}

std::string format(const char* pattern, double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, pattern, value);
  return buffer;
}

// The interpreter's progress on stderr: on a terminal one line rewritten every second,
// otherwise (a log) a line every ten seconds and one at the end; a kernel that takes
// less than a second prints nothing.
ir::InterpreterProgressScope::Report interpreterProgressReport() {
  const bool terminal = isatty(STDERR_FILENO) != 0;
  return [terminal, reports = 0](const std::string& kernel, int64_t done, int64_t total) mutable {
    if (!terminal && done < total && ++reports % 10 != 0) return;
    const double percent = total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0;
    std::fprintf(stderr, "%sattnjit run: interpreting %s: %lld of %lld programs (%.0f%%)%s",
                 terminal ? "\r" : "", kernel.c_str(), static_cast<long long>(done),
                 static_cast<long long>(total), percent, terminal && done < total ? "" : "\n");
    std::fflush(stderr);
  };
}

int runRun(const ParsedArguments& args) {
  auto path = singleInput(args, "run", "spec file");
  if (!path) {
    reportError(path.diagnostic());
    return kExitUserError;
  }
  const bool interpret = args.has("--interpret");
  if (!interpret && !runtime::driverAvailable()) {
    reportUsageError("run", runtime::driverStatus().diagnostic().message + "; use --interpret to run on the CPU");
    return kExitUserError;
  }
  auto spec = loadSpecForCommand(*path, "run");
  if (!spec) {
    reportError(spec.diagnostic());
    return kExitUserError;
  }
  auto selected = selectVariants(*spec, args, "run");
  if (!selected) {
    reportError(selected.diagnostic());
    return kExitUserError;
  }
  auto parsedShape = shapeFromArguments(*spec, args, "run");
  if (!parsedShape) {
    reportError(parsedShape.diagnostic());
    return kExitUserError;
  }
  const BatchShape& shape = *parsedShape;

  std::string executor = "CPU interpreter";
  if (!interpret) {
    auto target = localTarget();
    if (!target) {
      reportError(target.diagnostic());
      return kExitUserError;
    }
    executor = "GPU (" + *target + ")";
  }
  std::printf("spec %s, executor: %s\n", spec->path.c_str(), executor.c_str());
  std::printf("batch: %s\n", shape.str().c_str());
  size_t nameWidth = 7;
  for (const Variant* v : *selected) nameWidth = std::max(nameWidth, v->name.size());
  // The tolerance bounds the max abs error (outputs are O(1)); the relative
  // error, against |ref| + 1e-3 · max|ref|, is reported for reading only.
  printRow(nameWidth, "variant", "build ms", "run ms", "max abs err", "max rel err", "abs err tol", "result");
  int failures = 0;
  for (const Variant* variant : *selected) {
    support::Expected<validation::AttentionRunResult> result = support::Diagnostic{};
    if (interpret) {
      ir::InterpreterProgressScope progress(interpreterProgressReport());
      result = validation::runVariantInterpreted(*variant, shape);
    } else {
      auto gpu = validation::runVariantGpu(*variant, shape, validation::GpuRunOptions{});
      if (gpu) {
        // Build time here is the whole JIT: builder, passes, LLVM, PTX → cubin.
        gpu->check.buildMs += gpu->compilePassesMs + gpu->compileLlvmMs + gpu->compileCubinMs;
        result = gpu->check;
      } else {
        result = gpu.status();
      }
    }
    if (!result) {
      // A shape the kernel cannot take, or a builder failure: either way no number to check.
      reportError(
          support::Diagnostic{variant->location, "variant '" + variant->name + "': " + result.diagnostic().message});
      return kExitUserError;
    }
    failures += result->passed ? 0 : 1;
    printRow(nameWidth, variant->name, format("%.2f", result->buildMs), format("%.2f", result->runMs),
             format("%.3e", result->maxAbsError), format("%.3e", result->maxRelError),
             format("%.1e", result->tolerance), result->passed ? "PASS" : "FAIL");
  }
  std::printf("%zu variant(s): %zu passed, %d failed\n", selected->size(), selected->size() - failures, failures);
  return failures == 0 ? kExitSuccess : kExitCheckFailed;
}

}  // namespace

Command runCommand() {
  return Command{
      "run",
      "Run every variant of a spec on its batch and check it against a float64 reference.",
      "attnjit run <spec.yaml> [--interpret] [--variant=NAME] [--shape KEY=VALUE ...]",
      "The batch is the spec's 'run' section (see specs/README.md), changed by --shape:\n"
      "  --shape query_lens=1,1,37 --shape context_lens=100,7,0 --shape seed=3\n"
      "Prints one row per variant: build and run time, max abs/rel error, the tolerance of the max abs error\n"
      "(PASS when the max abs error is within it; the relative error is for reading), PASS or FAIL.\n"
      "Exit status 1 when any variant fails its check.\n"
      "Runs on the GPU (JIT for the local device) unless --interpret asks for the CPU interpreter;\n"
      "without a CUDA driver, --interpret is required. 'attnjit bench' times kernels.\n"
      "The interpreter reports its progress on stderr when a kernel takes over a second.\n"
      "A batch is refused before it starts when its host memory (inputs, outputs, float64\n"
      "reference) exceeds ATTNJIT_HOST_MEMORY_BUDGET (bytes, K/M/G/T suffixes; default 3/4 of\n"
      "the memory the process may use) or, interpreted, its multiply-adds exceed\n"
      "ATTNJIT_INTERPRETER_WORK_BUDGET (default 4e12, about an hour).\n",
      {
          {"--interpret", "", false, "run on the CPU interpreter instead of the GPU"},
          {"--variant", "NAME", false, "only this variant"},
          {"--shape", "KEY=VALUE", true,
           "override the batch: query_lens=.., context_lens=.. (lists; VxN repeats), seed=N, check_stride=N"},
          {"--help", "", false, "show this help"},
      },
      runRun,
  };
}

}  // namespace attnjit::compiler::cli
