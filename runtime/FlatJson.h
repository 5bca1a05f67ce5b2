// A flat JSON object of string values ({"name":"value",...}): the metadata stored with each
// cached kernel. Small enough to write by hand, and readable with any JSON tool.
//
// Also a general JSON value (JsonValue, parseJson, writeJson) for nested documents such as
// the manifest of an ahead-of-time bundle (runtime/BundleManifest.h). It shares the string
// syntax (every escape, surrogate pairs) with the flat form.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/Diagnostics.h"

namespace attnjit::runtime {

using StringMap = std::map<std::string, std::string>;

// Keys in sorted order, so equal maps serialize to equal bytes.
std::string writeFlatJson(const StringMap& values);

// Accepts exactly what JSON allows for an object whose values are all strings (whitespace,
// every escape including \uXXXX and surrogate pairs); anything else is an error naming the
// byte offset. Duplicate keys are an error.
support::Expected<StringMap> parseFlatJson(std::string_view text);

struct JsonMember;

// Any JSON value. Objects keep their members in document order; `location` is where the
// value starts in the parsed text (line and column), so a reader can point at it.
struct JsonValue {
  enum class Kind { Null, Bool, Number, String, Array, Object };

  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0;
  // For a number written without fraction or exponent that fits an int64 (ids, sizes).
  bool isInteger = false;
  std::int64_t integer = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<JsonMember> object;
  support::Location location;

  static JsonValue makeString(std::string text);
  static JsonValue makeInteger(std::int64_t value);
  static JsonValue makeNumber(double value);
  static JsonValue makeBool(bool value);
  static JsonValue makeArray();
  static JsonValue makeObject();

  // The member `key` of an object, or null when absent (or when this is no object).
  const JsonValue* find(std::string_view key) const;
  // Appends a member to an object (no duplicate check: writers own their keys).
  JsonValue& add(std::string key, JsonValue value);
  // "object", "string", ...: for messages.
  static const char* kindName(Kind kind);
};

struct JsonMember {
  std::string key;
  JsonValue value;
};

// Strict RFC 8259 JSON: one value, optional surrounding whitespace, no trailing commas, no
// comments; duplicate object keys and nesting deeper than 64 are errors. Errors are located
// at `sourceName`:line:col.
support::Expected<JsonValue> parseJson(std::string_view text, std::string_view sourceName);

// Indented by two spaces per level, members in their stored order, a final newline. Numbers
// that are integers print without a fraction; others with 17 significant digits (exact) and always
// with a fraction or an exponent, so that they read back as non-integers (-0 stays -0.0).
std::string writeJson(const JsonValue& value);

}  // namespace attnjit::runtime
