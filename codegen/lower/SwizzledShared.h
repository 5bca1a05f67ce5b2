// The swizzled shared-memory tile behind 2D layout conversions
// (convertThroughSwizzledShared) and cp.async tiles (codegen/lower/AsyncCopy.cpp):
// how a tile is placed, and the reads of any destination layout from it.
// Internal to codegen/.
#pragma once

#include <optional>
#include <vector>

#include "codegen/lower/LoweringContext.h"
#include "codegen/lower/RedundantSync.h"
#include "codegen/lower/SwizzledTile.h"

namespace attnjit::codegen {

// swizzledOffset(): the element offset of (row, col) in `tile` as LLVM values
// (i32; col runs along contigDim); the same function as SwizzledTile::offsetOf.
llvm::Value* swizzledOffset(llvm::IRBuilder<>& b, const SwizzledTile& tile, llvm::Value* row, llvm::Value* col);

// The element offsets in `tile` of the registers of `layout`, split for addressing
// modes. offset() only shifts, masks and XORs bit fields, so it is XOR-linear in
// the coordinate's bits, and register r's offset is thread ^ offsetOf(r's own
// coordinate). The bits of that constant which no thread's part can have are
// added as an immediate ([%r+imm]); only the bits that can meet the thread's
// (the swizzle phase) need a register of their own: at most a phase's worth per
// tile instead of one 64-bit address per access, which on mma operand tiles of
// 64 keys would be 64 live registers per loop.
class SwizzledOffsets {
 public:
  SwizzledOffsets(LoweringContext& ctx, const ir::LinearLayout& layout, const SwizzledTile& tile);
  // The address of register `reg`'s element in the tile at `base`.
  llvm::Value* address(llvm::Value* base, llvm::Type* elementType, int64_t reg);

 private:
  LoweringContext& ctx_;
  const ir::LinearLayout& layout_;
  const SwizzledTile& tile_;
  llvm::Value* thread_;       // the offset of register 0 (the thread's part)
  int64_t threadBits_ = 0;    // every bit the thread's part can have
  std::vector<std::pair<int64_t, llvm::Value*>> xored_;  // thread ^ bits, by bits
};

// The tile a conversion from `from` to `to` (same 2D shape) uses: contiguous along
// the source's longest per-thread run; nullopt where swizzling does not apply
// (other ranks, rows shorter than 16 bytes, elements that do not divide 16 bytes).
std::optional<SwizzledTile> swizzledTileFor(const ir::LinearLayout& from, const ir::LinearLayout& to,
                                            int64_t elemBytes);

// How many consecutive registers of `layout` form one aligned vector of the tile
// (at most a chunk).
int64_t swizzleVectorWidth(const ir::LinearLayout& layout, const SwizzledTile& tile);

// Stores `regs` (layout `from`) into the tile at `base` (addrspace 3) with the
// widest aligned vector stores. No barrier.
void storeSwizzledTile(LoweringContext& ctx, const std::vector<llvm::Value*>& regs, const ir::LinearLayout& from,
                       const SwizzledTile& tile, llvm::Type* elementType, llvm::Value* base);

// The registers of layout `to` read from the tile at `base` (addrspace 3): ldmatrix
// for 16-bit mma operand fragments, vector loads otherwise. No barrier.
std::vector<llvm::Value*> readSwizzledTile(LoweringContext& ctx, const ir::LinearLayout& to, const SwizzledTile& tile,
                                           llvm::Type* elementType, llvm::Value* base);

// readSwizzledTile for a tile nothing writes again before the end of the block
// (a cp.async slot, a shared operand, a shared conversion's buffer): the reads,
// emitted at the end of the block, are tagged for sinkSlotReads, which moves
// each next to its first use after optimization, and as reads of `region` for
// removeRedundantSync.
std::vector<llvm::Value*> readSwizzledTileToSink(LoweringContext& ctx, const ir::LinearLayout& to,
                                                 const SwizzledTile& tile, llvm::Type* elementType,
                                                 llvm::Value* base, const SharedRegion& region);

// storeSwizzledTile with the stores tagged as writes of `region` for
// removeRedundantSync.
void storeSwizzledTileToRegion(LoweringContext& ctx, const std::vector<llvm::Value*>& regs,
                               const ir::LinearLayout& from, const SwizzledTile& tile, llvm::Type* elementType,
                               llvm::Value* base, const SharedRegion& region);

}  // namespace attnjit::codegen
