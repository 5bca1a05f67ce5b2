#include "support/NameSuggestion.h"

#include <algorithm>

namespace attnjit::support {
namespace {

// Levenshtein distance with unit costs.
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> previous(b.size() + 1), current(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) previous[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t substitution = previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

}  // namespace

std::string closestName(const std::string& name, const std::vector<std::string>& known) {
  // Long inputs are not typos of short names; skip the quadratic work.
  if (name.size() > 64) return "";
  std::string best;
  size_t bestDistance = std::string::npos;
  for (const std::string& candidate : known) {
    size_t distance = editDistance(name, candidate);
    size_t allowed = std::max<size_t>(2, std::max(name.size(), candidate.size()) / 3);
    if (distance < bestDistance && distance <= allowed && distance < std::max(name.size(), candidate.size())) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

std::string joinNames(const std::vector<std::string>& names) {
  std::string joined;
  for (const std::string& n : names) joined += (joined.empty() ? "" : ", ") + n;
  return joined;
}

}  // namespace attnjit::support
