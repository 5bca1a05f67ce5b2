// YAML specs: a file names a kernel family and its parameters; each parameter may
// be a single value or a list, and the variants are the cartesian product.
// Documented field by field in specs/README.md. Errors carry file:line:col and
// name the field; unknown fields are errors.
#pragma once

#include <string>
#include <vector>

#include "compiler/spec/BatchShape.h"
#include "compiler/kernels/CacheWrite.h"
#include "compiler/kernels/Family.h"
#include "compiler/kernels/MergeAttnStates.h"
#include "compiler/kernels/MlaDecode.h"
#include "compiler/kernels/MergePartials.h"
#include "compiler/kernels/GatherCache.h"
#include "compiler/kernels/ConvertCache.h"
#include "compiler/kernels/MlaCacheWrite.h"
#include "compiler/kernels/ReduceSegments.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "support/Diagnostics.h"

namespace attnjit::compiler {

struct Variant {
  std::string name;  // kernel name, unique within the spec
  Family family = Family::UnifiedAttention;
  // The parameters of `family` (Families.def names the member of each); the
  // other members keep their defaults.
#define ATTNJIT_FAMILY(Enum, spelling, Config, member, build) Config member;
#include "compiler/kernels/Families.def"
  support::Location location;  // where in the spec it came from
};

struct Spec {
  std::string path;
  Family family = Family::UnifiedAttention;
  std::string target = "sm_90a";
  std::vector<Variant> variants;
  BatchShape shape;  // the batch `attnjit run` uses unless --shape overrides
};

support::Expected<Spec> loadSpecFile(const std::string& path);
// The parameters of a variant in spec spelling, e.g. "dtype=bf16 num_query_heads=32
// num_kv_heads=8 head_size=128 block_size=16 causal=true tile_size=32 num_warps=4".
std::string formatSpecParams(const UnifiedAttentionConfig& config);
std::string formatSpecParams(const MergeAttnStatesConfig& config);
std::string formatSpecParams(const CacheWriteConfig& config);
std::string formatSpecParams(const MlaDecodeConfig& config);
std::string formatSpecParams(const MergePartialsConfig& config);
std::string formatSpecParams(const MlaCacheWriteConfig& config);
std::string formatSpecParams(const GatherCacheConfig& config);
std::string formatSpecParams(const ConvertCacheConfig& config);
std::string formatSpecParams(const ReduceSegmentsConfig& config);
support::Expected<Spec> loadSpecText(const std::string& text, const std::string& path);

}  // namespace attnjit::compiler
