#include "compiler/KernelFamily.h"

#include "compiler/CacheWriteProblem.h"
#include "compiler/MergeAttnStatesProblem.h"

namespace attnjit::compiler {

namespace {
bool isMerge(const Variant& v) { return v.family == "merge_attn_states"; }
bool isCacheWrite(const Variant& v) { return v.family == "reshape_and_cache"; }
}  // namespace

ir::Expected<std::unique_ptr<ir::Kernel>> buildVariantKernel(const Variant& variant) {
  if (isMerge(variant)) return buildMergeAttnStates(variant.merge);
  if (isCacheWrite(variant)) return buildCacheWrite(variant.cacheWrite);
  return buildUnifiedAttention(variant.attention);
}

std::string formatVariantParams(const Variant& variant) {
  if (isMerge(variant)) return formatSpecParams(variant.merge);
  if (isCacheWrite(variant)) return formatSpecParams(variant.cacheWrite);
  return formatSpecParams(variant.attention);
}

ir::Expected<AttentionRunResult> runVariantInterpreted(const Variant& variant, const AttentionShape& shape) {
  if (isMerge(variant)) return runMergeAttnStatesInterpreted(variant.merge, shape);
  if (isCacheWrite(variant)) return runCacheWriteInterpreted(variant.cacheWrite, shape);
  return runUnifiedAttentionInterpreted(variant.attention, shape);
}

ir::Expected<GpuRunResult> runVariantGpu(const Variant& variant, const AttentionShape& shape,
                                         const GpuRunOptions& options) {
  if (isMerge(variant)) return runMergeAttnStatesGpu(variant.merge, shape, options);
  if (isCacheWrite(variant)) return runCacheWriteGpu(variant.cacheWrite, shape, options);
  return runUnifiedAttentionGpu(variant.attention, shape, options);
}

}  // namespace attnjit::compiler
