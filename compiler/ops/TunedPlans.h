// Tuned plans: the launch choices that measurement picked for a bucket of
// calls (compiler/ops/PagedAttentionTuning.h), remembered in memory and in the
// disk kernel cache so that later calls and later processes on the same device
// take them without measuring again.
//
// A bucket names a class of calls that should share a plan: the kernel's static
// parameters and coarse classes of the batch (compiler/ops/PagedAttentionOp.cpp,
// pagedAttentionTuningBucket). A record is valid for one device, driver and
// attnjit build (tunedPlanDeviceKey): on another, the bucket is simply unseen.
//
// Disk entries live in the kernel cache's directory (runtime/DiskCache.h) with
// its guarantees: checksummed, written by rename, owned by the user, evicted
// least recently used with the kernels; ATTNJIT_CACHE_DISABLE=1 keeps records
// in memory only. A record that fails to decode, or whose choices are out of
// range, is ignored (the call then takes the heuristic plan).
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "support/Diagnostics.h"

namespace attnjit::runtime {
class DiskCache;
}  // namespace attnjit::runtime

namespace attnjit::ops {

// What a tuned plan overrides in the heuristic one: the kernel's KV tile and
// warps (and, for 128-row prefill tiles, whether Q stays in shared memory), the
// number of split-KV segments (1: a 2D launch), the CTAs-per-SM cap of a 2D
// launch (0: none), and, for prefill on warpgroup MMAs, the producer-warp
// schedule (UnifiedAttentionConfig::warpSpecialize, pingPong, softmaxTurns,
// numStages).
struct PlanChoice {
  enum class Producers { None, Copies, PingPong, SoftmaxTurns };

  int tileSize = 0;
  int numWarps = 0;
  bool qInShared = false;
  int numSegments = 1;
  int ctasPerSm = 0;
  Producers producers = Producers::None;
  int numStages = 2;  // cp.async slots; 3 and 4 only with producers

  // "t64 w4 2D", "t128 w4 segments 8", "t64 w8 qs 2D cap 2", "t64 w8 2D
  // producers ping-pong stages 3", "t128 w8 qs 2D producers softmax turns".
  std::string str() const;
  // Every field within what a kernel and a launch can take (a record read
  // from disk is checked with this before use).
  bool plausible() const;
  friend bool operator==(const PlanChoice&, const PlanChoice&) = default;
};

// A bucket's record: the choice, and the medians that chose it (ms). With
// keepsRule the op's own plan measured fastest: calls take the rule's plan
// exactly (choice is what it was then, for reports).
struct TunedPlan {
  PlanChoice choice;
  double tunedMs = 0;
  double heuristicMs = 0;
  bool keepsRule = false;
};

// The op's device (compiler::opDeviceOrdinal), the driver and the attnjit
// build, as tuned records are keyed; nullopt without a usable driver and device.
std::optional<std::string> tunedPlanDeviceKey();

// How calls use tuned plans, when the call does not say (PlanTuning::
// FromEnvironment): ATTNJIT_TUNE unset, empty or "recorded": take recorded
// plans; "off" or "0": heuristic plans only; "first-use" or "1": also tune a
// bucket no record covers on its first call. Anything else is an error naming
// the variable.
enum class PlanTuningMode { Off, Recorded, OnFirstUse };
support::Expected<PlanTuningMode> planTuningModeFromEnvironment();

class TunedPlans {
 public:
  // The process's records for the op's device (compiler::opDeviceOrdinal: its
  // key, the process kernel cache's disk).
  static TunedPlans& process();

  // Records for `deviceKey`, stored in `disk` (may be disabled, or null).
  TunedPlans(std::string deviceKey, const runtime::DiskCache* disk);

  // The record for `bucket`: from memory, else from disk (once per bucket and
  // process; a miss is remembered too).
  std::optional<TunedPlan> find(const std::string& bucket);
  // Remembers `plan` for `bucket` in memory and on disk; false when the disk
  // store did not happen (no disk, disabled, failed: the record then lives in
  // memory only).
  bool record(const std::string& bucket, const TunedPlan& plan);
  // Forgets every record in memory (disk entries stay): for tests.
  void clearMemory();

  const std::string& deviceKey() const { return deviceKey_; }
  // The disk cache key text of a bucket's record.
  std::string diskKey(const std::string& bucket) const;

 private:
  std::string deviceKey_;
  const runtime::DiskCache* disk_ = nullptr;
  std::mutex mutex_;
  std::map<std::string, std::optional<TunedPlan>> memory_;
};

}  // namespace attnjit::ops
