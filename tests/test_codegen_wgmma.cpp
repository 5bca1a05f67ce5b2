// Warpgroup MMA on sm_90a (codegen/lower/WarpgroupMma.cpp): which dots take it,
// the shared-memory layout its descriptors read, and that ptxas accepts every
// kernel that uses it. Numerics run on the GPU ([gpu] prefill tests compile
// for the device's sm_90a and so run these kernels).
#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "codegen/lower/SwizzledTile.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/kernels/MlaDecode.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "ir/KernelAttributes.h"
#include "tests/test_tools.h"

using namespace attnjit;
using attnjit::tests::countOf;

namespace {


std::string compilePtx(const compiler::UnifiedAttentionConfig& config, const std::string& target,
                       int warpgroupMma = 1) {
  auto kernel = compiler::buildUnifiedAttention(config);
  REQUIRE(kernel.isOk());
  ir::setKernelAttribute(**kernel, ir::KernelAttribute::WarpgroupMma, warpgroupMma);
  compiler::CompileOptions options;
  options.target = target;
  auto compiled = compiler::compileKernel(**kernel, options);
  INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
  REQUIRE(compiled.isOk());
  return compiled->ptx;
}

// The op API's prefill tiling: 128 rows over 4 warps, Q in shared memory.
compiler::UnifiedAttentionConfig prefill(int headSize, int tileSize, int numWarps, bool qInShared) {
  compiler::UnifiedAttentionConfig c;
  c.headSize = headSize;
  c.blockMRows = 128;
  c.numWarps = numWarps;
  c.tileSize = tileSize;
  c.qInShared = qInShared;
  return c;
}

// ptxas keeps a kernel's MMAs asynchronous (it serializes them, and says so,
// when anything touches an accumulator before its wait) and spills nothing.
// Relocatable like the driver's link, or whole-program as the runtime loads
// kernels with producer warps' register moves.
void checkAsynchronousWithoutSpills(const std::string& ptx, bool relocatable) {
  if (!tests::havePtxas()) return;
  const std::string info = tests::ptxasInfo(ptx, "sm_90a", relocatable);
  INFO(info);
  CHECK(info.find("Used ") != std::string::npos);
  CHECK(info.find("serialized") == std::string::npos);
  CHECK(info.find(" 0 bytes spill stores") != std::string::npos);
}

}  // namespace

TEST_CASE("column-blocked swizzled tiles are the hardware's 128-byte swizzle", "[codegen][wgmma]") {
  // The PTX ISA's 128-byte swizzle of a byte address: bits 4-6 XOR bits 7-9.
  auto hardware = [](int64_t byte) { return byte ^ (((byte >> 7) & 7) << 4); };
  for (int64_t rowElements : {64, 128, 256})
    for (int64_t rows : {8, 32, 128}) {
      codegen::SwizzledTile tile(1, rowElements, 2);
      tile.useColumnBlocks(rows);
      std::set<int64_t> seen;
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < rowElements; ++c) {
          INFO("row " << r << " col " << c << " of " << rows << " x " << rowElements);
          const int64_t byte = tile.offsetOf(r, c) * 2;
          // Column block c / 64 holds the tile's rows 128 bytes apart, swizzled.
          const int64_t block = c / 64, inBlock = (c % 64) * 2;
          CHECK(byte == block * rows * 128 + hardware(r * 128 + inBlock));
          seen.insert(byte);
        }
      CHECK(static_cast<int64_t>(seen.size()) == rows * rowElements);  // a permutation
    }
  // Rows of 128 bytes are already the pattern: column blocks change nothing.
  codegen::SwizzledTile plain(1, 64, 2), blocked(1, 64, 2);
  blocked.useColumnBlocks(32);
  for (int64_t r = 0; r < 32; ++r)
    for (int64_t c = 0; c < 64; c += 8) CHECK(plain.offsetOf(r, c) == blocked.offsetOf(r, c));
}

TEST_CASE("prefill on sm_90a runs both dots on wgmma, sm_90 and the switch keep mma.sync", "[codegen][wgmma]") {
  for (int headSize : {64, 128, 256})
    for (int tileSize : {16, 32, 64})
      for (int numWarps : {4, 8})
        for (bool qInShared : {true, false}) {
          if (headSize == 256 && tileSize == 64) continue;  // beyond shared memory with two slots each
          const compiler::UnifiedAttentionConfig config = prefill(headSize, tileSize, numWarps, qInShared);
          INFO(config.kernelName());
          const std::string ptx = compilePtx(config, "sm_90a");
          // Per KV loop (unmasked and masked): Q·Kᵀ has k = D in 16-steps, P·V k =
          // tile in 16-steps, each once per 64-row slice a warpgroup owns.
          const int perLoop = (headSize / 16 + tileSize / 16) * 128 / 64 / (numWarps / 4);
          CHECK(countOf(ptx, "wgmma.mma_async") == 2 * perLoop);
          CHECK(countOf(ptx, "mma.sync") == 0);
          CHECK(ptx.find("m64n" + std::to_string(tileSize) + "k16") != std::string::npos);
          CHECK(ptx.find("m64n" + std::to_string(headSize) + "k16") != std::string::npos);
          CHECK(ptx.find(".extern .shared .align 1024") != std::string::npos);
          CHECK(countOf(ptx, "fence.proxy.async.shared::cta") >= 2);
          // Q from shared memory is read through its descriptor, not ldmatrix.
          if (qInShared) CHECK(countOf(ptx, "ldmatrix") == 0);
          tests::checkAssembles(ptx, "sm_90a");

          const std::string sm90 = compilePtx(config, "sm_90");
          CHECK(countOf(sm90, "wgmma") == 0);
          CHECK(countOf(sm90, "mma.sync") > 0);
          const std::string off = compilePtx(config, "sm_90a", 0);
          CHECK(countOf(off, "wgmma") == 0);
          CHECK(countOf(off, "fence.proxy") == 0);
          CHECK(off.find(".extern .shared .align 16 ") != std::string::npos);
        }
}

TEST_CASE("fp8 caches dequantized in registers reach wgmma through one store", "[codegen][wgmma]") {
  // K and V are cast to bf16 in registers; each is stored once, in column
  // blocks, and both dots read it through descriptors (no ldmatrix of K or V).
  compiler::UnifiedAttentionConfig fp8 = prefill(128, 32, 4, true);
  fp8.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  const std::string fp8Ptx = compilePtx(fp8, "sm_90a");
  CHECK(countOf(fp8Ptx, "mma.sync") == 0);
  CHECK(countOf(fp8Ptx, "wgmma.mma_async") == 2 * (8 * 2 + 2 * 2));
  CHECK(countOf(fp8Ptx, "ldmatrix") == 0);
  tests::checkAssembles(fp8Ptx, "sm_90a");
  const std::string sm90 = compilePtx(fp8, "sm_90");
  CHECK(countOf(sm90, "wgmma") == 0);
  CHECK(countOf(sm90, "mma.sync") > 0);
  // Every quantized format on the op's Hopper prefill tiling (8 warps of 16
  // rows, 64-key tiles), at head sizes 64, 96 (padded to 128) and 128. int4
  // works on even and odd head dims as two groups of half the padded head size,
  // so at 64 its rows are 64 bytes, not a 128-byte block: mma.sync.
  for (compiler::KvCacheFormat format :
       {compiler::KvCacheFormat::Fp8E5M2, compiler::KvCacheFormat::Int8PerTokenHead,
        compiler::KvCacheFormat::Fp8PerTokenHead, compiler::KvCacheFormat::Int4PerTokenHead})
    for (int headSize : {64, 96, 128}) {
      compiler::UnifiedAttentionConfig c = prefill(headSize, 64, 8, false);
      c.kvCacheFormat = format;
      INFO(c.kernelName());
      const std::string ptx = compilePtx(c, "sm_90a");
      const bool wgmma = !(format == compiler::KvCacheFormat::Int4PerTokenHead && headSize == 64);
      CHECK((countOf(ptx, "mma.sync") == 0) == wgmma);
      CHECK((countOf(ptx, "wgmma.mma_async") > 0) == wgmma);
      tests::checkAssembles(ptx, "sm_90a");
    }
}

TEST_CASE("dots that wgmma cannot take stay on mma.sync on sm_90a", "[codegen][wgmma]") {
  // Decode: 16 rows, the warps split the keys (not all along M).
  compiler::UnifiedAttentionConfig decode;
  decode.tileSize = 64;
  const std::string decodePtx = compilePtx(decode, "sm_90a");
  CHECK(countOf(decodePtx, "wgmma") == 0);
  CHECK(countOf(decodePtx, "mma.sync") > 0);
  tests::checkAssembles(decodePtx, "sm_90a");
  // f32 has no 16-bit operands.
  compiler::UnifiedAttentionConfig f32 = prefill(128, 32, 4, true);
  f32.dtype = ir::ScalarKind::F32;
  CHECK(countOf(compilePtx(f32, "sm_90a"), "wgmma") == 0);
  // Head size 80 pads to 128: Q·Kᵀ stops at k = 80 (five k-steps per slice).
  const std::string padded = compilePtx(prefill(80, 32, 4, true), "sm_90a");
  CHECK(countOf(padded, "wgmma.mma_async") == 2 * (5 * 2 + 2 * 2));
  tests::checkAssembles(padded, "sm_90a");
}

TEST_CASE("a row maximum combines a thread's registers as a tree, not a chain", "[codegen][wgmma]") {
  // 64-key tiles on wgmma: each thread holds 16 scores of each of its two
  // rows. The softmax's exponentials wait for the row maximum, so the depth
  // of its max instructions before the first shuffle is on every tile's
  // critical path: log2(16) = 4 as a tree, 15 as a chain.
  const std::string ptx = compilePtx(prefill(128, 64, 8, false), "sm_90a");
  const size_t first = ptx.find("max.NaN.f32");
  REQUIRE(first != std::string::npos);
  const size_t shuffle = ptx.find("shfl.sync", first);
  REQUIRE(shuffle != std::string::npos);
  std::map<std::string, int> depth;  // register -> max instructions it waits for
  int deepest = 0, instructions = 0;
  std::istringstream lines(ptx.substr(first, shuffle - first));
  for (std::string line; std::getline(lines, line);) {
    if (line.find("max.NaN.f32") == std::string::npos) continue;
    std::istringstream fields(line.substr(line.find("max.NaN.f32") + 11));
    std::string result, x, y;
    fields >> result >> x >> y;
    auto operandDepth = [&](std::string name) {
      while (!name.empty() && (name.back() == ',' || name.back() == ';')) name.pop_back();
      auto it = depth.find(name);
      return it == depth.end() ? 0 : it->second;
    };
    result.pop_back();  // the comma
    depth[result] = 1 + std::max(operandDepth(x), operandDepth(y));
    deepest = std::max(deepest, depth[result]);
    ++instructions;
  }
  CHECK(instructions == 30);  // 15 per row
  CHECK(deepest == 4);
}

TEST_CASE("overlap_softmax issues P·V with the next tile's Q·Kᵀ and waits for it after the softmax", "[codegen][wgmma]") {
  for (bool causal : {true, false})
    for (bool qInShared : {true, false}) {
      compiler::UnifiedAttentionConfig config = prefill(128, 64, 8, qInShared);
      config.causal = causal;
      config.overlapSoftmax = true;
      INFO(config.kernelName());
      const std::string ptx = compilePtx(config, "sm_90a");
      CHECK(countOf(ptx, "mma.sync") == 0);
      // Per KV loop (unmasked and masked): Q·Kᵀ's 8 and P·V's 4 MMAs, then the
      // last tile's P·V after the loops.
      CHECK(countOf(ptx, "wgmma.mma_async") == 2 * (8 + 4) + 4);
      // In each loop one block commits Q·Kᵀ, then P·V, and waits for Q·Kᵀ only;
      // the wait for P·V follows the softmax's exponentials.
      CHECK(countOf(ptx, "wgmma.wait_group.sync.aligned 1;") == 2);
      size_t at = 0;
      for (int loop = 0; loop < 2; ++loop) {
        at = ptx.find("wgmma.wait_group.sync.aligned 1;", at);
        REQUIRE(at != std::string::npos);
        const size_t lagging = ptx.find("wgmma.wait_group.sync.aligned 0;", at);
        REQUIRE(lagging != std::string::npos);
        CHECK(countOf(ptx.substr(at, lagging - at), "ex2.approx") > 0);
        // The lagging wait starts a basic block (a branch on the CTA index to a
        // second copy of it), so ptxas cannot hoist it above the exponentials.
        const size_t block = ptx.rfind("{", lagging);
        REQUIRE(block != std::string::npos);
        const std::string wait = ptx.substr(block, ptx.find("}", lagging) - block);
        CHECK(countOf(wait, "bra.uni wgmma_wait_") == 2);
        CHECK(countOf(wait, "wgmma.wait_group.sync.aligned 0;") == 2);
        CHECK(countOf(wait, "%ctaid.x") == 1);
        at = lagging;
      }
      // ptxas keeps the MMAs asynchronous: it serializes them, and says so,
      // when anything touches an accumulator before its wait.
      if (tests::havePtxas()) {
        const std::string info = tests::ptxasInfo(ptx, "sm_90a");
        INFO(info);
        CHECK(info.find("Used ") != std::string::npos);
        CHECK(info.find("serialized") == std::string::npos);
      }
    }
  // Without the knob every wgmma group waits for all of itself.
  const std::string plain = compilePtx(prefill(128, 64, 8, true), "sm_90a");
  CHECK(countOf(plain, "wgmma.wait_group.sync.aligned 1;") == 0);
}

TEST_CASE("prefetch_scores issues the next tile's Q·Kᵀ before the softmax and waits for it at the loop's end",
          "[codegen][wgmma]") {
  for (bool causal : {true, false})
    for (bool qInShared : {true, false})
      for (bool producers : {false, true}) {
        compiler::UnifiedAttentionConfig config = prefill(128, 64, 8, qInShared);
        config.causal = causal;
        config.prefetchScores = true;
        config.warpSpecialize = producers;
        INFO(config.kernelName());
        const std::string ptx = compilePtx(config, "sm_90a");
        CHECK(countOf(ptx, "mma.sync") == 0);
        // The first tile's Q·Kᵀ in front of the loops, then per KV loop
        // (unmasked and masked) the next tile's 8 and this tile's P·V's 4.
        // Producer warps lower the body once more but emit no MMA.
        CHECK(countOf(ptx, "wgmma.mma_async") == 8 + 2 * (8 + 4));
        // Each loop's Q·Kᵀ block commits and does not wait; the softmax's
        // exponentials come next, then P·V's block, which waits for both, and
        // the deferred wait in its own basic block before the loop's end.
        size_t at = ptx.find("wgmma.wait_group.sync.aligned 0;");  // the first tile's
        REQUIRE(at != std::string::npos);
        for (int loop = 0; loop < 2; ++loop) {
          const size_t issue = ptx.find("wgmma.fence.sync.aligned;", at);
          REQUIRE(issue != std::string::npos);
          const size_t commit = ptx.find("wgmma.commit_group.sync.aligned;", issue);
          const size_t blockEnd = ptx.find("}", commit);
          CHECK(countOf(ptx.substr(issue, blockEnd - issue), "wgmma.mma_async") == 8);
          CHECK(countOf(ptx.substr(issue, blockEnd - issue), "wgmma.wait_group") == 0);
          const size_t valueBlock = ptx.find("wgmma.fence.sync.aligned;", blockEnd);
          REQUIRE(valueBlock != std::string::npos);
          CHECK(countOf(ptx.substr(blockEnd, valueBlock - blockEnd), "ex2.approx") >= 32);
          const size_t valueWait = ptx.find("wgmma.wait_group.sync.aligned 0;", valueBlock);
          REQUIRE(valueWait != std::string::npos);
          CHECK(countOf(ptx.substr(valueBlock, valueWait - valueBlock), "wgmma.mma_async") == 4);
          // P·V went out after Q·Kᵀ: the deferred wait lets one group stay in flight.
          const size_t deferred = ptx.find("wgmma.wait_group.sync.aligned 1;", valueWait + 1);
          REQUIRE(deferred != std::string::npos);
          const size_t block = ptx.rfind("{", deferred);
          CHECK(countOf(ptx.substr(block, ptx.find("}", deferred) - block), "bra.uni wgmma_wait_") == 2);
          CHECK(ptx.find("wgmma.fence.sync.aligned;", valueWait) > deferred);
          at = ptx.find("}", deferred);
        }
        // Nothing touches the prefetched scores before their wait.
        checkAsynchronousWithoutSpills(ptx, /*relocatable=*/!producers);
      }
}

TEST_CASE("prefetch_scores with overlap_softmax: one block issues both products, each waited for at its reader",
          "[codegen][wgmma]") {
  for (bool causal : {true, false}) {
    compiler::UnifiedAttentionConfig config = prefill(128, 64, 8, true);
    config.causal = causal;
    config.prefetchScores = config.overlapSoftmax = true;
    config.warpSpecialize = true;
    config.producerRegisters = 96;
    INFO(config.kernelName());
    const std::string ptx = compilePtx(config, "sm_90a");
    // The first tile's Q·Kᵀ, per loop the next tile's Q·Kᵀ and the previous
    // tile's P·V, and the last tile's P·V after the loops.
    CHECK(countOf(ptx, "wgmma.mma_async") == 8 + 2 * (8 + 4) + 4);
    size_t at = ptx.find("wgmma.wait_group.sync.aligned 0;");  // the first tile's
    REQUIRE(at != std::string::npos);
    for (int loop = 0; loop < 2; ++loop) {
      // P·V (read first, by the rescale) commits first, then Q·Kᵀ; no wait.
      const size_t issue = ptx.find("wgmma.fence.sync.aligned;", at);
      REQUIRE(issue != std::string::npos);
      const size_t firstCommit = ptx.find("wgmma.commit_group.sync.aligned;", issue);
      const size_t secondCommit = ptx.find("wgmma.commit_group.sync.aligned;", firstCommit + 1);
      CHECK(countOf(ptx.substr(issue, firstCommit - issue), "wgmma.mma_async.sync.aligned.m64n128") == 4);
      CHECK(countOf(ptx.substr(firstCommit, secondCommit - firstCommit), "wgmma.mma_async.sync.aligned.m64n64") == 8);
      const size_t rescaleWait = ptx.find("wgmma.wait_group.sync.aligned", secondCommit);
      REQUIRE(rescaleWait != std::string::npos);
      CHECK(ptx.compare(rescaleWait, 32, "wgmma.wait_group.sync.aligned 1;") == 0);
      CHECK(countOf(ptx.substr(secondCommit, rescaleWait - secondCommit), "ex2.approx") >= 32);
      const size_t loopEndWait = ptx.find("wgmma.wait_group.sync.aligned", ptx.find("}", rescaleWait));
      REQUIRE(loopEndWait != std::string::npos);
      CHECK(ptx.compare(loopEndWait, 32, "wgmma.wait_group.sync.aligned 0;") == 0);
      at = ptx.find("}", loopEndWait);
    }
    checkAsynchronousWithoutSpills(ptx, /*relocatable=*/false);
  }
}

TEST_CASE("ptxas keeps the wgmma of the op API's sm_90a tilings asynchronous", "[codegen][wgmma]") {
  // ptxas serializes a kernel's warpgroup MMAs (and says so) when anything
  // touches an accumulator between an MMA and its wait; the tilings the ops
  // pick on sm_90a must not fall into that.
  if (!tests::havePtxas()) {
    tests::skipTest("ptxas is not on the PATH");
    return;
  }
  std::vector<std::pair<std::string, std::string>> kernels;  // name, PTX
  for (int headSize : {64, 128, 256}) {
    compiler::UnifiedAttentionConfig config = prefill(headSize, headSize == 256 ? 32 : 64, 8, false);
    kernels.emplace_back(config.kernelName(), compilePtx(config, "sm_90a"));
  }
  compiler::UnifiedAttentionConfig fp8 = prefill(128, 64, 8, false);
  fp8.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  kernels.emplace_back(fp8.kernelName(), compilePtx(fp8, "sm_90a"));
  for (compiler::KvCacheFormat format : {compiler::KvCacheFormat::Auto, compiler::KvCacheFormat::Fp8E4M3}) {
    compiler::MlaDecodeConfig mla;  // 64 heads x 64 keys on 8 warps, q in shared memory
    mla.kvCacheFormat = format;
    mla.blockH = 64;
    mla.tileSize = 64;
    mla.numWarps = 8;
    mla.qInShared = true;
    auto kernel = compiler::buildMlaDecode(mla);
    REQUIRE(kernel);
    compiler::CompileOptions options;
    options.target = "sm_90a";
    auto compiled = compiler::compileKernel(**kernel, options);
    REQUIRE(compiled);
    kernels.emplace_back(mla.kernelName(), compiled->ptx);
  }
  for (const auto& [name, ptx] : kernels) {
    INFO(name);
    CHECK(countOf(ptx, "wgmma.mma_async") > 0);
    const std::string info = tests::ptxasInfo(ptx, "sm_90a");
    INFO(info);
    CHECK(info.find("Used ") != std::string::npos);
    CHECK(info.find("serialized") == std::string::npos);
  }
}
