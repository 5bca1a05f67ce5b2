// Small IR-mutation helpers shared by the passes.
#pragma once

#include <functional>
#include <memory>

#include "ir/IR.h"

namespace attnjit::compiler {

// Position of `op` in its parent block.
size_t indexInBlock(const ir::Operation& op);
// Creates a copy of `op` (no regions) with the same operands, attributes and
// result names, and result types `resultTypes`; not inserted anywhere.
std::unique_ptr<ir::Operation> cloneWithoutRegions(const ir::Operation& op, const std::vector<ir::Type>& resultTypes);
// Replaces every use of `from` by `to` in `block` and its nested regions.
void replaceAllUses(ir::Block& block, ir::Value* from, ir::Value* to);
// Number of uses of each value in the kernel.
std::unordered_map<const ir::Value*, int> countUses(const ir::Kernel& kernel);
// Ops without side effects (everything but store and control flow terminators;
// for/if are pure when their regions are).
bool hasSideEffects(const ir::Operation& op);

}  // namespace attnjit::compiler
