// Replays the fuzz targets' bodies (fuzz/FuzzBodies.h) in the normal test suite: every input
// a fuzzer once crashed on (tests/data/fuzz-regressions/<target>/) and the shipped seeds must
// pass through without a crash and without a broken property.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/FuzzBodies.h"
#include "test_paths.h"

using attnjit::fuzz::FuzzOutcome;
using attnjit::tests::readFile;
using attnjit::tests::sourceDir;
namespace fs = std::filesystem;

namespace {

FuzzOutcome runTarget(const std::string& target, const std::string& bytes) {
  if (target == "tir") return attnjit::fuzz::fuzzTirText(bytes);
  if (target == "spec") return attnjit::fuzz::fuzzSpecText(bytes);
  return attnjit::fuzz::fuzzDiskCacheEntry(
      std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()));
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
  for (const char* target : {"tir", "spec", "disk_cache_entry"}) {
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
  // Rejected inputs are rejected quietly, with no broken property.
  FuzzOutcome garbage = runTarget("tir", "kernel @k(%x: ???");
  CHECK_FALSE(garbage.accepted);
  CHECK(garbage.violation.empty());
  FuzzOutcome damaged = runTarget("disk_cache_entry", "ATTNJITK\x01");
  CHECK_FALSE(damaged.accepted);
  CHECK(damaged.violation.empty());
}
