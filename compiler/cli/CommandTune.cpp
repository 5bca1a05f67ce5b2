// attnjit tune: measures the paged-attention op's candidate plans for a batch
// on this machine's GPU (ops::tunePagedAttention) and records the fastest for
// the batch's bucket, so that an engine's calls of that bucket take it; then
// checks the op's call with the recorded plan against the float64 reference
// and times it.
#include <cstdio>
#include <cstdlib>

#include "compiler/cli/Command.h"
#include "compiler/validation/AttentionGpu.h"
#include "runtime/Driver.h"

namespace attnjit::compiler::cli {
namespace {

void printReport(const ops::PagedAttentionTuningReport& report) {
  std::printf("  bucket: %s\n", report.bucket.c_str());
  std::printf("  %-40s %9s %7s | %s\n", "candidate", "median ms", "vs rule", "kernel, split");
  for (const ops::PlanMeasurement& m : report.measurements) {
    if (m.medianMs > 0)
      std::printf("  %-40s %9.4f %6.3fx | %s, %s\n", m.choice.str().c_str(), m.medianMs,
                  report.heuristic.medianMs / m.medianMs, m.kernelName.c_str(), m.split.c_str());
    else
      std::printf("  %-40s %9s %7s | %s: %s\n", m.choice.str().c_str(), "-", "-", m.kernelName.c_str(),
                  m.error.c_str());
  }
  std::printf("  rule: %s %.4f ms; chosen: %s %.4f ms (%.3fx)%s\n", report.heuristic.choice.str().c_str(),
              report.heuristic.medianMs, report.chosen.choice.str().c_str(), report.chosen.medianMs,
              report.heuristic.medianMs / report.chosen.medianMs,
              !report.recorded      ? ", not recorded"
              : report.storedOnDisk ? ", recorded in the disk cache"
                                    : ", recorded for this process only (no disk cache)");
}

int runTune(const ParsedArguments& args) {
  auto path = singleInput(args, "tune", "spec file");
  if (!path) {
    reportError(path.diagnostic());
    return kExitUserError;
  }
  auto spec = loadSpecForCommand(*path, "tune");
  if (!spec) {
    reportError(spec.diagnostic());
    return kExitUserError;
  }
  auto selected = selectVariants(*spec, args, "tune");
  if (!selected) {
    reportError(selected.diagnostic());
    return kExitUserError;
  }
  if (support::Status s = requireUnifiedAttention(*selected, "tune"); !s) {
    reportError(s.diagnostic());
    return kExitUserError;
  }
  validation::GpuRunOptions options;
  options.tunePlan = true;
  options.timedIterations = 50;
  if (args.has("--op-call")) {
    const std::string call = args.value("--op-call");
    const auto named = validation::GpuRunOptions::opCallNamed(call);
    if (!named) {
      reportUsageError("tune", "--op-call takes engine, no-workspace or plain; got '" + call + "'");
      return kExitUserError;
    }
    options.opCall = *named;
  }
  if (!runtime::driverAvailable()) {
    reportUsageError("tune", runtime::driverStatus().diagnostic().message);
    return kExitUserError;
  }
  auto shape = shapeFromArguments(*spec, args, "tune");
  if (!shape) {
    reportError(shape.diagnostic());
    return kExitUserError;
  }
  std::printf("batch: %s\n", shape->str().c_str());
  int failures = 0;
  for (const Variant* variant : *selected) {
    auto r = validation::runPagedAttentionOpGpu(variant->attention, *shape, options);
    if (!r) {
      reportError(support::Diagnostic{variant->location, "variant '" + variant->name + "': " + r.diagnostic().message});
      return kExitUserError;
    }
    std::printf("%s\n", variant->name.c_str());
    if (r->tuning) printReport(*r->tuning);
    const validation::GpuRunResult& run = r->run;
    failures += run.check.passed ? 0 : 1;
    std::printf("  the op now: %s plan %s, %s: %.4f ms, %.1f GB/s, %.1f%% of copy; %s (err %.2e)\n",
                r->tunedPlan ? "tuned" : "heuristic", r->kernelName.c_str(), r->plan.c_str(), run.medianMs,
                run.gbPerSecond, run.copyGbPerSecond > 0 ? 100.0 * run.gbPerSecond / run.copyGbPerSecond : 0.0,
                run.check.passed ? "PASS" : "FAIL", run.check.maxAbsError);
    if (!run.check.passed) std::printf("  %s\n", run.check.detail.c_str());
    std::fflush(stdout);
  }
  return failures == 0 ? kExitSuccess : kExitCheckFailed;
}

}  // namespace

Command tuneCommand() {
  return Command{
      "tune",
      "Measure the paged-attention op's candidate plans for a batch on the GPU and record the fastest.",
      "attnjit tune <spec.yaml> [--variant=NAME] [--shape KEY=VALUE ...] [--op-call=STYLE]",
      "For each unified_attention variant, the op's call for the batch (as `attnjit bench --op`\n"
      "makes it: the variant's static parameters, the batch's seq_len hints and a workspace,\n"
      "or as --op-call says) is tuned: candidate kernels (KV tile, warps) and, for decode,\n"
      "split-KV segment counts and the CTAs-per-SM cap are timed on the GPU, and the fastest\n"
      "(the op's own rule unless a candidate beats it by more than 2%) is recorded for the\n"
      "call's bucket in the disk kernel cache (ATTNJIT_CACHE_DIR), keyed by device, driver and\n"
      "attnjit build. Calls of that bucket then take it (ATTNJIT_TUNE=off: never;\n"
      "ATTNJIT_TUNE=first-use: engines tune unseen buckets on their first call). The op's call\n"
      "is then checked against the float64 reference and timed. `attnjit plan` shows which\n"
      "buckets have a tuned plan.\n"
      "Example (decode, B=64, 4096 keys each):\n"
      "  attnjit tune bench/decode.yaml --shape query_lens=1x64 --shape context_lens=4095x64\n",
      {
          {"--variant", "NAME", false, "only this variant"},
          {"--shape", "KEY=VALUE", true, "override the batch: query_lens=.., context_lens=.. (lists; VxN repeats)"},
          {"--op-call", "STYLE", false, "engine (default), no-workspace or plain"},
          {"--help", "", false, "show this help"},
      },
      runTune,
  };
}

}  // namespace attnjit::compiler::cli
