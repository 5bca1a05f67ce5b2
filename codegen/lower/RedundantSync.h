// Removes barriers and cp.async waits that cannot change what any thread sees
// (RedundantSync.cpp explains when). Internal to codegen/.
#pragma once

#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>

#include <string>

namespace attnjit::codegen {

struct RedundantSyncCounts {
  int barriers = 0;
  int waits = 0;
  int strengthenedWaits = 0;
};

// Within each basic block: drops a cp.async wait that an earlier wait of the same
// block already implies (after letting a wait cover the later waits it reaches
// with no commit and no tensor-core instruction in between), and a CTA barrier
// that orders no pair of conflicting shared-memory accesses.
RedundantSyncCounts removeRedundantSync(llvm::Function& function);

enum class SharedAccess { Read, Write };

// A byte range of dynamic shared memory that the lowering planned for one use:
// a cp.async buffer's slots, or a buffer a conversion stores into.
struct SharedRegion {
  int64_t begin = 0, end = 0;  // bytes from the start of dynamic shared memory
  bool slots = false;          // cp.async slots (written by copies, completed by waits)
};

// Marks the memory instructions the builder appends to its current block, from
// construction until finish(), as accesses of one region of shared memory, so
// that removeRedundantSync can tell them apart from accesses of other regions.
// Untagged accesses count as touching all of shared memory. Nothing is tagged
// when the builder left the block (a tag is a claim about every appended
// instruction).
class SharedRegionAccesses {
 public:
  SharedRegionAccesses(llvm::IRBuilder<>& b, SharedRegion region, SharedAccess access);
  void finish();

 private:
  llvm::IRBuilder<>& b_;
  SharedRegion region_;
  SharedAccess access_;
  llvm::BasicBlock* block_;
  llvm::Instruction* before_;  // the block's last instruction at construction (null: empty)
  bool atEnd_;
};

}  // namespace attnjit::codegen
