// The unified paged attention kernel (2D launch) run on the CPU interpreter and
// compared with the float64 reference, plus its configuration and shape handling.
#include <catch2/catch.hpp>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <thread>
#include <string>

#include "compiler/validation/AttentionProblem.h"
#include "compiler/validation/HostBudget.h"
#include "support/ParallelFor.h"
#include "ir/Interpreter.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/validation/VariantRuns.h"
#include "compiler/spec/Spec.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "ir/KernelAttributes.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "test_paths.h"

namespace validation = attnjit::validation;

using attnjit::compiler::BatchShape;
using attnjit::compiler::buildUnifiedAttention;
using attnjit::validation::runUnifiedAttentionInterpreted;
using attnjit::compiler::UnifiedAttentionConfig;
using attnjit::compiler::unifiedAttentionGridX;
using attnjit::ir::ScalarKind;

namespace {

UnifiedAttentionConfig makeConfig(ScalarKind dtype, int hq, int hkv, int headSize, int blockSize, bool causal) {
  UnifiedAttentionConfig c;
  c.dtype = dtype;
  c.numQueryHeads = hq;
  c.numKvHeads = hkv;
  c.headSize = headSize;
  c.blockSize = blockSize;
  c.causal = causal;
  return c;
}

// A mixed batch: two decode rows (query_len 1), a prefill row without context, a
// chunked-prefill row and a short multi-token row over a long context (5 KV tiles of
// 32); no length is a multiple of a tile or block size.
BatchShape mixedBatch(uint64_t seed) {
  BatchShape s;
  s.queryLens = {1, 11, 1, 6, 3};
  s.contextLens = {37, 0, 18, 45, 130};
  s.seed = seed;
  return s;
}

void runAndCheck(const UnifiedAttentionConfig& config, const BatchShape& shape, bool afterPasses = false) {
  INFO(config.kernelName() << " on " << shape.str() << (afterPasses ? " after the passes" : ""));
  auto result = runUnifiedAttentionInterpreted(config, shape, afterPasses);
  if (!result) FAIL(result.diagnostic().str());
  INFO("max abs error " << result->maxAbsError << " (tolerance " << result->tolerance << "), max rel error "
                        << result->maxRelError << "; " << result->detail);
  CHECK(result->passed);
  CHECK(result->maxAbsError <= result->tolerance);
  CHECK(result->gridY == config.numKvHeads);
}

std::string validationError(const UnifiedAttentionConfig& c) {
  auto s = c.validate();
  return s ? std::string("ok") : s.diagnostic().message;
}

}  // namespace

TEST_CASE("unified attention: derived tile sizes follow vLLM", "[attention]") {
  auto c = makeConfig(ScalarKind::BF16, 32, 8, 128, 16, true);
  CHECK(c.blockM() == 16);
  CHECK(c.blockQ() == 4);
  CHECK(c.headSizePadded() == 128);
  c.numQueryHeads = 64;
  c.numKvHeads = 2;  // 32 query heads per KV head: BLOCK_M grows to hold them
  CHECK(c.blockM() == 32);
  CHECK(c.blockQ() == 1);
  c.numQueryHeads = 12;
  c.numKvHeads = 2;  // 6 per KV head
  CHECK(c.blockM() == 16);
  CHECK(c.blockQ() == 2);
  c.headSize = 80;
  CHECK(c.headSizePadded() == 128);
  c.headSize = 96;
  CHECK(c.headSizePadded() == 128);
  c.headSize = 32;
  CHECK(c.headSizePadded() == 32);
  // vLLM: num_seqs + num_tokens // BLOCK_Q.
  CHECK(unifiedAttentionGridX(c, 3, 58) == 3 + 29);
}

TEST_CASE("unified attention: decode batches find their sequences without the search", "[attention]") {
  // One query token per sequence: the harness passes seq_search_steps -1, as
  // the op does, and each program computes its sequence as b - (b + 1) /
  // (BLOCK_Q + 1). Nine sequences leave empty q blocks between them at BLOCK_Q 4
  // (blocks 4 and 9) and 2; at 1 every other block is empty.
  BatchShape decode;
  decode.queryLens = std::vector<int>(9, 1);
  decode.contextLens = {5, 40, 1, 77, 16, 0, 33, 64, 9};
  decode.seed = 11;
  for (const auto& [hq, hkv] : {std::pair{8, 2}, std::pair{12, 6}, std::pair{4, 4}, std::pair{16, 1}}) {
    const UnifiedAttentionConfig config = makeConfig(ScalarKind::F16, hq, hkv, 32, 16, true);
    INFO("block_q " << config.blockQ());
    runAndCheck(config, decode);
  }
}

TEST_CASE("unified attention: kernel names identify the variant", "[attention]") {
  auto c = makeConfig(ScalarKind::BF16, 32, 8, 128, 16, true);
  CHECK(c.kernelName() == "unified_attention_bf16_h32kv8_d128_bs16_causal");
  c = makeConfig(ScalarKind::F16, 4, 4, 80, 32, false);
  CHECK(c.kernelName() == "unified_attention_f16_h4kv4_d80_bs32_noncausal");
  c.tileSize = 64;
  c.numWarps = 8;
  CHECK(c.kernelName() == "unified_attention_f16_h4kv4_d80_bs32_noncausal_t64_w8");
}

TEST_CASE("unified attention: validate names the bad field and value", "[attention]") {
  auto ok = makeConfig(ScalarKind::BF16, 32, 8, 128, 16, true);
  CHECK(validationError(ok) == "ok");
  auto c = ok;
  c.numQueryHeads = 30;
  CHECK(validationError(c) == "num_query_heads (30) is not a multiple of num_kv_heads (8)");
  c = ok;
  c.numKvHeads = 0;
  CHECK(validationError(c) == "num_kv_heads (0) must be between 1 and 1024");
  c = ok;
  c.kvCacheFormat = attnjit::compiler::KvCacheFormat::Int4PerTokenHead;
  c.kvScaleLayout = attnjit::compiler::KvScaleLayout::Separate;
  c.overlapSoftmax = true;
  CHECK(validationError(c) ==
        "overlap_softmax is unsupported with kv_cache_dtype int4_per_token_head and kv_scales separate: a lagging V "
        "tile would need its own tile's zero points");
  c = ok;
  c.numQueryHeads = 0;
  CHECK(validationError(c) == "num_query_heads (0) must be between 1 and 1024");
  // Sizes are checked before anything is derived from them (a next power of
  // two of 2^30 + 1 would overflow the tile rows).
  c = ok;
  c.numQueryHeads = (1 << 30) + 1;
  c.numKvHeads = 1;
  CHECK(validationError(c) == "num_query_heads (1073741825) must be between 1 and 1024");
  c.numQueryHeads = 512;
  CHECK(validationError(c) ==
        "num_query_heads / num_kv_heads (512) must be at most 256 (one program's query tile packs them)");
  c = ok;
  c.numKvHeads = 131072;
  CHECK(validationError(c) == "num_kv_heads (131072) must be between 1 and 1024");
  c = ok;
  c.dtype = ScalarKind::F8E4M3;
  CHECK(validationError(c) == "dtype (f8e4m3) is not supported; use f32, f16 or bf16");
  c = ok;
  c.headSize = 0;
  CHECK(validationError(c) == "head_size (0) must be between 1 and 1024");
  c.headSize = 1025;
  CHECK(validationError(c) == "head_size (1025) must be between 1 and 1024");
  c = ok;
  c.blockSize = 0;
  CHECK(validationError(c) == "block_size (0) must be between 1 and 256");
  c.blockSize = 257;
  CHECK(validationError(c) == "block_size (257) must be between 1 and 256");
  c = ok;
  c.tileSize = 48;
  CHECK(validationError(c) == "tile_size (48) must be a power of two between 16 and 256");
  c.tileSize = 8;
  CHECK(validationError(c) == "tile_size (8) must be a power of two between 16 and 256");
  c = ok;
  c.numWarps = 3;
  CHECK(validationError(c) == "num_warps (3) must be a power of two between 1 and 16");
  c.numWarps = 32;
  CHECK(validationError(c) == "num_warps (32) must be a power of two between 1 and 16");
  // Accepted edge values.
  c = ok;
  c.headSize = 33;
  c.blockSize = 256;
  c.tileSize = 16;
  c.numWarps = 1;
  CHECK(validationError(c) == "ok");

  c = ok;
  c.numQueryHeads = 30;
  auto built = buildUnifiedAttention(c);
  REQUIRE_FALSE(built);
  CHECK(built.diagnostic().message == "num_query_heads (30) is not a multiple of num_kv_heads (8)");
}

TEST_CASE("unified attention: the built kernel records its interface", "[attention]") {
  auto c = makeConfig(ScalarKind::F16, 8, 2, 80, 32, true);
  c.numWarps = 8;
  auto built = buildUnifiedAttention(c);
  if (!built) FAIL(built.diagnostic().str());
  const attnjit::ir::Kernel& kernel = **built;
  CHECK(kernel.name() == c.kernelName());
  CHECK(attnjit::ir::kernelAttribute(kernel, attnjit::ir::KernelAttribute::NumWarps) == 8);
  REQUIRE(kernel.numParameters() == 18);
  CHECK(kernel.parameter(0)->name() == "out");
  CHECK(kernel.parameter(0)->type() == attnjit::ir::Type::pointer(ScalarKind::F16));
  CHECK(kernel.parameterAttrs(0).getInt("align") == 16);
  CHECK(kernel.parameter(6)->name() == "scale");
  CHECK(kernel.parameter(17)->name() == "kv_stride_head");
  auto constant = [&](const char* name) {
    const auto* cx = kernel.findConstexpr(name);
    REQUIRE(cx != nullptr);
    return std::get<int64_t>(cx->value);
  };
  CHECK(constant("BLOCK_M") == 16);
  CHECK(constant("BLOCK_Q") == 4);
  CHECK(constant("HEAD_SIZE") == 80);
  CHECK(constant("HEAD_SIZE_PADDED") == 128);
  CHECK(constant("TILE_SIZE") == 32);
  CHECK(constant("BLOCK_SIZE") == 32);
  CHECK(constant("NUM_QUERIES_PER_KV") == 4);
  CHECK(verifyKernel(kernel).isOk());
}

TEST_CASE("unified attention: the kernel prints and parses back", "[attention]") {
  auto built = buildUnifiedAttention(makeConfig(ScalarKind::BF16, 16, 2, 96, 16, false));
  if (!built) FAIL(built.diagnostic().str());
  const std::string text = attnjit::ir::printKernel(**built);
  CHECK(text.find("kernel @unified_attention_bf16_h16kv2_d96_bs16_noncausal(") != std::string::npos);
  CHECK(text.find("dot") != std::string::npos);
  CHECK(text.find("exp2") != std::string::npos);
  CHECK(text.find("%acc") != std::string::npos);
  CHECK(text.find("%m_new") != std::string::npos);
  auto parsed = attnjit::ir::parseModule(text, "unified_attention.tir");
  if (!parsed) FAIL(parsed.diagnostic().str() + "\n" + text);
  REQUIRE((*parsed)->kernels().size() == 1);
  CHECK(attnjit::ir::printKernel(*(*parsed)->kernels()[0]) == text);
}

TEST_CASE("unified attention shape: parsing and errors", "[attention]") {
  BatchShape s;
  CHECK(s.set("query_lens=1,7").isOk());
  CHECK(s.set("context_lens=0,12").isOk());
  CHECK(s.set("seed=42").isOk());
  CHECK(s.queryLens == std::vector<int>{1, 7});
  CHECK(s.contextLens == std::vector<int>{0, 12});
  CHECK(s.seed == 42);
  CHECK(s.str() == "query_lens=1,7 context_lens=0,12 seed=42");
  CHECK(s.validate().isOk());

  auto message = [&](const std::string& text) {
    auto st = s.set(text);
    return st ? std::string("ok") : st.diagnostic().message;
  };
  CHECK(message("query_lens=1,x") ==
        "query_lens: 'x' is not an integer or VALUExCOUNT (expected a list like 1,17,40 or 4095x64)");
  CHECK(message("context_lens=1,,2") ==
        "context_lens: '' is not an integer or VALUExCOUNT (expected a list like 1,17,40 or 4095x64)");
  CHECK(message("seed=-3") == "seed: '-3' is not a non-negative integer");
  CHECK(
      message("batch=4") ==
      "unknown shape key 'batch' (expected query_lens, context_lens, seed, check_stride, segment_tiles, num_segments, "
      "num_partials, key_ramp, output_scale, kv_layout or programs)");
  CHECK(message("programs=-1") == "programs: '-1' is not a non-negative integer");
  CHECK(message("key_ramp=-1") == "key_ramp: '-1' is not a number between 0 and 1000");
  CHECK(message("key_ramp=0.5x") == "key_ramp: '0.5x' is not a number between 0 and 1000");
  CHECK(message("key_ramp=nan") == "key_ramp: 'nan' is not a number between 0 and 1000");
  {
    BatchShape ramped;
    REQUIRE(ramped.set("key_ramp=0.25").isOk());
    CHECK(ramped.keyRamp == 0.25);
    CHECK(ramped.str().find(" key_ramp=0.25") != std::string::npos);
  }
  {
    BatchShape repeated;
    REQUIRE(repeated.set("query_lens=1x3,5").isOk());
    CHECK(repeated.queryLens == std::vector<int>{1, 1, 1, 5});
    REQUIRE(repeated.set("check_stride=7").isOk());
    CHECK(repeated.checkStride == 7);
    CHECK(repeated.str().find("check_stride=7") != std::string::npos);
    CHECK_FALSE(repeated.set("query_lens=1x0").isOk());
    CHECK_FALSE(repeated.set("check_stride=0").isOk());
  }
  CHECK(message("query_lens") == "expected key=value (query_lens=..., context_lens=..., seed=N), got 'query_lens'");
  // A failed set leaves the shape unchanged.
  CHECK(s.queryLens == std::vector<int>{1, 7});

  auto invalid = [](std::vector<int> q, std::vector<int> c) {
    BatchShape shape;
    shape.queryLens = std::move(q);
    shape.contextLens = std::move(c);
    auto st = shape.validate();
    return st ? std::string("ok") : st.diagnostic().message;
  };
  CHECK(invalid({1, 2}, {3}) == "query_lens has 2 entries but context_lens has 1");
  CHECK(invalid({}, {}) == "query_lens is empty: a batch needs at least one sequence");
  CHECK(invalid({1, 0}, {3, 3}) == "query_lens[1] (0) must be at least 1");
  CHECK(invalid({1}, {-1}) == "context_lens[0] (-1) must not be negative");

  BatchShape bad;
  bad.queryLens = {0};
  bad.contextLens = {4};
  auto run = runUnifiedAttentionInterpreted(UnifiedAttentionConfig{}, bad);
  REQUIRE_FALSE(run);
  CHECK(run.diagnostic().message == "query_lens[0] (0) must be at least 1");
}

TEST_CASE("unified attention matches the reference on a mixed batch", "[attention]") {
  struct Heads {
    int hq, hkv;
  };
  const ScalarKind dtype = GENERATE(ScalarKind::F32, ScalarKind::F16, ScalarKind::BF16);
  const bool causal = GENERATE(true, false);
  const Heads heads = GENERATE(Heads{4, 4}, Heads{8, 2}, Heads{16, 2});  // 1, 4 and 8 query heads per KV head
  const int headSize = GENERATE(64, 80);
  // Both block sizes for every dtype/heads/head-size combination across `causal`.
  const int blockSize = ((heads.hq + headSize / 16 + (causal ? 1 : 0)) % 2) ? 32 : 16;
  const auto config = makeConfig(dtype, heads.hq, heads.hkv, headSize, blockSize, causal);
  runAndCheck(config, mixedBatch(7 + static_cast<uint64_t>(headSize)));
}

TEST_CASE("unified attention: prefill with an empty context", "[attention]") {
  BatchShape shape;
  shape.queryLens = {23};
  shape.contextLens = {0};
  for (bool causal : {true, false}) runAndCheck(makeConfig(ScalarKind::BF16, 8, 2, 96, 16, causal), shape);
}

TEST_CASE("unified attention: decode-only batch across the binary-search boundary", "[attention]") {
  // 7 sequences need 3 search steps, 8 need 4: both exercise the last sequence.
  for (int numSeqs : {7, 8}) {
    BatchShape shape;
    for (int i = 0; i < numSeqs; ++i) {
      shape.queryLens.push_back(1);
      shape.contextLens.push_back(5 + 9 * i);
    }
    runAndCheck(makeConfig(ScalarKind::F16, 8, 1, 64, 16, true), shape);
  }
}

TEST_CASE("unified attention: tiles smaller and larger than cache blocks", "[attention]") {
  for (int tileSize : {16, 64}) {
    auto config = makeConfig(ScalarKind::F32, 4, 2, 48, 32, true);
    config.tileSize = tileSize;
    runAndCheck(config, mixedBatch(3));
  }
}

TEST_CASE("unified attention: head sizes from 1 to 1024", "[attention][headsize]") {
  for (int headSize : {1, 8, 24, 40, 72, 320, 512, 1024}) {
    auto config = makeConfig(ScalarKind::BF16, 4, 2, headSize, 16, headSize % 2 == 0);
    if (headSize > 256) config.tileSize = 16;
    INFO("head_size " << headSize);
    runAndCheck(config, mixedBatch(static_cast<uint64_t>(headSize)));
  }
  // MLA's latent rows read as DiffKV attention: QK over all 576, V 512 wide.
  auto latent = makeConfig(ScalarKind::BF16, 4, 1, 576, 16, true);
  latent.valueHeadSize = 512;
  latent.tileSize = 16;
  runAndCheck(latent, mixedBatch(576));
}

TEST_CASE("unified attention: block sizes that are not multiples of 16, down to 1", "[attention][blocksize]") {
  for (int blockSize : {1, 5, 24, 48}) {
    for (int tileSize : {16, 64}) {
      auto config = makeConfig(ScalarKind::BF16, 4, 2, 64, blockSize, blockSize % 2 == 0);
      config.tileSize = tileSize;
      INFO("block_size " << blockSize << ", tile_size " << tileSize);
      runAndCheck(config, mixedBatch(static_cast<uint64_t>(blockSize)));
    }
    // The prefill tiling: 128 query rows over 8 warps.
    auto prefill = makeConfig(ScalarKind::BF16, 8, 2, 64, blockSize, true);
    prefill.blockMRows = 128;
    prefill.numWarps = 8;
    prefill.tileSize = 64;
    runAndCheck(prefill, mixedBatch(static_cast<uint64_t>(blockSize) + 100));
  }
}

TEST_CASE("unified attention: query heads beyond BLOCK_M's natural fit", "[attention]") {
  // 32 query heads per KV head: BLOCK_M = 32, BLOCK_Q = 1.
  runAndCheck(makeConfig(ScalarKind::BF16, 32, 1, 32, 16, true), mixedBatch(11));
  // 6 query heads per KV head: BLOCK_M = 16 holds BLOCK_Q = 2 tokens x 6 heads; rows 12..15
  // are the next block's first token (heads 0..3), computed and stored twice, as in vLLM.
  runAndCheck(makeConfig(ScalarKind::F16, 12, 2, 64, 16, false), mixedBatch(12));
}

TEST_CASE("unified attention: scores growing along the keys move the softmax reference many times",
          "[attention]") {
  // Keys scaled by 1 + 0.4·j: a row's maximum score (log2 units) passes its
  // running reference by more than the lazy-rescale threshold again and again,
  // so the accumulator is rescaled on some tiles and not on others. The op API's
  // prefill tiling (lazy rescaling: 128 rows over 4 warps) and decode's (the
  // running maximum), causal and not, with a context and without.
  BatchShape shape;
  shape.queryLens = {150, 1, 37};
  shape.contextLens = {0, 260, 90};
  shape.keyRamp = 0.4;
  for (bool causal : {true, false})
    for (int blockMRows : {0, 128}) {
      auto config = makeConfig(ScalarKind::BF16, 8, 2, 64, 16, causal);
      if (blockMRows) {
        config.blockMRows = blockMRows;
        config.numWarps = 4;
        config.qInShared = true;
      }
      runAndCheck(config, shape);
    }
  // Split-KV segments report their reference as the segment maximum, with the
  // LSE and a sink (segment 0's): the reduction weighs them as any maximum.
  BatchShape split = shape;
  split.segmentTiles = 3;
  auto config = makeConfig(ScalarKind::BF16, 8, 2, 64, 16, true);
  config.blockMRows = 128;
  config.numWarps = 4;
  config.qInShared = true;
  config.splitKv = true;
  config.outputLse = true;
  config.sinks = true;
  runAndCheck(config, split);
}

TEST_CASE("every shipped spec's variants pass on the interpreter with the spec's batch", "[attention][specs]") {
  int variants = 0;
  for (const auto& entry : std::filesystem::directory_iterator(attnjit::tests::sourceDir() + "/specs")) {
    if (entry.path().extension() != ".yaml") continue;
    auto spec = attnjit::compiler::loadSpecFile(entry.path().string());
    INFO(entry.path().string());
    REQUIRE(spec.isOk());
    for (const auto& variant : spec->variants) {
      INFO(variant.name << " on " << spec->shape.str());
      auto result = validation::runVariantInterpreted(variant, spec->shape);
      REQUIRE(result.isOk());
      INFO(result->detail);
      CHECK(result->passed);
      ++variants;
    }
  }
  CHECK(variants >= 8);
}

TEST_CASE("harness: a worker's exception reaches parallelFor's caller, the other indices stop", "[interpreter][limits]") {
  // Other indices cannot run ahead of index 3 (they wait for it), and once it
  // has thrown each costs a millisecond: running all 100000 would take the
  // throwing worker seconds of preemption, so the count is a real check even on
  // a loaded two-core machine.
  std::atomic<int> ran{0};
  std::atomic<bool> thrown{false};
  CHECK_THROWS_AS(attnjit::support::parallelFor(100000,
                                                   [&](int i) {
                                                     ++ran;
                                                     if (i == 3) {
                                                       thrown = true;
                                                       throw std::bad_alloc();
                                                     }
                                                     if (i < 3) return;
                                                     while (!thrown) std::this_thread::yield();
                                                     std::this_thread::sleep_for(std::chrono::milliseconds(1));
                                                   }),
                  std::bad_alloc);
  CHECK(ran.load() < 100000);
  std::atomic<int> all{0};
  attnjit::support::parallelFor(1000, [&](int) { ++all; });
  CHECK(all.load() == 1000);
  attnjit::support::parallelFor(0, [&](int) { FAIL("no index for an empty range"); });
}

TEST_CASE("harness: host memory and work are estimated and bounded before a run", "[interpreter][limits]") {
  attnjit::compiler::Variant variant;
  variant.family = attnjit::compiler::Family::UnifiedAttention;
  variant.attention.numQueryHeads = 32;
  variant.attention.numKvHeads = 8;
  variant.attention.headSize = 128;
  BatchShape small;
  small.queryLens = {1, 1};
  small.contextLens = {999, 999};
  BatchShape doubled = small;
  doubled.contextLens = {1999, 1999};
  const auto a = attnjit::validation::estimateHostWork(variant, small);
  const auto b = attnjit::validation::estimateHostWork(variant, doubled);
  // 2 x 1000 keys of 8 heads x (128 + 128) values dominate: about 4.1 M elements.
  CHECK(a.bytes > 24.0 * 2000 * 8 * 256);
  CHECK(a.bytes < 1.2 * 24.0 * 2000 * 8 * 256 + 24.0 * 128 * 256 * 8);
  CHECK(b.bytes > 1.9 * a.bytes);
  CHECK(a.multiplyAdds == Approx(2.0 * 1000 * 32 * 256));
  CHECK(attnjit::validation::checkHostBudget(variant, small, true));

  // A budget below the estimate is an error at the variant, naming the knob.
  ::setenv("ATTNJIT_HOST_MEMORY_BUDGET", "1M", 1);
  const auto refused = attnjit::validation::checkHostBudget(variant, doubled, false);
  ::unsetenv("ATTNJIT_HOST_MEMORY_BUDGET");
  REQUIRE_FALSE(refused);
  CHECK(refused.diagnostic().message.find("over the budget of 0.000977 GiB") != std::string::npos);
  ::setenv("ATTNJIT_INTERPRETER_WORK_BUDGET", "2.5M", 1);
  auto budget = attnjit::validation::interpreterWorkBudget();
  REQUIRE(budget);
  CHECK(*budget == 2.5e6);
  CHECK_FALSE(attnjit::validation::checkHostBudget(variant, small, true));
  CHECK(attnjit::validation::checkHostBudget(variant, small, false));
  ::setenv("ATTNJIT_INTERPRETER_WORK_BUDGET", "-3", 1);
  CHECK_FALSE(attnjit::validation::interpreterWorkBudget());
  ::unsetenv("ATTNJIT_INTERPRETER_WORK_BUDGET");
}

TEST_CASE("interpreter: progress scopes nest and report on their own thread only", "[interpreter]") {
  CHECK(attnjit::ir::InterpreterProgressScope::current() == nullptr);
  {
    attnjit::ir::InterpreterProgressScope outer([](const std::string&, int64_t, int64_t) {});
    const auto* outerReport = attnjit::ir::InterpreterProgressScope::current();
    REQUIRE(outerReport != nullptr);
    {
      attnjit::ir::InterpreterProgressScope inner([](const std::string&, int64_t, int64_t) {});
      CHECK(attnjit::ir::InterpreterProgressScope::current() != outerReport);
      const attnjit::ir::InterpreterProgressScope::Report* seen = outerReport;
      std::thread([&] { seen = attnjit::ir::InterpreterProgressScope::current(); }).join();
      CHECK(seen == nullptr);
    }
    CHECK(attnjit::ir::InterpreterProgressScope::current() == outerReport);
  }
  CHECK(attnjit::ir::InterpreterProgressScope::current() == nullptr);
}

namespace {

// Configurations that exercise the KV loop's features with `schedule` (one of
// the loop's software pipelines) applied: prefill tiles (an unmasked and a
// masked loop), decode tiles, windows, softcap, ALiBi, sinks, LSE,
// per-token-head and int4 caches, DiffKV.
std::vector<UnifiedAttentionConfig> pipelinedLoopConfigs(void (*schedule)(UnifiedAttentionConfig&)) {
  auto prefillTiling = [&](UnifiedAttentionConfig c) {
    c.blockMRows = 64;
    c.tileSize = 16;
    schedule(c);
    return c;
  };
  std::vector<UnifiedAttentionConfig> configs;
  for (bool causal : {true, false}) configs.push_back(prefillTiling(makeConfig(ScalarKind::BF16, 8, 2, 64, 16, causal)));
  UnifiedAttentionConfig windowed = prefillTiling(makeConfig(ScalarKind::F16, 8, 2, 64, 16, true));
  windowed.slidingWindow = 20;
  windowed.softcap = 30;
  configs.push_back(windowed);
  UnifiedAttentionConfig biased = prefillTiling(makeConfig(ScalarKind::BF16, 4, 4, 32, 32, false));
  biased.alibi = biased.sinks = biased.outputLse = true;
  configs.push_back(biased);
  UnifiedAttentionConfig perTokenHead = prefillTiling(makeConfig(ScalarKind::BF16, 8, 2, 64, 16, true));
  perTokenHead.kvCacheFormat = attnjit::compiler::KvCacheFormat::Int8PerTokenHead;  // scales per tile
  configs.push_back(perTokenHead);
  UnifiedAttentionConfig int4 = prefillTiling(makeConfig(ScalarKind::BF16, 8, 2, 64, 16, false));
  int4.kvCacheFormat = attnjit::compiler::KvCacheFormat::Int4PerTokenHead;  // two column groups
  configs.push_back(int4);
  UnifiedAttentionConfig diffKv = prefillTiling(makeConfig(ScalarKind::BF16, 8, 2, 96, 16, true));
  diffKv.valueHeadSize = 64;
  configs.push_back(diffKv);
  UnifiedAttentionConfig decode = makeConfig(ScalarKind::F32, 8, 2, 48, 16, true);
  schedule(decode);
  configs.push_back(decode);
  return configs;
}

BatchShape pipelinedLoopPrefillBatch() {
  BatchShape prefillBatch;
  prefillBatch.queryLens = {70, 1, 33};
  prefillBatch.contextLens = {0, 90, 41};
  prefillBatch.seed = 21;
  return prefillBatch;
}

void checkPipelinedLoop(void (*schedule)(UnifiedAttentionConfig&)) {
  // Before and after the passes (pipelining moves the loads an iteration
  // ahead too).
  for (const UnifiedAttentionConfig& config : pipelinedLoopConfigs(schedule))
    for (bool afterPasses : {false, true})
      runAndCheck(config, config.blockMRows != 0 ? pipelinedLoopPrefillBatch() : mixedBatch(5), afterPasses);
  // Split-KV segments each start their own pipeline.
  UnifiedAttentionConfig split = makeConfig(ScalarKind::BF16, 8, 2, 64, 16, true);
  split.blockMRows = 64;
  split.tileSize = 16;
  schedule(split);
  split.splitKv = true;
  BatchShape segmented = pipelinedLoopPrefillBatch();
  segmented.segmentTiles = 2;
  runAndCheck(split, segmented);
}

}  // namespace

TEST_CASE("unified attention: overlap_softmax (P·V one tile late) agrees with the reference", "[attention][overlap]") {
  checkPipelinedLoop([](UnifiedAttentionConfig& c) { c.overlapSoftmax = true; });
}

TEST_CASE("unified attention: prefetch_scores (Q·Kᵀ one tile early) agrees with the reference",
          "[attention][overlap]") {
  checkPipelinedLoop([](UnifiedAttentionConfig& c) { c.prefetchScores = true; });
  // The same arithmetic in another order of issue: the same bits as without
  // the knob (the errors against float64 to the last bit).
  for (UnifiedAttentionConfig config : pipelinedLoopConfigs([](UnifiedAttentionConfig&) {})) {
    const BatchShape shape = config.blockMRows != 0 ? pipelinedLoopPrefillBatch() : mixedBatch(5);
    auto plain = runUnifiedAttentionInterpreted(config, shape, true);
    config.prefetchScores = true;
    auto prefetched = runUnifiedAttentionInterpreted(config, shape, true);
    REQUIRE(plain.isOk());
    REQUIRE(prefetched.isOk());
    INFO(config.kernelName());
    CHECK(prefetched->maxAbsError == plain->maxAbsError);
    CHECK(prefetched->maxRelError == plain->maxRelError);
  }
  // Both: the next tile's Q·Kᵀ and the previous tile's P·V around this tile's softmax.
  checkPipelinedLoop([](UnifiedAttentionConfig& c) { c.prefetchScores = c.overlapSoftmax = true; });
  // Three loops (the query-query bias's first one skips the bias) and
  // bidirectional ranges carry the scores from loop to loop.
  BatchShape speculative;
  speculative.queryLens = {4, 1, 3};
  speculative.contextLens = {40, 17, 65};
  speculative.seed = 23;
  for (bool causal : {true, false}) {
    UnifiedAttentionConfig c = makeConfig(ScalarKind::BF16, 8, 2, 64, 16, causal);
    c.prefetchScores = true;
    c.qqBias = true;
    runAndCheck(c, speculative, /*afterPasses=*/true);
    c.blockMRows = 64;
    c.tileSize = 16;
    runAndCheck(c, pipelinedLoopPrefillBatch());
    c.qqBias = false;
    c.mmPrefixRanges = 2;
    runAndCheck(c, pipelinedLoopPrefillBatch(), /*afterPasses=*/true);
  }
  CHECK(makeConfig(ScalarKind::BF16, 8, 2, 64, 16, true).kernelName() + "_pfs" == [] {
    UnifiedAttentionConfig c = makeConfig(ScalarKind::BF16, 8, 2, 64, 16, true);
    c.prefetchScores = true;
    return c.kernelName();
  }());
}

TEST_CASE("unified attention: prefetch_scores names what it cannot be combined with", "[attention][overlap]") {
  UnifiedAttentionConfig c = makeConfig(ScalarKind::BF16, 8, 2, 64, 16, true);
  c.prefetchScores = true;
  CHECK(validationError(c) == "ok");
  c.warpSpecialize = c.softmaxTurns = true;
  CHECK(validationError(c) == "prefetch_scores is unsupported with softmax_turns (the next tile's Q·Kᵀ is issued "
                              "before this tile's softmax, so no Q·Kᵀ completes where the turn is taken)");
  c.softmaxTurns = false;
  c.tensorMemoryAccelerator = true;
  CHECK(validationError(c) == "prefetch_scores is unsupported with tma (the next tile's K is not a load_tensor tile)");
  c.tensorMemoryAccelerator = false;
  c.persistent = true;
  CHECK(validationError(c) == "prefetch_scores is unsupported with persistent (each work item's first Q·Kᵀ is "
                              "computed in front of its loops, outside the rings of slots)");
  c.persistent = false;
  c.kvCacheFormat = attnjit::compiler::KvCacheFormat::Int4PerTokenHead;
  c.kvScaleLayout = attnjit::compiler::KvScaleLayout::Separate;
  CHECK(validationError(c) == "prefetch_scores is unsupported with kv_cache_dtype int4_per_token_head and kv_scales "
                              "separate (the next tile's K needs its zero points before this tile's scales are read)");
}

TEST_CASE("unified attention: persistent programs walk every work item, whatever the grid", "[attention][persistent]") {
  // Each program takes the (query block, KV head) items p, p + P, ... of the
  // full grid's; every item is computed as the plain kernel's program for it
  // computes it, so the errors against float64 are the plain kernel's to the
  // bit. One program, a few (uneven shares), more than there are items (the
  // launch is capped at the items), and the full 2D grid (programs = 0).
  BatchShape shape = mixedBatch(5);
  shape.queryLens = {1, 70, 1, 37, 3, 129};
  shape.contextLens = {37, 0, 18, 91, 130, 5};
  for (bool causal : {true, false}) {
    UnifiedAttentionConfig plain = makeConfig(ScalarKind::BF16, 8, 2, 64, 16, causal);
    plain.blockMRows = 64;
    plain.tileSize = 32;
    plain.warpSpecialize = true;
    auto reference = runUnifiedAttentionInterpreted(plain, shape, true);
    REQUIRE(reference.isOk());
    REQUIRE(reference->passed);
    UnifiedAttentionConfig persistent = plain;
    persistent.persistent = true;
    CHECK(persistent.kernelName() == plain.kernelName() + "_ps");
    const int64_t items = reference->gridX * reference->gridY;
    for (int programs : {1, 3, 7, 1000, 0}) {
      shape.programs = programs;
      INFO((causal ? "causal" : "bidirectional") << ", programs " << programs);
      auto result = runUnifiedAttentionInterpreted(persistent, shape, true);
      REQUIRE(result.isOk());
      CHECK(result->passed);
      CHECK(result->maxAbsError == reference->maxAbsError);
      CHECK(result->maxRelError == reference->maxRelError);
      if (programs == 0) {
        CHECK(result->gridX == reference->gridX);
        CHECK(result->gridY == reference->gridY);
      } else {
        CHECK(result->gridX == std::min<int64_t>(programs, items));
        CHECK(result->gridY == 1);
      }
    }
  }
}

TEST_CASE("unified attention: persistent programs refuse the launches they do not walk", "[attention][persistent]") {
  UnifiedAttentionConfig c = makeConfig(ScalarKind::BF16, 8, 2, 64, 16, true);
  c.persistent = true;
  CHECK(validationError(c) == "ok");
  c.splitKv = true;
  CHECK(validationError(c) ==
        "persistent is unsupported with split_kv (persistent programs walk the 2D launch's query blocks and KV heads)");
  c.splitKv = false;
  c.clusterSplit = 4;
  CHECK(validationError(c) == "persistent is unsupported with cluster_split (persistent programs walk the 2D "
                              "launch's query blocks and KV heads)");
  c.clusterSplit = 0;
  c.overlapSoftmax = true;
  CHECK(validationError(c) == "persistent is unsupported with overlap_softmax (the last tile's P·V after the KV "
                              "loop reads a slot the next loop's fills would reuse)");
  c.overlapSoftmax = false;
  c.checkBounds = true;
  CHECK(validationError(c) == "persistent is unsupported with check_bounds (the programs' item count comes from "
                              "cu_seqlens_q, which a checked kernel does not trust)");
}
