// A concrete attention problem: a batch shape, random inputs laid out exactly as
// the kernels expect, the float64 reference, and the comparison. Shared by the
// CLI (`attnjit run`, the demo) and the tests, so all of them check the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
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
  // Check every checkStride-th token against the float64 reference (and each
  // sequence's last): large benchmark batches check a sample.
  int checkStride = 1;
  // Parses "key=value" (keys: query_lens=1,7,..., context_lens=..., seed=N,
  // check_stride=N); a list entry "VxN" repeats V N times (query_lens=1x64). The
  // error names the key.
  ir::Status set(const std::string& keyEqualsValue);
  // "query_lens=1,17,40 context_lens=33,0,70 seed=1" (each part accepted by set();
  // check_stride only when it is not 1).
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

// The inputs of one problem, in the kernel's layouts, and the check of its output.
// Buffers are poisoned where the kernel must not read (NaN cache slots, padding,
// out-of-range block-table entries) and the output starts as NaN.
class UnifiedAttentionProblem {
 public:
  static ir::Expected<std::unique_ptr<UnifiedAttentionProblem>> create(const UnifiedAttentionConfig& config,
                                                                      const AttentionShape& shape);

  struct Buffer {
    std::string label;
    std::vector<uint8_t> bytes;
  };
  // The kernel's pointer parameters in order: out, q, kv_cache, block_tables,
  // seq_lens, cu_seqlens_q, then alibi_slopes and sinks when the config has them
  // (buffers()[0] is the output, poisoned).
  std::vector<Buffer>& buffers() { return buffers_; }
  // The scalar parameters after the pointers, in order (integers and floats; the
  // launcher converts each to its parameter's exact type).
  const std::vector<std::variant<int64_t, double>>& scalarArguments() const { return scalars_; }
  int64_t gridX() const { return gridX_; }
  int64_t gridY() const { return gridY_; }
  // Unique bytes of q, the K/V rows attended to and o; FLOPs as 4·D·Hq·(visible
  // keys summed over query tokens) — the counts shared/REFERENCE.md uses.
  double minimumBytes() const { return minimumBytes_; }
  double flops() const { return flops_; }
  // Compares an output buffer (the bytes of buffers()[0] after a run) with the
  // float64 reference; fills the error fields, detail and passed of `result`.
  void check(const std::vector<uint8_t>& output, AttentionRunResult& result) const;

 private:
  UnifiedAttentionProblem() = default;
  struct Data;
  std::shared_ptr<Data> data_;
  std::vector<Buffer> buffers_;
  std::vector<std::variant<int64_t, double>> scalars_;
  int64_t gridX_ = 0, gridY_ = 0;
  double minimumBytes_ = 0, flops_ = 0;
};

// Builds the kernel for `config`, makes random inputs for `shape`, runs the CPU
// interpreter, and compares with the float64 reference. With `afterPasses` the
// interpreter runs the kernel as the tile-IR pass pipeline leaves it (layouts,
// pipelined loops), so the passes' rewrites are checked for meaning, not just form.
ir::Expected<AttentionRunResult> runUnifiedAttentionInterpreted(const UnifiedAttentionConfig& config,
                                                                const AttentionShape& shape, bool afterPasses = false);

}  // namespace attnjit::compiler
