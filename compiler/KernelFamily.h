// What each spec family means, in one place: how a variant builds its kernel,
// prints its parameters, and runs on a batch (interpreter or GPU). The CLI and
// the spec-wide tests go through these instead of naming unified attention.
//
// The companion families take their rows from the same batch description as
// unified attention (AttentionShape): merge_attn_states merges sum(query_lens)
// tokens; reshape_and_cache writes each sequence's query_lens[s] new tokens after
// its context_lens[s] cached ones; merge_partials and reduce_segments combine
// num_partials partials (segments) for each of sum(query_lens) tokens.
#pragma once

#include <memory>
#include <string>

#include "compiler/AttentionGpu.h"
#include "compiler/AttentionProblem.h"
#include "compiler/Spec.h"

namespace attnjit::compiler {

ir::Expected<std::unique_ptr<ir::Kernel>> buildVariantKernel(const Variant& variant);
// The variant's parameters in spec spelling (formatSpecParams of its family's config).
std::string formatVariantParams(const Variant& variant);
ir::Expected<AttentionRunResult> runVariantInterpreted(const Variant& variant, const AttentionShape& shape);
ir::Expected<GpuRunResult> runVariantGpu(const Variant& variant, const AttentionShape& shape,
                                         const GpuRunOptions& options);

}  // namespace attnjit::compiler
