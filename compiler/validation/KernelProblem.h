// A concrete problem for a kernel that is not unified attention (the companion
// kernels): host buffers in the kernel's layouts, the scalar arguments, the grid,
// and a check of the buffers after a run against a float64 reference. The
// interpreter and GPU runners below work for any such problem, given the kernel
// builder.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "compiler/validation/AttentionGpu.h"
#include "compiler/validation/AttentionProblem.h"
#include "ir/IR.h"

namespace attnjit::validation {

class KernelProblem {
 public:
  struct Buffer {
    std::string label;
    std::vector<uint8_t> bytes;
    bool written = false;  // the kernel writes it (copied back from the GPU for the check)
  };
  struct Grid {
    int64_t x = 1, y = 1, z = 1;
  };

  virtual ~KernelProblem() = default;

  // The kernel's pointer parameters in order.
  std::vector<Buffer>& buffers() { return buffers_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  // The scalar parameters after the pointers, in order.
  const std::vector<std::variant<int64_t, double>>& scalarArguments() const { return scalars_; }
  Grid grid() const { return grid_; }
  // Bytes the kernel must read and write at least (for GB/s).
  double minimumBytes() const { return minimumBytes_; }
  // Compares `after` (the buffers after a run, in buffers() order) with the
  // reference; fills the error fields, detail and passed of `result`.
  virtual void check(const std::vector<Buffer>& after, AttentionRunResult& result) const = 0;

 protected:
  std::vector<Buffer> buffers_;
  std::vector<std::variant<int64_t, double>> scalars_;
  Grid grid_;
  double minimumBytes_ = 0;
};

// The absolute error allowed, for outputs of magnitude <= 1, when `count` partial
// results are combined with f32 weights from the GPU's approximate exp and summed
// in f32 (a few ulp each), then rounded to `dtype` (unit roundoff u, twice over):
// merge_partials and reduce_segments.
double weightedCombineTolerance(ir::ScalarKind dtype, int count);

using ProblemKernelBuilder = std::function<support::Expected<std::unique_ptr<ir::Kernel>>()>;

// Builds the kernel, runs it on the CPU interpreter over a copy of the problem's
// buffers, and checks the result.
support::Expected<AttentionRunResult> runProblemInterpreted(const ProblemKernelBuilder& build,
                                                       const KernelProblem& problem);

// JIT-compiles the kernel for the local GPU, runs it once on the problem (checking
// the written buffers), and times it when options ask (as runUnifiedAttentionGpu;
// flops are 0).
support::Expected<GpuRunResult> runProblemGpu(const ProblemKernelBuilder& build, const KernelProblem& problem,
                                         const GpuRunOptions& options);

}  // namespace attnjit::validation
