#include "ir/LoadTensor.h"

namespace attnjit::ir {

std::vector<Value*> LoadTensorOperands::flatten() const {
  std::vector<Value*> operands{base};
  operands.insert(operands.end(), dims.begin(), dims.end());
  operands.insert(operands.end(), strides.begin(), strides.end());
  operands.insert(operands.end(), coords.begin(), coords.end());
  if (rowBegin) {
    operands.push_back(rowBegin);
    operands.push_back(rowEnd);
  }
  return operands;
}

Attributes LoadTensorOperands::attributes() const {
  Attributes attrs;
  attrs.set("rank", int64_t{rank()});
  attrs.set("rows", int64_t{rowsDim});
  if (gatherDim >= 0) attrs.set("gather", int64_t{gatherDim});
  return attrs;
}

LoadTensorOperands loadTensorOperands(const Operation& op) {
  ATTNJIT_CHECK(op.opcode() == Opcode::LoadTensor, "loadTensorOperands of another op");
  const int n = static_cast<int>(op.attrs().getInt("rank"));
  LoadTensorOperands roles;
  size_t next = 0;
  roles.base = op.operand(next++);
  for (int k = 0; k < n; ++k) roles.dims.push_back(op.operand(next++));
  for (int k = 1; k < n; ++k) roles.strides.push_back(op.operand(next++));
  for (int k = 0; k < n; ++k) roles.coords.push_back(op.operand(next++));
  if (next + 2 <= op.numOperands()) {
    roles.rowBegin = op.operand(next);
    roles.rowEnd = op.operand(next + 1);
  }
  roles.rowsDim = static_cast<int>(op.attrs().getInt("rows"));
  if (op.attrs().has("gather")) roles.gatherDim = static_cast<int>(op.attrs().getInt("gather"));
  return roles;
}

std::optional<HostValue> hostValue(const Kernel& kernel, const Value* value) {
  if (const Operation* def = value->definingOp()) {
    const int64_t* integer = nullptr;
    if (def->opcode() == Opcode::Constant) {
      integer = std::get_if<int64_t>(def->attrs().find("value"));
    } else if (def->opcode() == Opcode::Constexpr) {
      const Constexpr* c = kernel.findConstexpr(def->attrs().getString("name"));
      integer = c ? std::get_if<int64_t>(&c->value) : nullptr;
    }
    if (!integer) return std::nullopt;
    return HostValue{-1, *integer};
  }
  if (value->ownerBlock() != &kernel.body()) return std::nullopt;
  return HostValue{static_cast<int>(value->index()), 0};
}

}  // namespace attnjit::ir
