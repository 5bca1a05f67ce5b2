#include "compiler/spec/YamlScalars.h"

#include <limits>

namespace attnjit::compiler {

support::Location yamlLocation(const std::string& path, const YAML::Mark& mark) {
  support::Location loc;
  loc.file = path;
  if (mark.line >= 0) {
    loc.line = mark.line + 1;
    loc.col = mark.column >= 0 ? mark.column + 1 : 0;
  }
  return loc;
}

std::string describeNode(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Scalar:
      return "'" + node.Scalar() + "'";
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return "no value";
  }
  return "no value";
}

bool isQuoted(const YAML::Node& node) { return node.Tag() == "!"; }

std::optional<int64_t> parseDecimal(const std::string& text) {
  size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '+' || text[i] == '-')) negative = text[i++] == '-';
  if (i == text.size()) return std::nullopt;
  uint64_t magnitude = 0;
  const uint64_t limit = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  for (; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return std::nullopt;
    magnitude = magnitude * 10 + static_cast<uint64_t>(text[i] - '0');
    if (magnitude > limit) return std::nullopt;
  }
  int64_t value = static_cast<int64_t>(magnitude);
  return negative ? -value : value;
}

std::optional<bool> parseBool(const std::string& text) {
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  return std::nullopt;
}

std::optional<ir::ScalarKind> parseDtypeName(const std::string& text) {
  if (text == "f32" || text == "fp32" || text == "float32") return ir::ScalarKind::F32;
  if (text == "f16" || text == "fp16" || text == "float16") return ir::ScalarKind::F16;
  if (text == "bf16" || text == "bfloat16") return ir::ScalarKind::BF16;
  return std::nullopt;
}

}  // namespace attnjit::compiler
