// Removes barriers and cp.async waits that cannot change what any thread sees
// (RedundantSync.cpp explains when). Internal to codegen/.
#pragma once

#include <llvm/IR/Function.h>

#include "codegen/lower/AppendedInstructions.h"

namespace attnjit::codegen {

// The named barrier over the compute warps of a warp-specialized kernel
// (barrier 0 spans the whole CTA, producer warps included).
inline constexpr int kComputeWarpsBarrier = 1;

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

// Marks the shared-memory accesses among `appended` that make the declared
// access as accesses of one region, so that removeRedundantSync can tell them
// apart from accesses of other regions. Untagged accesses count as touching all
// of shared memory.
void tagSharedAccesses(const AppendedInstructions& appended, const SharedRegion& region, SharedAccess access);

}  // namespace attnjit::codegen
