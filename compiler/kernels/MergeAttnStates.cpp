// merge_attn_states as tile IR: the program for (token block x, head y) loads the
// two LSEs of its BLOCK_TOKENS tokens (contiguous in the [H, T] layout), computes
// the two weights per token in float32, and merges the [BLOCK_TOKENS, D] output rows
// (each a contiguous row of D elements: 16-byte vector accesses when the strides are
// multiples of 8, which the parameters promise for head sizes that are).
//
// Empty key sets. vLLM's CUDA kernel maps any infinite LSE to -inf; if both are
// then -inf it copies the prefix output and writes -inf. Here the same result
// comes without branches: the maximum used for the shift is replaced by 0 when it
// is -inf (so exp sees -inf - 0, never -inf - (-inf) = NaN), and the merged row is
// selected from the prefix row for such tokens. NaN LSEs propagate (isinf(NaN) is
// false in vLLM too).
#include "compiler/kernels/MergeAttnStates.h"

#include <bit>
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

class MergeBuilder {
 public:
  MergeBuilder(Builder& b, const MergeAttnStatesConfig& config) : b_(b), config_(config) {}

  void declareParameters(ir::Kernel& kernel) {
    ir::Attributes aligned;
    aligned.set("align", int64_t{16});
    // Row strides are multiples of 8 elements whenever the head size is; saying
    // so lets codegen use 16-byte vectors (the launcher checks the promise).
    ir::Attributes rowStride;
    if (config_.headSize % 8 == 0) rowStride.set("divisibility", int64_t{8});
    const ScalarKind dt = config_.dtype, f32 = ScalarKind::F32;
    out_ = kernel.addParameter(Type::pointer(config_.outputFp8 ? ScalarKind::F8E4M3 : dt), "output", aligned);
    if (config_.outputLse) outLse_ = kernel.addParameter(Type::pointer(f32), "output_lse", aligned);
    prefixOut_ = kernel.addParameter(Type::pointer(dt), "prefix_output", aligned);
    prefixLse_ = kernel.addParameter(Type::pointer(f32), "prefix_lse", aligned);
    suffixOut_ = kernel.addParameter(Type::pointer(dt), "suffix_output", aligned);
    suffixLse_ = kernel.addParameter(Type::pointer(f32), "suffix_lse", aligned);
    if (config_.outputFp8) outputScale_ = kernel.addParameter(Type::pointer(f32), "output_scale");
    numTokens_ = kernel.addParameter(Type::scalar(ScalarKind::I32), "num_tokens");
    if (config_.contextTokenLimit)
      tokensWithContext_ = kernel.addParameter(Type::scalar(ScalarKind::I32), "prefill_tokens_with_context");
    const Type i64 = Type::scalar(ScalarKind::I64);
    for (const char* name : {"o_stride_token", "o_stride_head", "p_stride_token", "p_stride_head", "s_stride_token",
                             "s_stride_head"})
      strides_.push_back(kernel.addParameter(i64, name, rowStride));
  }

  void build() {
    const int64_t T = config_.blockTokens, D = nextPowerOfTwo(config_.headSize);
    const ScalarKind I64 = ScalarKind::I64, F32 = ScalarKind::F32;
    const double inf = std::numeric_limits<double>::infinity();
    const Type rowF32 = Type::tile({T}, Type::scalar(F32));

    Value* tokenBlock = b_.programId(0, "token_block");
    Value* head = b_.programId(1, "head");
    Value* blockTokens = b_.constexprValue("BLOCK_TOKENS", ScalarKind::I32, "block_tokens");
    Value* headSize = b_.constexprValue("HEAD_SIZE", ScalarKind::I32, "head_size");
    Value* token = b_.add(b_.splat(b_.mul(tokenBlock, blockTokens), {T}), b_.arange(0, T), "token");
    Value* tokenMask = b_.cmp(CmpPredicate::Lt, token, b_.splat(numTokens_, {T}), "token_mask");
    Value* offsD = b_.arange(0, D, "offs_d");
    Value* dimMask = b_.cmp(CmpPredicate::Lt, offsD, b_.splat(headSize, {D}), "dim_mask");

    // ---- Weights, per token, in float32. ----
    Value* lseIndex = b_.add(b_.splat(b_.mul(b_.cast(head, I64), b_.cast(numTokens_, I64)), {T}),
                             b_.cast(token, I64), "lse_index");
    Value* zeroRow = b_.constFloat(0.0, rowF32, "zero_row");
    Value* negInfRow = b_.constFloat(-inf, rowF32, "neg_inf_row");
    Value* posInfRow = b_.constFloat(inf, rowF32, "pos_inf_row");
    // Tokens with a prefix state: all, or those before prefill_tokens_with_context.
    Value* hasContext = nullptr;
    Value* prefixMask = tokenMask;
    if (config_.contextTokenLimit) {
      hasContext = b_.cmp(CmpPredicate::Lt, token, b_.splat(tokensWithContext_, {T}), "has_context");
      prefixMask = b_.andOp(tokenMask, hasContext, "prefix_mask");
    }
    auto loadRawLse = [&](Value* base, Value* mask, Value* other, const std::string& name) {
      return b_.load(b_.addPtr(b_.splat(base, {T}), lseIndex), mask, other, name + "_raw");
    };
    // +inf (FA2's LSE of an empty key set) means no keys, like -inf.
    auto emptyAsNegInf = [&](Value* raw, const std::string& name) {
      return b_.select(b_.cmp(CmpPredicate::Eq, raw, posInfRow), negInfRow, raw, name);
    };
    // A token without context has an empty prefix.
    Value* pLse = emptyAsNegInf(loadRawLse(prefixLse_, prefixMask, hasContext ? negInfRow : zeroRow, "p_lse"), "p_lse");
    Value* sLseRaw = loadRawLse(suffixLse_, tokenMask, zeroRow, "s_lse");
    Value* sLse = emptyAsNegInf(sLseRaw, "s_lse");
    Value* maxLse = b_.max(pLse, sLse, "max_lse");
    Value* bothEmpty = b_.cmp(CmpPredicate::Eq, maxLse, negInfRow, "both_empty");
    Value* shift = b_.select(bothEmpty, zeroRow, maxLse, "shift");
    Value* pSe = b_.unary(Opcode::Exp, b_.sub(pLse, shift), "p_se");
    Value* sSe = b_.unary(Opcode::Exp, b_.sub(sLse, shift), "s_se");
    Value* outSe = b_.add(pSe, sSe, "out_se");
    if (config_.outputLse) {
      // Both empty: -inf, vLLM's value (log(0) + 0).
      Value* logSum = b_.select(bothEmpty, negInfRow, b_.unary(Opcode::Log, outSe), "log_out_se");
      Value* outLse = b_.add(logSum, shift, "out_lse");
      // Without context: the suffix's LSE as stored (vLLM copies it, +inf included).
      if (hasContext) outLse = b_.select(hasContext, outLse, sLseRaw, "out_lse_or_suffix");
      b_.store(b_.addPtr(b_.splat(outLse_, {T}), lseIndex), outLse, tokenMask);
    }
    // Weights to 2 ulp (a bf16/f16 output rounds far coarser): without the correctly
    // rounded division's called slow path, ptxas issues the row loads early
    // (measured: docs/perf-log.md, 2026-11-30).
    Value* pScale = b_.divApprox(pSe, outSe, "p_scale");
    Value* sScale = b_.divApprox(sSe, outSe, "s_scale");

    // ---- The [BLOCK_TOKENS, D] rows. ----
    Value* head64 = b_.cast(head, I64);
    Value* token64 = b_.cast(token, I64, "token_i64");
    Value* offsD64 = b_.cast(offsD, I64, "offs_d_i64");
    Value* mask = b_.andOp(asColumn(tokenMask, D), asRow(dimMask, T), "mask");
    auto rowPointers = [&](Value* base, Value* strideToken, Value* strideHead, const std::string& name) {
      Value* rowOffset = b_.add(b_.mul(token64, b_.splat(strideToken, {T})), b_.splat(b_.mul(head64, strideHead), {T}));
      Value* offset = b_.add(asColumn(rowOffset, D), asRow(offsD64, T));
      return b_.addPtr(b_.splat(base, {T, D}), offset, name);
    };
    const Type tileDt = Type::tile({T, D}, Type::scalar(config_.dtype));
    Value* zeroTile = b_.constFloat(0.0, tileDt, "zero_tile");
    Value* prefixRows = hasContext ? b_.andOp(mask, asColumn(hasContext, D), "prefix_rows") : mask;
    Value* pOut = b_.load(rowPointers(prefixOut_, strides_[2], strides_[3], "p_ptrs"), prefixRows, zeroTile, "p_out");
    Value* sOut = b_.load(rowPointers(suffixOut_, strides_[4], strides_[5], "s_ptrs"), mask, zeroTile, "s_out");
    auto toF32 = [&](Value* v) { return config_.dtype == F32 ? v : b_.cast(v, F32); };
    Value* merged = b_.add(b_.mul(toF32(pOut), asColumn(pScale, D)), b_.mul(toF32(sOut), asColumn(sScale, D)),
                           "merged_f32");
    Value* result = nullptr;
    if (!config_.outputFp8 && !hasContext) {
      Value* mergedDt = config_.dtype == F32 ? merged : b_.cast(merged, config_.dtype, "merged");
      result = b_.select(asColumn(bothEmpty, D), pOut, mergedDt, "out");
    } else {
      // Both empty: the prefix row; no context: the suffix row, as it is.
      Value* rows = b_.select(asColumn(bothEmpty, D), toF32(pOut), merged, "merged_or_prefix");
      if (hasContext) rows = b_.select(asColumn(hasContext, D), rows, toF32(sOut), "merged_or_suffix");
      if (config_.outputFp8) {
        // x · (1 / scale), as vLLM computes it; the cast saturates at ±448.
        Value* scale = b_.load(outputScale_, nullptr, nullptr, "output_scale");
        Value* inverse = b_.div(b_.constFloat(1.0, Type::scalar(F32)), scale, "inverse_scale");
        result = b_.cast(b_.mul(rows, b_.splat(inverse, {T, D})), ScalarKind::F8E4M3, "out_fp8");
      } else {
        result = config_.dtype == F32 ? rows : b_.cast(rows, config_.dtype, "out");
      }
    }
    b_.store(rowPointers(out_, strides_[0], strides_[1], "o_ptrs"), result, mask);
  }

 private:
  Value* asColumn(Value* vec, int64_t cols) { return broadcastAsColumn(b_, vec, cols); }
  Value* asRow(Value* vec, int64_t rows) { return broadcastAsRow(b_, vec, rows); }

  Builder& b_;
  const MergeAttnStatesConfig& config_;
  Value *out_ = nullptr, *outLse_ = nullptr, *prefixOut_ = nullptr, *prefixLse_ = nullptr, *suffixOut_ = nullptr,
        *suffixLse_ = nullptr, *numTokens_ = nullptr, *outputScale_ = nullptr, *tokensWithContext_ = nullptr;
  std::vector<Value*> strides_;  // o, p, s: (token, head) each
};

}  // namespace

int MergeAttnStatesConfig::headSizePadded() const { return nextPowerOfTwo(headSize); }

std::string MergeAttnStatesConfig::kernelName() const {
  std::string name = std::string("merge_attn_states_") + ir::scalarName(dtype) + "_h" + std::to_string(numHeads) +
                     "_d" + std::to_string(headSize) + (outputLse ? "_lse" : "_nolse");
  if (outputFp8) name += "_fp8out";
  if (contextTokenLimit) name += "_ctxlimit";
  const MergeAttnStatesConfig defaults;
  if (blockTokens != defaults.blockTokens) name += "_t" + std::to_string(blockTokens);
  if (numWarps != defaults.numWarps) name += "_w" + std::to_string(numWarps);
  return name;
}

support::Status MergeAttnStatesConfig::validate() const {
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

support::Expected<std::unique_ptr<ir::Kernel>> buildMergeAttnStates(const MergeAttnStatesConfig& config) {
  if (support::Status s = config.validate(); !s) return s;
  auto kernel = std::make_unique<ir::Kernel>(config.kernelName());
  kernel->docLines().push_back(
      "vLLM merge_attn_states: grid = (ceil(num_tokens / BLOCK_TOKENS), num_heads).");
  ir::setKernelAttribute(*kernel, ir::KernelAttribute::NumWarps, config.numWarps);
  auto& cx = kernel->constexprs();
  cx.push_back({"BLOCK_TOKENS", int64_t{config.blockTokens}});
  cx.push_back({"HEAD_SIZE", int64_t{config.headSize}});
  cx.push_back({"HEAD_SIZE_PADDED", int64_t{config.headSizePadded()}});
  Builder builder(*kernel);
  MergeBuilder merge(builder, config);
  merge.declareParameters(*kernel);
  merge.build();
  if (support::Status s = builder.finish(); !s) return s;
  return kernel;
}

int64_t mergeAttnStatesGridX(const MergeAttnStatesConfig& config, int64_t numTokens) {
  return (numTokens + config.blockTokens - 1) / config.blockTokens;
}

}  // namespace attnjit::compiler
