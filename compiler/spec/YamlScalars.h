// Small helpers of the spec loader: YAML marks → locations, scalar parsing with
// the exact spellings specs accept. Internal to compiler/ (it exposes yaml-cpp types).
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <optional>
#include <string>

#include "support/InputFile.h"
#include "support/NameSuggestion.h"
#include "support/Diagnostics.h"
#include "ir/Types.h"

namespace attnjit::compiler {

// yaml-cpp marks are 0-based (and -1 when unknown); locations are 1-based.
support::Location yamlLocation(const std::string& path, const YAML::Mark& mark);
// "a mapping", "a list", "no value", "'text'": for "must be X, got Y" messages.
std::string describeNode(const YAML::Node& node);
// A quoted scalar ("128", '128') is a string, never a number or a boolean.
bool isQuoted(const YAML::Node& node);
// Strict decimal integer: optional sign, digits only, no overflow.
std::optional<int64_t> parseDecimal(const std::string& text);
// true/false in the YAML 1.2 core spellings (true, True, TRUE, ...).
std::optional<bool> parseBool(const std::string& text);
// f32/fp32/float32, f16/fp16/float16, bf16/bfloat16.
std::optional<ir::ScalarKind> parseDtypeName(const std::string& text);

}  // namespace attnjit::compiler
