// The load pipelining pass (compiler/passes/Pipelining.cpp): its rewrite of the
// attention loop, checked for structure, and — by running the kernel as the whole
// pass pipeline leaves it on the CPU interpreter — for meaning, against the
// float64 reference.
#include <catch2/catch.hpp>
#include <string>

#include "compiler/validation/AttentionProblem.h"
#include "compiler/passes/Pipeline.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "tests/test_tools.h"
#include "ir/Parser.h"
#include "ir/Printer.h"

namespace validation = attnjit::validation;

using attnjit::compiler::BatchShape;
using attnjit::compiler::buildUnifiedAttention;
using attnjit::compiler::PipelineOptions;
using attnjit::compiler::runPipeline;
using attnjit::validation::runUnifiedAttentionInterpreted;
using attnjit::compiler::UnifiedAttentionConfig;
using attnjit::ir::Opcode;
using attnjit::ir::ScalarKind;

namespace {

UnifiedAttentionConfig config(ScalarKind dtype, int hq, int hkv, int headSize, bool causal) {
  UnifiedAttentionConfig c;
  c.dtype = dtype;
  c.numQueryHeads = hq;
  c.numKvHeads = hkv;
  c.headSize = headSize;
  c.blockSize = 16;
  c.causal = causal;
  return c;
}

// Decode rows, a prefill row without context, chunked prefill, and a long
// context: no length a multiple of a tile (32) or a block (16); one sequence with
// a single KV tile, where the prefetch of "tile 1" must be fully masked off.
BatchShape batch(uint64_t seed) {
  BatchShape s;
  s.queryLens = {1, 19, 1, 6, 3, 2};
  s.contextLens = {37, 0, 18, 45, 130, 9};
  s.seed = seed;
  return s;
}

void checkAfterPasses(const UnifiedAttentionConfig& c, const BatchShape& shape) {
  INFO(c.kernelName() << " on " << shape.str());
  auto result = runUnifiedAttentionInterpreted(c, shape, /*afterPasses=*/true);
  if (!result) FAIL(result.diagnostic().str());
  INFO("max abs error " << result->maxAbsError << " (tolerance " << result->tolerance << "); " << result->detail);
  CHECK(result->passed);
}

struct LoopCounts {
  int loadsBeforeLoop = 0, loadsInLoop = 0, iterArgs = 0;
};

// The KV loop is the `for` whose body has a dot.
LoopCounts countAroundKvLoop(const attnjit::ir::Kernel& kernel) {
  LoopCounts counts;
  const attnjit::ir::Operation* kvLoop = nullptr;
  attnjit::ir::walk(kernel.body(), [&](const attnjit::ir::Operation& op) {
    if (op.opcode() != Opcode::For) return;
    bool hasDot = false;
    attnjit::ir::walk(*op.region(0), [&](const attnjit::ir::Operation& inner) {
      hasDot = hasDot || inner.opcode() == Opcode::Dot;
    });
    if (hasDot) kvLoop = &op;
  });
  REQUIRE(kvLoop);
  counts.iterArgs = static_cast<int>(kvLoop->region(0)->numArguments()) - 1;
  for (const auto& op : kvLoop->parentBlock()->operations()) {
    if (op.get() == kvLoop) break;
    if (op->opcode() == Opcode::Load && op->result()->type().isTile()) ++counts.loadsBeforeLoop;
  }
  for (const auto& op : kvLoop->region(0)->operations())
    if (op->opcode() == Opcode::Load) ++counts.loadsInLoop;
  return counts;
}

}  // namespace

TEST_CASE("pipelining moves the KV loop's tile loads one iteration ahead", "[pipelining]") {
  for (int stages : {1, 2}) {
    UnifiedAttentionConfig c = config(ScalarKind::BF16, 8, 2, 64, true);
    c.numStages = stages;
    auto kernel = buildUnifiedAttention(c);
    REQUIRE(kernel.isOk());
    PipelineOptions options;
    REQUIRE(runPipeline(**kernel, options, nullptr).isOk());
    LoopCounts counts = countAroundKvLoop(**kernel);
    INFO(attnjit::ir::printKernel(**kernel));
    // The loop loads K, V and the block-table row, the row once in each layout
    // its users (K's and V's addresses) need: once per iteration either way.
    CHECK(counts.loadsInLoop == 4);
    // 16 rows over 4 warps: the warps split the keys, so the row sum is carried
    // per column (l_partial) and reduced after the loop.
    if (stages == 1) {
      CHECK(counts.iterArgs == 4);  // m, l, acc, l_partial
      CHECK(counts.loadsBeforeLoop == 1);  // the query tile
    } else {
      // m, l, acc, l_partial + K and V of the current tile; its block-table row
      // is not carried (only the next tile's addresses read it), so cleanup drops it.
      CHECK(counts.iterArgs == 6);
      CHECK(counts.loadsBeforeLoop == 5);  // the query tile + tile 0's four loads
    }
  }
}

TEST_CASE("pipelined attention matches the float64 reference on the interpreter", "[pipelining][attention]") {
  checkAfterPasses(config(ScalarKind::F32, 4, 2, 48, true), batch(1));
  checkAfterPasses(config(ScalarKind::BF16, 8, 2, 64, false), batch(2));
  checkAfterPasses(config(ScalarKind::F16, 8, 8, 80, true), batch(3));
  UnifiedAttentionConfig wide = config(ScalarKind::BF16, 8, 2, 64, true);
  wide.blockMRows = 64;  // 16 tokens x 4 heads per program
  checkAfterPasses(wide, batch(4));
  UnifiedAttentionConfig smallTiles = config(ScalarKind::BF16, 4, 1, 32, false);
  smallTiles.tileSize = 16;
  checkAfterPasses(smallTiles, batch(5));
}

TEST_CASE("prefetch_indices loads 128-key decode tiles' block numbers two tiles ahead", "[pipelining]") {
  for (int tileSize : {64, 128}) {
    UnifiedAttentionConfig c = config(ScalarKind::BF16, 8, 2, 64, true);
    c.tileSize = tileSize;
    auto kernel = buildUnifiedAttention(c);
    REQUIRE(kernel.isOk());
    // The builder asks for it only where layout assignment converts the block
    // numbers anyway (128 keys: 8 per thread).
    const bool asked = (*kernel)->attrs().find("prefetch_indices") != nullptr;
    CHECK(asked == (tileSize == 128));
    PipelineOptions options;
    REQUIRE(runPipeline(**kernel, options, nullptr).isOk());
    const std::string text = attnjit::ir::printKernel(**kernel);
    INFO(text);
    LoopCounts counts = countAroundKvLoop(**kernel);
    if (tileSize == 64) {
      CHECK(text.find("_ahead") == std::string::npos);
      CHECK(counts.iterArgs == 6);
      CHECK(counts.loadsBeforeLoop == 5);
      continue;
    }
    // m, l, acc, l_partial, K, V and tile iv + 1's block numbers, loaded one
    // iteration earlier. Before the loop: the query, tile 0's K, V and block
    // numbers, and tile 1's block numbers under their own guard; in the loop,
    // tile iv + 2's under iv + 2 < hi. Each row of block numbers is loaded once
    // (8 per thread: layout assignment converts it into the copies' layouts).
    CHECK(counts.iterArgs == 7);
    CHECK(counts.loadsBeforeLoop == 5);
    CHECK(text.find("%physical_block_i32_ahead = ") != std::string::npos);
    CHECK(text.find("%pipeline_second_runs = cmp %pipeline_second_iv, %num_tiles {pred = lt}") != std::string::npos);
    CHECK(text.find("%pipeline_after_next_runs = cmp %pipeline_after_next_iv, %num_tiles {pred = lt}") !=
          std::string::npos);
    CHECK(counts.loadsInLoop == 3);  // K, V, and tile iv + 2's block numbers
  }
}

TEST_CASE("block numbers two tiles ahead keep attention exact on the interpreter", "[pipelining][attention]") {
  // One, two and three or more 128-key tiles per sequence: the prologue's second
  // index load and the loop's iv + 2 load each fully masked off somewhere.
  BatchShape shape;
  shape.queryLens = {1, 1, 1, 1, 2, 1};
  shape.contextLens = {37, 130, 255, 300, 401, 129};
  shape.seed = 7;
  for (auto format : {attnjit::compiler::KvCacheFormat::Auto, attnjit::compiler::KvCacheFormat::Fp8E4M3,
                      attnjit::compiler::KvCacheFormat::Int8PerTokenHead}) {
    UnifiedAttentionConfig c = config(ScalarKind::BF16, 8, 2, 64, true);
    c.tileSize = 128;
    c.kvCacheFormat = format;
    checkAfterPasses(c, shape);
  }
}

TEST_CASE("prefetch_indices other than 0 or 1 is a clear error", "[pipelining]") {
  // The verifier checks it whether or not the kernel pipelines.
  for (int stages : {1, 2}) {
    const std::string text = "kernel @k(%p: ptr<global, f32>) attributes {num_stages = " + std::to_string(stages) +
                             ", prefetch_indices = 2} {\n  return\n}\n";
    auto module = attnjit::ir::parseModule(text, "k.tir");
    REQUIRE_FALSE(module.isOk());
    CHECK(module.diagnostic().str() == "k.tir:1:1: error: kernel 'k': prefetch_indices must be 0 or 1, got 2");
  }
}

TEST_CASE("the pipeliner leaves loops that store and loads that depend on the loop state", "[pipelining]") {
  // The loop stores through %p and loads from it: loading the next element early
  // would read it before this iteration's store.
  const char* text =
      "kernel @scan(%p: ptr<global, f32>, %n: i32) attributes {num_stages = 2} {\n"
      "  %c0 = constant {value = 0} : i32\n"
      "  %c1 = constant {value = 1} : i32\n"
      "  %zeros = constant {value = 0.0} : tile<16xf32>\n"
      "  %idx = arange {start = 0, end = 16} : tile<16xi32>\n"
      "  %ptrs = splat %p : tile<16xptr<global, f32>>\n"
      "  %all = cmp %idx, %idx {pred = eq} : tile<16xi1>\n"
      "  for %i = %c0 to %n step %c1 {\n"
      "    %off = splat %i : tile<16xi32>\n"
      "    %at = addptr %ptrs, %off : tile<16xptr<global, f32>>\n"
      "    %x = load %at, %all, %zeros : tile<16xf32>\n"
      "    %y = add %x, %x : tile<16xf32>\n"
      "    store %at, %y, %all\n"
      "    yield\n"
      "  }\n"
      "  return\n"
      "}\n";
  auto module = attnjit::ir::parseModule(text, "scan.tir");
  if (!module) FAIL(module.diagnostic().str());
  auto& kernel = *(*module)->kernels()[0];
  const std::string before = attnjit::ir::printKernel(kernel);
  PipelineOptions options;
  REQUIRE(runPipeline(kernel, options, nullptr).isOk());
  const std::string after = attnjit::ir::printKernel(kernel);
  CHECK(after.find("_next") == std::string::npos);
  CHECK(after.find("_first") == std::string::npos);
}

TEST_CASE("num_stages outside 1..4, or above 2 without producer warps, is a clear error", "[pipelining]") {
  UnifiedAttentionConfig c = config(ScalarKind::BF16, 8, 2, 64, true);
  c.numStages = 5;
  auto s = c.validate();
  REQUIRE_FALSE(s.isOk());
  CHECK(s.diagnostic().message ==
        "num_stages (5) must be 1 (no pipelining), 2 (next KV tile loaded during this one's compute), or 3-4 with "
        "warp_specialize (producer warps up to num_stages - 1 tiles ahead)");
  c.numStages = 3;
  s = c.validate();
  REQUIRE_FALSE(s.isOk());
  CHECK(s.diagnostic().message ==
        "num_stages (3) above 2 needs warp_specialize: true (without producer warps only the next tile is in "
        "flight)");
  c.warpSpecialize = true;
  CHECK(c.validate().isOk());
  // A hand-written kernel asking for 5 stages gets the pass's error.
  const char* text = "kernel @k(%p: ptr<global, f32>) attributes {num_stages = 5} {\n  return\n}\n";
  auto module = attnjit::ir::parseModule(text, "k.tir");
  if (!module) FAIL(module.diagnostic().str());
  PipelineOptions options;
  auto status = runPipeline(*(*module)->kernels()[0], options, nullptr);
  REQUIRE_FALSE(status.isOk());
  CHECK(status.diagnostic().message.find("num_stages = 5 is unsupported") != std::string::npos);
}
