// Every transcendental op compiles to PTX for every target (NVPTX has no libcall
// for llvm.log2: the lowering must choose an instruction itself), in f32 and in
// the 16-bit types, and ptxas accepts the result.
#include <catch2/catch.hpp>

#include <string>

#include "compiler/CompileDriver.h"
#include "ir/Parser.h"

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

}  // namespace

TEST_CASE("transcendentals lower to PTX instructions on every target", "[codegen]") {
  const struct {
    const char* op;
    const char* instruction;
  } cases[] = {{"exp2", "ex2.approx"}, {"exp", "ex2.approx"}, {"log2", "lg2.approx.f32"},
               {"log", "lg2.approx.f32"}, {"sqrt", "sqrt"},   {"rsqrt", "rsqrt.approx"},
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
