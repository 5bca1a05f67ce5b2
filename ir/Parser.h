// Parser for the .tir text form. Every syntax or semantic error becomes a
// Diagnostic "file:line:col: error: ..."; nothing crashes on malformed input.
// The parsed module is verified before it is returned.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "ir/IR.h"

namespace attnjit::ir {

support::Expected<std::unique_ptr<Module>> parseModule(std::string_view text, const std::string& fileName);
support::Expected<Type> parseType(std::string_view text);

}  // namespace attnjit::ir
