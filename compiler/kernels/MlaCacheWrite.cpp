// concat_and_cache_mla as tile IR. Program t reads slot_mapping[t]; a negative
// slot (a padding token) writes nothing. Otherwise it loads token t's kv_c [L] and
// k_pe [R] (both powers of two here, so no masks), converts them to the cache
// type in registers (per-tensor fp8: divide by the scale, then the f32 → fp8 cast
// rounds to nearest even and saturates) and stores them side by side at
// block · cache_stride_block + offset · cache_stride_token.
#include "compiler/kernels/MlaCacheWrite.h"

#include "compiler/kernels/ConfigChecks.h"
#include "ir/Builder.h"
#include "ir/KernelAttributes.h"

namespace attnjit::compiler {

using ir::Builder;
using ir::CmpPredicate;
using ir::ScalarKind;
using support::Status;
using ir::Type;
using ir::Value;

namespace {

class MlaCacheWriteBuilder {
 public:
  MlaCacheWriteBuilder(Builder& b, const MlaCacheWriteConfig& config) : b_(b), config_(config) {}

  void declareParameters(ir::Kernel& kernel) {
    ir::Attributes aligned;
    aligned.set("align", int64_t{16});
    ir::Attributes inputStride, cacheStride;
    inputStride.set("divisibility", int64_t{8});
    cacheStride.set("divisibility", int64_t{16});
    const Type i64 = Type::scalar(ScalarKind::I64);
    kvC_ = kernel.addParameter(Type::pointer(config_.dtype), "kv_c", aligned);
    kPe_ = kernel.addParameter(Type::pointer(config_.dtype), "k_pe", aligned);
    kvCache_ = kernel.addParameter(Type::pointer(config_.cacheElement()), "kv_cache", aligned);
    slotMapping_ = kernel.addParameter(Type::pointer(ScalarKind::I64), "slot_mapping", aligned);
    if (isPerTensorFp8(config_.cacheFormat)) scale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "scale");
    kvCStrideToken_ = kernel.addParameter(i64, "kv_c_stride_token", inputStride);
    kPeStrideToken_ = kernel.addParameter(i64, "k_pe_stride_token", inputStride);
    cacheStrideBlock_ = kernel.addParameter(i64, "cache_stride_block", cacheStride);
    cacheStrideToken_ = kernel.addParameter(i64, "cache_stride_token", cacheStride);
  }

  void build() {
    const ScalarKind I64 = ScalarKind::I64;
    Value* token = b_.programId(0, "token");
    Value* slot = b_.load(b_.addPtr(slotMapping_, token), nullptr, nullptr, "slot");
    Value* isWritten = b_.cmp(CmpPredicate::Ge, slot, b_.i64(0), "is_written");
    b_.beginIf(isWritten);
    Value* blockSize = b_.cast(b_.constexprValue("BLOCK_SIZE", ScalarKind::I32), I64, "block_size");
    Value* block = b_.div(slot, blockSize, "block");
    Value* offset = b_.rem(slot, blockSize, "offset_in_block");
    Value* rowBase = b_.add(b_.mul(block, cacheStrideBlock_), b_.mul(offset, cacheStrideToken_), "row_base");
    Value* token64 = b_.cast(token, I64, "token_i64");
    Value* scale = scale_ ? b_.load(scale_, nullptr, nullptr, "scale") : nullptr;
    writePart(kvC_, b_.mul(token64, kvCStrideToken_), rowBase, config_.kvLoraRank, scale, "kv_c");
    Value* ropeBase = b_.add(rowBase, b_.i64(config_.kvLoraRank), "rope_base");
    writePart(kPe_, b_.mul(token64, kPeStrideToken_), ropeBase, config_.ropeDim, scale, "k_pe");
    b_.endIf();
  }

 private:
  // Copies `width` contiguous elements from source + sourceOffset to the cache at
  // cacheOffset, converted to the cache type.
  void writePart(Value* source, Value* sourceOffset, Value* cacheOffset, int width, Value* scale,
                 const std::string& name) {
    const int64_t n = width;
    const ScalarKind F32 = ScalarKind::F32;
    Value* offs = b_.cast(b_.arange(0, n), ScalarKind::I64, name + "_offs");
    Value* x = b_.load(b_.addPtr(b_.splat(source, {n}), b_.add(b_.splat(sourceOffset, {n}), offs)), nullptr, nullptr,
                       name);
    Value* stored = x;
    if (scale) {
      Value* xF32 = config_.dtype == F32 ? x : b_.cast(x, F32, name + "_f32");
      Value* scaled = b_.div(xF32, b_.splat(scale, {n}), name + "_scaled");
      stored = b_.cast(scaled, config_.cacheElement(), name + "_quantized");
    }
    Value* cachePtrs =
        b_.addPtr(b_.splat(kvCache_, {n}), b_.add(b_.splat(cacheOffset, {n}), offs), name + "_cache_ptrs");
    b_.store(cachePtrs, stored);
  }

  Builder& b_;
  const MlaCacheWriteConfig& config_;
  Value *kvC_ = nullptr, *kPe_ = nullptr, *kvCache_ = nullptr, *slotMapping_ = nullptr, *scale_ = nullptr;
  Value *kvCStrideToken_ = nullptr, *kPeStrideToken_ = nullptr, *cacheStrideBlock_ = nullptr,
        *cacheStrideToken_ = nullptr;
};

}  // namespace

ScalarKind MlaCacheWriteConfig::cacheElement() const { return kvCacheValueKind(cacheFormat, dtype); }

int MlaCacheWriteConfig::cacheRowElements() const { return kvLoraRank + ropeDim; }

std::string MlaCacheWriteConfig::kernelName() const {
  std::string name = std::string("mla_cache_write_") + ir::scalarName(dtype);
  if (cacheFormat != KvCacheFormat::Auto) name += std::string("_") + kvCacheFormatName(cacheFormat);
  name += "_l" + std::to_string(kvLoraRank) + "_r" + std::to_string(ropeDim) + "_bs" + std::to_string(blockSize);
  if (numWarps != MlaCacheWriteConfig{}.numWarps) name += "_w" + std::to_string(numWarps);
  return name;
}

support::Status MlaCacheWriteConfig::validate() const {
  if (support::Status s = checkIoDtype(dtype); !s) return s;
  if (cacheFormat != KvCacheFormat::Auto && !isPerTensorFp8(cacheFormat))
    return configError(std::string("kv_cache_dtype ") + kvCacheFormatName(cacheFormat) +
                       " is not supported for the MLA cache; use auto, fp8_e4m3 or fp8_e5m2");
  if (ropeDim != 64 || (kvLoraRank != 512 && kvLoraRank != 256))
    return configError("unsupported MLA latent width kv_lora_rank + rope_dim = " + std::to_string(kvLoraRank) + " + " +
                       std::to_string(ropeDim) + "; supported: 512 + 64 and 256 + 64");
  if (blockSize < 1 || blockSize > 4096)
    return configError("block_size (" + std::to_string(blockSize) + ") must be between 1 and 4096");
  if (!isPowerOfTwo(numWarps) || numWarps > 16)
    return configError("num_warps (" + std::to_string(numWarps) + ") must be a power of two between 1 and 16");
  return support::Status::ok();
}

support::Expected<std::unique_ptr<ir::Kernel>> buildMlaCacheWrite(const MlaCacheWriteConfig& config) {
  if (support::Status s = config.validate(); !s) return s;
  auto kernel = std::make_unique<ir::Kernel>(config.kernelName());
  kernel->docLines().push_back(std::string("vLLM concat_and_cache_mla, cache format ") +
                               kvCacheFormatName(config.cacheFormat) + ": grid = (num_tokens).");
  ir::setKernelAttribute(*kernel, ir::KernelAttribute::NumWarps, config.numWarps);
  auto& cx = kernel->constexprs();
  cx.push_back({"KV_LORA_RANK", int64_t{config.kvLoraRank}});
  cx.push_back({"ROPE_DIM", int64_t{config.ropeDim}});
  cx.push_back({"BLOCK_SIZE", int64_t{config.blockSize}});
  Builder builder(*kernel);
  MlaCacheWriteBuilder writer(builder, config);
  writer.declareParameters(*kernel);
  writer.build();
  if (support::Status s = builder.finish(); !s) return s;
  return kernel;
}

}  // namespace attnjit::compiler
