// Moves the reads of cp.async slots next to their uses (SinkSlotReads.cpp explains
// why and when it is safe). Internal to codegen/.
#pragma once

#include <llvm/IR/Function.h>
#include <llvm/IR/Instruction.h>

namespace attnjit::codegen {

// Marks `read` (an ldmatrix or a shared-memory load of a cp.async slot) as movable.
void tagSlotRead(llvm::Instruction& read);

// Moves every tagged slot read, with the extracts and casts that only take its
// parts apart, down to just before the first instruction that uses it in its
// block. Returns how many reads moved.
int sinkSlotReads(llvm::Function& function);

}  // namespace attnjit::codegen
