// The attnjit command-line tool, run as a separate process: output and exit
// codes of each command, and robustness on malformed and mutated inputs (every
// bad input must end in a located error and exit 2, never in a crash).
#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/ops/MlaDecodeOp.h"
#include "runtime/Driver.h"
#include "test_paths.h"
#include "test_tools.h"

namespace fs = std::filesystem;

namespace {

const std::string kCli = attnjit::tests::cliPath();
const std::string kSourceDir = attnjit::tests::sourceDir();

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

// `environment` holds NAME=VALUE settings for the tool's environment (PATH=... to
// hide or show the CUDA toolkit).
CliResult runCli(const std::vector<std::string>& args, const std::vector<std::string>& environment = {}) {
  TempDir capture;
  std::string command = "exec ";
  if (!environment.empty()) {
    // `env` execs the tool in turn, so a crash still shows as a signal.
    command += "env";
    for (const std::string& setting : environment) command += " " + shellQuote(setting);
    command += " ";
  }
  command += shellQuote(kCli);
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

TEST_CASE("cli: compile prints the tile IR of every variant, each under a header line", "[cli]") {
  CliResult r = runCli({"compile", specPath("unified_attention_f32.yaml"), "--emit=tir"});
  INFO(r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(countOccurrences(r.out, "kernel @") == 2);
  CHECK(startsWith(r.out, "// ---- unified_attention_f32_h4kv4_d80_bs32_causal ----\n\n// vLLM"));
  CHECK(r.out.find("\n// ---- unified_attention_f32_h4kv4_d80_bs32_noncausal ----\n\n// vLLM") != std::string::npos);
  CHECK(r.out.find("kernel @unified_attention_f32_h4kv4_d80_bs32_causal(") != std::string::npos);
  CHECK(r.out.find("kernel @unified_attention_f32_h4kv4_d80_bs32_noncausal(") != std::string::npos);
  // As built: the layouts come with the passes.
  CHECK(r.out.find("#blocked") == std::string::npos);

  // The text of several kernels with header comments is still a valid .tir module.
  TempDir dir;
  fs::path tir = dir.path() / "both.tir";
  writeFile(tir, r.out);
  CliResult reparsed = runCli({"compile", tir.string(), "--variant=unified_attention_f32_h4kv4_d80_bs32_noncausal"});
  INFO(reparsed.err);
  CHECK(reparsed.exitCode == 0);
  CHECK(startsWith(reparsed.out, "// vLLM unified paged attention"));
  CHECK(countOccurrences(reparsed.out, "kernel @unified_attention_f32_h4kv4_d80_bs32_noncausal(") == 1);
  CHECK(countOccurrences(reparsed.out, "kernel @") == 1);
  // Read back whole, it prints as it was written.
  CliResult whole = runCli({"compile", tir.string()});
  CHECK(whole.exitCode == 0);
  CHECK(whole.out == r.out);
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
  // The tolerance column says which error it bounds (the relative error is for reading).
  CHECK(r.out.find("max abs err  max rel err  abs err tol  result") != std::string::npos);

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
      {{"compile", f32, "--emit=asm"}, "attnjit compile: error: ", "unknown --emit value 'asm'"},
      {{"compile", f32, "--emit=bogus"},
       "attnjit compile: error: ",
       "unknown --emit value 'bogus' (stages: tir, tir-opt, llvm, llvm-opt, ptx, cubin, sass)"},
      {{"compile", f32, "--emit=llvm-op"}, "attnjit compile: error: ", "did you mean 'llvm-opt'?"},
      {{"compile", f32, "--arch=sm_75"},
       "attnjit compile: error: ",
       "--arch=sm_75: unknown target 'sm_75' (known: sm_80,"},
      {{"compile", f32, "--arch=sm_80", "--arch=sm_86"}, "attnjit compile: error: ", "'--arch' is given twice"},
      {{"compile", f32, "--print-after-all=yes"}, "attnjit compile: error: ", "'--print-after-all' takes no value"},
      {{"compile", f32, "--print-after"}, "attnjit compile: error: ", "option '--print-after' needs a value"},
      {{"compile", kSourceDir + "/examples/tir/vector_add.tir", "--variant=vector_ad"},
       "attnjit compile: error: ",
       "no kernel named 'vector_ad' in " + kSourceDir + "/examples/tir/vector_add.tir; did you mean 'vector_add'?"},
      {{"inspect", f32, "--arch=sm_75"}, "attnjit inspect: error: ", "unknown target 'sm_75'"},
      {{"inspect"}, "attnjit inspect: error: ", "missing the input"},
      {{"inspect", f32, "--emit=ptx"}, "attnjit inspect: error: ", "unknown option '--emit'"},
      {{"compile", f32, "--emit"}, "attnjit compile: error: ", "option '--emit' needs a value"},
      {{"compile", f32, "--emit=tir", "--emit=tir"}, "attnjit compile: error: ", "'--emit' is given twice"},
      {{"compile", f32, "--variant=nope"}, "attnjit compile: error: ", "no variant named 'nope'"},
      {{"run", f32, "--interpret=yes"}, "attnjit run: error: ", "option '--interpret' takes no value"},
      {{"run", f32, "--interpret", "--shape", "query_lens=1,2"}, "attnjit run: error: ", "context_lens"},
      {{"run", f32, "--interpret", "--shape", "batch=4"}, "attnjit run: error: ", "batch"},
      {{"list", kSourceDir + "/tests/data/bad/wrong_type.yaml"},
       kSourceDir + "/tests/data/bad/wrong_type.yaml:6:14: error: ",
       "'head_size' must be an integer, got 'abc'"},
      // Checked before the driver is needed, so with or without a GPU.
      {{"bench", specPath("merge_attn_states.yaml"), "--op"},
       specPath("merge_attn_states.yaml") + ":",
       "bench --op: variant 'merge_attn_states_f32_h4_d64_lse' is of family 'merge_attn_states'; bench --op "
       "takes unified_attention (ops::pagedAttention)"},
      {{"bench", f32, "--op=yes"}, "attnjit bench: error: ", "option '--op' takes no value"},
      {{"bench", kSourceDir + "/bench/decode.yaml", "--op", "--op-call=bogus"},
       "attnjit bench: error: ",
       "--op-call takes engine, no-workspace or plain, with --op; got 'bogus'"},
      {{"bench", kSourceDir + "/bench/decode.yaml", "--op-call=plain"},
       "attnjit bench: error: ",
       "--op-call takes engine, no-workspace or plain, with --op; got 'plain'"},
      {{"plan", specPath("merge_attn_states.yaml")},
       specPath("merge_attn_states.yaml") + ":",
       "plan: variant 'merge_attn_states_f32_h4_d64_lse' is of family 'merge_attn_states'"},
      {{"plan", f32, "--sms=0"}, "attnjit plan: error: ", "--sms must be 1..100000, got '0'"},
      {{"warmup", f32, "--threads=0"}, "attnjit warmup: error: ", "--threads must be 1..1024, got '0'"},
      {{"warmup", f32, "--threads=4x"}, "attnjit warmup: error: ", "--threads must be 1..1024, got '4x'"},
      {{"warmup"}, "attnjit warmup: error: ", "missing the spec file"},
      {{"plan", f32, "--sms=12x"}, "attnjit plan: error: ", "--sms must be 1..100000, got '12x'"},
      {{"plan", f32, "--shape", "query_lens=1,2"}, "attnjit plan: error: ", "context_lens"},
      {{"plan", specPath("mla_decode.yaml"), "--shape", "query_lens=2,1", "--shape", "context_lens=5x2"},
       "attnjit plan: error: ",
       "mla_decode is decode only: query_lens[0] is 2, expected 1"},
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

TEST_CASE("cli: plan prints the kernel and split-KV plan the op would launch, without a GPU", "[cli]") {
  const std::string decode = kSourceDir + "/bench/decode.yaml";
  const std::vector<std::string> uneven = {"plan", decode, "--shape", "query_lens=1x64", "--shape",
                                           "context_lens=0,8191x63", "--sms=132"};
  CliResult r = runCli(uneven);
  INFO(r.out << r.err);
  CHECK(r.exitCode == 0);
  CHECK(r.out.find("SMs: 132 (--sms)") != std::string::npos);
  CHECK(r.out.find("-> unified_attention_bf16_h32kv8_d128_bs16_causal_3d_t64_rowsum: 3 segments of 48 tiles (3072 "
                   "keys), grid 80x8x3; heuristic") != std::string::npos);
  std::vector<std::string> noWorkspace = uneven;
  noWorkspace.push_back("--no-workspace");  // the runtime's scratch takes the same plan
  r = runCli(noWorkspace);
  CHECK(r.exitCode == 0);
  CHECK(r.out.find("workspace: none (split-KV into the runtime's scratch)") != std::string::npos);
  CHECK(r.out.find("_3d_t64_rowsum: 3 segments of 48 tiles (3072 keys), grid 80x8x3; heuristic") != std::string::npos);
  noWorkspace.push_back("--no-runtime-scratch");
  r = runCli(noWorkspace);
  CHECK(r.exitCode == 0);
  CHECK(r.out.find("-> unified_attention_bf16_h32kv8_d128_bs16_causal_t64_rowsum: 2D, grid 80x8x1; heuristic") !=
        std::string::npos);
  r = runCli({"plan", decode, "--shape", "query_lens=1x64", "--shape", "context_lens=4095x64", "--sms=132"});
  CHECK(r.exitCode == 0);
  CHECK(r.out.find("-> unified_attention_bf16_h32kv8_d128_bs16_causal_t64: 2D, at most 2 CTAs per SM, grid 80x8x1; heuristic") !=
        std::string::npos);
  r = runCli({"plan", decode, "--shape", "query_lens=1x4", "--shape", "context_lens=4095x4", "--sms=132"});
  CHECK(r.exitCode == 0);
  CHECK(r.out.find("_3d_t64_rowsum: 8 segments of 8 tiles (512 keys), grid 5x8x8; heuristic") != std::string::npos);
  // --arch plans for a typical device of a target: a latency-bound launch (B=1)
  // takes 128-key tiles where their 128 KiB of slots fit (A100's 163 KiB per
  // block), 64-key tiles on an L40S (99 KiB).
  const std::vector<std::string> single = {"plan", decode, "--shape", "query_lens=1", "--shape", "context_lens=4095"};
  std::vector<std::string> onA100 = single, onL40s = single;
  onA100.push_back("--arch=sm_80");
  onL40s.push_back("--arch=sm_89");
  r = runCli(onA100);
  INFO(r.out << r.err);
  CHECK(r.exitCode == 0);
  CHECK(r.out.find("device: A100 (sm_80 reference): 108 SMs, 166912 bytes of shared memory per block") !=
        std::string::npos);
  CHECK(r.out.find("SMs: 108 (sm_80's reference device, A100)") != std::string::npos);
  CHECK(r.out.find("_t128") != std::string::npos);
  r = runCli(onL40s);
  CHECK(r.exitCode == 0);
  CHECK(r.out.find("device: L40S (sm_89 reference): 142 SMs, 101376 bytes") != std::string::npos);
  CHECK(r.out.find("_t128") == std::string::npos);
  CHECK(r.out.find("_t64") != std::string::npos);
  r = runCli({"plan", decode, "--arch=sm_70"});
  CHECK(r.exitCode == 2);
  CHECK(r.err.find("attnjit plan: error: --arch: unknown target 'sm_70' (known: sm_80") != std::string::npos);
  r = runCli({"warmup", decode, "--arch=sm_89"});
  CHECK(r.exitCode == 2);
  CHECK(r.err.find("--arch plans for another device: it needs --ptx") != std::string::npos);
}

TEST_CASE("cli: plan prints what the MLA decode op would launch", "[cli]") {
  const std::string mla = specPath("mla_decode.yaml");
  // B=64 x 2 head blocks fill 132 SMs: unsplit; a sequence's head blocks side by side in x.
  CliResult r = runCli({"plan", mla, "--variant=mla_decode_bf16_h128_l512_r64_bs16_lse", "--shape", "query_lens=1x64",
                        "--shape", "context_lens=4095x64", "--sms=132"});
  INFO(r.out << r.err);
  CHECK(r.exitCode == 0);
  const attnjit::compiler::MlaDecodeConfig wide = [] {
    attnjit::ops::MlaDecodeParams p;
    p.numHeads = 128;
    p.blockSize = 16;
    p.numSeqs = 64;
    p.maxSeqLen = 4096;
    p.numSms = 132;
    return attnjit::ops::selectMlaDecodeVariant(p);
  }();
  CHECK(r.out.find("-> " + wide.kernelName() + ": 2D, grid 128x1x1; heuristic (the op's rules)") != std::string::npos);
  // B=4 x 65536 keys at 16 heads: one head block per sequence, cut into segments.
  r = runCli({"plan", mla, "--variant=mla_decode_bf16_h16_l512_r64_bs16_lse", "--shape", "query_lens=1x4", "--shape",
              "context_lens=65535x4", "--sms=132"});
  CHECK(r.exitCode == 0);
  CHECK(r.out.find("_3d_t64_qs: 32 segments of 32 KV tiles, grid 4x1x32; heuristic") != std::string::npos);
  // Without a workspace or the runtime's scratch, unsplit.
  r = runCli({"plan", mla, "--variant=mla_decode_bf16_h16_l512_r64_bs16_lse", "--shape", "query_lens=1x4", "--shape",
              "context_lens=65535x4", "--sms=132", "--no-runtime-scratch"});
  CHECK(r.exitCode == 0);
  CHECK(r.out.find("_t64_qs: 2D, grid 4x1x1; heuristic") != std::string::npos);
}

TEST_CASE("cli: run without a CUDA driver points to --interpret", "[cli]") {
  if (attnjit::runtime::driverAvailable()) {
    WARN("a CUDA driver is present: 'attnjit run' runs on the GPU, so its no-driver error is not tested");
    return;
  }
  CliResult r = runCli({"run", specPath("unified_attention_f32.yaml")});
  CHECK(r.exitCode == 2);
  CHECK(startsWith(r.err, "attnjit run: error: CUDA driver not available"));
  CHECK(r.err.find("use --interpret") != std::string::npos);
  r = runCli({"warmup", kSourceDir + "/bench/decode.yaml"});
  CHECK(r.exitCode == 2);
  CHECK(startsWith(r.err, "attnjit warmup: error: CUDA driver not available"));
  CHECK(r.err.find("it needs the GPU the cache is for") != std::string::npos);
}

TEST_CASE("cli: warmup --ptx compiles the op's kernels to PTX without a GPU and times each", "[cli]") {
  CliResult r = runCli({"warmup", kSourceDir + "/bench/decode.yaml", "--ptx", "--threads=2"});
  REQUIRE(r.exitCode == 0);
  // The op's kernels for the variant's static parameters: decode and prefill
  // tilings, the split-KV kernel and its reduce kernel, each with its time.
  for (const char* kernel : {"unified_attention_bf16_h32kv8_d128_bs16_causal_t64 ",
                             "unified_attention_bf16_h32kv8_d128_bs16_causal_3d_t64_rowsum ",
                             "reduce_segments_bf16_h32_d128 ", "unified_attention_bf16_h32kv8_d128_bs16_causal_t64_w8_m128_ws "}) {
    const size_t line = r.out.find(kernel);
    REQUIRE(line != std::string::npos);
    CHECK(r.out.find(" ms\n", line) != std::string::npos);
  }
  CHECK(r.out.find("kernels to PTX for sm_") != std::string::npos);
  CHECK(r.out.find("(on 2 threads); spec -> PTX per kernel: median ") != std::string::npos);
}

TEST_CASE("cli: help and version", "[cli]") {
  CliResult help = runCli({"--help"});
  CHECK(help.exitCode == 0);
  for (const char* command : {"list", "compile", "inspect", "run"}) {
    CHECK(help.out.find("\n  " + std::string(command) + " ") != std::string::npos);
  }

  CliResult compileHelp = runCli({"compile", "--help"});
  CHECK(compileHelp.exitCode == 0);
  for (const char* stage : {"tir ", "tir-opt ", "llvm ", "llvm-opt ", "ptx ", "cubin ", "sass "}) {
    CHECK(compileHelp.out.find("\n  " + std::string(stage)) != std::string::npos);
  }
  for (const char* option :
       {"--variant=NAME", "--arch=sm_XX", "--print-after-all", "--print-after=PASS", "--time-passes"}) {
    CHECK(compileHelp.out.find(option) != std::string::npos);
  }

  CliResult inspectHelp = runCli({"help", "inspect"});
  CHECK(inspectHelp.exitCode == 0);
  CHECK(inspectHelp.out.find("ptxas -v") != std::string::npos);

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
    if (file.extension() != ".tir")
      requireCleanOutcome(runCli({"list", file.string()}), "list " + file.string(), false);
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

// ---- Compile stages and inspection (attnjit compile --emit=..., attnjit inspect) ----

namespace {

const std::string kBf16Decode = "unified_attention_bf16_h32kv8_d128_bs16_causal";
const std::string kF16Decode = "unified_attention_f16_h32kv8_d128_bs16_causal";

// Whether an executable named `tool` is in a directory of this process's PATH (the
// tool inherits this PATH).
bool onPath(const std::string& tool) {
  const char* path = std::getenv("PATH");
  std::stringstream directories(path == nullptr ? "" : path);
  std::string directory;
  while (std::getline(directories, directory, ':')) {
    fs::path candidate = fs::path(directory.empty() ? "." : directory) / tool;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec) && access(candidate.c_str(), X_OK) == 0) return true;
  }
  return false;
}

std::vector<std::string> splitWords(const std::string& line) {
  std::stringstream in(line);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

std::vector<std::string> splitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The `inspect` table as column name → value, for the row of `kernel`.
std::map<std::string, std::string> inspectRow(const std::string& table, const std::string& kernel) {
  std::vector<std::string> header;
  for (const std::string& line : splitLines(table)) {
    std::vector<std::string> words = splitWords(line);
    if (!words.empty() && words[0] == "kernel") header = words;
    if (words.empty() || words[0] != kernel || words.size() != header.size()) continue;
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size(); ++i) row[header[i]] = words[i];
    return row;
  }
  return {};
}

// The tile-IR passes ("tile-IR") or codegen stages ("codegen"), in pipeline
// order, as `attnjit compile --list-passes` prints them.
std::vector<std::string> pipelineSteps(const std::string& kind) {
  CliResult r = runCli({"compile", "--list-passes"});
  std::vector<std::string> names;
  for (const std::string& line : splitLines(r.out)) {
    std::vector<std::string> words = splitWords(line);
    if (words.size() >= 2 && words[0] == kind) names.push_back(words[1]);
  }
  return names;
}
std::vector<std::string> pipelinePassesFromError() { return pipelineSteps("tile-IR"); }

}  // namespace

TEST_CASE("cli: compile --emit=tir-opt prints the IR after the passes, with layouts", "[cli]") {
  std::string spec = specPath("unified_attention_decode.yaml");
  CliResult built = runCli({"compile", spec, "--variant=" + kBf16Decode, "--emit=tir"});
  CliResult optimized = runCli({"compile", spec, "--variant=" + kBf16Decode, "--emit=tir-opt"});
  INFO(optimized.err);
  REQUIRE(built.exitCode == 0);
  REQUIRE(optimized.exitCode == 0);
  CHECK(built.out.find("#blocked") == std::string::npos);
  CHECK(optimized.out.find("#blocked") != std::string::npos);
  CHECK(countOccurrences(optimized.out, "kernel @" + kBf16Decode + "(") == 1);
  CHECK(optimized.out.find("// ----") == std::string::npos);  // one kernel: no header

  // The optimized IR is valid .tir: it reads back and prints the same.
  TempDir dir;
  fs::path tir = dir.path() / "optimized.tir";
  writeFile(tir, optimized.out);
  CliResult reparsed = runCli({"compile", tir.string()});
  INFO(reparsed.err);
  CHECK(reparsed.exitCode == 0);
  CHECK(reparsed.out == optimized.out);
}

TEST_CASE("cli: compile --emit=llvm and --emit=llvm-opt print one LLVM module per kernel", "[cli]") {
  std::string spec = specPath("unified_attention_decode.yaml");
  CliResult llvm = runCli({"compile", spec, "--emit=llvm"});
  INFO(llvm.err);
  REQUIRE(llvm.exitCode == 0);
  CHECK(countOccurrences(llvm.out, "define ptx_kernel void @") == 2);
  CHECK(llvm.out.find("define ptx_kernel void @" + kBf16Decode + "(") != std::string::npos);
  CHECK(llvm.out.find("define ptx_kernel void @" + kF16Decode + "(") != std::string::npos);
  // LLVM IR comments start with ';'.
  CHECK(startsWith(llvm.out, "; ---- " + kBf16Decode + " ----\n"));
  CHECK(llvm.out.find("\n; ---- " + kF16Decode + " ----\n") != std::string::npos);
  CHECK(llvm.out.find("target triple = \"nvptx64-nvidia-cuda\"") != std::string::npos);

  CliResult optimized = runCli({"compile", spec, "--variant", kBf16Decode, "--emit=llvm-opt"});
  CliResult unoptimized = runCli({"compile", spec, "--variant", kBf16Decode, "--emit=llvm"});
  INFO(optimized.err);
  REQUIRE(optimized.exitCode == 0);
  CHECK(countOccurrences(optimized.out, "define ptx_kernel void @" + kBf16Decode + "(") == 1);
  CHECK(optimized.out.find("; ----") == std::string::npos);
  CHECK(optimized.out != unoptimized.out);
}

TEST_CASE("cli: compile --emit=ptx for the spec's target or --arch", "[cli]") {
  std::string spec = specPath("unified_attention_decode.yaml");
  // The spec says target: sm_90a.
  CliResult ptx = runCli({"compile", spec, "--variant=" + kBf16Decode, "--emit=ptx"});
  INFO(ptx.err);
  REQUIRE(ptx.exitCode == 0);
  CHECK(ptx.out.find("\n.target sm_90a") != std::string::npos);
  CHECK(ptx.out.find(".entry " + kBf16Decode + "(") != std::string::npos);
  CHECK(ptx.out.find(".maxntid 128, 1, 1") != std::string::npos);  // num_warps 4
  CHECK(ptx.err.empty());

  TempDir dir;
  fs::path file = dir.path() / "kernels.ptx";
  CliResult sm80 = runCli({"compile", spec, "--emit=ptx", "--arch=sm_80", "-o", file.string()});
  INFO(sm80.err);
  REQUIRE(sm80.exitCode == 0);
  CHECK(sm80.out.empty());
  std::string text = readFile(file);
  CHECK(countOccurrences(text, "\n.target sm_80\n") == 2);
  CHECK(text.find("sm_90a") == std::string::npos);
  CHECK(countOccurrences(text, ".entry ") == 2);
  CHECK(startsWith(text, "// ---- " + kBf16Decode + " ----\n"));
}

TEST_CASE("cli: an op codegen cannot lower is an error at the op, exit 2", "[cli]") {
  // i4 elements are read as bytes and unpacked; an i4 pointer has no lowering.
  TempDir dir;
  fs::path tir = dir.path() / "i4.tir";
  writeFile(tir,
            "kernel @i4_load(%x: ptr<global, i4>, %out: ptr<global, i8>) attributes {num_warps = 4} {\n"
            "  %offs = arange {start = 0, end = 128} : tile<128xi32>\n"
            "  %xp = splat %x : tile<128xptr<global, i4>>\n"
            "  %xps = addptr %xp, %offs : tile<128xptr<global, i4>>\n"
            "  %xv = load %xps : tile<128xi4>\n"
            "  %wide = cast %xv : tile<128xi8>\n"
            "  %op = splat %out : tile<128xptr<global, i8>>\n"
            "  %ops = addptr %op, %offs : tile<128xptr<global, i8>>\n"
            "  store %ops, %wide\n"
            "  return\n"
            "}\n");
  CliResult refused = runCli({"compile", tir.string(), "--emit=ptx", "--arch=sm_80"});
  CHECK(refused.exitCode == 2);
  CHECK(refused.out.empty());
  CHECK(startsWith(refused.err, tir.string() + ":4:"));
  CHECK(refused.err.find("error: cannot compile kernel 'i4_load' for sm_80: ") != std::string::npos);
  CHECK(refused.err.find("unsupported: 'addptr' on i4 pointers") != std::string::npos);
}

TEST_CASE("cli: f32 to fp8 compiles for every target, with the fp8 cvt from sm_89", "[cli]") {
  TempDir dir;
  fs::path tir = dir.path() / "fp8.tir";
  writeFile(tir,
            "kernel @f32_to_fp8(%x: ptr<global, f32>, %out: ptr<global, f8e4m3>) attributes {num_warps = 4} {\n"
            "  %offs = arange {start = 0, end = 128} : tile<128xi32>\n"
            "  %xp = splat %x : tile<128xptr<global, f32>>\n"
            "  %xps = addptr %xp, %offs : tile<128xptr<global, f32>>\n"
            "  %xv = load %xps : tile<128xf32>\n"
            "  %narrow = cast %xv : tile<128xf8e4m3>\n"
            "  %op = splat %out : tile<128xptr<global, f8e4m3>>\n"
            "  %ops = addptr %op, %offs : tile<128xptr<global, f8e4m3>>\n"
            "  store %ops, %narrow\n"
            "  return\n"
            "}\n");
  CliResult ampere = runCli({"compile", tir.string(), "--emit=ptx", "--arch=sm_80"});
  INFO(ampere.err);
  CHECK(ampere.exitCode == 0);
  CHECK(ampere.out.find(".target sm_80") != std::string::npos);
  CHECK(ampere.out.find("e4m3") == std::string::npos);

  CliResult ada = runCli({"compile", tir.string(), "--emit=ptx", "--arch=sm_89"});
  INFO(ada.err);
  CHECK(ada.exitCode == 0);
  CHECK(ada.out.find(".target sm_89") != std::string::npos);
  CHECK(ada.out.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos);
}

TEST_CASE("cli: --print-after and --print-after-all print the IR after passes to stderr", "[cli]") {
  std::string spec = specPath("unified_attention_decode.yaml");
  CliResult one = runCli({"compile", spec, "--variant=" + kBf16Decode, "--emit=ptx", "--print-after=assign-layouts"});
  INFO(one.err.substr(0, 2000));
  REQUIRE(one.exitCode == 0);
  CHECK(startsWith(one.err, "// -----// IR after assign-layouts //----- //\n"));
  CHECK(countOccurrences(one.err, "// -----// IR after ") == 1);
  CHECK(one.err.find("kernel @" + kBf16Decode + "(") != std::string::npos);
  CHECK(one.err.find("#blocked") != std::string::npos);
  CHECK(one.out.find(".entry " + kBf16Decode) != std::string::npos);  // stdout keeps the stage's output

  std::vector<std::string> passes = pipelinePassesFromError();
  REQUIRE(passes.size() >= 2);
  CHECK(std::find(passes.begin(), passes.end(), "assign-layouts") != passes.end());
  CliResult all = runCli({"compile", spec, "--variant=" + kBf16Decode, "--emit=tir-opt", "--print-after-all"});
  REQUIRE(all.exitCode == 0);
  CHECK(countOccurrences(all.err, "// -----// IR after ") == passes.size());
  size_t at = 0;
  for (const std::string& pass : passes) {
    size_t found = all.err.find("// -----// IR after " + pass + " //----- //\n", at);
    CHECK(found != std::string::npos);
    if (found != std::string::npos) at = found + 1;
  }
  // The dump after the last pass is the optimized IR itself.
  std::string lastHeader = "// -----// IR after " + passes.back() + " //----- //\n";
  CHECK(all.err.substr(all.err.find(lastHeader) + lastHeader.size()) == all.out);

  CliResult unknown = runCli({"compile", spec, "--print-after=assign-layout"});
  CHECK(unknown.exitCode == 2);
  CHECK(startsWith(unknown.err,
                   "attnjit compile: error: unknown pass 'assign-layout' for --print-after (tile-IR passes: "
                   "expand-tensor-loads, cse, "));
  CHECK(unknown.err.find("; codegen stages: plan-async-copies, ") != std::string::npos);
  CHECK(unknown.err.find("did you mean 'assign-layouts'?") != std::string::npos);
  CHECK(unknown.out.empty());
}

TEST_CASE("cli: --time-passes prints a timing table per kernel that adds up", "[cli]") {
  CliResult r = runCli({"compile", specPath("unified_attention_decode.yaml"), "--emit=ptx", "--time-passes"});
  INFO(r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(r.err.find("===-- pass timings: " + kBf16Decode + " (sm_90a) --===\n") != std::string::npos);
  CHECK(r.err.find("===-- pass timings: " + kF16Decode + " (sm_90a) --===\n") != std::string::npos);
  CHECK(countOccurrences(r.out, ".entry ") == 2);

  std::vector<std::string> passes = pipelinePassesFromError();
  REQUIRE(!passes.empty());
  // The first table: rows "  <what>  <ms> ms" up to "total".
  std::map<std::string, double> ms;
  std::vector<std::string> order;
  for (const std::string& line : splitLines(r.err)) {
    if (startsWith(line, "===-- ") && !order.empty()) break;
    std::vector<std::string> words = splitWords(line);
    if (words.size() < 3 || words.back() != "ms") continue;
    std::string what;
    for (size_t i = 0; i + 2 < words.size(); ++i) what += (what.empty() ? "" : " ") + words[i];
    ms[what] = std::stod(words[words.size() - 2]);
    order.push_back(what);
  }
  // The decode kernel runs every codegen stage (it has cp.async slots); with no
  // shared-memory retry each runs once.
  std::vector<std::string> stages = pipelineSteps("codegen");
  REQUIRE(stages.size() >= 8);
  std::vector<std::string> expected = passes;
  expected.push_back("passes (with verification)");
  expected.insert(expected.end(), stages.begin(), stages.end());
  expected.insert(expected.end(), {"codegen (with verification)", "total"});
  CHECK(order == expected);
  double passSum = 0;
  for (const std::string& pass : passes) passSum += ms[pass];
  CHECK(ms["passes (with verification)"] >= passSum - 0.01);
  double stageSum = 0;
  for (const std::string& stage : stages) stageSum += ms[stage];
  CHECK(ms["lower"] > 0);
  CHECK(ms["llvm-pipeline"] > 0);
  CHECK(ms["emit-ptx"] > 0);
  CHECK(ms["codegen (with verification)"] >= stageSum - 0.01);
  CHECK(ms["total"] == Approx(ms["passes (with verification)"] + ms["codegen (with verification)"]).margin(0.005));
}

TEST_CASE("cli: --print-after shows codegen's plans, the shared-memory fit and the LLVM IR", "[cli]") {
  std::string spec = specPath("unified_attention_decode.yaml");
  CliResult plan =
      runCli({"compile", spec, "--variant=" + kBf16Decode, "--emit=ptx", "--print-after=plan-async-copies"});
  INFO(plan.err.substr(0, 2000));
  REQUIRE(plan.exitCode == 0);
  CHECK(startsWith(plan.err, "// -----// IR after plan-async-copies //----- //\n"));
  CHECK(plan.err.find(", 2 slots of ") != std::string::npos);
  CHECK(plan.err.find("-byte copies") != std::string::npos);
  CHECK(plan.err.find("cp.async buffers: ") != std::string::npos);

  CliResult fit =
      runCli({"compile", spec, "--variant=" + kBf16Decode, "--emit=ptx", "--print-after=fit-shared-memory"});
  REQUIRE(fit.exitCode == 0);
  CHECK(fit.err.find("cp.async slots and shared operands: ") != std::string::npos);
  CHECK(fit.err.find(", fits\n") != std::string::npos);

  CliResult lowered = runCli({"compile", spec, "--variant=" + kBf16Decode, "--emit=ptx", "--print-after=lower"});
  REQUIRE(lowered.exitCode == 0);
  CHECK(startsWith(lowered.err, "// -----// IR after lower //----- //\n"));
  CHECK(lowered.err.find("define ptx_kernel void @" + kBf16Decode) != std::string::npos);
  CHECK(lowered.err.find("llvm.nvvm.mma.m16n8k16") != std::string::npos);

  // Every step that ran prints once, in pipeline order; the PTX comes last.
  CliResult all = runCli({"compile", spec, "--variant=" + kBf16Decode, "--emit=ptx", "--print-after-all"});
  REQUIRE(all.exitCode == 0);
  std::vector<std::string> steps = pipelineSteps("tile-IR");
  std::vector<std::string> stages = pipelineSteps("codegen");
  steps.insert(steps.end(), stages.begin(), stages.end());
  CHECK(countOccurrences(all.err, "// -----// IR after ") == steps.size());
  size_t at = 0;
  for (const std::string& step : steps) {
    size_t found = all.err.find("// -----// IR after " + step + " //----- //\n", at);
    CHECK(found != std::string::npos);
    if (found != std::string::npos) at = found + 1;
  }
  const std::string lastHeader = "// -----// IR after emit-ptx //----- //\n";
  CHECK(all.err.substr(all.err.find(lastHeader) + lastHeader.size()) == all.out);
}

TEST_CASE("cli: --emit=cubin and --emit=sass without the CUDA toolkit say what is missing", "[cli]") {
  TempDir empty;  // a PATH with no ptxas, nvdisasm or cuobjdump
  std::string spec = specPath("unified_attention_decode.yaml");
  std::string path = "PATH=" + empty.path().string();
  CliResult cubin = runCli({"compile", spec, "--emit=cubin"}, {path});
  CHECK(cubin.exitCode == 2);
  CHECK(cubin.err == "attnjit compile: error: --emit=cubin needs ptxas from the CUDA toolkit on the PATH\n");
  CliResult sass = runCli({"compile", spec, "--emit=sass"}, {path});
  CHECK(sass.exitCode == 2);
  CHECK(sass.err == "attnjit compile: error: --emit=sass needs ptxas from the CUDA toolkit on the PATH\n");

  // Without ptxas, inspect still reports everything but registers.
  CliResult inspect = runCli({"inspect", spec, "--variant=" + kBf16Decode}, {path});
  REQUIRE(inspect.exitCode == 0);
  CHECK(inspect.out.find("regs") == std::string::npos);
  CHECK(inspect.err.find("no ptxas on the PATH") != std::string::npos);
  CHECK(inspectRow(inspect.out, kBf16Decode).count("mma") == 1);
}

TEST_CASE("cli: --emit=cubin writes ELF files from ptxas", "[cli]") {
  if (!onPath("ptxas")) {
    WARN("ptxas is not on the PATH: --emit=cubin is not tested");
    return;
  }
  std::string spec = specPath("unified_attention_decode.yaml");
  TempDir dir;
  fs::path one = dir.path() / "one.cubin";
  CliResult single = runCli({"compile", spec, "--variant=" + kBf16Decode, "--emit=cubin", "-o", one.string()});
  INFO(single.err);
  REQUIRE(single.exitCode == 0);
  std::string elf = readFile(one);
  REQUIRE(elf.size() > 64);
  CHECK(elf.substr(0, 4) == "\x7f" "ELF");
  CHECK(elf.find(kBf16Decode) != std::string::npos);  // the kernel's symbol
  CHECK(single.out == "wrote " + one.string() + " (" + std::to_string(elf.size()) + " bytes)\n");

  // Several kernels: one file each in the -o directory, created when missing.
  fs::path out = dir.path() / "cubins";
  CliResult several = runCli({"compile", spec, "--emit=cubin", "--arch=sm_80", "-o", out.string()});
  INFO(several.err);
  REQUIRE(several.exitCode == 0);
  for (const std::string& kernel : {kBf16Decode, kF16Decode}) {
    std::string bytes = readFile(out / (kernel + ".cubin"));
    CHECK(bytes.substr(0, 4) == "\x7f" "ELF");
    CHECK(bytes.find(kernel) != std::string::npos);
  }
  CHECK(countOccurrences(several.out, "wrote ") == 2);

  CliResult intoFile = runCli({"compile", spec, "--emit=cubin", "-o", one.string()});
  CHECK(intoFile.exitCode == 2);
  CHECK(intoFile.err.find("is a file, but 2 kernels need a directory") != std::string::npos);

  CliResult timed = runCli({"compile", spec, "--variant=" + kBf16Decode, "--emit=cubin", "-o", one.string(),
                            "--time-passes"});
  CHECK(timed.exitCode == 0);
  CHECK(timed.err.find("\n  ptxas ") != std::string::npos);
}

TEST_CASE("cli: --emit=sass disassembles the cubin", "[cli]") {
  if (!onPath("ptxas") || (!onPath("nvdisasm") && !onPath("cuobjdump"))) {
    WARN("ptxas and nvdisasm or cuobjdump are not all on the PATH: --emit=sass is not tested");
    return;
  }
  CliResult r = runCli({"compile", specPath("unified_attention_decode.yaml"), "--variant=" + kBf16Decode,
                        "--emit=sass", "--arch=sm_90a"});
  INFO(r.err);
  REQUIRE(r.exitCode == 0);
  // bf16 mma.sync becomes HMMA instructions on the tensor cores.
  CHECK(r.out.find("HMMA") != std::string::npos);
  CHECK(r.out.find("EXIT") != std::string::npos);
}

TEST_CASE("cli: inspect lists each kernel with its resources and PTX instruction mix", "[cli]") {
  std::string spec = specPath("unified_attention_decode.yaml");
  CliResult r = runCli({"inspect", spec});
  INFO(r.out << r.err);
  REQUIRE(r.exitCode == 0);
  CHECK(startsWith(r.out, "target sm_90a,"));
  for (const std::string& kernel : {kBf16Decode, kF16Decode}) {
    std::map<std::string, std::string> row = inspectRow(r.out, kernel);
    REQUIRE(!row.empty());
    CHECK(row["threads"] == "128");
    CHECK(std::stoi(row["smem"]) > 0);
    CHECK(std::stoi(row["mma"]) > 0);
    CHECK(std::stoi(row["ld.global"]) >= std::stoi(row["ld.g.vec"]));

    // The counts match the PTX that `compile --emit=ptx` prints, counted here by opcode.
    CliResult ptx = runCli({"compile", spec, "--variant=" + kernel, "--emit=ptx"});
    REQUIRE(ptx.exitCode == 0);
    std::map<std::string, int> counted;
    for (const std::string& line : splitLines(ptx.out)) {
      std::vector<std::string> words = splitWords(line);
      if (words.empty()) continue;
      std::string op = words[0][0] == '@' && words.size() > 1 ? words[1] : words[0];
      for (const char* prefix : {"mma.sync.", "ldmatrix.", "shfl.", "ex2.", "st.global.", "ld.shared.", "st.shared."}) {
        if (startsWith(op, prefix)) ++counted[prefix];
      }
      if (startsWith(op, "ld.global.")) {
        ++counted["ld.global"];
        if (op.find(".v2.") != std::string::npos || op.find(".v4.") != std::string::npos) ++counted["ld.g.vec"];
      }
      if (op == "bar.sync" || op == "barrier.sync" || startsWith(op, "barrier.sync.")) ++counted["bar.sync"];
    }
    CHECK(row["mma"] == std::to_string(counted["mma.sync."]));
    CHECK(row["ldmatrix"] == std::to_string(counted["ldmatrix."]));
    CHECK(row["shfl"] == std::to_string(counted["shfl."]));
    CHECK(row["ex2"] == std::to_string(counted["ex2."]));
    CHECK(row["bar.sync"] == std::to_string(counted["bar.sync"]));
    CHECK(row["ld.global"] == std::to_string(counted["ld.global"]));
    CHECK(row["ld.g.vec"] == std::to_string(counted["ld.g.vec"]));
    CHECK(row["st.global"] == std::to_string(counted["st.global."]));
    CHECK(row["ld.shared"] == std::to_string(counted["ld.shared."]));
    CHECK(row["st.shared"] == std::to_string(counted["st.shared."]));
    CHECK(counted["ex2."] > 0);  // softmax

    if (onPath("ptxas")) {
      CHECK(std::stoi(row["regs"]) > 0);
      CHECK(std::stoi(row["regs"]) <= 255);
      CHECK(row.count("spill.st") == 1);
      CHECK(row.count("stack") == 1);
    } else {
      WARN("ptxas is not on the PATH: the register columns of inspect are not tested");
    }
  }

  // The op API's prefill tiling on sm_90a runs its dots on warpgroup MMAs, counted apart.
  CliResult prefill = runCli({"inspect", kSourceDir + "/bench/prefill.yaml", "--arch=sm_90a"});
  INFO(prefill.err);
  REQUIRE(prefill.exitCode == 0);
  int wgmmaKernels = 0;
  for (const std::string& line : splitLines(prefill.out)) {
    std::vector<std::string> words = splitWords(line);
    if (words.size() < 6 || words[0] == "kernel" || words[0] == "target") continue;
    std::map<std::string, std::string> prefillRow = inspectRow(prefill.out, words[0]);
    REQUIRE(!prefillRow.empty());
    if (std::stoi(prefillRow["wgmma"]) == 0) continue;
    ++wgmmaKernels;
    CliResult ptx = runCli({"compile", kSourceDir + "/bench/prefill.yaml", "--variant=" + words[0],
                            "--emit=ptx", "--arch=sm_90a"});
    REQUIRE(ptx.exitCode == 0);
    int counted = 0;
    for (size_t at = ptx.out.find("wgmma.mma_async"); at != std::string::npos;
         at = ptx.out.find("wgmma.mma_async", at + 1))
      ++counted;
    CHECK(prefillRow["wgmma"] == std::to_string(counted));
  }
  CHECK(wgmmaKernels > 0);

  // Warp roles: producer warps (warp_specialize) beside the 8 compute warps,
  // each role's setmaxnreg, the slots of each copy buffer, ping-pong; the
  // mbarrier operations of their hand-over counted apart from the copies.
  CliResult roles = runCli({"inspect", kSourceDir + "/bench/prefill_warp_specialized.yaml", "--arch=sm_90a"});
  INFO(roles.err);
  REQUIRE(roles.exitCode == 0);
  const std::string plain = "unified_attention_bf16_h32kv8_d128_bs16_causal_t64_w8_m128";
  std::map<std::string, std::string> plainRow = inspectRow(roles.out, plain);
  std::map<std::string, std::string> producerRow = inspectRow(roles.out, plain + "_ws");
  REQUIRE(!plainRow.empty());
  REQUIRE(!producerRow.empty());
  CHECK(plainRow["warps"] == "8");
  CHECK(plainRow["stages"] == "2");
  CHECK(plainRow["setmaxnreg"] == "-");
  CHECK(plainRow["pingpong"] == "no");
  CHECK(plainRow["mbarrier"] == "0");
  CHECK(producerRow["threads"] == "384");
  CHECK(producerRow["warps"] == "8+4p");
  CHECK(producerRow["stages"] == "2");
  CHECK(producerRow["pingpong"] == "no");
  const std::string& registers = producerRow["setmaxnreg"];
  REQUIRE(registers.find('/') != std::string::npos);
  const int computeRegisters = std::stoi(registers.substr(0, registers.find('/')));
  const int producerRegisters = std::stoi(registers.substr(registers.find('/') + 1));
  CHECK(computeRegisters > producerRegisters);
  // setmaxnreg moves only the launch's registers (384 threads × 168): an
  // increase beyond what the decreases released never completes.
  CHECK(computeRegisters * 256 + producerRegisters * 128 <= 384 * 168);
  CliResult producerPtx = runCli({"compile", kSourceDir + "/bench/prefill_warp_specialized.yaml",
                                  "--variant=" + plain + "_ws", "--emit=ptx", "--arch=sm_90a"});
  REQUIRE(producerPtx.exitCode == 0);
  int mbarrierOps = 0, copies = 0;
  for (const std::string& line : splitLines(producerPtx.out)) {
    std::vector<std::string> words = splitWords(line);
    if (words.empty()) continue;
    const std::string& op = words[0][0] == '@' && words.size() > 1 ? words[1] : words[0];
    if (startsWith(op, "mbarrier.") || startsWith(op, "cp.async.mbarrier.")) ++mbarrierOps;
    else if (startsWith(op, "cp.async.cg.") || startsWith(op, "cp.async.ca.")) ++copies;
  }
  CHECK(mbarrierOps > 0);
  CHECK(producerRow["mbarrier"] == std::to_string(mbarrierOps));
  CHECK(producerRow["cp.async"] == std::to_string(copies));
  CliResult pingPong = runCli({"inspect", kSourceDir + "/bench/prefill_warp_specialized_stages.yaml", "--arch=sm_90a"});
  INFO(pingPong.err);
  REQUIRE(pingPong.exitCode == 0);
  std::map<std::string, std::string> pingPongRow = inspectRow(pingPong.out, plain + "_s3_wspp");
  REQUIRE(!pingPongRow.empty());
  CHECK(pingPongRow["stages"] == "3");
  CHECK(pingPongRow["pingpong"] == "yes");

  // TMA: the unmasked loop's K and V tiles as box copies (4 loads × 4 blocks ×
  // 2 column blocks), counted apart from the masked loop's cp.async copies.
  CliResult tma = runCli({"inspect", kSourceDir + "/bench/prefill_tma.yaml", "--arch=sm_90a"});
  INFO(tma.err);
  REQUIRE(tma.exitCode == 0);
  std::map<std::string, std::string> cpAsyncRow = inspectRow(tma.out, plain + "_ws");
  std::map<std::string, std::string> tmaRow = inspectRow(tma.out, plain + "_ws_tma");
  REQUIRE(!tmaRow.empty());
  CHECK(cpAsyncRow["tma"] == "0");
  CHECK(tmaRow["tma"] == "32");
  CHECK(std::stoi(tmaRow["cp.async"]) < std::stoi(cpAsyncRow["cp.async"]));

  // Where the shared memory goes: MLA's 64 heads x 64 keys keep two stages of
  // the latent tile in cp.async slots and q in shared memory; fp8 latents
  // (half the slot bytes) add the cast chunks' buffers, which wgmma reads. The
  // parts add up to the total.
  CliResult mla = runCli({"inspect", kSourceDir + "/bench/mla_tilings.yaml", "--arch=sm_90a"});
  INFO(mla.err);
  REQUIRE(mla.exitCode == 0);
  for (const char* format : {"", "_fp8_e4m3"}) {
    const std::string kernel = std::string("mla_decode_bf16_h128_l512_r64_bs16") + format + "_bh64_t64_w8_qs";
    std::map<std::string, std::string> mlaRow = inspectRow(mla.out, kernel);
    REQUIRE(!mlaRow.empty());
    const bool fp8 = *format != '\0';
    const int latentTile = 64 * 576;  // keys x latent width
    CHECK(std::stoi(mlaRow["slots"]) == 2 * latentTile * (fp8 ? 1 : 2));
    CHECK(std::stoi(mlaRow["operands"]) == 64 * 576 * 2);  // q: 64 heads, bf16
    CHECK(std::stoi(mlaRow["convs"]) == (fp8 ? latentTile * 2 : 0));
    CHECK(std::stoi(mlaRow["slots"]) + std::stoi(mlaRow["operands"]) + std::stoi(mlaRow["convs"]) +
              std::stoi(mlaRow["scratch"]) ==
          std::stoi(mlaRow["smem"]));
  }

  // f32 dots run on the TF32 tensor cores (mma.m16n8k8, two per k16 step) by
  // default; fp32_precision: ieee keeps them exact, as FMAs.
  CliResult f32 = runCli({"inspect", specPath("unified_attention_f32.yaml"), "--arch=sm_80",
                          "--variant=unified_attention_f32_h4kv4_d80_bs32_causal"});
  INFO(f32.err);
  REQUIRE(f32.exitCode == 0);
  CHECK(startsWith(f32.out, "target sm_80,"));
  std::map<std::string, std::string> row = inspectRow(f32.out, "unified_attention_f32_h4kv4_d80_bs32_causal");
  REQUIRE(!row.empty());
  CliResult f32Ptx = runCli({"compile", specPath("unified_attention_f32.yaml"), "--emit=ptx", "--arch=sm_80",
                             "--variant=unified_attention_f32_h4kv4_d80_bs32_causal"});
  REQUIRE(f32Ptx.exitCode == 0);
  int tf32Mmas = 0;
  for (size_t at = f32Ptx.out.find("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"); at != std::string::npos;
       at = f32Ptx.out.find("mma.sync.aligned.m16n8k8", at + 1))
    ++tf32Mmas;
  CHECK(tf32Mmas > 0);
  CHECK(row["mma"] == std::to_string(tf32Mmas));
  CHECK(row["wgmma"] == "0");
  CHECK(inspectRow(f32.out, "unified_attention_f32_h4kv4_d80_bs32_noncausal").empty());

  TempDir dir;
  const fs::path exactSpec = dir.path() / "exact.yaml";
  std::string exactText = readFile(specPath("unified_attention_f32.yaml"));
  REQUIRE(exactText.find("params:\n") != std::string::npos);
  exactText.replace(exactText.find("params:\n"), 8, "params:\n  fp32_precision: ieee\n");
  writeFile(exactSpec, exactText);
  CliResult exact = runCli({"inspect", exactSpec.string(), "--arch=sm_80"});
  INFO(exact.err);
  REQUIRE(exact.exitCode == 0);
  std::map<std::string, std::string> exactRow = inspectRow(exact.out, "unified_attention_f32_h4kv4_d80_bs32_causal_ieee");
  REQUIRE(!exactRow.empty());
  CHECK(exactRow["mma"] == "0");
  CHECK(exactRow["wgmma"] == "0");
}

TEST_CASE("cli: sizes past the documented limits are located errors, never a crash or a runaway", "[cli][limits]") {
  TempDir dir;
  auto spec = [&](const std::string& name, const std::string& params) {
    const fs::path path = dir.path() / name;
    writeFile(path, "family: unified_attention\nparams:\n  dtype: bf16\n" + params +
                        "  head_size: 128\n  block_size: 16\n  causal: true\n");
    return path.string();
  };
  // num_query_heads whose next power of two overflows, and ratios that would make a
  // query tile of 2^30 rows: refused by the spec loader, for every command.
  const std::string overflowing = spec("heads.yaml", "  num_query_heads: 2147483647\n  num_kv_heads: 1\n");
  const std::string wideRatio = spec("ratio.yaml", "  num_query_heads: 512\n  num_kv_heads: 1\n");
  for (const char* command : {"list", "plan", "compile", "inspect"}) {
    CliResult r = runCli({command, overflowing});
    INFO(command << ": " << r.err);
    CHECK(r.exitedNormally);
    CHECK(r.exitCode == 2);
    CHECK(startsWith(r.err, overflowing + ":4:20: error: "));
    CHECK(r.err.find("num_query_heads (2147483647) must be between 1 and 1024") != std::string::npos);
    CliResult ratio = runCli({command, wideRatio});
    CHECK(ratio.exitCode == 2);
    CHECK(ratio.err.find("num_query_heads / num_kv_heads (512) must be at most 256") != std::string::npos);
  }

  // .tir programs the grammar allows but no GPU should run.
  const std::string vectorAdd = readFile(kSourceDir + "/examples/tir/vector_add.tir");
  const std::string controlFlow = readFile(kSourceDir + "/tests/tir/control_flow.tir");
  auto replaced = [](std::string text, const std::string& from, const std::string& to) {
    for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
      text.replace(at, from.size(), to);
    return text;
  };
  struct TirCase {
    std::string name, text, message;
  };
  const std::vector<TirCase> tirCases = {
      {"digit_name.tir", replaced(vectorAdd, "@vector_add", "@1abc"), ":3:1: error: kernel name '1abc' is not an identifier"},
      {"dotted_name.tir", replaced(vectorAdd, "@vector_add", "@a.b"), "kernel name 'a.b' is not an identifier"},
      {"step_zero.tir", replaced(controlFlow, "step %c16", "step %c0"), "'for': step must be positive, got the constant 0"},
      {"huge_tile.tir", replaced(vectorAdd, "128", "16777216"), "a tile holds at most 1048576 elements"},
  };
  for (const TirCase& c : tirCases) {
    const fs::path path = dir.path() / c.name;
    writeFile(path, c.text);
    CliResult r = runCli({"compile", path.string(), "--emit=ptx"});
    INFO(c.name << ": " << r.err);
    CHECK(r.exitCode == 2);
    CHECK(startsWith(r.err, path.string() + ":"));
    CHECK(r.err.find(c.message) != std::string::npos);
    CHECK(r.out.empty());
  }

  // An empty --arch is an error, not the default target.
  CliResult emptyArch = runCli({"compile", specPath("unified_attention_f32.yaml"), "--arch="});
  CHECK(emptyArch.exitCode == 2);
  CHECK(emptyArch.err.find("--arch= needs a target name") != std::string::npos);

  // Errors quote long inputs in part: a 900 KB family name, a 200 KB shape list.
  const fs::path longFamily = dir.path() / "long_family.yaml";
  writeFile(longFamily, "family: " + std::string(900000, 'x') + "\n");
  CliResult family = runCli({"list", longFamily.string()});
  CHECK(family.exitCode == 2);
  CHECK(family.err.find("unknown family 'xxxx") != std::string::npos);
  CHECK(family.err.find("(900000 bytes)") != std::string::npos);
  CHECK(family.err.size() < 1000);
  std::string longList = "query_lens=";
  for (int i = 0; i < 50000; ++i) longList += std::to_string(i % 7 + 1) + ",";
  longList += "-1";
  CliResult shape = runCli({"run", specPath("unified_attention_f32.yaml"), "--interpret", "--shape", longList});
  CHECK(shape.exitCode == 2);
  CHECK(shape.err.size() < 1000);

  // Batches beyond the host's memory or the interpreter's work budget are refused up front.
  const std::string f32 = specPath("unified_attention_f32.yaml");
  CliResult huge = runCli({"run", f32, "--interpret", "--shape", "query_lens=1x4", "--shape",
                           "context_lens=4194300x4"},
                          {"ATTNJIT_HOST_MEMORY_BUDGET=8G"});
  INFO(huge.err);
  CHECK(huge.exitCode == 2);
  CHECK(huge.err.find("query_lens=1x4 context_lens=4194300x4") != std::string::npos);
  CHECK(huge.err.find("of host memory for its inputs, outputs and float64 reference, over the budget of 8 GiB") !=
        std::string::npos);
  CliResult tinyBudget = runCli({"run", f32, "--interpret"}, {"ATTNJIT_HOST_MEMORY_BUDGET=1K"});
  CHECK(tinyBudget.exitCode == 2);
  CHECK(tinyBudget.err.find("ATTNJIT_HOST_MEMORY_BUDGET") != std::string::npos);
  CliResult badBudget = runCli({"run", f32, "--interpret"}, {"ATTNJIT_HOST_MEMORY_BUDGET=lots"});
  CHECK(badBudget.exitCode == 2);
  CHECK(startsWith(badBudget.err, f32 + ":"));
  CHECK(badBudget.err.find("ATTNJIT_HOST_MEMORY_BUDGET='lots': expected a positive number") != std::string::npos);
  CliResult work = runCli({"run", f32, "--interpret"}, {"ATTNJIT_INTERPRETER_WORK_BUDGET=1000"});
  CHECK(work.exitCode == 2);
  CHECK(work.err.find("multiply-adds, over the interpreter's budget of 1e+03") != std::string::npos);
}

TEST_CASE("cli: an override PTX that ptxas rejects is the user's error, at its file", "[cli][limits]") {
  if (!onPath("ptxas")) {
    WARN("ptxas is not on the PATH: override PTX assembly is not tested");
    return;
  }
  TempDir dir;
  const std::string input = kSourceDir + "/examples/tir/vector_add.tir";
  writeFile(dir.path() / "vector_add.ptx", "this is not PTX\n");
  const std::string overrideSetting = "ATTNJIT_OVERRIDE_DIR=" + dir.path().string();
  CliResult ptx = runCli({"compile", input, "--emit=ptx"}, {overrideSetting});
  CHECK(ptx.exitCode == 0);
  CHECK(ptx.out == "this is not PTX\n");
  CHECK(ptx.err.find("attnjit: note: 'vector_add': its PTX comes from the override folder") != std::string::npos);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"compile", input, "--emit=cubin", "-o", (dir.path() / "out.cubin").string()},
        std::vector<std::string>{"inspect", input}}) {
    CliResult r = runCli(args, {overrideSetting});
    INFO(args[0] << ": " << r.err);
    CHECK(r.exitCode == 2);
    CHECK(r.err.find((dir.path() / "vector_add.ptx").string() + ": error: the override PTX of 'vector_add' does not "
                                                                "assemble for") != std::string::npos);
    CHECK(r.err.find("internal error") == std::string::npos);
  }
}

TEST_CASE("cli: run --interpret reports its progress on long kernels", "[cli][limits]") {
  const auto start = std::chrono::steady_clock::now();
  CliResult r = runCli({"run", specPath("unified_attention_prefill.yaml"), "--interpret",
                        "--variant=unified_attention_bf16_h8kv2_d64_bs16_noncausal", "--shape", "query_lens=1280",
                        "--shape", "context_lens=0"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(r.err);
  REQUIRE(r.exitCode == 0);
  const std::string prefix = "attnjit run: interpreting unified_attention_bf16_h8kv2_d64_bs16_noncausal: ";
  const size_t at = r.err.find(prefix);
  if (at == std::string::npos) {
    // Progress starts after a second of interpretation; a machine fast enough to finish
    // sooner prints none (the run as a whole also builds, prepares and checks).
    CHECK(seconds < 5);
    CHECK(r.err.empty());
    WARN("the run took " << seconds << " s and printed no progress");
  } else {
    // The last report is the whole grid, on a line of its own.
    CHECK(r.err.find(" programs (100%)\n", at) != std::string::npos);
    CHECK(r.err.back() == '\n');
    CHECK(r.err.size() < 2000);  // a log gets a line every ten seconds, not one per second
  }
}
