// merge_partials as tile IR. The program for (token block x, head y) walks the
// partials twice with a run-time loop: pass 1 takes the maximum M of the LSEs of
// its BLOCK_TOKENS tokens (contiguous within a partial's [H, T] block; +inf read
// as -inf), pass 2 accumulates w_i = exp(lse_i - M) and w_i · o_i in float32.
//
// Branch-free empty handling, as merge_attn_states: the shift is M, or 0 where M
// is -inf (every partial empty), so exp never sees -inf - (-inf) = NaN; an empty
// partial's weight is exp(-inf) = 0 and its row is masked off the load (no memory
// traffic, and garbage there cannot leak in as 0 · NaN). Tokens whose partials
// are all empty select partial 0's row, loaded under a mask that is false for
// every other token. A NaN LSE makes M NaN (max propagates NaN), hence every
// weight, the output and the LSE NaN.
#include "compiler/kernels/MergePartials.h"

#include <limits>

#include "compiler/kernels/Broadcasts.h"
#include "compiler/kernels/ConfigChecks.h"
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

class MergePartialsBuilder {
 public:
  MergePartialsBuilder(Builder& b, const MergePartialsConfig& config) : b_(b), config_(config) {}

  void declareParameters(ir::Kernel& kernel) {
    ir::Attributes aligned;
    aligned.set("align", int64_t{16});
    // Row strides are multiples of 8 elements whenever the head size is; saying
    // so lets codegen use 16-byte vectors (the launchers check the promise).
    ir::Attributes rowStride;
    if (config_.headSize % 8 == 0) rowStride.set("divisibility", int64_t{8});
    const ScalarKind dt = config_.dtype, f32 = ScalarKind::F32;
    const Type i32 = Type::scalar(ScalarKind::I32), i64 = Type::scalar(ScalarKind::I64);
    out_ = kernel.addParameter(Type::pointer(dt), "output", aligned);
    if (config_.outputLse) outLse_ = kernel.addParameter(Type::pointer(f32), "output_lse", aligned);
    partialOut_ = kernel.addParameter(Type::pointer(dt), "partial_outputs", aligned);
    partialLse_ = kernel.addParameter(Type::pointer(f32), "partial_lses", aligned);
    numPartials_ = kernel.addParameter(i32, "num_partials");
    numTokens_ = kernel.addParameter(i32, "num_tokens");
    oStrideToken_ = kernel.addParameter(i64, "o_stride_token", rowStride);
    oStrideHead_ = kernel.addParameter(i64, "o_stride_head", rowStride);
    pStridePartial_ = kernel.addParameter(i64, "p_stride_partial", rowStride);
    pStrideToken_ = kernel.addParameter(i64, "p_stride_token", rowStride);
    pStrideHead_ = kernel.addParameter(i64, "p_stride_head", rowStride);
    lseStridePartial_ = kernel.addParameter(i64, "lse_stride_partial");
  }

  void build() {
    const int64_t T = config_.blockTokens, D = config_.headSizePadded();
    const ScalarKind I32 = ScalarKind::I32, I64 = ScalarKind::I64, F32 = ScalarKind::F32;
    const double inf = std::numeric_limits<double>::infinity();
    const Type rowF32 = Type::tile({T}, Type::scalar(F32));
    const Type tileF32 = Type::tile({T, D}, Type::scalar(F32));

    Value* tokenBlock = b_.programId(0, "token_block");
    Value* head = b_.programId(1, "head");
    Value* blockTokens = b_.constexprValue("BLOCK_TOKENS", I32, "block_tokens");
    Value* headSize = b_.constexprValue("HEAD_SIZE", I32, "head_size");
    Value* token = b_.add(b_.splat(b_.mul(tokenBlock, blockTokens), {T}), b_.arange(0, T), "token");
    tokenMask_ = b_.cmp(CmpPredicate::Lt, token, b_.splat(numTokens_, {T}), "token_mask");
    Value* offsD = b_.arange(0, D, "offs_d");
    dimMask_ = b_.cmp(CmpPredicate::Lt, offsD, b_.splat(headSize, {D}), "dim_mask");
    Value* head64 = b_.cast(head, I64, "head_i64");
    Value* token64 = b_.cast(token, I64, "token_i64");
    offsD64_ = b_.cast(offsD, I64, "offs_d_i64");
    // Within a partial: LSE h·T + t, output row t·stride_token + h·stride_head.
    lseIndex_ = b_.add(b_.splat(b_.mul(head64, b_.cast(numTokens_, I64)), {T}), token64, "lse_index");
    partialRow_ = b_.add(b_.mul(token64, b_.splat(pStrideToken_, {T})), b_.splat(b_.mul(head64, pStrideHead_), {T}),
                         "partial_row");
    negInfRow_ = b_.constFloat(-inf, rowF32, "neg_inf_row");
    posInfRow_ = b_.constFloat(inf, rowF32, "pos_inf_row");
    Value* zeroRow = b_.constFloat(0.0, rowF32, "zero_row");
    Value* zero = b_.constInt(0, Type::scalar(I32));
    Value* one = b_.constInt(1, Type::scalar(I32));

    // ---- Pass 1: the largest LSE per token. ----
    auto maxLoop = b_.beginFor(zero, numPartials_, one, {negInfRow_}, "partial", {"m"});
    Value* lseForMax = loadLse(maxLoop.inductionVar);
    std::vector<Value*> maxResult = b_.endFor({b_.max(maxLoop.iterArgs[0], lseForMax)}, {"max_lse"});
    Value* allEmpty = b_.cmp(CmpPredicate::Eq, maxResult[0], negInfRow_, "all_empty");
    Value* shift = b_.select(allEmpty, zeroRow, maxResult[0], "shift");

    // ---- Pass 2: Σ w_i and Σ w_i · o_i. ----
    auto sumLoop = b_.beginFor(zero, numPartials_, one, {zeroRow, b_.constFloat(0.0, tileF32, "zero_acc")},
                               "partial", {"weight_sum", "acc"});
    Value* lse = loadLse(sumLoop.inductionVar);
    Value* weight = b_.unary(Opcode::Exp, b_.sub(lse, shift), "weight");
    Value* nonEmpty = b_.cmp(CmpPredicate::Gt, lse, negInfRow_, "non_empty");
    Value* partialOut = loadPartialRows(sumLoop.inductionVar, b_.andOp(tokenMask_, nonEmpty), "partial_out");
    Value* partialF32 = config_.dtype == F32 ? partialOut : b_.cast(partialOut, F32, "partial_out_f32");
    Value* weightSum = b_.add(sumLoop.iterArgs[0], weight, "weight_sum_next");
    Value* acc = b_.add(sumLoop.iterArgs[1], b_.mul(asColumn(weight, D), partialF32), "acc_next");
    std::vector<Value*> sums = b_.endFor({weightSum, acc}, {"weight_sum_final", "acc_final"});

    // One division per row, a multiply per element (a rounded division is a
    // dozen SASS instructions).
    Value* invWeightSum = b_.div(b_.constFloat(1.0, sums[0]->type()), sums[0], "inv_weight_sum");
    Value* merged = b_.mul(sums[1], asColumn(invWeightSum, D), "merged_f32");
    Value* mergedDt = config_.dtype == F32 ? merged : b_.cast(merged, config_.dtype, "merged");
    // Every partial empty: partial 0's row (the load is masked off elsewhere).
    Value* firstRow = loadPartialRows(zero, b_.andOp(tokenMask_, allEmpty), "first_partial_out");
    Value* result = b_.select(asColumn(allEmpty, D), firstRow, mergedDt, "out");
    Value* outRow = b_.add(b_.mul(token64, b_.splat(oStrideToken_, {T})), b_.splat(b_.mul(head64, oStrideHead_), {T}),
                           "o_row");
    Value* outPtrs = b_.addPtr(b_.splat(out_, {T, D}), b_.add(asColumn(outRow, D), asRow(offsD64_, T)), "o_ptrs");
    b_.store(outPtrs, result, rowMask(tokenMask_));

    if (config_.outputLse) {
      Value* logSum = b_.select(allEmpty, negInfRow_, b_.unary(Opcode::Log, sums[0]), "log_weight_sum");
      Value* outLse = b_.add(logSum, shift, "out_lse");
      b_.store(b_.addPtr(b_.splat(outLse_, {T}), lseIndex_, "out_lse_ptrs"), outLse, tokenMask_);
    }
  }

 private:
  // The LSEs of partial `index` for this program's tokens; +inf (no keys) as -inf.
  // Tokens past the end read -inf (they are never stored).
  Value* loadLse(Value* index) {
    const int64_t T = config_.blockTokens;
    const ScalarKind I64 = ScalarKind::I64;
    Value* base = b_.mul(b_.cast(index, I64), lseStridePartial_, "lse_partial_base");
    Value* ptrs = b_.addPtr(b_.splat(partialLse_, {T}), b_.add(b_.splat(base, {T}), lseIndex_), "lse_ptrs");
    Value* raw = b_.load(ptrs, tokenMask_, negInfRow_, "lse_raw");
    return b_.select(b_.cmp(CmpPredicate::Eq, raw, posInfRow_), negInfRow_, raw, "lse");
  }

  // The [BLOCK_TOKENS, D] output rows of partial `index`, read where rowsMask
  // (per token) and the head-size mask hold, 0 elsewhere.
  Value* loadPartialRows(Value* index, Value* rowsMask, const std::string& name) {
    const int64_t T = config_.blockTokens, D = config_.headSizePadded();
    Value* base = b_.mul(b_.cast(index, ScalarKind::I64), pStridePartial_, name + "_base");
    Value* row = b_.add(b_.splat(base, {T}), partialRow_);
    Value* ptrs = b_.addPtr(b_.splat(partialOut_, {T, D}), b_.add(asColumn(row, D), asRow(offsD64_, T)),
                            name + "_ptrs");
    Value* zeroTile = b_.constFloat(0.0, Type::tile({T, D}, Type::scalar(config_.dtype)));
    return b_.load(ptrs, rowMask(rowsMask), zeroTile, name);
  }

  Value* rowMask(Value* perToken) {
    const int64_t T = config_.blockTokens, D = config_.headSizePadded();
    return b_.andOp(asColumn(perToken, D), asRow(dimMask_, T));
  }
  Value* asColumn(Value* vec, int64_t cols) { return broadcastAsColumn(b_, vec, cols); }
  Value* asRow(Value* vec, int64_t rows) { return broadcastAsRow(b_, vec, rows); }

  Builder& b_;
  const MergePartialsConfig& config_;
  Value *out_ = nullptr, *outLse_ = nullptr, *partialOut_ = nullptr, *partialLse_ = nullptr;
  Value *numPartials_ = nullptr, *numTokens_ = nullptr;
  Value *oStrideToken_ = nullptr, *oStrideHead_ = nullptr, *pStridePartial_ = nullptr, *pStrideToken_ = nullptr,
        *pStrideHead_ = nullptr, *lseStridePartial_ = nullptr;
  Value *tokenMask_ = nullptr, *dimMask_ = nullptr, *offsD64_ = nullptr, *lseIndex_ = nullptr,
        *partialRow_ = nullptr, *negInfRow_ = nullptr, *posInfRow_ = nullptr;
};

}  // namespace

int MergePartialsConfig::headSizePadded() const { return nextPowerOfTwo(headSize); }

std::string MergePartialsConfig::kernelName() const {
  std::string name = std::string("merge_partials_") + ir::scalarName(dtype) + "_h" + std::to_string(numHeads) +
                     "_d" + std::to_string(headSize) + (outputLse ? "_lse" : "_nolse");
  const MergePartialsConfig defaults;
  if (blockTokens != defaults.blockTokens) name += "_t" + std::to_string(blockTokens);
  if (numWarps != defaults.numWarps) name += "_w" + std::to_string(numWarps);
  return name;
}

support::Status MergePartialsConfig::validate() const {
  if (support::Status s = checkIoDtype(dtype); !s) return s;
  if (numHeads < 1 || numHeads > 65535)
    return configError("num_heads (" + std::to_string(numHeads) + ") must be between 1 and 65535");
  if (headSize < 1 || headSize > kMaxHeadSize)
    return configError(headSizeOutOfRange("head_size", headSize));
  if (!isPowerOfTwo(blockTokens) || blockTokens > 256)
    return configError("block_tokens (" + std::to_string(blockTokens) + ") must be a power of two between 1 and 256");
  if (!isPowerOfTwo(numWarps) || numWarps > 16)
    return configError("num_warps (" + std::to_string(numWarps) + ") must be a power of two between 1 and 16");
  return support::Status::ok();
}

support::Expected<std::unique_ptr<ir::Kernel>> buildMergePartials(const MergePartialsConfig& config) {
  if (support::Status s = config.validate(); !s) return s;
  auto kernel = std::make_unique<ir::Kernel>(config.kernelName());
  kernel->docLines().push_back(
      "N-way LSE merge of partial attention outputs (merge_attn_states over num_partials inputs): "
      "grid = (ceil(num_tokens / BLOCK_TOKENS), num_heads).");
  ir::setKernelAttribute(*kernel, ir::KernelAttribute::NumWarps, config.numWarps);
  auto& cx = kernel->constexprs();
  cx.push_back({"BLOCK_TOKENS", int64_t{config.blockTokens}});
  cx.push_back({"HEAD_SIZE", int64_t{config.headSize}});
  cx.push_back({"HEAD_SIZE_PADDED", int64_t{config.headSizePadded()}});
  Builder builder(*kernel);
  MergePartialsBuilder merge(builder, config);
  merge.declareParameters(*kernel);
  merge.build();
  if (support::Status s = builder.finish(); !s) return s;
  return kernel;
}

int64_t mergePartialsGridX(const MergePartialsConfig& config, int64_t numTokens) {
  return (numTokens + config.blockTokens - 1) / config.blockTokens;
}

}  // namespace attnjit::compiler
