// Dead-code and common-subexpression elimination on tile IR.
#include <map>
#include <unordered_map>

#include "compiler/passes/IrRewriting.h"
#include "compiler/passes/Passes.h"
#include "ir/Printer.h"

namespace attnjit::compiler {

using namespace ir;

namespace {

bool removeDeadOps(Block& block, std::unordered_map<const Value*, int>& uses) {
  bool changed = false;
  for (size_t i = block.size(); i-- > 0;) {
    Operation& op = *block.operations()[i];
    for (const auto& region : op.regions()) changed |= removeDeadOps(*region, uses);
    if (hasSideEffects(op)) continue;
    bool used = false;
    for (const auto& r : op.results()) used |= uses[r.get()] > 0;
    if (used) continue;
    for (Value* v : op.operands()) --uses[v];
    block.remove(i);
    changed = true;
  }
  return changed;
}

// Drops the loop-carried values of `for` loops that nothing reads: the loop's
// result is unused and the body argument feeds at most its own yield (a value
// the pipeliner carried for a use that layout assignment later recomputed in
// place). The ops computing the yielded value then die with it.
bool removeDeadCarriedValues(Block& block, std::unordered_map<const Value*, int>& uses) {
  bool changed = false;
  for (const auto& op : block.operations()) {
    for (const auto& region : op->regions()) changed |= removeDeadCarriedValues(*region, uses);
    if (op->opcode() != Opcode::For) continue;
    Block& body = *op->region(0);
    Operation* yield = body.back();
    if (!yield || yield->opcode() != Opcode::Yield) continue;
    for (size_t i = op->numResults(); i-- > 0;) {
      Value* argument = body.argument(i + 1);
      const int selfUses = yield->operand(i) == argument ? 1 : 0;
      if (uses[op->result(i)] > 0 || uses[argument] > selfUses) continue;
      --uses[yield->operand(i)];
      --uses[op->operand(3 + i)];
      yield->removeOperand(i);
      body.removeArgument(i + 1);
      op->removeOperand(3 + i);
      op->removeResult(i);
      changed = true;
    }
  }
  return changed;
}

// Key identifying what an op computes: opcode, operands, attributes, result types.
std::string cseKey(const Operation& op) {
  std::string key = op.name();
  for (Value* v : op.operands()) key += " " + std::to_string(reinterpret_cast<uintptr_t>(v));
  for (const auto& [k, v] : op.attrs().entries()) key += " " + k + "=" + attrValueStr(v);
  for (const auto& r : op.results()) key += " :" + r->type().str();
  return key;
}

bool isCseCandidate(const Operation& op) {
  if (op.numRegions() > 0 || op.numResults() == 0 || hasSideEffects(op)) return false;
  // Loads may observe stores between them.
  return op.opcode() != Opcode::Load;
}

void cseBlock(Block& block, std::vector<std::map<std::string, Value*>>& scopes, Kernel& kernel) {
  scopes.emplace_back();
  for (size_t i = 0; i < block.size();) {
    Operation& op = *block.operations()[i];
    if (isCseCandidate(op)) {
      std::string key = cseKey(op);
      Value* existing = nullptr;
      for (auto it = scopes.rbegin(); it != scopes.rend() && !existing; ++it)
        if (auto found = it->find(key); found != it->end()) existing = found->second;
      if (existing && op.numResults() == 1) {
        replaceAllUses(kernel.body(), op.result(), existing);
        block.remove(i);
        continue;
      }
      if (op.numResults() == 1) scopes.back().emplace(key, op.result());
    }
    for (const auto& region : op.regions()) cseBlock(*region, scopes, kernel);
    ++i;
  }
  scopes.pop_back();
}

}  // namespace

support::Status eliminateDeadCode(Kernel& kernel, const PassOptions&) {
  // Uses are recounted each round: removing a loop drops the uses inside it.
  for (bool changed = true; changed;) {
    auto uses = countUses(kernel);
    changed = removeDeadCarriedValues(kernel.body(), uses);
    changed |= removeDeadOps(kernel.body(), uses);
  }
  return support::Status::ok();
}

support::Status eliminateCommonSubexpressions(Kernel& kernel, const PassOptions&) {
  std::vector<std::map<std::string, Value*>> scopes;
  cseBlock(kernel.body(), scopes, kernel);
  return support::Status::ok();
}

}  // namespace attnjit::compiler
