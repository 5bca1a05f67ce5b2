// attnjit bench: JIT-compile each variant for the local GPU, check it once against
// the float64 reference, then time it with CUDA events after warm-up and print the
// median next to what it means: GB/s and TFLOP/s (counted as shared/REFERENCE.md
// counts them), the ratio to a device-to-device copy of as many bytes measured in
// the same process, and where compile time went.
#include <algorithm>
#include <cstdio>

#include "compiler/validation/AttentionGpu.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/validation/VariantRuns.h"
#include "compiler/cli/Command.h"
#include "runtime/Driver.h"

namespace attnjit::compiler::cli {
namespace {

// bench --op: each variant's static parameters through ops::pagedAttention, which
// picks the kernel and the split plan for the batch.
int benchThroughOp(const std::vector<const Variant*>& variants, const BatchShape& shape,
                   const validation::GpuRunOptions& options) {
  std::printf("%-52s %9s %9s %8s %7s %8s | %s\n", "variant (through the op API)", "median ms", "GB/s", "TFLOP/s",
              "copy%", "copyGB/s", "the op's kernel, split plan, first call");
  int failures = 0;
  for (const Variant* variant : variants) {
    auto r = validation::runPagedAttentionOpGpu(variant->attention, shape, options);
    if (!r) {
      reportError(support::Diagnostic{variant->location, "variant '" + variant->name + "': " + r.diagnostic().message});
      return kExitUserError;
    }
    const validation::GpuRunResult& run = r->run;
    failures += run.check.passed ? 0 : 1;
    char plan[64] = "2D";
    if (r->numSegments > 1)
      std::snprintf(plan, sizeof plan, r->segmentTiles > 0 ? "%d segments of %d tiles" : "%d even segments of >= %d tiles",
                    r->numSegments, r->segmentTiles > 0 ? r->segmentTiles : -r->segmentTiles);
    std::printf("%-52s %9.4f %9.1f %8.1f %6.1f%% %8.1f | %s, %s, %.1f ms; %s (err %.2e)\n", variant->name.c_str(),
                run.medianMs, run.gbPerSecond, run.tflops,
                run.copyGbPerSecond > 0 ? 100.0 * run.gbPerSecond / run.copyGbPerSecond : 0.0, run.copyGbPerSecond,
                r->kernelName.c_str(), plan, r->firstCallMs, run.check.passed ? "PASS" : "FAIL",
                run.check.maxAbsError);
    if (!run.check.passed) std::printf("  %s\n", run.check.detail.c_str());
    std::fflush(stdout);
  }
  return failures == 0 ? kExitSuccess : kExitCheckFailed;
}

int runBench(const ParsedArguments& args) {
  auto path = singleInput(args, "bench", "spec file");
  if (!path) {
    reportError(path.diagnostic());
    return kExitUserError;
  }
  auto spec = loadSpecForCommand(*path, "bench");
  if (!spec) {
    reportError(spec.diagnostic());
    return kExitUserError;
  }
  auto selected = selectVariants(*spec, args, "bench");
  if (!selected) {
    reportError(selected.diagnostic());
    return kExitUserError;
  }
  const bool throughOp = args.has("--op");
  if (throughOp)
    if (support::Status s = requireUnifiedAttention(*selected, "bench --op"); !s) {
      reportError(s.diagnostic());
      return kExitUserError;
    }
  auto opCall = validation::GpuRunOptions::OpCall::Engine;
  if (args.has("--op-call")) {
    const std::string call = args.value("--op-call");
    const auto named = validation::GpuRunOptions::opCallNamed(call);
    if (!throughOp || !named) {
      reportUsageError("bench", "--op-call takes engine, no-workspace or plain, with --op; got '" + call + "'");
      return kExitUserError;
    }
    opCall = *named;
  }
  if (!runtime::driverAvailable()) {
    reportUsageError("bench", runtime::driverStatus().diagnostic().message);
    return kExitUserError;
  }
  auto parsedShape = shapeFromArguments(*spec, args, "bench");
  if (!parsedShape) {
    reportError(parsedShape.diagnostic());
    return kExitUserError;
  }
  const BatchShape& shape = *parsedShape;
  validation::GpuRunOptions options;
  options.timedIterations = 50;
  if (args.has("--iterations")) {
    int n = std::atoi(args.value("--iterations").c_str());
    if (n < 1 || n > 100000) {
      reportUsageError("bench", "--iterations must be 1..100000, got '" + args.value("--iterations") + "'");
      return kExitUserError;
    }
    options.timedIterations = n;
  }
  options.opCall = opCall;
  std::printf("batch: %s\n", shape.str().c_str());
  if (throughOp) return benchThroughOp(*selected, shape, options);
  std::printf("%-52s %9s %9s %8s %7s %8s %7s | %7s %7s %7s %7s | %4s %6s %s\n", "variant", "median ms", "GB/s",
              "TFLOP/s", "copy%", "copyGB/s", "grid", "passes", "llvm", "cubin", "warm", "regs", "smem", "check");
  int failures = 0;
  for (const Variant* variant : *selected) {
    auto r = validation::runVariantGpu(*variant, shape, options);
    if (!r) {
      reportError(support::Diagnostic{variant->location, "variant '" + variant->name + "': " + r.diagnostic().message});
      return kExitUserError;
    }
    failures += r->check.passed ? 0 : 1;
    char grid[32];
    std::snprintf(grid, sizeof grid, "%lldx%lld", static_cast<long long>(r->check.gridX),
                  static_cast<long long>(r->check.gridY));
    std::printf("%-52s %9.4f %9.1f %8.1f %6.1f%% %8.1f %7s | %7.2f %7.2f %7.2f %7.2f | %4d %6d %s (err %.2e)\n",
                variant->name.c_str(), r->medianMs, r->gbPerSecond, r->tflops,
                r->copyGbPerSecond > 0 ? 100.0 * r->gbPerSecond / r->copyGbPerSecond : 0.0, r->copyGbPerSecond,
                grid, r->compilePassesMs, r->compileLlvmMs, r->compileCubinMs, r->warmDiskLoadMs, r->registers,
                r->sharedBytes, r->check.passed ? "PASS" : "FAIL", r->check.maxAbsError);
    std::printf("  launch overhead (host, parameter packing + cuLaunchKernel): %.2f us\n",
                r->launchOverheadMicroseconds);
    if (!r->check.passed) std::printf("  %s\n", r->check.detail.c_str());
    std::fflush(stdout);
  }
  return failures == 0 ? kExitSuccess : kExitCheckFailed;
}

}  // namespace

Command benchCommand() {
  return Command{
      "bench",
      "Time each variant of a spec on the GPU (median of CUDA-event timings) with GB/s, TFLOP/s and compile times.",
      "attnjit bench <spec.yaml> [--variant=NAME] [--shape KEY=VALUE ...] [--iterations=N] [--op]",
      "Checks each kernel once against the float64 reference (on a sample of tokens when the\n"
      "batch sets check_stride), then times N launches (default 50) after 3 warm-up launches.\n"
      "Columns: median kernel time; GB/s of the unique bytes of q, K/V and o; TFLOP/s as\n"
      "4·D·Hq·(visible keys); copy% = GB/s over a device-to-device copy's; compile time split\n"
      "into tile-IR passes, LLVM lowering+O3+PTX, PTX→cubin+load (driver), and a warm start\n"
      "from the disk kernel cache (ATTNJIT_CACHE_DIR) as a new process would see it (kernel\n"
      "build, alias lookup instead of the passes, entry read, module load). Stages a cache hit\n"
      "skipped print 0.\n"
      "Example (decode, B=64, ctx 4096):\n"
      "  attnjit bench specs/bench.yaml --shape query_lens=1x64 --shape context_lens=4095x64\n"
      "With --op, each unified_attention variant runs through the op API (ops::pagedAttention)\n"
      "as an engine calls it: its static parameters, the batch's min/max seq_len hints and a\n"
      "workspace, so the op picks the kernel and the split-KV plan, which are printed; the\n"
      "variant's tiling options are ignored, and the time includes the op's host work.\n"
      "--op-call=no-workspace leaves the workspace out (split-KV into the runtime's scratch);\n"
      "--op-call=plain leaves out the workspace and the seq_len hints too.\n",
      {
          {"--variant", "NAME", false, "only this variant"},
          {"--shape", "KEY=VALUE", true,
           "override the batch: query_lens=.., context_lens=.. (lists; VxN repeats), seed=N, check_stride=N"},
          {"--iterations", "N", false, "timed launches (default 50)"},
          {"--op", "", false, "run through the op API (unified_attention): its kernel and split choice"},
          {"--op-call", "STYLE", false, "with --op: engine (default), no-workspace or plain"},
          {"--help", "", false, "show this help"},
      },
      runBench,
  };
}

}  // namespace attnjit::compiler::cli
