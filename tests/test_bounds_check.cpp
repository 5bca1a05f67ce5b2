// Bounds-checked kernels (check_bounds): on valid input the checked unified
// attention and reshape_and_cache kernels give exactly the unchecked kernels'
// results (and the float64 reference's); on corrupted block tables, sequence
// lengths, query offsets and slot mappings they record the violation and complete
// without any out-of-bounds access (the interpreter maps each buffer at its exact
// size and fails a run on any access outside one), where the unchecked kernel
// reads outside the cache. Also: ptxas assembles the checked variants, and (on a
// GPU) the op API reports the violation as an error.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <optional>
#include <numeric>
#include <string>
#include <vector>

#include "compiler/validation/AttentionProblem.h"
#include "compiler/validation/CacheWriteProblem.h"
#include "compiler/ops/CompanionOps.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/driver/DeviceTarget.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/passes/Pipeline.h"
#include "compiler/kernels/BoundsCheck.h"
#include "compiler/kernels/CacheWrite.h"
#include "compiler/kernels/KvCacheFormat.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "ir/KernelAttributes.h"
#include "ir/Interpreter.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "tests/test_tools.h"

using namespace attnjit;
using compiler::BatchShape;
using compiler::BoundsViolation;
using compiler::kBoundsRecordInts;
using ir::ScalarKind;

namespace {

using Record = std::vector<int32_t>;

template <typename T>
T* typed(std::vector<uint8_t>& bytes) {
  return reinterpret_cast<T*>(bytes.data());
}

compiler::UnifiedAttentionConfig attentionConfig(bool checked, bool splitKv = false) {
  compiler::UnifiedAttentionConfig c;
  c.dtype = ScalarKind::F16;
  c.numQueryHeads = 4;
  c.numKvHeads = 2;
  c.headSize = 32;
  c.blockSize = 16;
  c.tileSize = 16;
  c.splitKv = splitKv;
  c.checkBounds = checked;
  return c;
}

// Decode rows, a prefill row and a chunked-prefill row; the last sequence spans
// several blocks.
BatchShape attentionShape() {
  BatchShape s;
  s.queryLens = {1, 9, 1, 4};
  s.contextLens = {20, 0, 37, 50};
  s.seed = 7;
  return s;
}

// The layout facts the corruptions and the checked arguments need.
struct AttentionLayout {
  int numSeqs = 0;
  int64_t blockTableStride = 0;
  int64_t numBlocks = 0;
  int64_t numTokens = 0;
};

using AttentionCorruption =
    std::function<void(std::vector<validation::UnifiedAttentionProblem::Buffer>&, const AttentionLayout&)>;

size_t bufferIndex(const std::vector<validation::UnifiedAttentionProblem::Buffer>& buffers, const std::string& label) {
  for (size_t i = 0; i < buffers.size(); ++i)
    if (buffers[i].label == label) return i;
  FAIL("no buffer " << label);
  return 0;
}

struct AttentionOutcome {
  support::Status status = support::Status::ok();  // of the interpreter run
  Record record = Record(kBoundsRecordInts, 0);
  validation::AttentionRunResult result;  // the reference comparison (valid input)
};

// Runs the problem of `config` on `shape` in the interpreter after `corrupt` has
// edited its buffers; a checked kernel gets a zeroed bounds_record and num_blocks,
// num_tokens. With afterPasses the kernel runs as the pass pipeline leaves it.
AttentionOutcome runAttention(const compiler::UnifiedAttentionConfig& config, const BatchShape& shape,
                              const AttentionCorruption& corrupt = {}, bool afterPasses = false) {
  auto problem = validation::UnifiedAttentionProblem::create(config, shape);
  REQUIRE(problem.isOk());
  auto& buffers = (*problem)->buffers();
  const auto& attentionScalars = (*problem)->launches()[0].scalars;
  // Scalars: scale, num_seqs, steps, q strides, [o strides], block_table_stride, kv_stride_block, ...
  const size_t blockTableStrideAt = config.splitKv ? 5 : 7;
  AttentionLayout layout;
  layout.numSeqs = static_cast<int>(shape.queryLens.size());
  layout.blockTableStride = std::get<int64_t>(attentionScalars[blockTableStrideAt]);
  const int64_t kvStrideBlock = std::get<int64_t>(attentionScalars[blockTableStrideAt + 1]);
  const int64_t cacheElementBytes =
      ir::storageBits(compiler::kvCachePointerKind(config.kvCacheFormat, config.dtype)) / 8;
  layout.numBlocks = static_cast<int64_t>(buffers[bufferIndex(buffers, "kv_cache")].bytes.size()) /
                     (kvStrideBlock * cacheElementBytes);
  layout.numTokens = std::accumulate(shape.queryLens.begin(), shape.queryLens.end(), int64_t{0});
  if (corrupt) corrupt(buffers, layout);

  AttentionOutcome outcome;
  ir::InterpreterMemory memory;
  std::vector<uint64_t> addresses;
  for (auto& buffer : buffers) addresses.push_back(memory.map(buffer.bytes.data(), buffer.bytes.size(), buffer.label));
  const uint64_t recordAddress =
      memory.map(outcome.record.data(), outcome.record.size() * sizeof(int32_t), "bounds_record");
  for (const auto& launch : (*problem)->launches()) {
    auto kernel = (*problem)->buildKernel(launch);
    REQUIRE(kernel.isOk());
    if (afterPasses) {
      compiler::PipelineOptions pipeline;
      pipeline.pass.numWarps =
          static_cast<int>(attnjit::ir::kernelAttribute(**kernel, attnjit::ir::KernelAttribute::NumWarps));
      REQUIRE(compiler::runPipeline(**kernel, pipeline, nullptr).isOk());
    }
    const bool checkedLaunch = config.checkBounds && !launch.reduceSegments;
    std::vector<ir::KernelArgument> args;
    for (size_t index : launch.pointers) args.push_back(ir::PointerArg{addresses[index]});
    if (checkedLaunch) args.push_back(ir::PointerArg{recordAddress});
    for (const auto& scalar : launch.scalars) std::visit([&](auto v) { args.push_back(v); }, scalar);
    if (checkedLaunch) {
      args.push_back(layout.numBlocks);
      args.push_back(layout.numTokens);
    }
    outcome.status = ir::interpretKernel(**kernel, {launch.gridX, launch.gridY, launch.gridZ}, args, memory);
    if (!outcome.status) return outcome;
  }
  (*problem)->check(buffers[0].bytes, outcome.result);
  outcome.result.output = buffers[0].bytes;
  return outcome;
}

Record record(BoundsViolation code, int32_t sequence, int32_t index, int32_t value) {
  return {static_cast<int32_t>(code), sequence, index, value};
}

std::string statusText(const support::Status& s) { return s ? std::string("ok") : s.diagnostic().str(); }

}  // namespace

TEST_CASE("checked unified attention names its variant and adds its parameters", "[bounds]") {
  auto unchecked = compiler::buildUnifiedAttention(attentionConfig(false));
  auto checked = compiler::buildUnifiedAttention(attentionConfig(true));
  REQUIRE(unchecked.isOk());
  REQUIRE(checked.isOk());
  // "_checked" joins the name with the other meaning-changing options, before the tuning knobs.
  CHECK((*checked)->name() == "unified_attention_f16_h4kv2_d32_bs16_causal_checked_t16");
  CHECK((*unchecked)->name() == "unified_attention_f16_h4kv2_d32_bs16_causal_t16");
  const ir::Kernel& k = **checked;
  auto paramName = [&](size_t i) { return k.parameter(i)->name(); };
  const size_t n = k.numParameters();
  REQUIRE(n == (*unchecked)->numParameters() + 3);
  // bounds_record follows the last pointer (cu_seqlens_q here), before scale;
  // num_blocks and num_tokens end the list.
  CHECK(paramName(6) == "bounds_record");
  CHECK(paramName(7) == "scale");
  CHECK(paramName(n - 2) == "num_blocks");
  CHECK(paramName(n - 1) == "num_tokens");
  auto split = compiler::buildUnifiedAttention(attentionConfig(true, /*splitKv=*/true));
  REQUIRE(split.isOk());
  const size_t splitN = (*split)->numParameters();
  CHECK((*split)->parameter(splitN - 3)->name() == "segment_tiles");
  CHECK((*split)->parameter(splitN - 1)->name() == "num_tokens");
}

// The checked kernel with a sliding window (its tile range and key floor), an
// int8 per-token-head cache (row-scale loads under the checked mask) and
// per-sequence causal flags.
compiler::UnifiedAttentionConfig modifiedConfig(bool checked, bool splitKv) {
  compiler::UnifiedAttentionConfig c = attentionConfig(checked, splitKv);
  c.slidingWindow = 24;
  c.kvCacheFormat = compiler::KvCacheFormat::Int8PerTokenHead;
  c.perSequenceCausal = true;
  return c;
}

TEST_CASE("checked unified attention on valid input equals the unchecked kernel", "[bounds]") {
  for (bool modified : {false, true}) {
  for (bool splitKv : {false, true}) {
    for (bool afterPasses : {false, true}) {
      INFO("modifiers " << modified << ", split_kv " << splitKv << ", after passes " << afterPasses);
      BatchShape shape = attentionShape();
      auto config = [&](bool checked) {
        return modified ? modifiedConfig(checked, splitKv) : attentionConfig(checked, splitKv);
      };
      const AttentionOutcome plain = runAttention(config(false), shape, {}, afterPasses);
      const AttentionOutcome checked = runAttention(config(true), shape, {}, afterPasses);
      REQUIRE(plain.status.isOk());
      INFO(statusText(checked.status));
      REQUIRE(checked.status.isOk());
      CHECK(checked.record == Record(kBoundsRecordInts, 0));
      INFO(checked.result.detail);
      CHECK(checked.result.passed);
      CHECK(checked.result.maxAbsError <= checked.result.tolerance);
      CHECK(checked.result.output == plain.result.output);
    }
  }
  }
}

TEST_CASE("checked unified attention records a block-table entry outside the cache", "[bounds]") {
  // Sequence 3 (context 50 + 4 queries: blocks 0..3); column 2 is used by every
  // query row of the sequence.
  for (int32_t badEntry : {9999, -3}) {
    for (bool splitKv : {false, true}) {
      INFO("entry " << badEntry << ", split_kv " << splitKv);
      auto corrupt = [&](auto& buffers, const AttentionLayout& layout) {
        typed<int32_t>(buffers[bufferIndex(buffers, "block_tables")].bytes)[3 * layout.blockTableStride + 2] = badEntry;
      };
      const AttentionOutcome plain = runAttention(attentionConfig(false, splitKv), attentionShape(), corrupt);
      CHECK_FALSE(plain.status.isOk());  // the unchecked kernel reads outside kv_cache
      CHECK_THAT(statusText(plain.status), Catch::Contains("out of bounds"));
      const AttentionOutcome checked = runAttention(attentionConfig(true, splitKv), attentionShape(), corrupt);
      INFO(statusText(checked.status));
      REQUIRE(checked.status.isOk());
      CHECK(checked.record == record(BoundsViolation::BlockTableEntry, 3, 2, badEntry));
    }
  }
  // With a sliding window of 24, sequence 3's queries (positions 50..53) see keys
  // 27..53: column 1 (keys 16..31) is still read, column 0 never is.
  for (int column : {0, 1}) {
    INFO("window, column " << column);
    auto corrupt = [&](auto& buffers, const AttentionLayout& layout) {
      typed<int32_t>(buffers[bufferIndex(buffers, "block_tables")].bytes)[3 * layout.blockTableStride + column] = 9999;
    };
    const AttentionOutcome checked = runAttention(modifiedConfig(true, false), attentionShape(), corrupt);
    INFO(statusText(checked.status));
    REQUIRE(checked.status.isOk());
    CHECK(checked.record == (column == 0 ? Record(kBoundsRecordInts, 0)
                                         : record(BoundsViolation::BlockTableEntry, 3, 1, 9999)));
  }
}

TEST_CASE("checked unified attention with prefetch_scores: same bits, bad entries recorded and never read",
          "[bounds]") {
  // The next tile's K is looked up an iteration early; its blocks' validity
  // masks that load, and each tile's own masks its scores.
  for (bool modified : {false, true}) {
    auto config = [&](bool checked) {
      compiler::UnifiedAttentionConfig c = modified ? modifiedConfig(checked, false) : attentionConfig(checked, false);
      c.prefetchScores = true;
      return c;
    };
    const AttentionOutcome plain = runAttention(config(false), attentionShape(), {}, /*afterPasses=*/true);
    const AttentionOutcome checked = runAttention(config(true), attentionShape(), {}, /*afterPasses=*/true);
    REQUIRE(plain.status.isOk());
    INFO(statusText(checked.status));
    REQUIRE(checked.status.isOk());
    CHECK(checked.record == Record(kBoundsRecordInts, 0));
    CHECK(checked.result.passed);
    CHECK(checked.result.output == plain.result.output);
  }
  auto corrupt = [](auto& buffers, const AttentionLayout& layout) {
    typed<int32_t>(buffers[bufferIndex(buffers, "block_tables")].bytes)[3 * layout.blockTableStride + 2] = 9999;
  };
  compiler::UnifiedAttentionConfig c = attentionConfig(true, false);
  c.prefetchScores = true;
  const AttentionOutcome checked = runAttention(c, attentionShape(), corrupt);
  INFO(statusText(checked.status));
  REQUIRE(checked.status.isOk());
  CHECK(checked.record == record(BoundsViolation::BlockTableEntry, 3, 2, 9999));
}

TEST_CASE("checked unified attention records a sequence length beyond its block table", "[bounds]") {
  for (bool splitKv : {false, true}) {
    INFO("split_kv " << splitKv);
    int32_t tooLong = 0;
    auto corrupt = [&](auto& buffers, const AttentionLayout& layout) {
      tooLong = static_cast<int32_t>(layout.blockTableStride * 16 + 1);
      typed<int32_t>(buffers[bufferIndex(buffers, "seq_lens")].bytes)[layout.numSeqs - 1] = tooLong;
    };
    // The unchecked 2D kernel walks past the last row of block_tables (split-KV
    // launches only as many segments as the real lengths need).
    const AttentionOutcome plain = runAttention(attentionConfig(false, splitKv), attentionShape(), corrupt);
    if (!splitKv) CHECK_FALSE(plain.status.isOk());
    const AttentionOutcome checked = runAttention(attentionConfig(true, splitKv), attentionShape(), corrupt);
    INFO(statusText(checked.status));
    REQUIRE(checked.status.isOk());
    CHECK(checked.record == record(BoundsViolation::SeqLenBeyondBlockTable, 3, 3, tooLong));
  }
}

TEST_CASE("checked unified attention records a sequence length below its query length", "[bounds]") {
  auto corrupt = [&](auto& buffers, const AttentionLayout&) {
    typed<int32_t>(buffers[bufferIndex(buffers, "seq_lens")].bytes)[1] = 5;  // 9 queries
  };
  const AttentionOutcome checked = runAttention(attentionConfig(true), attentionShape(), corrupt);
  INFO(statusText(checked.status));
  REQUIRE(checked.status.isOk());
  CHECK(checked.record == record(BoundsViolation::SeqLenBelowQueryLen, 1, 1, 5));
}

TEST_CASE("checked unified attention records bad query offsets", "[bounds]") {
  // cu_seqlens_q = [0, 1, 10, 11, 15] for query lens 1, 9, 1, 4.
  SECTION("decreasing") {
    auto corrupt = [&](auto& buffers, const AttentionLayout&) {
      typed<int32_t>(buffers[bufferIndex(buffers, "cu_seqlens_q")].bytes)[3] = 8;  // 10 -> 8 -> 15
    };
    const AttentionOutcome checked = runAttention(attentionConfig(true), attentionShape(), corrupt);
    INFO(statusText(checked.status));
    REQUIRE(checked.status.isOk());
    CHECK(checked.record == record(BoundsViolation::QueryOffsetsDecreasing, 2, 3, 8));
  }
  SECTION("past num_tokens") {
    auto corrupt = [&](auto& buffers, const AttentionLayout&) {
      typed<int32_t>(buffers[bufferIndex(buffers, "cu_seqlens_q")].bytes)[4] = 40;
    };
    const AttentionOutcome plain = runAttention(attentionConfig(false), attentionShape(), corrupt);
    CHECK_FALSE(plain.status.isOk());  // q rows past the end
    const AttentionOutcome checked = runAttention(attentionConfig(true), attentionShape(), corrupt);
    INFO(statusText(checked.status));
    REQUIRE(checked.status.isOk());
    CHECK(checked.record == record(BoundsViolation::QueryOffsetOutOfRange, 3, 4, 40));
  }
  SECTION("first offset not zero") {
    auto corrupt = [&](auto& buffers, const AttentionLayout&) {
      typed<int32_t>(buffers[bufferIndex(buffers, "cu_seqlens_q")].bytes)[0] = 1;
    };
    const AttentionOutcome checked = runAttention(attentionConfig(true), attentionShape(), corrupt);
    INFO(statusText(checked.status));
    REQUIRE(checked.status.isOk());
    CHECK(checked.record == record(BoundsViolation::QueryOffsetOutOfRange, 0, 0, 1));
  }
}

namespace {

compiler::CacheWriteConfig cacheWriteConfig(bool checked, compiler::KvCacheFormat format) {
  compiler::CacheWriteConfig c;
  c.dtype = ScalarKind::F16;
  c.cacheFormat = format;
  c.numKvHeads = 2;
  c.headSize = 32;
  c.blockSize = 16;
  c.checkBounds = checked;
  return c;
}

struct CacheWriteOutcome {
  support::Status status = support::Status::ok();
  Record record = Record(kBoundsRecordInts, 0);
  validation::AttentionRunResult result;
  std::vector<uint8_t> cache;  // kv_cache after the run
};

// Runs reshape_and_cache on the problem's buffers with slot_mapping[token] set to
// `slot` first (when token >= 0).
CacheWriteOutcome runCacheWrite(const compiler::CacheWriteConfig& config, int token = -1, int64_t slot = 0,
                                int64_t* numSlots = nullptr) {
  auto problem = validation::CacheWriteProblem::create(config, attentionShape());
  REQUIRE(problem.isOk());
  std::vector<validation::KernelProblem::Buffer> buffers = (*problem)->buffers();
  const auto& scalars = (*problem)->scalarArguments();
  // Scalars: key strides (2), value strides (2), kv_stride_block, ...
  const int64_t kvStrideBlock = std::get<int64_t>(scalars[4]);
  const int64_t numBlocks = static_cast<int64_t>(buffers[2].bytes.size()) /
                            (kvStrideBlock * (ir::storageBits(config.cachePointerElement()) / 8));
  if (numSlots) *numSlots = numBlocks * config.blockSize;
  REQUIRE(buffers[3].label == "slot_mapping");
  if (token >= 0) typed<int64_t>(buffers[3].bytes)[token] = slot;

  CacheWriteOutcome outcome;
  ir::InterpreterMemory memory;
  std::vector<ir::KernelArgument> args;
  for (auto& buffer : buffers)
    args.push_back(ir::PointerArg{memory.map(buffer.bytes.data(), buffer.bytes.size(), buffer.label)});
  if (config.checkBounds)
    args.push_back(
        ir::PointerArg{memory.map(outcome.record.data(), outcome.record.size() * sizeof(int32_t), "bounds_record")});
  for (const auto& scalar : scalars) std::visit([&](auto v) { args.push_back(v); }, scalar);
  if (config.checkBounds) args.push_back(numBlocks);
  auto kernel = compiler::buildCacheWrite(config);
  REQUIRE(kernel.isOk());
  const auto grid = (*problem)->grid();
  outcome.status = ir::interpretKernel(**kernel, {grid.x, grid.y, grid.z}, args, memory);
  if (!outcome.status) return outcome;
  (*problem)->check(buffers, outcome.result);
  outcome.cache = buffers[2].bytes;
  return outcome;
}

}  // namespace

TEST_CASE("checked reshape_and_cache on valid input equals the unchecked kernel", "[bounds]") {
  for (auto format : {compiler::KvCacheFormat::Auto, compiler::KvCacheFormat::Int8PerTokenHead}) {
    INFO(compiler::kvCacheFormatName(format));
    const CacheWriteOutcome plain = runCacheWrite(cacheWriteConfig(false, format));
    const CacheWriteOutcome checked = runCacheWrite(cacheWriteConfig(true, format));
    REQUIRE(plain.status.isOk());
    INFO(statusText(checked.status));
    REQUIRE(checked.status.isOk());
    CHECK(checked.record == Record(kBoundsRecordInts, 0));
    INFO(checked.result.detail);
    CHECK(checked.result.passed);
    CHECK(checked.cache == plain.cache);
  }
}

TEST_CASE("checked reshape_and_cache records and skips a slot outside the cache", "[bounds]") {
  const auto format = compiler::KvCacheFormat::Auto;
  int64_t numSlots = 0;
  runCacheWrite(cacheWriteConfig(true, format), -1, 0, &numSlots);
  REQUIRE(numSlots > 0);
  for (int64_t bad : {numSlots, numSlots + 1000, int64_t{-2}}) {
    INFO("slot " << bad);
    const CacheWriteOutcome plain = runCacheWrite(cacheWriteConfig(false, format), 5, bad);
    if (bad >= numSlots) {
      CHECK_FALSE(plain.status.isOk());
      CHECK_THAT(statusText(plain.status), Catch::Contains("out of bounds"));
    }
    const CacheWriteOutcome checked = runCacheWrite(cacheWriteConfig(true, format), 5, bad);
    INFO(statusText(checked.status));
    REQUIRE(checked.status.isOk());
    CHECK(checked.record == record(BoundsViolation::SlotMapping, -1, 5, static_cast<int32_t>(bad)));
  }
}

TEST_CASE("bounds violations read as messages naming the index", "[bounds]") {
  compiler::BoundsCheckContext context{"paged attention", 512, 16, 10, 40};
  CHECK(compiler::describeBoundsViolation({5, 3, 17, 9999}, context) ==
        "paged attention: bounds check failed: block_tables[3][17] = 9999 is outside the cache's 512 blocks "
        "(sequence 3)");
  CHECK(compiler::describeBoundsViolation({4, 2, 2, 5000}, context) ==
        "paged attention: bounds check failed: seq_lens[2] = 5000 exceeds block_table_stride 10 x block_size 16");
  CHECK_THAT(compiler::describeBoundsViolation({1, 3, 4, 99}, context),
             Catch::Contains("cu_seqlens_q[4] = 99 is outside [0, num_tokens 40]"));
  CHECK_THAT(compiler::describeBoundsViolation({2, 2, 3, 8}, context),
             Catch::Contains("cu_seqlens_q[3] = 8 is less than cu_seqlens_q[2]"));
  CHECK(compiler::describeBoundsViolation({0, 0, 0, 0}, context).empty());
  compiler::BoundsCheckContext write{"reshape_and_cache", 8, 16, 0, 0};
  CHECK_THAT(compiler::describeBoundsViolation({6, -1, 12, 200}, write),
             Catch::StartsWith("reshape_and_cache: bounds check failed: slot_mapping[12] = 200 is outside the "
                               "cache's 128 slots"));
}

TEST_CASE("ptxas assembles the checked kernels", "[bounds][codegen]") {
  if (!tests::havePtxas()) {
    WARN("skipped: ptxas is not on the PATH");
    return;
  }
  // compileKernel runs the passes on the kernel it is given: a fresh one per target.
  auto build = [](int which) -> support::Expected<std::unique_ptr<ir::Kernel>> {
    if (which == 2) return compiler::buildCacheWrite(cacheWriteConfig(true, compiler::KvCacheFormat::Int8PerTokenHead));
    auto config = attentionConfig(true, /*splitKv=*/which == 1);
    config.dtype = ScalarKind::BF16;
    config.headSize = 128;
    return compiler::buildUnifiedAttention(config);
  };
  for (int which = 0; which < 3; ++which) {
    for (const char* arch : {"sm_80", "sm_90a"}) {
      auto kernel = build(which);
      REQUIRE(kernel.isOk());
      INFO((*kernel)->name() << " for " << arch);
      compiler::CompileOptions options;
      options.target = arch;
      auto compiled = compiler::compileKernel(**kernel, options);
      INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
      REQUIRE(compiled.isOk());
      std::string log;
      const bool assembled = tests::assemblesWithPtxas(compiled->ptx, arch, &log);
      INFO(log);
      CHECK(assembled);
    }
  }
}

namespace {

ops::PagedAttentionParams checkedParams() {
  ops::PagedAttentionParams p;
  p.dtype = ScalarKind::BF16;
  p.numQueryHeads = 8;
  p.numKvHeads = 2;
  p.headSize = 128;
  p.blockSize = 16;
  p.numSeqs = 2;
  p.numTokens = 2;
  p.maxQueryLen = 1;
  p.scale = 0.125f;
  p.out = p.q = p.kvCache = p.blockTables = p.seqLens = p.cuSeqlensQ = 0x10000;
  p.qStrideToken = p.oStrideToken = 8 * 128;
  p.qStrideHead = p.oStrideHead = 128;
  p.blockTableStride = 4;
  p.kvStrideHead = 128;
  p.kvStrideToken = 2 * 128;
  p.kvStrideKv = 16 * 2 * 128;
  p.kvStrideBlock = 2 * p.kvStrideKv;
  p.checkBounds = true;
  return p;
}

}  // namespace

TEST_CASE("checked op calls need the cache's block count", "[bounds][op]") {
  ops::PagedAttentionParams p = checkedParams();
  const support::Status missing = ops::validatePagedAttention(p);
  REQUIRE_FALSE(missing.isOk());
  CHECK_THAT(missing.diagnostic().message, Catch::Contains("num_blocks (0) must be the KV cache's block count"));
  p.numBlocks = 64;
  CHECK(ops::validatePagedAttention(p).isOk());
  CHECK_THAT(ops::selectPagedAttentionVariant(p).kernelName(), Catch::Contains("_checked"));

  ops::CacheWriteParams w;
  w.dtype = ScalarKind::BF16;
  w.numKvHeads = 2;
  w.headSize = 128;
  w.blockSize = 16;
  w.numTokens = 3;
  w.key = w.value = w.kvCache = w.slotMapping = 0x10000;
  w.keyStrideToken = w.valueStrideToken = 256;
  w.keyStrideHead = w.valueStrideHead = 128;
  w.kvStrideHead = 128;
  w.kvStrideToken = 256;
  w.kvStrideKv = 16 * 256;
  w.kvStrideBlock = 2 * w.kvStrideKv;
  w.checkBounds = true;
  const support::Status writeMissing = ops::validateCacheWrite(w);
  REQUIRE_FALSE(writeMissing.isOk());
  CHECK_THAT(writeMissing.diagnostic().message, Catch::Contains("num_blocks (0)"));
  w.numBlocks = 8;
  CHECK(ops::validateCacheWrite(w).isOk());
  CHECK_THAT(ops::selectCacheWriteVariant(w).kernelName(), Catch::EndsWith("_checked"));
}

namespace {

struct DeviceProblem {
  std::unique_ptr<validation::UnifiedAttentionProblem> problem;
  std::vector<runtime::DeviceBuffer> device;
  std::optional<runtime::DeviceBuffer> workspace;
  ops::PagedAttentionParams params;
};

// The problem of attentionConfig's shape (bf16, D 128) on device buffers, with the
// op parameters of a checked call; `corrupt` edits the host buffers first.
DeviceProblem deviceProblem(const std::vector<int>& queryLens, const std::vector<int>& contextLens, bool split,
                            const AttentionCorruption& corrupt) {
  compiler::UnifiedAttentionConfig config;
  config.dtype = ScalarKind::BF16;
  BatchShape shape;
  shape.queryLens = queryLens;
  shape.contextLens = contextLens;
  shape.seed = 5;
  auto created = validation::UnifiedAttentionProblem::create(config, shape);
  REQUIRE(created.isOk());
  DeviceProblem d;
  d.problem = std::move(*created);
  auto& buffers = d.problem->buffers();
  const auto& s = d.problem->scalarArguments();
  auto integer = [&](size_t i) { return std::get<int64_t>(s[i]); };
  AttentionLayout layout;
  layout.numSeqs = static_cast<int>(queryLens.size());
  layout.blockTableStride = integer(7);
  layout.numBlocks = static_cast<int64_t>(buffers[2].bytes.size()) / (integer(8) * 2);
  layout.numTokens = std::accumulate(queryLens.begin(), queryLens.end(), int64_t{0});
  if (corrupt) corrupt(buffers, layout);
  for (auto& buffer : buffers) {
    auto b = runtime::DeviceBuffer::allocate(std::max<size_t>(buffer.bytes.size(), 16));
    REQUIRE(b.isOk());
    REQUIRE(b->copyFromHost(buffer.bytes.data(), buffer.bytes.size()).isOk());
    d.device.push_back(std::move(*b));
  }
  ops::PagedAttentionParams& p = d.params;
  p.dtype = config.dtype;
  p.numQueryHeads = config.numQueryHeads;
  p.numKvHeads = config.numKvHeads;
  p.headSize = config.headSize;
  p.blockSize = config.blockSize;
  p.numSeqs = layout.numSeqs;
  p.numTokens = layout.numTokens;
  p.maxQueryLen = *std::max_element(queryLens.begin(), queryLens.end());
  p.maxSeqLen = 0;
  for (size_t i = 0; i < queryLens.size(); ++i) p.maxSeqLen = std::max(p.maxSeqLen, queryLens[i] + contextLens[i]);
  p.scale = static_cast<float>(std::get<double>(s[0]));
  p.out = d.device[0].address();
  p.q = d.device[1].address();
  p.kvCache = d.device[2].address();
  p.blockTables = d.device[3].address();
  p.seqLens = d.device[4].address();
  p.cuSeqlensQ = d.device[5].address();
  p.qStrideToken = integer(3);
  p.qStrideHead = integer(4);
  p.oStrideToken = integer(5);
  p.oStrideHead = integer(6);
  p.blockTableStride = integer(7);
  p.kvStrideBlock = integer(8);
  p.kvStrideKv = integer(9);
  p.kvStrideToken = integer(10);
  p.kvStrideHead = integer(11);
  p.checkBounds = true;
  p.numBlocks = static_cast<int>(layout.numBlocks);
  if (split) {
    p.numSms = 132;  // the H200's: the split plan does not depend on the test machine
    const uint64_t bytes = ops::pagedAttentionWorkspaceBytes(p.numTokens, p.numQueryHeads, p.headSize, p.maxSeqLen).value();
    REQUIRE(bytes > 0);
    auto w = runtime::DeviceBuffer::allocate(bytes);
    REQUIRE(w.isOk());
    d.workspace = std::move(*w);
    p.workspace = d.workspace->address();
    p.workspaceBytes = bytes;
    REQUIRE(ops::selectPagedAttentionVariant(p).splitKv);
  }
  return d;
}

// Runs the checked call on valid input: it succeeds and matches the reference.
void checkMatchesReference(DeviceProblem& d) {
  const support::Status status = ops::pagedAttention(d.params);
  INFO((status ? std::string() : status.diagnostic().str()));
  REQUIRE(status.isOk());
  std::vector<uint8_t> output(d.problem->buffers()[0].bytes.size());
  REQUIRE(d.device[0].copyToHost(output.data(), output.size()).isOk());
  validation::AttentionRunResult result;
  d.problem->check(output, result);
  INFO("max abs error " << result.maxAbsError << " (tolerance " << result.tolerance << "); " << result.detail);
  CHECK(result.passed);
}

}  // namespace

TEST_CASE("GPU checked paged attention reports corrupted inputs", "[gpu][bounds]") {
  if (!tests::gpuPresent()) return;
  REQUIRE(runtime::activatePrimaryContext(0).isOk());
  const std::vector<int> queryLens = {1, 1, 1, 1}, contextLens = {3000, 17, 2100, 1024};
  for (bool split : {false, true}) {
    INFO("split_kv " << split);
    // Valid input: the checked kernel's output matches the reference.
    {
      DeviceProblem d = deviceProblem(queryLens, contextLens, split, {});
      checkMatchesReference(d);
    }
    // A block-table entry past the cache (sequence 2, column 100 of its 132 blocks).
    int64_t numBlocks = 0;
    DeviceProblem bad = deviceProblem(queryLens, contextLens, split, [&](auto& buffers, const AttentionLayout& l) {
      numBlocks = l.numBlocks;
      typed<int32_t>(buffers[3].bytes)[2 * l.blockTableStride + 100] = 99999;
    });
    const support::Status status = ops::pagedAttention(bad.params);
    REQUIRE_FALSE(status.isOk());
    CHECK(status.diagnostic().message ==
          "paged attention: bounds check failed: block_tables[2][100] = 99999 is outside the cache's " +
              std::to_string(numBlocks) + " blocks (sequence 2)");
    // A sequence length past its block-table row.
    int64_t stride = 0;
    DeviceProblem longSeq = deviceProblem(queryLens, contextLens, split, [&](auto& buffers, const AttentionLayout& l) {
      stride = l.blockTableStride;
      typed<int32_t>(buffers[4].bytes)[1] = 50000;
    });
    const support::Status longStatus = ops::pagedAttention(longSeq.params);
    REQUIRE_FALSE(longStatus.isOk());
    CHECK(longStatus.diagnostic().message == "paged attention: bounds check failed: seq_lens[1] = 50000 exceeds "
                                             "block_table_stride " + std::to_string(stride) + " x block_size 16");
  }
  // Decreasing query offsets (cu_seqlens_q = [0, 1, 2, 3, 4] -> [0, 1, 0, 3, 4]).
  DeviceProblem decreasing = deviceProblem(queryLens, contextLens, false, [&](auto& buffers, const AttentionLayout&) {
    typed<int32_t>(buffers[5].bytes)[2] = 0;
  });
  const support::Status status = ops::pagedAttention(decreasing.params);
  REQUIRE_FALSE(status.isOk());
  CHECK_THAT(status.diagnostic().message,
             Catch::StartsWith("paged attention: bounds check failed: cu_seqlens_q[2] = 0"));
  // A prefill-like batch takes the op's prefill tiling (on warpgroup-MMA devices
  // with producer warps, whose copies carry the checked kernel's block masks).
  {
    const std::vector<int> prefillLens = {300, 1, 77, 129}, prefillContexts = {0, 900, 40, 2000};
    DeviceProblem d = deviceProblem(prefillLens, prefillContexts, false, {});
    const compiler::UnifiedAttentionConfig chosen = ops::selectPagedAttentionVariant(d.params);
    INFO(chosen.kernelName());
    if (compiler::opDeviceFacts().warpgroupMma) CHECK(chosen.warpSpecialize);
    checkMatchesReference(d);
    int64_t numBlocks = 0;
    DeviceProblem bad = deviceProblem(prefillLens, prefillContexts, false,
                                      [&](auto& buffers, const AttentionLayout& l) {
                                        numBlocks = l.numBlocks;
                                        typed<int32_t>(buffers[3].bytes)[3 * l.blockTableStride + 60] = -7;
                                      });
    const support::Status badStatus = ops::pagedAttention(bad.params);
    REQUIRE_FALSE(badStatus.isOk());
    CHECK(badStatus.diagnostic().message ==
          "paged attention: bounds check failed: block_tables[3][60] = -7 is outside the cache's " +
              std::to_string(numBlocks) + " blocks (sequence 3)");
  }
  // The context still works after a reported violation.
  DeviceProblem valid = deviceProblem(queryLens, contextLens, false, {});
  CHECK(ops::pagedAttention(valid.params).isOk());
  CHECK(runtime::synchronizeContext().isOk());
}

TEST_CASE("GPU checked reshape_and_cache reports a slot outside the cache", "[gpu][bounds]") {
  if (!tests::gpuPresent()) return;
  REQUIRE(runtime::activatePrimaryContext(0).isOk());
  const auto config = cacheWriteConfig(true, compiler::KvCacheFormat::Auto);
  auto problem = validation::CacheWriteProblem::create(config, attentionShape());
  REQUIRE(problem.isOk());
  auto buffers = (*problem)->buffers();
  const auto& s = (*problem)->scalarArguments();
  auto integer = [&](size_t i) { return std::get<int64_t>(s[i]); };
  const int64_t numBlocks = static_cast<int64_t>(buffers[2].bytes.size()) / (integer(4) * 2);
  const int64_t numTokens = static_cast<int64_t>(buffers[3].bytes.size() / sizeof(int64_t));
  for (bool corrupt : {false, true}) {
    INFO("corrupt " << corrupt);
    auto host = buffers;
    if (corrupt) typed<int64_t>(host[3].bytes)[5] = numBlocks * 16 + 7;
    std::vector<runtime::DeviceBuffer> device;
    for (auto& buffer : host) {
      auto b = runtime::DeviceBuffer::allocate(std::max<size_t>(buffer.bytes.size(), 16));
      REQUIRE(b.isOk());
      REQUIRE(b->copyFromHost(buffer.bytes.data(), buffer.bytes.size()).isOk());
      device.push_back(std::move(*b));
    }
    ops::CacheWriteParams p;
    p.dtype = config.dtype;
    p.cacheFormat = config.cacheFormat;
    p.numKvHeads = config.numKvHeads;
    p.headSize = config.headSize;
    p.blockSize = config.blockSize;
    p.numTokens = numTokens;
    p.key = device[0].address();
    p.value = device[1].address();
    p.kvCache = device[2].address();
    p.slotMapping = device[3].address();
    p.keyStrideToken = integer(0);
    p.keyStrideHead = integer(1);
    p.valueStrideToken = integer(2);
    p.valueStrideHead = integer(3);
    p.kvStrideBlock = integer(4);
    p.kvStrideKv = integer(5);
    p.kvStrideToken = integer(6);
    p.kvStrideHead = integer(7);
    p.checkBounds = true;
    p.numBlocks = static_cast<int>(numBlocks);
    const support::Status status = ops::cacheWrite(p);
    if (!corrupt) {
      INFO((status ? std::string() : status.diagnostic().str()));
      REQUIRE(status.isOk());
      for (size_t i = 0; i < host.size(); ++i)
        REQUIRE(device[i].copyToHost(host[i].bytes.data(), host[i].bytes.size()).isOk());
      validation::AttentionRunResult result;
      (*problem)->check(host, result);
      INFO(result.detail);
      CHECK(result.passed);
    } else {
      REQUIRE_FALSE(status.isOk());
      CHECK_THAT(status.diagnostic().message,
                 Catch::StartsWith("cache write: bounds check failed: slot_mapping[5] = " +
                                   std::to_string(numBlocks * 16 + 7) + " is outside the cache's " +
                                   std::to_string(numBlocks * 16) + " slots"));
    }
  }
}
