// Elementwise lowering checked on the PTX. Every transcendental op compiles to
// PTX for every target (NVPTX has no libcall for llvm.log2: the lowering must
// choose an instruction itself), in f32 and in the 16-bit types, and ptxas
// accepts the result. Casts from fp8 and int8 to the 16-bit floats convert two
// registers per instruction.
#include <catch2/catch.hpp>

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "compiler/driver/CompileDriver.h"
#include "ir/Parser.h"
#include "test_tools.h"

using namespace attnjit;

namespace {

std::string unaryKernel(const std::string& op, const std::string& type) {
  return "kernel @" + op + "_" + type + "(%x: ptr<global, " + type + ">, %out: ptr<global, " + type +
         ">) attributes {num_warps = 1} {\n"
         "  %offs = arange {start = 0, end = 32} : tile<32xi32>\n"
         "  %xp = splat %x : tile<32xptr<global, " + type + ">>\n"
         "  %xs = addptr %xp, %offs : tile<32xptr<global, " + type + ">>\n"
         "  %v = load %xs : tile<32x" + type + ">\n"
         "  %r = " + op + " %v : tile<32x" + type + ">\n"
         "  %op = splat %out : tile<32xptr<global, " + type + ">>\n"
         "  %os = addptr %op, %offs : tile<32xptr<global, " + type + ">>\n"
         "  store %os, %r\n"
         "  return\n"
         "}\n";
}

// A 16x64 tile loaded in 16-byte vectors (one warp: 32 elements per thread), cast, stored.
std::string castKernel(const std::string& from, const std::string& to) {
  return "kernel @cast_" + from + "_" + to + "(%x: ptr<global, " + from + "> {align = 16}, %out: ptr<global, " + to +
         "> {align = 16}) attributes {num_warps = 1} {\n"
         "  %rows_idx = arange {start = 0, end = 16} : tile<16xi32>\n"
         "  %cols_idx = arange {start = 0, end = 64} : tile<64xi32>\n"
         "  %rows_col = expand_dims %rows_idx {axis = 1} : tile<16x1xi32>\n"
         "  %rows = broadcast %rows_col : tile<16x64xi32>\n"
         "  %cols_row = expand_dims %cols_idx {axis = 0} : tile<1x64xi32>\n"
         "  %cols = broadcast %cols_row : tile<16x64xi32>\n"
         "  %c64 = constant {value = 64} : tile<16x64xi32>\n"
         "  %row_offs = mul %rows, %c64 : tile<16x64xi32>\n"
         "  %offs = add %row_offs, %cols : tile<16x64xi32>\n"
         "  %x_t = splat %x : tile<16x64xptr<global, " + from + ">>\n"
         "  %x_ptrs = addptr %x_t, %offs : tile<16x64xptr<global, " + from + ">>\n"
         "  %v = load %x_ptrs : tile<16x64x" + from + ">\n"
         "  %r = cast %v : tile<16x64x" + to + ">\n"
         "  %o_t = splat %out : tile<16x64xptr<global, " + to + ">>\n"
         "  %o_ptrs = addptr %o_t, %offs : tile<16x64xptr<global, " + to + ">>\n"
         "  store %o_ptrs, %r\n"
         "  return\n"
         "}\n";
}

// The same 16x64 byte tile through unpack_nibbles; the zero points are the row
// index (one register per row) or, with `perElement`, the column index.
std::string nibblesKernel(const std::string& to, int high, int flip, bool perElement) {
  std::string kernel = castKernel("i8", to);
  const std::string cast = "  %r = cast %v : tile<16x64x" + to + ">\n";
  const std::string zeroPoints =
      perElement ? "  %zp = add %cols, %rows : tile<16x64xi32>\n" : "  %zp = add %rows, %rows : tile<16x64xi32>\n";
  const std::string unpack = zeroPoints + "  %r = unpack_nibbles %v, %zp {high = " + std::to_string(high) +
                             ", flip = " + std::to_string(flip) + "} : tile<16x64x" + to + ">\n";
  kernel.replace(kernel.find(cast), cast.size(), unpack);
  return kernel;
}

size_t countOf(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

}  // namespace

TEST_CASE("fp8 and int8 casts to f16 and bf16 convert two registers per instruction", "[codegen][quant]") {
  // 32 elements per thread: 16 pairs, each one conversion instruction (plus, for
  // bf16 from fp8 or int8, one packing cvt), never a per-element cvt.
  const struct {
    const char *from, *to, *target;
    std::vector<std::pair<const char*, size_t>> counts;
  } cases[] = {
      {"f8e4m3", "bf16", "sm_90a", {{"cvt.rn.f16x2.e4m3x2", 16}, {"cvt.rn.bf16x2.f32", 16}}},
      {"f8e5m2", "bf16", "sm_90a", {{"cvt.rn.f16x2.e5m2x2", 16}, {"cvt.rn.bf16x2.f32", 16}}},
      {"f8e4m3", "f16", "sm_90a", {{"cvt.rn.f16x2.e4m3x2", 16}, {"cvt.f32.f16", 0}}},
      {"f8e5m2", "f16", "sm_89", {{"cvt.rn.f16x2.e5m2x2", 16}}},
      // Before sm_89: one prmt per pair, the fields moved, one exact packed multiply.
      {"f8e4m3", "bf16", "sm_80", {{"prmt.b32", 16}, {"fma.rn.bf16x2", 16}, {"e4m3x2", 0}}},
      {"f8e5m2", "bf16", "sm_86", {{"prmt.b32", 16}, {"fma.rn.bf16x2", 16}}},
      {"f8e4m3", "f16", "sm_80", {{"prmt.b32", 16}, {"mul.f16x2", 16}}},
      {"f8e5m2", "f16", "sm_80", {{"prmt.b32", 16}, {"mul.f16x2", 0}}},  // e5m2 is f16's top byte
      // int8: f16 in one packed subtraction, bf16 through two f32 and one cvt.
      {"i8", "f16", "sm_90a", {{"prmt.b32", 16}, {"add.f16x2", 16}, {"cvt.rn.f32.s32", 0}}},
      // (bf16: one xor flips the sign bits of a word's four bytes, a prmt per byte.)
      {"i8", "bf16", "sm_80",
       {{"add.f32", 32}, {"cvt.rn.bf16x2.f32", 16}, {"prmt.b32", 32}, {"xor.b32", 8}, {"cvt.rn.f32.s32", 0}}},
  };
  for (const auto& c : cases) {
    INFO(c.from << " -> " << c.to << " for " << c.target);
    auto module = ir::parseModule(castKernel(c.from, c.to), "cast.tir");
    if (!module) FAIL(module.diagnostic().str());
    compiler::CompileOptions options;
    options.target = c.target;
    auto compiled = compiler::compileKernel(*(*module)->kernels()[0], options);
    if (!compiled) FAIL(compiled.diagnostic().str());
    for (const auto& [instruction, expected] : c.counts) {
      INFO(instruction);
      CHECK(countOf(compiled->ptx, instruction) == expected);
    }
    CHECK(countOf(compiled->ptx, "cvt.u16.u32") == 0);      // no byte extracted on its own
    CHECK(countOf(compiled->ptx, "cvt.rn.bf16.f32") == 0);  // no bf16 rounded on its own
  }
}

TEST_CASE("unpack_nibbles to f16 and bf16 converts two registers per instruction", "[codegen][quant]") {
  // 32 bytes per thread: 16 pairs, each one prmt, one lop3 (ptxas fuses the PTX
  // and + xor) and one packed fma (LLVM folds x·1 + c to an add where the target
  // has one: sm_90 for bf16, sm_53 for f16).
  const struct {
    const char *to, *target;
    const char* packed;
  } cases[] = {{"bf16", "sm_90a", "add.bf16x2"},
               {"bf16", "sm_80", "fma.rn.bf16x2"},
               {"f16", "sm_90a", "add.f16x2"},
               {"f16", "sm_80", "add.f16x2"}};
  for (const auto& c : cases)
    for (int high : {0, 1})
      for (bool perElement : {false, true}) {
        INFO(c.to << " for " << c.target << ", high " << high << ", per-element zero points " << perElement);
        auto module = ir::parseModule(nibblesKernel(c.to, high, high ? 8 : 0, perElement), "nibbles.tir");
        if (!module) FAIL(module.diagnostic().str());
        compiler::CompileOptions options;
        options.target = c.target;
        auto compiled = compiler::compileKernel(*(*module)->kernels()[0], options);
        if (!compiled) FAIL(compiled.diagnostic().str());
        CHECK(countOf(compiled->ptx, c.packed) == 16);
        CHECK(countOf(compiled->ptx, "prmt.b32") == 16);
        CHECK(countOf(compiled->ptx, "cvt.rn") == 0);  // no float conversion at all
        CHECK(countOf(compiled->ptx, ".f32") == 0);
        tests::checkAssembles(compiled->ptx, c.target);
      }
  // f32 takes the magic number per element: an OR and a subtraction, no cvt.
  auto module = ir::parseModule(nibblesKernel("f32", 1, 0, true), "nibbles.tir");
  if (!module) FAIL(module.diagnostic().str());
  compiler::CompileOptions options;
  options.target = "sm_90a";
  auto compiled = compiler::compileKernel(*(*module)->kernels()[0], options);
  if (!compiled) FAIL(compiled.diagnostic().str());
  CHECK(countOf(compiled->ptx, "sub.f32") + countOf(compiled->ptx, "add.f32") == 32);
  CHECK(countOf(compiled->ptx, "cvt.rn.f32") == 0);
  tests::checkAssembles(compiled->ptx, "sm_90a");
}

TEST_CASE("transcendentals lower to PTX instructions on every target", "[codegen]") {
  const struct {
    const char* op;
    const char* instruction;
  } cases[] = {{"exp2", "ex2.approx.ftz.f32"}, {"exp", "ex2.approx.ftz.f32"}, {"log2", "lg2.approx.f32"},
               {"log", "lg2.approx.f32"}, {"sqrt", "sqrt.approx.f32"}, {"rsqrt", "rsqrt.approx"},
               {"tanh", "tanh.approx.f32"}};
  for (const auto& c : cases)
    for (const char* type : {"f32", "bf16", "f16"})
      for (const char* target : {"sm_80", "sm_90a"}) {
        INFO(c.op << " on " << type << " for " << target);
        auto module = ir::parseModule(unaryKernel(c.op, type), "unary.tir");
        if (!module) FAIL(module.diagnostic().str());
        compiler::CompileOptions options;
        options.target = target;
        auto compiled = compiler::compileKernel(*(*module)->kernels()[0], options);
        if (!compiled) FAIL(compiled.diagnostic().str());
        CHECK(compiled->ptx.find(c.instruction) != std::string::npos);
      }
}

TEST_CASE("float division is correctly rounded unless div {approx = 1} asks for div.full.f32", "[codegen]") {
  auto divideKernel = [](const std::string& type, const std::string& attrs) {
    return "kernel @div_" + type + "(%x: ptr<global, " + type + ">, %out: ptr<global, " + type +
           ">) attributes {num_warps = 1} {\n"
           "  %offs = arange {start = 0, end = 32} : tile<32xi32>\n"
           "  %xp = splat %x : tile<32xptr<global, " + type + ">>\n"
           "  %xs = addptr %xp, %offs : tile<32xptr<global, " + type + ">>\n"
           "  %v = load %xs : tile<32x" + type + ">\n"
           "  %one = constant {value = 3} : tile<32x" + type + ">\n"
           "  %r = div %one, %v " + attrs + ": tile<32x" + type + ">\n"
           "  %op = splat %out : tile<32xptr<global, " + type + ">>\n"
           "  %os = addptr %op, %offs : tile<32xptr<global, " + type + ">>\n"
           "  store %os, %r\n"
           "  return\n"
           "}\n";
  };
  for (const char* type : {"f32", "bf16", "f16", "f64"})
    for (const bool approx : {false, true})
      for (const char* target : {"sm_80", "sm_90a"}) {
        INFO(type << (approx ? " approx" : "") << " for " << target);
        auto module = ir::parseModule(divideKernel(type, approx ? "{approx = 1} " : ""), "div.tir");
        if (!module) FAIL(module.diagnostic().str());
        compiler::CompileOptions options;
        options.target = target;
        auto compiled = compiler::compileKernel(*(*module)->kernels()[0], options);
        if (!compiled) FAIL(compiled.diagnostic().str());
        const bool f64 = std::string(type) == "f64";
        // Every division of the thread's elements takes the one form.
        CHECK((countOf(compiled->ptx, "div.full.f32") > 0) == (approx && !f64));
        CHECK((countOf(compiled->ptx, "div.rn.f32") > 0) == (!approx && !f64));
        CHECK((countOf(compiled->ptx, "div.rn.f64") > 0) == f64);
      }
  // The attribute is for floats, and a flag.
  for (const auto& [type, attrs, message] :
       {std::tuple{"i32", "{approx = 1} ", "needs float operands"},
        std::tuple{"f32", "{approx = 2} ", "must be 0 or 1"}}) {
    auto module = ir::parseModule(divideKernel(type, attrs), "div.tir");
    REQUIRE_FALSE(module.isOk());
    CHECK_THAT(module.diagnostic().str(), Catch::Contains(message));
  }
}
