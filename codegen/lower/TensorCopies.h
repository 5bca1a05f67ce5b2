// TMA copies of load_tensor tiles (the file comment of TensorCopies.cpp).
// Internal to codegen/.
#pragma once

#include <string>

#include "codegen/lower/LoweringContext.h"

namespace attnjit::codegen {

// Gives every load_tensor of the kernel (those the passes kept for TMA) a
// tensor map: ctx.tensorMapOf and ctx.tensorMapRecipes, one map per distinct
// tensor and box. Before the kernel function exists: the maps are parameters.
// Fails (ctx.unsupported) where a map's base, extents or strides are not
// kernel parameters, constants or constexprs.
void planTensorMaps(LoweringContext& ctx);

// The recipes as kernel metadata text (CodegenResult::tensorMaps).
std::string tensorMapRecipesText(const LoweringContext& ctx);

// Producer thread 0's boxes for the fill of load_tensor `load` into `slot` of
// buffer `id`: it arms the slot's full barrier with the tile's bytes and
// issues one cp.async.bulk.tensor per block entry and 128-byte column block;
// every other producer thread arrives on the barrier.
void issueTensorCopies(LoweringContext& ctx, const ir::Operation& load, int id, llvm::Value* slot,
                       llvm::Value* fullBarrier);

}  // namespace attnjit::codegen
