#include "compiler/spec/VariantKernel.h"

namespace attnjit::compiler {

support::Expected<std::unique_ptr<ir::Kernel>> buildVariantKernel(const Variant& variant) {
  switch (variant.family) {
#define ATTNJIT_FAMILY(Enum, spelling, Config, member, build) \
  case Family::Enum:                                         \
    return build(variant.member);
#include "compiler/kernels/Families.def"
  }
  ATTNJIT_CHECK(false, "a Variant whose family is outside the family table");
  return support::Diagnostic{};
}

std::string formatVariantParams(const Variant& variant) {
  switch (variant.family) {
#define ATTNJIT_FAMILY(Enum, spelling, Config, member, build) \
  case Family::Enum:                                         \
    return formatSpecParams(variant.member);
#include "compiler/kernels/Families.def"
  }
  ATTNJIT_CHECK(false, "a Variant whose family is outside the family table");
  return {};
}

std::optional<ReduceSegmentsConfig> splitKvStage2(const Variant& variant) {
  switch (variant.family) {
    case Family::UnifiedAttention:
      if (variant.attention.splitKv) return reduceSegmentsFor(variant.attention);
      return std::nullopt;
    case Family::MlaDecode:
      if (variant.mla.splitKv) return reduceSegmentsFor(variant.mla);
      return std::nullopt;
    case Family::MergeAttnStates:
    case Family::ReshapeAndCache:
    case Family::MergePartials:
    case Family::MlaCacheWrite:
    case Family::GatherCache:
    case Family::ConvertCache:
    case Family::ReduceSegments: return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace attnjit::compiler
