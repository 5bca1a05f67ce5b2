// The swizzled shared-memory tile behind 2D layout conversions
// (convertThroughSwizzledShared) and cp.async tiles (codegen/lower/AsyncCopy.cpp):
// how a tile is placed, and the reads of any destination layout from it.
// Internal to codegen/.
#pragma once

#include <optional>
#include <vector>

#include "codegen/lower/LoweringContext.h"

namespace attnjit::codegen {

inline constexpr int64_t kSwizzleChunkBytes = 16;

// Rows of 16-byte chunks along `contigDim`; chunk c of row r at c ^ phase(r)
// (the file comment of SwizzledShared.cpp says why).
struct SwizzledTile {
  int contigDim;
  int64_t rowElements;    // extent of contigDim
  int64_t chunkElements;  // elements per 16-byte chunk
  int64_t perPhase;       // rows sharing one swizzle phase (rows shorter than 128 bytes)
  int64_t maxPhase;       // distinct phases
  int64_t elemBytes;

  SwizzledTile(int dim, int64_t rowElems, int64_t elementBytes)
      : contigDim(dim), rowElements(rowElems), elemBytes(elementBytes) {
    chunkElements = kSwizzleChunkBytes / elemBytes;
    int64_t rowBytes = rowElems * elemBytes;
    perPhase = std::max<int64_t>(1, 128 / rowBytes);
    maxPhase = std::min<int64_t>(8, rowBytes / kSwizzleChunkBytes);
  }

  // Element offset of (row, col) where col runs along contigDim; row and col i32.
  llvm::Value* offset(llvm::IRBuilder<>& b, llvm::Value* row, llvm::Value* col) const {
    llvm::Value* chunk = b.CreateLShr(col, static_cast<uint64_t>(ir::log2Exact(chunkElements)));
    llvm::Value* within = b.CreateAnd(col, static_cast<uint64_t>(chunkElements - 1));
    llvm::Value* phase = b.CreateAnd(b.CreateLShr(row, static_cast<uint64_t>(ir::log2Exact(perPhase))),
                                     static_cast<uint64_t>(maxPhase - 1));
    llvm::Value* swizzled = b.CreateShl(b.CreateXor(chunk, phase), static_cast<uint64_t>(ir::log2Exact(chunkElements)));
    llvm::Value* rowStart = b.CreateShl(row, static_cast<uint64_t>(ir::log2Exact(rowElements)));
    return b.CreateOr(rowStart, b.CreateOr(swizzled, within));
  }
  // offset() of a constant coordinate.
  int64_t offsetOf(int64_t row, int64_t col) const {
    const int64_t chunk = col / chunkElements;
    const int64_t phase = (row / perPhase) & (maxPhase - 1);
    return row * rowElements + ((chunk ^ phase) * chunkElements) + (col & (chunkElements - 1));
  }
  // Bytes of a tile of `layout`'s shape.
  int64_t bytes(const ir::LinearLayout& layout) const;
};

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

}  // namespace attnjit::codegen
