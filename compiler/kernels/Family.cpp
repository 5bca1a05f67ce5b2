#include "compiler/kernels/Family.h"

namespace attnjit::compiler {

namespace {
struct FamilyEntry {
  Family family;
  const char* name;
};
constexpr FamilyEntry kFamilies[] = {
#define ATTNJIT_FAMILY(Enum, spelling, Config, member, build) {Family::Enum, spelling},
#include "compiler/kernels/Families.def"
};
}  // namespace

const char* familyName(Family family) {
  for (const FamilyEntry& entry : kFamilies)
    if (entry.family == family) return entry.name;
  return "?";
}

std::optional<Family> parseFamily(std::string_view name) {
  for (const FamilyEntry& entry : kFamilies)
    if (name == entry.name) return entry.family;
  return std::nullopt;
}

std::vector<std::string> familyNames() {
  std::vector<std::string> names;
  for (const FamilyEntry& entry : kFamilies) names.push_back(entry.name);
  return names;
}

}  // namespace attnjit::compiler
