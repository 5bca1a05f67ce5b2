#include "support/Diagnostics.h"

namespace attnjit::support {

std::string Location::str() const {
  std::string s = file.empty() ? std::string("<builder>") : file;
  if (line > 0) {
    s += ":" + std::to_string(line);
    if (col > 0) s += ":" + std::to_string(col);
  }
  return s;
}

std::string Diagnostic::str() const { return loc.str() + ": error: " + message; }

void internalError(const char* file, int line, const std::string& message) {
  std::fprintf(stderr, "attnjit internal error at %s:%d: %s\n", file, line, message.c_str());
  std::abort();
}

std::string excerpt(std::string_view text) {
  if (text.size() <= 64) return std::string(text);
  return std::string(text.substr(0, 48)) + "... (" + std::to_string(text.size()) + " bytes)";
}

}  // namespace attnjit::support
