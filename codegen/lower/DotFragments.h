// What both tensor-core lowerings of `dot` (DotLowering.cpp: mma.sync,
// WarpgroupMma.cpp: wgmma) read off an operation and its operands. Internal to
// codegen/.
#pragma once

#include <algorithm>
#include <map>

#include "ir/IR.h"
#include "ir/LinearLayout.h"

namespace attnjit::codegen {

// dot's k_extent / n_extent: the operands are zero past them (a padded head
// dimension), so the products there need not be computed. The whole extent
// when the attribute is absent.
inline int64_t dotExtent(const ir::Operation& op, const char* name, int64_t whole) {
  return op.attrs().has(name) ? std::min(op.attrs().getInt(name), whole) : whole;
}

// Register index of each coordinate a thread holds in `l` (its register part:
// lane and warp bits zero), for gathering fragments by coordinate.
inline std::map<ir::Coord, size_t> registerIndex(const ir::LinearLayout& l) {
  std::map<ir::Coord, size_t> index;
  for (int64_t r = 0; r < l.numRegisters(); ++r) index.emplace(l.registerCoord(static_cast<uint64_t>(r)), r);
  return index;
}

}  // namespace attnjit::codegen
