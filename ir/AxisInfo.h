// Axis analysis: for integer and pointer values, per tile dimension, how long the
// runs of consecutive values are (contiguity), how long the runs of equal values
// are (constancy), and the largest power of two dividing the first element of
// each run (divisibility; bytes for pointers, value for integers). Layout
// assignment uses it to find the contiguous dimension of loads and stores, and
// codegen to emit 16-byte vector accesses only where they are provably legal.
// The same facts Triton's AxisInfo tracks, computed by one forward walk.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "ir/IR.h"
#include "ir/LinearLayout.h"

namespace attnjit::ir {

struct AxisFacts {
  std::vector<int64_t> contiguity;    // per dim (scalars: one entry of 1)
  std::vector<int64_t> divisibility;  // per dim
  std::vector<int64_t> constancy;     // per dim
};

class AxisInfo {
 public:
  // Analyzes every value of the kernel.
  explicit AxisInfo(const Kernel& kernel);
  // Facts of an integer or pointer value (conservative: 1s for anything unknown).
  const AxisFacts& facts(const Value* v) const;

  // Largest power of two dividing x (x = 0: kMaxDivisibility).
  static int64_t powerOfTwoDivisor(int64_t x);
  static constexpr int64_t kMaxDivisibility = int64_t{1} << 30;

 private:
  void analyzeBlock(const Block& block);
  void analyzeOp(const Operation& op);
  AxisFacts unknown(const Type& t) const;
  std::unordered_map<const Value*, AxisFacts> facts_;
  const Kernel& kernel_;
};

// The register-index bits of `layout` that never change the value of any tile
// whose facts are given (a load's pointers, mask and fallback): register r holds
// the same value as register r & ~bits. Along a dimension of constancy c (aligned
// chunks of c equal values), a register basis that is not a multiple of c stays
// inside its chunk when every basis that is not (registers, lanes, warps) adds
// up to less than c. A load reads each such group once: a row of block numbers
// (16 keys to a block) where a thread holds keys t, t + 8, ... is one load per
// pair of keys. 0 when nothing repeats.
uint64_t equalValueRegisterBits(const LinearLayout& layout, const std::vector<const AxisFacts*>& facts);

}  // namespace attnjit::ir
