#include "support/InputFile.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace attnjit::support {

Expected<std::string> readInputFile(const std::string& path, uintmax_t maxBytes, const std::string& what) {
  Location at{path, 0, 0};
  std::error_code ec;
  std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) return Diagnostic{at, "no such file"};
  if (std::filesystem::is_directory(status)) return Diagnostic{at, "is a directory, expected a " + what + " file"};
  if (std::filesystem::is_regular_file(status)) {
    uintmax_t size = std::filesystem::file_size(path, ec);
    if (!ec && size > maxBytes) {
      return Diagnostic{at, "the " + what + " file is " + std::to_string(size) + " bytes; the limit is " +
                                    std::to_string(maxBytes) + " bytes"};
    }
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Diagnostic{at, "cannot open the " + what + " file"};
  // Read at most one byte past the limit: a pipe or device has no size up front.
  std::string text;
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    text.append(buffer, static_cast<size_t>(in.gcount()));
    if (text.size() > maxBytes) {
      return Diagnostic{at, "the " + what + " file is larger than the limit of " + std::to_string(maxBytes) +
                                    " bytes"};
    }
  }
  if (in.bad()) return Diagnostic{at, "error while reading the " + what + " file"};
  return text;
}

}  // namespace attnjit::support
