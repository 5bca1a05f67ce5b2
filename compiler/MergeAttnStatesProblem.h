// A merge_attn_states problem: random partial outputs and LSEs (with the empty
// key-set cases vLLM handles: +inf and -inf LSEs on either side and on both), the
// float64 reference (tests/reference/CompanionReference.h), and the check. The batch
// is an AttentionShape: its tokens (the sum of query_lens) are the rows merged.
#pragma once

#include <memory>

#include "compiler/KernelProblem.h"
#include "compiler/kernels/MergeAttnStates.h"
#include "tests/reference/CompanionReference.h"

namespace attnjit::compiler {

class MergeAttnStatesProblem : public KernelProblem {
 public:
  static ir::Expected<std::unique_ptr<MergeAttnStatesProblem>> create(const MergeAttnStatesConfig& config,
                                                                     const AttentionShape& shape);
  // Output: max abs error against the reference, tolerance by dtype (one rounding to
  // the dtype plus f32 arithmetic with approximate exp); the padding after each
  // token's output row and every LSE entry are checked too (LSE within 1e-5).
  void check(const std::vector<Buffer>& after, AttentionRunResult& result) const override;

 private:
  MergeAttnStatesProblem() = default;
  MergeAttnStatesConfig config_;
  reference::MergeInputs inputs_;
  int64_t oStrideToken_ = 0;
};

ir::Expected<AttentionRunResult> runMergeAttnStatesInterpreted(const MergeAttnStatesConfig& config,
                                                               const AttentionShape& shape);
ir::Expected<GpuRunResult> runMergeAttnStatesGpu(const MergeAttnStatesConfig& config, const AttentionShape& shape,
                                                 const GpuRunOptions& options);

}  // namespace attnjit::compiler
