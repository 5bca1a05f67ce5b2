// A reduce_segments problem (stage 2 of split-KV attention): per-segment partial
// results for the batch's tokens (the sum of query_lens) and shape.numPartials
// segments per (token, query head), as stage 1 leaves them; the float64 reference
// (compiler/validation/reference/ReduceSegmentsReference.h) and the check.
//
// The data covers what stage 1 produces: segments with maxima spread over 24
// powers of two; empty segments (maximum -inf, sum 0), whose output rows hold
// finite garbage instead of stage 1's zeros (the kernel reads them and weighs
// them by exactly 0, so any finite value must vanish); and, when the batch has
// two tokens or more, the last token's even heads with every segment empty
// (output 0, LSE -inf). The scratch's padding columns [head_size,
// HEAD_SIZE_PADDED) hold NaN: the kernel must not read them. Output rows and
// heads, and LSE blocks, are separated by poisoned gaps, and the outputs start
// poisoned.
#pragma once

#include <memory>

#include "compiler/validation/KernelProblem.h"
#include "compiler/kernels/ReduceSegments.h"
#include "compiler/validation/reference/ReduceSegmentsReference.h"

namespace attnjit::validation {

class ReduceSegmentsProblem : public KernelProblem {
 public:
  static support::Expected<std::unique_ptr<ReduceSegmentsProblem>> create(const compiler::ReduceSegmentsConfig& config,
                                                                    const compiler::BatchShape& shape);
  // Output: max abs error against the reference, tolerance by dtype and segment
  // count; the gaps after each head's row and each token's rows keep their poison;
  // with output_lse every LSE within 1e-5 relative (-inf exactly) and the LSE
  // buffer's gaps untouched.
  void check(const std::vector<Buffer>& after, AttentionRunResult& result) const override;

  const reference::ReduceSegmentsInputs& inputs() const { return inputs_; }
  // The absolute error allowed for outputs of magnitude <= 1.
  static double tolerance(ir::ScalarKind dtype, int numSegments);

 private:
  ReduceSegmentsProblem() = default;
  compiler::ReduceSegmentsConfig config_;
  reference::ReduceSegmentsInputs inputs_;
  int64_t oStrideToken_ = 0, oStrideHead_ = 0;
  int64_t lseStrideToken_ = 0, lseStrideHead_ = 0, lseElements_ = 0;
  double outputScale_ = 1;  // output_fp8: the scale passed (an f32)
};

support::Expected<AttentionRunResult> runReduceSegmentsInterpreted(const compiler::ReduceSegmentsConfig& config,
                                                              const compiler::BatchShape& shape);
support::Expected<GpuRunResult> runReduceSegmentsGpu(const compiler::ReduceSegmentsConfig& config,
                                                     const compiler::BatchShape& shape, const GpuRunOptions& options);

}  // namespace attnjit::validation
