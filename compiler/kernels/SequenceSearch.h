// The branch-free binary search by which a program finds the sequence a row of
// a varlen batch belongs to (vLLM's find_seq_idx): the largest s in
// [0, num_seqs) whose start is at or before the target, over a monotone table of
// num_seqs + 1 starts (cu_seqlens_q and the like). The interval [lo, hi) shrinks
// while lo < hi and stays put once empty, so a fixed ceil(log2(num_seqs + 1))
// iterations (the kernels' seq_search_steps parameter) is exact, and a loop of
// selects keeps every lane of a vector search in step.
#pragma once

#include <functional>
#include <string>

#include "ir/Builder.h"

namespace attnjit::compiler {

struct SequenceSearch {
  ir::Value* target = nullptr;   // i32 scalar, or i32 tile: one search per element
  ir::Value* steps = nullptr;    // i32 scalar: seq_search_steps
  ir::Value* numSeqs = nullptr;  // i32 scalar
  ir::Value* zero = nullptr;     // the caller's i32 constants 0 and 1
  ir::Value* one = nullptr;
};

// startAt(mid, searching) gives the start of sequence mid (mid <= num_seqs,
// shaped like target; `searching` masks lanes whose interval is already empty).
// Returns lo - 1 after the search, named `resultName`: a target before every
// start gives -1.
ir::Value* searchSequence(ir::Builder& b, const SequenceSearch& search,
                          const std::function<ir::Value*(ir::Value* mid, ir::Value* searching)>& startAt,
                          const std::string& resultName);

}  // namespace attnjit::compiler
