#include "compiler/validation/VariantRuns.h"

#include <new>
#include <stdexcept>

#include "compiler/validation/CacheWriteProblem.h"
#include "compiler/validation/ConvertCacheProblem.h"
#include "compiler/validation/GatherCacheProblem.h"
#include "compiler/validation/HostBudget.h"
#include "compiler/validation/MergeAttnStatesProblem.h"
#include "compiler/validation/MergePartialsProblem.h"
#include "compiler/validation/MlaCacheWriteProblem.h"
#include "compiler/validation/MlaDecodeProblem.h"
#include "compiler/validation/ReduceSegmentsProblem.h"

namespace attnjit::validation {

using compiler::Family;

namespace {

// Every family has a case: a family added to Families.def without its problem
// here fails to compile (-Wswitch).
support::Expected<AttentionRunResult> interpretFamily(const compiler::Variant& variant,
                                                      const compiler::BatchShape& shape) {
  switch (variant.family) {
    case Family::UnifiedAttention: return runUnifiedAttentionInterpreted(variant.attention, shape);
    case Family::MergeAttnStates: return runMergeAttnStatesInterpreted(variant.merge, shape);
    case Family::ReshapeAndCache: return runCacheWriteInterpreted(variant.cacheWrite, shape);
    case Family::MergePartials: return runMergePartialsInterpreted(variant.mergePartials, shape);
    case Family::MlaCacheWrite: return runMlaCacheWriteInterpreted(variant.mlaCacheWrite, shape);
    case Family::GatherCache: return runGatherCacheInterpreted(variant.gatherCache, shape);
    case Family::ConvertCache: return runConvertCacheInterpreted(variant.convertCache, shape);
    case Family::MlaDecode: return runMlaDecodeInterpreted(variant.mla, shape);
    case Family::ReduceSegments: return runReduceSegmentsInterpreted(variant.reduceSegments, shape);
  }
  ATTNJIT_CHECK(false, "a Variant whose family is outside the family table");
  return support::Diagnostic{};
}

support::Expected<GpuRunResult> runFamilyGpu(const compiler::Variant& variant, const compiler::BatchShape& shape,
                                             const GpuRunOptions& options) {
  switch (variant.family) {
    case Family::UnifiedAttention: return runUnifiedAttentionGpu(variant.attention, shape, options);
    case Family::MergeAttnStates: return runMergeAttnStatesGpu(variant.merge, shape, options);
    case Family::ReshapeAndCache: return runCacheWriteGpu(variant.cacheWrite, shape, options);
    case Family::MergePartials: return runMergePartialsGpu(variant.mergePartials, shape, options);
    case Family::MlaCacheWrite: return runMlaCacheWriteGpu(variant.mlaCacheWrite, shape, options);
    case Family::GatherCache: return runGatherCacheGpu(variant.gatherCache, shape, options);
    case Family::ConvertCache: return runConvertCacheGpu(variant.convertCache, shape, options);
    case Family::MlaDecode: return runMlaDecodeGpu(variant.mla, shape, options);
    case Family::ReduceSegments: return runReduceSegmentsGpu(variant.reduceSegments, shape, options);
  }
  ATTNJIT_CHECK(false, "a Variant whose family is outside the family table");
  return support::Diagnostic{};
}

// The budget check first (the shape's own limits hold already: the problems validate
// it); an allocation failure past the estimate is an error, not an abort.
template <typename Run>
auto withinHostBudget(const compiler::Variant& variant, const compiler::BatchShape& shape, bool interpreted,
                      Run run) -> decltype(run()) {
  if (support::Status valid = shape.validate(); !valid) return valid;
  if (support::Status budget = checkHostBudget(variant, shape, interpreted); !budget) return budget;
  try {
    return run();
  } catch (const std::bad_alloc&) {
    return outOfHostMemory(variant, shape);
  } catch (const std::length_error&) {
    return outOfHostMemory(variant, shape);
  }
}

}  // namespace

support::Expected<AttentionRunResult> runVariantInterpreted(const compiler::Variant& variant,
                                                            const compiler::BatchShape& shape) {
  return withinHostBudget(variant, shape, true, [&] { return interpretFamily(variant, shape); });
}

support::Expected<GpuRunResult> runVariantGpu(const compiler::Variant& variant, const compiler::BatchShape& shape,
                                              const GpuRunOptions& options) {
  return withinHostBudget(variant, shape, false, [&] { return runFamilyGpu(variant, shape, options); });
}

}  // namespace attnjit::validation
