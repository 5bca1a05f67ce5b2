// Removes barriers and cp.async waits that cannot change what any thread sees
// (RedundantSync.cpp explains when). Internal to codegen/.
#pragma once

#include <llvm/IR/Function.h>

namespace attnjit::codegen {

struct RedundantSyncCounts {
  int barriers = 0;
  int waits = 0;
};

// Within each basic block: drops a cp.async wait that an earlier wait of the same
// block already implies, and a CTA barrier that follows another barrier with no
// shared-memory access and no completing wait in between.
RedundantSyncCounts removeRedundantSync(llvm::Function& function);

}  // namespace attnjit::codegen
