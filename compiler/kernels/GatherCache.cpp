// cp_gather_cache / gather_and_maybe_dequant_cache as tile IR. Program p owns
// dst rows t = p·T + r (T = BLOCK_TOKENS). Each row finds its sequence s by a
// branch-free binary search over cu_seq_lens (a fixed seq_search_steps
// iterations on [T] vectors), then its position p = seq_starts[s] + t -
// cu_seq_lens[s], its block-table entry and slot, and copies the cache row (or
// dequantizes it: fp8 · scale) into dst. Rows past num_tokens and columns past
// the entry width are masked.
#include "compiler/kernels/GatherCache.h"

#include <tuple>

#include "compiler/kernels/Broadcasts.h"
#include "compiler/kernels/ConfigChecks.h"
#include "compiler/kernels/SequenceSearch.h"
#include "ir/Builder.h"
#include "ir/KernelAttributes.h"

namespace attnjit::compiler {

using ir::Builder;
using ir::CmpPredicate;
using ir::ScalarKind;
using ir::Type;
using ir::Value;

namespace {

class GatherCacheBuilder {
 public:
  GatherCacheBuilder(Builder& b, const GatherCacheConfig& config) : b_(b), config_(config) {}

  void declareParameters(ir::Kernel& kernel) {
    ir::Attributes aligned;
    aligned.set("align", int64_t{16});
    const Type i32 = Type::scalar(ScalarKind::I32), i64 = Type::scalar(ScalarKind::I64);
    ir::Attributes rowStride;
    if (config_.strideDivisibility > 1) rowStride.set("divisibility", int64_t{config_.strideDivisibility});
    dst_ = kernel.addParameter(Type::pointer(config_.dtype), "dst", aligned);
    cache_ = kernel.addParameter(Type::pointer(config_.cacheElement()), "cache", aligned);
    blockTable_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "block_table", aligned);
    cuSeqLens_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "cu_seq_lens", aligned);
    if (config_.seqStarts) seqStarts_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "seq_starts");
    if (isPerTensorFp8(config_.cacheFormat)) scale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "scale");
    numSeqs_ = kernel.addParameter(i32, "num_seqs");
    searchSteps_ = kernel.addParameter(i32, "seq_search_steps");
    numTokens_ = kernel.addParameter(i32, "num_tokens");
    dstStrideToken_ = kernel.addParameter(i64, "dst_stride_token", rowStride);
    blockTableStride_ = kernel.addParameter(i64, "block_table_stride");
    cacheStrideBlock_ = kernel.addParameter(i64, "cache_stride_block", rowStride);
    cacheStrideToken_ = kernel.addParameter(i64, "cache_stride_token", rowStride);
  }

  void build() {
    const int64_t T = config_.blockTokens, E = nextPowerOfTwo(config_.entrySize);
    const ScalarKind I32 = ScalarKind::I32, I64 = ScalarKind::I64;
    const Type rowsI32 = Type::tile({T}, Type::scalar(I32));
    Value* zeroRows = b_.constInt(0, rowsI32, "zero_rows");
    Value* token = b_.add(b_.splat(b_.mul(b_.programId(0, "program"), b_.constexprValue("BLOCK_TOKENS", I32)), {T}),
                          b_.arange(0, T), "token");
    Value* rowValid = b_.cmp(CmpPredicate::Lt, token, b_.splat(numTokens_, {T}), "row_valid");

    // The largest s in [0, num_seqs) with cu_seq_lens[s] <= t, per row.
    const SequenceSearch search{token, searchSteps_, numSeqs_, b_.constInt(0, Type::scalar(I32)),
                                b_.constInt(1, Type::scalar(I32))};
    Value* found = searchSequence(
        b_, search,
        [&](Value* mid, Value* searching) {
          // mid <= num_seqs: cu_seq_lens has num_seqs + 1 entries.
          return b_.load(b_.addPtr(b_.splat(cuSeqLens_, {T}), mid), searching, zeroRows, "mid_start");
        },
        "seq_found");
    // Rows past num_tokens (or before every start) use sequence 0, masked.
    Value* seq = b_.max(found, zeroRows, "seq");
    Value* seqStart = b_.load(b_.addPtr(b_.splat(cuSeqLens_, {T}), seq), rowValid, zeroRows, "seq_first_token");
    Value* position = b_.sub(token, seqStart, "position_in_gather");
    if (seqStarts_)
      position = b_.add(position, b_.load(b_.addPtr(b_.splat(seqStarts_, {T}), seq), rowValid, zeroRows, "seq_start"),
                        "position");
    Value* blockSize = b_.splat(b_.constexprValue("BLOCK_SIZE", I32), {T}, "block_size");
    Value* tableIndex = b_.add(b_.mul(b_.cast(seq, I64), b_.splat(blockTableStride_, {T})),
                               b_.cast(b_.div(position, blockSize), I64), "block_table_index");
    Value* block = b_.load(b_.addPtr(b_.splat(blockTable_, {T}), tableIndex), rowValid, zeroRows, "block");
    Value* rowOffset = b_.add(b_.mul(b_.cast(block, I64), b_.splat(cacheStrideBlock_, {T})),
                              b_.mul(b_.cast(b_.rem(position, blockSize), I64), b_.splat(cacheStrideToken_, {T})),
                              "cache_row_offset");

    Value* columns = b_.arange(0, E, "columns");
    Value* columnValid = b_.cmp(CmpPredicate::Lt, columns, b_.splat(b_.constexprValue("ENTRY_SIZE", I32), {E}),
                                "column_valid");
    Value* mask = b_.andOp(broadcastAsColumn(b_, rowValid, E), broadcastAsRow(b_, columnValid, T), "mask");
    Value* columns64 = broadcastAsRow(b_, b_.cast(columns, I64), T, "columns_i64");
    Value* sourceOffset = b_.add(broadcastAsColumn(b_, rowOffset, E), columns64, "cache_offset");
    const Type cacheTile = Type::tile({T, E}, Type::scalar(config_.cacheElement()));
    Value* rows = b_.load(b_.addPtr(b_.splat(cache_, {T, E}), sourceOffset), mask,
                          ir::isFloat(config_.cacheElement()) ? b_.constFloat(0.0, cacheTile)
                                                              : b_.constInt(0, cacheTile),
                          "cache_rows");
    Value* stored = rows;
    if (scale_) {
      Value* scale = b_.splat(b_.load(scale_, nullptr, nullptr, "scale"), {T, E});
      Value* dequantized = b_.mul(b_.cast(rows, ScalarKind::F32, "rows_f32"), scale, "rows_dequantized");
      stored = config_.dtype == ScalarKind::F32 ? dequantized : b_.cast(dequantized, config_.dtype, "rows_out");
    }
    Value* dstOffset = b_.add(broadcastAsColumn(b_, b_.mul(b_.cast(token, I64), b_.splat(dstStrideToken_, {T})), E),
                              columns64, "dst_offset");
    b_.store(b_.addPtr(b_.splat(dst_, {T, E}), dstOffset), stored, mask);
  }

 private:
  Builder& b_;
  const GatherCacheConfig& config_;
  Value *dst_ = nullptr, *cache_ = nullptr, *blockTable_ = nullptr, *cuSeqLens_ = nullptr, *seqStarts_ = nullptr,
        *scale_ = nullptr, *numSeqs_ = nullptr, *searchSteps_ = nullptr, *numTokens_ = nullptr,
        *dstStrideToken_ = nullptr, *blockTableStride_ = nullptr, *cacheStrideBlock_ = nullptr,
        *cacheStrideToken_ = nullptr;
};

}  // namespace

ScalarKind GatherCacheConfig::cacheElement() const { return kvCacheValueKind(cacheFormat, dtype); }

std::string GatherCacheConfig::kernelName() const {
  std::string name = std::string("gather_cache_") + ir::scalarName(dtype);
  if (cacheFormat != KvCacheFormat::Auto) name += std::string("_") + kvCacheFormatName(cacheFormat);
  name += "_e" + std::to_string(entrySize) + "_bs" + std::to_string(blockSize);
  if (seqStarts) name += "_starts";
  const GatherCacheConfig defaults;
  if (blockTokens != defaults.blockTokens) name += "_t" + std::to_string(blockTokens);
  if (numWarps != defaults.numWarps) name += "_w" + std::to_string(numWarps);
  if (strideDivisibility != defaults.strideDivisibility) name += "_sd" + std::to_string(strideDivisibility);
  return name;
}

support::Status GatherCacheConfig::validate() const {
  if (support::Status s = checkIoDtype(dtype); !s) return s;
  if (cacheFormat != KvCacheFormat::Auto && !isPerTensorFp8(cacheFormat))
    return configError(std::string("kv_cache_dtype ") + kvCacheFormatName(cacheFormat) +
                       " is not supported by gather_cache; use auto, fp8_e4m3 or fp8_e5m2");
  if (entrySize < 1 || entrySize > 4096)
    return configError("entry_size (" + std::to_string(entrySize) + ") must be between 1 and 4096");
  if (blockSize < 1 || blockSize > 4096)
    return configError("block_size (" + std::to_string(blockSize) + ") must be between 1 and 4096");
  for (const auto& [field, value, high] : {std::tuple{"block_tokens", blockTokens, 64},
                                           std::tuple{"num_warps", numWarps, 16},
                                           std::tuple{"stride_divisibility", strideDivisibility, 16}})
    if (support::Status s = checkPowerOfTwo(field, value, 1, high); !s) return s;
  return support::Status::ok();
}

support::Expected<std::unique_ptr<ir::Kernel>> buildGatherCache(const GatherCacheConfig& config) {
  if (support::Status s = config.validate(); !s) return s;
  auto kernel = std::make_unique<ir::Kernel>(config.kernelName());
  kernel->docLines().push_back(std::string("vLLM cp_gather_cache / gather_and_maybe_dequant_cache, cache format ") +
                               kvCacheFormatName(config.cacheFormat) +
                               ": grid = (ceil(num_tokens / BLOCK_TOKENS)).");
  ir::setKernelAttribute(*kernel, ir::KernelAttribute::NumWarps, config.numWarps);
  auto& cx = kernel->constexprs();
  cx.push_back({"ENTRY_SIZE", int64_t{config.entrySize}});
  cx.push_back({"BLOCK_SIZE", int64_t{config.blockSize}});
  cx.push_back({"BLOCK_TOKENS", int64_t{config.blockTokens}});
  Builder builder(*kernel);
  GatherCacheBuilder gather(builder, config);
  gather.declareParameters(*kernel);
  gather.build();
  if (support::Status s = builder.finish(); !s) return s;
  return kernel;
}

int64_t gatherCacheGridX(const GatherCacheConfig& config, int64_t numTokens) {
  return (numTokens + config.blockTokens - 1) / config.blockTokens;
}

}  // namespace attnjit::compiler
