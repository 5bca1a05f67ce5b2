// The attnjit target of a GPU and what the ops need to know about the device
// they run on. These queries make no context current (embedders that own the
// current context must not see it switch); localTarget activates device 0's
// primary context, for tools.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "support/Diagnostics.h"

namespace attnjit::compiler {

// "sm_90a" for compute capability 9.0: the arch-specific target where attnjit
// has one (wgmma, setmaxnreg), else the plain one; an error naming the GPU when
// attnjit has no target for it, or the driver's reason when there is no GPU.
support::Expected<std::string> deviceTarget(int ordinal);

// Makes device 0's primary context current on the calling thread and returns
// its target (deviceTarget(0)): for tools that run kernels on "the GPU here".
support::Expected<std::string> localTarget();

// A device's shared memory per SM, the driver's reservation per block and the
// most one block may opt in to.
struct SharedMemoryLimits {
  int64_t perMultiprocessor = 0;
  int64_t reservedPerBlock = 0;
  int64_t maxPerBlock = 0;
};

// What the ops plan and compile with, for one device; queried once per device
// and process. Without a driver or GPU: no target, sm_90a's warpgroup MMAs (the
// CLI's default target), and zeros.
struct DeviceFacts {
  support::Status target = support::Status::ok();  // deviceTarget's error, if it has none
  std::string targetName;                          // deviceTarget(ordinal) where it has one
  std::string deviceName;                          // the driver's name, or the reference part's
  bool warpgroupMma = true;                        // the target runs dots on wgmma
  bool gridDependencyControl = false;              // its kernels wait for their predecessor (griddepcontrol)
  int smCount = 0;
  SharedMemoryLimits sharedMemory;
};
const DeviceFacts& deviceFacts(int ordinal);

// One value per device ordinal, made by Make on first use and kept for the
// process: ordinals below 64 are read without a lock once made, any others (no
// machine has them) under a mutex. One table per (T, Make).
template <typename T, T (*Make)(int)>
T& perDevice(int ordinal) {
  constexpr int kCached = 64;
  struct Slot {
    std::once_flag once;
    std::optional<T> value;
  };
  static std::array<Slot, kCached> slots;
  if (ordinal >= 0 && ordinal < kCached) {
    Slot& slot = slots[static_cast<size_t>(ordinal)];
    std::call_once(slot.once, [&] { slot.value.emplace(Make(ordinal)); });
    return *slot.value;
  }
  static std::mutex mutex;
  static std::map<int, T> others;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = others.find(ordinal);
  if (it == others.end()) it = others.emplace(ordinal, Make(ordinal)).first;
  return it->second;
}

// The device an op call runs on: that of the calling thread's current context
// (the ops make their stream's context current), else device 0.
int opDeviceOrdinal();

// deviceFacts(opDeviceOrdinal()), or the facts a ScopedOpDeviceFacts installed.
const DeviceFacts& opDeviceFacts();

// The facts of a typical device of `target` (sm_80: A100, sm_86: A10 / RTX 3090,
// sm_89: L40S, sm_90/sm_90a: H100 / H200; sm_100a and sm_120: B200 and RTX 5090):
// its warpgroup MMAs, SM count and shared-memory limits, so that the ops' choices
// for a device can be planned and compiled on a machine without it. An error
// naming the known targets for any other name.
support::Expected<DeviceFacts> referenceDeviceFacts(const std::string& target);

// While it lives, opDeviceFacts() answers `facts` on every thread, whatever
// device is current: the ops plan for that device (attnjit plan --arch, the
// warm-up's PTX-only compiles, tests); nested ones restore the outer one's
// facts when they end, and they must end in reverse order. Not for calls that launch.
class ScopedOpDeviceFacts {
 public:
  explicit ScopedOpDeviceFacts(DeviceFacts facts);
  ~ScopedOpDeviceFacts();
  ScopedOpDeviceFacts(const ScopedOpDeviceFacts&) = delete;
  ScopedOpDeviceFacts& operator=(const ScopedOpDeviceFacts&) = delete;

 private:
  DeviceFacts facts_;
  const DeviceFacts* previous_;
};

}  // namespace attnjit::compiler
