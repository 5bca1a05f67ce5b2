// The op API's host-side checks and plans on hostile parameters, for fuzz_op_params and
// fuzz_shape (fuzz/FuzzOps.cpp, fuzz/FuzzShape.cpp) and the regression test that replays
// their saved inputs (tests/test_fuzz_regressions.cpp).
//
// fuzzOpParams reads a parameter struct of one op from the bytes, each integer drawn from
// the extremes (0, ±1, INT32/INT64 limits, powers of two and their neighbours) as often as
// from the bytes themselves, and runs the op's validator and plan functions, never a launch.
// Properties, for every input:
//  - no signal (ASan and UBSan report overflow, division by zero, out-of-bounds);
//  - a rejection carries a message, shorter than 4 KiB;
//  - an accepted call plans a launch CUDA can run (or none, for an empty batch): a valid
//    kernel configuration, grid extents within CUDA's limits (x < 2^31, y and z < 2^16), 1 to the op's maximum of
//    split-KV segments;
//  - the workspace functions return a size or an error, never wrap.
//
// fuzzShapeArguments reads newline-separated `--shape KEY=VALUE` assignments. Properties:
// errors stay short whatever the input length; an accepted batch prints (BatchShape::str) to
// assignments that parse back to the same batch; its plan for a fixed decode variant holds
// the launch properties above.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "compiler/kernels/ReduceSegments.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "compiler/ops/CompanionOps.h"
#include "compiler/ops/MlaDecodeOp.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/spec/BatchShape.h"
#include "fuzz/FuzzBodies.h"

namespace attnjit::fuzz {

// Draws values from fuzz bytes; past the end every draw is 0.
class ParamReader {
 public:
  explicit ParamReader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}

  std::uint8_t byte() { return at_ < bytes_.size() ? bytes_[at_++] : 0; }
  std::uint64_t raw64() {
    std::uint64_t value = 0;
    for (int i = 0; i < 8; ++i) value = value << 8 | byte();
    return value;
  }
  bool flag() { return byte() & 1; }

  // An integer of the type's range: one of the interesting values, or the next bytes.
  template <typename Int>
  Int integer() {
    const std::uint8_t choice = byte();
    const std::int64_t lo = std::numeric_limits<Int>::min(), hi = std::numeric_limits<Int>::max();
    std::int64_t value = 0;
    switch (choice % 16) {
      case 0: value = 0; break;
      case 1: value = 1; break;
      case 2: value = -1; break;
      case 3: value = hi; break;
      case 4: value = lo; break;
      case 5: value = std::int64_t{1} << (byte() % 63); break;  // a power of two
      case 6: value = (std::int64_t{1} << (byte() % 63)) + 1; break;
      case 7: value = (std::int64_t{1} << (byte() % 63)) - 1; break;
      case 8: value = byte(); break;                            // small
      case 9: value = 16 * (byte() % 17); break;                // plausible sizes
      case 10: value = std::int64_t{byte()} << 8 | byte(); break;
      default: value = static_cast<std::int64_t>(raw64()); break;
    }
    if (value < lo || value > hi) value = static_cast<Int>(static_cast<std::uint64_t>(value));
    return static_cast<Int>(value);
  }
  // A pointer: null, aligned, misaligned or arbitrary.
  std::uint64_t pointer() {
    switch (byte() % 4) {
      case 0: return 0;
      case 1: return (raw64() & 0xFFFFFFFFFFF0ull) | 0x10000ull;
      case 2: return raw64() | 1;
      default: return raw64();
    }
  }
  double real() {
    switch (byte() % 6) {
      case 0: return 0;
      case 1: return std::numeric_limits<double>::quiet_NaN();
      case 2: return std::numeric_limits<double>::infinity();
      case 3: return -1;
      case 4: return byte();
      default: {
        const std::uint64_t bits = raw64();
        double value;
        std::memcpy(&value, &bits, sizeof value);
        return value;
      }
    }
  }
  ir::ScalarKind scalarKind() { return static_cast<ir::ScalarKind>(byte() % (int(ir::ScalarKind::F8E5M2) + 1)); }
  compiler::KvCacheFormat cacheFormat() {
    return static_cast<compiler::KvCacheFormat>(byte() % (int(compiler::KvCacheFormat::Int4PerTokenHead) + 1));
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

inline constexpr std::int64_t kMaxGridX = std::numeric_limits<std::int32_t>::max();
inline constexpr std::int64_t kMaxGridYz = 65535;
inline constexpr std::size_t kMaxErrorMessageBytes = 4096;

inline std::string checkRejection(const support::Status& status, const char* op) {
  if (status.diagnostic().message.empty()) return std::string(op) + ": a rejection without a message";
  if (status.diagnostic().message.size() > kMaxErrorMessageBytes)
    return std::string(op) + ": an error message of " + std::to_string(status.diagnostic().message.size()) +
           " bytes: " + status.diagnostic().message.substr(0, 200);
  return "";
}

// The launch of an accepted paged-attention call: the kernel, its grid and its split.
inline std::string checkPagedAttentionPlan(const ops::PagedAttentionParams& params) {
  const compiler::UnifiedAttentionConfig config = ops::selectPagedAttentionVariant(params);
  if (support::Status valid = config.validate(); !valid)
    return "accepted call selects an invalid kernel: " + valid.diagnostic().message;
  const std::int64_t gridX = compiler::unifiedAttentionGridX(config, params.numSeqs, params.numTokens);
  // An empty batch launches nothing.
  if ((params.numSeqs > 0 && gridX < 1) || gridX > kMaxGridX) return "accepted call plans grid x = " + std::to_string(gridX);
  if (params.numKvHeads > kMaxGridYz) return "accepted call plans grid y = " + std::to_string(params.numKvHeads);
  const ops::SplitKvPlan split = ops::pagedAttentionSplitPlan(params);
  if (split.numSegments < 1 || split.numSegments > ops::kSplitKvMaxSegments)
    return "accepted call plans " + std::to_string(split.numSegments) + " segments";
  // Segments sized by max_seq_len have a positive length; without it (0) the
  // kernel cuts each sequence itself, into pieces of at least -segmentTiles tiles.
  if (split.numSegments > 1 && (params.maxSeqLen > 0 ? split.segmentTiles < 1 : split.segmentTiles > -1))
    return "a split plan with " + std::to_string(split.segmentTiles) + " tiles per segment for max_seq_len " +
           std::to_string(params.maxSeqLen);
  if (ops::pagedAttentionCtasPerSm(params) < 0) return "a negative CTAs-per-SM cap";
  return "";
}

inline ops::PagedAttentionParams readPagedAttentionParams(ParamReader& in) {
  ops::PagedAttentionParams p;
  p.dtype = in.scalarKind();
  p.numQueryHeads = in.integer<int>();
  p.numKvHeads = in.integer<int>();
  p.headSize = in.integer<int>();
  p.valueHeadSize = in.flag() ? 0 : in.integer<int>();
  p.blockSize = in.integer<int>();
  p.causal = in.flag();
  p.kvCacheFormat = in.cacheFormat();
  p.slidingWindow = in.flag() ? 0 : in.integer<int>();
  p.softcap = in.flag() ? 0 : in.real();
  p.batchInvariant = in.flag();
  p.checkBounds = in.flag();
  p.numBlocks = in.integer<int>();
  p.numSeqs = in.integer<int>();
  p.numTokens = in.integer<std::int64_t>();
  p.maxQueryLen = in.integer<int>();
  p.maxSeqLen = in.integer<int>();
  p.minSeqLen = in.integer<int>();
  p.numSms = in.flag() ? 132 : in.integer<int>();
  p.scale = static_cast<float>(in.real());
  p.out = in.pointer(), p.q = in.pointer(), p.kvCache = in.pointer(), p.blockTables = in.pointer();
  p.seqLens = in.pointer(), p.cuSeqlensQ = in.pointer();
  p.kScale = in.pointer(), p.vScale = in.pointer();
  if (in.flag()) p.causalFlags = in.pointer();
  if (in.flag()) p.alibiSlopes = in.pointer();
  if (in.flag()) p.sinks = in.pointer();
  p.alibiSqrt = in.flag();
  if (in.flag()) p.outputScale = in.pointer();
  if (in.flag()) p.lse = in.pointer();
  p.lseStrideHead = in.integer<std::int64_t>();
  p.workspace = in.pointer();
  p.workspaceBytes = static_cast<std::uint64_t>(in.integer<std::int64_t>());
  p.qStrideToken = in.integer<std::int64_t>(), p.qStrideHead = in.integer<std::int64_t>();
  p.oStrideToken = in.integer<std::int64_t>(), p.oStrideHead = in.integer<std::int64_t>();
  p.blockTableStride = in.integer<std::int64_t>();
  p.kvStrideBlock = in.integer<std::int64_t>(), p.kvStrideKv = in.integer<std::int64_t>();
  p.kvStrideToken = in.integer<std::int64_t>(), p.kvStrideHead = in.integer<std::int64_t>();
  p.attentionChunkSize = in.flag() ? 0 : in.integer<int>();
  if (in.flag()) p.mmPrefixRange = in.pointer();
  p.mmPrefixRanges = in.flag() ? 0 : in.integer<int>();
  if (in.flag()) p.qqBias = in.pointer();
  p.qqBiasStride = in.flag() ? 0 : in.integer<std::int64_t>();
  p.fp32Precision = in.flag() ? compiler::Fp32Precision::Ieee : compiler::Fp32Precision::Tf32;
  p.kvScaleLayout = in.flag() ? compiler::KvScaleLayout::Separate : compiler::KvScaleLayout::Inline;
  if (in.flag()) p.kScaleCache = in.pointer(), p.vScaleCache = in.pointer();
  p.scaleStrideBlock = in.integer<std::int64_t>(), p.scaleStrideToken = in.integer<std::int64_t>();
  p.scaleStrideHead = in.integer<std::int64_t>();
  return p;
}

// A well-formed decode call (aligned fake addresses: bf16, 32/8 heads, D = 128, 64
// sequences of up to 4096 keys) with a few fields replaced by drawn values: random
// structs are almost never accepted, so this is what reaches the plans behind the checks.
inline ops::PagedAttentionParams mutatedPagedAttentionCall(ParamReader& in) {
  ops::PagedAttentionParams p;
  p.numQueryHeads = 32, p.numKvHeads = 8, p.headSize = 128, p.blockSize = 16;
  p.numSeqs = 64, p.numTokens = 64, p.maxQueryLen = 1, p.maxSeqLen = 4096, p.minSeqLen = 1000;
  p.numSms = 132, p.scale = 0.088f;
  p.out = 0x10000, p.q = 0x20000, p.kvCache = 0x30000, p.blockTables = 0x40000, p.seqLens = 0x50000;
  p.cuSeqlensQ = 0x60000, p.workspace = 0x70000, p.workspaceBytes = 1u << 26;
  p.qStrideToken = p.oStrideToken = 32 * 128, p.qStrideHead = p.oStrideHead = 128;
  p.blockTableStride = 256, p.kvStrideBlock = 2 * 16 * 8 * 128, p.kvStrideKv = 16 * 8 * 128;
  p.kvStrideToken = 8 * 128, p.kvStrideHead = 128;
  const int mutations = 1 + in.byte() % 4;
  for (int m = 0; m < mutations; ++m) {
    switch (in.byte() % 24) {
      case 0: p.numQueryHeads = in.integer<int>(); break;
      case 1: p.numKvHeads = in.integer<int>(); break;
      case 2: p.headSize = in.integer<int>(); break;
      case 3: p.valueHeadSize = in.integer<int>(); break;
      case 4: p.blockSize = in.integer<int>(); break;
      case 5: p.numSeqs = in.integer<int>(); break;
      case 6: p.numTokens = in.integer<std::int64_t>(); break;
      case 7: p.maxQueryLen = in.integer<int>(); break;
      case 8: p.maxSeqLen = in.integer<int>(); break;
      case 9: p.minSeqLen = in.integer<int>(); break;
      case 10: p.numSms = in.integer<int>(); break;
      case 11: p.slidingWindow = in.integer<int>(); break;
      case 12: p.softcap = in.real(); break;
      case 13: p.kvCacheFormat = in.cacheFormat(), p.kScale = 0x80000, p.vScale = 0x80010; break;
      case 14: p.dtype = in.scalarKind(); break;
      case 15: p.workspaceBytes = static_cast<std::uint64_t>(in.integer<std::int64_t>()); break;
      case 16: p.qStrideToken = in.integer<std::int64_t>(); break;
      case 17: p.oStrideHead = in.integer<std::int64_t>(); break;
      case 18: p.blockTableStride = in.integer<std::int64_t>(); break;
      case 19: p.kvStrideBlock = in.integer<std::int64_t>(); break;
      case 20: p.kvStrideToken = in.integer<std::int64_t>(); break;
      case 21: p.lse = 0x90000, p.lseStrideHead = in.integer<std::int64_t>(); break;
      case 22: p.batchInvariant = in.flag(), p.causal = in.flag(); break;
      default: p.checkBounds = true, p.numBlocks = in.integer<int>(); break;
    }
  }
  return p;
}

inline std::string fuzzPagedAttention(ParamReader& in, bool& accepted) {
  const ops::PagedAttentionParams p = in.flag() ? mutatedPagedAttentionCall(in) : readPagedAttentionParams(in);
  // The plans are public functions too: they must survive any parameters, valid or not.
  (void)ops::selectPagedAttentionVariant(p);
  (void)ops::pagedAttentionSplitPlan(p);
  (void)ops::pagedAttentionCtasPerSm(p);
  const support::Status status = ops::validatePagedAttention(p);
  if (!status) return checkRejection(status, "validatePagedAttention");
  accepted = true;
  return checkPagedAttentionPlan(p);
}

inline std::string checkMlaDecodeCall(const ops::MlaDecodeParams& p, bool& accepted);

inline ops::MlaDecodeParams mutatedMlaDecodeCall(ParamReader& in) {
  ops::MlaDecodeParams p;
  p.numHeads = 128, p.blockSize = 16, p.numSeqs = 64, p.maxSeqLen = 4096, p.numSms = 132, p.scale = 0.0417f;
  p.out = p.q = p.kvCache = p.blockTables = p.seqLens = 0x10000;
  p.qStrideBatch = 128 * 576, p.qStrideHead = 576, p.oStrideBatch = 128 * 512, p.oStrideHead = 512;
  p.blockTableStride = 256, p.kvStrideBlock = 16 * 576, p.kvStrideToken = 576;
  p.workspace = 0x20000, p.workspaceBytes = 1u << 28;
  const int mutations = 1 + in.byte() % 4;
  for (int m = 0; m < mutations; ++m) {
    switch (in.byte() % 14) {
      case 0: p.numHeads = in.integer<int>(); break;
      case 1: p.kvLoraRank = in.integer<int>(); break;
      case 2: p.ropeDim = in.integer<int>(); break;
      case 3: p.blockSize = in.integer<int>(); break;
      case 4: p.numSeqs = in.integer<int>(); break;
      case 5: p.maxSeqLen = in.integer<int>(); break;
      case 6: p.sumSeqLens = in.integer<std::int64_t>(); break;
      case 7: p.numSms = in.integer<int>(); break;
      case 8: p.workspaceBytes = static_cast<std::uint64_t>(in.integer<std::int64_t>()); break;
      case 9: p.qStrideBatch = in.integer<std::int64_t>(); break;
      case 10: p.kvStrideBlock = in.integer<std::int64_t>(); break;
      case 11: p.splitRule = in.flag() ? ops::MlaSplitRule::Vllm : ops::MlaSplitRule::Balanced; break;
      case 12: p.kvCacheFormat = in.cacheFormat(), p.kvScale = 0x30000; break;
      default: p.lse = 0x40000, p.lseStrideBatch = in.integer<std::int64_t>(), p.lseStrideHead = 1; break;
    }
  }
  return p;
}

inline std::string fuzzMlaDecode(ParamReader& in, bool& accepted) {
  if (in.flag()) return checkMlaDecodeCall(mutatedMlaDecodeCall(in), accepted);
  ops::MlaDecodeParams p;
  p.dtype = in.scalarKind();
  p.kvCacheFormat = in.cacheFormat();
  p.kvLoraRank = in.flag() ? 512 : in.integer<int>();
  p.ropeDim = in.flag() ? 64 : in.integer<int>();
  p.numHeads = in.integer<int>();
  p.blockSize = in.integer<int>();
  p.batchInvariant = in.flag();
  p.splitRule = in.flag() ? ops::MlaSplitRule::Balanced : ops::MlaSplitRule::Vllm;
  p.numSeqs = in.integer<int>();
  p.maxSeqLen = in.integer<int>();
  p.sumSeqLens = in.integer<std::int64_t>();
  p.numSms = in.flag() ? 132 : in.integer<int>();
  p.scale = static_cast<float>(in.real());
  p.out = in.pointer(), p.q = in.pointer(), p.kvCache = in.pointer(), p.blockTables = in.pointer();
  p.seqLens = in.pointer(), p.kvScale = in.pointer();
  if (in.flag()) p.lse = in.pointer();
  p.lseStrideBatch = in.integer<std::int64_t>(), p.lseStrideHead = in.integer<std::int64_t>();
  p.workspace = in.pointer();
  p.workspaceBytes = static_cast<std::uint64_t>(in.integer<std::int64_t>());
  p.qStrideBatch = in.integer<std::int64_t>(), p.qStrideHead = in.integer<std::int64_t>();
  p.oStrideBatch = in.integer<std::int64_t>(), p.oStrideHead = in.integer<std::int64_t>();
  p.blockTableStride = in.integer<std::int64_t>();
  p.kvStrideBlock = in.integer<std::int64_t>(), p.kvStrideToken = in.integer<std::int64_t>();
  return checkMlaDecodeCall(p, accepted);
}

inline std::string checkMlaDecodeCall(const ops::MlaDecodeParams& p, bool& accepted) {
  (void)ops::selectMlaDecodeVariant(p);
  (void)ops::mlaDecodeSplitPlan(p);
  const support::Status status = ops::validateMlaDecode(p);
  if (!status) return checkRejection(status, "validateMlaDecode");
  accepted = true;
  const compiler::MlaDecodeConfig config = ops::selectMlaDecodeVariant(p);
  if (support::Status valid = config.validate(); !valid)
    return "accepted MLA call selects an invalid kernel: " + valid.diagnostic().message;
  const ops::MlaSplitPlan split = ops::mlaDecodeSplitPlan(p);
  if (split.numSegments < 1 || split.numSegments > ops::kMlaMaxSegments)
    return "accepted MLA call plans " + std::to_string(split.numSegments) + " segments";
  if (p.numSeqs > kMaxGridX) return "accepted MLA call plans grid x = " + std::to_string(p.numSeqs);
  return "";
}

inline std::string fuzzCompanionOps(ParamReader& in) {
  std::string violation;
  {
    ops::CacheWriteParams p;
    p.dtype = in.scalarKind();
    p.cacheFormat = in.cacheFormat();
    p.numKvHeads = in.integer<int>();
    p.headSize = in.integer<int>();
    p.valueHeadSize = in.flag() ? 0 : in.integer<int>();
    p.blockSize = in.integer<int>();
    p.checkBounds = in.flag();
    p.numBlocks = in.integer<int>();
    p.numTokens = in.integer<std::int64_t>();
    p.key = in.pointer(), p.value = in.pointer(), p.kvCache = in.pointer(), p.slotMapping = in.pointer();
    p.kScale = in.pointer(), p.vScale = in.pointer();
    p.keyStrideToken = in.integer<std::int64_t>(), p.keyStrideHead = in.integer<std::int64_t>();
    p.valueStrideToken = in.integer<std::int64_t>(), p.valueStrideHead = in.integer<std::int64_t>();
    p.kvStrideBlock = in.integer<std::int64_t>(), p.kvStrideKv = in.integer<std::int64_t>();
    p.kvStrideToken = in.integer<std::int64_t>(), p.kvStrideHead = in.integer<std::int64_t>();
    p.scaleLayout = in.flag() ? compiler::KvScaleLayout::Separate : compiler::KvScaleLayout::Inline;
    if (in.flag()) p.kScaleCache = in.pointer(), p.vScaleCache = in.pointer();
    p.scaleStrideBlock = in.integer<std::int64_t>(), p.scaleStrideToken = in.integer<std::int64_t>();
    p.scaleStrideHead = in.integer<std::int64_t>();
    (void)ops::selectCacheWriteVariant(p);
    if (support::Status s = ops::validateCacheWrite(p); !s) violation = checkRejection(s, "validateCacheWrite");
  }
  if (!violation.empty()) return violation;
  {
    ops::MergeAttnStatesParams p;
    p.dtype = in.scalarKind();
    p.numHeads = in.integer<int>();
    p.headSize = in.integer<int>();
    p.numTokens = in.integer<std::int64_t>();
    p.output = in.pointer(), p.outputLse = in.pointer(), p.prefixOutput = in.pointer();
    p.prefixLse = in.pointer(), p.suffixOutput = in.pointer(), p.suffixLse = in.pointer();
    p.outputStrideToken = in.integer<std::int64_t>(), p.outputStrideHead = in.integer<std::int64_t>();
    p.prefixStrideToken = in.integer<std::int64_t>(), p.prefixStrideHead = in.integer<std::int64_t>();
    p.suffixStrideToken = in.integer<std::int64_t>(), p.suffixStrideHead = in.integer<std::int64_t>();
    (void)ops::selectMergeAttnStatesVariant(p);
    if (support::Status s = ops::validateMergeAttnStates(p); !s) {
      violation = checkRejection(s, "validateMergeAttnStates");
    } else if (const std::int64_t x =
                   compiler::mergeAttnStatesGridX(ops::selectMergeAttnStatesVariant(p), p.numTokens);
               (p.numTokens > 0 && x < 1) || x > kMaxGridX || p.numHeads > kMaxGridYz) {
      violation = "accepted merge_attn_states call plans grid " + std::to_string(x) + " x " +
                  std::to_string(p.numHeads);
    }
  }
  if (!violation.empty()) return violation;
  {
    ops::MergePartialsParams p;
    p.dtype = in.scalarKind();
    p.numHeads = in.integer<int>();
    p.headSize = in.integer<int>();
    p.numPartials = in.integer<int>();
    p.numTokens = in.integer<std::int64_t>();
    p.output = in.pointer(), p.outputLse = in.pointer(), p.partialOutputs = in.pointer();
    p.partialLses = in.pointer();
    p.outputStrideToken = in.integer<std::int64_t>(), p.outputStrideHead = in.integer<std::int64_t>();
    p.partialStridePartial = in.integer<std::int64_t>(), p.partialStrideToken = in.integer<std::int64_t>();
    p.partialStrideHead = in.integer<std::int64_t>(), p.lseStridePartial = in.integer<std::int64_t>();
    (void)ops::selectMergePartialsVariant(p);
    if (support::Status s = ops::validateMergePartials(p); !s) {
      violation = checkRejection(s, "validateMergePartials");
    } else if (const std::int64_t x =
                   compiler::mergePartialsGridX(ops::selectMergePartialsVariant(p), p.numTokens);
               (p.numTokens > 0 && x < 1) || x > kMaxGridX || p.numHeads > kMaxGridYz) {
      violation = "accepted merge_partials call plans grid " + std::to_string(x) + " x " + std::to_string(p.numHeads);
    }
  }
  if (!violation.empty()) return violation;
  {
    ops::MlaCacheWriteParams p;
    p.dtype = in.scalarKind();
    p.cacheFormat = in.cacheFormat();
    p.kvLoraRank = in.integer<int>();
    p.ropeDim = in.integer<int>();
    p.blockSize = in.integer<int>();
    p.numTokens = in.integer<std::int64_t>();
    p.kvC = in.pointer(), p.kPe = in.pointer(), p.kvCache = in.pointer(), p.slotMapping = in.pointer();
    p.scale = in.pointer();
    p.kvCStrideToken = in.integer<std::int64_t>(), p.kPeStrideToken = in.integer<std::int64_t>();
    p.cacheStrideBlock = in.integer<std::int64_t>(), p.cacheStrideToken = in.integer<std::int64_t>();
    (void)ops::selectMlaCacheWriteVariant(p);
    if (support::Status s = ops::validateMlaCacheWrite(p); !s) violation = checkRejection(s, "validateMlaCacheWrite");
  }
  return violation;
}

inline std::string fuzzWorkspaceSizes(ParamReader& in) {
  auto paged = ops::pagedAttentionWorkspaceBytes(in.integer<std::int64_t>(), in.integer<int>(),
                                                      in.integer<int>(), in.integer<int>());
  if (!paged) {
    if (std::string v = checkRejection(paged.status(), "pagedAttentionWorkspaceBytes"); !v.empty()) return v;
  } else if (*paged > (std::uint64_t{1} << 62)) {
    return "pagedAttentionWorkspaceBytes returned " + std::to_string(*paged);
  }
  auto mla =
      ops::mlaDecodeWorkspaceBytes(in.integer<int>(), in.integer<int>(), in.integer<int>(), in.integer<int>());
  if (!mla) return checkRejection(mla.status(), "mlaDecodeWorkspaceBytes");
  if (*mla > (std::uint64_t{1} << 62)) return "mlaDecodeWorkspaceBytes returned " + std::to_string(*mla);
  return "";
}

// The first byte picks the op; the rest fill its parameters. `accepted`: a paged-attention
// or MLA validator accepted the call.
inline FuzzOutcome fuzzOpParams(std::span<const std::uint8_t> bytes) {
  FuzzOutcome outcome;
  ParamReader in(bytes);
  switch (in.byte() % 4) {
    case 0: outcome.violation = fuzzPagedAttention(in, outcome.accepted); break;
    case 1: outcome.violation = fuzzMlaDecode(in, outcome.accepted); break;
    case 2: outcome.violation = fuzzCompanionOps(in); break;
    default: outcome.violation = fuzzWorkspaceSizes(in); break;
  }
  return outcome;
}

inline FuzzOutcome fuzzShapeArguments(std::string_view text) {
  FuzzOutcome outcome;
  compiler::BatchShape shape;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string assignment(text.substr(start, end - start));
    start = end + 1;
    if (assignment.empty()) continue;
    if (support::Status set = shape.set(assignment); !set) {
      outcome.violation = checkRejection(set, "BatchShape::set");
      return outcome;
    }
  }
  if (support::Status valid = shape.validate(); !valid) {
    outcome.violation = checkRejection(valid, "BatchShape::validate");
    return outcome;
  }
  outcome.accepted = true;
  // str() is a list of assignments that set() takes back.
  const std::string printed = shape.str();
  compiler::BatchShape reparsed;
  for (std::size_t at = 0; at < printed.size();) {
    std::size_t space = printed.find(' ', at);
    if (space == std::string::npos) space = printed.size();
    if (support::Status set = reparsed.set(printed.substr(at, space - at)); !set) {
      outcome.violation = "printed batch does not parse back: " + set.diagnostic().message;
      return outcome;
    }
    at = space + 1;
  }
  if (reparsed.str() != printed || reparsed.queryLens != shape.queryLens || reparsed.contextLens != shape.contextLens) {
    outcome.violation = "printed batch parses to another: " + printed + " vs " + reparsed.str();
    return outcome;
  }
  // The plan of a decode variant for this batch, as `attnjit plan` makes it.
  compiler::UnifiedAttentionConfig decode;
  decode.dtype = ir::ScalarKind::BF16;
  decode.numQueryHeads = 32;
  decode.numKvHeads = 8;
  decode.headSize = 128;
  decode.blockSize = 16;
  decode.causal = true;
  ops::PagedAttentionParams params = ops::pagedAttentionBatchParams(decode, shape);
  params.numSms = 132;
  outcome.violation = checkPagedAttentionPlan(params);
  return outcome;
}

}  // namespace attnjit::fuzz
