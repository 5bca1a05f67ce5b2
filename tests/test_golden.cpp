// Golden tests: tests/golden/*.golden each run the attnjit CLI on a kernel and
// compare its output (the tile IR after passes, PTX excerpts, instruction
// counts) with the expectation checked in below the file's marker line. After an
// intended change, scripts/bless (ATTNJIT_BLESS=1) rewrites the expectations;
// `git diff tests/golden` then shows what the change did to the code.
//
// A file holds, in order:
//   # comment lines
//   RUN: <attnjit arguments>     paths relative to the repository root
//   NORMALIZE: ptx               PTX register and label numbers compare as '#'
//   EXCERPT: <regex>             compare only the output lines matching one of
//                                these (ECMAScript); without any, every line
//   COUNT: <regex>               the expectation records how many lines match
//   CHECK-NOT: <text>            no output line may contain it
//   # ---- expected (scripts/bless rewrites from here) ----
//   CHECK: <line>                the compared lines, in order, exactly
//   CHECK-COUNT: <n> <regex>     one per COUNT, in order
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "test_paths.h"
#include "test_tools.h"

namespace {

namespace fs = std::filesystem;

const std::string kMarker = "# ---- expected (scripts/bless rewrites from here) ----";

struct GoldenFile {
  std::vector<std::string> header;  // every line above the marker, kept by bless
  std::string run;
  bool normalizePtx = false;
  std::vector<std::regex> excerpts;
  std::vector<std::string> counts;  // COUNT regexes, as written
  std::vector<std::string> forbidden;
  std::vector<std::string> expected;  // the lines below the marker
};

bool startsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Parses a golden file; a malformed one fails the test with the line named.
GoldenFile parseGolden(const fs::path& path) {
  GoldenFile golden;
  bool below = false;
  int number = 0;
  for (const std::string& line : splitLines(attnjit::tests::readFile(path))) {
    ++number;
    INFO(path.string() << ":" << number << ": " << line);
    if (below) {
      if (!line.empty()) golden.expected.push_back(line);
      continue;
    }
    if (line == kMarker) {
      below = true;
      continue;
    }
    golden.header.push_back(line);
    if (line.empty() || startsWith(line, "#")) continue;
    if (startsWith(line, "RUN: ")) golden.run = line.substr(5);
    else if (line == "NORMALIZE: ptx") golden.normalizePtx = true;
    else if (startsWith(line, "EXCERPT: ")) golden.excerpts.emplace_back(line.substr(9));
    else if (startsWith(line, "COUNT: ")) golden.counts.push_back(line.substr(7));
    else if (startsWith(line, "CHECK-NOT: ")) golden.forbidden.push_back(line.substr(11));
    else FAIL("unknown directive (RUN, NORMALIZE, EXCERPT, COUNT, CHECK-NOT, or the marker line)");
  }
  INFO(path.string());
  REQUIRE(below);
  REQUIRE(!golden.run.empty());
  return golden;
}

// PTX's virtual register and label numbers change with any unrelated edit of the
// lowering; what a golden test pins is the instructions and their operands' kinds.
std::string normalizePtx(const std::string& line) {
  static const std::regex registers(R"(%(r|rd|f|fd|p|rs|h|hh|fs)[0-9]+)");
  static const std::regex labels(R"(\$L__BB[0-9]+_[0-9]+)");
  return std::regex_replace(std::regex_replace(line, registers, "%$1#"), labels, "$$L__BB#");
}

// The lines a golden file compares: the excerpt as CHECK lines, then the counts.
std::vector<std::string> expectationOf(const GoldenFile& golden, const std::string& output) {
  std::vector<std::string> lines = splitLines(output);
  std::vector<std::string> result;
  for (const std::string& raw : lines) {
    const std::string line = golden.normalizePtx ? normalizePtx(raw) : raw;
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    bool selected = golden.excerpts.empty();
    for (const std::regex& excerpt : golden.excerpts) selected = selected || std::regex_search(line, excerpt);
    if (selected) result.push_back("CHECK: " + line);
  }
  for (const std::string& count : golden.counts) {
    const std::regex pattern(count);
    size_t n = 0;
    for (const std::string& line : lines) n += std::regex_search(line, pattern) ? 1 : 0;
    result.push_back("CHECK-COUNT: " + std::to_string(n) + " " + count);
  }
  return result;
}

void bless(const fs::path& path, const GoldenFile& golden, const std::vector<std::string>& actual) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (const std::string& line : golden.header) out << line << "\n";
  out << kMarker << "\n";
  for (const std::string& line : actual) out << line << "\n";
  REQUIRE(out.good());
}

std::vector<fs::path> goldenFiles() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(attnjit::tests::sourceDir()) / "tests/golden"))
    if (entry.path().extension() == ".golden") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("golden: the CLI's output for each tests/golden file matches its expectation", "[golden]") {
  const bool blessing = std::getenv("ATTNJIT_BLESS") != nullptr && std::string(std::getenv("ATTNJIT_BLESS")) == "1";
  const std::vector<fs::path> files = goldenFiles();
  REQUIRE(files.size() >= 4);
  for (const fs::path& path : files) {
    INFO(path.filename().string());
    const GoldenFile golden = parseGolden(path);
    int code = 0;
    const std::string command = "(cd '" + attnjit::tests::sourceDir() + "' && ATTNJIT_CACHE_DISABLE=1 '" +
                                attnjit::tests::cliPath() + "' " + golden.run + " 2>/dev/null)";
    const std::string output = attnjit::tests::runShell(command, &code);
    INFO("attnjit " << golden.run);
    REQUIRE(code == 0);
    for (const std::string& text : golden.forbidden) {
      INFO("CHECK-NOT: " << text);
      CHECK(output.find(text) == std::string::npos);
    }
    const std::vector<std::string> actual = expectationOf(golden, output);
    if (blessing) {
      bless(path, golden, actual);
      continue;
    }
    // The first difference, with its neighbours, and what to run when it is intended.
    size_t i = 0;
    while (i < actual.size() && i < golden.expected.size() && actual[i] == golden.expected[i]) ++i;
    if (i == actual.size() && i == golden.expected.size()) continue;
    std::string context;
    for (size_t k = i >= 2 ? i - 2 : 0; k < i; ++k) context += "  " + golden.expected[k] + "\n";
    FAIL("expectation line " << i + 1 << " differs (scripts/bless accepts the new output):\n"
                             << context << "- expected: "
                             << (i < golden.expected.size() ? golden.expected[i] : std::string("(end)")) << "\n"
                             << "+ actual:   " << (i < actual.size() ? actual[i] : std::string("(end)")));
  }
}

TEST_CASE("golden: a changed line fails the comparison", "[golden]") {
  // The comparison is not vacuous: one edited line of a real expectation differs.
  const std::vector<fs::path> files = goldenFiles();
  REQUIRE(!files.empty());
  const GoldenFile golden = parseGolden(files.front());
  int code = 0;
  const std::string output =
      attnjit::tests::runShell("(cd '" + attnjit::tests::sourceDir() + "' && '" + attnjit::tests::cliPath() + "' " +
                                   golden.run + " 2>/dev/null)",
                               &code);
  REQUIRE(code == 0);
  std::vector<std::string> actual = expectationOf(golden, output);
  REQUIRE(actual == golden.expected);
  actual.back() += " ";
  CHECK(actual != golden.expected);
  CHECK(normalizePtx("mma.sync.aligned.m16n8k16 {%f12, %f13}, {%r7}, [%rd45];") ==
        "mma.sync.aligned.m16n8k16 {%f#, %f#}, {%r#}, [%rd#];");
}
