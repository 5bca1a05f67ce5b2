// Machine code through the driver: PTX linked to a cubin (the driver's built-in ptxas, with
// its log), cubins loaded as modules, kernels looked up, inspected and launched.
//
// Every call works on the calling thread's current context (see Driver.h:
// activatePrimaryContext / currentOrPrimaryContext).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/Driver.h"
#include "runtime/TensorMap.h"

namespace attnjit::runtime {

struct LinkOptions {
  // The SM to compile for (80, 90, ...); 0 = the current context's device.
  int targetSm = 0;
  // With targetSm: the arch-specific variant (sm_90a) that wgmma and setmaxnreg need.
  bool archSpecific = false;
  // ptxas -O level, 0..4.
  int optimizationLevel = 4;
  // ptxas -lineinfo: lets profilers map SASS back to PTX lines.
  bool generateLineInfo = false;
};

struct LinkedCubin {
  std::vector<std::uint8_t> cubin;
  // ptxas's informational output (e.g. "Used 24 registers"); may be empty.
  std::string infoLog;
  float wallMilliseconds = 0;
};

// Whether `ptx` needs a whole-program compile: its warpgroup MMAs (wgmma) or
// register moves (setmaxnreg). linkPtx compiles for a link, as relocatable
// code, where ptxas serializes every warpgroup MMA of a kernel that calls a
// subroutine and ignores setmaxnreg (docs/architecture.md, "What the driver's
// JIT makes of them"); cuModuleLoadData on the PTX itself compiles whole-program
// (and the driver keeps the result in its own JIT cache).
bool needsWholeProgramCompile(std::string_view ptx);

// A module image of PTX text (NUL-terminated, as cuModuleLoadData reads it),
// and whether an image is one (a cubin is an ELF file).
std::vector<std::uint8_t> ptxModuleImage(std::string_view ptx);
bool isPtxModuleImage(std::span<const std::uint8_t> image);

// Compiles `ptx` to a cubin. A PTX error becomes a diagnostic located at `ptxName` that
// quotes ptxas's error log.
support::Expected<LinkedCubin> linkPtx(std::string_view ptx, const LinkOptions& options = {},
                              std::string_view ptxName = "kernel.ptx");

// Whether ATTNJIT_WHOLE_PROGRAM=1 asks for every kernel's PTX to be compiled
// whole-program, those without warpgroup MMAs too (read once; the disk cache
// keys its images apart, KernelCache.cpp).
bool everyKernelWholeProgram();

// The module image for `ptx` on the current context's device: the PTX itself
// where it needs a whole-program compile (or everyKernelWholeProgram), else the
// cubin linkPtx makes.
support::Expected<std::vector<std::uint8_t>> moduleImageForPtx(std::string_view ptx, std::string_view ptxName);

struct Dim3 {
  unsigned x = 1;
  unsigned y = 1;
  unsigned z = 1;
};

struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  unsigned dynamicSharedBytes = 0;
  StreamHandle stream = nullptr;  // null = the default stream
  // Launch as a programmatic dependent of the kernel before it in the stream
  // (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION): the grid may be
  // scheduled while that kernel drains, hiding the launch's latency. Only for a
  // kernel that waits for its predecessor before its first memory access
  // (griddepcontrol.wait: attnjit's kernels on targets with
  // codegen::TargetInfo::hasGridDependencyControl). A plain launch where the
  // driver has no cuLaunchKernelEx or ATTNJIT_PROGRAMMATIC_LAUNCH=0.
  bool overlapPriorGrid = false;
};

// Whether LaunchConfig::overlapPriorGrid takes effect in this process: on unless
// the environment sets ATTNJIT_PROGRAMMATIC_LAUNCH=0 (read once).
bool programmaticLaunchEnabled();

// What ptxas decided for one kernel (cuFuncGetAttribute).
struct FunctionAttributes {
  int numRegisters = 0;
  int localBytes = 0;  // per-thread local memory: register spills and local arrays
  int staticSharedBytes = 0;
  int constBytes = 0;
  int maxThreadsPerBlock = 0;
  int ptxVersion = 0;     // e.g. 80 for PTX 8.0
  int binaryVersion = 0;  // e.g. 90 for sm_90
};

// A kernel in a loaded module: a non-owning handle, valid while its Module is loaded.
class Function {
 public:
  Function() = default;
  Function(void* handle, std::string name) : handle_(handle), name_(std::move(name)) {}

  void* handle() const { return handle_; }
  const std::string& name() const { return name_; }
  bool valid() const { return handle_ != nullptr; }

  support::Expected<FunctionAttributes> attributes() const;

  // How many blocks of `blockThreads` threads with `dynamicSharedBytes` of dynamic
  // shared memory one SM holds at once (cuOccupancyMaxActiveBlocksPerMultiprocessor):
  // the kernel's registers, static and dynamic shared memory against the SM's limits.
  // Raises the kernel's dynamic shared memory limit first where the request
  // exceeds the default 48 KiB, as launch does.
  support::Expected<int> residentBlocksPerMultiprocessor(int blockThreads, unsigned dynamicSharedBytes) const;

  // Launches with `params` as the driver wants them: params[i] points at the value of the
  // kernel's i-th parameter. Requests above 48 KiB of dynamic shared memory raise the
  // kernel's MAX_DYNAMIC_SHARED_SIZE_BYTES first. Asynchronous: faults show up at the next
  // synchronization.
  // A kernel with tensor-map parameters (TMA copies, runtime/TensorMap.h) takes
  // only its ordinary parameters here: the maps are encoded from them and
  // passed after them.
  support::Status launch(const LaunchConfig& config, void** params) const;

  // The tensor maps this kernel takes after its ordinary parameters (none by default).
  void setTensorMaps(std::shared_ptr<const TensorMapParameters> maps) { tensorMaps_ = std::move(maps); }
  const TensorMapParameters* tensorMaps() const { return tensorMaps_.get(); }

 private:
  void* handle_ = nullptr;
  std::string name_;
  std::shared_ptr<const TensorMapParameters> tensorMaps_;
};

// A loaded module (cuModuleLoadData); unloaded on destruction.
class Module {
 public:
  // `image` is a cubin (or NUL-terminated PTX, which the driver then compiles
  // whole-program; if that fails, a link of the same PTX gives the diagnostic,
  // located at `ptxName` and quoting ptxas's error log).
  static support::Expected<Module> load(std::span<const std::uint8_t> image, std::string_view ptxName = "kernel.ptx");

  Module() = default;
  Module(Module&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  Module& operator=(Module&& other) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module();

  support::Expected<Function> function(const std::string& name) const;
  bool loaded() const { return handle_ != nullptr; }

 private:
  explicit Module(void* handle) : handle_(handle) {}
  void reset();
  void* handle_ = nullptr;
};

}  // namespace attnjit::runtime
