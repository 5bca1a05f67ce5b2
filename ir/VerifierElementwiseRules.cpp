// Verifier rules of the elementwise ops: binary, unary, cmp, select, cast,
// bitcast. Elementwise operands have identical types, layout included:
// broadcasting and layout changes are explicit ops.
#include "ir/VerifierRules.h"

namespace attnjit::ir {

namespace {
bool isBitwise(Opcode op) { return op == Opcode::And || op == Opcode::Or || op == Opcode::Xor; }
bool isShift(Opcode op) { return op == Opcode::Shl || op == Opcode::Shr; }
bool isFloatOnly(Opcode op) { return op != Opcode::Neg && op != Opcode::Abs; }

support::Status checkSameOperandTypes(const Operation& op, size_t first, size_t second) {
  const Type& a = op.operand(first)->type();
  const Type& b = op.operand(second)->type();
  if (a == b) return support::Status::ok();
  return opError(op, "operand types differ: " + a.str() + " vs " + b.str() +
                         " (elementwise operands have one type; use splat, broadcast, cast or convert_layout)");
}
}  // namespace

support::Status verifyBinary(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 2));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  if (op.opcode() == Opcode::Div) {
    ATTNJIT_VERIFY(checkKnownAttributes(op, {"approx"}));
  } else if (op.opcode() == Opcode::Mul) {
    ATTNJIT_VERIFY(checkKnownAttributes(op, {"skip_ones"}));
  } else {
    ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  }
  ATTNJIT_VERIFY(checkSameOperandTypes(op, 0, 1));
  const Type& type = op.operand(0)->type();
  for (const char* flag : {"approx", "skip_ones"}) {
    if (!op.attrs().has(flag)) continue;
    int64_t value = 0;
    ATTNJIT_VERIFY(requireIntAttr(op, flag, value));
    if (value != 0 && value != 1)
      return opError(op, std::string("attribute '") + flag + "' must be 0 or 1, got " + std::to_string(value));
    if (!type.isFloatLike())
      return opError(op, std::string("attribute '") + flag + "' needs float operands, got " + type.str());
  }
  if (type.hasPointerElements())
    return opError(op, "operands of type " + type.str() + " are pointers; pointer arithmetic is 'addptr'");
  if ((isBitwise(op.opcode()) || isShift(op.opcode())) && !type.isIntLike())
    return opError(op, "requires integer operands, got " + type.str());
  if (type.scalarKind() == ScalarKind::I1 && !isBitwise(op.opcode()))
    return opError(op, "not defined on i1 operands (" + type.str() + "); only and, or, xor are");
  return checkResultType(op, type, "the operand type");
}

support::Status verifyUnary(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 1));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  const Type& type = op.operand(0)->type();
  if (isFloatOnly(op.opcode()) && !type.isFloatLike())
    return opError(op, "requires float operands, got " + type.str());
  if (!isNumeric(type)) return opError(op, "requires numeric operands, got " + type.str());
  return checkResultType(op, type, "the operand type");
}

support::Status verifyCompare(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 2));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {"pred"}));
  std::string predName;
  ATTNJIT_VERIFY(requireStringAttr(op, "pred", predName));
  CmpPredicate pred;
  if (!parseCmpPredicate(predName, pred))
    return opError(op, "unknown predicate '" + predName + "' (expected eq, ne, lt, le, gt or ge)");
  ATTNJIT_VERIFY(checkSameOperandTypes(op, 0, 1));
  const Type& type = op.operand(0)->type();
  if (type.hasPointerElements()) return opError(op, "cannot compare pointers (" + type.str() + ")");
  return checkResultType(op, type.withScalarKind(ScalarKind::I1), "i1 of the operands' shape");
}

support::Status verifySelect(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 3));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  ATTNJIT_VERIFY(checkSameOperandTypes(op, 1, 2));
  const Type& cond = op.operand(0)->type();
  const Type& type = op.operand(1)->type();
  if (cond.hasPointerElements() || cond.scalarKind() != ScalarKind::I1)
    return opError(op, "condition must be i1, got " + cond.str());
  if (!cond.isTile() && type.isTile())
    return opError(op, "condition " + cond.str() + " is a scalar but the operands are tiles (" + type.str() +
                           "); splat it to their shape");
  const Type expectedCond = type.withScalarKind(ScalarKind::I1);
  if (cond != expectedCond)
    return opError(op, "condition type " + cond.str() + " should be " + expectedCond.str() +
                           " (i1 of the operands' shape)");
  return checkResultType(op, type, "the operand type");
}

support::Status verifyCast(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 1));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  const Type& in = op.operand(0)->type();
  const Type& out = op.result()->type();
  if (in.hasPointerElements() || out.hasPointerElements())
    return opError(op, "cannot cast pointers (" + in.str() + " to " + out.str() + ")");
  return checkResultType(op, in.withScalarKind(out.scalarKind()), "the operand's shape and layout");
}

support::Status verifyUnpackNibbles(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 2));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {"high", "flip"}));
  int64_t high = 0, flip = 0;
  ATTNJIT_VERIFY(requireIntAttr(op, "high", high));
  if (high != 0 && high != 1)
    return opError(op, "high must be 0 (bits 0-3) or 1 (bits 4-7), got " + std::to_string(high));
  if (op.attrs().has("flip")) {
    ATTNJIT_VERIFY(requireIntAttr(op, "flip", flip));
    if (flip < 0 || flip > 15)
      return opError(op, "flip must be in [0, 15] (it XORs a nibble), got " + std::to_string(flip));
  }
  const Type& bytes = op.operand(0)->type();
  if (bytes.hasPointerElements() || bytes.scalarKind() != ScalarKind::I8)
    return opError(op, "bytes must be i8, got " + bytes.str());
  const Type zeroPoints = op.operand(1)->type();
  if (zeroPoints != bytes.withScalarKind(ScalarKind::I32))
    return opError(op, "zero points have type " + zeroPoints.str() + ", expected " +
                           bytes.withScalarKind(ScalarKind::I32).str() + " (i32 of the bytes' shape)");
  const ScalarKind to = op.result()->type().scalarKind();
  if (op.result()->type().hasPointerElements() ||
      (to != ScalarKind::F16 && to != ScalarKind::BF16 && to != ScalarKind::F32))
    return opError(op, "result must be f16, bf16 or f32, got " + op.result()->type().str());
  return checkResultType(op, bytes.withScalarKind(to), "the bytes' shape and layout");
}

support::Status verifyBitcast(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 1));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  const Type& in = op.operand(0)->type();
  const Type& out = op.result()->type();
  if (in.hasPointerElements() || out.hasPointerElements()) {
    // A pointer to another pointee at the same byte address (e.g. a 4-byte scale
    // inside a row of bytes). i4 pointers address nibbles, so they have none.
    if (!in.hasPointerElements() || !out.hasPointerElements())
      return opError(op, "cannot bitcast between pointers and values (" + in.str() + " to " + out.str() + ")");
    if (in.addressSpace() != out.addressSpace())
      return opError(op, "cannot bitcast pointers to another address space (" + in.str() + " to " + out.str() + ")");
    if (in.scalarKind() == ScalarKind::I4 || out.scalarKind() == ScalarKind::I4)
      return opError(op, "i4 pointers address nibbles and cannot be reinterpreted (" + in.str() + " to " +
                             out.str() + ")");
    return checkResultType(op, in.withElement(Type::pointer(out.scalarKind(), in.addressSpace())),
                           "the operand's shape and layout");
  }
  if (in.scalarKind() == ScalarKind::I1 || out.scalarKind() == ScalarKind::I1)
    return opError(op, "i1 has no bit representation to reinterpret (" + in.str() + " to " + out.str() +
                           "); use cast");
  const int inBits = storageBits(in.scalarKind()), outBits = storageBits(out.scalarKind());
  if (inBits != outBits)
    return opError(op, "element widths differ: " + in.str() + " has " + std::to_string(inBits) + "-bit elements, " +
                           out.str() + " " + std::to_string(outBits) + "-bit ones");
  return checkResultType(op, in.withScalarKind(out.scalarKind()), "the operand's shape and layout");
}

}  // namespace attnjit::ir
