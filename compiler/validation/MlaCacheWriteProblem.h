// An MLA cache write (concat_and_cache_mla) problem. The batch is an
// BatchShape, as for reshape_and_cache: sequence s writes its query_lens[s]
// new tokens at positions context_lens[s] .. of its blocks, a random permutation
// of the cache's physical blocks (plus spare blocks nobody owns); about one token
// in eight is a padding token (slot -1). kv_c and k_pe are random rows of widely
// varying magnitude (large ones saturate e4m3 at the problem's scale) in separate
// strided buffers; the cache starts poisoned. The check (float64 reference in
// compiler/validation/reference/CompanionReference.h):
// - every cache row that no token owns is bit-for-bit untouched;
// - auto: written rows equal the input bits (kv_c, then k_pe);
// - fp8: each stored value, decoded, is within half a quantization step (at its
//   magnitude, plus the f32 division's rounding) of x / scale clamped to the
//   format's range.
#pragma once

#include <memory>

#include "compiler/validation/KernelProblem.h"
#include "compiler/kernels/MlaCacheWrite.h"

namespace attnjit::validation {

class MlaCacheWriteProblem : public KernelProblem {
 public:
  static support::Expected<std::unique_ptr<MlaCacheWriteProblem>> create(const compiler::MlaCacheWriteConfig& config,
                                                                   const compiler::BatchShape& shape);
  // maxAbsError: the largest dequantized error |q · scale - x| (0 for auto);
  // tolerance: the largest error any element was allowed; maxRelError: the largest
  // error as a fraction of its own allowance; passed: every element within its
  // bound and no stray write.
  void check(const std::vector<Buffer>& after, AttentionRunResult& result) const override;

  static constexpr float kScale = 0.0173f;  // per-tensor fp8 scale (rows of magnitude 64 saturate e4m3)

 private:
  MlaCacheWriteProblem() = default;
  struct Data;
  std::shared_ptr<const Data> data_;
};

support::Expected<AttentionRunResult> runMlaCacheWriteInterpreted(const compiler::MlaCacheWriteConfig& config,
                                                             const compiler::BatchShape& shape);
support::Expected<GpuRunResult> runMlaCacheWriteGpu(const compiler::MlaCacheWriteConfig& config,
                                                    const compiler::BatchShape& shape, const GpuRunOptions& options);

}  // namespace attnjit::validation
