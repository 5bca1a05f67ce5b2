// The attnjit command-line tool, run as a separate process: output and exit
// codes of each command, and robustness on malformed and mutated inputs (every
// bad input must end in a located error and exit 2, never in a crash).
#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const std::string kCli = ATTNJIT_CLI_PATH;
const std::string kSourceDir = ATTNJIT_SOURCE_DIR;

struct CliResult {
  bool exitedNormally = false;  // false: killed by a signal (a crash)
  int exitCode = -1;
  std::string out, err;
};

std::string readFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  REQUIRE(out.good());
}

// A fresh directory per test case, removed at the end.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = fs::temp_directory_path() /
            ("attnjit_cli_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

std::string shellQuote(const std::string& s) {
  std::string quoted = "'";
  for (char c : s) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

CliResult runCli(const std::vector<std::string>& args) {
  TempDir capture;
  std::string command = "exec " + shellQuote(kCli);
  for (const std::string& a : args) command += " " + shellQuote(a);
  command += " </dev/null >" + shellQuote((capture.path() / "out").string()) + " 2>" +
             shellQuote((capture.path() / "err").string());
  int status = std::system(command.c_str());
  CliResult result;
  // `exec` makes the shell become the tool, so a crash shows as a signal; a shell
  // that reports it instead exits with 128 + the signal number.
  result.exitedNormally = status != -1 && WIFEXITED(status) && WEXITSTATUS(status) < 128;
  result.exitCode = status != -1 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = readFile(capture.path() / "out");
  result.err = readFile(capture.path() / "err");
  return result;
}

std::string specPath(const std::string& name) { return kSourceDir + "/specs/" + name; }

size_t countOccurrences(const std::string& text, const std::string& part) {
  size_t count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++count;
  return count;
}

bool startsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

}  // namespace

TEST_CASE("cli: list prints one line per variant with its parameters", "[cli]") {
  CliResult r = runCli({"list", specPath("unified_attention_decode.yaml")});
  INFO(r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(r.err.empty());
  CHECK(countOccurrences(r.out, "\n") == 2);
  CHECK(r.out.find("unified_attention_bf16_h32kv8_d128_bs16_causal") != std::string::npos);
  CHECK(r.out.find("dtype=bf16 num_query_heads=32 num_kv_heads=8 head_size=128 block_size=16 causal=true") !=
        std::string::npos);
  CHECK(r.out.find("dtype=f16 ") != std::string::npos);
}

TEST_CASE("cli: compile prints the tile IR of every variant", "[cli]") {
  CliResult r = runCli({"compile", specPath("unified_attention_f32.yaml"), "--emit=tir"});
  INFO(r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(countOccurrences(r.out, "kernel @") == 2);
  CHECK(r.out.find("kernel @unified_attention_f32_h4kv4_d80_bs32_causal(") != std::string::npos);
  CHECK(r.out.find("kernel @unified_attention_f32_h4kv4_d80_bs32_noncausal(") != std::string::npos);

  // tir-opt has no passes yet: the same text.
  CliResult optimized = runCli({"compile", specPath("unified_attention_f32.yaml"), "--emit", "tir-opt"});
  CHECK(optimized.exitCode == 0);
  CHECK(optimized.out == r.out);
}

TEST_CASE("cli: compile of one variant to a file round-trips through the .tir parser", "[cli]") {
  TempDir dir;
  fs::path tir = dir.path() / "kernel.tir";
  CliResult r = runCli({"compile", specPath("unified_attention_prefill.yaml"),
                        "--variant=unified_attention_bf16_h8kv2_d64_bs16_noncausal", "-o", tir.string()});
  INFO(r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(r.out.empty());
  std::string text = readFile(tir);
  CHECK(countOccurrences(text, "kernel @") == 1);
  CHECK(text.find("kernel @unified_attention_bf16_h8kv2_d64_bs16_noncausal(") != std::string::npos);

  CliResult reparsed = runCli({"compile", tir.string()});
  INFO(reparsed.err);
  REQUIRE(reparsed.exitCode == 0);
  CHECK(reparsed.out == text);
}

TEST_CASE("cli: run --interpret checks every variant on a small batch", "[cli]") {
  CliResult r = runCli({"run", specPath("unified_attention_prefill.yaml"), "--interpret", "--shape",
                        "query_lens=3,1", "--shape=context_lens=17,0", "--shape", "seed=5"});
  INFO(r.out << r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(r.out.find("query_lens=3,1 context_lens=17,0 seed=5") != std::string::npos);
  CHECK(countOccurrences(r.out, "PASS") == 2);
  CHECK(r.out.find("FAIL") == std::string::npos);
  CHECK(r.out.find("2 variant(s): 2 passed, 0 failed") != std::string::npos);

  CliResult one = runCli({"run", specPath("unified_attention_f32.yaml"), "--interpret", "--variant",
                          "unified_attention_f32_h4kv4_d80_bs32_noncausal", "--shape", "query_lens=2",
                          "--shape", "context_lens=3"});
  INFO(one.out << one.err);
  REQUIRE(one.exitCode == 0);
  CHECK(countOccurrences(one.out, "PASS") == 1);
  CHECK(one.out.find("unified_attention_f32_h4kv4_d80_bs32_noncausal") != std::string::npos);
}

TEST_CASE("cli: user errors exit 2 with 'where: error: what' on stderr", "[cli]") {
  struct Case {
    std::vector<std::string> args;
    std::string stderrStart;  // the location part of the message
    std::string stderrPart;
  };
  std::string missing = kSourceDir + "/specs/does_not_exist.yaml";
  std::string f32 = specPath("unified_attention_f32.yaml");
  std::vector<Case> cases = {
      {{"compile", f32, "--frobnicate"}, "attnjit compile: error: ", "unknown option '--frobnicate'"},
      {{"list", f32, "--variant=x"}, "attnjit list: error: ", "unknown option '--variant'"},
      {{"compile", f32, "--emitt=tir"}, "attnjit compile: error: ", "did you mean '--emit'?"},
      {{"frobnicate"}, "attnjit: error: ", "unknown command 'frobnicate'"},
      {{"--frobnicate"}, "attnjit: error: ", "unknown option '--frobnicate'"},
      {{"list", missing}, missing + ": error: ", "no such file"},
      {{"compile", kSourceDir + "/examples/none.tir"}, kSourceDir + "/examples/none.tir: error: ", "no such file"},
      {{"list"}, "attnjit list: error: ", "missing the spec file"},
      {{"list", f32, f32}, "attnjit list: error: ", "expected one spec file"},
      {{"compile", f32, "--emit=ptx"}, "attnjit compile: error: ",
       "--emit=ptx is not available yet: codegen lands with the codegen issue"},
      {{"compile", f32, "--emit=sass"}, "attnjit compile: error: ", "--emit=sass is not available yet"},
      {{"compile", f32, "--emit=asm"}, "attnjit compile: error: ", "unknown --emit value 'asm'"},
      {{"compile", f32, "--emit"}, "attnjit compile: error: ", "option '--emit' needs a value"},
      {{"compile", f32, "--emit=tir", "--emit=tir"}, "attnjit compile: error: ", "'--emit' is given twice"},
      {{"compile", f32, "--variant=nope"}, "attnjit compile: error: ", "no variant named 'nope'"},
      {{"run", f32}, "attnjit run: error: ",
       "GPU execution is not available yet (codegen lands with the codegen issue); use --interpret"},
      {{"run", f32, "--interpret=yes"}, "attnjit run: error: ", "option '--interpret' takes no value"},
      {{"run", f32, "--interpret", "--shape", "query_lens=1,2"}, "attnjit run: error: ", "context_lens"},
      {{"run", f32, "--interpret", "--shape", "batch=4"}, "attnjit run: error: ", "batch"},
      {{"list", kSourceDir + "/tests/data/bad/wrong_type.yaml"}, kSourceDir + "/tests/data/bad/wrong_type.yaml:6:14: error: ",
       "'head_size' must be an integer, got 'abc'"},
  };
  for (const Case& c : cases) {
    std::string line;
    for (const std::string& a : c.args) line += a + " ";
    CliResult r = runCli(c.args);
    INFO("attnjit " << line << "\nstderr: " << r.err);
    CHECK(r.exitCode == 2);
    CHECK(startsWith(r.err, c.stderrStart));
    CHECK(r.err.find(c.stderrPart) != std::string::npos);
    CHECK(r.out.empty());
  }
}

TEST_CASE("cli: help and version", "[cli]") {
  CliResult help = runCli({"--help"});
  CHECK(help.exitCode == 0);
  for (const char* command : {"list", "compile", "run"}) CHECK(help.out.find(command) != std::string::npos);

  CliResult compileHelp = runCli({"compile", "--help"});
  CHECK(compileHelp.exitCode == 0);
  CHECK(compileHelp.out.find("tir-opt: no passes yet") != std::string::npos);
  CHECK(compileHelp.out.find("--variant=NAME") != std::string::npos);

  CliResult runHelp = runCli({"help", "run"});
  CHECK(runHelp.exitCode == 0);
  CHECK(runHelp.out.find("--interpret") != std::string::npos);

  CliResult version = runCli({"--version"});
  CHECK(version.exitCode == 0);
  CHECK(startsWith(version.out, "attnjit "));

  CliResult nothing = runCli({});
  CHECK(nothing.exitCode == 2);
  CHECK(nothing.err.find("usage:") != std::string::npos);
}

namespace {

// Mutations of a valid input: truncations at spread-out lengths, and random
// single edits (a structural character or byte overwritten, a line dropped or
// doubled). Deterministic for a given seed.
std::vector<std::string> mutationsOf(const std::string& text, uint32_t seed) {
  std::vector<std::string> mutants;
  for (int k = 0; k < 12; ++k) mutants.push_back(text.substr(0, text.size() * k / 12));
  std::mt19937 rng(seed);
  const std::string structural = "[]{}:,-#&*!|>'\"\t\n%@=()<>0 ";
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % std::max<size_t>(n, 1)); };
  std::vector<size_t> lineStarts = {0};
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    if (text[i] == '\n') lineStarts.push_back(i + 1);
  }
  for (int k = 0; k < 16; ++k) {
    std::string m = text;
    switch (k % 4) {
      case 0:
        m[pick(m.size())] = structural[pick(structural.size())];
        break;
      case 1:
        m[pick(m.size())] = static_cast<char>(rng() & 0xff);
        break;
      case 2: {
        size_t line = pick(lineStarts.size());
        size_t end = line + 1 < lineStarts.size() ? lineStarts[line + 1] : m.size();
        m.erase(lineStarts[line], end - lineStarts[line]);
        break;
      }
      case 3: {
        size_t line = pick(lineStarts.size());
        size_t end = line + 1 < lineStarts.size() ? lineStarts[line + 1] : m.size();
        m.insert(lineStarts[line], text.substr(lineStarts[line], end - lineStarts[line]));
        break;
      }
    }
    mutants.push_back(m);
  }
  return mutants;
}

void requireCleanOutcome(const CliResult& r, const std::string& what, bool mayStayValid) {
  INFO(what << "\nexit " << r.exitCode << "\nstderr: " << r.err.substr(0, 2000));
  REQUIRE(r.exitedNormally);
  if (mayStayValid && r.exitCode == 0) return;
  CHECK(r.exitCode == 2);
  CHECK(r.err.find(": error: ") != std::string::npos);
}

}  // namespace

TEST_CASE("cli: malformed inputs never crash the tool", "[cli]") {
  TempDir dir;
  std::vector<fs::path> bad;
  for (const auto& entry : fs::directory_iterator(kSourceDir + "/tests/data/bad")) bad.push_back(entry.path());
  std::sort(bad.begin(), bad.end());
  REQUIRE(bad.size() >= 10);
  // Too large to keep in the repository.
  fs::path huge = dir.path() / "huge.yaml";
  writeFile(huge, "family: unified_attention\n# " + std::string(2 << 20, 'x') + "\n");
  bad.push_back(huge);
  for (const fs::path& file : bad) {
    requireCleanOutcome(runCli({"compile", file.string()}), "compile " + file.string(), false);
    if (file.extension() != ".tir") requireCleanOutcome(runCli({"list", file.string()}), "list " + file.string(), false);
  }
}

TEST_CASE("cli: mutated copies of the shipped specs and .tir files never crash the tool", "[cli]") {
  TempDir dir;
  std::vector<fs::path> inputs;
  for (const auto& entry : fs::directory_iterator(kSourceDir + "/specs")) {
    if (entry.path().extension() == ".yaml") inputs.push_back(entry.path());
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(kSourceDir + "/examples/tir", ec)) {
    if (entry.path().extension() == ".tir") inputs.push_back(entry.path());
  }
  std::sort(inputs.begin(), inputs.end());
  REQUIRE(inputs.size() >= 3);
  uint32_t seed = 1;
  for (const fs::path& input : inputs) {
    std::vector<std::string> mutants = mutationsOf(readFile(input), seed++);
    for (size_t i = 0; i < mutants.size(); ++i) {
      fs::path copy = dir.path() / (input.stem().string() + "_" + std::to_string(i) + input.extension().string());
      writeFile(copy, mutants[i]);
      requireCleanOutcome(runCli({"compile", copy.string()}),
                          "compile of mutant " + std::to_string(i) + " of " + input.string() + ":\n" + mutants[i],
                          true);
    }
  }
}
