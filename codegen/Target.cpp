#include "codegen/Target.h"

#include <algorithm>

namespace attnjit::codegen {

namespace {
// Minimum PTX ISA per architecture, from the PTX ISA's target table: sm_80 needs
// PTX 7.0, sm_86 7.1, sm_89 and sm_90 7.8, sm_90a 8.0, sm_100a 8.6, sm_120 8.7.
// Shared memory: sm_80/87/90/100 allow 227 KiB opt-in per block (sm_80: 163 KiB),
// sm_86/89/120 allow 99 KiB.
const std::vector<TargetInfo> kTargets = {
    {"sm_80", 80, false, 70, true, true, false, false, 163 * 1024, false},
    {"sm_86", 86, false, 71, true, true, false, false, 99 * 1024, false},
    {"sm_89", 89, false, 78, true, true, true, false, 99 * 1024, false},
    {"sm_90", 90, false, 78, true, true, true, false, 227 * 1024, true},
    {"sm_90a", 90, true, 80, true, true, true, true, 227 * 1024, true},
    {"sm_100a", 100, true, 86, true, true, true, false, 227 * 1024, true},
    {"sm_120", 120, false, 87, true, true, true, false, 99 * 1024, true},
};

// LLVM 22's NVPTX backend knows PTX ISA features up to +ptx90 (see
// shared/NVPTX-NOTES.md); a newer LLVM would raise this in one place.
constexpr int kLlvmMaxPtx = 90;
}  // namespace

const std::vector<TargetInfo>& allTargets() { return kTargets; }

support::Expected<TargetInfo> lookupTarget(std::string_view name) {
  for (const auto& t : kTargets)
    if (t.name == name) return t;
  std::string known;
  for (const auto& t : kTargets) known += (known.empty() ? "" : ", ") + t.name;
  return support::Diagnostic{{}, "unknown target '" + std::string(name) + "' (known: " + known + ")"};
}

int llvmMaxPtxVersion() { return kLlvmMaxPtx; }

support::Expected<int> choosePtxVersion(const TargetInfo& target, int driverMaxPtx) {
  int version = kLlvmMaxPtx;
  if (driverMaxPtx > 0) version = std::min(version, driverMaxPtx);
  if (version < target.minPtxVersion) {
    auto fmt = [](int v) { return std::to_string(v / 10) + "." + std::to_string(v % 10); };
    return support::Diagnostic{{}, "target " + target.name + " needs PTX ISA " + fmt(target.minPtxVersion) +
                                  " but the CUDA driver accepts at most PTX " + fmt(version) +
                                  "; update the driver or choose an older target"};
  }
  return version;
}

std::string ptxFeature(int ptxVersion) { return "+ptx" + std::to_string(ptxVersion); }

}  // namespace attnjit::codegen
