// A merge_partials problem: shape.numPartials partial outputs and LSEs for the
// batch's tokens (the sum of query_lens), the float64 reference
// (compiler/validation/reference/CompanionReference.h), and the check. The data covers what
// context-parallel decode produces: finite LSEs, empty partials (+inf and -inf
// LSEs, whose output rows hold NaN: the kernel must not read them), one token
// with every partial of every head empty, and one NaN LSE (token 0, head 0, last
// partial), which must propagate. Partials, tokens and LSE blocks are separated by
// poisoned gaps, and the output starts poisoned.
#pragma once

#include <memory>

#include "compiler/validation/KernelProblem.h"
#include "compiler/kernels/MergePartials.h"
#include "compiler/validation/reference/CompanionReference.h"

namespace attnjit::validation {

class MergePartialsProblem : public KernelProblem {
 public:
  static support::Expected<std::unique_ptr<MergePartialsProblem>> create(const compiler::MergePartialsConfig& config,
                                                                   const compiler::BatchShape& shape);
  // Output: max abs error against the reference (NaN where the reference is NaN),
  // tolerance by dtype and partial count; the padding after each output row must
  // keep its poison; every LSE within 1e-5 (infinities and NaN exactly).
  void check(const std::vector<Buffer>& after, AttentionRunResult& result) const override;

  const reference::MergePartialsInputs& inputs() const { return inputs_; }
  // The absolute error allowed for outputs of magnitude <= 1.
  static double tolerance(ir::ScalarKind dtype, int numPartials);

 private:
  MergePartialsProblem() = default;
  compiler::MergePartialsConfig config_;
  reference::MergePartialsInputs inputs_;
  int64_t oStrideToken_ = 0;
};

support::Expected<AttentionRunResult> runMergePartialsInterpreted(const compiler::MergePartialsConfig& config,
                                                             const compiler::BatchShape& shape);
support::Expected<GpuRunResult> runMergePartialsGpu(const compiler::MergePartialsConfig& config,
                                                    const compiler::BatchShape& shape, const GpuRunOptions& options);

}  // namespace attnjit::validation
