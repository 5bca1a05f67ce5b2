#include "ir/VerifierRules.h"

#include <variant>

namespace attnjit::ir {

namespace {
const char* attrKindName(const AttrValue& v) {
  if (std::holds_alternative<int64_t>(v)) return "an integer";
  if (std::holds_alternative<double>(v)) return "a float";
  if (std::holds_alternative<std::string>(v)) return "a string";
  if (std::holds_alternative<std::vector<int64_t>>(v)) return "an integer list";
  return "a type";
}

template <typename T>
support::Status requireAttr(const Operation& op, std::string_view key, const char* kindName, T& out) {
  const AttrValue* v = op.attrs().find(key);
  if (!v) return opError(op, "missing attribute '" + std::string(key) + "'");
  if (!std::holds_alternative<T>(*v))
    return opError(op, "attribute '" + std::string(key) + "' must be " + kindName + ", got " + attrKindName(*v) +
                           " (" + attrValueStr(*v) + ")");
  out = std::get<T>(*v);
  return support::Status::ok();
}
}  // namespace

support::Status opError(const Operation& op, const std::string& message) {
  return support::Status::error(op.location(), std::string("'") + op.name() + "': " + message);
}

std::string shapeStr(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string typeListStr(const std::vector<Type>& types) {
  std::string s = "(";
  for (size_t i = 0; i < types.size(); ++i) s += (i ? ", " : "") + types[i].str();
  return s + ")";
}

std::vector<Type> operandTypes(const Operation& op) {
  std::vector<Type> types;
  for (const Value* v : op.operands()) types.push_back(v->type());
  return types;
}

std::vector<Type> resultTypes(const Operation& op) {
  std::vector<Type> types;
  for (const auto& v : op.results()) types.push_back(v->type());
  return types;
}

std::string operandStr(const Operation& op, size_t index) {
  std::string s = "operand " + std::to_string(index);
  const Value* v = op.operand(index);
  if (v && !v->name().empty()) s += " ('" + v->name() + "')";
  return s;
}

std::string typeDefect(const Type& t) {
  if (t.isTile()) {
    if (t.rank() < 1 || t.rank() > 3) return "a tile has rank 1 to 3, not " + std::to_string(t.rank());
    int64_t elements = 1;
    for (int64_t extent : t.shape()) {
      if (extent < 1) return "tile extents must be positive, got shape " + shapeStr(t.shape());
      if (extent > kMaxTileElements / elements)
        return "a tile holds at most " + std::to_string(kMaxTileElements) + " elements, got shape " +
               shapeStr(t.shape());
      elements *= extent;
    }
  } else if (t.layout()) {
    return "only tiles have a layout";
  }
  return {};
}

support::Status checkOperandsPresent(const Operation& op) {
  for (size_t i = 0; i < op.numOperands(); ++i)
    if (!op.operand(i)) return opError(op, "operand " + std::to_string(i) + " is null");
  return support::Status::ok();
}

support::Status checkOperandCount(const Operation& op, size_t count) {
  if (op.numOperands() == count) return support::Status::ok();
  return opError(op, "expected " + std::to_string(count) + " operand" + (count == 1 ? "" : "s") + ", got " +
                         std::to_string(op.numOperands()));
}

support::Status checkOperandCount(const Operation& op, size_t min, size_t max) {
  if (op.numOperands() >= min && op.numOperands() <= max) return support::Status::ok();
  return opError(op, "expected " + std::to_string(min) + " to " + std::to_string(max) + " operands, got " +
                         std::to_string(op.numOperands()));
}

support::Status checkResultCount(const Operation& op, size_t count) {
  if (op.numResults() == count) return support::Status::ok();
  return opError(op, "expected " + std::to_string(count) + " result" + (count == 1 ? "" : "s") + ", got " +
                         std::to_string(op.numResults()));
}

support::Status checkRegionCount(const Operation& op, size_t count) {
  if (op.numRegions() == count) return support::Status::ok();
  return opError(op, "expected " + std::to_string(count) + " region" + (count == 1 ? "" : "s") + ", got " +
                         std::to_string(op.numRegions()));
}

support::Status checkKnownAttributes(const Operation& op, std::initializer_list<std::string_view> known) {
  for (const auto& [key, value] : op.attrs().entries()) {
    bool isKnown = false;
    for (std::string_view k : known) isKnown = isKnown || k == key;
    if (isKnown) continue;
    std::string expected;
    for (std::string_view k : known) expected += (expected.empty() ? "" : ", ") + std::string(k);
    return opError(op, "unknown attribute '" + key + "'" +
                           (expected.empty() ? " (it takes none)" : " (it takes " + expected + ")"));
  }
  return support::Status::ok();
}

support::Status requireIntAttr(const Operation& op, std::string_view key, int64_t& out) {
  return requireAttr(op, key, "an integer", out);
}

support::Status requireStringAttr(const Operation& op, std::string_view key, std::string& out) {
  return requireAttr(op, key, "a string", out);
}

support::Status requireIntListAttr(const Operation& op, std::string_view key, std::vector<int64_t>& out) {
  return requireAttr(op, key, "an integer list", out);
}

support::Status optionalStringAttr(const Operation& op, std::string_view key, std::string& out) {
  if (!op.attrs().has(key)) return support::Status::ok();
  return requireStringAttr(op, key, out);
}

bool isNumeric(const Type& t) {
  return !t.hasPointerElements() && t.scalarKind() != ScalarKind::I1;
}

support::Status checkResultType(const Operation& op, const Type& expected, const std::string& why) {
  const Type& actual = op.result()->type();
  if (actual == expected) return support::Status::ok();
  return opError(op, "result type " + actual.str() + " should be " + expected.str() + " (" + why + ")");
}

support::Status checkResultShapeAndElement(const Operation& op, const Type& expected, const std::string& why) {
  const Type& actual = op.result()->type();
  if (actual.sameShapeAndElement(expected)) return support::Status::ok();
  return opError(op, "result type " + actual.str() + " should be " + expected.str() + " (" + why + ")");
}

support::Status checkTileOperand(const Operation& op, size_t index) {
  const Type& t = op.operand(index)->type();
  if (t.isTile()) return support::Status::ok();
  return opError(op, operandStr(op, index) + " must be a tile, got " + t.str());
}

support::Status checkYieldMatchesParent(const Operation& yieldOp, const Operation& parent) {
  ATTNJIT_VERIFY(checkOperandsPresent(yieldOp));
  if (yieldOp.numOperands() != parent.numResults()) {
    // "2 values (f32, i32)", "1 value (f32)", "0 values"
    auto counted = [](const std::vector<Type>& types, const std::string& noun) {
      std::string s = std::to_string(types.size()) + " " + noun + (types.size() == 1 ? "" : "s");
      return types.empty() ? s : s + " " + typeListStr(types);
    };
    return opError(yieldOp, "yields " + counted(operandTypes(yieldOp), "value") + " but the enclosing '" +
                                parent.name() + "' has " + counted(resultTypes(parent), "result"));
  }
  for (size_t i = 0; i < yieldOp.numOperands(); ++i) {
    const Type& yielded = yieldOp.operand(i)->type();
    const Type& expected = parent.result(i)->type();
    if (yielded != expected)
      return opError(yieldOp, "value " + std::to_string(i) + " has type " + yielded.str() + " but result " +
                                  std::to_string(i) + " of the enclosing '" + parent.name() + "' has type " +
                                  expected.str());
  }
  return support::Status::ok();
}

support::Status checkRegionEndsWithYield(const Operation& op, size_t index, const char* regionName) {
  const Block& region = *op.region(index);
  if (region.empty()) return opError(op, std::string(regionName) + " is empty; it must end with 'yield'");
  const Operation& last = *region.back();
  if (last.opcode() != Opcode::Yield)
    return opError(op, std::string(regionName) + " must end with 'yield', but ends with '" + last.name() + "'");
  return checkYieldMatchesParent(last, op);
}

}  // namespace attnjit::ir
