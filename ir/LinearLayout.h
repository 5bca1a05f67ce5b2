// Linear layouts: the one representation codegen reasons with. A distributed
// layout of a tile with power-of-two extents maps a hardware index (register r,
// lane l, warp w) to a logical coordinate of the tile:
//
//   coord(r, l, w) = XOR of reg[i] for each set bit i of r
//                  ^ XOR of lane[i] for each set bit i of l
//                  ^ XOR of warp[i] for each set bit i of w
//
// Each basis vector is a coordinate (one entry per tile dimension). A zero lane or
// warp basis means those threads hold the same elements (broadcast). Register
// bases are never zero: a thread holds each element at most once. Every IR layout
// encoding (#blocked, #mma, #dot_op, #slice) becomes a LinearLayout for a given
// shape and warp count; conversions, reductions, broadcasts and tensor-core
// fragments are then computed from bases instead of special cases (the idea of
// Triton's linear layouts).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "support/Diagnostics.h"
#include "ir/Types.h"

namespace attnjit::ir {

using Coord = std::array<int64_t, 3>;

class LinearLayout {
 public:
  static constexpr int kLaneBits = 5;  // 32 lanes per warp

  std::vector<int64_t> shape;  // power-of-two extents, rank 1..3
  std::vector<Coord> reg;      // one basis per register bit
  std::vector<Coord> lane;     // kLaneBits bases
  std::vector<Coord> warp;     // log2(num_warps) bases

  int rank() const { return static_cast<int>(shape.size()); }
  int64_t numRegisters() const { return int64_t{1} << reg.size(); }
  int numWarps() const { return 1 << warp.size(); }
  Coord apply(uint64_t r, uint64_t l, uint64_t w) const;
  // The coordinate contributed by the register bits alone.
  Coord registerCoord(uint64_t r) const { return apply(r, 0, 0); }

  // Every element of the tile is held by some (register, lane, warp).
  bool coversShape() const;
  // Equal thread (lane and warp) bases: the same element sets per thread up to
  // register order.
  bool sameThreadMapping(const LinearLayout& other) const;
  bool operator==(const LinearLayout& other) const;
  std::string str() const;

  // The layout with dimension `dim` removed (bases that only moved along it become
  // zero; register bases that become zero are dropped).
  LinearLayout sliced(int dim) const;
  // The layout with a new dimension of extent 1 at `dim`.
  LinearLayout expanded(int dim) const;
  // Result dimension i is this layout's dimension perm[i].
  LinearLayout transposed(const std::vector<int64_t>& perm) const;
  // The same bases applied to another shape of the same rank where every
  // dimension is equal or 1 in `this` and larger in `shape`: not needed for
  // broadcasts (which keep the encoding), kept for clarity of intent.

  // For each register of this layout, the register of `source` holding the
  // element at the same coordinate with dimensions in `broadcastDims` set to 0.
  // Requires equal thread mappings up to those dimensions; returns an empty vector
  // if some element is not held by the same thread in `source`.
  std::vector<int64_t> registerSourceMap(const LinearLayout& source, const std::vector<int>& broadcastDims) const;
};

// Builds the linear layout of `encoding` for a tile of `shape` with `numWarps`
// warps. Errors (non-power-of-two extents, a layout kind without a distributed
// form such as #shared, an mma layout on a non-2D tile) name the layout.
support::Expected<LinearLayout> toLinearLayout(const Layout& encoding, const std::vector<int64_t>& shape, int numWarps);

// `layout`, the linear form of `encoding`, with any thread_major renumbering
// (ir/Types.h) undone and its registers in the same order: the coordinates the
// mma instructions' fragments are defined in. Dot lowering gathers fragments by
// them. `layout` itself for encodings without thread_major.
support::Expected<LinearLayout> mmaNumbering(const Layout& encoding, const LinearLayout& layout);

// The columns each warp of an #mma layout owns before the next warp along N
// takes over: instr = [16, n] (n a power of two of at least 8). n = 8 is
// mma.sync's own tiling, warps interleaved in 8-column steps; a larger n gives
// each warp n contiguous columns (n / 8 m16n8 fragments), so four warps along M
// with two along N split the columns into two warpgroup-contiguous halves, the
// blocks wgmma's descriptors address (codegen/lower/WarpgroupMma.cpp). No instr
// means [16, 8].
support::Expected<int64_t> mmaWarpColumns(const Layout& encoding);

bool isPowerOfTwo(int64_t x);
int log2Exact(int64_t x);

}  // namespace attnjit::ir
