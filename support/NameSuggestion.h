// "Did you mean" suggestions for misspelled names (spec fields, CLI options).
#pragma once

#include <string>
#include <vector>

namespace attnjit::support {

// The known name closest to `name` by edit distance, or "" when none is close
// enough to be a plausible typo (distance at most 2, or a third of the longer name).
std::string closestName(const std::string& name, const std::vector<std::string>& known);
// "a, b, c".
std::string joinNames(const std::vector<std::string>& names);

}  // namespace attnjit::support
