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
// cp.async slot do. On wgmma targets the buffer may instead be read by wgmma
// through matrix descriptors (the file comment of SharedConversions.cpp).
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
  bool warpgroupOperand = false;              // stored in column blocks, some conversions read by wgmma
};

struct SharedConversionPlan {
  std::vector<SharedConversionGroup> groups;
  struct Read {
    int group = 0;
    bool transposed = false;  // the convert's input is the source transposed
    bool descriptor = false;  // every use is a wgmma dot reading the buffer through a descriptor
  };
  std::unordered_map<const ir::Operation*, Read> converts;
};

// Plans the groups (needs ctx.allowSharedOperands: given up with the shared
// operands when shared memory is short) and reserves their buffers.
void planSharedConversions(LoweringContext& ctx);

std::string describeSharedConversionPlan(const LoweringContext& ctx);

// Lowers a planned convert_layout; false for any other op. A descriptor
// conversion's result is the buffer (Lowered::sharedConversion), no registers.
bool lowerSharedConversion(LoweringContext& ctx, const ir::Operation& op);

// Whether `convert` is planned as a descriptor conversion.
bool isSharedConversionDescriptor(const LoweringContext& ctx, const ir::Operation& convert);

// The group of a descriptor conversion's result, and its buffer's address.
const SharedConversionGroup& sharedConversionGroup(const LoweringContext& ctx, const Lowered& value);
llvm::Value* sharedConversionAddress(LoweringContext& ctx, const Lowered& value);

}  // namespace attnjit::codegen
