// Several layout conversions of one register tile through one shared-memory
// store. Internal to codegen/.
//
// A tile converted into two layouts — directly, or one of them through a 2D
// transpose (MLA's fp8 latent chunk: once as V for P·V, once transposed as Kᵀ for
// the scores) — would go through the scratch area twice: two stores, two pairs
// of barriers. planSharedConversions gives such a tile a buffer of its own
// (after the cp.async and shared-operand buffers): the first conversion stores
// it once between two barriers, and every conversion reads its layout back
// from there (ldmatrix, .trans through the transposed view), as conversions of a
// cp.async slot do.
#pragma once

#include <unordered_map>
#include <vector>

#include "codegen/lower/LoweringContext.h"
#include "codegen/lower/SwizzledTile.h"

namespace attnjit::codegen {

struct SharedConversionGroup {
  const ir::Value* source = nullptr;         // the tile stored once
  const ir::Operation* firstConvert = nullptr;  // stores it, in block order the first
  SwizzledTile tile;
  ir::LinearLayout layout;                    // of the source's registers
  int64_t offset = 0;                         // bytes from the start of dynamic shared memory
};

struct SharedConversionPlan {
  std::vector<SharedConversionGroup> groups;
  struct Read {
    int group = 0;
    bool transposed = false;  // the convert's input is the source transposed
  };
  std::unordered_map<const ir::Operation*, Read> converts;
};

// Plans the groups (needs ctx.allowSharedOperands: given up with the shared
// operands when shared memory is short) and reserves their buffers.
void planSharedConversions(LoweringContext& ctx);

std::string describeSharedConversionPlan(const LoweringContext& ctx);

// Lowers a planned convert_layout; false for any other op.
bool lowerSharedConversion(LoweringContext& ctx, const ir::Operation& op);

}  // namespace attnjit::codegen
