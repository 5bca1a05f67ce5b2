// The .tir text form round-trips: every .tir file in the repository is in
// canonical printed form, and kernels built in C++ print, parse and print again to
// the same text. Value naming and float attribute spelling are checked against
// hand-written expectations.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "ir/Builder.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using namespace attnjit::ir;

namespace {

using attnjit::tests::readFile;
using attnjit::tests::repositoryTirFiles;

// "line N: expected `...`, printed `...`" for the first differing line.
std::string firstDifference(const std::string& expected, const std::string& actual) {
  std::istringstream e(expected), a(actual);
  std::string le, la;
  for (int line = 1;; ++line) {
    bool he = static_cast<bool>(std::getline(e, le)), ha = static_cast<bool>(std::getline(a, la));
    if (!he && !ha) return "texts differ only in the final newline";
    if (le != la || he != ha)
      return "line " + std::to_string(line) + ":\n  file:    " + (he ? le : "<end>") +
             "\n  printed: " + (ha ? la : "<end>");
  }
}

// print -> parse -> print; returns the first print after checking the second one
// equals it.
std::string requireRoundTrip(const Module& module) {
  const std::string printed = printModule(module);
  auto parsed = parseModule(printed, "printed.tir");
  INFO(printed);
  REQUIRE(parsed.isOk());
  const std::string reprinted = printModule(*parsed.value());
  INFO(firstDifference(printed, reprinted));
  REQUIRE(reprinted == printed);
  return printed;
}

const Type kI32 = Type::scalar(ScalarKind::I32);
const Type kF32 = Type::scalar(ScalarKind::F32);

LayoutRef blocked2d() {
  auto l = std::make_shared<Layout>();
  l->kind = LayoutKind::Blocked;
  l->sizePerThread = {2, 4};
  l->threadsPerWarp = {8, 4};
  l->warpsPerCta = {1, 1};
  l->order = {1, 0};
  return l;
}

LayoutRef mmaLayout() {
  auto l = std::make_shared<Layout>();
  l->kind = LayoutKind::Mma;
  l->version = 2;
  l->warpsPerCta = {1, 1};
  l->instrShape = {16, 8};
  return l;
}

LayoutRef dotOperand(int idx) {
  auto l = std::make_shared<Layout>();
  l->kind = LayoutKind::DotOperand;
  l->opIdx = idx;
  l->kWidth = 8;
  l->parent = mmaLayout();
  return l;
}

LayoutRef sharedLayout() {
  auto l = std::make_shared<Layout>();
  l->kind = LayoutKind::Shared;
  l->vec = 8;
  l->perPhase = 2;
  l->maxPhase = 4;
  l->order = {1, 0};
  return l;
}

LayoutRef sliceOf(LayoutRef parent, int dim) {
  auto l = std::make_shared<Layout>();
  l->kind = LayoutKind::Slice;
  l->dim = dim;
  l->parent = std::move(parent);
  return l;
}

}  // namespace

// Files in a directory named `bad` are negative inputs (for the CLI and parser
// tests): they must be rejected. Every other .tir file must be canonical.
bool isNegativeInput(const fs::path& path) {
  for (const fs::path& part : path.parent_path())
    if (part == "bad") return true;
  return false;
}

TEST_CASE("every .tir file in the repository is in canonical printed form", "[tir]") {
  size_t checked = 0, rejected = 0;
  for (const fs::path& path : repositoryTirFiles()) {
    const std::string text = readFile(path);
    INFO("file: " << path.string());
    auto parsed = parseModule(text, path.string());
    if (isNegativeInput(path)) {
      CHECK_FALSE(parsed.isOk());
      ++rejected;
      continue;
    }
    INFO((parsed.isOk() ? std::string("parsed") : parsed.diagnostic().str()));
    REQUIRE(parsed.isOk());
    const std::string printed = printModule(*parsed.value());
    INFO(firstDifference(text, printed));
    CHECK(printed == text);
    ++checked;
  }
  WARN("round-tripped " << checked << " .tir files; " << rejected << " negative inputs rejected");
  REQUIRE(checked >= 3);
}

TEST_CASE("a kernel built in C++ prints, parses and prints again identically", "[tir]") {
  auto module = std::make_unique<Module>();
  Kernel& k = *module->addKernel(std::make_unique<Kernel>("built"));
  k.docLines() = {"Built by the round-trip test.", "", "  indented line"};
  k.constexprs().push_back({"BLOCK", int64_t{16}});
  k.constexprs().push_back({"SCALE", 0.5});
  k.attrs().set("num_warps", int64_t{1});
  Attributes aligned;
  aligned.set("align", int64_t{16});
  Value* a = k.addParameter(Type::pointer(ScalarKind::F16), "a", aligned);
  Value* out = k.addParameter(Type::pointer(ScalarKind::F32), "out", aligned);
  Value* n = k.addParameter(kI32, "n");
  Value* flag = k.addParameter(kI32, "");  // unnamed parameter

  Builder b(k);
  Value* pid = b.programId(0);
  Value* block = b.constexprValue("BLOCK", ScalarKind::I32, "block");
  Value* start = b.mul(pid, block, "start");
  Value* idx = b.arange(0, 16, "idx");
  Value* rows = b.broadcast(b.expandDims(idx, 1), {16, 16}, "rows");
  Value* cols = b.broadcast(b.expandDims(idx, 0), {16, 16}, "cols");
  Value* offs = b.add(b.mul(rows, b.constInt(16, Type::tile({16, 16}, kI32))), cols, "offs");
  Value* tileA = b.load(b.addPtr(b.splat(a, {16, 16}), offs), nullptr, nullptr, "tile_a");
  Value* opA = b.convertLayout(b.convertLayout(b.convertLayout(tileA, blocked2d()), sharedLayout()), dotOperand(0));
  Value* opB = b.convertLayout(tileA, dotOperand(1), "op_b");
  Value* acc0 = b.constFloat(0.0, Type::tile({16, 16}, kF32, mmaLayout()), "acc");

  Value* zero = b.i32(0);
  Value* one = b.i32(1);
  Value* rowMax0 = b.constFloat(-INFINITY, Type::tile({16}, kF32), "m");
  auto loop = b.beginFor(start, n, one, {acc0, rowMax0}, "j", {"acc", "m"});
  Value* acc1 = b.dot(opA, opB, loop.iterArgs[0], false, "acc");  // hint clash: printed acc_2
  Value* rowMax = b.reduce(Opcode::ReduceMax, acc1, 1);
  Value* sliced = b.convertLayout(rowMax, sliceOf(mmaLayout(), 1), "sliced");
  b.convertLayout(sliced, sliceOf(blocked2d(), 1));
  Value* rowMax1 = b.max(loop.iterArgs[1], rowMax, "m");
  auto results = b.endFor({acc1, rowMax1}, {"acc_out", "m_out"});

  Value* positive = b.cmp(CmpPredicate::Gt, flag, zero, "positive");
  b.beginIf(positive, {kF32});
  Value* total = b.reduce(Opcode::ReduceSum, results[1], 0, "total");
  b.beginElse({total});
  Value* neg = b.unary(Opcode::Neg, b.f32(1.0));
  auto chosen = b.endIf({neg}, {"chosen"});

  b.beginIf(positive);  // no results, no else
  b.store(out, chosen[0]);
  b.endIf();

  b.beginIf(positive);  // no results, with an else that does something
  b.store(out, chosen[0]);
  b.beginElse();
  b.store(out, b.f32(2.5));
  b.endIf();

  auto unnamedLoop = b.beginFor(zero, n, one, {}, "");
  b.store(b.addPtr(out, unnamedLoop.inductionVar), b.f32(0.25));
  b.endFor({});
  REQUIRE(b.finish().isOk());

  const std::string printed = requireRoundTrip(*module);
  // Independent expectations on the printed form.
  CHECK(printed.rfind("// Built by the round-trip test.\n//\n//   indented line\nkernel @built(", 0) == 0);
  CHECK(printed.find("kernel @built(%a: ptr<global, f16> {align = 16}, %out: ptr<global, f32> {align = 16}, "
                     "%n: i32, %0: i32) constexprs {BLOCK = 16, SCALE = 0.5} attributes {num_warps = 1} {\n") !=
        std::string::npos);
  CHECK(printed.find("  %1 = program_id {axis = 0} : i32\n") != std::string::npos);
  CHECK(printed.find("%acc_out, %m_out = for %j = %start to %n step %") != std::string::npos);
  CHECK(printed.find(" iter_args(%acc_1 = %acc, %m_1 = %m) -> (tile<16x16xf32, #mma<version=2, wpc=[1,1], "
                     "instr=[16,8]>>, tile<16xf32>) {\n") != std::string::npos);
  CHECK(printed.find("    %acc_2 = dot %") != std::string::npos);
  CHECK(printed.find("%chosen = if %positive -> (f32) {\n") != std::string::npos);
  CHECK(printed.find("  } else {\n    %") != std::string::npos);
  CHECK(printed.find("  if %positive {\n    store %out, %chosen\n    yield\n  }\n") != std::string::npos);
  CHECK(printed.find("  if %positive {\n    store %out, %chosen\n    yield\n  } else {\n") != std::string::npos);
  CHECK(printed.find("#dot_op<idx=0, k_width=8, parent=#mma<version=2, wpc=[1,1], instr=[16,8]>>") !=
        std::string::npos);
  CHECK(printed.find("#shared<vec=8, per_phase=2, max_phase=4, order=[1,0]>") != std::string::npos);
  CHECK(printed.find("#slice<dim=1, parent=#blocked<spt=[2,4], tpw=[8,4], wpc=[1,1], order=[1,0]>>") !=
        std::string::npos);
  const std::string ending = "  return\n}\n";
  REQUIRE(printed.size() > ending.size());
  CHECK(printed.compare(printed.size() - ending.size(), ending.size(), ending) == 0);
}

TEST_CASE("printer names: hints, suffixes for clashes, numbers for unnamed values", "[tir]") {
  Kernel k("names");
  Value* p = k.addParameter(kI32, "x");
  Builder b(k);
  Value* v1 = b.add(p, p, "x");    // clash with the parameter: x_1
  Value* v2 = b.add(v1, v1, "x_1");  // clash with the suffixed name: x_1_1
  Value* v3 = b.add(v2, v2);       // unnamed: 0
  Value* v4 = b.add(v3, v3, "1");  // the hint "1" is free: 1
  Value* v5 = b.add(v4, v4);       // unnamed: 1 is taken, so 2
  Value* v6 = b.add(v5, v5, "bad name!");  // characters outside [A-Za-z0-9_.] become '_'
  b.add(v6, v6);
  (void)b.finish();
  const std::string expected =
      "kernel @names(%x: i32) {\n"
      "  %x_1 = add %x, %x : i32\n"
      "  %x_1_1 = add %x_1, %x_1 : i32\n"
      "  %0 = add %x_1_1, %x_1_1 : i32\n"
      "  %1 = add %0, %0 : i32\n"
      "  %2 = add %1, %1 : i32\n"
      "  %bad_name_ = add %2, %2 : i32\n"
      "  %3 = add %bad_name_, %bad_name_ : i32\n"
      "  return\n"
      "}\n";
  CHECK(printKernel(k) == expected);
}

TEST_CASE("float and integer attributes keep their exact values through the text form", "[tir]") {
  const double denormal = std::numeric_limits<double>::denorm_min();
  struct Case {
    double value;
    const char* text;
  };
  const Case cases[] = {
      {0.1, "0.1"},         {1e-30, "1e-30"}, {-0.0, "-0.0"},        {1.0, "1.0"},
      {1e300, "1e+300"},    {denormal, "5e-324"}, {123456789.0, "123456789.0"},
      {INFINITY, "inf"},    {-INFINITY, "-inf"}, {NAN, "nan"},
  };
  auto module = std::make_unique<Module>();
  Kernel& k = *module->addKernel(std::make_unique<Kernel>("floats"));
  k.constexprs().push_back({"TINY", 1e-30});
  k.constexprs().push_back({"HUGE_INT", std::numeric_limits<int64_t>::max()});
  Builder b(k);
  for (const Case& c : cases) b.constFloat(c.value, kF32);
  b.constInt(std::numeric_limits<int64_t>::max(), Type::scalar(ScalarKind::I64));
  b.constInt(std::numeric_limits<int64_t>::min(), Type::scalar(ScalarKind::I64));
  REQUIRE(b.finish().isOk());

  const std::string printed = requireRoundTrip(*module);
  CHECK(printed.find("constexprs {TINY = 1e-30, HUGE_INT = 9223372036854775807}") != std::string::npos);
  for (const Case& c : cases) {
    INFO(c.text);
    CHECK(printed.find(std::string("constant {value = ") + c.text + "} : f32\n") != std::string::npos);
  }
  CHECK(printed.find("constant {value = 9223372036854775807} : i64\n") != std::string::npos);
  CHECK(printed.find("constant {value = -9223372036854775808} : i64\n") != std::string::npos);

  auto parsed = parseModule(printed, "floats.tir");
  REQUIRE(parsed.isOk());
  const Block& body = parsed.value()->kernels()[0]->body();
  for (size_t i = 0; i < std::size(cases); ++i) {
    const AttrValue* v = body.operations()[i]->attrs().find("value");
    REQUIRE(v);
    REQUIRE(std::holds_alternative<double>(*v));
    const double got = std::get<double>(*v);
    INFO(cases[i].text);
    if (std::isnan(cases[i].value)) {
      CHECK(std::isnan(got));
    } else {
      CHECK(got == cases[i].value);
      CHECK(std::signbit(got) == std::signbit(cases[i].value));
    }
  }
  CHECK(std::get<int64_t>(*body.operations()[std::size(cases) + 1]->attrs().find("value")) ==
        std::numeric_limits<int64_t>::min());
}

TEST_CASE("parseType reads every type spelling Type::str prints", "[tir]") {
  const char* spellings[] = {
      "i1",
      "i4",
      "i8",
      "i16",
      "i32",
      "i64",
      "f16",
      "bf16",
      "f32",
      "f64",
      "f8e4m3",
      "f8e5m2",
      "ptr<global, f32>",
      "ptr<shared, f16>",
      "tile<16x128xbf16>",
      "tile<1x1xi32>",
      "tile<2x3x4xf8e4m3>",
      "tile<32xptr<global, f32>>",
      "tile<16x128xf32, #blocked<spt=[1,8], tpw=[4,8], wpc=[4,1], order=[1,0]>>",
      "tile<64x64xf32, #mma<version=3, wpc=[4,1], instr=[16,64,16]>>",
      "tile<64x32xbf16, #dot_op<idx=0, k_width=8, parent=#mma<version=2, wpc=[4,1], instr=[16,8]>>>",
      "tile<128x128xf8e4m3, #dot_op<idx=1, k_width=2, thread_major=1, parent=#mma<version=2, wpc=[1,4], instr=[16,8]>>>",
      "tile<16x128xf32, #mma<version=2, wpc=[1,4], instr=[16,8], thread_major=1>>",
      "tile<64xf32, #slice<dim=1, parent=#mma<version=2, wpc=[4,1], instr=[16,8]>>>",
      "tile<64xf32, #slice<dim=0, parent=#slice<dim=1, parent=#blocked<spt=[1,1,4], tpw=[1,4,8], wpc=[4,1,1], "
      "order=[2,1,0]>>>>",
      "tile<64x64xf16, #shared<vec=8, per_phase=1, max_phase=8, order=[1,0]>>",
      "tile<16xptr<shared, f16>, #blocked<spt=[1], tpw=[32], wpc=[4], order=[0]>>",
  };
  for (const char* s : spellings) {
    INFO(s);
    auto t = parseType(s);
    REQUIRE(t.isOk());
    CHECK(t.value().str() == s);
  }
  auto tile = parseType("tile<16x128xbf16>");
  REQUIRE(tile.isOk());
  CHECK(tile.value() == Type::tile({16, 128}, Type::scalar(ScalarKind::BF16)));
  auto sliced = parseType("tile<64xf32, #slice<dim=1, parent=#mma<version=2, wpc=[4,1], instr=[16,8]>>>");
  REQUIRE(sliced.isOk());
  REQUIRE(sliced.value().layout());
  CHECK(sliced.value().layout()->kind == LayoutKind::Slice);
  CHECK(sliced.value().layout()->dim == 1);
  REQUIRE(sliced.value().layout()->parent);
  CHECK(sliced.value().layout()->parent->kind == LayoutKind::Mma);
  CHECK(sliced.value().layout()->parent->instrShape == std::vector<int64_t>{16, 8});
  // Whitespace inside a type is free; the printed form is canonical.
  auto spaced = parseType("  ptr < shared ,f16 >  ");
  REQUIRE(spaced.isOk());
  CHECK(spaced.value() == Type::pointer(ScalarKind::F16, AddressSpace::Shared));
}

TEST_CASE("parsing keeps locations, doc lines, attribute kinds and region structure", "[tir]") {
  const std::string text =
      "// not a doc line: a blank line follows\n"
      "\n"
      "// first doc line\n"
      "//\n"
      "kernel @k(%p: ptr<global, f32>, %n: i32) attributes {num_warps = 2} {\n"
      "  %c = cmp %n, %n {pred = eq} : i1\n"
      "  if %c {\n"
      "    %v = constant {value = 1.0} : f32  // trailing comments are dropped\n"
      "    store %p, %v\n"
      "    yield\n"
      "  }\n"
      "  return\n"
      "}\n";
  auto parsed = parseModule(text, "k.tir");
  INFO((parsed.isOk() ? std::string() : parsed.diagnostic().str()));
  REQUIRE(parsed.isOk());
  const Kernel& k = *parsed.value()->kernels()[0];
  CHECK(k.docLines() == std::vector<std::string>{"first doc line", ""});
  CHECK(k.location().line == 5);
  CHECK(k.location().col == 1);
  CHECK(k.location().file == "k.tir");
  CHECK(k.attrs().getInt("num_warps") == 2);
  const Operation& cmpOp = *k.body().operations()[0];
  CHECK(cmpOp.attrs().getString("pred") == "eq");  // an identifier value is a string
  const Operation& ifOp = *k.body().operations()[1];
  CHECK(ifOp.location().line == 7);
  CHECK(ifOp.location().col == 3);
  REQUIRE(ifOp.numRegions() == 2);
  CHECK(ifOp.region(0)->size() == 3);
  CHECK(ifOp.region(0)->operations()[0]->attrs().getFloat("value") == 1.0);
  REQUIRE(ifOp.region(1)->size() == 1);  // the absent else yields nothing
  CHECK(ifOp.region(1)->back()->opcode() == Opcode::Yield);
  CHECK(ifOp.region(1)->back()->numOperands() == 0);
  CHECK(ifOp.region(0)->operations()[0]->location().line == 8);
  CHECK(ifOp.region(0)->operations()[0]->location().col == 10);
}

TEST_CASE("kernel attributes are the declared switches, with values in range", "[tir]") {
  auto errorOf = [](const std::string& attributes) {
    auto parsed = parseModule("kernel @k(%p: ptr<global, f32>) attributes {" + attributes + "} {\n  return\n}\n",
                              "k.tir");
    return parsed.isOk() ? std::string("accepted") : parsed.diagnostic().str();
  };
  // Every attribute value kind still parses; a kernel takes only the switches of
  // ir/KernelAttributes.def, as integers.
  CHECK(errorOf("tag = \"two words\", kind = fast, perm = [1, 0], t = tile<4xf32>, s = f32") ==
        "k.tir:1:1: error: kernel 'k': unknown kernel attribute 'tag' (known: num_warps, num_stages, "
        "prefetch_indices, async_copy, sink_slot_reads, shared_invariant_operands, thread_major_operands, "
        "warpgroup_mma, warp_specialize, producer_registers, tma, cluster_size, remove_redundant_sync)");
  CHECK(errorOf("producer_registers = 100") ==
        "k.tir:1:1: error: kernel 'k': producer_registers must be 0, or a multiple of 8 in 24..256, got 100");
  CHECK(errorOf("sink_slot_reads = 2") == "k.tir:1:1: error: kernel 'k': sink_slot_reads must be 0 or 1, got 2");
  CHECK(errorOf("num_stages = 0") == "k.tir:1:1: error: kernel 'k': num_stages must be an integer in 1..8, got 0");
  CHECK(errorOf("async_copy = fast") == "k.tir:1:1: error: kernel 'k': async_copy must be 0 or 1, got fast");
  CHECK(errorOf("num_warps = 8, num_stages = 2, prefetch_indices = 1, async_copy = 0, sink_slot_reads = 0, "
                "shared_invariant_operands = 1, thread_major_operands = 0, remove_redundant_sync = 0") == "accepted");
}

TEST_CASE("printOperation prints one op with its regions", "[tir]") {
  Kernel k("one");
  Value* n = k.addParameter(kI32, "n");
  Builder b(k);
  Value* zero = b.i32(0);
  auto loop = b.beginFor(zero, n, n, {zero}, "i", {"s"});
  Value* next = b.add(loop.iterArgs[0], loop.inductionVar, "next");
  auto results = b.endFor({next}, {"sum"});
  (void)b.finish();
  const Operation& forOp = *results[0]->definingOp();
  CHECK(printOperation(forOp) ==
        "%sum = for %i = %0 to %n step %n iter_args(%s = %0) -> (i32) {\n"
        "  %next = add %s, %i : i32\n"
        "  yield %next\n"
        "}");
}
