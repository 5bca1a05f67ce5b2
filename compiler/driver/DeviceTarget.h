// The attnjit target of a GPU. deviceTarget and the device-0 queries make no
// context current (embedders that own the current context must not see it
// switch); localTarget activates device 0's primary context, for tools.
#pragma once

#include <cstdint>
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

// Whether the ops' target (device 0's; sm_90a, the CLI's default, without a
// GPU) runs dots on warpgroup MMAs (wgmma): the tilings that pay off differ.
// Queried once per process.
bool deviceZeroHasWarpgroupMma();

// Device 0's SM count, queried once per process (what the ops fill when they
// split work); 0 without a driver or GPU.
int deviceZeroSmCount();

// Device 0's shared memory per SM, the driver's reservation per block and the
// most one block may opt in to, queried once per process; zeros without a GPU.
struct SharedMemoryLimits {
  int64_t perMultiprocessor = 0;
  int64_t reservedPerBlock = 0;
  int64_t maxPerBlock = 0;
};
SharedMemoryLimits deviceZeroSharedMemoryLimits();

}  // namespace attnjit::compiler
