// A spec variant run on a batch (interpreter or GPU) and checked against the
// float64 reference, whatever its family. The CLI (`run`, `bench`) and the
// spec-wide tests go through these instead of naming unified attention.
//
// The companion families take their rows from the same batch description as
// unified attention (BatchShape): merge_attn_states merges sum(query_lens)
// tokens; reshape_and_cache writes each sequence's query_lens[s] new tokens after
// its context_lens[s] cached ones; merge_partials and reduce_segments combine
// num_partials partials (segments) for each of sum(query_lens) tokens.
#pragma once

#include "compiler/spec/Spec.h"
#include "compiler/validation/AttentionGpu.h"
#include "compiler/validation/AttentionProblem.h"

namespace attnjit::validation {

support::Expected<AttentionRunResult> runVariantInterpreted(const compiler::Variant& variant,
                                                            const compiler::BatchShape& shape);
support::Expected<GpuRunResult> runVariantGpu(const compiler::Variant& variant, const compiler::BatchShape& shape,
                                         const GpuRunOptions& options);

}  // namespace attnjit::validation
