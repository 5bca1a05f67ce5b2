// reshape_and_cache_flash as tile IR. Program (t, y) reads slot_mapping[t]; a
// negative slot (a padding token) ends the program. Otherwise it loads the
// [HEADS_PER_PROGRAM, HEAD_SIZE_PADDED] tiles of token t's keys and values (rows of
// D contiguous elements), converts them to the cache format in registers, and
// stores each head's row at block · kv_stride_block + offset · kv_stride_token +
// head · kv_stride_head (+ kv_stride_kv for V).
//
// Quantization. Per-tensor fp8 divides by the scale and lets the f32 → fp8 cast
// round to nearest even and saturate. Per-token-head formats first reduce max|x|
// over the row (padded columns load as 0, so they do not count), derive the scale,
// quantize x / scale, and store the scale's four bytes after the D values (bytes
// of the f32 bit pattern, little-endian, as a host float written there).
// Rounding half away from zero for int8 is built from exact steps: r = trunc(y),
// f = y - r (exact in f32), then r ± 1 where |f| >= 0.5.
#include "compiler/kernels/CacheWrite.h"

#include <algorithm>
#include <bit>

#include "compiler/kernels/KernelSupport.h"
#include "ir/Builder.h"

namespace attnjit::compiler {

using ir::Builder;
using ir::CmpPredicate;
using ir::Opcode;
using ir::ScalarKind;
using ir::Status;
using ir::Type;
using ir::Value;

namespace {

// The smallest per-token-head scale (vLLM's floor; keeps all-zero rows finite).
constexpr double kMinScale = 1e-6;
// Elements per program tile, beyond which heads are spread over grid y.
constexpr int kMaxTileElements = 1024;

class CacheWriteBuilder {
 public:
  CacheWriteBuilder(Builder& b, const CacheWriteConfig& config) : b_(b), config_(config) {}

  void declareParameters(ir::Kernel& kernel) {
    ir::Attributes aligned;
    aligned.set("align", int64_t{16});
    ir::Attributes rowStride;
    if (config_.headSize % 8 == 0) rowStride.set("divisibility", int64_t{8});
    // A per-token-head row is D + 4 bytes: only 4-byte multiples can be promised.
    ir::Attributes cacheStride;
    if (isPerTokenHead(config_.cacheFormat)) {
      if (kvCacheScaleByteOffset(config_.cacheFormat, config_.headSize) % 4 == 0)
        cacheStride.set("divisibility", int64_t{4});
    } else {
      cacheStride = rowStride;
    }
    const ScalarKind dt = config_.dtype;
    key_ = kernel.addParameter(Type::pointer(dt), "key", aligned);
    value_ = kernel.addParameter(Type::pointer(dt), "value", aligned);
    kvCache_ = kernel.addParameter(Type::pointer(config_.cachePointerElement()), "kv_cache", aligned);
    slotMapping_ = kernel.addParameter(Type::pointer(ScalarKind::I64), "slot_mapping", aligned);
    if (perTensorScale()) {
      kScale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "k_scale");
      vScale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "v_scale");
    }
    const Type i64 = Type::scalar(ScalarKind::I64);
    keyStrideToken_ = kernel.addParameter(i64, "key_stride_token", rowStride);
    keyStrideHead_ = kernel.addParameter(i64, "key_stride_head", rowStride);
    valueStrideToken_ = kernel.addParameter(i64, "value_stride_token", rowStride);
    valueStrideHead_ = kernel.addParameter(i64, "value_stride_head", rowStride);
    kvStrideBlock_ = kernel.addParameter(i64, "kv_stride_block", cacheStride);
    kvStrideKv_ = kernel.addParameter(i64, "kv_stride_kv", cacheStride);
    kvStrideToken_ = kernel.addParameter(i64, "kv_stride_token", cacheStride);
    kvStrideHead_ = kernel.addParameter(i64, "kv_stride_head", cacheStride);
  }

  void build() {
    const ScalarKind I64 = ScalarKind::I64;
    Value* token = b_.programId(0, "token");
    Value* headBlock = b_.programId(1, "head_block");
    Value* slot = b_.load(b_.addPtr(slotMapping_, token), nullptr, nullptr, "slot");
    Value* isWritten = b_.cmp(CmpPredicate::Ge, slot, b_.i64(0), "is_written");
    b_.beginIf(isWritten);
    Value* blockSize = b_.cast(b_.constexprValue("BLOCK_SIZE", ScalarKind::I32), I64, "block_size");
    Value* block = b_.div(slot, blockSize, "block");
    Value* offset = b_.rem(slot, blockSize, "offset_in_block");
    Value* slotBase = b_.add(b_.mul(block, kvStrideBlock_), b_.mul(offset, kvStrideToken_), "slot_base");

    const int64_t H = config_.headsPerProgram(), D = nextPowerOfTwo(config_.headSize);
    Value* headsPerProgram = b_.constexprValue("HEADS_PER_PROGRAM", ScalarKind::I32, "heads_per_program");
    head_ = b_.add(b_.splat(b_.mul(headBlock, headsPerProgram), {H}), b_.arange(0, H), "head");
    Value* numKvHeads = b_.constexprValue("NUM_KV_HEADS", ScalarKind::I32, "num_kv_heads");
    headMask_ = b_.cmp(CmpPredicate::Lt, head_, b_.splat(numKvHeads, {H}), "head_mask");
    Value* offsD = b_.arange(0, D, "offs_d");
    Value* headSize = b_.constexprValue("HEAD_SIZE", ScalarKind::I32, "head_size");
    Value* dimMask = b_.cmp(CmpPredicate::Lt, offsD, b_.splat(headSize, {D}), "dim_mask");
    mask_ = b_.andOp(asColumn(headMask_, D), asRow(dimMask, H), "mask");
    offsD64_ = b_.cast(offsD, I64, "offs_d_i64");
    head64_ = b_.cast(head_, I64, "head_i64");
    Value* token64 = b_.cast(token, I64, "token_i64");

    Value* kRowBase = b_.add(b_.splat(slotBase, {H}), b_.mul(head64_, b_.splat(kvStrideHead_, {H})), "k_row_base");
    Value* vRowBase = b_.add(kRowBase, b_.splat(kvStrideKv_, {H}), "v_row_base");
    writeRows(key_, keyStrideToken_, keyStrideHead_, token64, kRowBase, kScale_, "k");
    writeRows(value_, valueStrideToken_, valueStrideHead_, token64, vRowBase, vScale_, "v");
    b_.endIf();
  }

 private:
  bool perTensorScale() const { return isPerTensorFp8(config_.cacheFormat); }
  Value* asColumn(Value* vec, int64_t cols) { return broadcastAsColumn(b_, vec, cols); }
  Value* asRow(Value* vec, int64_t rows) { return broadcastAsRow(b_, vec, rows); }

  // Loads token t's rows of one source (keys or values), converts them and stores
  // them at rowBase (one cache offset per head).
  void writeRows(Value* source, Value* strideToken, Value* strideHead, Value* token64, Value* rowBase,
                 Value* scalePointer, const std::string& name) {
    if (config_.cacheFormat == KvCacheFormat::Int4PerTokenHead) {
      writeInt4Rows(source, strideToken, strideHead, token64, rowBase, name);
      return;
    }
    const int64_t H = head_->type().shape()[0], D = offsD64_->type().shape()[0];
    const ScalarKind dt = config_.dtype, F32 = ScalarKind::F32, cacheKind = config_.cacheElement();
    Value* sourceRow = b_.add(b_.splat(b_.mul(token64, strideToken), {H}), b_.mul(head64_, b_.splat(strideHead, {H})));
    Value* sourceOffset = b_.add(asColumn(sourceRow, D), asRow(offsD64_, H));
    Value* x = b_.load(b_.addPtr(b_.splat(source, {H, D}), sourceOffset), mask_,
                       b_.constFloat(0.0, Type::tile({H, D}, Type::scalar(dt))), name + "_rows");
    Value* cachePtrs = b_.addPtr(b_.splat(kvCache_, {H, D}), b_.add(asColumn(rowBase, D), asRow(offsD64_, H)),
                                 name + "_cache_ptrs");
    Value* xF32 = dt == F32 ? x : b_.cast(x, F32, name + "_f32");

    switch (config_.cacheFormat) {
      case KvCacheFormat::Auto:
        b_.store(cachePtrs, x, mask_);
        return;
      case KvCacheFormat::Fp8E4M3:
      case KvCacheFormat::Fp8E5M2: {
        Value* scale = b_.load(scalePointer, nullptr, nullptr, name + "_scale");
        Value* scaled = b_.div(xF32, b_.splat(scale, {H, D}), name + "_scaled");
        b_.store(cachePtrs, b_.cast(scaled, cacheKind, name + "_quantized"), mask_);
        return;
      }
      case KvCacheFormat::Int8PerTokenHead:
      case KvCacheFormat::Fp8PerTokenHead: {
        const Type rowF32 = Type::tile({H}, Type::scalar(F32));
        Value* amax = b_.reduce(Opcode::ReduceMax, b_.unary(Opcode::Abs, xF32), 1, name + "_amax");
        Value* rawScale = b_.div(amax, b_.constFloat(config_.quantMax(), rowF32), name + "_raw_scale");
        Value* scale = b_.max(rawScale, b_.constFloat(kMinScale, rowF32), name + "_row_scale");
        Value* y = b_.div(xF32, asColumn(scale, D), name + "_scaled");
        // The row is bytes (values, then the scale): fp8 values are stored as their bits.
        Value* quantized = cacheKind == ScalarKind::I8
                               ? roundHalfAwayToInt8(y, name)
                               : b_.bitcast(b_.cast(y, cacheKind, name + "_fp8"), ScalarKind::I8, name + "_quantized");
        b_.store(cachePtrs, quantized, mask_);
        storeScaleBytes(scale, rowBase, name);
        return;
      }
      case KvCacheFormat::Int4PerTokenHead:
        return;  // writeInt4Rows, above
    }
  }

  // int4 per token-head: the even and odd elements of each row are loaded as two
  // [H, D/2] tiles, quantized with the row's scale max|x| / 7, and packed pairwise
  // into bytes (element 2i in the low nibble of byte i, 2i + 1 in the high one).
  void writeInt4Rows(Value* source, Value* strideToken, Value* strideHead, Value* token64, Value* rowBase,
                     const std::string& name) {
    const int64_t H = head_->type().shape()[0], D = offsD64_->type().shape()[0], half = D / 2;
    const ScalarKind dt = config_.dtype, F32 = ScalarKind::F32, I32 = ScalarKind::I32;
    Value* offsPair = b_.arange(0, half, name + "_offs_pair");
    Value* pairMask = b_.cmp(CmpPredicate::Lt, offsPair,
                             b_.splat(b_.constInt(config_.headSize / 2, Type::scalar(I32)), {half}), name + "_pair_mask");
    Value* mask = b_.andOp(asColumn(headMask_, half), asRow(pairMask, H), name + "_int4_mask");
    Value* pair64 = b_.cast(offsPair, ScalarKind::I64);
    Value* sourceRow = b_.add(b_.splat(b_.mul(token64, strideToken), {H}), b_.mul(head64_, b_.splat(strideHead, {H})));
    auto loadHalf = [&](int parity) {
      Value* column = b_.add(b_.mul(pair64, b_.constInt(2, pair64->type())), b_.constInt(parity, pair64->type()));
      Value* x = b_.load(b_.addPtr(b_.splat(source, {H, half}), b_.add(asColumn(sourceRow, half), asRow(column, H))),
                         mask, b_.constFloat(0.0, Type::tile({H, half}, Type::scalar(dt))),
                         name + (parity ? "_odd" : "_even"));
      return dt == F32 ? x : b_.cast(x, F32);
    };
    Value* even = loadHalf(0);
    Value* odd = loadHalf(1);
    const Type rowF32 = Type::tile({H}, Type::scalar(F32));
    Value* amax = b_.max(b_.reduce(Opcode::ReduceMax, b_.unary(Opcode::Abs, even), 1),
                         b_.reduce(Opcode::ReduceMax, b_.unary(Opcode::Abs, odd), 1), name + "_amax");
    Value* rawScale = b_.div(amax, b_.constFloat(config_.quantMax(), rowF32), name + "_raw_scale");
    Value* scale = b_.max(rawScale, b_.constFloat(kMinScale, rowF32), name + "_row_scale");
    auto quantize = [&](Value* x, const std::string& part) {
      Value* q = roundHalfAwayToInt8(b_.div(x, asColumn(scale, half)), name + part);
      return b_.cast(q, I32);
    };
    const Type pairI32 = Type::tile({H, half}, Type::scalar(I32));
    Value* low = b_.andOp(quantize(even, "_even"), b_.constInt(0xF, pairI32), name + "_low_nibble");
    Value* high = b_.binary(Opcode::Shl, quantize(odd, "_odd"), b_.constInt(4, pairI32), name + "_high_nibble");
    Value* packed = b_.cast(b_.binary(Opcode::Or, low, high), ScalarKind::I8, name + "_packed");
    Value* cachePtrs = b_.addPtr(b_.splat(kvCache_, {H, half}), b_.add(asColumn(rowBase, half), asRow(pair64, H)),
                                 name + "_cache_ptrs");
    b_.store(cachePtrs, packed, mask);
    storeScaleBytes(scale, rowBase, name);
  }

  Value* roundHalfAwayToInt8(Value* y, const std::string& name) {
    const Type shape = y->type();
    const ScalarKind F32 = ScalarKind::F32;
    Value* truncated = b_.cast(b_.cast(y, ScalarKind::I32), F32, name + "_trunc");
    Value* fraction = b_.unary(Opcode::Abs, b_.sub(y, truncated), name + "_fraction");
    Value* roundsAway = b_.cmp(CmpPredicate::Ge, fraction, b_.constFloat(0.5, shape), name + "_rounds_away");
    Value* step = b_.select(b_.cmp(CmpPredicate::Lt, y, b_.constFloat(0.0, shape)), b_.constFloat(-1.0, shape),
                            b_.constFloat(1.0, shape));
    Value* rounded = b_.add(truncated, b_.select(roundsAway, step, b_.constFloat(0.0, shape)), name + "_rounded");
    // Saturating conversion; |y| <= 127 up to rounding, so only that case clamps.
    return b_.cast(rounded, ScalarKind::I8, name + "_quantized");
  }

  // The f32 scale of each row, as its four little-endian bytes after the row's
  // values (byte offset D, or D/2 for int4).
  void storeScaleBytes(Value* scale, Value* rowBase, const std::string& name) {
    const int64_t H = scale->type().shape()[0];
    Value* bits = asColumn(b_.bitcast(scale, ScalarKind::I32, name + "_scale_bits"), 4);
    Value* shift = asRow(b_.mul(b_.arange(0, 4), b_.constInt(8, Type::tile({4}, Type::scalar(ScalarKind::I32)))), H);
    Value* bytes = b_.cast(b_.binary(Opcode::Shr, bits, shift), ScalarKind::I8, name + "_scale_bytes");
    Value* scaleOffset =
        b_.i64(kvCacheScaleByteOffset(config_.cacheFormat, config_.headSize));
    Value* byteOffset = b_.add(asColumn(b_.add(rowBase, b_.splat(scaleOffset, {H})), 4),
                               asRow(b_.cast(b_.arange(0, 4), ScalarKind::I64), H));
    b_.store(b_.addPtr(b_.splat(kvCache_, {H, 4}), byteOffset, name + "_scale_ptrs"), bytes, asColumn(headMask_, 4));
  }

  Builder& b_;
  const CacheWriteConfig& config_;
  Value *key_ = nullptr, *value_ = nullptr, *kvCache_ = nullptr, *slotMapping_ = nullptr, *kScale_ = nullptr,
        *vScale_ = nullptr;
  Value *keyStrideToken_ = nullptr, *keyStrideHead_ = nullptr, *valueStrideToken_ = nullptr,
        *valueStrideHead_ = nullptr, *kvStrideBlock_ = nullptr, *kvStrideKv_ = nullptr, *kvStrideToken_ = nullptr,
        *kvStrideHead_ = nullptr;
  Value *head_ = nullptr, *head64_ = nullptr, *headMask_ = nullptr, *offsD64_ = nullptr, *mask_ = nullptr;
};

}  // namespace

ScalarKind CacheWriteConfig::cacheElement() const { return kvCacheValueKind(cacheFormat, dtype); }

ScalarKind CacheWriteConfig::cachePointerElement() const { return kvCachePointerKind(cacheFormat, dtype); }

int CacheWriteConfig::cacheRowElements() const { return kvCacheRowElements(cacheFormat, headSize); }

double CacheWriteConfig::quantMax() const { return kvCacheQuantMax(cacheFormat); }

int CacheWriteConfig::headsPerProgram() const {
  const int padded = nextPowerOfTwo(headSize);
  return std::min(nextPowerOfTwo(numKvHeads), std::max(1, kMaxTileElements / padded));
}

std::string CacheWriteConfig::kernelName() const {
  std::string name = std::string("reshape_and_cache_") + ir::scalarName(dtype);
  if (cacheFormat != KvCacheFormat::Auto) name += std::string("_") + kvCacheFormatName(cacheFormat);
  name += "_kv" + std::to_string(numKvHeads) + "_d" + std::to_string(headSize) + "_bs" + std::to_string(blockSize);
  if (numWarps != CacheWriteConfig{}.numWarps) name += "_w" + std::to_string(numWarps);
  return name;
}

Status CacheWriteConfig::validate() const {
  if (Status s = checkIoDtype(dtype); !s) return s;
  if (numKvHeads < 1 || numKvHeads > 256)
    return configError("num_kv_heads (" + std::to_string(numKvHeads) + ") must be between 1 and 256");
  if (headSize < 1 || headSize > 512)
    return configError("head_size (" + std::to_string(headSize) + ") must be between 1 and 512");
  if (blockSize < 1 || blockSize > 4096)
    return configError("block_size (" + std::to_string(blockSize) + ") must be between 1 and 4096");
  if (!isPowerOfTwo(numWarps) || numWarps > 16)
    return configError("num_warps (" + std::to_string(numWarps) + ") must be a power of two between 1 and 16");
  if (cacheFormat == KvCacheFormat::Int4PerTokenHead && (headSize % 2 != 0 || headSize < 4))
    return configError("head_size (" + std::to_string(headSize) +
                       ") must be even and at least 4 for kv_cache_dtype int4_per_token_head (two values per byte)");
  return Status::ok();
}

ir::Expected<std::unique_ptr<ir::Kernel>> buildCacheWrite(const CacheWriteConfig& config) {
  if (Status s = config.validate(); !s) return s;
  auto kernel = std::make_unique<ir::Kernel>(config.kernelName());
  kernel->docLines().push_back(std::string("vLLM reshape_and_cache_flash, cache format ") +
                               kvCacheFormatName(config.cacheFormat) +
                               ": grid = (num_tokens, ceil(Hkv / HEADS_PER_PROGRAM)).");
  kernel->attrs().set("num_warps", int64_t{config.numWarps});
  auto& cx = kernel->constexprs();
  cx.push_back({"HEADS_PER_PROGRAM", int64_t{config.headsPerProgram()}});
  cx.push_back({"NUM_KV_HEADS", int64_t{config.numKvHeads}});
  cx.push_back({"HEAD_SIZE", int64_t{config.headSize}});
  cx.push_back({"HEAD_SIZE_PADDED", int64_t{nextPowerOfTwo(config.headSize)}});
  cx.push_back({"BLOCK_SIZE", int64_t{config.blockSize}});
  Builder builder(*kernel);
  CacheWriteBuilder writer(builder, config);
  writer.declareParameters(*kernel);
  writer.build();
  if (Status s = builder.finish(); !s) return s;
  return kernel;
}

int64_t cacheWriteGridY(const CacheWriteConfig& config) {
  const int perProgram = config.headsPerProgram();
  return (config.numKvHeads + perProgram - 1) / perProgram;
}

}  // namespace attnjit::compiler
