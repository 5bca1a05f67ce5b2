// Replays the fuzz targets' bodies (fuzz/FuzzBodies.h) in the normal test suite: every input
// a fuzzer once crashed on (tests/data/fuzz-regressions/<target>/) and the shipped seeds must
// pass through without a crash and without a broken property.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "fuzz/FuzzBodies.h"
#include "fuzz/FuzzOpBodies.h"
#include "test_paths.h"

using attnjit::fuzz::FuzzOutcome;
using attnjit::tests::readFile;
using attnjit::tests::sourceDir;
namespace fs = std::filesystem;

namespace {

FuzzOutcome runTarget(const std::string& target, const std::string& bytes) {
  const std::span<const std::uint8_t> raw(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  if (target == "tir") return attnjit::fuzz::fuzzTirText(bytes);
  if (target == "spec") return attnjit::fuzz::fuzzSpecText(bytes);
  if (target == "op_params") return attnjit::fuzz::fuzzOpParams(raw);
  if (target == "shape") return attnjit::fuzz::fuzzShapeArguments(bytes);
  if (target == "aot_manifest") return attnjit::fuzz::fuzzAotManifest(bytes);
  return attnjit::fuzz::fuzzDiskCacheEntry(raw);
}

std::vector<fs::path> filesIn(const fs::path& directory) {
  std::vector<fs::path> files;
  if (!fs::is_directory(directory)) return files;
  for (const auto& item : fs::directory_iterator(directory)) {
    if (item.is_regular_file()) files.push_back(item.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("fuzz regressions: saved crash inputs pass every fuzz body", "[fuzz]") {
  const fs::path root = fs::path(sourceDir()) / "tests" / "data" / "fuzz-regressions";
  int replayed = 0;
  for (const char* target : {"tir", "spec", "disk_cache_entry", "op_params", "shape", "aot_manifest"}) {
    for (const fs::path& input : filesIn(root / target)) {
      INFO(input.string());
      CHECK(runTarget(target, readFile(input)).violation.empty());
      ++replayed;
    }
  }
  WARN("replayed " << replayed << " fuzz regression inputs");
}

TEST_CASE("fuzz regressions: the shipped seeds are accepted by their targets", "[fuzz]") {
  // The seeds are valid inputs: a body that rejected them would fuzz only its error paths.
  const fs::path root(sourceDir());
  for (const char* name : {"tests/tir/control_flow.tir", "tests/tir/layouts.tir", "examples/tir/vector_add.tir"}) {
    INFO(name);
    FuzzOutcome outcome = runTarget("tir", readFile(root / name));
    CHECK(outcome.accepted);
    CHECK(outcome.violation.empty());
  }
  for (const char* name : {"specs/unified_attention_decode.yaml", "specs/unified_attention_f32.yaml"}) {
    INFO(name);
    FuzzOutcome outcome = runTarget("spec", readFile(root / name));
    CHECK(outcome.accepted);
    CHECK(outcome.violation.empty());
  }
  FuzzOutcome entry = runTarget("disk_cache_entry", readFile(root / "fuzz/seeds/disk_cache_entry/valid.kernel"));
  CHECK(entry.accepted);
  CHECK(entry.violation.empty());
  for (const fs::path& seed : filesIn(root / "fuzz/seeds/shape")) {
    INFO(seed.string());
    FuzzOutcome outcome = runTarget("shape", readFile(seed));
    CHECK(outcome.accepted);
    CHECK(outcome.violation.empty());
  }
  // Rejected inputs are rejected quietly, with no broken property.
  FuzzOutcome garbage = runTarget("tir", "kernel @k(%x: ???");
  CHECK_FALSE(garbage.accepted);
  CHECK(garbage.violation.empty());
  FuzzOutcome damaged = runTarget("disk_cache_entry", "ATTNJITK\x01");
  CHECK_FALSE(damaged.accepted);
  CHECK(damaged.violation.empty());
}

TEST_CASE("fuzz bodies: random op parameters and shape lists keep their properties", "[fuzz][limits]") {
  // A fixed sample of what fuzz_op_params and fuzz_shape explore, so that every suite run
  // (the sanitizer one included) checks the properties without libFuzzer.
  std::mt19937_64 random(20261201);
  int accepted = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string bytes(static_cast<std::size_t>(16 + random() % 240), '\0');
    for (char& c : bytes) c = static_cast<char>(random());
    bytes[1] = static_cast<char>(i % 2);  // half of them mutate a well-formed call
    FuzzOutcome outcome = runTarget("op_params", bytes);
    INFO("input " << i << ": " << outcome.violation);
    REQUIRE(outcome.violation.empty());
    accepted += outcome.accepted ? 1 : 0;
  }
  // Mutating one to four fields of a well-formed call leaves some accepted.
  CHECK(accepted > 100);
  const std::vector<std::string> keys = {"query_lens=", "context_lens=", "seed=", "check_stride=",
                                         "segment_tiles=", "num_segments=", "num_partials=", "key_ramp=",
                                         "output_scale=", "programs="};
  const std::vector<std::string> values = {"1", "0", "-1", "4096", "2147483647", "16777216", "1x64", "3x0",
                                           "7,1,9", "1e3", "0.5", "x", "", "99999999999", "1x16777217"};
  for (int i = 0; i < 5000; ++i) {
    std::string text;
    const int assignments = 1 + static_cast<int>(random() % 5);
    for (int a = 0; a < assignments; ++a)
      text += keys[random() % keys.size()] + values[random() % values.size()] + "\n";
    const FuzzOutcome outcome = runTarget("shape", text);
    INFO(text << outcome.violation);
    REQUIRE(outcome.violation.empty());
  }
}
