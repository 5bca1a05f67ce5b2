#include "compiler/ops/PagedAttentionOp.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "compiler/spec/BatchShape.h"
#include "compiler/ops/BoundsCheckedLaunch.h"
#include "compiler/driver/DeviceTarget.h"
#include "compiler/ops/ArgumentChecks.h"
#include "compiler/ops/PagedAttentionPlanning.h"
#include "compiler/ops/ReadyKernels.h"
#include "compiler/ops/SplitKv.h"
#include "compiler/ops/TunedPlans.h"
#include "compiler/kernels/ConfigChecks.h"
#include "compiler/kernels/ReduceSegments.h"
#include "runtime/Module.h"

namespace attnjit::ops {

using compiler::KvCacheFormat;
using compiler::ReduceSegmentsConfig;
using compiler::UnifiedAttentionConfig;
using support::Status;

namespace {

const ArgumentChecks& checks() {
  static const ArgumentChecks instance("paged attention");
  return instance;
}
support::Status argumentError(const std::string& message) { return checks().error(message); }

// The SMs a call fills: the caller's count, else the op's device's (0 without a GPU).
int smsToFill(const PagedAttentionParams& p) { return p.numSms > 0 ? p.numSms : compiler::opDeviceFacts().smCount; }

// The head size of v and out: Dv (DiffKV) or headSize.
int valueHeadSizeOf(const PagedAttentionParams& p) { return p.valueHeadSize > 0 ? p.valueHeadSize : p.headSize; }

bool prefillLike(const PagedAttentionParams& p, const UnifiedAttentionConfig& config) {
  const int perKv = p.numKvHeads > 0 && p.numQueryHeads % p.numKvHeads == 0 ? p.numQueryHeads / p.numKvHeads : 1;
  return !p.batchInvariant && static_cast<int64_t>(p.maxQueryLen) * perKv >= 128 && config.minimumBlockM() <= 128;
}

// The workspace split-KV needs: its scratch (compiler/ops/SplitKv.h) with rows
// of the value head size (DiffKV's Dv).
uint64_t workspaceFor(int64_t numTokens, int numQueryHeads, int headSize, int64_t numSegments) {
  return splitKvScratch(numTokens, numQueryHeads, headSize, numSegments).totalBytes();
}

// Whether the call's scratch holds `segments` segments: the caller's
// workspace, or (without one) the runtime's scratch, which holds any plan.
bool workspaceHolds(const PagedAttentionParams& p, int64_t segments) {
  return p.workspace == 0 ||
         workspaceFor(p.numTokens, p.numQueryHeads, valueHeadSizeOf(p), segments) <= p.workspaceBytes;
}

// The wider of the QK and V head sizes: what tiles and registers scale with.
int widestHeadSize(const UnifiedAttentionConfig& config) {
  return std::max(config.headSize, config.effectiveValueHeadSize());
}

UnifiedAttentionConfig ruleVariant(const PagedAttentionParams& p) {
  UnifiedAttentionConfig config;
  config.dtype = p.dtype;
  config.fp32Precision = p.fp32Precision;
  config.numQueryHeads = p.numQueryHeads;
  config.numKvHeads = p.numKvHeads;
  config.headSize = p.headSize;
  config.valueHeadSize = p.valueHeadSize;
  config.blockSize = p.blockSize;
  config.causal = p.causal;
  config.kvCacheFormat = p.kvCacheFormat;
  config.kvScaleLayout = p.kvScaleLayout;
  config.slidingWindow = p.slidingWindow;
  config.slidingWindowRight = p.slidingWindowRight;
  config.attentionChunkSize = p.attentionChunkSize;
  config.mmPrefixRanges = p.mmPrefixRange != 0 ? p.mmPrefixRanges : 0;
  config.qqBias = p.qqBias != 0;
  config.softcap = p.softcap;
  config.alibi = p.alibiSlopes != 0;
  config.alibiSqrt = p.alibiSqrt;
  config.outputFp8 = p.outputScale != 0;
  config.queryFp8 = p.qScale != 0;
  config.sinks = p.sinks != 0;
  config.perSequenceCausal = p.causalFlags != 0;
  config.outputLse = p.lse != 0;
  config.checkBounds = p.checkBounds || boundsCheckFromEnvironment();
  // Prefill-like calls take 128 query rows per program (not vLLM's 16). f16/bf16
  // decode with a same-dtype cache takes 64-token tiles: with cp.async K/V tiles
  // they beat 32, DiffKV 192/128 included (its few bytes of spills at 64 cost
  // less than the halved tile). Quantized caches copy their raw tiles by cp.async
  // too and convert two registers per instruction, so 128-key tiles win for
  // every quantized format at head sizes up to 128 (measured: docs/perf-log.md,
  // 2026-11-29 and 2026-11-30).
  const bool halfPrecision = p.dtype != ir::ScalarKind::F32;
  const int widestHead = widestHeadSize(config);
  if (widestHead > 256) {
    // Wide heads (MLA's 576/512 latent rows read as attention, 512): 16-key
    // tiles. A 64-key bf16 tile of K and V would take 128 KiB or more per
    // stage, too much for cp.async slots, and its register path spills
    // kilobytes; at 16 keys both stages fit and the four warps, each owning a
    // quarter of the V columns, spill little. Prefill keeps this tiling too: a
    // 128-row query tile holds an accumulator of Dv columns per row, 256 or
    // more registers per thread at any warp count.
    config.tileSize = 16;
    return config;
  }
  if (prefillLike(p, config) && !config.tensorCoreDots() && widestHead <= 128) {
    // Exact f32 prefill: the FMA dot keeps whole operand rows per thread, so a
    // 128-row tile spills tens of KB (ptxas). 32 rows over 4 warps on 16-key
    // tiles, spill-free: 24.1 ms against 82.0 for the 8-warp 128-row tiling
    // (8 x 2048 causal, 32/8, D=128; TF32 2.98 ms; docs/perf-log.md 2026-12-03).
    config.blockMRows = 32;
    config.numWarps = 4;
    config.tileSize = 16;
    return config;
  }
  if (prefillLike(p, config) && !halfPrecision && widestHead > 128) {
    // f32 prefill above D=128: the 128-row tiling below spills 3.7-5.6 KB a
    // thread on TF32 (ptxas) and takes 11.7 ms at D=192 and 23.6 at D=256 (4
    // x 2048 causal, 32/8). 64 rows over 8 warps on 16-key tiles: 3.71 and
    // 4.59 ms, within 11% and 3% of the fastest of the 12 tilings measured
    // (H100, docs/perf-log.md 2026-12-06). Exact f32 keeps whole operand rows
    // per thread and spills at every tiling; 32 rows over 8 warps spill least
    // (0.6-1.2 KB against 42-52 KB at 128 rows) and run 1.74x faster than 128
    // rows on the same 16-key tiles (D=256, 2 x 1024 causal).
    config.blockMRows = config.tensorCoreDots() ? 64 : 32;
    config.numWarps = 8;
    config.tileSize = 16;
    return config;
  }
  if (prefillLike(p, config)) {
    config.blockMRows = 128;
    // FlashAttention-2's tiling where it fits in registers: 4 warps of 32 rows,
    // Q re-read from shared memory each KV tile (faster than 8 warps of 16 rows
    // at D=128). Wider heads (the accumulator alone would take 256 registers at
    // D=256), f32 on TF32 (no ldmatrix) and quantized caches keep 8 warps of 16 rows:
    // converting K and V in registers next to a 32-row accumulator spills
    // hundreds of bytes (ptxas, sm_90a; none at 8 warps), and that tiling was
    // not timed on the GPU. DiffKV 192/128 keeps 8 warps of 16 rows too: faster
    // than 4 warps (with or without Q in shared memory) and than 8 warps with Q
    // in shared memory (measured: docs/perf-log.md, 2026-11-30).
    //
    // With warpgroup MMAs (sm_90a) each warpgroup owns 64 rows and reads K and
    // V from their cp.async slots. Then 8 warps of 16 rows on 64-key tiles, Q in
    // registers, beat the 4-warp tiling at D=128 (5% causal, 9% non-causal),
    // and 64-key tiles beat 32 at D=256 (12%) and DiffKV 192/128 (14%)
    // (docs/perf-log.md, 2026-12-02); so do they at D=64 (below). Quantized
    // caches, dequantized in registers, reach wgmma through one shared-memory
    // store per tile; 64-key tiles halve those stores' barriers per key: 18-23%
    // faster than 32 at D=128 for fp8 and int8 per-token-head, causal and not
    // (docs/perf-log.md, 2026-12-03). Wider
    // quantized heads keep 32 (untimed; twice the shared memory), and so does
    // int4 at 64 or less, whose half-width dimension groups stay on mma.sync.
    const bool sameDtypeCache = halfPrecision && p.kvCacheFormat == KvCacheFormat::Auto;
    const bool warpgroupMma = halfPrecision && compiler::opDeviceFacts().warpgroupMma;
    const bool quantizedOnWarpgroupMma =
        widestHead <= 128 && !(p.kvCacheFormat == KvCacheFormat::Int4PerTokenHead && widestHead <= 64);
    // At D=64 (no padding to a wider wgmma shape) 8 warps of 16 rows on 64-key
    // tiles overtook the 4-warp tiling once the MMAs ran unserialized: causal
    // 0.529 -> 0.415 ms, bidirectional 0.790 -> 0.716; at 80, 96 and 112 the two
    // stay within 5% either way (H100, 8 x 2048, 32/8, docs/perf-log.md 2026-12-06).
    const bool fourWarpTiling =
        sameDtypeCache && (warpgroupMma ? widestHead < 128 && widestHead != 64 : widestHead <= 128);
    if (fourWarpTiling) {
      config.numWarps = 4;
      config.qInShared = true;
    } else {
      config.numWarps = 8;
      if (warpgroupMma && (sameDtypeCache ? widestHead <= 256 : quantizedOnWarpgroupMma)) config.tileSize = 64;
      // Without wgmma (sm_80-sm_89), per-token-head and fp8 caches above D=128
      // spill 250-840 bytes at 32 keys and 150-290 at 16 (ptxas sm_80; untimed).
      if (!warpgroupMma && !sameDtypeCache && halfPrecision && widestHead > 128) config.tileSize = 16;
      // At D=128 over a 16-bit cache, producer warps issue the copies and the
      // compute warps keep 216 registers (codegen/lower/WarpSpecialization.cpp):
      // causal 0.756 -> 0.726 ms, and bidirectional calls on 128-key tiles with
      // Q in shared memory 1.309 -> 1.198 ms (64-key tiles with producers: 1.272;
      // 128-key causal: 0.757, its diagonal tiles mask more). DiffKV 192/128:
      // causal 1.015 -> 0.875 ms, bidirectional 1.795 -> 1.561 (64-key tiles).
      // H100, 8 x 2048, 32/8 (docs/perf-log.md 2026-12-05 and 2026-12-06). At 64
      // and 256 they are slower (D=64 0.41 -> 0.52 ms, D=256 1.52 -> 1.71). A
      // per-tensor fp8 cache at D=128 gains more: the producers cast its tiles
      // on the way (codegen's cast on copy), causal 1.051 -> 0.863 ms,
      // bidirectional 1.941 -> 1.485 (64-key tiles); the per-token-head
      // formats, scaled per key, are dequantized by the compute warps.
      const bool diffKv = config.effectiveValueHeadSize() != config.headSize;
      const bool producersGain =
          diffKv ? config.headSize <= 192 && config.effectiveValueHeadSize() <= 128 : widestHead == 128;
      const bool fp8Tiles = p.kvCacheFormat == KvCacheFormat::Fp8E4M3 && !diffKv && widestHead == 128;
      if (warpgroupMma && fp8Tiles) {
        config.warpSpecialize = true;
      } else if (warpgroupMma && sameDtypeCache && producersGain) {
        config.warpSpecialize = true;
        // Per-sequence flags may make any row causal: 64-key tiles, as causal.
        if (!diffKv && !config.causal && !config.perSequenceCausal) {
          config.tileSize = 128;
          config.qInShared = true;
        }
      }
    }
  } else if (halfPrecision && p.kvCacheFormat == KvCacheFormat::Auto) {
    // Head sizes above 128 (not DiffKV) take 32-key tiles: twice the CTAs per
    // SM of 64 (registers and slots), D=192 0.451 -> 0.404 ms, D=256 0.543 ->
    // 0.501 (94% and 102% of copy; B=64 ctx 4096, measured by `attnjit tune`,
    // docs/perf-log.md 2026-12-04). DiffKV 192/128 keeps 64 (98-101% of copy).
    const bool diffKv = config.effectiveValueHeadSize() != config.headSize;
    config.tileSize = widestHead > 128 && !diffKv ? 32 : 64;
  } else if (!config.tensorCoreDots() && widestHead <= 128) {
    // Exact f32 decode (FMA dots, one token's heads per program): 64-key tiles
    // over 2 warps, 2.1x faster than 32-key tiles over 4 (B=64 ctx 4096, 32/8,
    // D=128: 1.258 against 2.631 ms; 8 warps 2-4x slower; docs/perf-log.md
    // 2026-12-03). TF32 keeps 32-key tiles: at the copy rate there.
    config.tileSize = 64;
    config.numWarps = 2;
  } else if (halfPrecision) {
    // 128-key tiles where a token's heads fit one 16-row m-tile; taller query
    // tiles (more than 16 query heads per KV head: MQA) spill at 128 keys (int8
    // per-token-head, 32 rows on 4 warps: 476 bytes) and take 64: MQA 32/1,
    // int8 per-token-head, B=64 ctx 4096 0.0949 ms against 0.0986, B=3 ctx
    // 131072 0.136 against 0.161 (docs/perf-log.md 2026-12-03). Above D=128
    // those 32 rows spill 410-490 bytes at 64 keys too and take 32, spill-free
    // (int4: 16 bytes): MQA 32/1 D=256, B=32 ctx 32768, 1.28-1.50x faster for
    // every quantized format (H100, `attnjit tune`, docs/perf-log.md 2026-12-06).
    if (widestHead <= 128)
      config.tileSize = config.blockM() <= 16 ? 128 : 64;
    else
      config.tileSize = config.blockM() <= 16 ? 64 : 32;
    // Per-tensor fp8 decode meets bf16 q in f16 (Fp8Dots.h): one conversion per
    // pair of cache bytes instead of four, 0.1512 -> 0.1447 ms (84% -> 87% of
    // copy; B=64 ctx 4096, 32/8, D=128, docs/perf-log.md 2026-12-03). Prefill
    // keeps bf16: no faster there (1.098 against 1.100 ms causal). int8 and fp8
    // per-token-head decode take Q·K in f16 (P·V stays bf16): with separate
    // scales 0.1873 -> 0.1761 ms (int8) and 0.1585 -> 0.1520 (fp8), inline
    // 3% and 2% (docs/perf-log.md 2026-12-04).
    if (compiler::f16QueryKeyDots(p.kvCacheFormat)) config.fp8DotDtype = compiler::Fp8DotDtype::F16;
  }
  return config;
}

// The rules' tiling shrunk until codegen keeps its buffers (cp.async slots,
// Q in shared memory, conversion buffers) within the device's shared memory
// per block. The rules were measured on 227 KiB parts (H100, H200); sm_86,
// sm_89 and sm_120 allow 99 KiB, sm_80 163. Without room for its slots codegen
// copies the tiles through registers and the kernel spills hundreds of bytes
// to kilobytes (ptxas, sm_89: 128-key decode tiles at D=128 640 bytes, 128-row
// prefill at D=256 2 KB), the failure the spill budget of
// tests/test_op_tilings_ptxas.cpp exists to catch. Fewer keys per tile first
// (down to 16), then Q back in registers, then half the query rows. An unknown
// device (no limits) keeps the rules' tiling.
bool fitsSharedMemory(const UnifiedAttentionConfig& config) {
  const compiler::DeviceFacts& device = compiler::opDeviceFacts();
  const int64_t limit = device.sharedMemory.maxPerBlock;
  return limit <= 0 || config.estimatedSharedBytes(device.warpgroupMma) <= limit;
}

UnifiedAttentionConfig fitSharedMemory(UnifiedAttentionConfig config) {
  while (!fitsSharedMemory(config)) {
    if (config.tileSize > 16) {
      config.tileSize /= 2;
    } else if (config.qInShared) {
      config.qInShared = false;
    } else if (config.blockMRows > 16) {
      // The warps stay where the kernel takes them (split along the keys or
      // columns): f32 at D=256 on 32 rows spills 728 bytes over 2 warps, none
      // over 8 (ptxas, sm_89).
      config.blockMRows /= 2;
      if (!config.validate()) config.numWarps = std::max(1, std::min(config.numWarps, config.blockMRows / 16));
    } else {
      break;  // codegen gives the buffers up; nothing smaller to try
    }
  }
  return config;
}

UnifiedAttentionConfig baseVariant(const PagedAttentionParams& p) { return fitSharedMemory(ruleVariant(p)); }

int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// `tiles` KV tiles cut into at most `segments` segments of whole tiles (as
// many as ceil(tiles / segments)-tile segments then make).
SplitKvPlan segmentsOf(int64_t tiles, int64_t segments) {
  const int64_t segmentTiles = ceilDiv(tiles, segments);
  return {static_cast<int>(ceilDiv(tiles, segmentTiles)), static_cast<int>(segmentTiles)};
}

// A batch whose sizes the kernels take (validateFor reports the others): plans are
// derived only from these, so no product of caller-given sizes can overflow.
bool batchInRange(const PagedAttentionParams& p) {
  return p.numSeqs >= 1 && p.numTokens >= p.numSeqs && p.numTokens <= std::numeric_limits<int32_t>::max();
}

// The caller's hints say the lengths are about equal (the shortest is at least
// 90% of the longest); false when either hint is missing.
bool lengthsEven(const PagedAttentionParams& p) {
  return p.minSeqLen > 0 && p.maxSeqLen > 0 && int64_t{p.minSeqLen} * 10 >= int64_t{p.maxSeqLen} * 9;
}

// The hints say the lengths are uneven enough for the uneven-length rule
// (pagedAttentionSplitPlan); f16/bf16 queries, the tilings it was measured on.
// A sliding window (or a local chunk) caps each sequence's work whatever its
// length, so the lengths say nothing about the tail there: such calls keep the
// fill rule.
bool unevenLengthRuleApplies(const PagedAttentionParams& p) {
  return p.dtype != ir::ScalarKind::F32 && p.slidingWindow == 0 && p.slidingWindowRight == 0 &&
         p.attentionChunkSize == 0 && p.minSeqLen > 0 && !lengthsEven(p) && p.maxSeqLen >= kUnevenSplitMinMaxSeqLen;
}

// The fill rule's segment count: about two CTAs per SM over `programs`
// (sequences x KV heads), at most kSplitKvMaxSegments, and, when maxSeqLen is
// known (> 0), no more segments than it has kSplitKvMinSegmentKeys-key pieces.
int64_t fillRuleSegments(int sms, int64_t programs, int maxSeqLen) {
  const int64_t segments = std::min<int64_t>(ceilDiv(2 * int64_t{sms}, programs), kSplitKvMaxSegments);
  return maxSeqLen > 0 ? std::min(segments, ceilDiv(maxSeqLen, kSplitKvMinSegmentKeys)) : segments;
}

// The split plan for `p` whose variant before splitting is `config` (baseVariant).
SplitKvPlan splitPlanFor(const PagedAttentionParams& p, const UnifiedAttentionConfig& config) {
  if (p.batchInvariant || (p.workspace == 0 && !p.runtimeScratch) || config.blockMRows != 0) return {};
  if (!batchInRange(p) || p.numKvHeads < 1 || p.numQueryHeads < 1 || p.headSize < 1) return {};
  const int sms = smsToFill(p);
  if (sms < 1) return {};  // no SM count (no device, none given): nothing to fill
  const int64_t programs = int64_t{p.numSeqs} * p.numKvHeads;
  const auto fitsWorkspace = [&](int64_t segments) { return workspaceHolds(p, segments); };
  if (p.maxSeqLen <= 0) {
    // No lengths known: the fill rule's segment count, each sequence's range
    // cut evenly on the GPU into segments of at least kSplitKvMinSegmentKeys.
    int64_t segments = fillRuleSegments(sms, programs, 0);
    while (segments >= 2 && !fitsWorkspace(segments)) --segments;
    if (segments < 2) return {};
    return {static_cast<int>(segments), -static_cast<int>(ceilDiv(kSplitKvMinSegmentKeys, config.tileSize))};
  }
  const int64_t tiles = ceilDiv(p.maxSeqLen, config.tileSize);
  const auto planOf = [&](int64_t segmentTiles) {
    return SplitKvPlan{static_cast<int>(ceilDiv(tiles, segmentTiles)), static_cast<int>(segmentTiles)};
  };
  // Fill the GPU: about two CTAs per SM.
  int64_t fillSegments = fillRuleSegments(sms, programs, p.maxSeqLen);
  // Query tiles of more than 16 rows (MQA's 32 heads) run at most two CTAs per
  // SM (80 KB of shared memory at 64-key bf16 tiles, 227 registers for int8
  // per-token-head), so rounding the segments up leaves a second wave of a
  // few CTAs: round down while that still splits. MQA 32/1 B=64 ctx 4096, the
  // same kernels: 4 segments (256 CTAs) 0.0515 ms (bf16) / 0.0673 (int8
  // per-token-head) against 5 (320 CTAs) 0.066 / 0.095 (docs/perf-log.md
  // 2026-12-03).
  const int64_t oneWave = std::min(2 * int64_t{sms} / programs, fillSegments);
  if (p.dtype != ir::ScalarKind::F32 && config.blockM() > 16 && oneWave >= 2) fillSegments = oneWave;
  if (unevenLengthRuleApplies(p)) {
    // Uneven lengths: no segment longer than 3/8 of the longest sequence.
    const int64_t segmentTiles =
        std::min(ceilDiv(tiles, fillSegments), ceilDiv(tiles * kUnevenSplitSegmentEighths, 8));
    if (fitsWorkspace(ceilDiv(tiles, segmentTiles))) return planOf(segmentTiles);
  }
  // No more than the workspace holds for this batch.
  int64_t segments = fillSegments;
  while (segments >= 2 && !fitsWorkspace(segments)) --segments;
  if (segments < 2) return {};
  return segmentsOf(tiles, segments);
}

}  // namespace

SplitKvPlan pagedAttentionSplitPlan(const PagedAttentionParams& p) {
  // Sizes the kernel rejects plan nothing (validatePagedAttention names them).
  if (!baseVariant(p).validate()) return {};
  return pagedAttentionPlan(p).split;
}

PagedAttentionParams pagedAttentionBatchParams(const UnifiedAttentionConfig& config,
                                               const compiler::BatchShape& shape) {
  PagedAttentionParams p;
  p.dtype = config.dtype;
  p.fp32Precision = config.fp32Precision;
  p.numQueryHeads = config.numQueryHeads;
  p.numKvHeads = config.numKvHeads;
  p.headSize = config.headSize;
  p.valueHeadSize = config.valueHeadSize;
  p.blockSize = config.blockSize;
  p.causal = config.causal;
  p.kvCacheFormat = config.kvCacheFormat;
  p.kvScaleLayout = config.kvScaleLayout;
  if (config.separateScales()) {
    // The problem harness's scale tensors: [blocks, block_size, Hkv], blocks padded.
    p.kScaleCache = p.vScaleCache = kFeaturePlaceholder;
    p.scaleStrideHead = 1;
    p.scaleStrideToken = config.numKvHeads;
    p.scaleStrideBlock = int64_t{config.blockSize} * config.numKvHeads + 3;
  }
  p.slidingWindow = config.slidingWindow;
  p.slidingWindowRight = config.slidingWindowRight;
  p.attentionChunkSize = config.attentionChunkSize;
  p.softcap = config.softcap;
  p.checkBounds = config.checkBounds;
  p.numSeqs = static_cast<int>(std::min(shape.queryLens.size(), shape.contextLens.size()));
  for (int s = 0; s < p.numSeqs; ++s) {
    const int queryLen = shape.queryLens[static_cast<size_t>(s)];
    const int seqLen = queryLen + shape.contextLens[static_cast<size_t>(s)];
    p.numTokens += queryLen;
    p.maxQueryLen = std::max(p.maxQueryLen, queryLen);
    p.maxSeqLen = std::max(p.maxSeqLen, seqLen);
    p.minSeqLen = s == 0 ? seqLen : std::min(p.minSeqLen, seqLen);
  }
  p.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(config.headSize)));
  if (config.alibi) p.alibiSlopes = kFeaturePlaceholder;
  p.alibiSqrt = config.alibiSqrt;
  if (config.sinks) p.sinks = kFeaturePlaceholder;
  if (config.outputLse) p.lse = kFeaturePlaceholder;
  if (config.outputFp8) p.outputScale = kFeaturePlaceholder;
  if (config.queryFp8) p.qScale = kFeaturePlaceholder;
  if (config.perSequenceCausal) p.causalFlags = kFeaturePlaceholder;
  if (config.mmPrefixRanges > 0) {
    p.mmPrefixRange = kFeaturePlaceholder;
    p.mmPrefixRanges = config.mmPrefixRanges;
  }
  if (config.qqBias) {
    // The problem harness's bias: [n, n] for the longest query.
    p.qqBias = kFeaturePlaceholder;
    p.qqBiasStride = std::max(p.maxQueryLen, 1);
  }
  return p;
}

namespace {

// pagedAttentionCtasPerSm for the variant `config` the call runs.
int ctasPerSmFor(const PagedAttentionParams& p, const UnifiedAttentionConfig& config) {
  if (!lengthsEven(p) || !config.validate() || !batchInRange(p)) return 0;
  if (config.splitKv || config.blockMRows != 0) return 0;  // split-KV and prefill tilings: not measured
  // The cap gains at head sizes 96 and 128 (14% and 11% at B=64 ctx 4096) and
  // loses at 64 (23%: smaller CTAs want more than two per SM) and 192 (4%;
  // bench/decode_grid.py, docs/perf-log.md 2026-12-02).
  if (widestHeadSize(config) <= 64 || widestHeadSize(config) > 128) return 0;
  const int sms = smsToFill(p);
  const int64_t ctas = compiler::unifiedAttentionGridX(config, p.numSeqs, p.numTokens) * int64_t{p.numKvHeads};
  return sms > 0 && ctas > int64_t{kUniformDecodeCtasPerSm} * sms ? kUniformDecodeCtasPerSm : 0;
}

}  // namespace

int pagedAttentionCtasPerSm(const PagedAttentionParams& p) { return pagedAttentionPlan(p).ctasPerSm; }

int64_t sharedBytesForCtasPerSm(int64_t kernelBytes, int ctasPerSm, int64_t perMultiprocessor,
                                int64_t reservedPerBlock, int64_t maxPerBlock) {
  if (ctasPerSm <= 0 || perMultiprocessor <= 0) return kernelBytes;
  // One byte more than (ctasPerSm + 1) CTAs could share, in 128-byte units.
  const int64_t tooManyBelow = perMultiprocessor / (ctasPerSm + 1) - reservedPerBlock + 1;
  const int64_t bytes = std::max(kernelBytes, ceilDiv(tooManyBelow, 128) * 128);
  if (bytes > maxPerBlock || (bytes + reservedPerBlock) * ctasPerSm > perMultiprocessor) return kernelBytes;
  return bytes;
}

support::Expected<uint64_t> pagedAttentionWorkspaceBytes(int64_t maxNumTokens, int numQueryHeads, int headSize,
                                                         int maxSeqLen) {
  const ArgumentChecks workspaceChecks("paged attention workspace");
  if (support::Status s = workspaceChecks.tokenCount(maxNumTokens); !s) return s;
  if (numQueryHeads < 1 || numQueryHeads > compiler::kMaxAttentionHeads)
    return workspaceChecks.error("num_query_heads (" + std::to_string(numQueryHeads) + ") must be between 1 and " +
                                 std::to_string(compiler::kMaxAttentionHeads));
  if (headSize < 1 || headSize > compiler::kMaxHeadSize)
    return workspaceChecks.error(compiler::headSizeOutOfRange("head_size", headSize));
  if (maxSeqLen < 0)
    return workspaceChecks.error("max_seq_len (" + std::to_string(maxSeqLen) + ") must not be negative");
  if (maxNumTokens == 0) return uint64_t{0};
  const int64_t perToken = std::min<int64_t>(16, ceilDiv(maxSeqLen, kSplitKvMinSegmentKeys));
  if (perToken < 2) return uint64_t{0};  // one 512-key segment at most: never split
  uint64_t bytes = workspaceFor(maxNumTokens, numQueryHeads, headSize, perToken);
  // Small decode batches: the fill rule (splitPlanFor) cuts s sequences of one
  // KV head into up to ceil(2·SMs / s) segments; a workspace sized for 16 would
  // cap a long-context batch of a few sequences at 16 segments, fewer CTAs than
  // SMs (measured: MQA B=3 ctx 128k, 2.3x slower than the runtime's scratch).
  const int deviceSms = compiler::opDeviceFacts().smCount;
  const int sms = deviceSms > 0 ? deviceSms : kWorkspaceSmsWithoutDevice;
  for (int64_t s = 1; s <= std::min<int64_t>(maxNumTokens, 2 * int64_t{sms}); ++s) {
    const int64_t segments = fillRuleSegments(sms, s, maxSeqLen);
    if (segments >= 2) bytes = std::max(bytes, workspaceFor(s, numQueryHeads, headSize, segments));
  }
  return bytes;
}

namespace {

// The deferred row sum's rule for a plan whose kernel, split and cap are set.
// The per-column row sum (deferRowSum) costs same-dtype decode its third CTA
// per SM (the registers it adds at 64-key tiles). Batches of equal lengths
// run at two anyway (ctasPerSmFor) and gain; uneven ones that fill more than
// two per SM need the third to balance their work, so they keep the per-tile
// sum (measured: docs/perf-log.md, 2026-11-30). Quantized caches already run
// at two (their tiles' shared memory).
void chooseRowSum(const PagedAttentionParams& p, PagedAttentionPlan& plan) {
  const int sms = smsToFill(p);
  const int64_t ctas = compiler::unifiedAttentionGridX(plan.config, p.numSeqs, p.numTokens) *
                       int64_t{p.numKvHeads} * std::max(1, plan.split.numSegments);
  if (p.kvCacheFormat == KvCacheFormat::Auto && plan.config.blockMRows == 0 && sms > 0 && ctas > 2 * int64_t{sms} &&
      plan.ctasPerSm == 0)
    plan.config.deferRowSum = false;
}

// Whether a decode launch of 64-key same-dtype f16/bf16 tiles (16-row query
// tiles, heads up to 128) brings no more CTAs than the GPU has SMs: then no SM
// runs more than one and the launch takes as long as its slowest CTA.
bool latencyBound(const PagedAttentionParams& p, const PagedAttentionPlan& plan) {
  const UnifiedAttentionConfig& config = plan.config;
  const int sms = smsToFill(p);
  if (sms < 1 || p.batchInvariant || p.kvCacheFormat != KvCacheFormat::Auto || p.dtype == ir::ScalarKind::F32 ||
      config.tileSize != 64 || config.blockMRows != 0 || config.blockM() > 16 || widestHeadSize(config) > 128 ||
      p.maxQueryLen > config.blockQ())
    return false;
  return int64_t{p.numSeqs} * p.numKvHeads * std::max(1, plan.split.numSegments) <= sms;
}

// The heuristic plan: the variant a call runs, its split plan and its cap,
// each derived once, so that what selectPagedAttentionVariant reports is what
// pagedAttention launches.
PagedAttentionPlan heuristicPlan(const PagedAttentionParams& p) {
  PagedAttentionPlan plan;
  plan.config = baseVariant(p);
  // Nothing is derived from sizes the kernel rejects (a tile of 2^30 rows, a
  // grid divided by zero): such a call is planned as it is and validateFor
  // reports the config's error.
  if (!plan.config.validate() || !batchInRange(p)) return plan;
  plan.split = splitPlanFor(p, plan.config);
  plan.config.splitKv = plan.split.numSegments > 1;
  UnifiedAttentionConfig wideTiles = plan.config;
  wideTiles.tileSize = 128;
  if (latencyBound(p, plan) && fitsSharedMemory(wideTiles)) {
    // One CTA per SM at most: each CTA's own time is the launch's, and 128-key
    // tiles halve its iterations: 1.07-1.32x on every such batch measured (B=16
    // ctx 512 0.0173 -> 0.0137 ms, B=4 ctx 2048 0.0215 -> 0.0178, B=1 ctx 4096
    // 0.0196 -> 0.0182; D=64, 96, f16, GQA 1; docs/perf-log.md 2026-12-04).
    // The segment count stays (it depends on the lengths, not the tile), their
    // length in tiles halves. Where 128-key slots do not fit the device's shared
    // memory, the rules' tiles stay (fitSharedMemory).
    plan.config.tileSize = 128;
    plan.split = splitPlanFor(p, plan.config);
    plan.config.splitKv = plan.split.numSegments > 1;
  }
  plan.ctasPerSm = ctasPerSmFor(p, plan.config);
  chooseRowSum(p, plan);
  return plan;
}

// Whether a call's plan may come from a tuned record: not for batch-invariant
// calls (one fixed plan), bounds-checked ones (a debugging mode), calls the
// kernel rejects, or calls without max_seq_len. Without it nothing tells a
// batch of 64-key sequences from one of 4096: a plan measured on one would
// steer the other (128-key tiles, one CTA per SM, gain 8% at 4096 keys and
// lose 40% at 64; docs/perf-log.md 2026-12-04), so such calls keep the rules.
bool tunable(const PagedAttentionParams& p, const UnifiedAttentionConfig& base) {
  return !p.batchInvariant && !base.checkBounds && base.validate() && batchInRange(p) && p.numKvHeads >= 1 &&
         p.numQueryHeads >= 1 && p.maxQueryLen >= 1 && p.maxSeqLen > 0;
}

// Whether split-KV may run at all: a workspace, or the runtime's scratch.
bool maySplit(const PagedAttentionParams& p) { return !p.batchInvariant && (p.workspace != 0 || p.runtimeScratch); }

// ceil(log2(v)) for v >= 1: the power-of-two class a size falls in.
int sizeClass(int64_t v) { return static_cast<int>(std::bit_width(static_cast<uint64_t>(std::max<int64_t>(v, 1) - 1))); }

// Whether `ctas` equal CTAs fill the `slots` an SM count holds at once without
// a short last wave: many waves (2.5 or more), or a last wave at least 3/4
// full. Memory-bound CTAs of a last wave of a few draw little of the
// bandwidth, so 1.29 waves take about as long as two full ones.
bool wavesFit(int64_t ctas, int64_t slots) {
  if (slots < 1 || ctas * 2 >= slots * 5) return true;
  const int64_t tail = ctas % slots;
  return tail == 0 || tail * 4 >= slots * 3;
}

}  // namespace

namespace detail {

PagedAttentionPlan fitPlanToWaves(const PagedAttentionParams& p, const PagedAttentionPlan& heuristic,
                                  int residentCtasPerSm) {
  PagedAttentionPlan plan = heuristic;
  const int sms = smsToFill(p);
  if (plan.origin != PlanOrigin::Heuristic || residentCtasPerSm < 1 || sms < 1) return plan;
  plan.residentCtasPerSm = residentCtasPerSm;
  if (plan.config.blockMRows != 0 || p.batchInvariant || !batchInRange(p) || p.maxQueryLen > plan.config.blockQ())
    return plan;
  // Every query fits one tile of blockQ tokens: one busy program per sequence
  // and KV head (the grid's other query tiles exit at once).
  const int64_t programs = int64_t{p.numSeqs} * p.numKvHeads;
  const int64_t slots = int64_t{residentCtasPerSm} * sms;
  SplitKvPlan& split = plan.split;
  if (split.numSegments >= 2) {
    // The fill rule's split (the uneven-length rule sizes its segments by the
    // lengths instead): the nearest segment count, one or two more or fewer
    // (at least 2), that ends the launch on a full wave. The kernel stays:
    // the segment count is a launch parameter.
    if (unevenLengthRuleApplies(p) || wavesFit(programs * split.numSegments, slots)) return plan;
    const int64_t tiles = p.maxSeqLen > 0 ? ceilDiv(p.maxSeqLen, plan.config.tileSize) : 0;
    const int64_t ruled = split.numSegments;
    for (const int64_t segments : {ruled + 1, ruled - 1, ruled + 2, ruled - 2}) {
      if (segments < 2 || segments > kSplitKvMaxSegments) continue;
      SplitKvPlan candidate{static_cast<int>(segments), split.segmentTiles};
      if (split.segmentTiles > 0) {
        // Fixed segments, sized by max_seq_len: never shorter than the fill
        // rule's minimum, and as many as the tiles then make.
        if (segments > ceilDiv(p.maxSeqLen, kSplitKvMinSegmentKeys)) continue;
        candidate = segmentsOf(tiles, segments);
      }
      if (!workspaceHolds(p, candidate.numSegments)) continue;
      if (candidate.numSegments >= 2 && wavesFit(programs * candidate.numSegments, slots)) {
        split = candidate;
        break;
      }
    }
    return plan;
  }
  // A 2D launch of lengths that may be equal or not (no min_seq_len: the
  // hinted rules already decided for calls that give it).
  if (plan.config.splitKv || plan.ctasPerSm > 0 || p.minSeqLen > 0 || wavesFit(programs, slots)) return plan;
  if (p.maxSeqLen >= kWaveSplitMinMaxSeqLen && maySplit(p)) {
    // Long enough to split: segments sized by max_seq_len end the launch on a
    // full wave and cut the long sequences of an uneven batch (B=64 ctx 4096,
    // two segments: equal lengths 86 -> 98% of copy, skewed 75 -> 79%).
    const int64_t tiles = ceilDiv(p.maxSeqLen, plan.config.tileSize);
    for (int64_t segments = 2; segments <= 4 && segments <= ceilDiv(p.maxSeqLen, kSplitKvMinSegmentKeys);
         ++segments) {
      const SplitKvPlan candidate = segmentsOf(tiles, segments);
      if (!workspaceHolds(p, candidate.numSegments)) break;
      if (!wavesFit(programs * candidate.numSegments, slots)) continue;
      plan.split = candidate;
      plan.config.splitKv = true;
      chooseRowSum(p, plan);
      return plan;
    }
    return plan;
  }
  // Short or unknown lengths, where a split's second kernel costs more than
  // the tail (B=64 ctx 512: 70 -> 61%): fewer CTAs per SM when that ends the
  // launch on a full wave (equal lengths 86 -> 97% at ctx 4096; an uneven
  // batch loses some of the balancing the extra CTAs gave: skewed 75 -> 68%).
  for (int cap = residentCtasPerSm - 1; cap >= kUniformDecodeCtasPerSm; --cap) {
    if (!wavesFit(programs, int64_t{cap} * sms)) continue;
    plan.ctasPerSm = cap;
    // chooseRowSum keeps the per-column row sum of capped launches (the
    // registers it costs no longer cost a CTA per SM).
    plan.config.deferRowSum = baseVariant(p).deferRowSum;
    break;
  }
  return plan;
}

std::optional<std::string> pagedAttentionTuningBucket(const PagedAttentionParams& p) {
  UnifiedAttentionConfig base = baseVariant(p);
  if (!tunable(p, base)) return std::nullopt;
  const int sms = smsToFill(p);
  const char* lengths = p.minSeqLen <= 0 || p.maxSeqLen <= 0 ? "unknown" : lengthsEven(p) ? "even" : "uneven";
  const char* split = p.workspace != 0 ? "workspace" : p.runtimeScratch ? "scratch" : "none";
  std::string bucket = "paged_attention " + base.kernelName();
  bucket += prefillLike(p, base) ? " prefill" : " decode";
  bucket += " seqs<=2^" + std::to_string(sizeClass(p.numSeqs));
  bucket += " query<=2^" + std::to_string(sizeClass(p.maxQueryLen));
  bucket += " keys<=2^" + std::to_string(sizeClass(p.maxSeqLen));
  bucket += std::string(" lengths ") + lengths + " split " + split + " sms " + std::to_string(sms);
  return bucket;
}

std::optional<PagedAttentionPlan> pagedAttentionPlanWithChoice(const PagedAttentionParams& p,
                                                               const PlanChoice& choice) {
  if (!choice.plausible()) return std::nullopt;
  PagedAttentionPlan plan;
  plan.origin = PlanOrigin::Tuned;
  plan.config = baseVariant(p);
  if (!tunable(p, plan.config)) return std::nullopt;
  plan.config.tileSize = choice.tileSize;
  plan.config.numWarps = choice.numWarps;
  plan.config.qInShared = choice.qInShared;
  plan.config.warpSpecialize = choice.producers != PlanChoice::Producers::None;
  plan.config.pingPong = choice.producers == PlanChoice::Producers::PingPong;
  plan.config.softmaxTurns = choice.producers == PlanChoice::Producers::SoftmaxTurns;
  plan.config.numStages = choice.numStages;
  if (!plan.config.validate()) return std::nullopt;
  if (choice.numSegments > 1 && plan.config.blockMRows == 0 && maySplit(p)) {
    const auto fitsWorkspace = [&](int64_t segments) { return workspaceHolds(p, segments); };
    const int64_t tiles = ceilDiv(p.maxSeqLen, plan.config.tileSize);
    int64_t segments = std::min<int64_t>(choice.numSegments, tiles);
    while (segments >= 2 && !fitsWorkspace(segments)) --segments;
    if (segments >= 2) {
      plan.split = segmentsOf(tiles, segments);
    }
  }
  plan.config.splitKv = plan.split.numSegments > 1;
  // The cap serves equal lengths only (ctasPerSmFor): a bucket of uneven or
  // unknown minimum lengths never takes it, whatever batch tuned it.
  plan.ctasPerSm = plan.config.splitKv || plan.config.blockMRows != 0 || !lengthsEven(p) ? 0 : choice.ctasPerSm;
  chooseRowSum(p, plan);
  return plan;
}

PlanChoice planChoiceOf(const PagedAttentionPlan& plan) {
  const PlanChoice::Producers producers = !plan.config.warpSpecialize ? PlanChoice::Producers::None
                                          : plan.config.pingPong       ? PlanChoice::Producers::PingPong
                                          : plan.config.softmaxTurns   ? PlanChoice::Producers::SoftmaxTurns
                                                                       : PlanChoice::Producers::Copies;
  return {plan.config.tileSize, plan.config.numWarps,  plan.config.qInShared, std::max(1, plan.split.numSegments),
          plan.ctasPerSm,       producers,             plan.config.numStages};
}

PagedAttentionPlan heuristicPagedAttentionPlan(const PagedAttentionParams& p) { return heuristicPlan(p); }

support::Expected<PlanTuningMode> planTuningMode(const PagedAttentionParams& p) {
  switch (p.tuning) {
    case PlanTuning::Off: return PlanTuningMode::Off;
    case PlanTuning::Recorded: return PlanTuningMode::Recorded;
    case PlanTuning::OnFirstUse: return PlanTuningMode::OnFirstUse;
    case PlanTuning::FromEnvironment: break;
  }
  return planTuningModeFromEnvironment();
}

}  // namespace detail

namespace {

// The call's plan: the rules', or a record's where `consultRecords` and the
// call's bucket has one on this device.
PagedAttentionPlan planConsulting(const PagedAttentionParams& p, bool consultRecords) {
  PagedAttentionPlan heuristic = heuristicPlan(p);
  if (!consultRecords || !tunedPlanDeviceKey()) return heuristic;
  const std::optional<std::string> bucket = detail::pagedAttentionTuningBucket(p);
  if (!bucket) return heuristic;
  const std::optional<TunedPlan> tuned = TunedPlans::process().find(*bucket);
  if (!tuned) return heuristic;
  if (tuned->keepsRule) {
    heuristic.origin = PlanOrigin::Tuned;
    return heuristic;
  }
  std::optional<PagedAttentionPlan> plan = detail::pagedAttentionPlanWithChoice(p, tuned->choice);
  return plan ? *plan : heuristic;
}

}  // namespace

PagedAttentionPlan pagedAttentionPlan(const PagedAttentionParams& p) {
  // An unreadable ATTNJIT_TUNE is validatePagedAttention's error; planned as recorded.
  auto mode = detail::planTuningMode(p);
  return planConsulting(p, !mode || *mode != PlanTuningMode::Off);
}

std::string describeSplitAndOccupancy(const PagedAttentionPlan& plan) {
  std::string text = "2D";
  const SplitKvPlan& split = plan.split;
  if (split.numSegments > 1)
    text = split.segmentTiles > 0
               ? std::to_string(split.numSegments) + " segments of " + std::to_string(split.segmentTiles) +
                     " tiles (" + std::to_string(int64_t{split.segmentTiles} * plan.config.tileSize) + " keys)"
               : std::to_string(split.numSegments) + " segments per sequence, cut on the GPU (at least " +
                     std::to_string(int64_t{-split.segmentTiles} * plan.config.tileSize) + " keys each)";
  if (plan.ctasPerSm > 0) text += ", at most " + std::to_string(plan.ctasPerSm) + " CTAs per SM";
  return text;
}

UnifiedAttentionConfig selectPagedAttentionVariant(const PagedAttentionParams& p) { return pagedAttentionPlan(p).config; }

namespace {

// The checks of validatePagedAttention for the variant already selected.
support::Status validateFor(const PagedAttentionParams& p, const UnifiedAttentionConfig& config,
                            const SplitKvPlan& plan) {
  // The op's own name for what the config calls `alibi`.
  if (p.alibiSqrt && p.alibiSlopes == 0) return argumentError("alibi_sqrt needs alibi_slopes (its slopes)");
  if (support::Status s = config.validate(); !s) return argumentError(s.diagnostic().message);
  if (p.numSeqs < 1) return argumentError("num_seqs (" + std::to_string(p.numSeqs) + ") must be at least 1");
  if (p.numTokens < p.numSeqs)
    return argumentError("num_tokens (" + std::to_string(p.numTokens) + ") is less than num_seqs (" +
                         std::to_string(p.numSeqs) + "): every sequence brings at least one query token");
  if (p.maxQueryLen < 1 || p.maxQueryLen > p.numTokens)
    return argumentError("max_query_len (" + std::to_string(p.maxQueryLen) + ") must be between 1 and num_tokens (" +
                         std::to_string(p.numTokens) + ")");
  if (p.maxSeqLen < 0 || (p.maxSeqLen > 0 && p.maxSeqLen < p.maxQueryLen))
    return argumentError("max_seq_len (" + std::to_string(p.maxSeqLen) +
                         ") must be 0 (unknown) or at least max_query_len (" + std::to_string(p.maxQueryLen) + ")");
  if (p.minSeqLen < 0 || (p.minSeqLen > 0 && (p.maxSeqLen == 0 || p.minSeqLen > p.maxSeqLen)))
    return argumentError("min_seq_len (" + std::to_string(p.minSeqLen) +
                         ") must be 0 (unknown) or at most max_seq_len (" + std::to_string(p.maxSeqLen) +
                         "), which must then be given");
  if (config.checkBounds && p.numBlocks < 1)
    return argumentError("num_blocks (" + std::to_string(p.numBlocks) +
                         ") must be the KV cache's block count (at least 1) when bounds checking is on "
                         "(check_bounds or ATTNJIT_CHECK_BOUNDS=1)");
  if (p.numTokens > std::numeric_limits<int32_t>::max())
    return argumentError("num_tokens (" + std::to_string(p.numTokens) + ") must be at most 2147483647 (the kernels' "
                         "32-bit token indices)");
  if (!std::isfinite(p.scale) || p.scale <= 0)
    return argumentError("scale (" + std::to_string(p.scale) + ") must be a positive finite number");
  if (p.numSms < 0)
    return argumentError("num_sms (" + std::to_string(p.numSms) + ") must be 0 (the device's) or positive");
  // CUDA's grid: x programs per query block (at most 2^31 - 1), y the KV heads.
  if (const int64_t programs = compiler::unifiedAttentionGridX(config, p.numSeqs, p.numTokens);
      programs > std::numeric_limits<int32_t>::max())
    return argumentError("the batch needs " + std::to_string(programs) + " programs per KV head (num_seqs " +
                         std::to_string(p.numSeqs) + ", num_tokens " + std::to_string(p.numTokens) +
                         "), more than a launch's 2147483647; split the batch");
  const std::pair<const char*, uint64_t> required[] = {{"out", p.out},
                                                       {"q", p.q},
                                                       {"kv_cache", p.kvCache},
                                                       {"block_tables", p.blockTables},
                                                       {"seq_lens", p.seqLens},
                                                       {"cu_seqlens_q", p.cuSeqlensQ}};
  for (const auto& [name, pointer] : required)
    if (support::Status s = checks().pointer(name, pointer, 16, true); !s) return s;
  const bool perTensor = compiler::isPerTensorFp8(p.kvCacheFormat);
  if (support::Status s = checks().pointer("k_scale", p.kScale, 4, perTensor); !s) return s;
  if (support::Status s = checks().pointer("v_scale", p.vScale, 4, perTensor); !s) return s;
  if (!perTensor && (p.kScale != 0 || p.vScale != 0))
    return argumentError(std::string("k_scale/v_scale are only used by the per-tensor fp8 caches; kv_cache_dtype is ") +
                         compiler::kvCacheFormatName(p.kvCacheFormat));
  const bool separateScales = config.separateScales();
  if (support::Status s = checks().pointer("k_scale_cache", p.kScaleCache, 4, separateScales); !s) return s;
  if (support::Status s = checks().pointer("v_scale_cache", p.vScaleCache, 4, separateScales); !s) return s;
  if (support::Status s = checks().separateScales(
          separateScales,
          {p.kScaleCache, p.vScaleCache, p.scaleStrideBlock, p.scaleStrideToken, p.scaleStrideHead},
          "kv_cache_dtype is", compiler::kvCacheFormatName(p.kvCacheFormat),
          compiler::kvScaleLayoutName(p.kvScaleLayout));
      !s)
    return s;
  for (const auto& [name, pointer] : {std::pair{"alibi_slopes", p.alibiSlopes}, std::pair{"sinks", p.sinks},
                                      std::pair{"lse", p.lse}, std::pair{"output_scale", p.outputScale},
                                      std::pair{"q_scale", p.qScale}, std::pair{"qq_bias", p.qqBias},
                                      std::pair{"mm_prefix_range", p.mmPrefixRange}})
    if (support::Status s = checks().pointer(name, pointer, 4, false); !s) return s;
  if (p.mmPrefixRange != 0 && (p.mmPrefixRanges < 1 || p.mmPrefixRanges > compiler::kMaxMmPrefixRanges))
    return argumentError("mm_prefix_ranges (" + std::to_string(p.mmPrefixRanges) +
                         ") must be the ranges per sequence of mm_prefix_range, 1 to " +
                         std::to_string(compiler::kMaxMmPrefixRanges));
  if (p.mmPrefixRange == 0 && p.mmPrefixRanges != 0)
    return argumentError("mm_prefix_ranges (" + std::to_string(p.mmPrefixRanges) +
                         ") is set but mm_prefix_range is null: pass the ranges or leave both 0");
  // The kernel indexes the bias with 32-bit offsets: n·n < 2^31.
  if (p.qqBias != 0 && (p.qqBiasStride < 1 || p.qqBiasStride > kMaxQqBiasSize))
    return argumentError("qq_bias_stride (" + std::to_string(p.qqBiasStride) +
                         ") must be the bias's row stride and size n (qq_bias is [n, n]), 1 to " +
                         std::to_string(kMaxQqBiasSize));
  if (p.qqBias == 0 && p.qqBiasStride != 0)
    return argumentError("qq_bias_stride (" + std::to_string(p.qqBiasStride) +
                         ") is set but qq_bias is null: pass the bias or leave both 0");
  if (p.lse != 0 && p.lseStrideHead < p.numTokens)
    return argumentError("lse_stride_head (" + std::to_string(p.lseStrideHead) + ") must be at least num_tokens (" +
                         std::to_string(p.numTokens) + ")");
  // Row strides of q and out are compiled as multiples of 8 when the head size
  // is (16-byte vectors), the cache's as config.kvStrideDivisibility() says.
  const int64_t rowMultiple = p.headSize % 8 == 0 ? 8 : 1, cacheMultiple = config.kvStrideDivisibility();
  const int64_t outputRowMultiple = valueHeadSizeOf(p) % 8 == 0 ? 8 : 1;  // out's rows are Dv wide
  const std::string stridesFor =
      "for head size " + std::to_string(p.headSize) +
      (valueHeadSizeOf(p) != p.headSize ? " (value head size " + std::to_string(valueHeadSizeOf(p)) + ")" : std::string()) +
      " and kv_cache_dtype " + compiler::kvCacheFormatName(p.kvCacheFormat);
  if (support::Status s = checks().strides({{"q_stride_token", p.qStrideToken, rowMultiple},
                                            {"q_stride_head", p.qStrideHead, rowMultiple},
                                            {"o_stride_token", p.oStrideToken, outputRowMultiple},
                                            {"o_stride_head", p.oStrideHead, outputRowMultiple},
                                            {"block_table_stride", p.blockTableStride, 1},
                                            {"kv_stride_block", p.kvStrideBlock, cacheMultiple},
                                            {"kv_stride_kv", p.kvStrideKv, cacheMultiple},
                                            {"kv_stride_token", p.kvStrideToken, cacheMultiple},
                                            {"kv_stride_head", p.kvStrideHead, cacheMultiple}},
                                           stridesFor);
      !s)
    return s;
  // A workspace too small to split this batch (one sized for decode, passed with a
  // prefill) is not an error: the plan then runs it in 2D, as vLLM's backends do.
  if (p.workspace != 0)
    if (support::Status s = checks().pointer("workspace", p.workspace, 16, true); !s) return s;
  return support::Status::ok();
}

}  // namespace

namespace {


}  // namespace

namespace {

// The kernels the planner picks for `p`'s static parameters over batches that
// reach each of its rules, by name (with their factories).
support::Expected<std::vector<WarmupKernel>> warmupKernels(const PagedAttentionParams& p) {
  std::vector<WarmupKernel> kernels;
  const int sms = std::max(smsToFill(p), 1);
  const int kvHeads = std::max(p.numKvHeads, 1);
  const int fullBatch = static_cast<int>(std::min<int64_t>(ceilDiv(4 * int64_t{sms}, kvHeads), 1 << 16));
  const int fillingBatch = std::max(1, sms / kvHeads);
  struct Batch {
    int numSeqs, maxQueryLen, maxSeqLen, minSeqLen;
  };
  const Batch batches[] = {
      {fullBatch, 1, 4096, 4096},      // decode filling the GPU, equal lengths: 2D, two CTAs per SM
      {fullBatch, 1, 8192, 1},         // ... uneven lengths: 2D with a third CTA, or the 3/8 split
      {fullBatch, 1, 0, 0},            // ... lengths unknown: 2D, every CTA that fits
      {fillingBatch, 1, 8192, 1},      // uneven, about one program per SM: the 3/8 split
      {1, 1, 65536, 65536},            // one long decode: the fill rule's split
      {1, 1, 0, 0},                    // ... without max_seq_len: segments cut on the GPU
      {1, 1, 4096, 4096},              // a short split within one CTA per SM: 128-key tiles
      {1, 2, 65536, 65536},            // two query tokens, more than one tile's (GQA >= 8): 64-key tiles
      {fillingBatch, 1, 512, 512},     // short decodes, one CTA per SM: 2D on 128-key tiles
      {8, 16, 4096, 64},               // short chunks and decodes: the decode tiling
      {8, 2048, 2048, 2048},           // prefill: the 128-row tiling
  };
  PagedAttentionParams call = p;
  if (call.workspace == 0 && !call.runtimeScratch) {
    // Calls will bring a workspace: plan as if it held every split.
    call.workspace = kFeaturePlaceholder;
    call.workspaceBytes = std::numeric_limits<uint64_t>::max();
  }
  call.numSms = sms;
  auto add = [&](std::string name, compiler::KernelFactory build) {
    for (const auto& [known, factory] : kernels)
      if (known == name) return;
    kernels.push_back({std::move(name), std::move(build)});
  };
  for (const Batch& batch : batches) {
    call.numSeqs = batch.numSeqs;
    call.numTokens = int64_t{batch.numSeqs} * batch.maxQueryLen;
    call.maxQueryLen = batch.maxQueryLen;
    call.maxSeqLen = batch.maxSeqLen;
    call.minSeqLen = batch.minSeqLen;
    // A tuned record for one of these batches' buckets names the kernel its calls run.
    const UnifiedAttentionConfig config = pagedAttentionPlan(call).config;
    if (support::Status s = config.validate(); !s) return argumentError(s.diagnostic().message);
    add(config.kernelName(), [config] { return compiler::buildUnifiedAttention(config); });
    if (config.splitKv) {
      const ReduceSegmentsConfig reduce = launchedReduceSegments(compiler::reduceSegmentsFor(config), call.numTokens);
      add(reduce.kernelName(), [reduce] { return compiler::buildReduceSegments(reduce); });
    }
  }
  return kernels;
}

}  // namespace

support::Expected<std::vector<WarmupKernel>> pagedAttentionWarmupKernels(const PagedAttentionParams& p) {
  if (p.alibiSqrt && p.alibiSlopes == 0) return argumentError("alibi_sqrt needs alibi_slopes (its slopes)");
  return warmupKernels(p);
}

support::Expected<int> warmupPagedAttention(const PagedAttentionParams& p, int threads) {
  if (threads < 0) return argumentError("threads (" + std::to_string(threads) + ") must be 0 (every core) or positive");
  auto kernels = pagedAttentionWarmupKernels(p);
  if (!kernels) return kernels.status();
  return readyKernels(*kernels, threads);
}

support::Status detail::validatePagedAttentionPlan(const PagedAttentionParams& p, const PagedAttentionPlan& plan) {
  return validateFor(p, plan.config, plan.split);
}

support::Status validatePagedAttention(const PagedAttentionParams& p) {
  auto mode = detail::planTuningMode(p);
  if (!mode) return argumentError(mode.diagnostic().message);
  const PagedAttentionPlan plan = planConsulting(p, *mode != PlanTuningMode::Off);
  return validateFor(p, plan.config, plan.split);
}

namespace {

// Launches a validated call whose split-KV scratch, if it splits, is in p.workspace.
// `known`: the plan's kernel when the caller already has it ready.
support::Status launchPlanned(const PagedAttentionParams& p, const PagedAttentionPlan& callPlan,
                              const ReadyKernel* known = nullptr) {
  const UnifiedAttentionConfig& config = callPlan.config;
  const SplitKvPlan& plan = callPlan.split;
  auto ready = known != nullptr
                   ? support::Expected<ReadyKernel>(*known)
                   : readyKernel(config.kernelName(), [&] { return compiler::buildUnifiedAttention(config); });
  if (!ready) return ready.status();

  // Split-KV scratch inside the workspace (compiler/ops/SplitKv.h).
  const SplitKvScratch::Pointers scratch =
      splitKvScratch(p.numTokens, p.numQueryHeads, valueHeadSizeOf(p), plan.numSegments).at(p.workspace);

  // Parameters in the kernel's order (compiler/kernels/UnifiedAttention.h).
  // At most 19: out (2D) or 3 scratch (split), 5, causal flags, 2 scales, q
  // scale, ALiBi, sinks, qq bias, ranges, output scale and LSE (2D), 2 scale caches, record.
  uint64_t pointers[20];
  int numPointers = 0;
  if (config.splitKv) {
    pointers[numPointers++] = scratch.output;
    pointers[numPointers++] = scratch.maximum;
    pointers[numPointers++] = scratch.expsum;
  } else {
    pointers[numPointers++] = p.out;
  }
  for (uint64_t pointer : {p.q, p.kvCache, p.blockTables, p.seqLens, p.cuSeqlensQ}) pointers[numPointers++] = pointer;
  if (config.perSequenceCausal) pointers[numPointers++] = p.causalFlags;
  if (compiler::isPerTensorFp8(p.kvCacheFormat)) {
    pointers[numPointers++] = p.kScale;
    pointers[numPointers++] = p.vScale;
  }
  if (config.queryFp8) pointers[numPointers++] = p.qScale;
  if (config.alibi) pointers[numPointers++] = p.alibiSlopes;
  if (config.sinks) pointers[numPointers++] = p.sinks;
  if (config.qqBias) pointers[numPointers++] = p.qqBias;
  if (config.mmPrefixRanges > 0) pointers[numPointers++] = p.mmPrefixRange;
  if (config.outputFp8 && !config.splitKv) pointers[numPointers++] = p.outputScale;
  if (config.outputLse && !config.splitKv) pointers[numPointers++] = p.lse;
  if (config.separateScales()) {
    pointers[numPointers++] = p.kScaleCache;
    pointers[numPointers++] = p.vScaleCache;
  }
  const int recordPointer = numPointers;  // bounds_record (checked): filled in by runBoundsChecked
  if (config.checkBounds) pointers[numPointers++] = 0;
  float scale = p.scale;
  // One query token per sequence (decode: numTokens == numSeqs and none longer
  // than one): the kernel finds each program's sequence without the search's
  // chain of dependent loads. Checked launches keep the search.
  const bool oneTokenEach = p.maxQueryLen == 1 && p.numTokens == p.numSeqs && !config.checkBounds;
  int32_t numSeqs = p.numSeqs, steps = compiler::unifiedAttentionSeqSearchSteps(p.numSeqs, oneTokenEach);
  int32_t numSegments = plan.numSegments, segmentTiles = plan.segmentTiles;
  int32_t numBlocks = p.numBlocks, numTokens = static_cast<int32_t>(p.numTokens);
  int64_t strides[16];
  int numStrides = 0;
  for (int64_t stride : {p.qStrideToken, p.qStrideHead}) strides[numStrides++] = stride;
  if (!config.splitKv) {
    strides[numStrides++] = p.oStrideToken;
    strides[numStrides++] = p.oStrideHead;
  }
  for (int64_t stride : {p.blockTableStride, p.kvStrideBlock, p.kvStrideKv, p.kvStrideToken, p.kvStrideHead})
    strides[numStrides++] = stride;
  if (config.outputLse && !config.splitKv) strides[numStrides++] = p.lseStrideHead;
  if (config.qqBias) strides[numStrides++] = p.qqBiasStride;
  if (config.separateScales())
    for (int64_t stride : {p.scaleStrideBlock, p.scaleStrideToken, p.scaleStrideHead}) strides[numStrides++] = stride;
  void* params[48];
  int numParams = 0;
  for (int i = 0; i < numPointers; ++i) params[numParams++] = &pointers[i];
  params[numParams++] = &scale;
  params[numParams++] = &numSeqs;
  params[numParams++] = &steps;
  for (int i = 0; i < numStrides; ++i) params[numParams++] = &strides[i];
  if (config.splitKv) {
    params[numParams++] = &numSegments;
    params[numParams++] = &segmentTiles;
  }
  if (config.checkBounds) {
    params[numParams++] = &numBlocks;
    params[numParams++] = &numTokens;
  }

  runtime::LaunchConfig launch =
      ready->launchConfig({static_cast<unsigned>(compiler::unifiedAttentionGridX(config, p.numSeqs, p.numTokens)),
                           static_cast<unsigned>(p.numKvHeads), static_cast<unsigned>(plan.numSegments)},
                          p.stream);
  if (const int ctasPerSm = callPlan.ctasPerSm; ctasPerSm > 0) {
    const compiler::SharedMemoryLimits limits = compiler::opDeviceFacts().sharedMemory;
    launch.dynamicSharedBytes = static_cast<unsigned>(sharedBytesForCtasPerSm(
        ready->sharedBytes, ctasPerSm, limits.perMultiprocessor, limits.reservedPerBlock, limits.maxPerBlock));
  }
  // Both stages; stage 1 is the checked kernel in checked mode.
  auto launchStages = [&](uint64_t record) -> support::Status {
    if (config.checkBounds) pointers[recordPointer] = record;
    if (support::Status s = ready->loaded->function.launch(launch, params); !s) return s;
    if (!config.splitKv) return support::Status::ok();
    return launchReduceSegments({.config = compiler::reduceSegmentsFor(config),
                                 .numTokens = p.numTokens,
                                 .numSegments = numSegments,
                                 .scratch = scratch,
                                 .out = p.out,
                                 .lse = p.lse,
                                 .outputScale = p.outputScale,
                                 .oStrideToken = p.oStrideToken,
                                 .oStrideHead = p.oStrideHead,
                                 .lseStrideHead = p.lseStrideHead,
                                 .stream = p.stream});
  };
  if (!config.checkBounds) return launchStages(0);
  const compiler::BoundsCheckContext context{"paged attention", p.numBlocks, p.blockSize, p.blockTableStride,
                                             p.numTokens};
  return runBoundsChecked(context, p.stream, launchStages);
}

// fittedPlan, and in *kernel the fitted plan's kernel when it is the one the
// fit readied (the fit changes it only where it splits a 2D plan or restores
// the per-column row sum): one kernel lookup per launch.
support::Expected<PagedAttentionPlan> fitWithKernel(const PagedAttentionParams& p, const PagedAttentionPlan& planned,
                                                    std::optional<ReadyKernel>* kernel) {
  if (planned.origin != PlanOrigin::Heuristic) return planned;
  const UnifiedAttentionConfig& config = planned.config;
  auto ready = readyKernel(config.kernelName(), [&] { return compiler::buildUnifiedAttention(config); });
  if (!ready) return ready.status();
  PagedAttentionPlan fitted = detail::fitPlanToWaves(p, planned, ready->residentCtasPerSm);
  if (kernel != nullptr && fitted.config.splitKv == config.splitKv && fitted.config.deferRowSum == config.deferRowSum)
    *kernel = *ready;
  return fitted;
}

}  // namespace

namespace detail {

support::Expected<PagedAttentionPlan> fittedPlan(const PagedAttentionParams& p, const PagedAttentionPlan& planned) {
  return fitWithKernel(p, planned, nullptr);
}

support::Status launchPagedAttentionPlan(const PagedAttentionParams& p, const PagedAttentionPlan& planned) {
  std::optional<ReadyKernel> kernel;
  auto fitted = fitWithKernel(p, planned, &kernel);
  if (!fitted) return fitted.status();
  const PagedAttentionPlan& plan = *fitted;
  const ReadyKernel* known = kernel ? &*kernel : nullptr;
  if (!plan.config.splitKv || p.workspace != 0) return launchPlanned(p, plan, known);
  return launchWithRuntimeScratch(
      p, workspaceFor(p.numTokens, p.numQueryHeads, valueHeadSizeOf(p), plan.split.numSegments),
      [&](const PagedAttentionParams& withScratch) { return launchPlanned(withScratch, plan, known); },
      [&](const PagedAttentionParams& unsplit) {
        // No scratch: the same kernel's 2D variant, or the heuristic's.
        PlanChoice choice = planChoiceOf(plan);
        choice.numSegments = 1;
        std::optional<PagedAttentionPlan> unsplitPlan = pagedAttentionPlanWithChoice(unsplit, choice);
        return launchPlanned(unsplit, unsplitPlan ? *unsplitPlan : heuristicPlan(unsplit));
      });
}

}  // namespace detail

support::Expected<PagedAttentionPlan> pagedAttentionLaunchPlan(const PagedAttentionParams& p) {
  if (support::Status s = validatePagedAttention(p); !s) return s;
  return detail::fittedPlan(p, pagedAttentionPlan(p));
}

support::Status pagedAttention(const PagedAttentionParams& p) {
  auto mode = detail::planTuningMode(p);
  if (!mode) return argumentError(mode.diagnostic().message);
  const PagedAttentionPlan plan = planConsulting(p, *mode != PlanTuningMode::Off);
  if (support::Status s = validateFor(p, plan.config, plan.split); !s) return s;
  if (*mode == PlanTuningMode::OnFirstUse && plan.origin == PlanOrigin::Heuristic)
    if (std::optional<support::Status> tuned = detail::tuneOnFirstUse(p)) return *tuned;
  return detail::launchPagedAttentionPlan(p, plan);
}

}  // namespace attnjit::ops
