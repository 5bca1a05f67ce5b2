// reduce_segments as tile IR. Program (t, y) handles query heads
// [y·H, (y + 1)·H) of token t. Two passes over the segments: the first takes the
// maximum M of m_s, kSegmentChunk segments per load, and the run of segments
// that saw a key; the second accumulates w_s·acc_s and w_s·l_s with
// w_s = exp2(m_s - M) over that run. A segment without keys has m_s = -inf and
// weight 0, so leaving it out changes nothing. Rows
// of heads >= Hq are masked (their M is -inf; the guard keeps exp2's argument
// finite so no NaN is computed even there).
#include "compiler/kernels/ReduceSegments.h"

#include <algorithm>
#include <limits>
#include <numbers>

#include "compiler/kernels/Broadcasts.h"
#include "compiler/kernels/ConfigChecks.h"
#include "compiler/kernels/MlaDecode.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "ir/Builder.h"
#include "ir/KernelAttributes.h"

namespace attnjit::compiler {

using ir::Builder;
using ir::CmpPredicate;
using ir::Opcode;
using ir::ScalarKind;
using support::Status;
using ir::Type;
using ir::Value;

namespace {

// Segments whose maxima pass 1 reads with one load.
constexpr int64_t kSegmentChunk = 64;

class ReduceSegmentsBuilder {
 public:
  ReduceSegmentsBuilder(Builder& b, const ReduceSegmentsConfig& config) : b_(b), config_(config) {}

  void declareParameters(ir::Kernel& kernel) {
    ir::Attributes aligned;
    aligned.set("align", int64_t{16});
    ir::Attributes rowStride;
    if (config_.headSize % 8 == 0) rowStride.set("divisibility", int64_t{8});
    const Type f32Pointer = Type::pointer(ScalarKind::F32);
    out_ = kernel.addParameter(Type::pointer(config_.outputFp8 ? ScalarKind::F8E4M3 : config_.dtype), "out", aligned);
    segmOutput_ = kernel.addParameter(f32Pointer, "segm_output", aligned);
    segmMax_ = kernel.addParameter(f32Pointer, "segm_max", aligned);
    segmExpsum_ = kernel.addParameter(f32Pointer, "segm_expsum", aligned);
    if (config_.outputLse) lse_ = kernel.addParameter(f32Pointer, "lse");
    if (config_.outputFp8) outputScale_ = kernel.addParameter(f32Pointer, "output_scale");
    numSegments_ = kernel.addParameter(Type::scalar(ScalarKind::I32), "num_segments");
    const Type i64 = Type::scalar(ScalarKind::I64);
    oStrideToken_ = kernel.addParameter(i64, "o_stride_token", rowStride);
    oStrideHead_ = kernel.addParameter(i64, "o_stride_head", rowStride);
    if (config_.outputLse) lseStrideHead_ = kernel.addParameter(i64, "lse_stride_head");
    if (config_.outputLse && config_.lseTokenStride) lseStrideToken_ = kernel.addParameter(i64, "lse_stride_token");
  }

  void build() {
    const ScalarKind I32 = ScalarKind::I32, I64 = ScalarKind::I64, F32 = ScalarKind::F32;
    const int64_t H = config_.headsPerProgram(), D = config_.headSizePadded();
    const double negInf = -std::numeric_limits<double>::infinity();
    Value* token = b_.programId(0, "token");
    Value* headBlock = b_.programId(1, "head_block");
    Value* heads = b_.constexprValue("HEADS_PER_PROGRAM", I32, "heads_per_program");
    Value* head = b_.add(b_.splat(b_.mul(headBlock, heads), {H}), b_.arange(0, H), "head");
    Value* numQueryHeads = b_.constexprValue("NUM_QUERY_HEADS", I32, "num_query_heads");
    Value* headMask = b_.cmp(CmpPredicate::Lt, head, b_.splat(numQueryHeads, {H}), "head_mask");
    Value* offsD = b_.arange(0, D, "offs_d");
    Value* headSize = b_.constexprValue("HEAD_SIZE", I32, "head_size");
    Value* dimMask = b_.cmp(CmpPredicate::Lt, offsD, b_.splat(headSize, {D}), "dim_mask");
    Value* mask = b_.andOp(asColumn(headMask, D), asRow(dimMask, H), "mask");
    Value* token64 = b_.cast(token, I64, "token_i64");
    Value* head64 = b_.cast(head, I64, "head_i64");
    Value* offsD64 = b_.cast(offsD, I64, "offs_d_i64");
    Value* numSegments64 = b_.cast(numSegments_, I64, "num_segments_i64");
    // First scratch row of each head: (token·Hq + head)·num_segments.
    Value* firstRow = b_.mul(b_.add(b_.splat(b_.mul(token64, b_.cast(numQueryHeads, I64)), {H}), head64),
                             b_.splat(numSegments64, {H}), "first_segment_row");
    const Type rowF32 = Type::tile({H}, Type::scalar(F32));
    Value* negInfRow = b_.constFloat(negInf, rowF32, "neg_inf_row");
    Value* zero = b_.constInt(0, Type::scalar(I32));

    // Pass 1: the overall maximum, and the range of segments that saw a key,
    // kSegmentChunk segments per load (one load for the op's plans): a loop
    // of one dependent load per segment made a decode batch with many empty
    // segments (a plain call's fill rule) wait for each in turn.
    const int64_t S = kSegmentChunk;
    Value* chunkStep = b_.i32(S);
    auto maxLoop = b_.beginFor(zero, numSegments_, chunkStep, {negInfRow, numSegments_, zero}, "segment_chunk",
                               {"m", "first_keyed", "end_keyed"});
    Value* segment = b_.add(b_.splat(maxLoop.inductionVar, {S}), b_.arange(0, S), "segment");
    Value* segmentMask = b_.cmp(CmpPredicate::Lt, segment, b_.splat(numSegments_, {S}), "segment_mask");
    Value* chunkMask = b_.andOp(asColumn(segmentMask, H), asRow(headMask, S), "chunk_mask");
    Value* chunkRow = b_.add(asRow(firstRow, S), asColumn(b_.cast(segment, I64), H), "chunk_segment_row");
    const Type chunkF32 = Type::tile({S, H}, Type::scalar(F32));
    Value* chunkMax = b_.load(b_.addPtr(b_.splat(segmMax_, {S, H}), chunkRow), chunkMask,
                              b_.constFloat(negInf, chunkF32), "chunk_segment_max");
    Value* mChunk = b_.max(maxLoop.iterArgs[0], b_.reduce(Opcode::ReduceMax, chunkMax, 0), "m_chunk");
    // A segment saw a key iff some head's maximum is finite (an empty one
    // reports -inf for every head); the keyed segments of a sequence are one
    // run, and the others would only add exp2(-inf) = 0 weights.
    Value* keyed = b_.cmp(CmpPredicate::Gt, chunkMax, b_.constFloat(negInf, chunkF32), "segment_keyed");
    Value* segment2d = asColumn(segment, H);
    const Type chunkI32 = Type::tile({S, H}, Type::scalar(I32));
    Value* firstKeyed = b_.reduce(
        Opcode::ReduceMin,
        b_.reduce(Opcode::ReduceMin, b_.select(keyed, segment2d, b_.splat(numSegments_, {S, H})), 0), 0);
    Value* endKeyed = b_.reduce(
        Opcode::ReduceMax,
        b_.reduce(Opcode::ReduceMax,
                  b_.select(keyed, b_.add(segment2d, b_.constInt(1, chunkI32)), b_.constInt(0, chunkI32)), 0),
        0);
    std::vector<Value*> maxResult =
        b_.endFor({mChunk, b_.min(maxLoop.iterArgs[1], firstKeyed), b_.max(maxLoop.iterArgs[2], endKeyed)},
                  {"m_overall", "first_keyed_segment", "end_keyed_segment"});
    // Rows without any key (masked heads only) keep -inf: use 0 so exp2 sees -inf - 0.
    Value* mOverall = b_.select(b_.cmp(CmpPredicate::Gt, maxResult[0], negInfRow), maxResult[0],
                                b_.constFloat(0.0, rowF32), "m_safe");
    // No keyed segment: first = num_segments, end = 0, and pass 2 runs no round.
    Value* sumEnd = maxResult[2];
    Value* sumStart = b_.min(maxResult[1], sumEnd, "sum_start");

    // Pass 2: weighted sums, a round of R segments per iteration. Their loads
    // come first and depend on nothing the round adds, so the round waits for
    // memory once, not once per segment (one CTA per 16 heads of a decode
    // token walks all its segments); segments past the run load as weight 0
    // and add exactly nothing. The adds keep the index order.
    const int64_t R = config_.roundSegments();
    const Type tileF32 = Type::tile({H, D}, Type::scalar(F32));
    auto sumLoop = b_.beginFor(sumStart, sumEnd, b_.i32(R), {b_.constFloat(0.0, rowF32), b_.constFloat(0.0, tileF32)},
                               "segment_round", {"l", "acc"});
    struct Loaded {
      Value *max, *sum, *output;
    };
    std::vector<Loaded> round;
    for (int64_t r = 0; r < R; ++r) {
      const std::string at = R == 1 ? "" : "_" + std::to_string(r);
      Value* segmentIndex = r == 0 ? sumLoop.inductionVar : b_.add(sumLoop.inductionVar, b_.i32(r));
      Value* inRun = b_.splat(b_.cmp(CmpPredicate::Lt, segmentIndex, sumEnd), {H}, "in_run" + at);
      Value* rowMask = r == 0 ? headMask : b_.andOp(headMask, inRun, "segment_head_mask" + at);
      Value* elementMask = r == 0 ? mask : b_.andOp(mask, asColumn(inRun, D), "segment_mask" + at);
      Value* row2 = b_.add(firstRow, b_.splat(b_.cast(segmentIndex, I64), {H}), "segment_row" + at);
      Value* outputRow = b_.mul(row2, b_.splat(b_.i64(D), {H}));
      round.push_back(
          {b_.load(b_.addPtr(b_.splat(segmMax_, {H}), row2), rowMask, negInfRow, "segment_max" + at),
           b_.load(b_.addPtr(b_.splat(segmExpsum_, {H}), row2), rowMask, b_.constFloat(0.0, rowF32),
                   "segment_sum" + at),
           b_.load(b_.addPtr(b_.splat(segmOutput_, {H, D}), b_.add(asColumn(outputRow, D), asRow(offsD64, H))),
                   elementMask, b_.constFloat(0.0, tileF32), "segment_output" + at)});
    }
    Value* lNew = sumLoop.iterArgs[0];
    Value* accNew = sumLoop.iterArgs[1];
    for (int64_t r = 0; r < R; ++r) {
      const std::string at = R == 1 ? "" : "_" + std::to_string(r);
      Value* weight = b_.unary(Opcode::Exp2, b_.sub(round[r].max, mOverall), "weight" + at);
      lNew = b_.add(lNew, b_.mul(weight, round[r].sum), "l_new" + at);
      accNew = b_.add(accNew, b_.mul(asColumn(weight, D), round[r].output), "acc_new" + at);
    }
    std::vector<Value*> sums = b_.endFor({lNew, accNew}, {"l_final", "acc_final"});

    // A row no segment saw a key for (an empty MLA decode sequence) has l = 0 and
    // acc = 0: its output is 0 (and its LSE -inf), not 0/0.
    Value* lSafe = b_.select(b_.cmp(CmpPredicate::Gt, sums[0], b_.constFloat(0.0, rowF32)), sums[0],
                             b_.constFloat(1.0, rowF32), "l_safe");
    // One division per row, a multiply per element (a rounded division is a
    // dozen SASS instructions).
    // fp8 output divides by output_scale: its reciprocal joins the row factor.
    Value* rowNumerator = outputScale_ ? b_.splat(b_.div(b_.f32(1.0), b_.load(outputScale_, nullptr, nullptr,
                                                                                  "output_scale_value"),
                                                         "inv_output_scale"),
                                                  {H})
                                       : b_.constFloat(1.0, rowF32);
    Value* invL = b_.div(rowNumerator, lSafe, outputScale_ ? "out_row_factor" : "inv_l");
    Value* normalized = b_.mul(sums[1], asColumn(invL, D), "out_f32");
    const ScalarKind outKind = config_.outputFp8 ? ScalarKind::F8E4M3 : config_.dtype;
    Value* outTile = outKind == F32 ? normalized : b_.cast(normalized, outKind, "out_tile");
    Value* oRow = b_.add(b_.splat(b_.mul(token64, oStrideToken_), {H}), b_.mul(head64, b_.splat(oStrideHead_, {H})),
                         "o_row");
    b_.store(b_.addPtr(b_.splat(out_, {H, D}), b_.add(asColumn(oRow, D), asRow(offsD64, H)), "o_ptrs"), outTile, mask);
    if (lse_) {
      Value* lseLog2 = b_.add(mOverall, b_.unary(Opcode::Log2, sums[0]), "lse_log2");
      Value* lseValue = b_.mul(lseLog2, b_.constFloat(std::numbers::ln2, rowF32), "lse");
      Value* tokenOffset = lseStrideToken_ ? b_.mul(token64, lseStrideToken_) : token64;
      Value* lseOffset =
          b_.add(b_.mul(head64, b_.splat(lseStrideHead_, {H})), b_.splat(tokenOffset, {H}), "lse_offset");
      b_.store(b_.addPtr(b_.splat(lse_, {H}), lseOffset, "lse_ptrs"), lseValue, headMask);
    }
  }

 private:
  Value* asColumn(Value* vec, int64_t cols) { return broadcastAsColumn(b_, vec, cols); }
  Value* asRow(Value* vec, int64_t rows) { return broadcastAsRow(b_, vec, rows); }

  Builder& b_;
  const ReduceSegmentsConfig& config_;
  Value *out_ = nullptr, *segmOutput_ = nullptr, *segmMax_ = nullptr, *segmExpsum_ = nullptr, *lse_ = nullptr;
  Value *numSegments_ = nullptr, *oStrideToken_ = nullptr, *oStrideHead_ = nullptr, *lseStrideHead_ = nullptr;
  Value *lseStrideToken_ = nullptr, *outputScale_ = nullptr;
};

}  // namespace

int ReduceSegmentsConfig::headSizePadded() const { return nextPowerOfTwo(headSize); }

int ReduceSegmentsConfig::headsPerProgram() const {
  return programHeads > 0 ? programHeads : std::min(nextPowerOfTwo(numQueryHeads), 16);
}

int ReduceSegmentsConfig::roundSegments() const {
  if (segmentsPerRound > 0) return segmentsPerRound;
  const int64_t perThread = std::max<int64_t>(1, int64_t{headsPerProgram()} * headSizePadded() / (32 * numWarps));
  return static_cast<int>(std::clamp<int64_t>(128 / perThread, 1, 8));
}

std::string ReduceSegmentsConfig::kernelName() const {
  std::string name = std::string("reduce_segments_") + ir::scalarName(dtype) + "_h" + std::to_string(numQueryHeads) +
                     "_d" + std::to_string(headSize);
  if (outputLse) name += lseTokenStride ? "_lse_strided" : "_lse";
  if (outputFp8) name += "_outfp8";
  if (numWarps != ReduceSegmentsConfig{}.numWarps) name += "_w" + std::to_string(numWarps);
  if (segmentsPerRound != 0) name += "_r" + std::to_string(segmentsPerRound);
  if (programHeads != 0) name += "_hp" + std::to_string(programHeads);
  return name;
}

support::Status ReduceSegmentsConfig::validate() const {
  if (support::Status s = checkIoDtype(dtype); !s) return s;
  if (numQueryHeads < 1 || numQueryHeads > kMaxAttentionHeads)
    return configError("num_query_heads (" + std::to_string(numQueryHeads) + ") must be between 1 and " +
                       std::to_string(kMaxAttentionHeads));
  if (headSize < 1 || headSize > kMaxHeadSize)
    return configError(headSizeOutOfRange("head_size", headSize));
  if (!isPowerOfTwo(numWarps) || numWarps > 16)
    return configError("num_warps (" + std::to_string(numWarps) + ") must be a power of two between 1 and 16");
  if (segmentsPerRound < 0 || segmentsPerRound > 16)
    return configError("segments_per_round (" + std::to_string(segmentsPerRound) +
                       ") must be between 0 (chosen by the kernel) and 16");
  if (programHeads != 0 && (!isPowerOfTwo(programHeads) || programHeads > 16))
    return configError("heads_per_program (" + std::to_string(programHeads) +
                       ") must be 0 (chosen by the kernel) or a power of two up to 16");
  if (lseTokenStride && !outputLse)
    return configError("lse_token_stride describes the LSE output: it needs output_lse: true");
  return support::Status::ok();
}

ReduceSegmentsConfig reduceSegmentsFor(const UnifiedAttentionConfig& config) {
  ReduceSegmentsConfig reduce;
  reduce.dtype = config.dtype;
  reduce.numQueryHeads = config.numQueryHeads;
  reduce.headSize = config.effectiveValueHeadSize();  // the scratch and the output are V-sized
  reduce.outputLse = config.outputLse;
  reduce.outputFp8 = config.outputFp8;
  return reduce;
}

ReduceSegmentsConfig reduceSegmentsFor(const MlaDecodeConfig& config) {
  ReduceSegmentsConfig reduce;
  reduce.dtype = config.dtype;
  reduce.numQueryHeads = config.numHeads;
  reduce.headSize = config.kvLoraRank;  // V is the latent row's first kv_lora_rank values
  reduce.outputLse = config.outputLse;
  reduce.lseTokenStride = config.outputLse;  // lse [B, H]: the batch stride is a parameter too
  return reduce;
}

support::Expected<std::unique_ptr<ir::Kernel>> buildReduceSegments(const ReduceSegmentsConfig& config) {
  if (support::Status s = config.validate(); !s) return s;
  auto kernel = std::make_unique<ir::Kernel>(config.kernelName());
  kernel->docLines().push_back(
      "Split-KV stage 2: combine per-segment partial outputs by their maxima and sums; "
      "grid = (num_tokens (MLA decode: num_seqs), ceil(Hq / HEADS_PER_PROGRAM)).");
  ir::setKernelAttribute(*kernel, ir::KernelAttribute::NumWarps, config.numWarps);
  auto& cx = kernel->constexprs();
  cx.push_back({"HEADS_PER_PROGRAM", int64_t{config.headsPerProgram()}});
  cx.push_back({"NUM_QUERY_HEADS", int64_t{config.numQueryHeads}});
  cx.push_back({"HEAD_SIZE", int64_t{config.headSize}});
  cx.push_back({"HEAD_SIZE_PADDED", int64_t{config.headSizePadded()}});
  Builder builder(*kernel);
  ReduceSegmentsBuilder reducer(builder, config);
  reducer.declareParameters(*kernel);
  reducer.build();
  if (support::Status s = builder.finish(); !s) return s;
  return kernel;
}

ReduceSegmentsConfig reduceSegmentsForLaunch(ReduceSegmentsConfig config, int64_t numTokens, int smCount) {
  if (config.programHeads != 0 || smCount < 1) return config;
  // bf16, 32 heads, D = 128, 32 segments (H100, docs/perf-log.md 2026-12-07):
  // one token 0.0099 ms with 16 heads a program (2 programs), 0.0068 with 1
  // (32); 64 tokens 0.0134 with 16 (128 programs), 0.0107 with 4 (512), 0.0175
  // with 1 (2,048).
  const int autoHeads = config.headsPerProgram();
  const int64_t enough = 2 * int64_t{smCount};
  for (int heads : {autoHeads, 4, 1}) {
    if (heads > autoHeads) continue;
    const int64_t programs = numTokens * ((config.numQueryHeads + heads - 1) / heads);
    if (programs >= enough || heads == 1) {
      config.programHeads = heads == autoHeads ? 0 : heads;
      return config;
    }
  }
  return config;
}

int64_t reduceSegmentsGridY(const ReduceSegmentsConfig& config) {
  const int perProgram = config.headsPerProgram();
  return (config.numQueryHeads + perProgram - 1) / perProgram;
}

}  // namespace attnjit::compiler
