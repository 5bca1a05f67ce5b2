// The placement of a 2D tile in shared memory that layout conversions, cp.async
// slots and wgmma operands share (codegen/lower/SwizzledShared.cpp's file
// comment says why it is swizzled). Pure arithmetic, no LLVM: the emitted
// offsets (swizzledOffset, SwizzledShared.h) compute the same function.
// Internal to codegen/.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ir/LinearLayout.h"
#include "ir/Types.h"

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

  // Column blocks (0: none): rows longer than 128 bytes stored as consecutive
  // 128-byte-wide blocks of `blockRows` rows each (block j holds elements
  // [j·B, (j+1)·B) of every row, B = 128 bytes' worth), so that each block is
  // the hardware's 128-byte swizzle pattern that wgmma's matrix descriptors
  // read (codegen/lower/WarpgroupMma.cpp). Rows of 128 bytes or less are
  // already that pattern (perPhase · rowBytes = 128).
  int64_t blockRows = 0;

  SwizzledTile(int dim, int64_t rowElems, int64_t elementBytes)
      : contigDim(dim), rowElements(rowElems), elemBytes(elementBytes) {
    chunkElements = kSwizzleChunkBytes / elemBytes;
    int64_t rowBytes = rowElems * elemBytes;
    perPhase = std::max<int64_t>(1, 128 / rowBytes);
    maxPhase = std::min<int64_t>(8, rowBytes / kSwizzleChunkBytes);
  }

  // Switches to column blocks for a tile of `rows` rows (a power of two, at
  // least 8) with rows of a power-of-two multiple of 128 bytes.
  void useColumnBlocks(int64_t rows) { blockRows = rows; }
  int64_t blockElements() const { return 128 / elemBytes; }

  // Element offset of (row, col), col running along contigDim.
  int64_t offsetOf(int64_t row, int64_t col) const {
    const int64_t chunk = col / chunkElements;
    const int64_t phase = (row / perPhase) & (maxPhase - 1);
    if (blockRows > 0)
      return (chunk >> 3) * blockRows * blockElements() + row * blockElements() +
             (((chunk & 7) ^ phase) * chunkElements) + (col & (chunkElements - 1));
    return row * rowElements + ((chunk ^ phase) * chunkElements) + (col & (chunkElements - 1));
  }
  // Bytes of a tile of `layout`'s shape.
  int64_t bytes(const ir::LinearLayout& layout) const { return layout.shape[0] * layout.shape[1] * elemBytes; }
};

}  // namespace attnjit::codegen
