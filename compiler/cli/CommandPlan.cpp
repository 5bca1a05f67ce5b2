// attnjit plan: what the paged-attention op (or the MLA decode op) would launch
// for a batch (kernel, split-KV plan, occupancy cap, grid), decided on the host
// without a GPU; on device 0, also the plan a paged-attention launch fits to its
// kernel's CTAs per SM.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "compiler/validation/AttentionProblem.h"
#include "compiler/driver/DeviceTarget.h"
#include "compiler/ops/MlaDecodeOp.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/ops/PagedAttentionPlanning.h"
#include "compiler/validation/MlaDecodeProblem.h"
#include "compiler/cli/Command.h"
#include "runtime/Driver.h"

namespace attnjit::compiler::cli {
namespace {

constexpr int kDefaultSms = 132;  // the H200's

// The MLA decode op's choices for the batch: its kernel and split (MLA has no
// plan tuning and no occupancy fitting: the rules decide).
int printMlaPlan(const Variant& variant, const validation::MlaDecodeBatch& batch, int sms, bool withWorkspace,
                 bool runtimeScratch) {
  const MlaDecodeConfig& config = variant.mla;
  ops::MlaDecodeParams p;
  p.dtype = config.dtype;
  p.fp32Precision = config.fp32Precision;
  p.kvCacheFormat = config.kvCacheFormat;
  p.kvLoraRank = config.kvLoraRank;
  p.ropeDim = config.ropeDim;
  p.numHeads = config.numHeads;
  p.blockSize = config.blockSize;
  p.numSeqs = static_cast<int>(batch.seqLens.size());
  for (int len : batch.seqLens) {
    p.maxSeqLen = std::max(p.maxSeqLen, len);
    p.sumSeqLens += len;
  }
  p.numSms = sms;
  p.runtimeScratch = runtimeScratch;
  if (withWorkspace) {
    auto bytes = ops::mlaDecodeWorkspaceBytes(p.numSeqs, p.numHeads, p.kvLoraRank, p.maxSeqLen);
    if (!bytes) {
      reportError(bytes.diagnostic());
      return kExitUserError;
    }
    p.workspaceBytes = *bytes;
    if (p.workspaceBytes > 0) p.workspace = ops::kFeaturePlaceholder;
  }
  const MlaDecodeConfig chosen = ops::selectMlaDecodeVariant(p);
  const ops::MlaSplitPlan split = ops::mlaDecodeSplitPlan(p);
  const std::string splitText = split.numSegments <= 1 ? std::string("2D")
                                                       : std::to_string(split.numSegments) + " segments of " +
                                                             std::to_string(split.segmentTiles) + " KV tiles";
  std::printf("%s\n  -> %s: %s, grid %lldx1x%d; heuristic (the op's rules)\n", variant.name.c_str(),
              chosen.kernelName().c_str(), splitText.c_str(),
              static_cast<long long>(int64_t{p.numSeqs} * chosen.headBlocks()), split.numSegments);
  return kExitSuccess;
}

int runPlan(const ParsedArguments& args) {
  auto path = singleInput(args, "plan", "spec file");
  if (!path) {
    reportError(path.diagnostic());
    return kExitUserError;
  }
  auto spec = loadSpecForCommand(*path, "plan");
  if (!spec) {
    reportError(spec.diagnostic());
    return kExitUserError;
  }
  auto selected = selectVariants(*spec, args, "plan");
  if (!selected) {
    reportError(selected.diagnostic());
    return kExitUserError;
  }
  for (const Variant* variant : *selected)
    if (variant->family != Family::UnifiedAttention && variant->family != Family::MlaDecode) {
      reportError(support::Status::error(variant->location, "plan: variant '" + variant->name +
                                                                "' is of family '" + familyName(variant->family) +
                                                                "'; plan takes unified_attention (ops::pagedAttention) "
                                                                "or mla_decode (ops::mlaDecode)")
                      .diagnostic());
      return kExitUserError;
    }
  auto shape = shapeFromArguments(*spec, args, "plan");
  if (!shape) {
    reportError(shape.diagnostic());
    return kExitUserError;
  }
  // MLA decode batches hold one query token per sequence: checked before anything is printed.
  std::optional<validation::MlaDecodeBatch> mlaBatch;
  for (const Variant* variant : *selected)
    if (variant->family == Family::MlaDecode && !mlaBatch) {
      auto batch = validation::MlaDecodeBatch::fromShape(*shape);
      if (!batch) {
        reportUsageError("plan", batch.diagnostic().message);
        return kExitUserError;
      }
      mlaBatch = std::move(*batch);
    }
  int sms = kDefaultSms;
  bool onDevice = false;  // planning for device 0 itself: the fitted plan can be shown
  std::string smsOrigin = "the H200's; --sms to change";
  // --arch: the ops plan for a typical device of that target (its SMs, shared
  // memory and MMA kind) instead of device 0.
  std::optional<ScopedOpDeviceFacts> plannedDevice;
  if (args.has("--arch")) {
    auto facts = referenceDeviceFacts(args.value("--arch"));
    if (!facts) {
      reportUsageError("plan", "--arch: " + facts.diagnostic().message);
      return kExitUserError;
    }
    sms = facts->smCount;
    smsOrigin = facts->targetName + "'s reference device, " + facts->deviceName;
    std::printf("device: %s (%s reference): %d SMs, %lld bytes of shared memory per block\n",
                facts->deviceName.c_str(), facts->targetName.c_str(), facts->smCount,
                static_cast<long long>(facts->sharedMemory.maxPerBlock));
    plannedDevice.emplace(std::move(*facts));
  }
  if (args.has("--sms")) {
    const std::string text = args.value("--sms");
    char* end = nullptr;
    const long n = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0' || n < 1 || n > 100000) {
      reportUsageError("plan", "--sms must be 1..100000, got '" + text + "'");
      return kExitUserError;
    }
    sms = static_cast<int>(n);
    smsOrigin = "--sms";
  } else if (!plannedDevice && runtime::driverAvailable() && deviceFacts(0).smCount > 0) {
    sms = deviceFacts(0).smCount;
    smsOrigin = "device 0's";
    onDevice = true;
  }
  const bool runtimeScratch = !args.has("--no-runtime-scratch");
  const bool withWorkspace = !args.has("--no-workspace") && runtimeScratch;
  std::printf("batch: %s\n", shape->str().c_str());
  std::printf("SMs: %d (%s); workspace: %s\n", sms, smsOrigin.c_str(),
              withWorkspace    ? "sized for this batch (pagedAttentionWorkspaceBytes, mlaDecodeWorkspaceBytes)"
              : runtimeScratch ? "none (split-KV into the runtime's scratch)"
                               : "none, no runtime scratch (2D launches only)");
  for (const Variant* variant : *selected) {
    if (variant->family == Family::MlaDecode) {
      if (int status = printMlaPlan(*variant, *mlaBatch, sms, withWorkspace, runtimeScratch); status != kExitSuccess)
        return status;
      continue;
    }
    ops::PagedAttentionParams p = ops::pagedAttentionBatchParams(variant->attention, *shape);
    p.numSms = sms;
    p.runtimeScratch = runtimeScratch;
    if (plannedDevice) p.tuning = ops::PlanTuning::Off;  // tuned plans belong to device 0
    if (withWorkspace) {
      auto bytes = ops::pagedAttentionWorkspaceBytes(p.numTokens, p.numQueryHeads,
                                                     variant->attention.effectiveValueHeadSize(), p.maxSeqLen);
      if (!bytes) {
        reportError(bytes.diagnostic());
        return kExitUserError;
      }
      p.workspaceBytes = *bytes;
      if (p.workspaceBytes > 0) p.workspace = ops::kFeaturePlaceholder;
    }
    const ops::PagedAttentionPlan plan = ops::pagedAttentionPlan(p);
    std::printf("%s\n  -> %s: %s, grid %lldx%dx%d; %s\n", variant->name.c_str(), plan.config.kernelName().c_str(),
                ops::describeSplitAndOccupancy(plan).c_str(),
                static_cast<long long>(unifiedAttentionGridX(plan.config, p.numSeqs, p.numTokens)), p.numKvHeads,
                plan.split.numSegments,
                plan.origin == ops::PlanOrigin::Tuned ? "tuned (recorded for this device)"
                                                      : "heuristic (the op's rules)");
    // On device 0 itself, what a launch runs after fitting the plan to its
    // kernel's CTAs per SM (compiles or loads the kernel).
    if (onDevice && plan.origin == ops::PlanOrigin::Heuristic) {
      auto fitted = ops::detail::fittedPlan(p, plan);
      if (!fitted) {
        std::printf("  at launch on device 0: not known (%s)\n", fitted.diagnostic().message.c_str());
      } else {
        std::printf("  at launch on device 0: %s, grid %lldx%dx%d (its kernel %s holds %d CTAs per SM)\n",
                    ops::describeSplitAndOccupancy(*fitted).c_str(),
                    static_cast<long long>(unifiedAttentionGridX(fitted->config, p.numSeqs, p.numTokens)),
                    p.numKvHeads, fitted->split.numSegments, fitted->config.kernelName().c_str(),
                    fitted->residentCtasPerSm);
      }
    }
  }
  return kExitSuccess;
}

}  // namespace

Command planCommand() {
  return Command{
      "plan",
      "Show what the paged-attention or MLA decode op would launch for a batch: kernel, split-KV plan, occupancy; "
      "no GPU needed.",
      "attnjit plan <spec.yaml> [--variant=NAME] [--shape KEY=VALUE ...] [--sms=N] [--arch=sm_XX] [--no-workspace]\n"
      "             [--no-runtime-scratch]",
      "For each unified_attention variant, the call an engine would make for the batch (the\n"
      "variant's static parameters; the batch's min and max seq_len as hints; a workspace from\n"
      "pagedAttentionWorkspaceBytes unless --no-workspace, which leaves split-KV to the runtime's\n"
      "scratch, or --no-runtime-scratch, which leaves the call 2D) goes through the op's host-side\n"
      "choices, which are printed: the kernel (selectPagedAttentionVariant), the split-KV plan\n"
      "(pagedAttentionSplitPlan: 2D, or N segments of T KV tiles), the grid and the CTAs-per-SM\n"
      "cap of equal-length batches, and whether a plan tuned on this device (`attnjit tune`)\n"
      "or the op's rules chose them. The variant's own tiling options are ignored, as the op\n"
      "ignores them. SMs: --sms, else --arch's, else device 0's, else the H200's 132. --arch\n"
      "plans for a typical device of a target instead of device 0 (sm_80: A100, sm_86: A10,\n"
      "sm_89: L40S, sm_90a: H100/H200, sm_100a: B200, sm_120: RTX 5090): its SMs, shared\n"
      "memory per block (tilings shrink to fit it) and MMA kind; tuned plans are not\n"
      "consulted. A launch of the op's\n"
      "own plan then fits it to the CTAs per SM its kernel holds on the GPU (more or fewer\n"
      "segments, or a cap, where the last wave would be short; pagedAttentionLaunchPlan): on\n"
      "device 0 without --sms, an 'at launch' line shows that plan (compiling the kernel to\n"
      "read its occupancy). `attnjit bench --op` runs and times the same calls on the GPU and\n"
      "prints the plan it ran. An mla_decode variant shows what ops::mlaDecode picks for the\n"
      "batch (one query token per sequence; seq_lens = context_lens + 1, the longest and the sum\n"
      "as hints, a workspace from mlaDecodeWorkspaceBytes unless --no-workspace): the kernel\n"
      "(selectMlaDecodeVariant), the split (mlaDecodeSplitPlan) and the grid.\n"
      "Example (decode, B=64, lengths uneven):\n"
      "  attnjit plan bench/decode.yaml --shape query_lens=1x64 --shape context_lens=0,8191x63\n",
      {
          {"--variant", "NAME", false, "only this variant"},
          {"--shape", "KEY=VALUE", true, "override the batch: query_lens=.., context_lens=.. (lists; VxN repeats)"},
          {"--sms", "N", false, "SMs to plan for (default: device 0's, else 132)"},
          {"--arch", "sm_XX", false, "plan for a typical device of this target (SMs, shared memory, MMA kind)"},
          {"--no-workspace", "", false, "no split-KV workspace: splits use the runtime's scratch"},
          {"--no-runtime-scratch", "", false, "no workspace and no runtime scratch: 2D launches only"},
          {"--help", "", false, "show this help"},
      },
      runPlan,
  };
}

}  // namespace attnjit::compiler::cli
