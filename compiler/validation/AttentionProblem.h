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
#include "compiler/spec/BatchShape.h"
#include "support/Diagnostics.h"

namespace attnjit::validation {

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
  // The output buffer's bytes after the run ([num_tokens, o_stride_token] in the
  // data type; sequences' tokens in batch order), for comparisons between runs.
  std::vector<uint8_t> output;
  int64_t outputStrideToken = 0;  // in elements
};

// The inputs of one problem, in the kernel's layouts, and the check of its output.
// Buffers are poisoned where the kernel must not read (NaN cache slots, padding,
// out-of-range block-table entries) and the output starts as NaN.
class UnifiedAttentionProblem {
 public:
  static support::Expected<std::unique_ptr<UnifiedAttentionProblem>> create(
      const compiler::UnifiedAttentionConfig& config, const compiler::BatchShape& shape);

  struct Buffer {
    std::string label;
    std::vector<uint8_t> bytes;
  };
  // Every buffer of the problem: out, q, kv_cache, block_tables, seq_lens,
  // cu_seqlens_q, then as the config asks k_scale and v_scale (per-tensor fp8),
  // alibi_slopes, sinks, lse (output_lse), and segm_output, segm_max, segm_expsum
  // (split-KV scratch). buffers()[0] is the output; outputs and scratch start
  // poisoned (NaN).
  std::vector<Buffer>& buffers() { return buffers_; }
  // One kernel launch of the problem: 2D is one launch of the attention kernel;
  // split-KV is stage 1 (the attention kernel) then reduce_segments.
  struct Launch {
    bool reduceSegments = false;   // which kernel: buildUnifiedAttention or buildReduceSegments
    std::vector<size_t> pointers;  // the pointer parameters, as indices into buffers()
    // The scalar parameters after the pointers, in order (integers and floats; the
    // launcher converts each to its parameter's exact type).
    std::vector<std::variant<int64_t, double>> scalars;
    int64_t gridX = 1, gridY = 1, gridZ = 1;
  };
  const std::vector<Launch>& launches() const { return launches_; }
  // The kernel of a launch.
  support::Expected<std::unique_ptr<ir::Kernel>> buildKernel(const Launch& launch) const;
  // The attention kernel's scalars and grid (launches()[0]).
  const std::vector<std::variant<int64_t, double>>& scalarArguments() const { return launches_[0].scalars; }
  int64_t gridX() const { return launches_[0].gridX; }
  int64_t gridY() const { return launches_[0].gridY; }
  // Index of the lse buffer (output_lse), or -1.
  int lseBuffer() const { return lseBuffer_; }
  // How the buffers are laid out, for a caller that launches through the op API
  // (strides in elements, the cache's in cache elements, as PagedAttentionParams).
  struct DeviceLayout {
    double scale = 0;  // softmax scale
    int numBlocks = 0;
    int64_t qStrideToken = 0, qStrideHead = 0, oStrideToken = 0, oStrideHead = 0, blockTableStride = 0;
    int64_t kvStrideBlock = 0, kvStrideKv = 0, kvStrideToken = 0, kvStrideHead = 0, lseStrideHead = 0;
    // Separate per-token-head scales (buffers k_scale_cache, v_scale_cache): f32 elements.
    int64_t scaleStrideBlock = 0, scaleStrideToken = 0, scaleStrideHead = 0;
  };
  const DeviceLayout& deviceLayout() const { return layout_; }
  // The index of the buffer labelled `label`, or -1.
  int bufferIndex(const std::string& label) const;
  // Unique bytes of q, the K/V rows attended to and o; FLOPs as 4·D·Hq·(visible
  // keys summed over query tokens) — the counts shared/REFERENCE.md uses.
  double minimumBytes() const { return minimumBytes_; }
  double flops() const { return flops_; }
  // Compares an output buffer (the bytes of buffers()[0] after a run) with the
  // float64 reference; fills the error fields, detail and passed of `result`.
  // With output_lse, `lse` is the lse buffer's bytes after the run: also checked.
  // Also records the output row stride in `result`.
  void check(const std::vector<uint8_t>& output, AttentionRunResult& result,
             const std::vector<uint8_t>* lse = nullptr) const;

 private:
  UnifiedAttentionProblem() = default;
  struct Data;
  std::shared_ptr<Data> data_;
  std::vector<Buffer> buffers_;
  std::vector<Launch> launches_;
  DeviceLayout layout_;
  int lseBuffer_ = -1;
  double minimumBytes_ = 0, flops_ = 0;
};

// Builds the kernel for `config`, makes random inputs for `shape`, runs the CPU
// interpreter, and compares with the float64 reference. With `afterPasses` the
// interpreter runs the kernel as the tile-IR pass pipeline leaves it (layouts,
// pipelined loops), so the passes' rewrites are checked for meaning, not just form;
// `wgmmaTarget` runs them as for sm_90a (load_tensor tiles kept for TMA copies).
support::Expected<AttentionRunResult> runUnifiedAttentionInterpreted(const compiler::UnifiedAttentionConfig& config,
                                                                     const compiler::BatchShape& shape,
                                                                     bool afterPasses = false,
                                                                     bool wgmmaTarget = false);

}  // namespace attnjit::validation
