// Conditions computed before a loop and used only after it, computed again after
// it (LoopCrossingPredicates.cpp explains why). Internal to codegen/.
#pragma once

#include <llvm/IR/Function.h>

namespace attnjit::codegen {

// For every i1 value (a compare, or and/or/xor/not of such) defined outside all
// loops and used outside all loops after one, gives those uses a copy of its
// computation at the nearest block that dominates them, and erases what is left
// unused. Runs after LLVM's pipeline, whose CSE merges such recomputations back.
// Returns how many values it copied.
int rematerializeLoopCrossingPredicates(llvm::Function& function);

}  // namespace attnjit::codegen
