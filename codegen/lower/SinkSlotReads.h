// Moves the reads of cp.async slots next to their uses (SinkSlotReads.cpp explains
// why and when it is safe). Internal to codegen/.
#pragma once

#include <llvm/IR/Function.h>
#include <llvm/IR/Instruction.h>

namespace attnjit::codegen {

// Marks `read` (an ldmatrix or a shared-memory load of a cp.async slot) as movable.
void tagSlotRead(llvm::Instruction& read);

// Moves every tagged slot read, with the extracts and casts that only take its
// parts apart, down to just before the first instruction that uses it: in its
// block, or in the join of a side branch after it. Returns how many reads moved.
int sinkSlotReads(llvm::Function& function);

// Erases every ldmatrix whose registers are all unused (a dot's k_extent or
// n_extent skips the mma steps that would read them). LLVM keeps them: the
// intrinsics are convergent and not marked willreturn, so never trivially dead,
// though they only read shared memory, each the same in every thread of the warp.
// Returns how many it erased.
int eraseUnusedMatrixLoads(llvm::Function& function);

}  // namespace attnjit::codegen
