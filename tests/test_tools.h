// Helpers shared by the test files: running a shell command, assembling PTX
// with the CUDA toolkit's ptxas when it is on the PATH, and deciding (with a
// visible message) whether [gpu] tests can run here.
#pragma once

#include <catch2/catch.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "compiler/driver/CompileDriver.h"
#include "compiler/kernels/ConfigChecks.h"
#include "runtime/Driver.h"
#include "runtime/Module.h"

namespace attnjit::tests {

// Sets an environment variable for one scope and restores the previous value.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) previous_ = old;
    hadPrevious_ = std::getenv(name) != nullptr;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;
  ~ScopedEnvironment() {
    if (hadPrevious_) {
      ::setenv(name_.c_str(), previous_.c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

 private:
  std::string name_;
  std::string previous_;
  bool hadPrevious_ = false;
};

// A kernel builder's result compiled with `options`; failing to build or to
// compile fails the test.
inline compiler::CompiledKernel compileBuilt(support::Expected<std::unique_ptr<ir::Kernel>> kernel,
                                             const compiler::CompileOptions& options) {
  INFO((kernel.isOk() ? std::string() : kernel.diagnostic().str()));
  REQUIRE(kernel.isOk());
  auto compiled = compiler::compileKernel(**kernel, options);
  INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
  REQUIRE(compiled.isOk());
  return std::move(*compiled);
}

inline compiler::CompiledKernel compileBuilt(support::Expected<std::unique_ptr<ir::Kernel>> kernel,
                                             const std::string& target) {
  compiler::CompileOptions options;
  options.target = target;
  return compileBuilt(std::move(kernel), options);
}

// How many times `what` occurs in `text` (overlapping matches count).
inline int countOf(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

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

// ptxas -v's report for `ptx` on `arch` (registers, spills, performance notes).
// By default compiled as relocatable code (-c), which is what the driver's JIT
// does for the runtime's cuLink* compile: stricter than a whole-program compile
// (a called subroutine serializes every warpgroup MMA, and setmaxnreg is
// ignored).
inline std::string ptxasInfo(const std::string& ptx, const std::string& arch, bool relocatable = true) {
  static std::atomic<int> calls{0};  // callers on several threads each get a file
  std::string path = "/tmp/attnjit_test_info_" + std::to_string(getpid()) + "_" + std::to_string(calls++) + ".ptx";
  std::ofstream(path) << ptx;
  int code = 0;
  std::string log = runShell(std::string("ptxas ") + (relocatable ? "-c " : "") + "-v -arch=" + arch + " " + path +
                                 " -o /dev/null",
                             &code);
  std::remove(path.c_str());
  return log;
}

// Checks that ptxas assembles `ptx` for `arch`; without ptxas there is nothing to check.
inline void checkAssembles(const std::string& ptx, const std::string& arch) {
  if (!havePtxas()) return;
  std::string log;
  const bool ok = assemblesWithPtxas(ptx, arch, &log);
  INFO(log);
  CHECK(ok);
}

// A test that cannot run here says why and stops. Under ctest, which sets
// ATTNJIT_TEST_SKIP_EXIT_CODE (tests/CMakeLists.txt), the process exits with that
// code so ctest reports the case as skipped, not passed; run directly, the
// reason is a warning and the test returns (the caller returns after this).
inline void skipTest(const std::string& reason) {
  if (const char* code = std::getenv("ATTNJIT_TEST_SKIP_EXIT_CODE"); code != nullptr && *code != '\0') {
    std::fprintf(stderr, "skipped: %s\n", reason.c_str());
    std::fflush(nullptr);
    std::_Exit(std::atoi(code));
  }
  WARN("skipped: " << reason);
}

// True where a CUDA driver and a GPU exist; otherwise skips the test (skipTest).
inline bool gpuPresent() {
  if (!runtime::driverAvailable()) {
    skipTest("no CUDA driver: " + runtime::driverStatus().message());
    return false;
  }
  auto count = runtime::deviceCount();
  if (!count || *count == 0) {
    skipTest("the CUDA driver reports no GPU");
    return false;
  }
  return true;
}

// A compiled kernel linked for and loaded on the current GPU: the module (which
// must outlive the function) and its kernel. A failing step fails the test.
struct GpuKernel {
  runtime::Module module;
  runtime::Function function;
};
inline GpuKernel loadOnGpu(const compiler::CompiledKernel& compiled, const std::string& ptxName) {
  auto linked = runtime::linkPtx(compiled.ptx, {}, ptxName);
  INFO((linked.isOk() ? std::string() : linked.status().message()));
  REQUIRE(linked.isOk());
  auto loaded = runtime::Module::load(linked->cubin);
  INFO((loaded.isOk() ? std::string() : loaded.status().message()));
  REQUIRE(loaded.isOk());
  auto function = loaded->function(compiled.name);
  INFO((function.isOk() ? std::string() : function.status().message()));
  REQUIRE(function.isOk());
  return {std::move(*loaded), *function};
}

}  // namespace attnjit::tests
