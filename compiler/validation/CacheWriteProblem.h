// A reshape_and_cache problem. The batch is an BatchShape: sequence s writes
// its query_lens[s] new tokens at positions context_lens[s] .. of its blocks, which
// are a random permutation of the cache's physical blocks; about one token in
// eight is a padding token (slot -1). Keys and values are random (whole rows of
// zeros and rows of widely varying magnitude for the per-token-head formats), the
// cache starts poisoned, and the check is:
// - every cache row that no token owns is bit-for-bit untouched;
// - auto: written rows equal the input bits;
// - quantized: each stored value, dequantized, is within half a quantization step
//   (at its magnitude) of x / scale clamped to the format's range, and per-token-head
//   scales equal the reference's max|x| / QMAX (floor 1e-6) exactly.
#pragma once

#include <memory>

#include "compiler/validation/KernelProblem.h"
#include "compiler/kernels/CacheWrite.h"

namespace attnjit::validation {

class CacheWriteProblem : public KernelProblem {
 public:
  static support::Expected<std::unique_ptr<CacheWriteProblem>> create(const compiler::CacheWriteConfig& config,
                                                                const compiler::BatchShape& shape);
  // maxAbsError: the largest dequantized error |q · scale - x| (0 for auto);
  // tolerance: the largest error any element was allowed (half a step at its
  // magnitude, times its scale); maxRelError: the largest error as a fraction of
  // its own allowance; passed: every element within its bound (and exact scales).
  void check(const std::vector<Buffer>& after, AttentionRunResult& result) const override;

  // Per-tensor scales the problem uses (the per-tensor fp8 formats).
  static constexpr float kKeyScale = 0.0213f;
  static constexpr float kValueScale = 0.00173f;  // large values saturate e4m3

 private:
  CacheWriteProblem() = default;
  struct Data;
  std::shared_ptr<const Data> data_;
};

support::Expected<AttentionRunResult> runCacheWriteInterpreted(const compiler::CacheWriteConfig& config,
                                                          const compiler::BatchShape& shape);
support::Expected<GpuRunResult> runCacheWriteGpu(const compiler::CacheWriteConfig& config,
                                                 const compiler::BatchShape& shape, const GpuRunOptions& options);

}  // namespace attnjit::validation
