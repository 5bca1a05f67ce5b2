// Helpers shared by the test files: running a shell command, assembling PTX
// with the CUDA toolkit's ptxas when it is on the PATH, and deciding (with a
// visible message) whether [gpu] tests can run here.
#pragma once

#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/Driver.h"

namespace attnjit::tests {

// Runs `command` with stderr folded into stdout; returns the output.
inline std::string runShell(const std::string& command, int* exitCode) {
  std::string output;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) {
    *exitCode = -1;
    return output;
  }
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) output.append(buffer, n);
  int status = pclose(pipe);
  *exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return output;
}

inline bool havePtxas() {
  int code = 0;
  runShell("ptxas --version", &code);
  return code == 0;
}

// Assembles `ptx` for `arch` with ptxas; on failure *log holds ptxas's output.
inline bool assemblesWithPtxas(const std::string& ptx, const std::string& arch, std::string* log) {
  std::string path = "/tmp/attnjit_test_" + std::to_string(getpid()) + ".ptx";
  std::ofstream(path) << ptx;
  int code = 0;
  *log = runShell("ptxas -arch=" + arch + " " + path + " -o /dev/null", &code);
  std::remove(path.c_str());
  return code == 0;
}

// True where a CUDA driver and a GPU exist; otherwise warns why the test skips.
inline bool gpuPresent() {
  if (!runtime::driverAvailable()) {
    WARN("skipped: no CUDA driver: " << runtime::driverStatus().message());
    return false;
  }
  auto count = runtime::deviceCount();
  if (!count || *count == 0) {
    WARN("skipped: the CUDA driver reports no GPU");
    return false;
  }
  return true;
}

}  // namespace attnjit::tests
