// Verifier rules of the memory ops: addptr, load, store. A pointer operand is a
// pointer or a tile of pointers; offsets, masks and values are elementwise
// companions of it (its shape and layout).
#include "ir/LoadTensor.h"
#include "ir/VerifierRules.h"

namespace attnjit::ir {

namespace {
support::Status checkPointerOperand(const Operation& op) {
  const Type& ptr = op.operand(0)->type();
  if (ptr.hasPointerElements()) return support::Status::ok();
  return opError(op, operandStr(op, 0) + " must be a pointer or a tile of pointers, got " + ptr.str());
}

support::Status checkMask(const Operation& op, size_t index) {
  const Type& mask = op.operand(index)->type();
  const Type expected = op.operand(0)->type().withScalarKind(ScalarKind::I1);
  if (mask == expected) return support::Status::ok();
  return opError(op, "mask type " + mask.str() + " should be " + expected.str() + " (i1 of the pointer's shape)");
}
}  // namespace

support::Status verifyAddPtr(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 2));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  ATTNJIT_VERIFY(checkPointerOperand(op));
  const Type& ptr = op.operand(0)->type();
  const Type& offset = op.operand(1)->type();
  if (!offset.isIntLike() || offset.scalarKind() == ScalarKind::I1)
    return opError(op, "offset must be an integer other than i1, got " + offset.str());
  const Type expected = ptr.withScalarKind(offset.scalarKind());
  if (offset != expected)
    return opError(op, "offset type " + offset.str() + " does not match the shape of pointer " + ptr.str() +
                           " (expected " + expected.str() + ")");
  return checkResultType(op, ptr, "the pointer operand's type");
}

support::Status verifyLoad(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 1, 3));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  ATTNJIT_VERIFY(checkPointerOperand(op));
  const Type value = op.operand(0)->type().pointeeType();
  ATTNJIT_VERIFY(checkResultType(op, value, "the pointee type of " + op.operand(0)->type().str()));
  if (op.numOperands() >= 2) ATTNJIT_VERIFY(checkMask(op, 1));
  if (op.numOperands() == 3 && op.operand(2)->type() != value)
    return opError(op, "'other' (the value of masked-off elements) has type " + op.operand(2)->type().str() +
                           " but the loaded value is " + value.str());
  return support::Status::ok();
}

support::Status verifyStore(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 2, 3));
  ATTNJIT_VERIFY(checkResultCount(op, 0));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  ATTNJIT_VERIFY(checkPointerOperand(op));
  const Type& ptr = op.operand(0)->type();
  // Two i4 elements share a byte: storing one alone would need a read-modify-write
  // race between the threads owning the two nibbles.
  if (ptr.scalarKind() == ScalarKind::I4) return opError(op, "unsupported: store of i4 elements; pack pairs into i8");
  const Type value = ptr.pointeeType();
  if (op.operand(1)->type() != value)
    return opError(op, "value type " + op.operand(1)->type().str() + " should be " + value.str() +
                           " (the pointee type of " + ptr.str() + ")");
  if (op.numOperands() == 3) ATTNJIT_VERIFY(checkMask(op, 2));
  return support::Status::ok();
}

namespace {
bool isIndexScalar(const Type& t) {
  return t.isScalar() && (t.scalarKind() == ScalarKind::I32 || t.scalarKind() == ScalarKind::I64);
}
}  // namespace

support::Status verifyLoadTensor(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkKnownAttributes(op, {"rank", "rows", "gather"}));
  int64_t rank = 0, rows = 0;
  ATTNJIT_VERIFY(requireIntAttr(op, "rank", rank));
  ATTNJIT_VERIFY(requireIntAttr(op, "rows", rows));
  if (rank < kMinLoadTensorRank || rank > kMaxLoadTensorRank)
    return opError(op, "rank " + std::to_string(rank) + " is outside " + std::to_string(kMinLoadTensorRank) + " to " +
                           std::to_string(kMaxLoadTensorRank));
  const int n = static_cast<int>(rank);
  const size_t plain = loadTensorOperandCount(n, false);
  if (op.numOperands() != plain && op.numOperands() != plain + 2)
    return opError(op, "a rank-" + std::to_string(n) + " tensor takes " + std::to_string(plain) +
                           " operands (base, " + std::to_string(n) + " dimensions, " + std::to_string(n - 1) +
                           " strides, " + std::to_string(n) + " coordinates) and optionally the first and the end row read, got " +
                           std::to_string(op.numOperands()));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  if (rows < 1 || rows >= rank)
    return opError(op, "rows = " + std::to_string(rows) + " must name a dimension from 1 to " +
                           std::to_string(rank - 1) + " (dimension 0 holds the columns)");
  int64_t gather = -1;
  if (op.attrs().has("gather")) {
    ATTNJIT_VERIFY(requireIntAttr(op, "gather", gather));
    if (gather < 1 || gather >= rank || gather == rows)
      return opError(op, "gather = " + std::to_string(gather) + " must name a dimension from 1 to " +
                             std::to_string(rank - 1) + " other than rows (" + std::to_string(rows) + ")");
  }
  const LoadTensorOperands roles = loadTensorOperands(op);
  const Type& base = roles.base->type();
  if (!base.isPointer() || base.addressSpace() != AddressSpace::Global)
    return opError(op, operandStr(op, 0) + " (the base) must be a global pointer, got " + base.str());
  if (base.scalarKind() == ScalarKind::I4)
    return opError(op, "unsupported: load_tensor of i4 elements; load the bytes as i8");
  for (int k = 0; k < n; ++k)
    if (!isIndexScalar(roles.dims[static_cast<size_t>(k)]->type()))
      return opError(op, operandStr(op, 1 + static_cast<size_t>(k)) + " (dimension " + std::to_string(k) +
                             "'s extent) must be an i32 or i64 scalar, got " +
                             roles.dims[static_cast<size_t>(k)]->type().str());
  for (int k = 1; k < n; ++k)
    if (!isIndexScalar(roles.strides[static_cast<size_t>(k - 1)]->type()))
      return opError(op, operandStr(op, static_cast<size_t>(n + k)) + " (dimension " + std::to_string(k) +
                             "'s stride) must be an i32 or i64 scalar, got " +
                             roles.strides[static_cast<size_t>(k - 1)]->type().str());
  const Type& result = op.result()->type();
  if (!result.isTile() || result.rank() != 2)
    return opError(op, "the result must be a rank-2 tile (rows × columns), got " + result.str());
  const int64_t R = result.shape()[0], C = result.shape()[1];
  ATTNJIT_VERIFY(checkResultShapeAndElement(op, Type::tile({R, C}, base.pointeeType()),
                                            "tile<" + std::to_string(R) + "x" + std::to_string(C) + "x" +
                                                scalarName(base.scalarKind()) + "> (the base's element type)"));
  const Type i32 = Type::scalar(ScalarKind::I32);
  for (int k = 0; k < n; ++k) {
    const size_t index = static_cast<size_t>(2 * n + k);
    const Type& coord = roles.coords[static_cast<size_t>(k)]->type();
    if (k == gather) {
      if (!coord.isTile() || coord.rank() != 1 || coord.scalarKind() != ScalarKind::I32 ||
          coord.hasPointerElements())
        return opError(op, operandStr(op, index) + " (the gathered coordinate of dimension " + std::to_string(k) +
                               ") must be a rank-1 tile of i32, got " + coord.str());
      const int64_t G = coord.shape()[0];
      if (R % G != 0)
        return opError(op, std::to_string(G) + " gathered entries do not divide the " + std::to_string(R) +
                               " rows");
    } else if (coord != i32) {
      return opError(op, operandStr(op, index) + " (the coordinate of dimension " + std::to_string(k) +
                             ") must be an i32 scalar, got " + coord.str());
    }
  }
  if (roles.rowBegin) {
    const size_t index = loadTensorOperandCount(n, false);
    for (size_t r = 0; r < 2; ++r)
      if (op.operand(index + r)->type() != i32)
        return opError(op, operandStr(op, index + r) + (r == 0 ? " (the first row read)" : " (the end of the rows read)") +
                               " must be an i32 scalar, got " + op.operand(index + r)->type().str());
  }
  return support::Status::ok();
}

}  // namespace attnjit::ir
