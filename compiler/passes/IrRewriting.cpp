#include "compiler/passes/IrRewriting.h"

#include <unordered_map>

namespace attnjit::compiler {

using namespace ir;

size_t indexInBlock(const Operation& op) {
  const Block* block = op.parentBlock();
  ATTNJIT_CHECK(block, "op has no parent block");
  for (size_t i = 0; i < block->size(); ++i)
    if (block->operations()[i].get() == &op) return i;
  ATTNJIT_CHECK(false, "op not found in its parent block");
  return 0;
}

std::unique_ptr<Operation> cloneWithoutRegions(const Operation& op, const std::vector<Type>& resultTypes) {
  auto clone = std::make_unique<Operation>(op.opcode(), op.location());
  for (Value* v : op.operands()) clone->addOperand(v);
  for (size_t i = 0; i < resultTypes.size(); ++i) clone->addResult(resultTypes[i], op.result(i)->name());
  clone->attrs() = op.attrs();
  return clone;
}

void replaceAllUses(Block& block, Value* from, Value* to) {
  for (const auto& op : block.operations()) {
    for (size_t i = 0; i < op->numOperands(); ++i)
      if (op->operand(i) == from) op->setOperand(i, to);
    for (const auto& region : op->regions()) replaceAllUses(*region, from, to);
  }
}

std::unordered_map<const Value*, int> countUses(const Kernel& kernel) {
  std::unordered_map<const Value*, int> uses;
  walk(kernel.body(), [&](const Operation& op) {
    for (Value* v : op.operands()) ++uses[v];
  });
  return uses;
}

bool hasSideEffects(const Operation& op) {
  switch (op.opcode()) {
    case Opcode::Store:
    case Opcode::Yield:
    case Opcode::Return:
      return true;
    case Opcode::For:
    case Opcode::If: {
      bool effects = false;
      for (const auto& region : op.regions())
        walk(*region, [&](const Operation& inner) {
          if (inner.opcode() == Opcode::Store) effects = true;
        });
      return effects;
    }
    default:
      return false;
  }
}

}  // namespace attnjit::compiler
