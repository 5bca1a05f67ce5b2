// Helpers shared by the runtime tests: scratch directories and the GPU skip rule.
#pragma once

#include <catch2/catch.hpp>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/Driver.h"
#include "tests/test_tools.h"

namespace attnjit::runtime::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at scope exit.
class TempDirectory {
 public:
  TempDirectory() {
    std::string pattern = (std::filesystem::temp_directory_path() / "attnjit-runtime-test-XXXXXX").string();
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    if (mkdtemp(buffer.data()) == nullptr) FAIL("mkdtemp failed");
    path_ = buffer.data();
  }
  TempDirectory(const TempDirectory&) = delete;
  TempDirectory& operator=(const TempDirectory&) = delete;
  ~TempDirectory() {
    std::error_code ignored;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ignored);
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::vector<std::uint8_t> readFileBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

inline void writeFileBytes(const std::filesystem::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  out.close();
  // Whatever the umask: entries that others could write are (rightly) ignored by the cache.
  std::filesystem::permissions(path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

// Sets an environment variable for one scope (tests/test_tools.h).
using attnjit::tests::ScopedEnvironment;

// GPU tests call this first and return when it is false: without a driver and a device they
// are skipped (attnjit::tests::skipTest), never failed.
inline bool gpuAvailable() {
  support::Status status = driverStatus();
  if (!status.isOk()) {
    tests::skipTest("no CUDA driver: " + status.message());
    return false;
  }
  auto count = deviceCount();
  if (!count || *count == 0) {
    tests::skipTest("no CUDA device: " + (count ? std::string("device count is 0") : count.status().message()));
    return false;
  }
  auto context = activatePrimaryContext(0);
  if (!context) {
    tests::skipTest("cannot activate device 0: " + context.status().message());
    return false;
  }
  return true;
}

}  // namespace attnjit::runtime::testing
