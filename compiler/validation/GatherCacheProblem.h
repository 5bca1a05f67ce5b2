// A gather_cache problem (vLLM's cp_gather_cache / gather_and_maybe_dequant_cache).
// The batch is a BatchShape: sequence s holds context_lens[s] + query_lens[s]
// cached tokens in blocks that are a random permutation of the cache's physical
// blocks (plus spare blocks nobody owns, poisoned). Without seq_starts the
// gather reads each sequence's every token; with it, the query_lens[s] tokens
// from position context_lens[s] on (a chunk of context, any offset). Rows are
// random in [-1, 1] times 2^k (fp8 caches: random finite bytes); dst starts
// poisoned, with a padded token stride. The check (float64 reference in
// compiler/validation/reference/CompanionReference.h) is bit for bit: auto copies
// rows, fp8 stores fp8 · scale rounded to f32 and then to dtype (the product of
// an fp8 value and an f32 is exact in float64); padding columns stay poisoned.
#pragma once

#include <memory>

#include "compiler/kernels/GatherCache.h"
#include "compiler/validation/KernelProblem.h"

namespace attnjit::validation {

class GatherCacheProblem : public KernelProblem {
 public:
  static support::Expected<std::unique_ptr<GatherCacheProblem>> create(const compiler::GatherCacheConfig& config,
                                                                     const compiler::BatchShape& shape);
  void check(const std::vector<Buffer>& after, AttentionRunResult& result) const override;

  static constexpr float kScale = 0.0173f;  // per-tensor fp8 scale
  static constexpr int64_t kDstPadding = 8;  // elements after each dst row, never written

 private:
  GatherCacheProblem() = default;
  struct Data;
  std::shared_ptr<const Data> data_;
};

support::Expected<AttentionRunResult> runGatherCacheInterpreted(const compiler::GatherCacheConfig& config,
                                                               const compiler::BatchShape& shape);
support::Expected<GpuRunResult> runGatherCacheGpu(const compiler::GatherCacheConfig& config,
                                                  const compiler::BatchShape& shape, const GpuRunOptions& options);

}  // namespace attnjit::validation
