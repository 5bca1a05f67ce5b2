// The kernel families of compiler/kernels/Families.def as an enum, with their
// spec spellings.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attnjit::compiler {

enum class Family {
#define ATTNJIT_FAMILY(Enum, spelling, Config, member, build) Enum,
#include "compiler/kernels/Families.def"
};

// The spec spelling ("unified_attention").
const char* familyName(Family family);
// The family spelled `name`, or nullopt for a name that is none.
std::optional<Family> parseFamily(std::string_view name);
// Every spelling, in table order (for messages and suggestions).
std::vector<std::string> familyNames();

}  // namespace attnjit::compiler
