// Verifier: checks that IR is well formed. verifyOperation checks one op locally
// (operand count and types, attributes, result types, region signatures);
// verifyKernel checks every op plus dominance (a value is used only where its
// definition dominates: earlier in the same block or in an enclosing block) and
// terminators (for/if regions end in yield, the body in return, nothing follows a
// terminator). Errors carry the op's location and name the op.
#pragma once

#include "ir/IR.h"

namespace attnjit::ir {

support::Status verifyOperation(const Operation& op, const Kernel& kernel);
support::Status verifyKernel(const Kernel& kernel);
support::Status verifyModule(const Module& module);

}  // namespace attnjit::ir
