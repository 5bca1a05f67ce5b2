// load_tensor (ir/Ops.def): a tile of a strided tensor of up to five
// dimensions, one of them gathered (a paged cache's blocks), zero outside the
// tensor and outside the row range. The interpreter runs the op itself;
// the expand-tensor-loads pass turns it into the masked load the code
// generator knows, and both must give the same bits as an element-by-element
// reading of the definition.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compiler/passes/Passes.h"
#include "compiler/passes/Pipeline.h"
#include "ir/Builder.h"
#include "ir/Interpreter.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "test_paths.h"
#include "test_tools.h"

using namespace attnjit::ir;
namespace support = attnjit::support;

namespace {

// The paged cache of tests/tir/load_tensor.tir: blocks of 4 tokens, 3 KV
// heads, K and V, head size 24, with a padded layout (strides wider than the
// extents) so that reading the wrong element shows.
struct PagedCache {
  static constexpr int64_t kHeadSize = 24, kKvHeads = 3, kBlockSize = 4, kBlocks = 6;
  static constexpr int64_t kStrideHead = 32, kStrideToken = kKvHeads * kStrideHead + 8;
  static constexpr int64_t kStrideKv = kBlockSize * kStrideToken, kStrideBlock = 2 * kStrideKv + 16;
  std::vector<float> data = std::vector<float>(static_cast<size_t>(kBlocks * kStrideBlock));

  PagedCache() {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
    for (float& x : data) x = dist(rng);
  }
  float at(int64_t block, int64_t kv, int64_t token, int64_t head, int64_t d) const {
    return data[static_cast<size_t>(block * kStrideBlock + kv * kStrideKv + token * kStrideToken +
                                    head * kStrideHead + d)];
  }
};

constexpr int64_t kRows = 16, kColumns = 32;

// The file's one kernel, parsed and verified (the module owns it).
struct ParsedKernel {
  std::unique_ptr<Module> module;
  Kernel& operator*() const { return *module->kernels()[0]; }
};

ParsedKernel parseKernelFile(const std::string& path) {
  auto module = parseModule(attnjit::tests::readFile(path), path);
  INFO((module.isOk() ? std::string() : module.diagnostic().str()));
  REQUIRE(module.isOk());
  REQUIRE(verifyModule(**module).isOk());
  REQUIRE((*module)->kernels().size() == 1);
  return ParsedKernel{std::move(*module)};
}

std::string tirPath() { return attnjit::tests::sourceDir() + "/tests/tir/load_tensor.tir"; }

// Runs the kernel on `cache` with `table` as its four block numbers.
std::vector<float> run(const Kernel& kernel, const PagedCache& cache, std::vector<int32_t> table, int32_t head,
                       int32_t firstRow, int32_t validRows) {
  std::vector<float> data = cache.data;
  std::vector<float> out(static_cast<size_t>(kRows * kColumns), -777.0f);
  InterpreterMemory memory;
  const uint64_t cacheAddress = memory.map(data.data(), data.size() * sizeof(float), "cache");
  const uint64_t tableAddress = memory.map(table.data(), table.size() * sizeof(int32_t), "block_table");
  const uint64_t outAddress = memory.map(out.data(), out.size() * sizeof(float), "out");
  support::Status ran = interpretKernel(
      kernel, {},
      {PointerArg{cacheAddress}, PointerArg{tableAddress}, PointerArg{outAddress}, int64_t{PagedCache::kBlocks},
       int64_t{PagedCache::kKvHeads}, int64_t{head}, int64_t{firstRow}, int64_t{validRows}, int64_t{PagedCache::kStrideHead},
       int64_t{PagedCache::kStrideToken}, int64_t{PagedCache::kStrideKv}, int64_t{PagedCache::kStrideBlock}},
      memory);
  INFO(ran.message());
  REQUIRE(ran.isOk());
  return out;
}

// The definition read element by element: value rows (kv = 1) of `head`.
std::vector<float> expected(const PagedCache& cache, const std::vector<int32_t>& table, int32_t head,
                            int32_t firstRow, int32_t validRows) {
  std::vector<float> out(static_cast<size_t>(kRows * kColumns), 0.0f);
  const bool headInside = head >= 0 && head < PagedCache::kKvHeads;
  for (int64_t i = 0; i < kRows; ++i) {
    const int32_t block = table[static_cast<size_t>(i / PagedCache::kBlockSize)];
    if (i < firstRow || i >= validRows || !headInside || block < 0 || block >= PagedCache::kBlocks) continue;
    for (int64_t j = 0; j < PagedCache::kHeadSize; ++j)
      out[static_cast<size_t>(i * kColumns + j)] = cache.at(block, 1, i % PagedCache::kBlockSize, head, j);
  }
  return out;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Case {
  std::vector<int32_t> table;
  int32_t head;
  int32_t firstRow;
  int32_t validRows;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {{5, 0, 3, 1}, 2, 0, 16},     // every row read
      {{2, 4, 1, 0}, 0, 0, 11},     // a partial last block: rows 11.. zero
      {{2, 4, 1, 0}, 1, 5, 40},     // rows before 5 zero (a window's first tile)
      {{-1, 6, 2, 100}, 1, -3, 16}, // blocks outside the cache read as zeros
      {{1, 1, 1, 1}, 3, 0, 16},     // a head outside the tensor: all zeros
      {{3, 2, 1, 0}, 1, 0, 0},      // no row in the range
  };
  return all;
}

}  // namespace

TEST_CASE("load_tensor: the interpreter reads the tile the definition states", "[load_tensor][interpreter]") {
  const PagedCache cache;
  auto kernel = parseKernelFile(tirPath());
  for (const Case& c : cases()) {
    INFO("head " << c.head << ", rows " << c.firstRow << " to " << c.validRows << ", blocks " << c.table[0] << " " << c.table[1] << " "
                 << c.table[2] << " " << c.table[3]);
    CHECK(sameBits(run(*kernel, cache, c.table, c.head, c.firstRow, c.validRows), expected(cache, c.table, c.head, c.firstRow, c.validRows)));
  }
}

TEST_CASE("load_tensor: expand-tensor-loads gives the same bits as the op", "[load_tensor][passes]") {
  const PagedCache cache;
  auto kernel = parseKernelFile(tirPath());
  auto expanded = parseKernelFile(tirPath());
  attnjit::compiler::PipelineOptions options;
  REQUIRE(attnjit::compiler::expandTensorLoads(*expanded, options.pass).isOk());
  REQUIRE(verifyKernel(*expanded).isOk());
  const std::string text = printKernel(*expanded);
  CHECK(text.find("= load_tensor") == std::string::npos);
  CHECK(text.find("= load %v_pointers, %v_mask, %v_zeros") != std::string::npos);
  for (const Case& c : cases()) {
    INFO("head " << c.head << ", rows " << c.firstRow << " to " << c.validRows);
    CHECK(sameBits(run(*expanded, cache, c.table, c.head, c.firstRow, c.validRows), run(*kernel, cache, c.table, c.head,
                                                                            c.firstRow, c.validRows)));
  }
  // The whole pipeline (layouts assigned) runs it too.
  auto piped = parseKernelFile(tirPath());
  REQUIRE(attnjit::compiler::runPipeline(*piped, options, nullptr).isOk());
  for (const Case& c : cases())
    CHECK(sameBits(run(*piped, cache, c.table, c.head, c.firstRow, c.validRows), expected(cache, c.table, c.head, c.firstRow, c.validRows)));
}

TEST_CASE("load_tensor: a tile without a gathered dimension, coordinates partly outside", "[load_tensor][interpreter]") {
  // A 10 × 12 row-major matrix of i16 with rows 16 elements apart; the tile of
  // 8 × 8 from (row -2, column 7) reads rows -2..5 and columns 7..14.
  Kernel kernel("matrix_window");
  Value* matrix = kernel.addParameter(Type::pointer(ScalarKind::I16), "matrix");
  Value* out = kernel.addParameter(Type::pointer(ScalarKind::I16), "out");
  Builder b(kernel);
  LoadTensorOperands tensor;
  tensor.base = matrix;
  tensor.dims = {b.i32(12), b.i64(10)};
  tensor.strides = {b.i64(16)};
  tensor.coords = {b.i32(7), b.i32(-2)};
  tensor.rowsDim = 1;
  Value* tile = b.loadTensor(tensor, 8, 8, "window");
  Value* rows = b.mul(b.broadcast(b.expandDims(b.arange(0, 8), 1), {8, 8}), b.constInt(8, Type::tile({8, 8}, Type())));
  Value* offsets = b.add(rows, b.broadcast(b.expandDims(b.arange(0, 8), 0), {8, 8}));
  b.store(b.addPtr(b.splat(out, {8, 8}), offsets), tile);
  REQUIRE(b.finish().isOk());

  std::vector<int16_t> data(10 * 16);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<int16_t>(1000 + i);
  std::vector<int16_t> result(64, -1);
  InterpreterMemory memory;
  const uint64_t matrixAddress = memory.map(data.data(), data.size() * 2, "matrix");
  const uint64_t outAddress = memory.map(result.data(), result.size() * 2, "out");
  support::Status ran = interpretKernel(kernel, {}, {PointerArg{matrixAddress}, PointerArg{outAddress}}, memory);
  INFO(ran.message());
  REQUIRE(ran.isOk());
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      const int row = i - 2, column = 7 + j;
      const int16_t want = row >= 0 && column < 12 ? data[static_cast<size_t>(row * 16 + column)] : int16_t{0};
      INFO("row " << i << ", column " << j);
      CHECK(result[static_cast<size_t>(i * 8 + j)] == want);
    }
}

TEST_CASE("load_tensor: the verifier names what is wrong", "[load_tensor][verifier]") {
  const std::string header =
      "kernel @k(%p: ptr<global, f32>, %q: ptr<global, i4>, %n: i32, %s: i64, %f: f32) {\n"
      "  %c = constant {value = 0} : i32\n"
      "  %rows = arange {start = 0, end = 16} : tile<16xi32>\n";
  auto message = [&](const std::string& op) {
    auto module = parseModule(header + "  " + op + "\n  return\n}\n", "bad.tir");
    if (!module.isOk()) return module.diagnostic().message;
    support::Status verified = verifyModule(**module);
    return verified.isOk() ? std::string("ok") : verified.diagnostic().message;
  };
  CHECK(message("%t = load_tensor %p, %n, %n, %s, %c, %c {rank = 2, rows = 1} : tile<16x8xf32>") == "ok");
  CHECK(message("%t = load_tensor %p, %n, %n, %s, %c, %rows {rank = 2, rows = 1} : tile<16x8xf32>") ==
        "'load_tensor': operand 5 ('rows') (the coordinate of dimension 1) must be an i32 scalar, got tile<16xi32>");
  CHECK(message("%t = load_tensor %p, %n, %n, %s, %c, %c {rank = 1, rows = 1} : tile<16x8xf32>") ==
        "'load_tensor': rank 1 is outside 2 to 5");
  CHECK(message("%t = load_tensor %p, %n, %n, %s, %c {rank = 2, rows = 1} : tile<16x8xf32>") ==
        "'load_tensor': a rank-2 tensor takes 6 operands (base, 2 dimensions, 1 strides, 2 coordinates) and "
        "optionally the first and the end row read, got 5");
  CHECK(message("%t = load_tensor %p, %n, %n, %s, %c, %c {rank = 2, rows = 0} : tile<16x8xf32>") ==
        "'load_tensor': rows = 0 must name a dimension from 1 to 1 (dimension 0 holds the columns)");
  CHECK(message("%t = load_tensor %p, %n, %n, %n, %s, %s, %c, %c, %c {rank = 3, rows = 1, gather = 1} : "
                "tile<16x8xf32>") ==
        "'load_tensor': gather = 1 must name a dimension from 1 to 2 other than rows (1)");
  CHECK(message("%t = load_tensor %p, %n, %n, %n, %s, %s, %c, %c, %c {rank = 3, rows = 1, gather = 2} : "
                "tile<16x8xf32>") ==
        "'load_tensor': operand 8 ('c') (the gathered coordinate of dimension 2) must be a rank-1 tile of i32, got "
        "i32");
  CHECK(message("%t = load_tensor %p, %n, %n, %n, %s, %s, %c, %c, %rows {rank = 3, rows = 1, gather = 2} : "
                "tile<24x8xf32>") ==
        "'load_tensor': 16 gathered entries do not divide the 24 rows");
  CHECK(message("%t = load_tensor %p, %n, %n, %n, %s, %s, %c, %c, %rows {rank = 3, rows = 1, gather = 2} : "
                "tile<32x8xf32>") == "ok");
  CHECK(message("%t = load_tensor %p, %n, %f, %s, %c, %c {rank = 2, rows = 1} : tile<16x8xf32>") ==
        "'load_tensor': operand 2 ('f') (dimension 1's extent) must be an i32 or i64 scalar, got f32");
  CHECK(message("%t = load_tensor %q, %n, %n, %s, %c, %c {rank = 2, rows = 1} : tile<16x8xi4>") ==
        "'load_tensor': unsupported: load_tensor of i4 elements; load the bytes as i8");
  CHECK(message("%t = load_tensor %p, %n, %n, %s, %c, %c {rank = 2, rows = 1} : tile<16x8xf16>") ==
        "'load_tensor': result type tile<16x8xf16> should be tile<16x8xf32> (tile<16x8xf32> (the base's element "
        "type))");
  CHECK(message("%t = load_tensor %p, %n, %n, %s, %c, %c, %c, %c {rank = 2, rows = 1} : tile<16x8xf32>") == "ok");
  CHECK(message("%t = load_tensor %p, %n, %n, %s, %c, %c, %c, %s {rank = 2, rows = 1} : tile<16x8xf32>") ==
        "'load_tensor': operand 7 ('s') (the end of the rows read) must be an i32 scalar, got i64");
  CHECK(message("%t = load_tensor %p, %n, %n, %s, %c, %c, %c {rank = 2, rows = 1} : tile<16x8xf32>")
            .find("got 7") != std::string::npos);
  CHECK(message("%t = load_tensor %p, %n, %n, %s, %c, %c {rank = 2, rows = 1, box = 3} : tile<16x8xf32>")
            .find("box") != std::string::npos);
}

TEST_CASE("load_tensor: kernels with it compile to PTX that ptxas assembles", "[load_tensor][codegen]") {
  for (const std::string target : {"sm_80", "sm_90a"}) {
    INFO(target);
    attnjit::compiler::CompileOptions options;
    options.target = target;
    auto kernel = parseKernelFile(tirPath());
    auto compiled = attnjit::compiler::compileKernel(*kernel, options);
    INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
    REQUIRE(compiled.isOk());
    CHECK(compiled->tirOptimized.find("= load_tensor") == std::string::npos);
    attnjit::tests::checkAssembles(compiled->ptx, target);
  }
}
