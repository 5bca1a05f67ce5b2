// Plan tuning for the paged-attention op (compiler/ops/PagedAttentionTuning.h,
// compiler/ops/TunedPlans.h): records on disk, buckets, how a recorded choice
// becomes a call's plan, ATTNJIT_TUNE; [gpu] tuning on the H200 checked
// against the float64 reference.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/ops/PagedAttentionPlanning.h"
#include "compiler/ops/PagedAttentionTuning.h"
#include "compiler/ops/SplitKv.h"
#include "compiler/ops/TunedPlans.h"
#include "compiler/validation/AttentionGpu.h"
#include "runtime/DiskCache.h"
#include "runtime/Driver.h"
#include "tests/test_op_params.h"
#include "tests/test_runtime_fixtures.h"
#include "tests/test_tools.h"

using namespace attnjit;
using ops::PlanChoice;

namespace {

// The shared valid call (bf16, 32/8 heads, D=128) as a decode of `numSeqs`
// sequences of maxSeqLen keys each, on 132 SMs.
ops::PagedAttentionParams decodeCall(int numSeqs, int maxSeqLen) {
  ops::PagedAttentionParams p = tests::validPagedAttentionParams();
  p.numSeqs = numSeqs;
  p.numTokens = numSeqs;
  p.maxSeqLen = maxSeqLen;
  p.minSeqLen = maxSeqLen;
  p.numSms = 132;
  p.blockTableStride = 4096;
  return p;
}

// Sets an environment variable for a scope, restoring the old value.
class ScopedEnvironment {
 public:
  ScopedEnvironment(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnvironment() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace

TEST_CASE("plan tuning: a choice prints and checks its range", "[op][tune]") {
  CHECK(PlanChoice{64, 4, false, 1, 0}.str() == "t64 w4 2D");
  CHECK(PlanChoice{128, 4, false, 8, 0}.str() == "t128 w4 segments 8");
  CHECK(PlanChoice{64, 8, true, 1, 2}.str() == "t64 w8 qs 2D cap 2");
  CHECK(PlanChoice{64, 4, false, 1, 0}.plausible());
  CHECK(PlanChoice{16, 1, false, 64, 0}.plausible());
  CHECK_FALSE(PlanChoice{48, 4, false, 1, 0}.plausible());   // not a power of two
  CHECK_FALSE(PlanChoice{512, 4, false, 1, 0}.plausible());  // beyond the kernel's tiles
  CHECK_FALSE(PlanChoice{64, 32, false, 1, 0}.plausible());
  CHECK_FALSE(PlanChoice{64, 4, false, 0, 0}.plausible());
  CHECK_FALSE(PlanChoice{64, 4, false, 65, 0}.plausible());
  CHECK_FALSE(PlanChoice{64, 4, false, 4, 2}.plausible());   // a cap is for 2D launches
  CHECK_FALSE(PlanChoice{64, 4, false, 1, -1}.plausible());
  using Producers = PlanChoice::Producers;
  CHECK(PlanChoice{64, 8, false, 1, 0, Producers::Copies, 2}.str() == "t64 w8 2D producers");
  CHECK(PlanChoice{128, 8, false, 1, 0, Producers::PingPong, 3}.str() == "t128 w8 2D producers ping-pong stages 3");
  CHECK(PlanChoice{64, 8, false, 1, 0, Producers::PingPong, 4}.plausible());
  CHECK(PlanChoice{64, 8, false, 1, 0, Producers::None, 1}.plausible());
  CHECK_FALSE(PlanChoice{64, 8, false, 1, 0, Producers::None, 3}.plausible());  // 3 slots need producers
  CHECK_FALSE(PlanChoice{64, 8, false, 1, 0, Producers::Copies, 5}.plausible());
  CHECK_FALSE(PlanChoice{64, 8, false, 1, 0, Producers::Copies, 0}.plausible());
  CHECK(PlanChoice{128, 8, true, 1, 0, Producers::SoftmaxTurns, 2}.str() == "t128 w8 qs 2D producers softmax turns");
  CHECK(PlanChoice{128, 8, true, 1, 0, Producers::SoftmaxTurns, 2}.plausible());
  CHECK_FALSE(PlanChoice{64, 8, false, 1, 0, static_cast<Producers>(4), 2}.plausible());
}

TEST_CASE("plan tuning: records persist per device key and bad entries are ignored", "[op][tune]") {
  runtime::testing::TempDirectory directory;
  runtime::DiskCache disk(directory.path());
  const ops::TunedPlan plan{{128, 4, false, 6, 0}, 0.051, 0.066, false};
  const ops::TunedPlan producerPlan{{64, 8, false, 1, 0, PlanChoice::Producers::PingPong, 3}, 0.61, 0.85, false};
  {
    ops::TunedPlans plans("device A", &disk);
    CHECK_FALSE(plans.find("bucket 1").has_value());
    CHECK(plans.record("bucket 1", plan));
    REQUIRE(plans.find("bucket 1").has_value());
    CHECK(plans.find("bucket 1")->choice == plan.choice);
  }
  {
    // Another process on the same device and build reads it from disk.
    ops::TunedPlans plans("device A", &disk);
    const auto found = plans.find("bucket 1");
    REQUIRE(found.has_value());
    CHECK(found->choice == plan.choice);
    CHECK(found->tunedMs == Approx(0.051));
    CHECK(found->heuristicMs == Approx(0.066));
    CHECK_FALSE(found->keepsRule);
    CHECK_FALSE(plans.find("bucket 2").has_value());
    // A bucket whose rule stayed says so.
    CHECK(plans.record("bucket 3", {{64, 4, false, 1, 2}, 0.25, 0.25, true}));
    CHECK(plans.record("bucket 4", producerPlan));
  }
  {
    const auto found = ops::TunedPlans("device A", &disk).find("bucket 4");
    REQUIRE(found.has_value());
    CHECK(found->choice == producerPlan.choice);
  }
  {
    const auto kept = ops::TunedPlans("device A", &disk).find("bucket 3");
    REQUIRE(kept.has_value());
    CHECK(kept->keepsRule);
  }
  // Another device (or driver, or build) has no record.
  CHECK_FALSE(ops::TunedPlans("device B", &disk).find("bucket 1").has_value());

  // Entries whose fields are missing, malformed or out of range are misses.
  ops::TunedPlans plans("device A", &disk);
  const auto forge = [&](const std::string& bucket, runtime::StringMap fields) {
    runtime::CacheEntry entry;
    entry.metadata = std::move(fields);
    REQUIRE(disk.store(plans.diskKey(bucket), entry));
  };
  const runtime::StringMap good = {{"tile_size", "64"},   {"num_warps", "4"},   {"q_in_shared", "0"},
                                   {"num_segments", "1"}, {"ctas_per_sm", "2"}, {"producers", "0"},
                                   {"num_stages", "2"},   {"keeps_rule", "0"},  {"tuned_ms", "0.26"},
                                   {"heuristic_ms", "0.3"}};
  forge("good", good);
  CHECK(plans.find("good").has_value());
  auto with = [&](const char* field, const char* value) {
    runtime::StringMap fields = good;
    fields[field] = value;
    return fields;
  };
  forge("tile 48", with("tile_size", "48"));
  forge("tile text", with("tile_size", "64x"));
  forge("warps huge", with("num_warps", "99999999999"));
  forge("q flag", with("q_in_shared", "2"));
  forge("segments", with("num_segments", "0"));
  forge("split with cap", with("num_segments", "4"));
  forge("rule flag", with("keeps_rule", "yes"));
  forge("producers", with("producers", "4"));
  forge("stages", with("num_stages", "3"));  // three slots without producers
  forge("negative time", with("tuned_ms", "-1"));
  forge("nan time", with("heuristic_ms", "nan"));
  runtime::StringMap missing = good;
  missing.erase("ctas_per_sm");
  forge("missing", missing);
  runtime::StringMap olderFormat = good;  // a record without the producer fields
  olderFormat.erase("producers");
  olderFormat.erase("num_stages");
  forge("older format", olderFormat);
  for (const char* bucket : {"tile 48", "tile text", "warps huge", "q flag", "segments", "split with cap", "rule flag",
                             "producers", "stages", "negative time", "nan time", "missing", "older format"}) {
    INFO(bucket);
    CHECK_FALSE(plans.find(bucket).has_value());
  }
  // A damaged file is a miss too (the disk cache's checksum), never an error.
  const std::filesystem::path file = disk.entryPath(plans.diskKey("good"));
  {
    std::fstream damage(file, std::ios::in | std::ios::out | std::ios::binary);
    damage.seekp(-3, std::ios::end);
    damage.put('#');
  }
  CHECK_FALSE(ops::TunedPlans("device A", &disk).find("good").has_value());
}

TEST_CASE("plan tuning: without a disk cache records live in memory", "[op][tune]") {
  ops::TunedPlans noDisk("device A", nullptr);
  CHECK_FALSE(noDisk.record("bucket", {{64, 4, false, 1, 0}, 0.1, 0.1}));
  CHECK(noDisk.find("bucket").has_value());
  noDisk.clearMemory();
  CHECK_FALSE(noDisk.find("bucket").has_value());
  const runtime::DiskCache disabled = runtime::DiskCache::disabled();
  ops::TunedPlans off("device A", &disabled);
  CHECK_FALSE(off.record("bucket", {{64, 4, false, 1, 0}, 0.1, 0.1}));
  CHECK(off.find("bucket").has_value());
}

TEST_CASE("plan tuning: buckets group calls of one shape class", "[op][tune]") {
  using ops::detail::pagedAttentionTuningBucket;
  const auto bucket = pagedAttentionTuningBucket(decodeCall(64, 4096));
  REQUIRE(bucket.has_value());
  CHECK(bucket->find("unified_attention_bf16_h32kv8_d128_bs16_causal") != std::string::npos);
  CHECK(bucket->find(" decode ") != std::string::npos);
  // Same classes: 33..64 sequences, 2049..4096 keys, equal lengths.
  CHECK(pagedAttentionTuningBucket(decodeCall(40, 3000)) == bucket);
  // Other classes.
  CHECK(pagedAttentionTuningBucket(decodeCall(65, 4096)) != bucket);
  CHECK(pagedAttentionTuningBucket(decodeCall(64, 4097)) != bucket);
  auto uneven = decodeCall(64, 4096);
  uneven.minSeqLen = 100;
  CHECK(pagedAttentionTuningBucket(uneven) != bucket);
  auto unknownMinimum = decodeCall(64, 4096);
  unknownMinimum.minSeqLen = 0;
  CHECK(pagedAttentionTuningBucket(unknownMinimum) != bucket);
  CHECK(pagedAttentionTuningBucket(unknownMinimum) != pagedAttentionTuningBucket(uneven));
  auto noSplit = decodeCall(64, 4096);
  noSplit.runtimeScratch = false;
  CHECK(pagedAttentionTuningBucket(noSplit) != bucket);
  auto otherSms = decodeCall(64, 4096);
  otherSms.numSms = 108;
  CHECK(pagedAttentionTuningBucket(otherSms) != bucket);
  auto fp8 = decodeCall(64, 4096);
  fp8.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  CHECK(pagedAttentionTuningBucket(fp8) != bucket);
  auto prefill = decodeCall(8, 2048);
  prefill.numTokens = 8 * 2048;
  prefill.maxQueryLen = 2048;
  const auto prefillBucket = pagedAttentionTuningBucket(prefill);
  REQUIRE(prefillBucket.has_value());
  CHECK(prefillBucket->find(" prefill ") != std::string::npos);
  // Calls that keep one plan are never tuned.
  auto invariant = decodeCall(64, 4096);
  invariant.batchInvariant = true;
  CHECK_FALSE(pagedAttentionTuningBucket(invariant).has_value());
  auto checked = decodeCall(64, 4096);
  checked.checkBounds = true;
  checked.numBlocks = 100;
  CHECK_FALSE(pagedAttentionTuningBucket(checked).has_value());
  auto invalid = decodeCall(64, 4096);
  invalid.headSize = 100000;
  CHECK_FALSE(pagedAttentionTuningBucket(invalid).has_value());
  // Nor are calls without max_seq_len: their batches of 64 keys and of 4096 look alike.
  auto plain = decodeCall(64, 4096);
  plain.minSeqLen = plain.maxSeqLen = 0;
  CHECK_FALSE(pagedAttentionTuningBucket(plain).has_value());
}

TEST_CASE("plan tuning: a recorded choice becomes the call's plan within its limits", "[op][tune]") {
  using ops::detail::pagedAttentionPlanWithChoice;
  const auto p = decodeCall(4, 4096);  // 256 tiles of 16 keys
  auto plan = pagedAttentionPlanWithChoice(p, {128, 4, false, 8, 0});
  REQUIRE(plan.has_value());
  CHECK(plan->origin == ops::PlanOrigin::Tuned);
  CHECK(plan->config.tileSize == 128);
  CHECK(plan->config.numWarps == 4);
  CHECK(plan->config.splitKv);
  CHECK(plan->split.numSegments == 8);
  CHECK(plan->split.segmentTiles == 4);  // 32 tiles of 128 keys in 8 segments
  CHECK(plan->ctasPerSm == 0);
  CHECK(ops::detail::planChoiceOf(*plan) == PlanChoice{128, 4, false, 8, 0});

  // No more segments than tiles.
  auto shortCall = decodeCall(4, 300);  // 3 tiles of 128 keys
  plan = pagedAttentionPlanWithChoice(shortCall, {128, 4, false, 64, 0});
  REQUIRE(plan.has_value());
  CHECK(plan->split.numSegments == 3);
  CHECK(plan->split.segmentTiles == 1);

  // No more segments than the caller's workspace holds; none without one and no scratch.
  auto small = decodeCall(4, 4096);
  small.workspace = 0x70000;
  small.workspaceBytes = ops::splitKvScratch(4, 32, 128, 3).totalBytes();
  plan = pagedAttentionPlanWithChoice(small, {64, 4, false, 16, 0});
  REQUIRE(plan.has_value());
  CHECK(plan->split.numSegments == 3);
  small.workspaceBytes = 16;
  plan = pagedAttentionPlanWithChoice(small, {64, 4, false, 16, 0});
  REQUIRE(plan.has_value());
  CHECK(plan->split.numSegments == 1);
  CHECK_FALSE(plan->config.splitKv);
  auto noScratch = decodeCall(4, 4096);
  noScratch.runtimeScratch = false;
  plan = pagedAttentionPlanWithChoice(noScratch, {64, 4, false, 16, 0});
  REQUIRE(plan.has_value());
  CHECK(plan->split.numSegments == 1);

  // Without max_seq_len a call keeps the rules.
  auto plain = decodeCall(4, 4096);
  plain.maxSeqLen = plain.minSeqLen = 0;
  CHECK_FALSE(pagedAttentionPlanWithChoice(plain, {64, 4, false, 12, 0}).has_value());

  // The cap applies to 2D launches of equal lengths.
  plan = pagedAttentionPlanWithChoice(decodeCall(64, 4096), {64, 4, false, 1, 2});
  REQUIRE(plan.has_value());
  CHECK(plan->ctasPerSm == 2);
  CHECK_FALSE(plan->config.splitKv);
  auto uneven = decodeCall(64, 4096);
  uneven.minSeqLen = 17;
  plan = pagedAttentionPlanWithChoice(uneven, {64, 4, false, 1, 2});
  REQUIRE(plan.has_value());
  CHECK(plan->ctasPerSm == 0);

  // Prefill tilings never split.
  auto prefill = decodeCall(8, 2048);
  prefill.numTokens = 8 * 2048;
  prefill.maxQueryLen = 2048;
  plan = pagedAttentionPlanWithChoice(prefill, {64, 8, false, 8, 0});
  REQUIRE(plan.has_value());
  CHECK(plan->config.blockMRows == 128);
  CHECK(plan->split.numSegments == 1);
  CHECK_FALSE(plan->config.warpSpecialize);
  CHECK(plan->config.numStages == 2);

  // A producer-warp schedule reaches the kernel's configuration and back.
  const PlanChoice pingPong{64, 8, false, 1, 0, PlanChoice::Producers::PingPong, 3};
  plan = pagedAttentionPlanWithChoice(prefill, pingPong);
  REQUIRE(plan.has_value());
  CHECK(plan->config.warpSpecialize);
  CHECK(plan->config.pingPong);
  CHECK(plan->config.numStages == 3);
  CHECK(plan->config.kernelName().find("_s3_wspp") != std::string::npos);
  CHECK(ops::detail::planChoiceOf(*plan) == pingPong);
  CHECK(ops::detail::validatePagedAttentionPlan(prefill, *plan));
  plan = pagedAttentionPlanWithChoice(prefill, {64, 8, false, 1, 0, PlanChoice::Producers::Copies, 2});
  REQUIRE(plan.has_value());
  CHECK(plan->config.warpSpecialize);
  CHECK_FALSE(plan->config.pingPong);
  CHECK_FALSE(plan->config.softmaxTurns);
  const PlanChoice turns{128, 8, true, 1, 0, PlanChoice::Producers::SoftmaxTurns, 2};
  plan = pagedAttentionPlanWithChoice(prefill, turns);
  REQUIRE(plan.has_value());
  CHECK(plan->config.softmaxTurns);
  CHECK_FALSE(plan->config.pingPong);
  CHECK(plan->config.kernelName().ends_with("_t128_w8_m128_qs_wsst"));
  CHECK(ops::detail::planChoiceOf(*plan) == turns);
  CHECK(ops::detail::validatePagedAttentionPlan(prefill, *plan));

  // Choices the call cannot take give no plan (the heuristic one runs).
  CHECK_FALSE(pagedAttentionPlanWithChoice(decodeCall(4, 4096), {48, 4, false, 1, 0}).has_value());
  auto invariant = decodeCall(4, 4096);
  invariant.batchInvariant = true;
  CHECK_FALSE(pagedAttentionPlanWithChoice(invariant, {64, 4, false, 1, 0}).has_value());

  // Every plan the op launches validates like the heuristic one.
  plan = pagedAttentionPlanWithChoice(decodeCall(4, 4096), {32, 2, false, 4, 0});
  REQUIRE(plan.has_value());
  CHECK(ops::detail::validatePagedAttentionPlan(decodeCall(4, 4096), *plan));
}

TEST_CASE("plan tuning: ATTNJIT_TUNE selects the mode and a bad value is an error", "[op][tune]") {
  {
    ScopedEnvironment unset("ATTNJIT_TUNE", nullptr);
    auto mode = ops::planTuningModeFromEnvironment();
    REQUIRE(mode);
    CHECK(*mode == ops::PlanTuningMode::Recorded);
  }
  for (const auto& [value, mode] : {std::pair{"recorded", ops::PlanTuningMode::Recorded},
                                    std::pair{"", ops::PlanTuningMode::Recorded},
                                    std::pair{"off", ops::PlanTuningMode::Off}, std::pair{"0", ops::PlanTuningMode::Off},
                                    std::pair{"first-use", ops::PlanTuningMode::OnFirstUse},
                                    std::pair{"1", ops::PlanTuningMode::OnFirstUse}}) {
    ScopedEnvironment set("ATTNJIT_TUNE", value);
    INFO(value);
    auto parsed = ops::planTuningModeFromEnvironment();
    REQUIRE(parsed);
    CHECK(*parsed == mode);
  }
  ScopedEnvironment bad("ATTNJIT_TUNE", "always");
  auto mode = ops::planTuningModeFromEnvironment();
  REQUIRE_FALSE(mode);
  CHECK(mode.diagnostic().message.find("ATTNJIT_TUNE='always'") != std::string::npos);
  // A call reading the environment reports it; one that says its mode does not.
  support::Status s = ops::validatePagedAttention(decodeCall(64, 4096));
  REQUIRE_FALSE(s);
  CHECK(s.diagnostic().message.find("ATTNJIT_TUNE") != std::string::npos);
  auto explicitMode = decodeCall(64, 4096);
  explicitMode.tuning = ops::PlanTuning::Recorded;
  CHECK(ops::validatePagedAttention(explicitMode));
}

TEST_CASE("plan tuning: without a GPU every call takes the heuristic plan", "[op][tune]") {
  if (runtime::driverAvailable()) SUCCEED("a driver is present: the [gpu] case covers tuned plans");
  else {
    const auto plan = ops::pagedAttentionPlan(decodeCall(64, 4096));
    CHECK(plan.origin == ops::PlanOrigin::Heuristic);
    CHECK_FALSE(ops::tunedPlanDeviceKey().has_value());
    auto tuned = ops::tunePagedAttention(decodeCall(64, 4096));
    REQUIRE_FALSE(tuned);
    CHECK(tuned.diagnostic().message.find("no CUDA device") != std::string::npos);
  }
  auto invariant = decodeCall(64, 4096);
  invariant.batchInvariant = true;
  auto refused = ops::tunePagedAttention(invariant);
  REQUIRE_FALSE(refused);
  CHECK(refused.diagnostic().message.find("batch-invariant") != std::string::npos);
  ops::PlanTuningOptions badOptions;
  badOptions.samples = 0;
  CHECK_FALSE(ops::tunePagedAttention(decodeCall(64, 4096), badOptions));
}

TEST_CASE("plan tuning: tuned plans on the GPU match the float64 reference", "[gpu][op][tune]") {
  if (!runtime::driverAvailable()) {
    WARN("skipped: no CUDA driver (" << runtime::driverStatus().diagnostic().message << ")");
    return;
  }
  // Head counts no model uses, so these buckets' records cannot steer real calls.
  compiler::UnifiedAttentionConfig config;
  config.dtype = ir::ScalarKind::BF16;
  config.numQueryHeads = 12;
  config.numKvHeads = 3;
  config.headSize = 128;
  config.blockSize = 16;
  compiler::BatchShape shape;
  shape.queryLens = std::vector<int>(5, 1);
  shape.contextLens = {3000, 17, 2500, 1023, 3071};
  validation::GpuRunOptions options;
  options.tunePlan = true;
  auto r = validation::runPagedAttentionOpGpu(config, shape, options);
  REQUIRE(r);
  CHECK(r->run.check.passed);
  INFO(r->run.check.detail);
  REQUIRE(r->tuning.has_value());
  const ops::PagedAttentionTuningReport& report = *r->tuning;
  CHECK(report.recorded);
  CHECK(r->tunedPlan);
  int measured = 0;
  for (const ops::PlanMeasurement& m : report.measurements) {
    INFO(m.choice.str() << " " << m.kernelName << " " << m.error);
    if (m.medianMs > 0) ++measured;
    CHECK((m.medianMs > 0) != !m.error.empty());
    // The chosen plan ties with the fastest (within 1%), unless the heuristic
    // one stayed (within 2% of it).
    if (m.medianMs > 0 && !(report.chosen.choice == report.heuristic.choice))
      CHECK(report.chosen.medianMs <= m.medianMs * 1.0101);
  }
  CHECK(measured >= 8);
  CHECK(report.chosen.medianMs <= report.heuristic.medianMs);

  // A first call under first-use tuning records its bucket and is correct.
  config.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  validation::GpuRunOptions firstUse;
  firstUse.planTuning = ops::PlanTuning::OnFirstUse;
  firstUse.timedIterations = 3;
  auto f = validation::runPagedAttentionOpGpu(config, shape, firstUse);
  REQUIRE(f);
  CHECK(f->run.check.passed);
  CHECK(f->tunedPlan);
  // Off ignores the record.
  validation::GpuRunOptions off;
  off.planTuning = ops::PlanTuning::Off;
  auto o = validation::runPagedAttentionOpGpu(config, shape, off);
  REQUIRE(o);
  CHECK(o->run.check.passed);
  CHECK_FALSE(o->tunedPlan);
}
