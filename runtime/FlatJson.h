// A flat JSON object of string values ({"name":"value",...}): the metadata stored with each
// cached kernel. Small enough to write by hand, and readable with any JSON tool.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "ir/Diagnostics.h"

namespace attnjit::runtime {

using StringMap = std::map<std::string, std::string>;

// Keys in sorted order, so equal maps serialize to equal bytes.
std::string writeFlatJson(const StringMap& values);

// Accepts exactly what JSON allows for an object whose values are all strings (whitespace,
// every escape including \uXXXX and surrogate pairs); anything else is an error naming the
// byte offset. Duplicate keys are an error.
ir::Expected<StringMap> parseFlatJson(std::string_view text);

}  // namespace attnjit::runtime
