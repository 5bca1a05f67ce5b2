// Where the tests find the repository files they read (specs/, examples/,
// tests/tir, tests/data) and the attnjit CLI. The build compiles in absolute
// paths into the source and build trees; the environment variables
// ATTNJIT_SOURCE_DIR and ATTNJIT_CLI override them, so that the tests of a
// bundle copied to another machine (scripts/device-bundle) use the bundle's files.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace attnjit::tests {

// The environment variable `name` when set and non-empty, otherwise `fallback`.
inline std::string environmentOr(const char* name, const char* fallback) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? std::string(value) : std::string(fallback);
}

// The repository root: the directory holding specs/, examples/ and tests/.
inline std::string sourceDir() { return environmentOr("ATTNJIT_SOURCE_DIR", ATTNJIT_SOURCE_DIR); }

// The attnjit command-line tool.
inline std::string cliPath() { return environmentOr("ATTNJIT_CLI", ATTNJIT_CLI_PATH); }

// Whether a directory below the repository root holds copies rather than
// sources: .git, build folders (build*/) and device bundles (bundle*/,
// whose copies of the .tir files may be stale), which repository-wide scans skip.
inline bool isGeneratedDirectory(const std::string& name) {
  return name == ".git" || name.rfind("build", 0) == 0 || name.rfind("bundle", 0) == 0;
}

// Every *.tir file below the source root, sorted, skipping generated copies.
inline std::vector<std::filesystem::path> repositoryTirFiles() {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(fs::path(sourceDir())); it != fs::recursive_directory_iterator();
       ++it) {
    if (it->is_directory() && isGeneratedDirectory(it->path().filename().string())) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && it->path().extension() == ".tir") files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

inline std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace attnjit::tests
