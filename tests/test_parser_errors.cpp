// Malformed .tir input gives one located, readable error, and no input (truncated
// files, random mutations of the repository's .tir files, random bytes, deep
// nesting) crashes or hangs the parser.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ir/Parser.h"
#include "ir/Printer.h"
#include "test_paths.h"

namespace support = attnjit::support;

namespace fs = std::filesystem;
using namespace attnjit::ir;

namespace {

using attnjit::tests::readFile;
using attnjit::tests::repositoryTirFiles;

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

// A kernel with parameters %n: i32 and %p: ptr<global, f32> around `body` (which
// starts on line 2).
std::string kernelWith(const std::string& body) {
  return "kernel @k(%n: i32, %p: ptr<global, f32>) {\n" + body + "  return\n}\n";
}
// The condition %c (line 2) for `if` cases, whose own lines start at line 3.
const std::string kCond = "  %c = cmp %n, %n {pred = eq} : i1\n";

struct ErrorCase {
  std::string input;
  std::string position;  // "line:col"
  std::string message;   // substring of the message
};

std::vector<ErrorCase> errorCases() {
  return {
      {"", "1:1", "expected 'kernel', got end of file"},
      {"kernal @k() {\n  return\n}\n", "1:1", "expected 'kernel', got 'kernal'"},
      {"kernel k() {\n}\n", "1:8", "expected kernel name '@name', got 'k'"},
      {"kernel @k(%n: i32 %m: i32) {\n  return\n}\n", "1:19", "expected ',' or ')' after parameter, got '%m'"},
      {"kernel @k(%n i32) {\n  return\n}\n", "1:14", "expected ':' after parameter name, got 'i32'"},
      {"kernel @k(%n: i33) {\n  return\n}\n", "1:15", "expected type, got 'i33'"},
      {"kernel @k(%n: i32) [\n  return\n}\n", "1:20", "expected '{' to open the kernel body, got '['"},
      {kernelWith("  %a = addd %n, %n : i32\n"), "2:8", "unknown op 'addd'"},
      {kernelWith("  %a = add %n, %q : i32\n"), "2:16", "use of undefined value '%q'"},
      {kernelWith("  %n = add %n, %n : i32\n"), "2:3", "redefinition of value '%n' (first defined at 1:11)"},
      {kernelWith("  %a = add %n, %n : i32\n  %a = add %n, %n : i32\n"), "3:3", "redefinition of value '%a'"},
      {kernelWith("  %a = arange {start = 0, end = 1} : tile<0xi32>\n"), "2:43", "tile extent must be positive"},
      {kernelWith("  %a = arange {start = 0, end = 1} : tile<-4xi32>\n"), "2:43", "tile extent must be positive"},
      {kernelWith("  %a = arange {start = 0, end = 1} : tile<1x1x1x1xi32>\n"), "2:49", "tile rank must be at most 3"},
      {kernelWith("  %a = arange {start = 0, end = 16} : tile<16i32>\n"), "2:46", "expected 'x' after tile extent"},
      {kernelWith("  %a = arange {start = 0, end = 16} : tile<f32>\n"), "2:44", "expected tile extent, got 'f32'"},
      {kernelWith("  %a = constant {value = 0.0} : tile<1.5xf32>\n"), "2:38", "tile extent must be an integer"},
      {kernelWith("  %a = constant {value = 0.0} : tile<65536x65536xf32>\n"), "2:44", "more than 2147483647 elements"},
      {kernelWith("  %a = constant {value = 0.0} : tile<99999999999999999999xf32>\n"), "2:38",
       "does not fit in 64 bits"},
      {kernelWith("  %a = constant {value = 99999999999999999999} : i64\n"), "2:26", "does not fit in 64 bits"},
      {kernelWith("  %a = constant {value = 1e999} : f32\n"), "2:26", "float literal '1e999' is out of range"},
      {kernelWith("  %a = constant {value = -x} : f32\n"), "2:27", "expected 'inf' after '-', got 'x'"},
      {kernelWith("  %a = add %n, %n\n"), "3:3", "expected ':' and the result type of 'add', got 'return'"},
      {kernelWith("  %a, %b = add %n, %n : i32\n"), "2:23", "'add' names 2 result(s) but 1 result type(s) follow"},
      {kernelWith("  program_id {axis = 0} : i32\n"), "2:25", "result types given but no result names"},
      {kernelWith("  %a %b = add %n, %n : i32\n"), "2:6", "expected ',' or '=' after result name, got '%b'"},
      {kernelWith("  %a = constexpr {name = \"BLOCK} : i32\n"), "2:26", "unterminated string"},
      {kernelWith("  %a = constexpr {name = \"a\\nb\"} : i32\n"), "2:26", "invalid escape in string"},
      {kernelWith("  %a = add %n, %n : i32 $\n"), "2:25", "unexpected character '$'"},
      {kernelWith("  %a = add %n, % : i32\n"), "2:16", "expected value name after '%'"},
      {kernelWith("  %a = program_id {axis = 0, axis = 1} : i32\n"), "2:30", "duplicate attribute 'axis'"},
      {kernelWith("  %a = program_id {axis = 0,} : i32\n"), "2:29", "expected attribute name after ','"},
      {kernelWith("  %a = program_id {axis 0} : i32\n"), "2:25", "expected '=' after attribute name, got '0'"},
      {kernelWith("  %a = constant {value = 0.0} : tile<16xf32, #blocky<x=1>>\n"), "2:46", "unknown layout '#blocky'"},
      {kernelWith("  %a = constant {value = 0.0} : tile<16xf32, #blocked<spt=[1], tpw=[32], wpc=[4]>>\n"), "2:81",
       "missing field 'order' in #blocked layout"},
      {kernelWith("  %a = constant {value = 0.0} : tile<16xf32, #mma<version=2, version=3>>\n"), "2:62",
       "duplicate field 'version'"},
      {kernelWith("  %a = constant {value = 0.0} : tile<16xf32, #slice<dim=0, parent=[1]>>\n"), "2:67",
       "expected layout, got '['"},
      {kernelWith("  %a = load %q : f32\n"), "2:13", "use of undefined value '%q'"},
      {kernelWith("  %v = load %p : f32\n  store %p, %v {\n"), "5:1", "expected '=' after attribute name, got '}'"},
      {"kernel @k(%p: ptr<local, f32>) {\n  return\n}\n", "1:19",
       "expected address space 'global' or 'shared', got 'local'"},
      {"kernel @k(%n: i32) {\n  return\n", "3:1", "expected '}' before end of file"},
      {"kernel @k() {\n  return\n}\nkernel @k() {\n  return\n}\n", "4:8", "redefinition of kernel '@k'"},
      {"kernel @a() {\n  return\n\nkernel @b() {\n  return\n}\n", "4:1",
       "expected '}' to close the kernel body before"},
      {"kernel @k() constexprs {A = 1, A = 2} {\n  return\n}\n", "1:32", "duplicate constexpr 'A'"},
      {"kernel @k() constexprs {A = x} {\n  return\n}\n", "1:29", "expected integer or float literal, got 'x'"},
      {kernelWith("  for %i = %n until %n step %n {\n    yield\n  }\n"), "2:15",
       "expected 'to' after the lower bound, got 'until'"},
      {kernelWith("  for %i = %n to %n step %n iter_args(%a = %n) {\n    yield %a\n  }\n"), "2:48",
       "expected '->' and the types of the iter_args, got '{'"},
      {kernelWith("  %r = for %i = %n to %n step %n {\n    yield\n  }\n"), "2:8",
       "'for' names 1 result(s) but has 0 iter_args"},
      {kernelWith("  %r = for %i = %n to %n step %n iter_args(%a = %n) -> (i32, i32) {\n    yield %a\n  }\n"), "2:53",
       "'for' has 1 iter_args but 2 result type(s)"},
      {kernelWith(kCond + "  %r = if %c {\n    yield\n  }\n"), "3:8",
       "'if' names 1 result(s) but has 0 result type(s)"},
      {kernelWith(
           "  for %i = %n to %n step %n {\n    %x = add %i, %i : i32\n    yield\n  }\n  %y = add %x, %x : i32\n"),
       "6:12", "value '%x' (defined at 3:5) is not visible here"},
      {kernelWith(kCond + "  %r = if %c -> (i32) {\n    yield %r\n  } else {\n    yield %n\n  }\n"), "4:11",
       "value '%r' (defined at 3:3) is not visible here"},
      {kernelWith(kCond + "  if %c {\n    yield\n  } else [\n"), "5:10", "expected '{' to open a region, got '['"},
      {"kernel @k(%c: i1) {\n" + repeat("if %c {\n", 100), "66:7", "regions nested deeper than 64 levels"},
      {kernelWith("  %a = constant {value = 0.0} : tile<16xf32, " + repeat("#slice<dim=0, parent=", 40) + "\n"),
       "2:382", "layouts nested deeper than 16"},
  };
}

// Parses then prints the result when parsing succeeded: mutated input that parses
// must print to text that parses back to the same print.
void requireGracefulParse(const std::string& input) {
  auto parsed = parseModule(input, "fuzz.tir");
  if (!parsed.isOk()) {
    REQUIRE(parsed.diagnostic().loc.line >= 1);
    REQUIRE(parsed.diagnostic().loc.col >= 1);
    REQUIRE(!parsed.diagnostic().message.empty());
    return;
  }
  const std::string printed = printModule(*parsed.value());
  auto reparsed = parseModule(printed, "printed.tir");
  INFO(printed);
  REQUIRE(reparsed.isOk());
  REQUIRE(printModule(*reparsed.value()) == printed);
}

// Deterministic pseudo-random mutations (std::mt19937 output is specified by the
// standard; distributions are not, so they are computed by hand).
class Mutator {
 public:
  explicit Mutator(uint32_t seed) : rng_(seed) {}

  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng_() % n); }

  std::string mutate(std::string text) {
    static const char* kFragments[] = {"{", "}", "(", ")", "<", ">", "%", "%x", "@", "#", "-", "->", ",", ":",
                                       "=", "\"", "//", "\n", "tile<", "ptr<", "x", "0", "-1",
                                       "99999999999999999999999", "1e999", "#slice<dim=0, parent=", "if %c {",
                                       "for %i = %n to %n step %n {", "yield", "kernel @k() {", "\r", "\t"};
    const size_t edits = 1 + below(4);
    for (size_t e = 0; e < edits; ++e) {
      const size_t at = below(text.size() + 1);
      switch (below(6)) {
        case 0:  // overwrite one byte
          if (at < text.size()) text[at] = static_cast<char>(below(256));
          break;
        case 1:  // insert one byte
          text.insert(at, 1, static_cast<char>(below(256)));
          break;
        case 2:  // delete a range
          text.erase(at, below(16) + 1);
          break;
        case 3:  // duplicate a range
          if (at < text.size()) text.insert(below(text.size() + 1), text.substr(at, below(64) + 1));
          break;
        case 4:  // insert a syntax fragment
          text.insert(at, kFragments[below(std::size(kFragments))]);
          break;
        case 5:  // swap two bytes
          if (!text.empty()) std::swap(text[below(text.size())], text[below(text.size())]);
          break;
      }
    }
    return text;
  }

 private:
  std::mt19937 rng_;
};

}  // namespace

TEST_CASE("malformed .tir input gives a located, readable error", "[tir]") {
  const std::vector<ErrorCase> cases = errorCases();
  REQUIRE(cases.size() >= 25);
  for (const ErrorCase& c : cases) {
    INFO("input:\n" << c.input);
    auto parsed = parseModule(c.input, "bad.tir");
    REQUIRE_FALSE(parsed.isOk());
    const support::Diagnostic& d = parsed.diagnostic();
    INFO("error: " << d.str());
    CHECK(d.loc.file == "bad.tir");
    CHECK(std::to_string(d.loc.line) + ":" + std::to_string(d.loc.col) == c.position);
    CHECK(d.message.find(c.message) != std::string::npos);
    CHECK(d.str().rfind("bad.tir:" + c.position + ": error: ", 0) == 0);
  }
}

TEST_CASE("parseType reports malformed types at the offending token", "[tir]") {
  struct Case {
    const char* input;
    const char* position;
    const char* message;
  };
  const Case cases[] = {
      {"", "1:1", "expected type, got end of file"},
      {"f32 x", "1:5", "unexpected 'x' after type"},
      {"tile<16xf32", "1:12", "expected ',' or '>' after the tile element type, got end of file"},
      {"tile<16x>", "1:9", "expected tile element type, got '>'"},
      {"tile<16xtile<4xf32>>", "1:9", "expected tile element type, got 'tile'"},
      {"ptr<global f32>", "1:12", "expected ',' after the address space, got 'f32'"},
      {"ptr<global, ptr<global, f32>>", "1:13", "expected pointee scalar type, got 'ptr'"},
      {"tile<4xf32, #blocked<spt=[1], tpw=[32], wpc=[4], order=[0], extra=1>>", "1:61",
       "unknown field 'extra' in #blocked layout"},
      {"tile<4xf32, #shared<vec=8, per_phase=1, max_phase=[8], order=[0]>>", "1:51",
       "expected integer for 'max_phase'"},
      {"tile<4xf32, #blocked<spt=[1,], tpw=[32], wpc=[4], order=[0]>>", "1:29", "expected integer after ','"},
      {"tile<16x8xf32, #mma<version=2, wpc=[1,1], instr=[16,8], thread_major=2>>", "1:70",
       "'thread_major' must be 0 or 1"},
  };
  for (const Case& c : cases) {
    INFO("input: " << c.input);
    auto t = parseType(c.input);
    REQUIRE_FALSE(t.isOk());
    INFO("error: " << t.diagnostic().str());
    CHECK(t.diagnostic().str().rfind(std::string("<type>:") + c.position + ": error: ", 0) == 0);
    CHECK(t.diagnostic().message.find(c.message) != std::string::npos);
  }
}

TEST_CASE("the parser survives truncated, mutated and random input", "[tir]") {
  const std::vector<fs::path> files = repositoryTirFiles();
  REQUIRE(files.size() >= 3);
  size_t inputs = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const std::string text = readFile(files[f]);
    INFO("file: " << files[f].string());
    // Every prefix for small files; about 1500 evenly spaced prefixes for large ones.
    const size_t step = std::max<size_t>(1, text.size() / 1500);
    for (size_t length = 0; length <= text.size(); length += step) {
      INFO("prefix length " << length);
      requireGracefulParse(text.substr(0, length));
      ++inputs;
    }
    Mutator mutator(0x7157u + static_cast<uint32_t>(f));
    for (int i = 0; i < 300; ++i) {
      const std::string mutated = mutator.mutate(text);
      INFO("mutation " << i);
      requireGracefulParse(mutated);
      ++inputs;
    }
  }
  Mutator bytes(42);
  for (int i = 0; i < 200; ++i) {
    std::string random(bytes.below(300), '\0');
    for (char& c : random) c = static_cast<char>(bytes.below(256));
    requireGracefulParse(random);
    requireGracefulParse("kernel @k(%c: i1) {\n" + random);
    inputs += 2;
  }
  // Pathological nesting and sizes.
  requireGracefulParse("kernel @k(%c: i1) {\n" + repeat("if %c {\n", 100000));
  requireGracefulParse("kernel @k() {\n  %a = constant {value = 0.0} : tile<1xf32, " +
                       repeat("#dot_op<idx=0, k_width=1, parent=", 100000));
  requireGracefulParse(repeat("{", 100000));
  requireGracefulParse("kernel @k() {\n  %a = constant {value = " + repeat("9", 100000) + "} : i32\n");
  requireGracefulParse("kernel @k() {\n  %a = constant {value = 0." + repeat("0", 100000) + "1} : f32\n  return\n}\n");
  requireGracefulParse(std::string("kernel @k() {\0\n  return\n}\n", 25));
  WARN("parsed " << inputs << " truncated, mutated or random inputs");
}
