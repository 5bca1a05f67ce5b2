// The driver loader without a GPU: the "no driver" diagnostics (on every machine, through a
// library name that cannot exist) and the driver-version → PTX ISA table.
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <string>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/DriverInternal.h"
#include "runtime/Module.h"

namespace support = attnjit::support;

using namespace attnjit::runtime;

namespace {

bool startsWith(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }
bool endsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Whether the loader can find libcuda here, asked independently of the runtime.
bool systemHasLibcuda() {
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return false;
  dlclose(handle);
  return true;
}

}  // namespace

TEST_CASE("a missing driver library is reported with the loader's reason", "[runtime]") {
  support::Status status = probeDriverLibrary("libattnjit-no-such-driver.so.1");
  REQUIRE_FALSE(status.isOk());
  const std::string message = status.message();
  CHECK(startsWith(message,
                   "attnjit-runtime: error: CUDA driver not available: libattnjit-no-such-driver.so.1 could not be "
                   "loaded (libattnjit-no-such-driver.so.1: cannot open shared object file"));
  CHECK(endsWith(message, "); GPU features are disabled"));
}

TEST_CASE("without libcuda every runtime entry point returns the driver status", "[runtime]") {
  support::Status status = driverStatus();
  if (systemHasLibcuda()) {
    // A GPU machine: the driver must load (a machine with the library but no device reports
    // that through cuInit, which is still a clear Status rather than a crash).
    if (!status.isOk()) {
      CHECK_THAT(status.message(), Catch::Contains("cuInit"));
    } else {
      CHECK(driverAvailable());
      auto version = driverVersion();
      REQUIRE(version.isOk());
      CHECK(*version >= 12000);
    }
    return;
  }
  REQUIRE_FALSE(status.isOk());
  CHECK_FALSE(driverAvailable());
  const std::string expectedPrefix =
      "attnjit-runtime: error: CUDA driver not available: libcuda.so.1 could not be loaded (";
  CHECK(startsWith(status.message(), expectedPrefix));
  CHECK(endsWith(status.message(), "); GPU features are disabled"));

  // Every call fails with the same diagnostic instead of crashing.
  CHECK(driverVersion().status().message() == status.message());
  CHECK(driverMaxPtxIsa().status().message() == status.message());
  CHECK(deviceCount().status().message() == status.message());
  CHECK(deviceInfo(0).status().message() == status.message());
  CHECK(activatePrimaryContext(0).status().message() == status.message());
  CHECK(currentOrPrimaryContext().status().message() == status.message());
  CHECK(synchronizeContext().message() == status.message());
  CHECK(streamContext(nullptr, 0).status().message() == status.message());
  CHECK(streamContext(reinterpret_cast<StreamHandle>(0x1234), 1).status().message() == status.message());
  CHECK(ScopedContext::enter(nullptr).status().message() == status.message());
  CHECK(linkPtx(".version 8.0\n").status().message() == status.message());
  const std::uint8_t image[] = {1, 2, 3};
  CHECK(Module::load(image).status().message() == status.message());
  CHECK(DeviceBuffer::allocate(16).status().message() == status.message());
  Function nothing;
  CHECK(nothing.launch(LaunchConfig{}, nullptr).message() == status.message());
}

TEST_CASE("driver versions map to the newest PTX ISA they accept", "[runtime]") {
  struct Row {
    int driver;
    int ptx;  // major * 10 + minor; 0 = unsupported
  };
  const Row rows[] = {
      {13000, 90}, {13020, 90}, {14000, 90},  // newer than the table: newest known
      {12090, 88}, {12080, 87}, {12070, 86}, {12060, 85}, {12050, 85}, {12040, 84}, {12035, 83},
      {12000, 80}, {11080, 78}, {11040, 74}, {11000, 70}, {10020, 0},  {0, 0},
  };
  for (const Row& row : rows) {
    INFO("driver " << row.driver);
    auto ptx = maxPtxIsaForDriverVersion(row.driver);
    if (row.ptx == 0) {
      CHECK_FALSE(ptx.has_value());
    } else {
      REQUIRE(ptx.has_value());
      CHECK(ptx->asNumber() == row.ptx);
    }
  }
  CHECK(maxPtxIsaForDriverVersion(12080)->str() == "8.7");
}

TEST_CASE("PTX with warpgroup MMAs or register moves is loaded as it is, whole-program", "[runtime]") {
  // The driver compiles PTX for a link as relocatable code, where a called
  // subroutine serializes every wgmma and setmaxnreg is ignored: such kernels
  // keep their PTX as the module image (docs/architecture.md).
  using namespace attnjit::runtime;
  CHECK(needsWholeProgramCompile("\twgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {...};"));
  CHECK(needsWholeProgramCompile("\tsetmaxnreg.inc.sync.aligned.u32 \t224;"));
  CHECK_FALSE(needsWholeProgramCompile("\tmma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {...};"));
  CHECK_FALSE(needsWholeProgramCompile("\twgmma.fence.sync.aligned;"));  // a fence alone issues no MMA

  const std::string ptx = ".version 8.7\n.target sm_90a\n";
  const std::vector<std::uint8_t> image = ptxModuleImage(ptx);
  REQUIRE(image.size() == ptx.size() + 1);
  CHECK(image.back() == 0);  // cuModuleLoadData reads PTX as a C string
  CHECK(std::string(image.begin(), image.end() - 1) == ptx);
  CHECK(isPtxModuleImage(image));
  const std::vector<std::uint8_t> cubin = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0x33};
  CHECK_FALSE(isPtxModuleImage(cubin));
  CHECK_FALSE(isPtxModuleImage(std::vector<std::uint8_t>{}));
  CHECK_FALSE(isPtxModuleImage(std::vector<std::uint8_t>{'.', 'v'}));  // not terminated
}
