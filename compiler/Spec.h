// YAML specs: a file names a kernel family and its parameters; each parameter may
// be a single value or a list, and the variants are the cartesian product.
// Documented field by field in specs/README.md. Errors carry file:line:col and
// name the field; unknown fields are errors.
#pragma once

#include <string>
#include <vector>

#include "compiler/AttentionProblem.h"
#include "compiler/kernels/CacheWrite.h"
#include "compiler/kernels/MergeAttnStates.h"
#include "compiler/kernels/MlaDecode.h"
#include "compiler/kernels/MergePartials.h"
#include "compiler/kernels/MlaCacheWrite.h"
#include "compiler/kernels/ReduceSegments.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "ir/Diagnostics.h"

namespace attnjit::compiler {

struct Variant {
  std::string name;                  // kernel name, unique within the spec
  std::string family;                // "unified_attention", "merge_attn_states", ... (kFamilies in Spec.cpp)
  UnifiedAttentionConfig attention;  // for family unified_attention
  MergeAttnStatesConfig merge;       // for family merge_attn_states
  CacheWriteConfig cacheWrite;       // for family reshape_and_cache
  MlaDecodeConfig mla;               // for family mla_decode
  MergePartialsConfig mergePartials; // for family merge_partials
  MlaCacheWriteConfig mlaCacheWrite; // for family mla_cache_write
  ReduceSegmentsConfig reduceSegments; // for family reduce_segments
  ir::Location location;             // where in the spec it came from
};

struct Spec {
  std::string path;
  std::string family;
  std::string target = "sm_90a";
  std::vector<Variant> variants;
  AttentionShape shape;  // the batch `attnjit run` uses unless --shape overrides
};

ir::Expected<Spec> loadSpecFile(const std::string& path);
// The parameters of a variant in spec spelling, e.g. "dtype=bf16 num_query_heads=32
// num_kv_heads=8 head_size=128 block_size=16 causal=true tile_size=32 num_warps=4".
std::string formatSpecParams(const UnifiedAttentionConfig& config);
std::string formatSpecParams(const MergeAttnStatesConfig& config);
std::string formatSpecParams(const CacheWriteConfig& config);
std::string formatSpecParams(const MlaDecodeConfig& config);
std::string formatSpecParams(const MergePartialsConfig& config);
std::string formatSpecParams(const MlaCacheWriteConfig& config);
std::string formatSpecParams(const ReduceSegmentsConfig& config);
ir::Expected<Spec> loadSpecText(const std::string& text, const std::string& path);

}  // namespace attnjit::compiler
