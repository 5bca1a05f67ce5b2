#include "compiler/KernelFamily.h"

#include "compiler/CacheWriteProblem.h"
#include "compiler/MergeAttnStatesProblem.h"
#include "compiler/MlaDecodeProblem.h"
#include "compiler/MergePartialsProblem.h"
#include "compiler/MlaCacheWriteProblem.h"
#include "compiler/ReduceSegmentsProblem.h"

namespace attnjit::compiler {

namespace {
bool isMerge(const Variant& v) { return v.family == "merge_attn_states"; }
bool isCacheWrite(const Variant& v) { return v.family == "reshape_and_cache"; }
bool isMlaDecode(const Variant& v) { return v.family == "mla_decode"; }
bool isMergePartials(const Variant& v) { return v.family == "merge_partials"; }
bool isMlaCacheWrite(const Variant& v) { return v.family == "mla_cache_write"; }
bool isReduceSegments(const Variant& v) { return v.family == "reduce_segments"; }
}  // namespace

ir::Expected<std::unique_ptr<ir::Kernel>> buildVariantKernel(const Variant& variant) {
  if (isMerge(variant)) return buildMergeAttnStates(variant.merge);
  if (isCacheWrite(variant)) return buildCacheWrite(variant.cacheWrite);
  if (isMlaDecode(variant)) return buildMlaDecode(variant.mla);
  if (isMergePartials(variant)) return buildMergePartials(variant.mergePartials);
  if (isMlaCacheWrite(variant)) return buildMlaCacheWrite(variant.mlaCacheWrite);
  if (isReduceSegments(variant)) return buildReduceSegments(variant.reduceSegments);
  return buildUnifiedAttention(variant.attention);
}

std::string formatVariantParams(const Variant& variant) {
  if (isMerge(variant)) return formatSpecParams(variant.merge);
  if (isCacheWrite(variant)) return formatSpecParams(variant.cacheWrite);
  if (isMlaDecode(variant)) return formatSpecParams(variant.mla);
  if (isMergePartials(variant)) return formatSpecParams(variant.mergePartials);
  if (isMlaCacheWrite(variant)) return formatSpecParams(variant.mlaCacheWrite);
  if (isReduceSegments(variant)) return formatSpecParams(variant.reduceSegments);
  return formatSpecParams(variant.attention);
}

ir::Expected<AttentionRunResult> runVariantInterpreted(const Variant& variant, const AttentionShape& shape) {
  if (isMerge(variant)) return runMergeAttnStatesInterpreted(variant.merge, shape);
  if (isCacheWrite(variant)) return runCacheWriteInterpreted(variant.cacheWrite, shape);
  if (isMlaDecode(variant)) return runMlaDecodeInterpreted(variant.mla, shape);
  if (isMergePartials(variant)) return runMergePartialsInterpreted(variant.mergePartials, shape);
  if (isMlaCacheWrite(variant)) return runMlaCacheWriteInterpreted(variant.mlaCacheWrite, shape);
  if (isReduceSegments(variant)) return runReduceSegmentsInterpreted(variant.reduceSegments, shape);
  return runUnifiedAttentionInterpreted(variant.attention, shape);
}

ir::Expected<GpuRunResult> runVariantGpu(const Variant& variant, const AttentionShape& shape,
                                         const GpuRunOptions& options) {
  if (isMerge(variant)) return runMergeAttnStatesGpu(variant.merge, shape, options);
  if (isCacheWrite(variant)) return runCacheWriteGpu(variant.cacheWrite, shape, options);
  if (isMlaDecode(variant)) return runMlaDecodeGpu(variant.mla, shape, options);
  if (isMergePartials(variant)) return runMergePartialsGpu(variant.mergePartials, shape, options);
  if (isMlaCacheWrite(variant)) return runMlaCacheWriteGpu(variant.mlaCacheWrite, shape, options);
  if (isReduceSegments(variant)) return runReduceSegmentsGpu(variant.reduceSegments, shape, options);
  return runUnifiedAttentionGpu(variant.attention, shape, options);
}

}  // namespace attnjit::compiler
