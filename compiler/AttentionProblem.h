// A concrete attention problem: a batch shape, random inputs laid out exactly as
// the kernels expect, the float64 reference, and the comparison. Shared by the
// CLI (`attnjit run`, the demo) and the tests, so all of them check the same way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/kernels/UnifiedAttention.h"
#include "ir/Diagnostics.h"

namespace attnjit::compiler {

// One batch: sequence i has queryLens[i] new query tokens after contextLens[i]
// tokens already in the cache (its seq_len is their sum).
struct AttentionShape {
  std::vector<int> queryLens = {1, 17, 40};
  std::vector<int> contextLens = {33, 0, 70};
  uint64_t seed = 1;
  // Parses "key=value" (keys: query_lens=1,7,..., context_lens=..., seed=N);
  // the error names the key.
  ir::Status set(const std::string& keyEqualsValue);
  // "query_lens=1,17,40 context_lens=33,0,70 seed=1" (each part accepted by set()).
  std::string str() const;
  // At least one sequence, equal list lengths, query_len >= 1, context_len >= 0,
  // and sizes that fit the kernels' 32-bit token indices.
  ir::Status validate() const;
};

struct AttentionRunResult {
  double maxAbsError = 0;
  double maxRelError = 0;     // max |err| / (|ref| + 1e-3 · max|ref|)
  double tolerance = 0;       // allowed max abs error for the dtype
  bool passed = false;
  double buildMs = 0;         // kernel builder + verifier
  double runMs = 0;           // interpreter (or GPU) run
  int64_t gridX = 0, gridY = 0;
  // Where the largest error is ("token 3, head 5, dim 17: got ..., expected ..."), or
  // what else failed the run (a non-finite output, a write outside the output).
  std::string detail;
};

// Builds the kernel for `config`, makes random inputs for `shape`, runs the CPU
// interpreter, and compares with the float64 reference.
ir::Expected<AttentionRunResult> runUnifiedAttentionInterpreted(const UnifiedAttentionConfig& config,
                                                                const AttentionShape& shape);

}  // namespace attnjit::compiler
