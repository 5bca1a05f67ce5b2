// A spec variant's kernel and parameter text, whatever its family (the family
// table, compiler/kernels/Families.def, dispatches).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "compiler/spec/Spec.h"
#include "ir/IR.h"

namespace attnjit::compiler {

support::Expected<std::unique_ptr<ir::Kernel>> buildVariantKernel(const Variant& variant);
// The variant's parameters in spec spelling (formatSpecParams of its family's config).
std::string formatVariantParams(const Variant& variant);
// The reduce_segments kernel a split-KV variant's partials need after it (what
// the op API launches as stage 2, what `attnjit aot` adds to a bundle); nullopt
// for every variant that is complete in one launch.
std::optional<ReduceSegmentsConfig> splitKvStage2(const Variant& variant);
}  // namespace attnjit::compiler
