// YAML specs: a file names a kernel family and its parameters; each parameter may
// be a single value or a list, and the variants are the cartesian product.
// Documented field by field in specs/README.md. Errors carry file:line:col and
// name the field; unknown fields are errors.
#pragma once

#include <string>
#include <vector>

#include "compiler/AttentionProblem.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "ir/Diagnostics.h"

namespace attnjit::compiler {

struct Variant {
  std::string name;                  // kernel name, unique within the spec
  std::string family;                // "unified_attention"
  UnifiedAttentionConfig attention;  // for family unified_attention
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
ir::Expected<Spec> loadSpecText(const std::string& text, const std::string& path);

}  // namespace attnjit::compiler
