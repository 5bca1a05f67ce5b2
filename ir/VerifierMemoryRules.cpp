// Verifier rules of the memory ops: addptr, load, store. A pointer operand is a
// pointer or a tile of pointers; offsets, masks and values are elementwise
// companions of it (its shape and layout).
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

}  // namespace attnjit::ir
