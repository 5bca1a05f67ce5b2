#include "compiler/kernels/KvDequantization.h"

#include "compiler/kernels/Broadcasts.h"

namespace attnjit::compiler {

using ir::Opcode;
using ir::ScalarKind;
using ir::Type;
using ir::Value;

std::vector<Value*> dequantizedGroups(ir::Builder& b, KvCacheFormat format, ScalarKind dtype, Value* raw,
                                      const std::string& name, Value* zeroPoints) {
  const Type i32Tile = raw->type().withScalarKind(ScalarKind::I32);
  switch (format) {
    case KvCacheFormat::Auto:
      return {raw};
    case KvCacheFormat::Fp8E4M3:
    case KvCacheFormat::Fp8E5M2:
      return {b.cast(raw, dtype, name + "_values")};
    case KvCacheFormat::Fp8PerTokenHead:
      return {b.cast(b.bitcast(raw, ScalarKind::F8E4M3, name + "_fp8"), dtype, name + "_values")};
    case KvCacheFormat::Int8PerTokenHead:
      return {b.cast(raw, dtype, name + "_values")};
    case KvCacheFormat::Int4PerTokenHead: {
      // Each byte holds elements 2j (low nibble) and 2j + 1 (high). vLLM's
      // asymmetric format: unsigned nibbles u stand for u - zp. The symmetric
      // one: two's complement nibbles n, read as (n ^ 8) - 8.
      const int flip = zeroPoints ? 0 : 8;
      Value* points = zeroPoints ? zeroPoints : b.constInt(8, i32Tile);
      return {b.unpackNibbles(raw, points, false, flip, dtype, name + "_even"),
              b.unpackNibbles(raw, points, true, flip, dtype, name + "_odd")};
    }
  }
  return {raw};
}

ScaleAndZeroPoint splitScaleAndZeroPoint(ir::Builder& b, Value* packedScale, const std::string& name) {
  const Type i32 = packedScale->type().withScalarKind(ScalarKind::I32);
  Value* bits = b.bitcast(packedScale, ScalarKind::I32, name + "_packed_bits");
  Value* scale = b.bitcast(b.andOp(bits, b.constInt(~int64_t{0xF}, i32)), ScalarKind::F32, name + "_unpacked");
  Value* zeroPoint = b.andOp(bits, b.constInt(0xF, i32), name + "_zero_point");
  return {scale, zeroPoint};
}

Value* loadRowScales(ir::Builder& b, KvCacheFormat format, int strideDivisibility, Value* rowBase, Value* slotOffset,
                     Value* tileMask, int rowHeadSize, const std::string& name) {
  // The f32 after the row's values, loaded as an f32 through the row's byte
  // pointer reinterpreted (4-byte aligned: rows are D + 4 bytes and D is a
  // multiple of 4): one 4-byte load per key, which the pipeliner carries as one
  // register per thread. Four byte loads summed into an f32 would be pulled
  // apart right after their load, making each tile wait for it.
  const int64_t N = tileMask->type().shape()[0];
  const Type f32 = Type::scalar(ScalarKind::F32);
  Value* scaleOffset = b.add(slotOffset, b.constInt(kvCacheScaleByteOffset(format, rowHeadSize), slotOffset->type()),
                             name + "_scale_offset");
  if (strideDivisibility >= 4) {
    Value* scaleBytePointers = b.addPtr(b.splat(rowBase, {N}), scaleOffset, name + "_scale_byte_ptrs");
    Value* scalePointers = b.bitcast(scaleBytePointers, ScalarKind::F32, name + "_scale_ptrs");
    return b.load(scalePointers, tileMask, b.constFloat(0.0, Type::tile({N}, f32)), name + "_scale");
  }
  // Rows that are not 4-byte multiples (D or D/2 not a multiple of 4) leave the
  // scale unaligned: its four bytes as one [TILE, 4] tile, assembled
  // little-endian by a sum of shifted bytes along the row, in the layout they
  // were loaded in, so that only the f32 moves to the score layout.
  const Type bytesI32 = Type::tile({N, 4}, Type::scalar(ScalarKind::I32));
  Value* byteIndex = b.arange(0, 4, name + "_scale_byte_index");
  Value* offsets = b.add(broadcastAsColumn(b, scaleOffset, 4),
                         broadcastAsRow(b, b.cast(byteIndex, slotOffset->type().scalarKind()), N),
                         name + "_scale_byte_offsets");
  Value* bytes = b.load(b.addPtr(b.splat(rowBase, {N, 4}), offsets), broadcastAsColumn(b, tileMask, 4),
                        b.constInt(0, Type::tile({N, 4}, Type::scalar(ScalarKind::I8))), name + "_scale_bytes");
  Value* unsignedBytes = b.andOp(b.cast(bytes, ScalarKind::I32), b.constInt(0xFF, bytesI32));
  Value* shifts = broadcastAsRow(b, b.mul(byteIndex, b.constInt(8, byteIndex->type())), N);
  Value* placed = b.binary(Opcode::Shl, unsignedBytes, shifts, name + "_scale_placed");
  return b.bitcast(b.reduce(Opcode::ReduceSum, placed, 1, name + "_scale_bits"), ScalarKind::F32, name + "_scale");
}

}  // namespace attnjit::compiler
