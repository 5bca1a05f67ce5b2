// The CUDA driver, loaded at run time with dlopen("libcuda.so.1"): no CUDA headers or
// libraries are needed to build or link attnjit. Without a driver (CPU machines, CI) every
// function here returns a Status saying so; nothing crashes and nothing aborts.
//
// Loading is lazy and thread-safe: the first call from any thread loads the library,
// resolves every entry point through cuGetProcAddress and runs cuInit; all later calls see
// the same outcome.
//
// Contexts: attnjit uses each device's *primary* context, the one the CUDA runtime (and so
// PyTorch, cuBLAS, ...) uses, so device pointers and streams pass freely between them.
#pragma once

#include <optional>
#include <string>

#include "support/Diagnostics.h"

namespace attnjit::runtime {

using support::Expected;
using support::Status;

// The driver's CUcontext and CUstream, opaque outside runtime/. A null stream is the
// default (legacy) stream.
using ContextHandle = void*;
using StreamHandle = void*;

// A PTX ISA version such as 8.0 (".version 8.0" in PTX).
struct PtxIsaVersion {
  int major = 0;
  int minor = 0;

  // 80 for 8.0: the number LLVM uses in its "+ptx80" feature.
  int asNumber() const { return major * 10 + minor; }
  std::string str() const { return std::to_string(major) + "." + std::to_string(minor); }
  friend bool operator==(const PtxIsaVersion&, const PtxIsaVersion&) = default;
};

// The newest PTX ISA the driver's built-in PTX compiler accepts, from the driver version as
// cuDriverGetVersion reports it (1000 * major + 10 * minor, e.g. 12080 for 12.8). The table
// follows the PTX ISA release notes: CUDA 11.0 shipped PTX 7.0, each 11.x and 12.0..12.5 minor
// release added one minor PTX version (11.8 → 7.8, 12.4 → 8.4, 12.5 → 8.5), 12.6 stayed at
// 8.5, 12.7 → 8.6, 12.8 → 8.7, 12.9 → 8.8, 13.0 → 9.0. Drivers newer than the table get the
// newest entry (a newer driver accepts every older PTX). Drivers older than 11.0 cannot run
// sm_80 code at all: nullopt.
std::optional<PtxIsaVersion> maxPtxIsaForDriverVersion(int driverVersion);

// Ok when the driver loaded and initialized; otherwise the reason, e.g.
// "CUDA driver not available: libcuda.so.1 could not be loaded (...); GPU features are disabled".
support::Status driverStatus();
bool driverAvailable();

// cuDriverGetVersion: 1000 * major + 10 * minor.
support::Expected<int> driverVersion();
// maxPtxIsaForDriverVersion(driverVersion()).
support::Expected<PtxIsaVersion> driverMaxPtxIsa();

support::Expected<int> deviceCount();

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int computeCapabilityMajor = 0;
  int computeCapabilityMinor = 0;
  int multiprocessorCount = 0;
  int maxThreadsPerBlock = 0;
  int warpSize = 0;
  // Shared memory a block gets without opting in (48 KiB) and the most it may opt in to.
  int maxSharedMemoryPerBlock = 0;
  int maxSharedMemoryPerBlockOptin = 0;
  // Shared memory of one SM, and what the driver reserves of it per block.
  int maxSharedMemoryPerMultiprocessor = 0;
  int reservedSharedMemoryPerBlock = 0;
  int l2CacheBytes = 0;

  // 90 for compute capability 9.0 (the "sm_90" number).
  int smVersion() const { return computeCapabilityMajor * 10 + computeCapabilityMinor; }
};

support::Expected<DeviceInfo> deviceInfo(int ordinal);

// Retains the device's primary context (once per process; it is never released, like the
// CUDA runtime does) and makes it current on the calling thread.
support::Expected<ContextHandle> activatePrimaryContext(int ordinal);

// The calling thread's current context; if none is current, activates device 0's primary
// context (what the CUDA runtime does on first use).
support::Expected<ContextHandle> currentOrPrimaryContext();

// Makes `context` (from currentOrPrimaryContext on another thread, say) current on
// the calling thread.
support::Status makeContextCurrent(ContextHandle context);

// The context a launch on `stream` runs in. A stream the caller created belongs
// to the context it was created in (cuStreamGetCtx); the default streams (null,
// CU_STREAM_LEGACY, CU_STREAM_PER_THREAD) are the calling thread's current
// context's, and without one device `defaultOrdinal`'s primary context.
support::Expected<ContextHandle> streamContext(StreamHandle stream, int defaultOrdinal);

// Makes a context current on the calling thread for the life of the object and
// then restores the one that was current before (none included): ops switch to
// their stream's context without leaving the caller's thread changed (the CUDA
// runtime takes its current device from the current primary context).
class ScopedContext {
 public:
  static support::Expected<ScopedContext> enter(ContextHandle context);
  ScopedContext(ScopedContext&& other) noexcept;
  ScopedContext& operator=(ScopedContext&&) = delete;
  ScopedContext(const ScopedContext&) = delete;
  ScopedContext& operator=(const ScopedContext&) = delete;
  ~ScopedContext();

 private:
  ScopedContext(ContextHandle previous, bool switched) : previous_(previous), switched_(switched) {}
  ContextHandle previous_ = nullptr;
  bool switched_ = false;  // false: the context was current already (or moved from)
};

// cuCtxSynchronize on the current context; reports asynchronous kernel faults.
support::Status synchronizeContext();

}  // namespace attnjit::runtime
