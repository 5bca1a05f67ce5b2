#include "compiler/ops/TunedPlans.h"

#include <bit>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "codegen/Codegen.h"
#include "compiler/driver/DeviceTarget.h"
#include "compiler/driver/Jit.h"
#include "runtime/DiskCache.h"
#include "runtime/Driver.h"
#include "runtime/KernelCache.h"

namespace attnjit::ops {

namespace {

// Bump when the meaning of a record's fields changes: older records are then
// never read (their key differs).
constexpr int kTunedPlanFormat = 3;

bool powerOfTwoIn(int value, int low, int high) {
  return value >= low && value <= high && std::has_single_bit(static_cast<unsigned>(value));
}

std::optional<int> parseInt(const runtime::StringMap& fields, const char* name) {
  const auto it = fields.find(name);
  if (it == fields.end()) return std::nullopt;
  int value = 0;
  const char* first = it->second.data();
  const char* last = first + it->second.size();
  const auto [end, error] = std::from_chars(first, last, value);
  if (error != std::errc() || end != last) return std::nullopt;
  return value;
}

std::optional<double> parseMs(const runtime::StringMap& fields, const char* name) {
  const auto it = fields.find(name);
  if (it == fields.end() || it->second.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(it->second.c_str(), &end);
  if (end != it->second.c_str() + it->second.size() || !(value >= 0) || value > 1e9) return std::nullopt;
  return value;
}

std::optional<TunedPlan> decodeRecord(const runtime::StringMap& fields) {
  TunedPlan plan;
  const auto tile = parseInt(fields, "tile_size"), warps = parseInt(fields, "num_warps"),
             qInShared = parseInt(fields, "q_in_shared"), segments = parseInt(fields, "num_segments"),
             ctas = parseInt(fields, "ctas_per_sm"), producers = parseInt(fields, "producers"),
             stages = parseInt(fields, "num_stages");
  const auto keepsRule = parseInt(fields, "keeps_rule");
  const auto tunedMs = parseMs(fields, "tuned_ms"), heuristicMs = parseMs(fields, "heuristic_ms");
  if (!tile || !warps || !qInShared || !segments || !ctas || !producers || !stages || !keepsRule || !tunedMs ||
      !heuristicMs)
    return std::nullopt;
  if ((*qInShared != 0 && *qInShared != 1) || (*keepsRule != 0 && *keepsRule != 1)) return std::nullopt;
  if (*producers < 0 || *producers > static_cast<int>(PlanChoice::Producers::SoftmaxTurns)) return std::nullopt;
  plan.keepsRule = *keepsRule == 1;
  plan.choice = {*tile, *warps, *qInShared == 1, *segments, *ctas, static_cast<PlanChoice::Producers>(*producers),
                 *stages};
  plan.tunedMs = *tunedMs;
  plan.heuristicMs = *heuristicMs;
  if (!plan.choice.plausible()) return std::nullopt;
  return plan;
}

runtime::StringMap encodeRecord(const TunedPlan& plan) {
  char tuned[32], heuristic[32];
  std::snprintf(tuned, sizeof tuned, "%.6f", plan.tunedMs);
  std::snprintf(heuristic, sizeof heuristic, "%.6f", plan.heuristicMs);
  return {{"tile_size", std::to_string(plan.choice.tileSize)},
          {"num_warps", std::to_string(plan.choice.numWarps)},
          {"q_in_shared", plan.choice.qInShared ? "1" : "0"},
          {"num_segments", std::to_string(plan.choice.numSegments)},
          {"ctas_per_sm", std::to_string(plan.choice.ctasPerSm)},
          {"producers", std::to_string(static_cast<int>(plan.choice.producers))},
          {"num_stages", std::to_string(plan.choice.numStages)},
          {"keeps_rule", plan.keepsRule ? "1" : "0"},
          {"tuned_ms", tuned},
          {"heuristic_ms", heuristic}};
}

}  // namespace

std::string PlanChoice::str() const {
  std::string text = "t" + std::to_string(tileSize) + " w" + std::to_string(numWarps);
  if (qInShared) text += " qs";
  text += numSegments > 1 ? " segments " + std::to_string(numSegments) : " 2D";
  if (ctasPerSm > 0) text += " cap " + std::to_string(ctasPerSm);
  if (producers == Producers::Copies) text += " producers";
  if (producers == Producers::PingPong) text += " producers ping-pong";
  if (producers == Producers::SoftmaxTurns) text += " producers softmax turns";
  if (numStages != 2) text += " stages " + std::to_string(numStages);
  return text;
}

bool PlanChoice::plausible() const {
  // The split's segment bound is kSplitKvMaxSegments (PagedAttentionOp.h); 64.
  return powerOfTwoIn(tileSize, 16, 256) && powerOfTwoIn(numWarps, 1, 16) && numSegments >= 1 &&
         numSegments <= 64 && ctasPerSm >= 0 && ctasPerSm <= 32 && !(numSegments > 1 && ctasPerSm > 0) &&
         producers >= Producers::None && producers <= Producers::SoftmaxTurns && numStages >= 1 && numStages <= 4 &&
         (numStages <= 2 || producers != Producers::None);
}

namespace {

std::optional<std::string> queryDeviceKey(int ordinal) {
  if (!runtime::driverAvailable()) return std::nullopt;
  auto info = runtime::deviceInfo(ordinal);
  auto driver = runtime::driverVersion();
  if (!info || !driver) return std::nullopt;
  return "device " + info->name + " sm_" + std::to_string(info->smVersion()) + " sms " +
         std::to_string(info->multiprocessorCount) + " driver " + std::to_string(*driver) + " attnjit " +
         compiler::attnjitVersion() + " codegen revision " + std::to_string(codegen::kCodegenRevision);
}

TunedPlans* makeTunedPlans(int ordinal) {
  const std::optional<std::string> key = compiler::perDevice<std::optional<std::string>, queryDeviceKey>(ordinal);
  return new TunedPlans(key.value_or(""), key ? &runtime::KernelCache::processCache().disk() : nullptr);
}

}  // namespace

std::optional<std::string> tunedPlanDeviceKey() {
  return compiler::perDevice<std::optional<std::string>, queryDeviceKey>(compiler::opDeviceOrdinal());
}

support::Expected<PlanTuningMode> planTuningModeFromEnvironment() {
  const char* value = std::getenv("ATTNJIT_TUNE");
  if (value == nullptr || *value == '\0' || std::strcmp(value, "recorded") == 0) return PlanTuningMode::Recorded;
  if (std::strcmp(value, "off") == 0 || std::strcmp(value, "0") == 0) return PlanTuningMode::Off;
  if (std::strcmp(value, "first-use") == 0 || std::strcmp(value, "1") == 0) return PlanTuningMode::OnFirstUse;
  return support::Status::error({}, std::string("ATTNJIT_TUNE='") + value +
                                        "' is not one of: recorded (the default), off (0), first-use (1)");
}

TunedPlans& TunedPlans::process() {
  return *compiler::perDevice<TunedPlans*, makeTunedPlans>(compiler::opDeviceOrdinal());
}

TunedPlans::TunedPlans(std::string deviceKey, const runtime::DiskCache* disk)
    : deviceKey_(std::move(deviceKey)), disk_(disk) {}

std::string TunedPlans::diskKey(const std::string& bucket) const {
  return "attnjit tuned plan format " + std::to_string(kTunedPlanFormat) + "\n" + deviceKey_ + "\n" + bucket + "\n";
}

std::optional<TunedPlan> TunedPlans::find(const std::string& bucket) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = memory_.find(bucket); it != memory_.end()) return it->second;
  }
  std::optional<TunedPlan> found;
  if (disk_ != nullptr && disk_->enabled()) {
    runtime::DiskLookup lookup = disk_->load(diskKey(bucket));
    if (lookup.hit()) found = decodeRecord(lookup.entry->metadata);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  // A record made while the disk was read wins over what the disk said.
  return memory_.try_emplace(bucket, found).first->second;
}

bool TunedPlans::record(const std::string& bucket, const TunedPlan& plan) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    memory_[bucket] = plan;
  }
  if (disk_ == nullptr || !disk_->enabled()) return false;
  runtime::CacheEntry entry;
  entry.metadata = encodeRecord(plan);
  return disk_->store(diskKey(bucket), entry);
}

void TunedPlans::clearMemory() {
  std::lock_guard<std::mutex> lock(mutex_);
  memory_.clear();
}

}  // namespace attnjit::ops
