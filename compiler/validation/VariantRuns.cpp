#include "compiler/validation/VariantRuns.h"

#include "compiler/validation/CacheWriteProblem.h"
#include "compiler/validation/MergeAttnStatesProblem.h"
#include "compiler/validation/MergePartialsProblem.h"
#include "compiler/validation/MlaCacheWriteProblem.h"
#include "compiler/validation/MlaDecodeProblem.h"
#include "compiler/validation/ReduceSegmentsProblem.h"

namespace attnjit::validation {

using compiler::Family;

// Every family has a case: a family added to Families.def without its problem
// here fails to compile (-Wswitch).
support::Expected<AttentionRunResult> runVariantInterpreted(const compiler::Variant& variant,
                                                            const compiler::BatchShape& shape) {
  switch (variant.family) {
    case Family::UnifiedAttention: return runUnifiedAttentionInterpreted(variant.attention, shape);
    case Family::MergeAttnStates: return runMergeAttnStatesInterpreted(variant.merge, shape);
    case Family::ReshapeAndCache: return runCacheWriteInterpreted(variant.cacheWrite, shape);
    case Family::MergePartials: return runMergePartialsInterpreted(variant.mergePartials, shape);
    case Family::MlaCacheWrite: return runMlaCacheWriteInterpreted(variant.mlaCacheWrite, shape);
    case Family::MlaDecode: return runMlaDecodeInterpreted(variant.mla, shape);
    case Family::ReduceSegments: return runReduceSegmentsInterpreted(variant.reduceSegments, shape);
  }
  ATTNJIT_CHECK(false, "a Variant whose family is outside the family table");
  return support::Diagnostic{};
}

support::Expected<GpuRunResult> runVariantGpu(const compiler::Variant& variant, const compiler::BatchShape& shape,
                                              const GpuRunOptions& options) {
  switch (variant.family) {
    case Family::UnifiedAttention: return runUnifiedAttentionGpu(variant.attention, shape, options);
    case Family::MergeAttnStates: return runMergeAttnStatesGpu(variant.merge, shape, options);
    case Family::ReshapeAndCache: return runCacheWriteGpu(variant.cacheWrite, shape, options);
    case Family::MergePartials: return runMergePartialsGpu(variant.mergePartials, shape, options);
    case Family::MlaCacheWrite: return runMlaCacheWriteGpu(variant.mlaCacheWrite, shape, options);
    case Family::MlaDecode: return runMlaDecodeGpu(variant.mla, shape, options);
    case Family::ReduceSegments: return runReduceSegmentsGpu(variant.reduceSegments, shape, options);
  }
  ATTNJIT_CHECK(false, "a Variant whose family is outside the family table");
  return support::Diagnostic{};
}

}  // namespace attnjit::validation
