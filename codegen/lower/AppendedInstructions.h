// The instructions an IRBuilder appends to its block from a point on, for the
// lowerings that tag what they emitted (sinkSlotReads' slot reads, the shared
// regions of removeRedundantSync). Internal to codegen/.
#pragma once

#include <llvm/IR/IRBuilder.h>

namespace attnjit::codegen {

class AppendedInstructions {
 public:
  explicit AppendedInstructions(llvm::IRBuilder<>& b)
      : b_(b),
        block_(b.GetInsertBlock()),
        before_(block_->empty() ? nullptr : &block_->back()),
        atEnd_(b.GetInsertPoint() == block_->end()) {}

  // Calls `visit` on each instruction appended since construction. Nothing is
  // visited when the builder did not append at the end of one block throughout
  // (it started mid-block or moved to another): a tag is a claim about every
  // instruction emitted.
  template <typename Visit>
  void forEach(Visit&& visit) const {
    if (!atEnd_ || b_.GetInsertBlock() != block_ || b_.GetInsertPoint() != block_->end()) return;
    for (llvm::Instruction* inst = before_ ? before_->getNextNode() : &block_->front(); inst;
         inst = inst->getNextNode())
      visit(*inst);
  }

 private:
  llvm::IRBuilder<>& b_;
  llvm::BasicBlock* block_;
  llvm::Instruction* before_;  // the block's last instruction at construction (null: empty)
  bool atEnd_;
};

}  // namespace attnjit::codegen
