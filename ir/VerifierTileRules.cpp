// Verifier rules of the grid queries, constants and the ops that create or
// reshape tiles (Ops.def, "Grid" and "Constants and tile creation").
#include <algorithm>
#include <variant>

#include "ir/VerifierRules.h"

namespace attnjit::ir {

namespace {
const Type kI32 = Type::scalar(ScalarKind::I32);

// An integer constant of `bits` bits may be written signed or unsigned (255 and -1
// are the same i8), so both ranges are accepted; i1 takes 0 or 1.
bool fitsInteger(int64_t v, ScalarKind k) {
  if (k == ScalarKind::I1) return v == 0 || v == 1;
  int bits = valueBits(k);
  if (bits >= 64) return true;
  return v >= -(int64_t{1} << (bits - 1)) && v <= (int64_t{1} << bits) - 1;
}
}  // namespace

support::Status verifyGridQuery(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 0));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {"axis"}));
  int64_t axis = 0;
  ATTNJIT_VERIFY(requireIntAttr(op, "axis", axis));
  if (axis < 0 || axis > 2) return opError(op, "grid axis must be 0, 1 or 2, got " + std::to_string(axis));
  return checkResultType(op, kI32, "grid indices are i32");
}

support::Status verifyConstant(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 0));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {"value"}));
  const Type& type = op.result()->type();
  if (type.hasPointerElements())
    return opError(op, "result type " + type.str() + " is not a scalar or a tile of scalars");
  const AttrValue* value = op.attrs().find("value");
  if (!value) return opError(op, "missing attribute 'value'");
  if (const auto* i = std::get_if<int64_t>(value)) {
    if (type.isIntLike() && !fitsInteger(*i, type.scalarKind()))
      return opError(op, "value " + std::to_string(*i) + " does not fit in " + type.elementType().str());
    return support::Status::ok();
  }
  if (std::holds_alternative<double>(*value)) {
    if (type.isIntLike())
      return opError(op, "float value " + attrValueStr(*value) + " for integer type " + type.str());
    return support::Status::ok();
  }
  return opError(op, "attribute 'value' must be an integer or a float, got " + attrValueStr(*value));
}

support::Status verifyConstexpr(const Operation& op, const Kernel& kernel) {
  ATTNJIT_VERIFY(checkOperandCount(op, 0));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {"name"}));
  std::string name;
  ATTNJIT_VERIFY(requireStringAttr(op, "name", name));
  const Constexpr* declared = kernel.findConstexpr(name);
  if (!declared) return opError(op, "'" + name + "' is not a constexpr of kernel '" + kernel.name() + "'");
  const Type& type = op.result()->type();
  if (!type.isScalar() || !isNumeric(type))
    return opError(op,
                   "result type " + type.str() + " must be a numeric scalar (an integer other than i1, or a float)");
  if (const auto* f = std::get_if<double>(&declared->value); f && type.isIntLike())
    return opError(op, "'" + name + "' is a float (" + attrValueStr(*f) + ") and cannot produce integer type " +
                           type.str());
  return support::Status::ok();
}

support::Status verifyArange(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 0));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {"start", "end"}));
  int64_t start = 0, end = 0;
  ATTNJIT_VERIFY(requireIntAttr(op, "start", start));
  ATTNJIT_VERIFY(requireIntAttr(op, "end", end));
  if (start >= end)
    return opError(op, "start (" + std::to_string(start) + ") must be less than end (" + std::to_string(end) + ")");
  if (start < INT32_MIN || end - 1 > INT32_MAX)
    return opError(op, "range [" + std::to_string(start) + ", " + std::to_string(end) + ") does not fit in i32");
  return checkResultShapeAndElement(op, Type::tile({end - start}, kI32),
                                    "[" + std::to_string(start) + ", " + std::to_string(end) + ") as i32");
}

support::Status verifySplat(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 1));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  const Type& in = op.operand(0)->type();
  const Type& out = op.result()->type();
  if (in.isTile()) return opError(op, "operand must be a scalar or a pointer, got " + in.str());
  if (!out.isTile()) return opError(op, "result type " + out.str() + " must be a tile");
  if (out.elementType() != in)
    return opError(op, "result element type " + out.elementType().str() + " differs from the operand type " +
                           in.str());
  return support::Status::ok();
}

support::Status verifyBroadcast(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 1));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  ATTNJIT_VERIFY(checkTileOperand(op, 0));
  const Type& in = op.operand(0)->type();
  const Type& out = op.result()->type();
  if (!out.isTile() || out.rank() != in.rank() || out.elementType() != in.elementType())
    return opError(op, "result type " + out.str() + " must be a tile of the operand's rank and element (" +
                           in.str() + ")");
  for (int d = 0; d < in.rank(); ++d)
    if (in.shape()[d] != 1 && in.shape()[d] != out.shape()[d])
      return opError(op, "cannot broadcast " + in.str() + " to " + out.str() + ": dimension " + std::to_string(d) +
                             " has extent " + std::to_string(in.shape()[d]) + ", not 1 or " +
                             std::to_string(out.shape()[d]));
  return support::Status::ok();
}

support::Status verifyExpandDims(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 1));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {"axis"}));
  ATTNJIT_VERIFY(checkTileOperand(op, 0));
  int64_t axis = 0;
  ATTNJIT_VERIFY(requireIntAttr(op, "axis", axis));
  const Type& in = op.operand(0)->type();
  if (axis < 0 || axis > in.rank())
    return opError(op, "axis " + std::to_string(axis) + " is out of range [0, " + std::to_string(in.rank()) +
                           "] for " + in.str());
  std::vector<int64_t> shape = in.shape();
  shape.insert(shape.begin() + axis, 1);
  return checkResultShapeAndElement(op, in.withShape(shape), "extent 1 inserted at axis " + std::to_string(axis));
}

support::Status verifyReshape(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 1));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  ATTNJIT_VERIFY(checkTileOperand(op, 0));
  const Type& in = op.operand(0)->type();
  const Type& out = op.result()->type();
  if (!out.isTile() || out.elementType() != in.elementType())
    return opError(op, "result type " + out.str() + " must be a tile of the operand's element (" + in.str() + ")");
  if (out.numElements() != in.numElements())
    return opError(op, "cannot reshape " + in.str() + " (" + std::to_string(in.numElements()) + " elements) to " +
                           out.str() + " (" + std::to_string(out.numElements()) + " elements)");
  return support::Status::ok();
}

support::Status verifyTranspose(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 1));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {"perm"}));
  ATTNJIT_VERIFY(checkTileOperand(op, 0));
  std::vector<int64_t> perm;
  ATTNJIT_VERIFY(requireIntListAttr(op, "perm", perm));
  const Type& in = op.operand(0)->type();
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool isPermutation = static_cast<int>(perm.size()) == in.rank();
  for (size_t i = 0; isPermutation && i < sorted.size(); ++i) isPermutation = sorted[i] == static_cast<int64_t>(i);
  if (!isPermutation)
    return opError(op, "perm " + shapeStr(perm) + " is not a permutation of the " + std::to_string(in.rank()) +
                           " dimensions of " + in.str());
  std::vector<int64_t> shape;
  for (int64_t p : perm) shape.push_back(in.shape()[p]);
  return checkResultShapeAndElement(op, in.withShape(shape), "dimension i is operand dimension perm[i]");
}

support::Status verifyConvertLayout(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 1));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  ATTNJIT_VERIFY(checkTileOperand(op, 0));
  const Type& in = op.operand(0)->type();
  return checkResultShapeAndElement(op, in, "only the layout may change");
}

}  // namespace attnjit::ir
