// A convert_cache problem (vLLM's convert_fp8). The batch's keys (the sum of
// query_lens and context_lens) times kElementsPerKey, plus 13 times the
// variant's count divisibility, are the element count: a multiple of that
// divisibility and of no block, so the last program is masked. Wide values
// are uniform in [-1, 1] times 2^k (k in -4..4), so some saturate the fp8
// range after the division by kScale; fp8 sources are random finite bytes. dst
// starts poisoned with kPadding elements after the last, which must stay so. The
// check is bit for bit: f32(x / scale) then fp8 (nearest even, saturated), or
// f32(fp8 · scale) then dtype.
#pragma once

#include <memory>

#include "compiler/kernels/ConvertCache.h"
#include "compiler/validation/KernelProblem.h"

namespace attnjit::validation {

class ConvertCacheProblem : public KernelProblem {
 public:
  static support::Expected<std::unique_ptr<ConvertCacheProblem>> create(const compiler::ConvertCacheConfig& config,
                                                                      const compiler::BatchShape& shape);
  void check(const std::vector<Buffer>& after, AttentionRunResult& result) const override;

  static constexpr float kScale = 0.0173f;
  static constexpr int64_t kElementsPerKey = 64;
  static constexpr int64_t kPadding = 16;
  static int64_t elementsFor(int64_t keys, int countDivisibility) {
    return keys * kElementsPerKey + 13 * int64_t{countDivisibility};
  }

 private:
  ConvertCacheProblem() = default;
  struct Data;
  std::shared_ptr<const Data> data_;
};

support::Expected<AttentionRunResult> runConvertCacheInterpreted(const compiler::ConvertCacheConfig& config,
                                                                const compiler::BatchShape& shape);
support::Expected<GpuRunResult> runConvertCacheGpu(const compiler::ConvertCacheConfig& config,
                                                   const compiler::BatchShape& shape, const GpuRunOptions& options);

}  // namespace attnjit::validation
