// A merge_attn_states problem: random partial outputs and LSEs (with the empty
// key-set cases vLLM handles: +inf and -inf LSEs on either side and on both), the
// float64 reference (compiler/validation/reference/CompanionReference.h), and the check. The batch
// is an BatchShape: its tokens (the sum of query_lens) are the rows merged.
#pragma once

#include <memory>

#include "compiler/validation/KernelProblem.h"
#include "compiler/kernels/MergeAttnStates.h"
#include "compiler/validation/reference/CompanionReference.h"

namespace attnjit::validation {

class MergeAttnStatesProblem : public KernelProblem {
 public:
  static support::Expected<std::unique_ptr<MergeAttnStatesProblem>> create(
      const compiler::MergeAttnStatesConfig& config, const compiler::BatchShape& shape);
  // Output: max abs error against the reference, tolerance by dtype (one rounding to
  // the dtype plus f32 arithmetic with approximate exp); the padding after each
  // token's output row and every LSE entry are checked too (LSE within 1e-5).
  void check(const std::vector<Buffer>& after, AttentionRunResult& result) const override;

 private:
  MergeAttnStatesProblem() = default;
  compiler::MergeAttnStatesConfig config_;
  reference::MergeInputs inputs_;
  int64_t oStrideToken_ = 0;
};

support::Expected<AttentionRunResult> runMergeAttnStatesInterpreted(const compiler::MergeAttnStatesConfig& config,
                                                               const compiler::BatchShape& shape);
support::Expected<GpuRunResult> runMergeAttnStatesGpu(const compiler::MergeAttnStatesConfig& config,
                                                      const compiler::BatchShape& shape, const GpuRunOptions& options);

}  // namespace attnjit::validation
