#include "compiler/ops/MlaDecodeOp.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <cstdio>
#include <string>

#include "compiler/driver/DeviceTarget.h"
#include "compiler/ops/ArgumentChecks.h"
#include "compiler/ops/ReadyKernels.h"
#include "compiler/ops/SplitKv.h"
#include "compiler/kernels/ConfigChecks.h"
#include "compiler/kernels/ReduceSegments.h"
#include "runtime/Module.h"

namespace attnjit::ops {

using compiler::KvCacheFormat;
using compiler::MlaDecodeConfig;
using compiler::ReduceSegmentsConfig;
using support::Status;

namespace {

const ArgumentChecks& checks() {
  static const ArgumentChecks instance("mla decode");
  return instance;
}
support::Status argumentError(const std::string& message) { return checks().error(message); }

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Split-KV scratch in the workspace (compiler/ops/SplitKv.h) with tokens = B,
// query heads = H and rows of L = kv_lora_rank: segm_output [B, H, S, L], then
// segm_max and segm_expsum [B, H, S].
SplitKvScratch splitScratch(int64_t numSeqs, int numHeads, int kvLoraRank, int64_t numSegments) {
  return splitKvScratch(numSeqs, numHeads, kvLoraRank, numSegments);
}

// The SMs a call fills: the caller's count, else the op's device's (0 without a GPU).
int64_t smCount(const MlaDecodeParams& p) { return p.numSms > 0 ? p.numSms : compiler::opDeviceFacts().smCount; }

// The op's tilings beyond the kernel's default take up to 188 KB of shared memory
// a program (q and two 64-key latent stages; f32's two 32-key stages 176 KB),
// which H100/H200-class GPUs (227 KB a block) have and sm_80/86/89/120 do not.
constexpr int64_t kResidentQSharedBytes = 190 * 1024;
// 64 heads on 64-key tiles: q and two bf16 latent stages (224 KB; the
// epilogue's scratch reuses them), or q, two fp8 stages and the bf16 chunk
// each conversion reads (codegen's shared conversions: 216 KB).
constexpr int64_t kWideTileSharedBytes = 224 * 1024;

// The tiling. Measured on the H200 at B=64, ctx 4096 (2D kernels; docs/perf-log.md
// 2026-12-03); the kernel's default (16 heads, 16-key tiles, 4 warps, q re-read
// from L1 every tile: 1.036 ms at H=128) stays where the others do not fit.
MlaDecodeConfig baseVariant(const MlaDecodeParams& p) {
  MlaDecodeConfig config;
  config.dtype = p.dtype;
  config.fp32Precision = p.fp32Precision;
  config.kvCacheFormat = p.kvCacheFormat;
  config.kvLoraRank = p.kvLoraRank;
  config.ropeDim = p.ropeDim;
  config.numHeads = p.numHeads;
  config.blockSize = p.blockSize;
  config.outputLse = p.lse != 0;
  const compiler::SharedMemoryLimits limits = compiler::opDeviceFacts().sharedMemory;
  if (limits.maxPerBlock != 0 && limits.maxPerBlock < kResidentQSharedBytes) return config;
  // Any num_heads reaches here (validateFor reports the bad ones), so clamp first.
  const int headBlock = static_cast<int>(std::bit_ceil(static_cast<uint32_t>(std::clamp(p.numHeads, 16, 64))));
  // blockH heads per program on 8 warps, 32-key tiles.
  auto onEightWarps = [&](int blockH) {
    config.blockH = blockH;
    config.tileSize = 32;
    config.numWarps = 8;
  };
  if (p.dtype == ir::ScalarKind::F32) {
    // TF32: 64 heads on 8 warps (4 along the heads), 32-key tiles: 1.526 ms
    // against 3.257 (H=128). Exact f32 (FMA dots) keeps the default.
    if (config.tf32Dots()) onEightWarps(headBlock);
    return config;
  }
  const bool wideTilesFit = limits.maxPerBlock == 0 || limits.maxPerBlock >= kWideTileSharedBytes;
  // 576-wide latents over 32 heads, 16-bit or fp8: 64 heads on 8 warps, 64-key
  // tiles where shared memory allows, and on sm_90a producer warps that copy
  // the latent tiles (fp8: load, cast and store them). H=128, B=64 ctx 4095
  // on an H100 (docs/perf-log.md 2026-12-06): bf16 0.1998 -> 0.1715 ms
  // (`attnjit bench`) once the compute warps waited for each chunk once an
  // iteration; fp8 0.2621 -> 0.2085 through the op (0.2480 when the producers
  // only copied and the compute warps cast).
  auto wideLatentTiling = [&] {
    onEightWarps(64);
    if (wideTilesFit) config.tileSize = 64;
    config.warpSpecialize = config.tileSize == 64 && compiler::opDeviceFacts().warpgroupMma;
  };
  // 16-bit q: q stays in shared memory for the whole loop, each warp reading its
  // fragments there (ldmatrix) instead of from L1 every tile.
  config.qInShared = true;
  if (p.kvCacheFormat != KvCacheFormat::Auto) {
    // fp8 latents meet bf16 q in f16 (Fp8Dots.h): one conversion per pair of
    // cache bytes instead of four; H=128 0.2915 -> 0.2810 ms (docs/perf-log.md
    // 2026-12-03).
    config.fp8DotDtype = compiler::Fp8DotDtype::F16;
    // Cast in registers and stored once for both conversions. Over 32 heads: 64
    // heads on 8 warps (fewer spill), 64-key tiles where shared memory allows:
    // 0.349 ms against 0.452 for 32-key tiles (H=128; the kernel's default
    // 1.550). Up to 32 heads, the bf16 latents' tiling below (64-key tiles on 4
    // warps; with f16 dots): B=64 ctx 4096 H=32 0.134 ms and H=16 0.106 against
    // 0.175 and 0.164 on 8 warps and 32-key tiles; B=4 ctx 65536 H=16 0.122
    // against 0.178.
    // At L = 256 the bf16 latents' tiling (64 heads on 4 warps, producer warps)
    // serves fp8 too: 0.1132 ms against 0.1344 on 8 warps, both with the
    // producers casting (B=64 ctx 4096 H=128; H100, docs/perf-log.md 2026-12-06).
    if (headBlock == 64 && p.kvLoraRank > 256) {
      wideLatentTiling();
      return config;
    }
  }
  // bf16/f16 latents at L = 512 with H > 32: 64 heads on 8 warps, 64-key tiles.
  // On sm_90a every dot runs on wgmma, each warpgroup on its half of the keys
  // and of the latent columns: H=128 0.244 ms (32-key tiles 0.352; mma.sync
  // 0.389); H=64, split in two by the split rule, 0.126 (32 heads on 4 warps,
  // the tiling before: 0.200). 64-key tiles need 224 KB of shared memory;
  // blocks with less take 32-key tiles. A batch too small to give every SM a
  // program even when split as finely as the split rule allows takes the
  // 32-head tiling, twice the programs: B=1 ctx 4096 0.033 ms against 0.045
  // (op API). Fewer heads: 64-key tiles on 4 warps, 32 heads per program: H=32
  // 0.121 ms (8 warps: 0.215); H=16 0.144 (32-key tiles: 0.188). At L = 256 the
  // accumulator is half as large and 64 heads fit on 4 warps (all of them along
  // the heads: wgmma too): 0.160 ms against 0.177.
  const int64_t finestSegments =
      std::clamp<int64_t>(p.maxSeqLen / kMlaMinSegmentKeys, 1, kMlaMaxSegments);
  const bool fillsGpu = int64_t{p.numSeqs} * ceilDiv(p.numHeads, 64) * finestSegments >= smCount(p);
  if (p.kvLoraRank > 256 && p.numHeads > 32 && fillsGpu) {
    wideLatentTiling();
    return config;
  }
  config.tileSize = 64;
  config.blockH = std::min(headBlock, p.kvLoraRank <= 256 ? 64 : 32);
  // L = 256 with 64 heads on 4 warps: producer warps issue the copies on
  // sm_90a, 0.1230 -> 0.1084 ms (B=64 ctx 4096 H=128; 8 warps 0.1352, with
  // producers 0.1251; H100, docs/perf-log.md 2026-12-06).
  config.warpSpecialize = config.blockH == 64 && p.kvLoraRank <= 256 && compiler::opDeviceFacts().warpgroupMma;
  return config;
}

// Programs resident on one SM at once: two of the default tiling; one of the
// others, which fill the register file (8 warps at up to 255 registers) or take
// over half of the shared memory (q resident).
int64_t programsPerSm(const MlaDecodeConfig& config) { return config.qInShared || config.numWarps >= 8 ? 1 : 2; }

MlaSplitPlan splitPlanFor(const MlaDecodeParams& p, const MlaDecodeConfig& config) {
  if (p.batchInvariant || (p.workspace == 0 && !p.runtimeScratch) || p.maxSeqLen <= 0 || p.numSeqs < 1 ||
      p.numHeads < 1)
    return {};
  const int64_t sms = smCount(p);
  if (sms <= 0) return {};
  int64_t segments = 1;
  if (p.splitRule == MlaSplitRule::Vllm) {
    segments = std::min<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max(1, p.maxSeqLen / 512))), 2 * sms);
  } else {
    // Key work in (sequence, head block) programs; the programs resident at once
    // (programsPerSm on every SM) should each get an equal share of it. A
    // sequence is cut only where it holds at least two shares, so a batch that
    // already fills the GPU stays unsplit.
    // Capped at 2^56 keys (no batch comes near), so that the work below stays
    // far from int64's range whatever the caller passed.
    const int64_t allKeys = std::min(int64_t{p.numSeqs} * p.maxSeqLen, int64_t{1} << 56);
    const int64_t keys = p.sumSeqLens > 0 ? std::min(p.sumSeqLens, allKeys) : allKeys;
    const int64_t work = keys * config.headBlocks();
    const int64_t segmentKeys =
        std::max<int64_t>(kMlaMinSegmentKeys, ceilDiv(work, programsPerSm(config) * sms));
    segments = p.maxSeqLen / segmentKeys;
  }
  segments = std::min<int64_t>(segments, kMlaMaxSegments);
  // A caller's workspace bounds the split; the runtime's scratch holds any.
  while (p.workspace != 0 && segments >= 2 &&
         splitScratch(p.numSeqs, p.numHeads, p.kvLoraRank, segments).totalBytes() > p.workspaceBytes)
    --segments;
  if (segments < 2) return {};
  const int64_t tiles = ceilDiv(p.maxSeqLen, config.tileSize);
  const int64_t segmentTiles = ceilDiv(tiles, segments);
  return {static_cast<int>(ceilDiv(tiles, segmentTiles)), static_cast<int>(segmentTiles)};
}

std::pair<MlaDecodeConfig, MlaSplitPlan> planCall(const MlaDecodeParams& p) {
  MlaDecodeConfig config = baseVariant(p);
  // Nothing is derived from sizes the kernel rejects: validateFor reports them.
  if (!config.validate()) return {config, {}};
  const MlaSplitPlan plan = splitPlanFor(p, config);
  config.splitKv = plan.numSegments > 1;
  return {config, plan};
}


support::Status validateFor(const MlaDecodeParams& p, const MlaDecodeConfig& config) {
  if (support::Status s = config.validate(); !s) return argumentError(s.diagnostic().message);
  if (p.numSeqs < 1) return argumentError("num_seqs (" + std::to_string(p.numSeqs) + ") must be at least 1");
  if (p.maxSeqLen < 0) return argumentError("max_seq_len (" + std::to_string(p.maxSeqLen) + ") must not be negative");
  // One grid dimension holds every (sequence, head block) program.
  if (int64_t{p.numSeqs} * config.headBlocks() > std::numeric_limits<int32_t>::max())
    return argumentError("num_seqs (" + std::to_string(p.numSeqs) + ") x " + std::to_string(config.headBlocks()) +
                         " head blocks exceeds the grid's 2^31 - 1 programs");
  if (!std::isfinite(p.scale) || p.scale <= 0)
    return argumentError("scale (" + std::to_string(p.scale) + ") must be a positive finite number");
  if (p.numSms < 0)
    return argumentError("num_sms (" + std::to_string(p.numSms) + ") must be 0 (the device's) or positive");
  for (const auto& [name, pointer] : {std::pair{"out", p.out}, std::pair{"q", p.q}, std::pair{"kv_cache", p.kvCache},
                                      std::pair{"block_tables", p.blockTables}, std::pair{"seq_lens", p.seqLens}})
    if (support::Status s = checks().pointer(name, pointer, 16, true); !s) return s;
  const bool fp8 = p.kvCacheFormat != KvCacheFormat::Auto;
  if (support::Status s = checks().pointer("kv_scale", p.kvScale, 4, fp8); !s) return s;
  if (!fp8 && p.kvScale != 0)
    return argumentError("kv_scale is only used by the fp8 latent cache (kv_cache_dtype auto)");
  if (support::Status s = checks().pointer("lse", p.lse, 4, false); !s) return s;
  if (p.lse != 0) {
    // Every (b, h) must have its own element: one stride covers the other's range.
    const bool batchMajor = p.lseStrideHead >= 1 && strideCovers(p.lseStrideBatch, p.numHeads, p.lseStrideHead);
    const bool headMajor = p.lseStrideBatch >= 1 && strideCovers(p.lseStrideHead, p.numSeqs, p.lseStrideBatch);
    if (!batchMajor && !headMajor)
      return argumentError("lse strides (batch " + std::to_string(p.lseStrideBatch) + ", head " +
                           std::to_string(p.lseStrideHead) + ") overlap: use (H, 1) for [B, H] or (1, B) for [H, B]");
  }
  const int64_t rowMultiple = 8, cacheMultiple = config.kvStrideDivisibility();
  if (support::Status s = checks().strides({{"q_stride_batch", p.qStrideBatch, rowMultiple},
                                            {"q_stride_head", p.qStrideHead, rowMultiple},
                                            {"o_stride_batch", p.oStrideBatch, rowMultiple},
                                            {"o_stride_head", p.oStrideHead, rowMultiple},
                                            {"block_table_stride", p.blockTableStride, 1},
                                            {"kv_stride_block", p.kvStrideBlock, cacheMultiple},
                                            {"kv_stride_token", p.kvStrideToken, cacheMultiple}});
      !s)
    return s;
  if (p.kvStrideToken < config.latentWidth())
    return argumentError("kv_stride_token (" + std::to_string(p.kvStrideToken) + ") is less than the latent width " +
                         std::to_string(config.latentWidth()));
  // A workspace too small to split this batch is not an error: the call runs unsplit.
  if (p.workspace != 0)
    if (support::Status s = checks().pointer("workspace", p.workspace, 16, true); !s) return s;
  return support::Status::ok();
}

}  // namespace

MlaDecodeConfig selectMlaDecodeVariant(const MlaDecodeParams& p) { return planCall(p).first; }

MlaSplitPlan mlaDecodeSplitPlan(const MlaDecodeParams& p) { return planCall(p).second; }

support::Expected<uint64_t> mlaDecodeWorkspaceBytes(int maxNumSeqs, int numHeads, int kvLoraRank, int maxSeqLen) {
  const ArgumentChecks workspaceChecks("mla decode workspace");
  if (maxNumSeqs < 0)
    return workspaceChecks.error("max_num_seqs (" + std::to_string(maxNumSeqs) + ") must not be negative");
  if (numHeads < 1 || numHeads > 128)
    return workspaceChecks.error("num_heads (" + std::to_string(numHeads) + ") must be between 1 and 128");
  if (kvLoraRank < 1 || kvLoraRank > 512)
    return workspaceChecks.error("kv_lora_rank (" + std::to_string(kvLoraRank) + ") must be between 1 and 512");
  if (maxSeqLen < 0)
    return workspaceChecks.error("max_seq_len (" + std::to_string(maxSeqLen) + ") must not be negative");
  if (maxNumSeqs == 0 || maxSeqLen == 0) return uint64_t{0};
  const int64_t segments = std::min<int64_t>(kMlaMaxSegments, ceilDiv(maxSeqLen, kMlaMinSegmentKeys));
  return segments < 2 ? uint64_t{0} : splitScratch(maxNumSeqs, numHeads, kvLoraRank, segments).totalBytes();
}

support::Status validateMlaDecode(const MlaDecodeParams& p) { return validateFor(p, planCall(p).first); }

namespace {

// Launches a validated call whose split-KV scratch, if it splits, is in p.workspace.
support::Status launchPlanned(const MlaDecodeParams& p, const MlaDecodeConfig& config, const MlaSplitPlan& plan) {
  auto ready = readyKernel(config.kernelName(), [&] { return compiler::buildMlaDecode(config); });
  if (!ready) return ready.status();
  const SplitKvScratch::Pointers scratch =
      splitScratch(p.numSeqs, p.numHeads, p.kvLoraRank, plan.numSegments).at(p.workspace);
  const bool fp8 = p.kvCacheFormat != KvCacheFormat::Auto;

  // Parameters in the kernel's order (compiler/kernels/MlaDecode.h).
  uint64_t pointers[9];
  int numPointers = 0;
  if (config.splitKv) {
    for (uint64_t pointer : {scratch.output, scratch.maximum, scratch.expsum}) pointers[numPointers++] = pointer;
  } else {
    pointers[numPointers++] = p.out;
  }
  for (uint64_t pointer : {p.q, p.kvCache, p.blockTables, p.seqLens}) pointers[numPointers++] = pointer;
  if (fp8) pointers[numPointers++] = p.kvScale;
  if (config.outputLse && !config.splitKv) pointers[numPointers++] = p.lse;
  float scale = p.scale;
  int64_t strides[9];
  int numStrides = 0;
  for (int64_t stride : {p.qStrideBatch, p.qStrideHead}) strides[numStrides++] = stride;
  if (!config.splitKv)
    for (int64_t stride : {p.oStrideBatch, p.oStrideHead}) strides[numStrides++] = stride;
  for (int64_t stride : {p.blockTableStride, p.kvStrideBlock, p.kvStrideToken}) strides[numStrides++] = stride;
  if (config.outputLse && !config.splitKv)
    for (int64_t stride : {p.lseStrideBatch, p.lseStrideHead}) strides[numStrides++] = stride;
  int32_t numSegments = plan.numSegments, segmentTiles = plan.segmentTiles;
  void* params[24];
  int numParams = 0;
  for (int i = 0; i < numPointers; ++i) params[numParams++] = &pointers[i];
  params[numParams++] = &scale;
  for (int i = 0; i < numStrides; ++i) params[numParams++] = &strides[i];
  if (config.splitKv) {
    params[numParams++] = &numSegments;
    params[numParams++] = &segmentTiles;
  }
  const runtime::LaunchConfig launch = ready->launchConfig(
      {static_cast<unsigned>(int64_t{p.numSeqs} * config.headBlocks()), 1, static_cast<unsigned>(plan.numSegments)},
      p.stream);
  if (support::Status s = ready->loaded->function.launch(launch, params); !s) return s;
  if (!config.splitKv) return support::Status::ok();

  // Stage 2: reduce_segments with tokens = B, query heads = H, head size = L.
  return launchReduceSegments({.config = compiler::reduceSegmentsFor(config),
                               .numTokens = p.numSeqs,
                               .numSegments = numSegments,
                               .scratch = scratch,
                               .out = p.out,
                               .lse = p.lse,
                               .oStrideToken = p.oStrideBatch,
                               .oStrideHead = p.oStrideHead,
                               .lseStrideHead = p.lseStrideHead,
                               .lseStrideToken = p.lseStrideBatch,
                               .stream = p.stream});
}

}  // namespace

support::Status mlaDecode(const MlaDecodeParams& p) {
  const auto [config, plan] = planCall(p);
  if (support::Status s = validateFor(p, config); !s) return s;
  if (!config.splitKv || p.workspace != 0) return launchPlanned(p, config, plan);
  return launchWithRuntimeScratch(
      p, splitScratch(p.numSeqs, p.numHeads, p.kvLoraRank, plan.numSegments).totalBytes(),
      [&](const MlaDecodeParams& withScratch) { return launchPlanned(withScratch, config, plan); },
      [](const MlaDecodeParams& unsplit) {
        const auto [unsplitConfig, unsplitPlan] = planCall(unsplit);
        return launchPlanned(unsplit, unsplitConfig, unsplitPlan);
      });
}

}  // namespace attnjit::ops
