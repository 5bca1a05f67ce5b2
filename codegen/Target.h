// The target table: every GPU architecture attnjit generates code for, with the
// facts codegen and the runtime need (LLVM CPU name, minimum PTX ISA, features).
// Target differences go through this table, never through scattered `sm == 90`
// checks in op lowerings.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "support/Diagnostics.h"

namespace attnjit::codegen {

struct TargetInfo {
  std::string name;        // "sm_90a": what users write, and the LLVM CPU name
  int computeCapability;   // 90 for sm_90 and sm_90a
  bool archSpecific;       // the "a" targets: features that run only on that chip
  int minPtxVersion;       // PTX ISA as major*10+minor (80 = PTX 8.0)
  bool hasMmaSync;         // mma.sync m16n8k16 f16/bf16 (sm_80+)
  bool hasCpAsync;         // cp.async (sm_80+)
  bool hasFp8Convert;      // cvt with e4m3/e5m2 (sm_89+)
  bool hasWgmma;           // wgmma.mma_async + TMA (sm_90a only)
  int maxSharedBytesPerBlock;  // opt-in maximum of dynamic shared memory
  // griddepcontrol (sm_90+): a kernel launched as a programmatic dependent of
  // the one before it in the stream starts while that one drains, and waits
  // for it with griddepcontrol.wait before its first memory access.
  bool hasGridDependencyControl;
};

// All targets, in ascending order.
const std::vector<TargetInfo>& allTargets();
// The entry for a name like "sm_90a"; an error listing the known names otherwise.
support::Expected<TargetInfo> lookupTarget(std::string_view name);

// The largest PTX ISA version LLVM's NVPTX backend can emit (major*10+minor).
int llvmMaxPtxVersion();

// The PTX version to emit for `target`: the highest that LLVM supports, clamped to
// `driverMaxPtx` when known (> 0; the driver cannot JIT newer PTX), and at least
// the target's minimum. An error when the driver is too old for the target.
support::Expected<int> choosePtxVersion(const TargetInfo& target, int driverMaxPtx);

// "+ptx86": the LLVM feature string for a PTX version.
std::string ptxFeature(int ptxVersion);

}  // namespace attnjit::codegen
