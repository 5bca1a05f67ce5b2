// The operands of `load_tensor` (ir/Ops.def) by role. The op's operand list is
// flat — base, n dimensions, n − 1 strides, n coordinates, an optional row
// range — and its attributes say n, the rows' dimension and the gathered one;
// this is the one place that knows the order.
#pragma once

#include <optional>
#include <vector>

#include "ir/IR.h"

namespace attnjit::ir {

inline constexpr int kMinLoadTensorRank = 2;
inline constexpr int kMaxLoadTensorRank = 5;  // what the tensor memory accelerator takes

struct LoadTensorOperands {
  Value* base = nullptr;
  std::vector<Value*> dims;     // n: elements along each dimension
  std::vector<Value*> strides;  // n − 1: elements between indices of dimensions 1 .. n − 1
  std::vector<Value*> coords;   // n: the first index along each dimension (the gathered one a tile)
  // Rows outside [rowBegin, rowEnd) read as zeros (i32 scalars; both or neither).
  Value* rowBegin = nullptr;
  Value* rowEnd = nullptr;
  int rowsDim = 1;
  int gatherDim = -1;  // -1: no gather

  int rank() const { return static_cast<int>(dims.size()); }
  // The operand list in the op's order.
  std::vector<Value*> flatten() const;
  // Attributes {rank, rows[, gather]}.
  Attributes attributes() const;
};

// Operand count of a load_tensor of rank n without / with a row range.
inline size_t loadTensorOperandCount(int rank, bool rowRange) {
  return static_cast<size_t>(3 * rank) + (rowRange ? 2 : 0);
}

// The roles of a verified load_tensor's operands.
LoadTensorOperands loadTensorOperands(const Operation& op);

// A value the host knows at launch, as a TMA tensor map needs its base,
// extents and strides: kernel parameter `parameter`, or (parameter -1) the
// integer `constant` of a constant or constexpr op. nullopt for any other.
struct HostValue {
  int parameter = -1;
  int64_t constant = 0;
};
std::optional<HostValue> hostValue(const Kernel& kernel, const Value* value);

}  // namespace attnjit::ir
