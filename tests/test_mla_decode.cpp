// MLA latent decode (compiler/kernels/MlaDecode.h) on the CPU interpreter against
// the float64 reference (compiler/validation/reference/MlaReference.h): both latent widths, 16
// and 128 heads, block sizes 16 and 64, fp8 latents, the tiling knobs, split-KV
// into 1, 2, 8 and 16 segments with the LSE, empty and odd-length sequences; the
// user errors; and ptxas on every variant of specs/mla_decode.yaml.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <regex>

#include "compiler/driver/CompileDriver.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/validation/VariantRuns.h"
#include "compiler/validation/MlaDecodeProblem.h"
#include "compiler/spec/Spec.h"
#include "tests/test_paths.h"
#include "tests/test_tools.h"

using namespace attnjit;
using compiler::KvCacheFormat;
using attnjit::validation::MlaDecodeBatch;
using compiler::MlaDecodeConfig;

namespace {

MlaDecodeConfig smallConfig() {
  MlaDecodeConfig c;
  c.numHeads = 16;
  c.outputLse = true;
  return c;
}

MlaDecodeBatch batchOf(std::vector<int> seqLens, int segmentTiles = 1, uint64_t seed = 7) {
  MlaDecodeBatch b;
  b.seqLens = std::move(seqLens);
  b.segmentTiles = segmentTiles;
  b.seed = seed;
  return b;
}

void expectPasses(const MlaDecodeConfig& config, const MlaDecodeBatch& batch, bool afterPasses = false) {
  INFO(config.kernelName());
  auto result = validation::runMlaDecodeInterpreted(config, batch, afterPasses);
  INFO((result.isOk() ? result->detail : result.diagnostic().str()));
  REQUIRE(result.isOk());
  INFO("max abs error " << result->maxAbsError << ", tolerance " << result->tolerance);
  CHECK(result->passed);
}

// `config`'s kernel compiled to PTX for sm_90a.
// The op's tiling for batches that fill the GPU: 64 heads on 8 warps (4 along
// the heads, 2 along the keys and latent columns), q in shared memory.
MlaDecodeConfig wideTiling(KvCacheFormat format, int tileSize) {
  MlaDecodeConfig c;
  c.kvCacheFormat = format;
  c.blockH = 64;
  c.tileSize = tileSize;
  c.numWarps = 8;
  c.qInShared = true;
  return c;
}

std::string mlaPtx(const MlaDecodeConfig& config) { return tests::compileBuilt(compiler::buildMlaDecode(config), "sm_90a").ptx; }

// `config`'s kernel compiled for sm_90a, with codegen stage `stage`'s dump
// (--print-after) appended to `dump`.
compiler::CompiledKernel compileDumping(const MlaDecodeConfig& config, const char* stage, std::string& dump) {
  compiler::CompileOptions options;
  options.target = "sm_90a";
  options.pipeline.printAfter = stage;
  options.pipeline.dump = [&](const std::string& text) { dump += text; };
  return tests::compileBuilt(compiler::buildMlaDecode(config), options);
}

std::string errorOf(const MlaDecodeConfig& config) {
  const support::Status s = config.validate();
  return s ? std::string() : s.diagnostic().message;
}

}  // namespace

TEST_CASE("mla decode matches the float64 reference on the interpreter", "[mla]") {
  SECTION("576 wide, 16 heads, 16-token blocks") { expectPasses(smallConfig(), batchOf({1, 37, 100})); }
  SECTION("320 wide") {
    MlaDecodeConfig c = smallConfig();
    c.kvLoraRank = 256;
    expectPasses(c, batchOf({1, 37, 100}));
  }
  SECTION("128 heads over 8 head blocks") {
    MlaDecodeConfig c = smallConfig();
    c.numHeads = 128;
    expectPasses(c, batchOf({1, 37, 100}));
  }
  SECTION("heads that do not fill the last head block") {
    MlaDecodeConfig c = smallConfig();
    c.numHeads = 20;
    c.kvLoraRank = 256;
    expectPasses(c, batchOf({5, 70}));
  }
  SECTION("64-token blocks") {
    MlaDecodeConfig c = smallConfig();
    c.blockSize = 64;
    expectPasses(c, batchOf({1, 63, 64, 130}));
  }
  SECTION("fp8 e4m3 latents with bf16 and f16 queries") {
    for (auto dtype : {ir::ScalarKind::BF16, ir::ScalarKind::F16}) {
      MlaDecodeConfig c = smallConfig();
      c.dtype = dtype;
      c.kvCacheFormat = KvCacheFormat::Fp8E4M3;
      expectPasses(c, batchOf({3, 50}));
    }
  }
  SECTION("fp8 e4m3 latents meeting bf16 q in f16 (fp8_dot_dtype f16), split and after the passes") {
    MlaDecodeConfig c = smallConfig();
    c.kvCacheFormat = KvCacheFormat::Fp8E4M3;
    c.fp8DotDtype = compiler::Fp8DotDtype::F16;
    expectPasses(c, batchOf({3, 50}));
    c.splitKv = true;
    c.qInShared = true;
    expectPasses(c, batchOf({17, 40}, 1), /*afterPasses=*/true);
  }
  SECTION("tiling knobs: 32 heads per program, 32- and 64-key tiles, 8 warps, no pipelining") {
    MlaDecodeConfig c = smallConfig();
    c.numHeads = 32;
    c.blockH = 32;
    c.tileSize = 32;
    expectPasses(c, batchOf({1, 33, 95}));
    c.tileSize = 64;
    c.numWarps = 8;
    c.numStages = 1;
    expectPasses(c, batchOf({1, 33, 95}));
  }
  SECTION("the pass pipeline's rewrites (layouts, pipelined loads) keep the meaning") {
    MlaDecodeConfig c = smallConfig();
    expectPasses(c, batchOf({17, 40}), /*afterPasses=*/true);
    c.splitKv = true;
    c.kvCacheFormat = KvCacheFormat::Fp8E4M3;
    expectPasses(c, batchOf({17, 40}, 1), /*afterPasses=*/true);
  }
}

TEST_CASE("mla decode split-KV into 1 2 8 and 16 segments with the LSE", "[mla]") {
  // The longest sequence has 16 tiles of 16 keys: segment_tiles 16, 8, 2, 1.
  for (const auto& [segmentTiles, segments] : std::vector<std::pair<int, int>>{{16, 1}, {8, 2}, {2, 8}, {1, 16}}) {
    MlaDecodeConfig c = smallConfig();
    c.splitKv = true;
    const MlaDecodeBatch batch = batchOf({256, 7, 129, 40}, segmentTiles);
    auto problem = validation::MlaDecodeProblem::create(c, batch);
    REQUIRE(problem.isOk());
    REQUIRE((*problem)->launches().size() == 2);
    CHECK((*problem)->launches()[0].gridZ == segments);
    INFO(segments << " segments");
    expectPasses(c, batch);
  }
}

TEST_CASE("mla decode gives empty sequences output 0 and LSE -inf", "[mla]") {
  for (bool split : {false, true}) {
    INFO((split ? "split-KV" : "2D"));
    MlaDecodeConfig c = smallConfig();
    c.splitKv = split;
    expectPasses(c, batchOf({0, 5, 0, 33}, 1));
  }
}

TEST_CASE("mla decode handles odd lengths across tile and block edges", "[mla]") {
  MlaDecodeConfig c = smallConfig();
  c.kvLoraRank = 256;
  c.tileSize = 32;
  expectPasses(c, batchOf({15, 17, 31, 33, 47, 65}, 1, 11));
}

TEST_CASE("mla decode with q kept in shared memory", "[mla][q_in_shared]") {
  // The op's tilings: 16, 32 and 64 heads per program, 32- and 64-key tiles, 4
  // and 8 warps, both widths, fp8 latents, split-KV with the LSE; through the
  // pass pipeline too, whose layouts put 64 heads on 4 x 2 warps.
  struct Tiling {
    int blockH, tileSize, numWarps, kvLoraRank;
    KvCacheFormat format;
  } tilings[] = {
      {16, 64, 4, 512, KvCacheFormat::Auto},    {32, 64, 4, 512, KvCacheFormat::Auto},
      {64, 64, 4, 256, KvCacheFormat::Auto},    {64, 32, 8, 512, KvCacheFormat::Fp8E4M3},
  };
  for (const Tiling& t : tilings) {
    MlaDecodeConfig c = smallConfig();
    c.numHeads = 40;  // the last head block is partly padding
    c.qInShared = true;
    c.blockH = t.blockH;
    c.tileSize = t.tileSize;
    c.numWarps = t.numWarps;
    c.kvLoraRank = t.kvLoraRank;
    c.kvCacheFormat = t.format;
    CHECK(c.kernelName().ends_with("_qs"));
    expectPasses(c, batchOf({1, 70, 129}));
    expectPasses(c, batchOf({1, 70, 129}), /*afterPasses=*/true);
    c.splitKv = true;
    expectPasses(c, batchOf({0, 70, 129}, 1));
  }
}

TEST_CASE("q_in_shared moves q into its own shared memory and assembles", "[mla][q_in_shared][ptxas]") {
  // Codegen's shared operand buffers hold all of q once: BLOCK_H x 576 bf16 in
  // five chunks, one after the other.
  for (int blockH : {16, 64}) {
    MlaDecodeConfig c;
    c.blockH = blockH;
    c.tileSize = 32;
    c.numWarps = blockH == 64 ? 8 : 4;
    c.qInShared = true;
    std::string plan;
    const compiler::CompiledKernel resident = compileDumping(c, "plan-shared-operands", plan);
    INFO("block_h " << blockH << "\n" << plan);
    std::smatch first, last;
    REQUIRE(std::regex_search(plan, first, std::regex("%q_nope0_cvt: .* at byte ([0-9]+)")));
    REQUIRE(std::regex_search(plan, last, std::regex("%q_pe_cvt: .* at byte ([0-9]+)")));
    CHECK(std::stoll(last[1]) + blockH * 64 * 2 - std::stoll(first[1]) == blockH * 576 * 2);
    CHECK(resident.sharedMemoryBytes >= std::stoll(last[1]) + blockH * 64 * 2);
    if (tests::havePtxas()) tests::checkAssembles(resident.ptx, "sm_90a");
  }
}

TEST_CASE("the epilogue's scratch reuses the buffers the loop is done with", "[mla][codegen]") {
  // 64 heads x 64 keys on 8 warps: two bf16 latent stages (144 KB) and q (72 KB)
  // leave 11 KB of the 227 KB a block may have, less than the output tile's
  // conversion (16 KB). After the loop the slots and q are dead, so that
  // conversion overlaps them and q stays in shared memory.
  MlaDecodeConfig c;
  c.blockH = 64;
  c.tileSize = 64;
  c.numWarps = 8;
  c.qInShared = true;
  std::string fit;
  const compiler::CompiledKernel compiled = compileDumping(c, "fit-shared-memory", fit);
  INFO(fit);
  CHECK(std::regex_search(fit, std::regex("cp.async slots and shared operands: [0-9]+ B of [0-9]+, fits")));
  CHECK(compiled.sharedMemoryBytes <= 227 * 1024);
  CHECK(compiled.sharedMemoryBytes >= 2 * 64 * 576 * 2 + 64 * 576 * 2);
  if (tests::havePtxas()) tests::checkAssembles(compiled.ptx, "sm_90a");
}

TEST_CASE("a latent chunk in registers is stored once for both of its mma operands", "[mla][codegen]") {
  // fp8 latents are cast in registers, and without pipelining the bf16 latent is
  // a register tile too: each kv_c chunk is converted as V and, transposed, as Kᵀ
  // (k_pe only as Kᵀ), so codegen's plan-shared-conversions gives the four chunks
  // one shared-memory store each. On sm_90a every dot reads them through wgmma
  // descriptors, so k_pe gets a column-blocked buffer too; on sm_90 (ldmatrix
  // reads) it stays a single conversion through the scratch area. A pipelined
  // bf16 latent is read from its cp.async slot instead and has no such group.
  struct Case {
    KvCacheFormat format;
    int numStages;
    const char* target;
    int groups;
    bool kPeBuffer;
  } cases[] = {{KvCacheFormat::Fp8E4M3, 2, "sm_90a", 4, true},
               {KvCacheFormat::Fp8E4M3, 2, "sm_90", 4, false},
               {KvCacheFormat::Auto, 1, "sm_90a", 4, true},
               {KvCacheFormat::Auto, 2, "sm_90a", 0, false}};
  for (const Case& c : cases) {
    MlaDecodeConfig config;
    config.kvCacheFormat = c.format;
    config.numStages = c.numStages;
    config.blockH = 64;
    config.tileSize = 32;
    config.numWarps = 8;
    config.qInShared = true;
    INFO(config.kernelName() << " for " << c.target);
    std::string plan;
    compiler::CompileOptions options;
    options.target = c.target;
    options.pipeline.printAfter = "plan-shared-conversions";
    options.pipeline.dump = [&](const std::string& text) { plan += text; };
    const compiler::CompiledKernel compiled = tests::compileBuilt(compiler::buildMlaDecode(config), options);
    INFO(plan);
    const bool wgmma = std::string(c.target) == "sm_90a";
    const std::string readers = wgmma ? ", 128-byte column blocks read by wgmma" : "";
    int groups = 0;
    for (const char* chunk : {"%kv_c0", "%kv_c1", "%kv_c2", "%kv_c3"})
      if (std::regex_search(plan, std::regex(std::string(chunk) + "[_a-z]*: .* 2 conversions" + readers + "\n")))
        ++groups;
    CHECK(groups == c.groups);
    CHECK(std::regex_search(plan, std::regex("%k_pe[_a-z]*: .* 1 conversions" + readers)) == c.kPeBuffer);
    CHECK((tests::countOf(compiled.ptx, "mma.sync") == 0) == wgmma);
    CHECK((tests::countOf(compiled.ptx, "wgmma.mma_async") > 0) == wgmma);
    if (tests::havePtxas()) tests::checkAssembles(compiled.ptx, c.target);
  }
}

TEST_CASE("64 heads on 8 warps run every mla dot on wgmma, each warpgroup on its column block", "[mla][wgmma]") {
  // Four warps along the heads, two along the keys (Q·Kᵀ) and the latent
  // columns (P·V): the accumulators' column blocks (#mma instr [16, n / 2])
  // give each warpgroup one contiguous half, which its descriptor addresses.
  // bf16 latents are read from their cp.async slots, fp8 ones (cast in
  // registers) from the shared conversions' buffers.
  for (KvCacheFormat format : {KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3})
  for (int tileSize : {16, 32, 64}) {
    const MlaDecodeConfig c = wideTiling(format, tileSize);
    INFO(c.kernelName());
    compiler::CompileOptions options;
    options.target = "sm_90a";
    const compiler::CompiledKernel compiled = tests::compileBuilt(compiler::buildMlaDecode(c), options);
    CHECK(compiled.tirOptimized.find("instr=[16," + std::to_string(tileSize / 2) + "]") != std::string::npos);
    CHECK(compiled.tirOptimized.find("instr=[16,64]") != std::string::npos);
    // Per KV loop: Q·Kᵀ takes 576 / 16 k-steps of n = tile / 2, P·V tile / 16
    // k-steps of n = 64 for each of the four 128-column chunks.
    const std::string& ptx = compiled.ptx;
    CHECK(tests::countOf(ptx, "mma.sync") == 0);
    CHECK(tests::countOf(ptx, "wgmma.mma_async.sync.aligned.m64n" + std::to_string(tileSize / 2) + "k16") %
              (576 / 16) ==
          0);
    CHECK(tests::countOf(ptx, "wgmma.mma_async.sync.aligned.m64n64k16") % (4 * tileSize / 16) == 0);
    CHECK(tests::countOf(ptx, "wgmma.mma_async.sync.aligned.m64n64k16") > 0);
    // One asm block each for the Q·Kᵀ chain over the five chunks and for the
    // four chunks' P·V: two fences and two waits, not nine.
    CHECK(tests::countOf(ptx, "wgmma.fence") == 2);
    CHECK(tests::countOf(ptx, "wgmma.wait_group") == 2);
    if (tests::havePtxas()) tests::checkAssembles(ptx, "sm_90a");
    // sm_90 keeps mma.sync over the same column blocks.
    compiler::CompileOptions sm90;
    sm90.target = "sm_90";
    const compiler::CompiledKernel plain = tests::compileBuilt(compiler::buildMlaDecode(c), sm90);
    CHECK(tests::countOf(plain.ptx, "wgmma") == 0);
    CHECK(plain.tirOptimized.find("instr=[16,8]") != std::string::npos);
  }
}

TEST_CASE("an mla tile waits once for its five latent chunks and passes few barriers",
          "[mla][wgmma][sync]") {
  // Each chunk's read brings its own cp.async wait and barrier, and an fp8
  // chunk's store its own pair of barriers (the buffer's previous readers, the
  // store published). None of the five chunks' accesses conflicts with another's
  // (other slots, other buffers) and their copies all came in the previous
  // round: one wait, one barrier before the reads, and (fp8) one after the
  // stores. The loop's stretch from its last copy to its first wgmma shows it.
  for (KvCacheFormat format : {KvCacheFormat::Auto, KvCacheFormat::Fp8E4M3}) {
    const MlaDecodeConfig c = wideTiling(format, 64);
    INFO(c.kernelName());
    const std::string ptx = tests::compileBuilt(compiler::buildMlaDecode(c), "sm_90a").ptx;
    const size_t firstProduct = ptx.find("wgmma.mma_async");
    REQUIRE(firstProduct != std::string::npos);
    const size_t lastCopy = ptx.rfind("cp.async.commit_group", firstProduct);
    REQUIRE(lastCopy != std::string::npos);
    const std::string stretch = ptx.substr(lastCopy, firstProduct - lastCopy);
    CHECK(tests::countOf(stretch, "cp.async.wait_group") == 1);
    const bool fp8 = format == KvCacheFormat::Fp8E4M3;
    CHECK(tests::countOf(stretch, "bar.sync") == (fp8 ? 2 : 1));
    // Order: the wait, a barrier, then (fp8) every read of a slot and every store
    // of a cast chunk, then the barrier that publishes them.
    const size_t wait = stretch.find("cp.async.wait_group");
    const size_t firstBarrier = stretch.find("bar.sync");
    const size_t lastBarrier = stretch.rfind("bar.sync");
    CHECK(wait < firstBarrier);
    if (fp8) {
      CHECK(tests::countOf(stretch, "st.shared") == 4 * 4 + 2);  // four 128-column chunks and k_pe
      CHECK(stretch.find("ld.shared") > firstBarrier);
      CHECK(stretch.rfind("st.shared") < lastBarrier);
      CHECK(stretch.rfind("fence.proxy.async") < lastBarrier);
    }
    // Between the products: the row maximum crosses the two warpgroups (a store
    // between two barriers) and so does P on its way to the A operand; the row
    // sum stays per thread until after the loop.
    const size_t firstPv = ptx.find("wgmma.mma_async.sync.aligned.m64n64k16", firstProduct);
    REQUIRE(firstPv != std::string::npos);
    CHECK(tests::countOf(ptx.substr(firstProduct, firstPv - firstProduct), "bar.sync") == 4);
  }
}

TEST_CASE("fp8 latents meet bf16 q in f16 with one conversion per byte pair", "[mla][fp8]") {
  // fp8_dot_dtype f16: the cast chunks are f16 (cvt.rn.f16x2.e4m3x2 alone, no
  // trip through f32 into bf16), q is rounded to f16 once before the loop and P
  // every tile, and both products multiply f16 operands: on wgmma for the
  // 64-head tiling (sm_90a), on mma.sync elsewhere.
  for (compiler::Fp8DotDtype choice : {compiler::Fp8DotDtype::Dtype, compiler::Fp8DotDtype::F16}) {
    MlaDecodeConfig c = wideTiling(KvCacheFormat::Fp8E4M3, 64);
    c.fp8DotDtype = choice;
    const bool f16 = choice == compiler::Fp8DotDtype::F16;
    INFO(c.kernelName());
    CHECK((c.kernelName().find("_f16dots") != std::string::npos) == f16);
    const std::string ptx = mlaPtx(c);
    CHECK(tests::countOf(ptx, "cvt.rn.f16x2.e4m3x2") > 0);
    CHECK((tests::countOf(ptx, "cvt.f32.f16") == 0) == f16);
    CHECK((tests::countOf(ptx, "k16.f32.f16.f16") > 0) == f16);
    CHECK((tests::countOf(ptx, "k16.f32.bf16.bf16") > 0) == !f16);
    if (tests::havePtxas()) tests::checkAssembles(ptx, "sm_90a");
  }
  MlaDecodeConfig narrow = smallConfig();
  narrow.kvCacheFormat = KvCacheFormat::Fp8E4M3;
  narrow.fp8DotDtype = compiler::Fp8DotDtype::F16;
  narrow.tileSize = 64;
  narrow.qInShared = true;
  const std::string ptx = tests::compileBuilt(compiler::buildMlaDecode(narrow), "sm_80").ptx;
  CHECK(tests::countOf(ptx, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") > 0);
  CHECK(tests::countOf(ptx, "bf16.bf16") == 0);
  if (tests::havePtxas()) tests::checkAssembles(ptx, "sm_80");
}

TEST_CASE("mla decode in f32, on TF32 dots and exact", "[mla][f32]") {
  for (auto precision : {compiler::Fp32Precision::Tf32, compiler::Fp32Precision::Ieee})
    for (int kvLoraRank : {512, 256}) {
      MlaDecodeConfig config = smallConfig();
      config.dtype = ir::ScalarKind::F32;
      config.fp32Precision = precision;
      config.kvLoraRank = kvLoraRank;
      expectPasses(config, batchOf({1, 37, 100}));
      config.splitKv = true;
      expectPasses(config, batchOf({1, 37, 100}, 2));
    }
}

TEST_CASE("mla decode over cache blocks of 1, 5 and 24 tokens", "[mla][blocksize]") {
  for (int blockSize : {1, 5, 24}) {
    MlaDecodeConfig config = smallConfig();
    config.blockSize = blockSize;
    INFO("block_size " << blockSize);
    expectPasses(config, batchOf({1, 37, 100}, blockSize == 5 ? 2 : 1));
    if (tests::havePtxas()) tests::checkAssembles(mlaPtx(config), "sm_90a");
  }
}

TEST_CASE("mla decode's check fails a run that left the output untouched", "[mla]") {
  auto problem = validation::MlaDecodeProblem::create(smallConfig(), batchOf({3, 9}));
  REQUIRE(problem.isOk());
  validation::AttentionRunResult result;
  (*problem)->check((*problem)->buffers(), result);  // outputs still poisoned (NaN)
  CHECK_FALSE(result.passed);
  CHECK(result.detail.find("non-finite output at sequence 0") != std::string::npos);
}

TEST_CASE("mla decode rejects unsupported widths and score modifiers by name", "[mla]") {
  MlaDecodeConfig c;
  c.kvLoraRank = 536;
  CHECK(errorOf(c).find("kv_lora_rank + rope_dim = 536 + 64 = 600 is not supported") != std::string::npos);
  CHECK(errorOf(c).find("576") != std::string::npos);
  c = MlaDecodeConfig{};
  c.ropeDim = 88;
  CHECK(errorOf(c).find("= 600 is not supported") != std::string::npos);
  c = MlaDecodeConfig{};
  c.alibi = true;
  CHECK(errorOf(c).find("alibi is not supported by mla_decode") != std::string::npos);
  c = MlaDecodeConfig{};
  c.slidingWindow = 128;
  CHECK(errorOf(c).find("sliding_window (128) is not supported by mla_decode") != std::string::npos);
  c = MlaDecodeConfig{};
  c.softcap = 30;
  CHECK(errorOf(c).find("softcap is not supported by mla_decode") != std::string::npos);
  c = MlaDecodeConfig{};
  c.dtype = ir::ScalarKind::F8E4M3;
  CHECK(errorOf(c).find("dtype (f8e4m3) is not supported by mla_decode; use bf16, f16 or f32") != std::string::npos);
  c = MlaDecodeConfig{};
  c.fp8DotDtype = compiler::Fp8DotDtype::F16;
  CHECK(errorOf(c) == "fp8_dot_dtype f16 needs the fp8 latent cache (kv_cache_dtype fp8_e4m3), got kv_cache_dtype auto");
  c.kvCacheFormat = KvCacheFormat::Fp8E4M3;
  CHECK(errorOf(c).empty());
  c.dtype = ir::ScalarKind::F32;
  CHECK(errorOf(c) == "fp8_dot_dtype f16 needs dtype bf16 or f16, got f32");
  c = MlaDecodeConfig{};
  c.kvCacheFormat = KvCacheFormat::Fp8E5M2;
  CHECK(errorOf(c).find("kv_cache_dtype fp8_e5m2 is not supported by mla_decode") != std::string::npos);
  c = MlaDecodeConfig{};
  c.blockH = 8;
  CHECK(errorOf(c).find("block_h (8) must be 16, 32 or 64") != std::string::npos);
  c = MlaDecodeConfig{};
  c.dtype = ir::ScalarKind::F32;
  c.qInShared = true;
  CHECK(errorOf(c).find("q_in_shared needs dtype f16 or bf16") != std::string::npos);
  c = MlaDecodeConfig{};
  c.blockSize = 0;
  CHECK(errorOf(c) == "block_size (0) must be between 1 and 256");
  CHECK_FALSE(compiler::buildMlaDecode(c).isOk());

  // The spec loader locates the error at the field.
  auto spec = compiler::loadSpecText(
      "family: mla_decode\nparams:\n  dtype: bf16\n  num_heads: 128\n  kv_lora_rank: 512\n  rope_dim: 64\n"
      "  block_size: 16\n  alibi: true\n",
      "alibi.yaml");
  REQUIRE_FALSE(spec.isOk());
  CHECK(spec.diagnostic().str().find("alibi.yaml:8:") != std::string::npos);
  CHECK(spec.diagnostic().message.find("alibi is not supported by mla_decode") != std::string::npos);
  spec = compiler::loadSpecText(
      "family: mla_decode\nparams:\n  dtype: bf16\n  num_heads: 128\n  kv_lora_rank: 512\n  rope_dim: 88\n"
      "  block_size: 16\n",
      "width.yaml");
  REQUIRE_FALSE(spec.isOk());
  CHECK(spec.diagnostic().message.find("600 is not supported") != std::string::npos);

  // Decode only: a batch with a longer query is refused.
  compiler::BatchShape prefill;
  prefill.queryLens = {1, 4};
  prefill.contextLens = {10, 10};
  auto run = validation::runMlaDecodeInterpreted(MlaDecodeConfig{}, prefill);
  REQUIRE_FALSE(run.isOk());
  CHECK(run.diagnostic().message.find("query_lens[1] is 4, expected 1") != std::string::npos);
}

TEST_CASE("specs/mla_decode.yaml loads and its first variants run on the interpreter", "[mla][spec]") {
  auto spec = compiler::loadSpecFile(tests::sourceDir() + "/specs/mla_decode.yaml");
  INFO((spec.isOk() ? std::string() : spec.diagnostic().str()));
  REQUIRE(spec.isOk());
  CHECK(spec->family == compiler::Family::MlaDecode);
  REQUIRE(spec->variants.size() == 32);
  // The 2D and split-KV kernels of the default shape (576, 128 heads, bs16, bf16).
  for (size_t i = 0; i < 2; ++i) {
    const compiler::Variant& variant = spec->variants[i];
    INFO(variant.name);
    auto result = validation::runVariantInterpreted(variant, spec->shape);
    INFO((result.isOk() ? result->detail : result.diagnostic().str()));
    REQUIRE(result.isOk());
    CHECK(result->passed);
  }
}

TEST_CASE("ptxas assembles every variant of specs/mla_decode.yaml for sm_80 and sm_90a", "[mla][ptxas]") {
  if (!tests::havePtxas()) {
    WARN("skipped: ptxas is not on the PATH; codegen is checked without assembling");
    return;
  }
  auto spec = compiler::loadSpecFile(tests::sourceDir() + "/specs/mla_decode.yaml");
  REQUIRE(spec.isOk());
  int assembled = 0, total = 0;
  for (const auto& variant : spec->variants)
    for (const char* arch : {"sm_80", "sm_90a"}) {
      INFO(variant.name << " for " << arch);
      auto kernel = compiler::buildVariantKernel(variant);
      REQUIRE(kernel.isOk());
      compiler::CompileOptions options;
      options.target = arch;
      auto compiled = compiler::compileKernel(**kernel, options);
      INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
      REQUIRE(compiled.isOk());
      const std::string& ptx = compiled->ptx;
      // Tensor cores for both products, operands through ldmatrix (plain for the
      // score's Kᵀ view, .trans for V).
      CHECK(ptx.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") != std::string::npos);
      CHECK(ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") != std::string::npos);
      std::string log;
      const bool ok = tests::assemblesWithPtxas(ptx, arch, &log);
      INFO(log);
      CHECK(ok);
      assembled += ok;
      ++total;
    }
  WARN("ptxas assembled " << assembled << " mla_decode kernels");
  CHECK(assembled == total);
}

TEST_CASE("f32 mla decode runs TF32 tensor cores, or FMAs when exact, and assembles", "[mla][f32][tf32][ptxas]") {
  MlaDecodeConfig config = smallConfig();
  config.dtype = ir::ScalarKind::F32;
  const std::string tf32 = mlaPtx(config);
  CHECK(tf32.find("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") != std::string::npos);
  CHECK(tf32.find("cvt.rna.tf32.f32") != std::string::npos);
  tests::checkAssembles(tf32, "sm_90a");
  config.fp32Precision = compiler::Fp32Precision::Ieee;
  CHECK(config.kernelName().find("_ieee") != std::string::npos);
  const std::string exact = mlaPtx(config);
  CHECK(exact.find("mma.sync") == std::string::npos);
  CHECK(exact.find("cvt.rna.tf32") == std::string::npos);
  CHECK(exact.find("fma.rn.f32") != std::string::npos);
  tests::checkAssembles(exact, "sm_90a");
}
