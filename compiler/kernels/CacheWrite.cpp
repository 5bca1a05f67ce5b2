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
#include <limits>
#include <numeric>

#include "compiler/kernels/BoundsCheck.h"
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

// The smallest per-token-head scale (vLLM's floor; keeps all-zero rows finite).
constexpr double kMinScale = 1e-6;
// Elements per program tile, beyond which heads are spread over grid y.
constexpr int kMaxTileElements = 1024;

class CacheWriteBuilder {
 public:
  CacheWriteBuilder(Builder& b, const CacheWriteConfig& config) : b_(b), config_(config) {}

  void declareParameters(ir::Kernel& kernel) {
    ir::Attributes sourceAligned, cacheAligned, aligned;
    sourceAligned.set("align", int64_t{config_.sourceAlign});
    cacheAligned.set("align", int64_t{config_.cacheAlign});
    aligned.set("align", int64_t{16});
    auto divisibleBy = [](int divisibility) {
      ir::Attributes attributes;
      if (divisibility > 1) attributes.set("divisibility", int64_t{divisibility});
      return attributes;
    };
    const ir::Attributes rowStride = divisibleBy(config_.keyStrideDivisibility());
    const ir::Attributes valueRowStride = divisibleBy(config_.valueStrideDivisibility());
    const ir::Attributes cacheStride = divisibleBy(config_.cacheStrideDivisibility());
    const ScalarKind dt = config_.dtype;
    key_ = kernel.addParameter(Type::pointer(dt), "key", sourceAligned);
    value_ = kernel.addParameter(Type::pointer(dt), "value", sourceAligned);
    kvCache_ = kernel.addParameter(Type::pointer(config_.cachePointerElement()), "kv_cache", cacheAligned);
    slotMapping_ = kernel.addParameter(Type::pointer(ScalarKind::I64), "slot_mapping", aligned);
    if (perTensorScale()) {
      kScale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "k_scale");
      vScale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "v_scale");
    }
    if (config_.separateScales()) {
      kScaleCache_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "k_scale_cache");
      vScaleCache_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "v_scale_cache");
    }
    if (config_.checkBounds) boundsRecord_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "bounds_record");
    const Type i64 = Type::scalar(ScalarKind::I64);
    keyStrideToken_ = kernel.addParameter(i64, "key_stride_token", rowStride);
    keyStrideHead_ = kernel.addParameter(i64, "key_stride_head", rowStride);
    valueStrideToken_ = kernel.addParameter(i64, "value_stride_token", valueRowStride);
    valueStrideHead_ = kernel.addParameter(i64, "value_stride_head", valueRowStride);
    kvStrideBlock_ = kernel.addParameter(i64, "kv_stride_block", cacheStride);
    kvStrideKv_ = kernel.addParameter(i64, "kv_stride_kv", cacheStride);
    kvStrideToken_ = kernel.addParameter(i64, "kv_stride_token", cacheStride);
    kvStrideHead_ = kernel.addParameter(i64, "kv_stride_head", cacheStride);
    if (config_.separateScales()) {
      scaleStrideBlock_ = kernel.addParameter(i64, "scale_stride_block");
      scaleStrideToken_ = kernel.addParameter(i64, "scale_stride_token");
      scaleStrideHead_ = kernel.addParameter(i64, "scale_stride_head");
    }
    if (config_.checkBounds) numBlocks_ = kernel.addParameter(Type::scalar(ScalarKind::I32), "num_blocks");
  }

  void build() {
    const ScalarKind I64 = ScalarKind::I64;
    Value* token = b_.programId(0, "token");
    Value* headBlock = b_.programId(1, "head_block");
    Value* slot = b_.load(b_.addPtr(slotMapping_, token), nullptr, nullptr, "slot");
    Value* isWritten = b_.cmp(CmpPredicate::Ge, slot, b_.i64(0), "is_written");
    if (config_.checkBounds) isWritten = b_.andOp(isWritten, checkSlot(token, slot), "is_written_checked");
    b_.beginIf(isWritten);
    Value* blockSize = b_.cast(b_.constexprValue("BLOCK_SIZE", ScalarKind::I32), I64, "block_size");
    Value* block = b_.div(slot, blockSize, "block");
    Value* offset = b_.rem(slot, blockSize, "offset_in_block");
    Value* slotBase = b_.add(b_.mul(block, kvStrideBlock_), b_.mul(offset, kvStrideToken_), "slot_base");
    if (config_.separateScales())
      scaleSlot_ = b_.add(b_.mul(block, scaleStrideBlock_), b_.mul(offset, scaleStrideToken_), "scale_slot");

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
    const RowShape keyRows{config_.headSize, offsD64_, mask_};
    RowShape valueRows = keyRows;
    if (config_.effectiveValueHeadSize() != config_.headSize) {
      // DiffKV: value rows of their own (power-of-two padded) width.
      const int64_t DV = nextPowerOfTwo(config_.effectiveValueHeadSize());
      Value* offsDV = b_.arange(0, DV, "offs_dv");
      Value* valueHeadSize = b_.constexprValue("VALUE_HEAD_SIZE", ScalarKind::I32, "value_head_size");
      Value* dimMaskV = b_.cmp(CmpPredicate::Lt, offsDV, b_.splat(valueHeadSize, {DV}), "dim_mask_v");
      valueRows = {config_.effectiveValueHeadSize(), b_.cast(offsDV, I64, "offs_dv_i64"),
                   b_.andOp(asColumn(headMask_, DV), asRow(dimMaskV, H), "mask_v")};
    }
    head64_ = b_.cast(head_, I64, "head_i64");
    Value* token64 = b_.cast(token, I64, "token_i64");

    Value* kRowBase = b_.add(b_.splat(slotBase, {H}), b_.mul(head64_, b_.splat(kvStrideHead_, {H})), "k_row_base");
    Value* vRowBase = b_.add(kRowBase, b_.splat(kvStrideKv_, {H}), "v_row_base");
    // Both sources are loaded before either is converted: the stores of the keys
    // may alias the values as far as the GPU knows, so a value load after them
    // would wait for the keys' whole conversion.
    const LoadedRows keys = loadRows(key_, keyStrideToken_, keyStrideHead_, token64, keyRows, "k");
    const LoadedRows values = loadRows(value_, valueStrideToken_, valueStrideHead_, token64, valueRows, "v");
    writeRows(keys, kRowBase, kScale_, kScaleCache_, keyRows, "k");
    writeRows(values, vRowBase, vScale_, vScaleCache_, valueRows, "v");
    b_.endIf();
  }

 private:
  bool perTensorScale() const { return isPerTensorFp8(config_.cacheFormat); }

  // True when `slot` is -1 or inside the cache; otherwise records [SlotMapping, -1
  // (no sequence), token, slot saturated to i32] in bounds_record.
  Value* checkSlot(Value* token, Value* slot) {
    const ScalarKind I64 = ScalarKind::I64, I32 = ScalarKind::I32;
    Value* blockSize = b_.cast(b_.constexprValue("BLOCK_SIZE", I32), I64);
    Value* numSlots = b_.mul(b_.cast(numBlocks_, I64), blockSize, "num_slots");
    Value* outside = b_.orOp(b_.cmp(CmpPredicate::Lt, slot, b_.i64(-1)), b_.cmp(CmpPredicate::Ge, slot, numSlots),
                             "slot_outside_cache");
    Value* saturated = b_.cast(b_.min(b_.max(slot, b_.i64(std::numeric_limits<int32_t>::min())),
                                      b_.i64(std::numeric_limits<int32_t>::max())),
                               I32, "slot_i32");
    const Type i32 = Type::scalar(I32);
    Value* fields[kBoundsRecordInts] = {b_.constInt(static_cast<int32_t>(BoundsViolation::SlotMapping), i32),
                                        b_.constInt(-1, i32), token, saturated};
    for (int i = 0; i < kBoundsRecordInts; ++i)
      b_.store(i == 0 ? boundsRecord_ : b_.addPtr(boundsRecord_, b_.constInt(i, i32)), fields[i], outside);
    const Type i1 = Type::scalar(ScalarKind::I1);
    return b_.select(outside, b_.constInt(0, i1), b_.constInt(1, i1), "slot_inside_cache");
  }
  Value* asColumn(Value* vec, int64_t cols) { return broadcastAsColumn(b_, vec, cols); }
  Value* asRow(Value* vec, int64_t rows) { return broadcastAsRow(b_, vec, rows); }

  // The rows of one source: keys (head_size) or values (value_head_size, DiffKV).
  struct RowShape {
    int headSize;     // elements of a row
    Value* offsD64;   // [D_PADDED] column indices (i64)
    Value* mask;      // [H, D_PADDED]: valid head and column
  };

  // Token t's rows of one source as loaded: [H, D_PADDED] in the source dtype.
  struct LoadedRows {
    Value* x = nullptr;
  };

  LoadedRows loadRows(Value* source, Value* strideToken, Value* strideHead, Value* token64, const RowShape& rows,
                      const std::string& name) {
    const int64_t H = head_->type().shape()[0], D = rows.offsD64->type().shape()[0];
    const ScalarKind dt = config_.dtype;
    Value* sourceRow = b_.add(b_.splat(b_.mul(token64, strideToken), {H}), b_.mul(head64_, b_.splat(strideHead, {H})));
    Value* sourceOffset = b_.add(asColumn(sourceRow, D), asRow(rows.offsD64, H));
    return {b_.load(b_.addPtr(b_.splat(source, {H, D}), sourceOffset), rows.mask,
                    b_.constFloat(0.0, Type::tile({H, D}, Type::scalar(dt))), name + "_rows")};
  }

  // Converts one source's loaded rows and stores them at rowBase (one cache
  // offset per head).
  void writeRows(const LoadedRows& loaded, Value* rowBase, Value* scalePointer, Value* scaleCache,
                 const RowShape& rows, const std::string& name) {
    if (config_.asymmetricInt4()) {
      writeAsymmetricInt4Rows(loaded, rowBase, scaleCache, rows, name);
      return;
    }
    if (config_.cacheFormat == KvCacheFormat::Int4PerTokenHead) {
      writeInt4Rows(loaded, rowBase, scaleCache, rows, name);
      return;
    }
    const int64_t H = head_->type().shape()[0], D = rows.offsD64->type().shape()[0];
    const ScalarKind dt = config_.dtype, F32 = ScalarKind::F32, cacheKind = config_.cacheElement();
    Value* x = loaded.x;
    Value* cachePtrs = b_.addPtr(b_.splat(kvCache_, {H, D}), b_.add(asColumn(rowBase, D), asRow(rows.offsD64, H)),
                                 name + "_cache_ptrs");
    Value* xF32 = dt == F32 ? x : b_.cast(x, F32, name + "_f32");

    switch (config_.cacheFormat) {
      case KvCacheFormat::Auto:
        b_.store(cachePtrs, x, rows.mask);
        return;
      case KvCacheFormat::Fp8E4M3:
      case KvCacheFormat::Fp8E5M2: {
        Value* scaleTile = nullptr;
        if (config_.perHeadScales) {
          // One scale per KV head (1 for padding heads, which store nothing).
          const Type rowF32 = Type::tile({H}, Type::scalar(F32));
          Value* headScale = b_.load(b_.addPtr(b_.splat(scalePointer, {H}), head_), headMask_,
                                     b_.constFloat(1.0, rowF32), name + "_head_scale");
          scaleTile = asColumn(headScale, D);
        } else {
          scaleTile = b_.splat(b_.load(scalePointer, nullptr, nullptr, name + "_scale"), {H, D});
        }
        Value* scaled = b_.div(xF32, scaleTile, name + "_scaled");
        b_.store(cachePtrs, b_.cast(scaled, cacheKind, name + "_quantized"), rows.mask);
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
        b_.store(cachePtrs, quantized, rows.mask);
        storeRowScales(scale, rowBase, scaleCache, rows.headSize, name);
        return;
      }
      case KvCacheFormat::Int4PerTokenHead:
        return;  // writeInt4Rows, above
    }
  }

  // int4 per token-head: each row is quantized with its scale max|x| / 7 and
  // its two's-complement nibbles packed pairwise into bytes (storeNibblePairs).
  void writeInt4Rows(const LoadedRows& loaded, Value* rowBase, Value* scaleCache, const RowShape& rows,
                     const std::string& name) {
    const int64_t H = head_->type().shape()[0], D = rows.offsD64->type().shape()[0];
    const ScalarKind F32 = ScalarKind::F32, I32 = ScalarKind::I32;
    Value* x = config_.dtype == F32 ? loaded.x : b_.cast(loaded.x, F32, name + "_f32");
    const Type rowF32 = Type::tile({H}, Type::scalar(F32));
    Value* amax = b_.reduce(Opcode::ReduceMax, b_.unary(Opcode::Abs, x), 1, name + "_amax");
    Value* rawScale = b_.div(amax, b_.constFloat(config_.quantMax(), rowF32), name + "_raw_scale");
    Value* scale = b_.max(rawScale, b_.constFloat(kMinScale, rowF32), name + "_row_scale");
    Value* q = b_.cast(roundHalfAwayToInt8(b_.div(x, asColumn(scale, D)), name), I32, name + "_q");
    Value* nibbles = b_.andOp(q, b_.constInt(0xF, Type::tile({H, D}, Type::scalar(I32))), name + "_nibbles");
    storeNibblePairs(nibbles, rowBase, rows, name);
    storeRowScales(scale, rowBase, scaleCache, rows.headSize, name);
  }

  // [H, D] i32 nibbles (0 to 15) packed pairwise into bytes, element 2i in the
  // low nibble of byte i, and stored at each head's row: the [H, D] tile is
  // split into [H, D/2, 2] pairs (a reshape that keeps every element in its
  // register) and each pair's nibbles summed along the last axis, in the thread.
  void storeNibblePairs(Value* nibbles, Value* rowBase, const RowShape& rows, const std::string& name) {
    const int64_t H = head_->type().shape()[0], D = rows.offsD64->type().shape()[0], half = D / 2;
    const ScalarKind I32 = ScalarKind::I32;
    Value* pairs = b_.reshape(nibbles, {H, half, 2}, name + "_pairs");
    const Type pairI32 = Type::tile({2}, Type::scalar(I32));
    Value* shift = b_.mul(b_.arange(0, 2), b_.constInt(4, pairI32));
    Value* shift3 = b_.broadcast(b_.expandDims(b_.expandDims(shift, 0), 0), {H, half, 2});
    Value* packed = b_.cast(b_.reduce(Opcode::ReduceSum, b_.binary(Opcode::Shl, pairs, shift3), 2),
                            ScalarKind::I8, name + "_packed");
    Value* offsPair = b_.arange(0, half, name + "_offs_pair");
    Value* pairMask = b_.cmp(CmpPredicate::Lt, offsPair,
                             b_.splat(b_.constInt(rows.headSize / 2, Type::scalar(I32)), {half}), name + "_pair_mask");
    Value* mask = b_.andOp(asColumn(headMask_, half), asRow(pairMask, H), name + "_int4_mask");
    Value* pair64 = b_.cast(offsPair, ScalarKind::I64);
    Value* cachePtrs = b_.addPtr(b_.splat(kvCache_, {H, half}), b_.add(asColumn(rowBase, half), asRow(pair64, H)),
                                 name + "_cache_ptrs");
    b_.store(cachePtrs, packed, mask);
  }

  // Each row's f32 scale: after its values, or with separate scales at the
  // token's slot of the scale tensor, one f32 per head.
  void storeRowScales(Value* scale, Value* rowBase, Value* scaleCache, int rowHeadSize, const std::string& name) {
    if (!config_.separateScales()) {
      storeScaleBytes(scale, rowBase, rowHeadSize, name);
      return;
    }
    const int64_t H = scale->type().shape()[0];
    Value* offsets = b_.add(b_.splat(scaleSlot_, {H}), b_.mul(head64_, b_.splat(scaleStrideHead_, {H})),
                            name + "_scale_offsets");
    b_.store(b_.addPtr(b_.splat(scaleCache, {H}), offsets, name + "_scale_ptrs"), scale, headMask_);
  }

  // vLLM's asymmetric int4 (int4_per_token_head with separate scales), in the
  // arithmetic of its Triton writer so that both write the same bytes: scale =
  // max((max - min) / 15, 1e-6), zero point zp = clamp(round(-min / scale), 0,
  // 15), q = clamp(round(x · (1 / scale) + zp), 0, 15), where round(y) is
  // trunc(y ± 0.5) and the divisions are Triton's fp32 `/` (div.full.f32, 2 ulp;
  // the interpreter divides exactly) and the multiply-add fuses on the GPU as
  // Triton's does. The nibbles are unsigned; the scale is stored with zp in its
  // low four mantissa bits.
  void writeAsymmetricInt4Rows(const LoadedRows& loaded, Value* rowBase, Value* scaleCache, const RowShape& rows,
                               const std::string& name) {
    const int64_t H = head_->type().shape()[0], D = rows.offsD64->type().shape()[0];
    const ScalarKind F32 = ScalarKind::F32, I32 = ScalarKind::I32;
    Value* x = config_.dtype == F32 ? loaded.x : b_.cast(loaded.x, F32, name + "_f32");
    const Type rowF32 = Type::tile({H}, Type::scalar(F32)), tileF32 = Type::tile({H, D}, Type::scalar(F32));
    const double inf = std::numeric_limits<double>::infinity();
    Value* lo = b_.reduce(Opcode::ReduceMin, b_.select(rows.mask, x, b_.constFloat(inf, tileF32)), 1, name + "_min");
    Value* hi = b_.reduce(Opcode::ReduceMax, b_.select(rows.mask, x, b_.constFloat(-inf, tileF32)), 1, name + "_max");
    Value* rawScale = b_.divApprox(b_.sub(hi, lo), b_.constFloat(15.0, rowF32), name + "_raw_scale");
    Value* scale = b_.max(rawScale, b_.constFloat(kMinScale, rowF32), name + "_row_scale");
    Value* zeroPointRaw = b_.divApprox(b_.sub(b_.constFloat(0.0, rowF32), lo), scale, name + "_neg_min_over_scale");
    Value* zeroPoint = clampToNibble(roundHalfAwayByTrunc(zeroPointRaw, name + "_zero_point"), name + "_zero_point");
    Value* inverse = b_.divApprox(b_.constFloat(1.0, rowF32), scale, name + "_inverse_scale");
    Value* shifted = b_.add(b_.mul(x, asColumn(inverse, D)), asColumn(zeroPoint, D), name + "_shifted");
    Value* q = b_.cast(clampToNibble(roundHalfAwayByTrunc(shifted, name + "_q"), name + "_q"), I32, name + "_q_int");
    storeNibblePairs(q, rowBase, rows, name);
    const Type rowI32 = Type::tile({H}, Type::scalar(I32));
    Value* scaleBits = b_.andOp(b_.bitcast(scale, I32), b_.constInt(~int64_t{0xF}, rowI32), name + "_scale_high_bits");
    Value* packedBits = b_.orOp(scaleBits, b_.cast(zeroPoint, I32), name + "_scale_and_zero_point");
    storeRowScales(b_.bitcast(packedBits, F32, name + "_packed_scale"), rowBase, scaleCache, rows.headSize, name);
  }

  // trunc(y + 0.5) for y >= 0, trunc(y - 0.5) below (vLLM's int4 rounding), in f32.
  Value* roundHalfAwayByTrunc(Value* y, const std::string& name) {
    const Type shape = y->type();
    Value* half = b_.select(b_.cmp(CmpPredicate::Ge, y, b_.constFloat(0.0, shape)), b_.constFloat(0.5, shape),
                            b_.constFloat(-0.5, shape), name + "_half");
    return b_.cast(b_.cast(b_.add(y, half), ScalarKind::I32), ScalarKind::F32, name + "_rounded");
  }

  Value* clampToNibble(Value* y, const std::string& name) {
    const Type shape = y->type();
    return b_.min(b_.max(y, b_.constFloat(0.0, shape)), b_.constFloat(15.0, shape), name + "_clamped");
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
  void storeScaleBytes(Value* scale, Value* rowBase, int rowHeadSize, const std::string& name) {
    const int64_t H = scale->type().shape()[0];
    Value* bits = asColumn(b_.bitcast(scale, ScalarKind::I32, name + "_scale_bits"), 4);
    Value* shift = asRow(b_.mul(b_.arange(0, 4), b_.constInt(8, Type::tile({4}, Type::scalar(ScalarKind::I32)))), H);
    Value* bytes = b_.cast(b_.binary(Opcode::Shr, bits, shift), ScalarKind::I8, name + "_scale_bytes");
    Value* scaleOffset =
        b_.i64(kvCacheScaleByteOffset(config_.cacheFormat, rowHeadSize));
    Value* byteOffset = b_.add(asColumn(b_.add(rowBase, b_.splat(scaleOffset, {H})), 4),
                               asRow(b_.cast(b_.arange(0, 4), ScalarKind::I64), H));
    b_.store(b_.addPtr(b_.splat(kvCache_, {H, 4}), byteOffset, name + "_scale_ptrs"), bytes, asColumn(headMask_, 4));
  }

  Builder& b_;
  const CacheWriteConfig& config_;
  Value *key_ = nullptr, *value_ = nullptr, *kvCache_ = nullptr, *slotMapping_ = nullptr, *kScale_ = nullptr,
        *vScale_ = nullptr;
  Value *boundsRecord_ = nullptr, *numBlocks_ = nullptr;  // check_bounds
  // Separate per-token-head scales: the tensors, their strides and the token's slot.
  Value *kScaleCache_ = nullptr, *vScaleCache_ = nullptr, *scaleStrideBlock_ = nullptr, *scaleStrideToken_ = nullptr,
        *scaleStrideHead_ = nullptr, *scaleSlot_ = nullptr;
  Value *keyStrideToken_ = nullptr, *keyStrideHead_ = nullptr, *valueStrideToken_ = nullptr,
        *valueStrideHead_ = nullptr, *kvStrideBlock_ = nullptr, *kvStrideKv_ = nullptr, *kvStrideToken_ = nullptr,
        *kvStrideHead_ = nullptr;
  Value *head_ = nullptr, *head64_ = nullptr, *headMask_ = nullptr, *offsD64_ = nullptr, *mask_ = nullptr;
};

}  // namespace

ScalarKind CacheWriteConfig::cacheElement() const { return kvCacheValueKind(cacheFormat, dtype); }

ScalarKind CacheWriteConfig::cachePointerElement() const { return kvCachePointerKind(cacheFormat, dtype); }

int CacheWriteConfig::cacheRowElements() const { return kvCacheRowElements(cacheFormat, headSize, scaleLayout); }

int CacheWriteConfig::cacheValueRowElements() const {
  return kvCacheRowElements(cacheFormat, effectiveValueHeadSize(), scaleLayout);
}

int CacheWriteConfig::keyStrideDivisibility() const {
  if (sourceAlign < 16) return std::max(1, sourceAlign * 8 / ir::storageBits(dtype));
  return headSize % 8 == 0 ? 8 : 1;
}

int CacheWriteConfig::valueStrideDivisibility() const {
  if (sourceAlign < 16) return keyStrideDivisibility();
  return effectiveValueHeadSize() % 8 == 0 ? 8 : 1;
}

int CacheWriteConfig::cacheStrideDivisibility() const {
  if (cacheAlign < 16) return std::max(1, cacheAlign * 8 / ir::storageBits(cachePointerElement()));
  if (separateScales()) return byteRowStrideDivisibility(cacheRowElements(), cacheValueRowElements());
  // A per-token-head row is D + 4 bytes: only 4-byte multiples can be promised.
  // DiffKV's packed strides are sums of a K row and a V row.
  if (isPerTokenHead(cacheFormat))
    return kvCacheScaleByteOffset(cacheFormat, headSize) % 4 == 0 &&
                   kvCacheScaleByteOffset(cacheFormat, effectiveValueHeadSize()) % 4 == 0
               ? 4
               : 1;
  return std::gcd(headSize, effectiveValueHeadSize()) % 8 == 0 ? 8 : 1;
}

double CacheWriteConfig::quantMax() const { return kvCacheQuantMax(cacheFormat); }

int CacheWriteConfig::headsPerProgram() const {
  const int padded = nextPowerOfTwo(std::max(headSize, effectiveValueHeadSize()));
  return std::min(nextPowerOfTwo(numKvHeads), std::max(1, kMaxTileElements / padded));
}

std::string CacheWriteConfig::kernelName() const {
  std::string name = std::string("reshape_and_cache_") + ir::scalarName(dtype);
  if (cacheFormat != KvCacheFormat::Auto) name += std::string("_") + kvCacheFormatName(cacheFormat);
  name += "_kv" + std::to_string(numKvHeads) + "_d" + std::to_string(headSize);
  if (effectiveValueHeadSize() != headSize) name += "v" + std::to_string(effectiveValueHeadSize());
  name += "_bs" + std::to_string(blockSize);
  if (numWarps != CacheWriteConfig{}.numWarps) name += "_w" + std::to_string(numWarps);
  if (checkBounds) name += "_checked";
  if (perHeadScales) name += "_headscales";
  if (separateScales()) name += "_sepscales";
  if (sourceAlign != 16 || cacheAlign != 16)
    name += "_align" + std::to_string(sourceAlign) + "x" + std::to_string(cacheAlign);
  return name;
}

support::Status CacheWriteConfig::validate() const {
  if (support::Status s = checkIoDtype(dtype); !s) return s;
  const int sourceBytes = ir::storageBits(dtype) / 8, cacheBytes = std::max(1, ir::storageBits(cachePointerElement()) / 8);
  if (!isPowerOfTwo(sourceAlign) || sourceAlign > 16 || sourceAlign < sourceBytes)
    return configError("source_align (" + std::to_string(sourceAlign) + ") must be a power of two between " +
                       std::to_string(sourceBytes) + " (the " + ir::scalarName(dtype) + " element) and 16");
  if (!isPowerOfTwo(cacheAlign) || cacheAlign > 16 || cacheAlign < cacheBytes)
    return configError("cache_align (" + std::to_string(cacheAlign) + ") must be a power of two between " +
                       std::to_string(cacheBytes) + " (the cache element) and 16");
  if (numKvHeads < 1 || numKvHeads > 256)
    return configError("num_kv_heads (" + std::to_string(numKvHeads) + ") must be between 1 and 256");
  if (headSize < 1 || headSize > kMaxHeadSize)
    return configError(headSizeOutOfRange("head_size", headSize));
  if (blockSize < 1 || blockSize > 4096)
    return configError("block_size (" + std::to_string(blockSize) + ") must be between 1 and 4096");
  if (!isPowerOfTwo(numWarps) || numWarps > 16)
    return configError("num_warps (" + std::to_string(numWarps) + ") must be a power of two between 1 and 16");
  if (cacheFormat == KvCacheFormat::Int4PerTokenHead && (headSize % 2 != 0 || headSize < 4))
    return configError("head_size (" + std::to_string(headSize) +
                       ") must be even and at least 4 for kv_cache_dtype int4_per_token_head (two values per byte)");
  if (scaleLayout == KvScaleLayout::Separate && !isPerTokenHead(cacheFormat))
    return configError(std::string("kv_scales separate needs a per-token-head cache (int8_per_token_head, "
                                   "fp8_per_token_head or int4_per_token_head), got kv_cache_dtype ") +
                       kvCacheFormatName(cacheFormat));
  if (perHeadScales && !isPerTensorFp8(cacheFormat))
    return configError(std::string("per_head_scales needs a per-tensor fp8 cache (fp8_e4m3 or fp8_e5m2); "
                                   "kv_cache_dtype is ") +
                       kvCacheFormatName(cacheFormat));
  if (valueHeadSize != 0 && (valueHeadSize < 1 || valueHeadSize > kMaxHeadSize))
    return configError(headSizeOutOfRange("value_head_size", valueHeadSize) + " (0 = head_size)");
  if (cacheFormat == KvCacheFormat::Int4PerTokenHead && valueHeadSize != 0 &&
      (valueHeadSize % 2 != 0 || valueHeadSize < 4))
    return configError("value_head_size (" + std::to_string(valueHeadSize) +
                       ") must be even and at least 4 for kv_cache_dtype int4_per_token_head (two values per byte)");
  return support::Status::ok();
}

support::Expected<std::unique_ptr<ir::Kernel>> buildCacheWrite(const CacheWriteConfig& config) {
  if (support::Status s = config.validate(); !s) return s;
  auto kernel = std::make_unique<ir::Kernel>(config.kernelName());
  kernel->docLines().push_back(std::string("vLLM reshape_and_cache_flash, cache format ") +
                               kvCacheFormatName(config.cacheFormat) +
                               ": grid = (num_tokens, ceil(Hkv / HEADS_PER_PROGRAM)).");
  ir::setKernelAttribute(*kernel, ir::KernelAttribute::NumWarps, config.numWarps);
  auto& cx = kernel->constexprs();
  cx.push_back({"HEADS_PER_PROGRAM", int64_t{config.headsPerProgram()}});
  cx.push_back({"NUM_KV_HEADS", int64_t{config.numKvHeads}});
  cx.push_back({"HEAD_SIZE", int64_t{config.headSize}});
  cx.push_back({"HEAD_SIZE_PADDED", int64_t{nextPowerOfTwo(config.headSize)}});
  if (config.effectiveValueHeadSize() != config.headSize) {
    cx.push_back({"VALUE_HEAD_SIZE", int64_t{config.effectiveValueHeadSize()}});
    cx.push_back({"VALUE_HEAD_SIZE_PADDED", int64_t{nextPowerOfTwo(config.effectiveValueHeadSize())}});
  }
  cx.push_back({"BLOCK_SIZE", int64_t{config.blockSize}});
  Builder builder(*kernel);
  CacheWriteBuilder writer(builder, config);
  writer.declareParameters(*kernel);
  writer.build();
  if (support::Status s = builder.finish(); !s) return s;
  return kernel;
}

int64_t cacheWriteGridY(const CacheWriteConfig& config) {
  const int perProgram = config.headsPerProgram();
  return (config.numKvHeads + perProgram - 1) / perProgram;
}

}  // namespace attnjit::compiler
