// Conditions that would live through a loop, computed again after it.
//
// A tile's row mask serves twice in an attention kernel: for the Q load before
// the KV loop and for the output store after it. LLVM computes it once (CSE), so
// each of its per-thread elements is a PTX predicate live through the loop: 16
// for a 128-row prefill tile. The SM has 7 predicate registers; ptxas keeps the
// rest in general registers, and at prefill's 255 registers that pressure spills
// inside both KV loops (SASS: local loads and stores every iteration), which
// slows causal prefill. Computed again after the loop from the integers it
// compared (which ptxas handles as ordinary registers), the kernel spills less,
// and only outside the loops (measured: docs/perf-log.md, 2026-11-30).
//
// Only i1 values are copied, with the i1 values they are made of; their integer
// and float operands stay as they are (they dominate the original, which
// dominates its uses). Compares and boolean logic have no side effects, so a copy
// computes the same value wherever its operands are available.
#include "codegen/lower/LoopCrossingPredicates.h"

#include "codegen/lower/InlinePtx.h"

#include <llvm/Analysis/CFG.h>
#include <llvm/Analysis/LoopInfo.h>
#include <llvm/IR/Dominators.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>
#include <llvm/Transforms/Utils/Local.h>

#include <map>
#include <utility>
#include <vector>

namespace attnjit::codegen {

namespace {

bool isPredicateComputation(const llvm::Instruction& inst) {
  if (!inst.getType()->isIntegerTy(1)) return false;
  if (llvm::isa<llvm::CmpInst>(inst)) return true;
  if (const auto* binary = llvm::dyn_cast<llvm::BinaryOperator>(&inst)) {
    const auto op = binary->getOpcode();
    return op == llvm::Instruction::And || op == llvm::Instruction::Or || op == llvm::Instruction::Xor;
  }
  return false;
}

// `value` moved into a fresh register by inline PTX, before `where`; null for
// constants and for types without a register constraint.
llvm::Value* opaqueCopy(llvm::Value* value, llvm::Instruction* where) {
  if (llvm::isa<llvm::Constant>(value)) return nullptr;
  llvm::Type* type = value->getType();
  const char* constraint = nullptr;
  const char* text = nullptr;
  if (type->isIntegerTy(16)) {
    constraint = "h";
    text = "mov.b16 $0, $1;";
  } else if (type->isIntegerTy(32) || type->isFloatTy()) {
    constraint = type->isFloatTy() ? "f" : "r";
    text = "mov.b32 $0, $1;";
  } else if (type->isIntegerTy(64) || type->isDoubleTy()) {
    constraint = type->isDoubleTy() ? "d" : "l";
    text = "mov.b64 $0, $1;";
  } else {
    return nullptr;
  }
  llvm::IRBuilder<> b(where);
  return InlinePtx(b, text).output(constraint, type).input(constraint, value).emit();
}

class Rematerializer {
 public:
  explicit Rematerializer(llvm::Function& function) : function_(function), dominators_(function), loops_(dominators_) {}

  int run() {
    if (loops_.empty()) return 0;
    std::vector<llvm::Instruction*> candidates;
    for (llvm::BasicBlock& block : function_)
      if (!loops_.getLoopFor(&block))
        for (llvm::Instruction& inst : block)
          if (isPredicateComputation(inst)) candidates.push_back(&inst);
    int copied = 0;
    for (llvm::Instruction* inst : candidates) copied += rematerialize(*inst) ? 1 : 0;
    for (llvm::Instruction* inst : candidates)
      if (inst->use_empty()) llvm::RecursivelyDeleteTriviallyDeadInstructions(inst);
    return copied;
  }

 private:
  // A path from `def` through a loop (containing neither) to `use` exists.
  bool crossesLoop(llvm::BasicBlock* def, llvm::BasicBlock* use) const {
    for (const llvm::Loop* loop : loops_) {
      llvm::BasicBlock* header = loop->getHeader();
      if (llvm::isPotentiallyReachable(def, header, nullptr, &dominators_, &loops_) &&
          llvm::isPotentiallyReachable(header, use, nullptr, &dominators_, &loops_))
        return true;
    }
    return false;
  }

  bool rematerialize(llvm::Instruction& inst) {
    llvm::BasicBlock* defBlock = inst.getParent();
    std::vector<llvm::Use*> uses;
    llvm::BasicBlock* target = nullptr;
    for (llvm::Use& use : inst.uses()) {
      auto* user = llvm::dyn_cast<llvm::Instruction>(use.getUser());
      if (!user || llvm::isa<llvm::PHINode>(user)) continue;
      llvm::BasicBlock* useBlock = user->getParent();
      if (useBlock == defBlock || loops_.getLoopFor(useBlock) || !crossesLoop(defBlock, useBlock)) continue;
      uses.push_back(&use);
      target = target ? dominators_.findNearestCommonDominator(target, useBlock) : useBlock;
    }
    // The copy goes where it dominates every use it serves, still after a loop.
    if (uses.empty() || loops_.getLoopFor(target) || !crossesLoop(defBlock, target)) return false;
    llvm::Value* copy = copyInto(inst, *target);
    for (llvm::Use* use : uses) use->set(copy);
    return true;
  }

  // A copy of `inst` near the top of `block`, after the i1 computations it is
  // made of (copied first). Copies go before the block's first original
  // instruction, in the order made, so each follows the copies it reads.
  llvm::Value* copyInto(llvm::Instruction& inst, llvm::BasicBlock& block) {
    const auto key = std::make_pair(&inst, &block);
    if (auto found = copies_.find(key); found != copies_.end()) return found->second;
    std::vector<llvm::Value*> operands(inst.op_begin(), inst.op_end());
    for (llvm::Value*& operand : operands) {
      auto* computation = llvm::dyn_cast<llvm::Instruction>(operand);
      if (computation && isPredicateComputation(*computation) && !loops_.getLoopFor(computation->getParent()))
        operand = copyInto(*computation, block);
    }
    llvm::Instruction* anchor = anchors_.try_emplace(&block, &*block.getFirstInsertionPt()).first->second;
    // A compare reads one operand through an opaque register copy: otherwise the
    // backend's MachineCSE finds the same compare before the loop and merges them
    // again (ptxas does not, across the loop).
    if (llvm::isa<llvm::CmpInst>(inst))
      for (llvm::Value*& operand : operands)
        if (llvm::Value* opaque = opaqueCopy(operand, anchor)) {
          operand = opaque;
          break;
        }
    llvm::Instruction* copy = inst.clone();
    for (unsigned i = 0; i < operands.size(); ++i) copy->setOperand(i, operands[i]);
    copy->setName(inst.getName() + ".after_loop");
    copy->insertBefore(anchor->getIterator());
    copies_[key] = copy;
    return copy;
  }

  llvm::Function& function_;
  llvm::DominatorTree dominators_;
  llvm::LoopInfo loops_;
  std::map<std::pair<llvm::Instruction*, llvm::BasicBlock*>, llvm::Instruction*> copies_;
  std::map<llvm::BasicBlock*, llvm::Instruction*> anchors_;
};

}  // namespace

int rematerializeLoopCrossingPredicates(llvm::Function& function) { return Rematerializer(function).run(); }

}  // namespace attnjit::codegen
