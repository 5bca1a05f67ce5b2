// Codegen: every attention variant goes tile IR → PTX; the PTX carries what the
// design promises (tensor cores, launch bounds, vector accesses), and the CUDA
// toolkit's ptxas — when it is on the PATH — assembles it for sm_80 and sm_90a.
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>
#include <regex>
#include <set>
#include <string>
#include <tuple>

#include "tests/test_attention_checks.h"
#include "tests/test_paths.h"
#include "tests/test_tools.h"
#include "codegen/Target.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/driver/Jit.h"
#include "compiler/spec/Spec.h"
#include "compiler/kernels/ReduceSegments.h"
#include "compiler/kernels/MergeAttnStates.h"
#include "compiler/kernels/MlaDecode.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "ir/Parser.h"

using namespace attnjit;
using attnjit::tests::compileAttention;
using attnjit::tests::compileAttentionError;
using attnjit::tests::countOf;

namespace {

std::vector<compiler::UnifiedAttentionConfig> attentionConfigs() {
  std::vector<compiler::UnifiedAttentionConfig> configs;
  for (auto dtype : {ir::ScalarKind::BF16, ir::ScalarKind::F16, ir::ScalarKind::F32})
    for (bool causal : {true, false}) {
      compiler::UnifiedAttentionConfig c;
      c.dtype = dtype;
      c.causal = causal;
      configs.push_back(c);
    }
  compiler::UnifiedAttentionConfig exactF32;  // f32 dots as FMAs, no TF32 rounding
  exactF32.dtype = ir::ScalarKind::F32;
  exactF32.fp32Precision = compiler::Fp32Precision::Ieee;
  configs.push_back(exactF32);
  compiler::UnifiedAttentionConfig odd;  // non-power-of-two head, MHA, block 32
  odd.numQueryHeads = 4;
  odd.numKvHeads = 4;
  odd.headSize = 80;
  odd.blockSize = 32;
  configs.push_back(odd);
  compiler::UnifiedAttentionConfig wide;  // GQA 16: BLOCK_M = 16, one token per block
  wide.numQueryHeads = 32;
  wide.numKvHeads = 2;
  wide.headSize = 64;
  configs.push_back(wide);
  compiler::UnifiedAttentionConfig prefill;  // 128 query rows over 8 warps, pipelined
  prefill.blockMRows = 128;
  prefill.numWarps = 8;
  configs.push_back(prefill);
  compiler::UnifiedAttentionConfig unpipelined;
  unpipelined.numStages = 1;
  unpipelined.tileSize = 64;
  configs.push_back(unpipelined);
  compiler::UnifiedAttentionConfig pageOfOne;  // vLLM's decode tests: one token per cache block
  pageOfOne.blockSize = 1;
  configs.push_back(pageOfOne);
  compiler::UnifiedAttentionConfig blocksOf24;  // prefill tiles over blocks that are not multiples of 16
  blocksOf24.blockSize = 24;
  blocksOf24.blockMRows = 128;
  blocksOf24.numWarps = 8;
  configs.push_back(blocksOf24);
  return configs;
}

// The op API's decode tiling (16 rows, 64-key tiles) and its prefill tiling
// (128 rows over 4 warps, Q read from shared memory) with `prefillTileSize`-key tiles.
std::vector<compiler::UnifiedAttentionConfig> decodeAndPrefill(int prefillTileSize) {
  compiler::UnifiedAttentionConfig decode;
  decode.tileSize = 64;
  compiler::UnifiedAttentionConfig prefill;
  prefill.blockMRows = 128;
  prefill.numWarps = 4;
  prefill.qInShared = true;
  prefill.tileSize = prefillTileSize;
  return {decode, prefill};
}

}  // namespace

TEST_CASE("attention variants compile to PTX with tensor cores and launch bounds", "[codegen]") {
  // sm_90 runs the mma.sync path (sm_80-class), sm_90a puts the dots whose B
  // operand is a cp.async tile on wgmma (codegen/lower/WarpgroupMma.cpp).
  for (const char* target : {"sm_90", "sm_90a"})
    for (const auto& config : attentionConfigs()) {
      INFO(config.kernelName() << " " << target);
      const compiler::CompiledKernel compiled = compileAttention(config, target);
      const std::string& ptx = compiled.ptx;
      const bool hopper = std::string(target) == "sm_90a";
      CHECK(ptx.find(std::string(".target ") + target + "\n") != std::string::npos);
      CHECK(ptx.find(".maxntid " + std::to_string(config.numWarps * 32) + ", 1, 1") != std::string::npos);
      CHECK(ptx.find(".entry " + config.kernelName()) != std::string::npos);
      const bool halfPrecision = config.dtype != ir::ScalarKind::F32;
      const bool tf32 = !halfPrecision && config.fp32Precision == compiler::Fp32Precision::Tf32;
      const bool mmaSync = ptx.find("mma.sync.aligned.m16n8k16.row.col.f32") != std::string::npos;
      const bool wgmma = ptx.find("wgmma.mma_async.sync.aligned.m64n") != std::string::npos;
      CHECK((mmaSync || wgmma) == halfPrecision);
      if (!hopper) CHECK_FALSE(wgmma);
      // f32 dots run on the TF32 tensor cores (operands rounded by cvt.rna.tf32)
      // unless the config asks for exact f32.
      const bool tf32Mma = ptx.find("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") != std::string::npos;
      CHECK(tf32Mma == tf32);
      CHECK((ptx.find("cvt.rna.tf32.f32") != std::string::npos) == tf32);
      if (halfPrecision && !hopper) {
        // Tensor-core operands come out of swizzled shared tiles through ldmatrix:
        // K (pairs along the contiguous head dimension) plain, V transposed; the
        // tiles go in with 16-byte stores, never element by element.
        CHECK(ptx.find("ldmatrix.sync.aligned.m8n8.x4.shared.b16") != std::string::npos);
        CHECK(ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") != std::string::npos);
        CHECK(ptx.find("st.shared.v4.b32") != std::string::npos);
      }
      if (halfPrecision) {
        CHECK(ptx.find("st.shared.b16") == std::string::npos);
        CHECK(ptx.find("ld.shared.b16") == std::string::npos);
        CHECK(ptx.find("ld.shared.u16") == std::string::npos);
      }
      // The optimized tile IR shows every layout decision.
      CHECK((compiled.tirOptimized.find("#mma") != std::string::npos) == (halfPrecision || tf32));
      CHECK(compiled.tirOptimized.find("#blocked") != std::string::npos);
    }
}

TEST_CASE("kernels for sm_90 and newer wait for their stream predecessor before touching memory", "[codegen]") {
  // griddepcontrol.wait makes a programmatic dependent launch safe
  // (runtime::LaunchConfig::overlapPriorGrid); the trigger lets the next one start.
  compiler::UnifiedAttentionConfig prefill;
  prefill.blockMRows = 128;
  prefill.numWarps = 8;
  for (const codegen::TargetInfo& target : codegen::allTargets())
    for (const compiler::UnifiedAttentionConfig& config : {compiler::UnifiedAttentionConfig{}, prefill}) {
      INFO(config.kernelName() << " " << target.name);
      const std::string ptx = compileAttention(config, target.name).ptx;
      const size_t wait = ptx.find("griddepcontrol.wait;");
      const size_t trigger = ptx.find("griddepcontrol.launch_dependents;");
      if (!target.hasGridDependencyControl) {
        CHECK(ptx.find("griddepcontrol") == std::string::npos);
        continue;
      }
      REQUIRE(wait != std::string::npos);
      CHECK(trigger > wait);
      CHECK(trigger != std::string::npos);
      CHECK(countOf(ptx, "griddepcontrol.wait") == 1);
      for (const char* access : {"ld.global", "st.global", "cp.async", "ld.shared", "st.shared"}) {
        INFO(access);
        CHECK(ptx.find(access) > wait);
      }
    }
}

TEST_CASE("pipelined K/V tiles go from global to shared memory by cp.async", "[codegen][cp_async]") {
  for (int tile : {32, 64}) {
    compiler::UnifiedAttentionConfig config;  // bf16 decode tiling, D = 128
    config.tileSize = tile;
    INFO(config.kernelName());
    for (const char* target : {"sm_80", "sm_90a"}) {
      INFO(target);
      compiler::CompiledKernel compiled = compileAttention(config, target);
      // K [128, tile] and V [tile, 128] in 16-byte chunks over 128 threads, copied
      // once before the loop and once per iteration.
      const int chunksPerThread = 2 * (128 * tile * 2 / 16) / 128;
      CHECK(countOf(compiled.ptx, "cp.async.cg.shared.global") == 2 * chunksPerThread);
      CHECK(countOf(compiled.ptx, "cp.async.commit_group") == 4);  // K and V, prologue and loop
      // One wait before the reads of K and V (RedundantSync drops V's repeat).
      CHECK(countOf(compiled.ptx, "cp.async.wait_group") == 1);
      CHECK(countOf(compiled.ptx, "cp.async.wait_all") == 1);      // the loop's exit
      // Two slots each of K and V come before the scratch area.
      CHECK(compiled.sharedMemoryBytes >= 2 * 2 * 128 * tile * 2);
      // The tiles are read by ldmatrix (V transposed) straight from the copies.
      CHECK(compiled.ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") != std::string::npos);
    }
    // Off by request, and off without pipelining: the register path, no copies.
    compiler::UnifiedAttentionConfig registers = config;
    registers.asyncCopy = false;
    compiler::CompiledKernel viaRegisters = compileAttention(registers, "sm_90a");
    CHECK(countOf(viaRegisters.ptx, "cp.async") == 0);
    CHECK(viaRegisters.sharedMemoryBytes < 2 * 2 * 128 * tile * 2);
    compiler::UnifiedAttentionConfig unpipelined = config;
    unpipelined.numStages = 1;
    CHECK(countOf(compileAttention(unpipelined, "sm_90a").ptx, "cp.async") == 0);
  }
  // Prefill (128 rows, 8 warps) pipelines its K/V tiles the same way.
  compiler::UnifiedAttentionConfig prefill;
  prefill.blockMRows = 128;
  prefill.numWarps = 8;
  prefill.tileSize = 64;
  CHECK(countOf(compileAttention(prefill, "sm_90a").ptx, "cp.async.cg.shared.global") > 0);

  // A per-tensor fp8 tile is unpacked before its convert: it is read back from its
  // slot into the load layout (16-byte shared loads), not kept in registers.
  compiler::UnifiedAttentionConfig fp8;
  fp8.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  fp8.tileSize = 128;
  compiler::CompiledKernel fp8Kernel = compileAttention(fp8, "sm_90a");
  // K [128, 128] and V of one-byte values: 8 chunks each per thread, twice.
  CHECK(countOf(fp8Kernel.ptx, "cp.async.cg.shared.global") == 2 * 2 * 8);
  CHECK(fp8Kernel.ptx.find("ld.shared.v4.b32") != std::string::npos);
  // D = 256: K and V tiles of 32 KiB, two slots each, fit sm_90a's 227 KiB but not
  // sm_86's 99 KiB of shared memory per block: there the kernel is lowered again
  // with the register path.
  compiler::UnifiedAttentionConfig wide = fp8;
  wide.headSize = 256;
  compiler::CompiledKernel wideSm90 = compileAttention(wide, "sm_90a");
  CHECK(countOf(wideSm90.ptx, "cp.async.cg.shared.global") > 0);
  CHECK(wideSm90.sharedMemoryBytes > 99 * 1024);
  compiler::CompiledKernel wideSm86 = compileAttention(wide, "sm_86");
  CHECK(countOf(wideSm86.ptx, "cp.async") == 0);
  CHECK(wideSm86.sharedMemoryBytes <= 99 * 1024);
  // What no lowering gives up, the scratch area, can exceed a target too: 128
  // query rows of D=512 stage a 128 KiB output tile. That is an error naming
  // the bytes and the limit, not a kernel that could never launch.
  compiler::UnifiedAttentionConfig tall;
  tall.headSize = 512;
  tall.blockMRows = 128;
  tall.numWarps = 8;
  tall.tileSize = 16;
  const std::string tallSm86 = compileAttentionError(tall, "sm_86");
  CHECK(tallSm86.find("131072 bytes of shared memory") != std::string::npos);
  CHECK(tallSm86.find("sm_86 allows 101376") != std::string::npos);
  // Per-token-head rows (D + 4 bytes) are only 4-byte aligned: 4-byte copies
  // (.ca, the only kind below 16 bytes), K [128, 32] and V: 8 each per thread, twice.
  compiler::UnifiedAttentionConfig perTokenHead;
  perTokenHead.kvCacheFormat = compiler::KvCacheFormat::Int8PerTokenHead;
  const std::string perTokenHeadPtx = compileAttention(perTokenHead, "sm_90a").ptx;
  CHECK(countOf(perTokenHeadPtx, "cp.async.ca.shared.global") == 2 * 2 * 8);
  CHECK(countOf(perTokenHeadPtx, "cp.async.cg.shared.global") == 0);
}

TEST_CASE("per-token-head scales are read as one 4-byte row per key and change layout once", "[codegen][quant]") {
  // Each key's f32 scale is one 4-byte load through the row's byte pointer
  // reinterpreted as an f32 pointer; only that f32 goes to the score layout.
  // (Converting the scale's bytes instead costs barriers: even a single
  // [TILE, 4] byte tile takes 31 in the 128-key decode kernel, the bound
  // below; and bytes pulled apart right after the prefetch's load make each
  // tile wait for it.)
  for (auto format : {compiler::KvCacheFormat::Int8PerTokenHead, compiler::KvCacheFormat::Fp8PerTokenHead,
                      compiler::KvCacheFormat::Int4PerTokenHead}) {
    compiler::UnifiedAttentionConfig config = decodeAndPrefill(32)[0];
    config.kvCacheFormat = format;
    config.tileSize = 128;
    INFO(config.kernelName());
    const compiler::CompiledKernel compiled = compileAttention(config, "sm_90a");
    const std::string& tir = compiled.tirOptimized;
    CHECK(tir.find("scale_bytes") == std::string::npos);
    CHECK(countOf(tir, "= bitcast %k_scale_byte_ptrs") > 0);
    CHECK(countOf(tir, "= convert_layout %k_scale :") == 1);
    CHECK(countOf(tir, "= convert_layout %v_scale :") == 1);
    CHECK(countOf(compiled.ptx, "ld.global.u8") == 0);
    CHECK(countOf(compiled.ptx, "bar.sync") <= 31);
  }
  // A head size whose rows are not 4-byte multiples leaves the scale unaligned:
  // its bytes are loaded one by one and assembled.
  compiler::UnifiedAttentionConfig unaligned = decodeAndPrefill(32)[0];
  unaligned.kvCacheFormat = compiler::KvCacheFormat::Int8PerTokenHead;
  unaligned.headSize = 50;
  const compiler::CompiledKernel compiled = compileAttention(unaligned, "sm_90a");
  CHECK(countOf(compiled.tirOptimized, "%k_scale_bytes") > 0);
  CHECK(countOf(compiled.tirOptimized, "= bitcast %k_scale_byte_ptrs") == 0);
}

TEST_CASE("4-byte-aligned cache rows are copied in 4-byte runs, 8 lanes to a row", "[codegen][quant][layouts]") {
  // A per-token-head row (D + 4 bytes) is 4-byte aligned: each thread's run is
  // one 4-byte access, repeated along the row, with the lanes of 16-byte runs
  // (8 per 128-byte row), so a warp's copy instruction covers 32 contiguous
  // bytes of each of 4 rows instead of 4 bytes at a 16-byte stride. Aligned
  // rows (a bf16 cache) keep their 16-byte runs.
  compiler::UnifiedAttentionConfig config = decodeAndPrefill(32)[0];
  config.kvCacheFormat = compiler::KvCacheFormat::Int8PerTokenHead;
  config.tileSize = 128;
  const compiler::CompiledKernel quantized = compileAttention(config, "sm_90a");
  INFO(quantized.tirOptimized);
  CHECK(quantized.tirOptimized.find("%k_tile_next = load") != std::string::npos);
  CHECK(std::regex_search(quantized.tirOptimized,
                          std::regex(R"(%k_tile_next = load [^\n]*#blocked<spt=\[4,1\], tpw=\[8,4\], wpc=\[1,4\])")));
  CHECK(std::regex_search(quantized.tirOptimized,
                          std::regex(R"(%v_tile_next = load [^\n]*#blocked<spt=\[1,4\], tpw=\[4,8\], wpc=\[4,1\])")));
  config.kvCacheFormat = compiler::KvCacheFormat::Auto;
  config.tileSize = 64;
  const compiler::CompiledKernel bf16 = compileAttention(config, "sm_90a");
  CHECK(std::regex_search(bf16.tirOptimized, std::regex(R"(%k_tile_next = load [^\n]*#blocked<spt=\[8,1\])")));
}

namespace {
std::string kvLoopPtx(const std::string& ptx);
}  // namespace

TEST_CASE("shared tiles are addressed in 32 bits with few registers, slot reads sit next to their mma",
          "[codegen][cp_async]") {
  // Prefill tiling: 128 rows over 8 warps, 64-key K/V tiles by cp.async (two KV
  // loops: unmasked tiles, then masked ones).
  compiler::UnifiedAttentionConfig config;
  config.blockMRows = 128;
  config.numWarps = 8;
  config.tileSize = 64;
  const std::string ptx = compileAttention(config, "sm_90").ptx;
  // Every shared-memory address (the first operand of a shared access or copy) is
  // a 32-bit register, and the swizzled offsets of one tile differ from a few
  // per-phase registers by immediates: each KV loop's 64 ldmatrix go through at
  // most 12 registers (instead of a 64-bit address each).
  const std::regex sharedAccess(
      R"((?:ld\.shared|st\.shared|ldmatrix\S*|cp\.async\.c[ag]\.shared\S*)[^\[]*\[(%r[a-z]*)(\d+))");
  int accesses = 0;
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), sharedAccess); it != std::sregex_iterator(); ++it) {
    ++accesses;
    INFO(it->str());
    CHECK((*it)[1].str() == "%r");
  }
  CHECK(accesses > 100);
  CHECK(countOf(ptx, "ldmatrix") == 8 + 2 * 64);  // Q's conversion, then K and V in each loop
  const std::string loop = kvLoopPtx(ptx);
  std::set<std::string> ldmatrixRegisters;
  for (auto it = std::sregex_iterator(loop.begin(), loop.end(), sharedAccess); it != std::sregex_iterator(); ++it)
    if (it->str().rfind("ldmatrix", 0) == 0) ldmatrixRegisters.insert((*it)[2].str());
  CHECK(countOf(loop, "ldmatrix") == 64);
  CHECK(ldmatrixRegisters.size() <= 12);

  // V's reads (ldmatrix .trans, only ever from its slot) come after the softmax's
  // exponentials and between the P·V mma instructions; without sinking all of
  // them come before the first exponential. Either way each comes after the
  // loop's wait for the copies and the barrier behind it.
  auto first = [](const std::string& text, const std::string& what) { return text.find(what); };
  auto last = [](const std::string& text, const std::string& what) { return text.rfind(what); };
  const std::string trans = "ldmatrix.sync.aligned.m8n8.x4.trans";
  auto between = [&](const std::string& text, const std::string& what) {
    const size_t from = first(text, trans);
    return countOf(text.substr(from, last(text, trans) - from), what);
  };
  CHECK(first(loop, trans) > first(loop, "ex2.approx"));
  CHECK(between(loop, "mma.sync") > 0);
  CHECK(first(loop, trans) > first(loop, "cp.async.wait_group"));
  compiler::UnifiedAttentionConfig unsunk = config;
  unsunk.sinkSlotReads = false;
  CHECK(unsunk.kernelName() == config.kernelName() + "_nosink");
  const std::string unsunkLoop = kvLoopPtx(compileAttention(unsunk, "sm_90").ptx);
  CHECK(countOf(unsunkLoop, "ldmatrix") == 64);
  CHECK(last(unsunkLoop, trans) < first(unsunkLoop, "ex2.approx"));
  CHECK(between(unsunkLoop, "mma.sync") == 0);
  CHECK(first(unsunkLoop, trans) > first(unsunkLoop, "cp.async.wait_group"));
}

namespace {

// The PTX of the KV loop, the loop containing the mma instructions: from the
// label that a backward branch targets to the last such branch, in execution
// order. Where LLVM laid the loop out rotated (a block branched around inside
// the body, such as the lazy rescale, can make the join block come first), the
// text is rotated back to start at the block entered from before the loop.
std::string kvLoopPtx(const std::string& ptx) {
  const std::regex label(R"((\$L__BB\d+_\d+):)");
  auto lastBranchTo = [&](const std::string& name, size_t from) {
    const size_t branch = ptx.rfind("bra \t" + name + ";");
    const size_t branchUni = ptx.rfind("bra.uni \t" + name + ";");
    size_t last = std::string::npos;
    for (size_t at : {branch, branchUni})
      if (at != std::string::npos && at > from && (last == std::string::npos || at > last)) last = at;
    return last;
  };
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), label); it != std::sregex_iterator(); ++it) {
    const size_t start = static_cast<size_t>(it->position());
    const size_t end = lastBranchTo((*it)[1].str(), start);
    if (end == std::string::npos) continue;
    std::string body = ptx.substr(start, end - start);
    if (body.find("mma.sync") == std::string::npos) continue;
    // The loop's entry: a label inside it that a branch before the loop targets.
    for (auto inner = std::sregex_iterator(body.begin(), body.end(), label); inner != std::sregex_iterator(); ++inner) {
      const size_t at = static_cast<size_t>(inner->position());
      const size_t entry = ptx.substr(0, start).find("\t" + (*inner)[1].str() + ";");
      if (at > 0 && entry != std::string::npos) return body.substr(at) + body.substr(0, at);
    }
    return body;
  }
  return {};
}

}  // namespace

TEST_CASE("the KV loop synchronizes once per iteration", "[codegen][cp_async]") {
  for (const auto& config : decodeAndPrefill(64)) {
    INFO(config.kernelName());
    const compiler::CompiledKernel compiled = compileAttention(config, "sm_90");
    // The K and V copies need a tile's block numbers in their layouts: loaded in
    // those layouts, never converted through shared memory (two barriers each).
    // Prefill's threads each need 4 of the 64; decode's 8, keys t, t + 8, ...,
    // of which each pair lies in one 16-key block: 4 loads (equalValueRegisterBits).
    const bool prefillTiling = config.blockMRows == 128;
    const bool convertsBlockNumbers =
        std::regex_search(compiled.tirOptimized, std::regex(R"(convert_layout [^\n]*: tile<\d+xi32)"));
    CHECK_FALSE(convertsBlockNumbers);
    const std::string loop = kvLoopPtx(compiled.ptx);
    REQUIRE_FALSE(loop.empty());
    if (!prefillTiling) CHECK(countOf(loop, "ld.global.b32") == 4);  // K's and V's rows are the same registers
    // One wait for this tile's K and V copies, then one barrier that publishes
    // them and also protects the slots the next copies overwrite.
    CHECK(countOf(loop, "cp.async.wait_group") == 1);
    CHECK(countOf(loop, "cp.async.commit_group") == 2);
    CHECK(loop.find("bar.sync") > loop.find("cp.async.wait_group"));
    CHECK(loop.find("bar.sync") < loop.find("cp.async.cg.shared.global"));
    CHECK(loop.find("bar.sync") < loop.find("ldmatrix"));
    // Prefill's warps own whole rows: that is the only barrier. Decode's warps
    // split the keys, so its row maxima and P cross warps through shared memory
    // (two barriers each); its row sums are kept per column and reduced after
    // the loop.
    const int barriers = countOf(loop, "bar.sync");
    CHECK(barriers == (prefillTiling ? 1 : 1 + 2 * 2));
    if (!prefillTiling) {  // defer_row_sum: false sums each tile's rows across the warps
      compiler::UnifiedAttentionConfig perTile = config;
      perTile.deferRowSum = false;
      CHECK(countOf(kvLoopPtx(compileAttention(perTile, "sm_90").ptx), "bar.sync") == 1 + 3 * 2);
    }

    // With the pass off (kernel attribute remove_redundant_sync = 0) the lowering's
    // own barriers stay: one after each slot's wait and one before the copies.
    auto unprunedKernel = compiler::buildUnifiedAttention(config);
    REQUIRE(unprunedKernel.isOk());
    (*unprunedKernel)->attrs().set("remove_redundant_sync", int64_t{0});
    compiler::CompileOptions options;
    options.target = "sm_90";
    auto unpruned = compiler::compileKernel(**unprunedKernel, options);
    INFO((unpruned.isOk() ? std::string() : unpruned.diagnostic().str()));
    REQUIRE(unpruned.isOk());
    const std::string unprunedLoop = kvLoopPtx(unpruned->ptx);
    CHECK(countOf(unprunedLoop, "bar.sync") == barriers + 2);
    CHECK(countOf(unprunedLoop, "cp.async.wait_group") == 2);
  }
}

TEST_CASE("q_in_shared reads Q's fragments from shared memory in the KV loop, each B fragment feeds both m-tiles",
          "[codegen][cp_async]") {
  compiler::UnifiedAttentionConfig config = decodeAndPrefill(32)[1];  // 4 warps of 32 rows
  REQUIRE(config.qInShared);
  CHECK(config.kernelName() == "unified_attention_bf16_h32kv8_d128_bs16_causal_m128_qs");
  compiler::UnifiedAttentionConfig inRegisters = config;
  inRegisters.qInShared = false;
  const compiler::CompiledKernel shared = compileAttention(config, "sm_90");
  const compiler::CompiledKernel registers = compileAttention(inRegisters, "sm_90");
  CHECK(shared.tirOptimized.find("shared_invariant_operands = 1") != std::string::npos);
  // Q's buffer of its own: 128 rows × 128 dims of bf16.
  CHECK(shared.sharedMemoryBytes == registers.sharedMemoryBytes + 128 * 128 * 2);
  const std::string loop = kvLoopPtx(shared.ptx), registerLoop = kvLoopPtx(registers.ptx);
  REQUIRE_FALSE(loop.empty());
  REQUIRE_FALSE(registerLoop.empty());
  // Each warp's 32 rows × 128 dims are 16 ldmatrix.x4 per iteration, on top of K's.
  const std::string plain = "ldmatrix.sync.aligned.m8n8.x4.shared";
  CHECK(countOf(loop, plain) == countOf(registerLoop, plain) + 16);
  // The reads sit next to the mma that use them: the first mma of the
  // iteration waits for one k-step's fragments (two Q reads, one of K), not for
  // the whole tile.
  const size_t firstMma = loop.find("mma.sync");
  CHECK(countOf(loop.substr(0, firstMma), plain) <= 3);

  // Where Q's buffer does not fit next to the cp.async slots and the scratch
  // area (D=256: 64 KiB more), Q goes back to registers and K/V keep cp.async.
  compiler::UnifiedAttentionConfig wide = config;
  wide.headSize = 256;
  wide.numWarps = 8;
  wide.tileSize = 64;
  compiler::UnifiedAttentionConfig wideInRegisters = wide;
  wideInRegisters.qInShared = false;
  const compiler::CompiledKernel wideShared = compileAttention(wide, "sm_90");
  CHECK(wideShared.sharedMemoryBytes == compileAttention(wideInRegisters, "sm_90").sharedMemoryBytes);
  CHECK(wideShared.ptx.find("cp.async.cg.shared.global") != std::string::npos);

  // mma order: k outermost, m innermost, so consecutive mma of the two m-tiles
  // take the same B registers (a K or V fragment read once, used twice, dead).
  const std::regex mma(R"(mma\.sync[^{]*\{[^}]*\},\s*\{[^}]*\},\s*(\{[^}]*\}))");
  std::vector<std::string> bOperands;
  for (auto it = std::sregex_iterator(loop.begin(), loop.end(), mma); it != std::sregex_iterator(); ++it)
    bOperands.push_back((*it)[1].str());
  REQUIRE(bOperands.size() == 2 * (4 * 8 + 16 * 2));  // 2 m-tiles × (Q·Kᵀ: 4 n × 8 k; P·V: 16 n × 2 k)
  for (size_t i = 0; i + 1 < bOperands.size(); i += 2) {
    INFO("mma " << i);
    CHECK(bOperands[i] == bOperands[i + 1]);
  }
}

TEST_CASE("prefill tiles split the KV loop into unmasked and masked tiles that share their cp.async buffers",
          "[codegen][cp_async]") {
  for (bool causal : {true, false}) {
    compiler::UnifiedAttentionConfig config = decodeAndPrefill(32)[1];
    config.causal = causal;
    INFO(config.kernelName());
    const compiler::CompiledKernel compiled = compileAttention(config, "sm_90");
    // Two KV loops: tiles [start, unmasked_tile_end) without the score mask, then
    // the rest with it. Only the second compares key positions with the rows' limits.
    const std::string& tir = compiled.tirOptimized;
    const size_t first = tir.find("= for %tile_idx = ");
    const size_t second = tir.find("= for %tile_idx_1 = %unmasked_tile_end");
    REQUIRE(first != std::string::npos);
    REQUIRE(second != std::string::npos);
    CHECK(tir.find("%unmasked_tile_end") < first);
    CHECK(tir.find("key_visible") > second);
    CHECK(countOf(tir, "%key_visible = cmp") == 1);
    CHECK(countOf(compiled.ptx, "mma.sync") == 2 * 128);
    // Q's buffer (128 × 128 bf16), one set of K/V slots (2 × (32 × 128 bf16) × 2)
    // shared by both loops, then the scratch of the output conversion (128 × 128 bf16).
    CHECK(compiled.sharedMemoryBytes == 32768 + 32768 + 32768);
  }
  // The split is for prefill tiles only; decode keeps one loop.
  const compiler::CompiledKernel decode = compileAttention(decodeAndPrefill(32)[0], "sm_90");
  CHECK(decode.tirOptimized.find("unmasked_tile_end") == std::string::npos);
}

TEST_CASE("the output store's masks are computed after the KV loops, not kept through them", "[codegen]") {
  // The row mask guards the Q load before the loops and the output store after
  // them; kept through the loops, its elements are predicates (16 per thread at
  // 128 rows), which at prefill's 255 registers makes ptxas spill inside the loops.
  // Every predicate that guards a global store after the last mma must be set
  // after it too.
  for (const compiler::UnifiedAttentionConfig& config : decodeAndPrefill(32)) {
    INFO(config.kernelName());
    const std::string ptx = compileAttention(config, "sm_90").ptx;
    const size_t lastMma = ptx.rfind("mma.sync");
    REQUIRE(lastMma != std::string::npos);
    const std::string epilogue = ptx.substr(lastMma);
    const std::regex guardedStore(R"(@(%p\d+) st\.global)");
    int guarded = 0;
    for (auto it = std::sregex_iterator(epilogue.begin(), epilogue.end(), guardedStore); it != std::sregex_iterator();
         ++it) {
      ++guarded;
      const std::string predicate = (*it)[1].str();
      INFO(predicate);
      const std::regex definition("\\s(setp\\.\\S+|and\\.pred|or\\.pred|xor\\.pred|not\\.pred)\\s+" + predicate +
                                  "[,|]");
      CHECK(std::regex_search(epilogue, definition));
    }
    CHECK(guarded > 0);
  }
}

TEST_CASE("a head size below its power of two skips the zero mma steps and their ldmatrix", "[codegen]") {
  // Prefill (128 rows over 4 warps of 32, 32-key tiles, two KV loops): per warp
  // and loop, Q·Kᵀ is 2 m-tiles × 4 n-tiles × k-steps of 16 up to the head size,
  // P·V 2 m-tiles × n-tiles of 8 up to the head size × 2 k-steps. The ldmatrix
  // whose registers no mma reads are gone too.
  int fullLdmatrix = 0;
  for (int headSize : {128, 80, 96, 112}) {
    compiler::UnifiedAttentionConfig config = decodeAndPrefill(32)[1];
    config.headSize = headSize;
    INFO(config.kernelName());
    const compiler::CompiledKernel compiled = compileAttention(config, "sm_90");
    const int kSteps = (headSize + 15) / 16, nTiles = headSize / 8;
    CHECK(countOf(compiled.ptx, "mma.sync") == 2 * (2 * 4 * kSteps + 2 * nTiles * 2));
    if (headSize == 128) {
      fullLdmatrix = countOf(compiled.ptx, "ldmatrix");
      continue;
    }
    CHECK(countOf(compiled.ptx, "ldmatrix") < fullLdmatrix);
    CHECK(countOf(compiled.tirOptimized, "k_extent = " + std::to_string(headSize)) == 2);
    CHECK(countOf(compiled.tirOptimized, "n_extent = " + std::to_string(headSize)) == 2);
  }
  // Half-precision decode keeps the padded steps (skipping them is slower there;
  // measured: docs/perf-log.md, 2026-11-30).
  compiler::UnifiedAttentionConfig d128 = decodeAndPrefill(32)[0];
  compiler::UnifiedAttentionConfig d80 = d128;
  d80.headSize = 80;
  const compiler::CompiledKernel full = compileAttention(d128, "sm_90"), padded = compileAttention(d80, "sm_90");
  CHECK(countOf(padded.ptx, "mma.sync") == countOf(full.ptx, "mma.sync"));
  CHECK(padded.tirOptimized.find("_extent") == std::string::npos);
  // Exact f32 (FMAs): Q·Kᵀ stops at k = 80.
  compiler::UnifiedAttentionConfig f32 = d80;
  f32.dtype = ir::ScalarKind::F32;
  f32.fp32Precision = compiler::Fp32Precision::Ieee;
  compiler::UnifiedAttentionConfig f32Full = d128;
  f32Full.dtype = ir::ScalarKind::F32;
  f32Full.fp32Precision = compiler::Fp32Precision::Ieee;
  const int fmaPadded = countOf(compileAttention(f32, "sm_90").ptx, "fma.rn.f32");
  const int fmaFull = countOf(compileAttention(f32Full, "sm_90").ptx, "fma.rn.f32");
  CHECK(fmaPadded < fmaFull);
}

TEST_CASE("prefill tiles of 32 rows per warp branch around the accumulator's rescale", "[codegen]") {
  // Lazy rescaling: each thread compares its rows' factors with 1.0 and skips
  // the 128 multiplies of its accumulator when all are; V's slot reads still sink
  // past that branch to their mma. Decode's tiling multiplies without a branch.
  const auto configs = decodeAndPrefill(32);
  const std::string prefill = kvLoopPtx(compileAttention(configs[1], "sm_90").ptx);
  REQUIRE_FALSE(prefill.empty());
  CHECK(countOf(prefill, "setp.eq.f32") == 4);  // rows g and g + 8 of two m16 tiles
  CHECK(countOf(prefill, ", 0f3F800000;") == 4);
  const std::string trans = "ldmatrix.sync.aligned.m8n8.x4.trans";
  const size_t firstTrans = prefill.find(trans);
  const size_t lastCompare = prefill.rfind("setp.eq.f32");
  REQUIRE(firstTrans != std::string::npos);
  // Per 16-key step of P·V, 16 n-tiles need 8 reads (x4 .trans); every read
  // comes after the compare and among the P·V mma.
  CHECK(countOf(prefill, trans) == 16);
  CHECK(firstTrans > lastCompare);
  CHECK(firstTrans > prefill.find("ex2.approx"));
  CHECK(countOf(prefill.substr(firstTrans), "mma.sync") > 0);
  CHECK(countOf(prefill, "mul.f32") >= 128);
  const std::string decode = kvLoopPtx(compileAttention(configs[0], "sm_90").ptx);
  CHECK(countOf(decode, ", 0f3F800000;") == 0);
}

TEST_CASE("the score mask goes on Q·K before a scale known to be positive", "[codegen]") {
  // The softmax scale alone: -inf·scale = -inf, and the multiply then fuses with
  // exp2's subtraction.
  {
    const std::string& tir = compileAttention(decodeAndPrefill(32)[0], "sm_90a").tirOptimized;
    CHECK(countOf(tir, "%qk_masked = select %score_mask") == 1);
    CHECK(countOf(tir, "%s = mul %qk_masked") == 1);
    CHECK(tir.find("scaled_scores") == std::string::npos);
  }
  // Prefill tiles keep the select after the scale (measured faster there).
  {
    const std::string& tir = compileAttention(decodeAndPrefill(32)[1], "sm_90a").tirOptimized;
    CHECK(tir.find("qk_masked") == std::string::npos);
    CHECK(countOf(tir, " = select %score_mask") == 1);
  }
  // A softcap (tanh of the scaled score) or a per-tensor k_scale (any sign as far
  // as the kernel knows) masks the scaled scores instead.
  compiler::UnifiedAttentionConfig capped = decodeAndPrefill(32)[0];
  capped.softcap = 30.0;
  compiler::UnifiedAttentionConfig fp8 = decodeAndPrefill(32)[0];
  fp8.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  for (const compiler::UnifiedAttentionConfig& config : {capped, fp8}) {
    INFO(config.kernelName());
    const std::string& tir = compileAttention(config, "sm_90a").tirOptimized;
    CHECK(tir.find("qk_masked") == std::string::npos);
    CHECK(countOf(tir, "%s = select") == 1);
  }
}

namespace {
// A kernel of `loops` sequential loops, each Q·Kᵀ over 64 × 64 bf16 tiles of `b`
// loaded with a mask (so the pipeliner prefetches them and cp.async copies them).
std::string sequentialDotLoops(int loops) {
  std::string text =
      "kernel @sequential_loops(%a: ptr<global, bf16> {align = 16}, %b: ptr<global, bf16> {align = 16},\n"
      "    %out: ptr<global, f32> {align = 16}, %n: i32) attributes {num_warps = 4, num_stages = 2} {\n"
      "  %c0 = constant {value = 0} : i32\n"
      "  %c1 = constant {value = 1} : i32\n"
      "  %tile_elems = constant {value = 4096} : i32\n"
      "  %rows = arange {start = 0, end = 64} : tile<64xi32>\n"
      "  %row2 = expand_dims %rows {axis = 1} : tile<64x1xi32>\n"
      "  %col2 = expand_dims %rows {axis = 0} : tile<1x64xi32>\n"
      "  %c64 = constant {value = 64} : tile<64x1xi32>\n"
      "  %rs = mul %row2, %c64 : tile<64x1xi32>\n"
      "  %rsb = broadcast %rs : tile<64x64xi32>\n"
      "  %cb = broadcast %col2 : tile<64x64xi32>\n"
      "  %offs = add %rsb, %cb : tile<64x64xi32>\n"
      "  %aptrs = splat %a : tile<64x64xptr<global, bf16>>\n"
      "  %aat = addptr %aptrs, %offs : tile<64x64xptr<global, bf16>>\n"
      "  %q = load %aat : tile<64x64xbf16>\n"
      "  %bptrs = splat %b : tile<64x64xptr<global, bf16>>\n"
      "  %zero_k = constant {value = 0.0} : tile<64x64xbf16>\n"
      "  %limit = mul %n, %tile_elems : i32\n"
      "  %limits = splat %limit : tile<64x64xi32>\n"
      "  %acc0 = constant {value = 0.0} : tile<64x64xf32>\n";
  for (int l = 0; l < loops; ++l) {
    const std::string i = std::to_string(l);
    const std::string in = l == 0 ? "%acc0" : "%r" + std::to_string(l - 1);
    text += "  %r" + i + " = for %i" + i + " = %c0 to %n step %c1 iter_args(%acc" + i + "_in = " + in +
            ") -> (tile<64x64xf32>) {\n"
            "    %base" + i + " = mul %i" + i + ", %tile_elems : i32\n"
            "    %bo" + i + " = splat %base" + i + " : tile<64x64xi32>\n"
            "    %o" + i + " = add %offs, %bo" + i + " : tile<64x64xi32>\n"
            "    %bat" + i + " = addptr %bptrs, %o" + i + " : tile<64x64xptr<global, bf16>>\n"
            "    %km" + i + " = cmp %o" + i + ", %limits {pred = lt} : tile<64x64xi1>\n"
            "    %k" + i + " = load %bat" + i + ", %km" + i + ", %zero_k : tile<64x64xbf16>\n"
            "    %next" + i + " = dot %q, %k" + i + ", %acc" + i + "_in {acc = f32} : tile<64x64xf32>\n"
            "    yield %next" + i + "\n"
            "  }\n";
  }
  text += "  %optrs = splat %out : tile<64x64xptr<global, f32>>\n"
          "  %oat = addptr %optrs, %offs : tile<64x64xptr<global, f32>>\n"
          "  store %oat, %r" + std::to_string(loops - 1) + "\n"
          "  return\n"
          "}\n";
  return text;
}
}  // namespace

TEST_CASE("sequential loops share their cp.async buffers", "[codegen][cp_async]") {
  auto compileLoops = [](int loops) {
    auto module = ir::parseModule(sequentialDotLoops(loops), "sequential.tir");
    INFO((module ? std::string() : module.diagnostic().str()));
    REQUIRE(module.isOk());
    compiler::CompileOptions options;
    options.target = "sm_90a";
    auto compiled = compiler::compileKernel(*(*module)->kernels()[0], options);
    INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
    REQUIRE(compiled.isOk());
    return std::move(*compiled);
  };
  const compiler::CompiledKernel one = compileLoops(1);
  const compiler::CompiledKernel three = compileLoops(3);
  // 64 × 64 bf16 over 128 threads in 16-byte chunks: 4 copies per thread per
  // load, in each loop's prologue and body.
  CHECK(countOf(one.ptx, "cp.async.cg.shared.global") == 2 * 4);
  CHECK(countOf(three.ptx, "cp.async.cg.shared.global") == 3 * 2 * 4);
  // A loop's exit waits for its copies, and the next loop's first copy comes
  // after a barrier: the three loops use one loop's two 8 KiB slots.
  CHECK(one.sharedMemoryBytes >= 2 * 8192);
  CHECK(three.sharedMemoryBytes == one.sharedMemoryBytes);
}

TEST_CASE("MLA latent tiles are copied once and read twice from their cp.async slot", "[codegen][cp_async]") {
  compiler::MlaDecodeConfig config;  // 576/512, 16 heads per program, 16-key tiles
  auto kernel = compiler::buildMlaDecode(config);
  REQUIRE(kernel.isOk());
  compiler::CompileOptions options;
  options.target = "sm_90a";
  auto compiled = compiler::compileKernel(**kernel, options);
  INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
  REQUIRE(compiled.isOk());
  const std::string& ptx = compiled->ptx;
  const int copies = countOf(ptx, "cp.async.cg.shared.global");
  // Four 128-wide latent chunks and k_pe, 16 keys each, over 128 threads (16-byte
  // chunks): (4 * 16 * 128 + 16 * 64) * 2 / 16 / 128 = 9 per thread, twice.
  CHECK(copies == 18);
  // The latent tile is Kᵀ of Q·Kᵀ (its transpose, a view of the slot) and V of
  // P·V: both read by ldmatrix, plain and transposed.
  CHECK(ptx.find("ldmatrix.sync.aligned.m8n8.x4.shared.b16") != std::string::npos);
  CHECK(ptx.find("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16") != std::string::npos);
}

TEST_CASE("ptxas assembles every attention variant for sm_80 and sm_90a", "[codegen][ptxas]") {
  if (!tests::havePtxas()) {
    WARN("skipped: ptxas is not on the PATH; codegen is checked without assembling");
    return;
  }
  int assembled = 0;
  for (const auto& config : attentionConfigs())
    for (const char* arch : {"sm_80", "sm_90a"}) {
      INFO(config.kernelName() << " for " << arch);
      auto kernel = compiler::buildUnifiedAttention(config);
      REQUIRE(kernel.isOk());
      compiler::CompileOptions options;
      options.target = arch;
      auto compiled = compiler::compileKernel(**kernel, options);
      REQUIRE(compiled.isOk());
      std::string log;
      bool ok = tests::assemblesWithPtxas(compiled->ptx, arch, &log);
      INFO(log);
      CHECK(ok);
      assembled += ok;
    }
  WARN("ptxas assembled " << assembled << " kernels");
  CHECK(assembled == static_cast<int>(attentionConfigs().size() * 2));
}

TEST_CASE("ptxas assembles every shipped unified attention spec for sm_80 and sm_90a", "[codegen][ptxas][specs]") {
  // Every variant of every unified_attention spec in specs/ (the other families'
  // shipped specs have their own such tests), with the stage 2 of split-KV
  // variants. fp8 output converts without sm_89's cvt on sm_80.
  if (!tests::havePtxas()) {
    WARN("skipped: ptxas is not on the PATH; codegen is checked without assembling");
    return;
  }
  int assembled = 0, fp8Writers = 0, kernels = 0;
  for (const auto& entry : std::filesystem::directory_iterator(tests::sourceDir() + "/specs")) {
    if (entry.path().extension() != ".yaml") continue;
    auto spec = compiler::loadSpecFile(entry.path().string());
    INFO(entry.path().string());
    REQUIRE(spec.isOk());
    for (const auto& variant : spec->variants) {
      if (variant.family != attnjit::compiler::Family::UnifiedAttention) continue;
      const compiler::UnifiedAttentionConfig& config = variant.attention;
      for (const char* arch : {"sm_80", "sm_90a"}) {
        // compileKernel runs the passes on the kernel it is given: fresh ones per
        // target. With fp8 output the kernel writing `out` converts to fp8: the
        // attention kernel in 2D, stage 2 in split-KV (stage 1 writes f32).
        std::vector<std::pair<std::unique_ptr<ir::Kernel>, bool>> built;
        auto attention = compiler::buildUnifiedAttention(config);
        REQUIRE(attention.isOk());
        built.emplace_back(std::move(*attention), config.outputFp8 && !config.splitKv);
        if (config.splitKv) {
          auto reduce = compiler::buildReduceSegments(compiler::reduceSegmentsFor(config));
          REQUIRE(reduce.isOk());
          built.emplace_back(std::move(*reduce), config.outputFp8);
        }
        for (auto& [kernel, writesFp8] : built) {
          INFO(kernel->name() << " for " << arch);
          ++kernels;
          compiler::CompileOptions options;
          options.target = arch;
          auto compiled = compiler::compileKernel(*kernel, options);
          INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
          REQUIRE(compiled.isOk());
          if (writesFp8) {
            CHECK((compiled->ptx.find("cvt.rn.satfinite.e4m3x2.f32") != std::string::npos) ==
                  (std::string(arch) == "sm_90a"));
            ++fp8Writers;
          }
          std::string log;
          const bool ok = tests::assemblesWithPtxas(compiled->ptx, arch, &log);
          INFO(log);
          CHECK(ok);
          assembled += ok;
        }
      }
    }
  }
  WARN("ptxas assembled " << assembled << " kernels of the shipped unified attention specs, " << fp8Writers
                          << " of them writing fp8 output");
  CHECK(kernels >= 80);
  CHECK(fp8Writers > 0);
  CHECK(assembled == kernels);
}

TEST_CASE("unknown targets and too-old drivers are clear errors", "[codegen]") {
  auto kernel = compiler::buildUnifiedAttention({});
  REQUIRE(kernel.isOk());
  compiler::CompileOptions options;
  options.target = "sm_75";
  auto compiled = compiler::compileKernel(**kernel, options);
  REQUIRE_FALSE(compiled.isOk());
  CHECK(compiled.diagnostic().message.find("unknown target 'sm_75'") != std::string::npos);
  options.target = "sm_90a";
  options.driverMaxPtx = 78;  // a CUDA 12.3 driver cannot JIT sm_90a's PTX 8.0
  compiled = compiler::compileKernel(**kernel, options);
  REQUIRE_FALSE(compiled.isOk());
  CHECK(compiled.diagnostic().message.find("needs PTX ISA 8.0") != std::string::npos);
}

TEST_CASE("the dump folder receives every stage, the override folder replaces stages", "[codegen]") {
  namespace fs = std::filesystem;
  fs::path root = fs::temp_directory_path() / ("attnjit_dump_test_" + std::to_string(getpid()));
  fs::remove_all(root);
  compiler::UnifiedAttentionConfig config;
  config.numQueryHeads = 4;
  config.numKvHeads = 4;
  config.headSize = 64;
  auto kernel = compiler::buildUnifiedAttention(config);
  REQUIRE(kernel.isOk());
  const std::string name = config.kernelName();

  compiler::CompileOptions options;
  options.dumpDir = (root / "dump").string();
  auto compiled = compiler::compileKernel(**kernel, options);
  REQUIRE(compiled.isOk());
  for (const char* suffix : {".tir", ".opt.tir", ".ll", ".opt.ll", ".ptx", ".json"})
    CHECK(fs::exists(root / "dump" / (name + suffix)));
  std::ifstream dumpedPtx(root / "dump" / (name + ".ptx"));
  std::string ptxText((std::istreambuf_iterator<char>(dumpedPtx)), std::istreambuf_iterator<char>());
  CHECK(ptxText == compiled->ptx);
  CHECK(compiled->overridden.empty());

  // A hand-edited PTX (here: the generated one with a comment) replaces the generated one.
  fs::create_directories(root / "override");
  std::ofstream(root / "override" / (name + ".ptx")) << compiled->ptx << "// hand edited\n";
  // A hand-edited tile IR replaces the built kernel: here the dumped IR with a doc line.
  std::ifstream dumpedTir(root / "dump" / (name + ".tir"));
  std::string tirText((std::istreambuf_iterator<char>(dumpedTir)), std::istreambuf_iterator<char>());
  std::ofstream(root / "override" / (name + ".tir")) << "// edited by hand\n" << tirText;
  auto fresh = compiler::buildUnifiedAttention(config);
  REQUIRE(fresh.isOk());
  options.dumpDir.clear();
  options.overrideDir = (root / "override").string();
  auto overridden = compiler::compileKernel(**fresh, options);
  REQUIRE(overridden.isOk());
  CHECK(overridden->ptx.find("// hand edited") != std::string::npos);
  CHECK(overridden->tir.rfind("// edited by hand\n", 0) == 0);
  CHECK(overridden->overridden == std::vector<std::string>{"tir", "ptx"});

  // A broken override is a located error, not a crash.
  std::ofstream(root / "override" / (name + ".tir")) << "kernel @" << name << "(%x: i32) {\n  retrun\n}\n";
  auto broken = compiler::buildUnifiedAttention(config);
  REQUIRE(broken.isOk());
  auto failed = compiler::compileKernel(**broken, options);
  REQUIRE_FALSE(failed.isOk());
  CHECK(failed.diagnostic().str().find(name + ".tir:2:") != std::string::npos);
  fs::remove_all(root);
}

TEST_CASE("a compile resumed after its passes gives the PTX of a compile from the start", "[codegen]") {
  // The JIT stops at tir-opt to form its cache key, then on a miss continues
  // from that kernel instead of building it and running the passes again.
  compiler::UnifiedAttentionConfig config;
  config.tileSize = 64;
  compiler::CompiledKernel whole = compileAttention(config, "sm_90a");

  auto kernel = compiler::buildUnifiedAttention(config);
  REQUIRE(kernel.isOk());
  compiler::CompileOptions passesOnly;
  passesOnly.target = "sm_90a";
  passesOnly.stopAfter = "tir-opt";
  auto afterPasses = compiler::compileKernel(**kernel, passesOnly);
  REQUIRE(afterPasses.isOk());
  compiler::CompileOptions resumed;
  resumed.target = "sm_90a";
  resumed.passesDone = &*afterPasses;
  auto finished = compiler::compileKernel(**kernel, resumed);
  INFO((finished.isOk() ? std::string() : finished.diagnostic().str()));
  REQUIRE(finished.isOk());
  CHECK(finished->ptx == whole.ptx);
  CHECK(finished->tir == whole.tir);
  CHECK(finished->tirOptimized == whole.tirOptimized);
  CHECK(finished->passTimings.size() == whole.passTimings.size());

  // Passes that ran on an override .tir ran on another kernel: resuming is refused.
  compiler::CompiledKernel fromOverride = *afterPasses;
  fromOverride.overridden.push_back("tir");
  resumed.passesDone = &fromOverride;
  auto refused = compiler::compileKernel(**kernel, resumed);
  REQUIRE_FALSE(refused.isOk());
  CHECK(refused.diagnostic().str().find("override") != std::string::npos);
}

TEST_CASE("the kernel-cache key covers IR after passes, target, PTX version and versions", "[codegen]") {
  auto keyFor = [](const compiler::UnifiedAttentionConfig& config, const std::string& target) {
    auto kernel = compiler::buildUnifiedAttention(config);
    REQUIRE(kernel.isOk());
    compiler::CompileOptions options;
    options.target = target;
    options.stopAfter = "tir-opt";
    auto afterPasses = compiler::compileKernel(**kernel, options);
    REQUIRE(afterPasses.isOk());
    return compiler::jitCacheKey(*afterPasses, options);
  };
  compiler::UnifiedAttentionConfig base;
  std::string key = keyFor(base, "sm_90a");
  CHECK(key == keyFor(base, "sm_90a"));  // deterministic
  CHECK(key.find("llvm 22.") != std::string::npos);
  CHECK(key.find("codegen revision ") != std::string::npos);
  CHECK(key.find("target sm_90a ptx 90") != std::string::npos);
  CHECK(key.find("#mma") != std::string::npos);  // the IR after layout assignment
  CHECK(key != keyFor(base, "sm_80"));
  compiler::UnifiedAttentionConfig other = base;
  other.causal = false;
  CHECK(key != keyFor(other, "sm_90a"));
  compiler::UnifiedAttentionConfig registers = base;  // same IR ops, another codegen path
  registers.asyncCopy = false;
  CHECK(key != keyFor(registers, "sm_90a"));
}

TEST_CASE("a broadcast row converts as a row, never as the broadcast tile", "[codegen][layouts]") {
  // The LSE weights of merge_attn_states and the softmax rescale of the f32
  // (FMA-path) attention kernel are [M] rows broadcast to [M, D]: layout
  // assignment must convert the row into the consumer's slice layout and
  // broadcast there, not move the [M, D] tile through shared memory.
  std::regex wideConversion(R"(convert_layout [^\n]*: tile<\d+x\d+xf32, #blocked)");
  compiler::MergeAttnStatesConfig merge;
  merge.dtype = ir::ScalarKind::BF16;
  merge.numHeads = 32;
  merge.headSize = 128;
  compiler::UnifiedAttentionConfig fmaAttention;
  fmaAttention.dtype = ir::ScalarKind::F32;
  fmaAttention.fp32Precision = compiler::Fp32Precision::Ieee;
  std::vector<std::pair<std::string, support::Expected<std::unique_ptr<ir::Kernel>>>> kernels;
  kernels.emplace_back("merge", compiler::buildMergeAttnStates(merge));
  kernels.emplace_back("f32 attention", compiler::buildUnifiedAttention(fmaAttention));
  for (auto& [what, kernel] : kernels) {
    INFO(what);
    REQUIRE(kernel.isOk());
    compiler::CompileOptions options;
    options.stopAfter = "tir-opt";
    auto compiled = compiler::compileKernel(**kernel, options);
    REQUIRE(compiled.isOk());
    INFO(compiled->tirOptimized);
    CHECK_FALSE(std::regex_search(compiled->tirOptimized, wideConversion));
  }
}

TEST_CASE("mma operands are packed once per dot and ldmatrix words pass straight in", "[codegen]") {
  // Each mma.sync takes six 32-bit operand registers. The A fragments of P·V feed
  // every n-tile and an ldmatrix result already is such a register: lowered
  // without repeats, the kernels build fewer <2 x bf16> pairs than they issue mma
  // (before: six per mma, 408 pairs for 32 mma in decode), so the LLVM pipeline
  // has that much less to clean up.
  for (const auto& config : decodeAndPrefill(compiler::UnifiedAttentionConfig{}.tileSize)) {
    INFO(config.kernelName());
    const compiler::CompiledKernel compiled = compileAttention(config, "sm_90");
    const int mmas = countOf(compiled.llvmIr, "call { float, float, float, float } @llvm.nvvm.mma.m16n8k16");
    const int pairs = countOf(compiled.llvmIr, "insertelement <2 x bfloat> poison");
    CHECK(mmas >= 32);
    CHECK(pairs < mmas);
    CHECK(countOf(compiled.ptx, "mma.sync.aligned.m16n8k16") == mmas);
  }
}

TEST_CASE("the fast LLVM pipeline keeps the PTX's tensor-core and memory instructions", "[codegen][ptxas]") {
  // LlvmPipeline::Fast trades O3's generality for compile time; what the kernels
  // are built around must come out the same: every mma, ldmatrix and cp.async,
  // and the vector shared/global accesses.
  auto count = [](const std::string& ptx, const std::string& needle) {
    size_t n = 0;
    for (size_t at = ptx.find(needle); at != std::string::npos; at = ptx.find(needle, at + 1)) ++n;
    return n;
  };
  compiler::UnifiedAttentionConfig decode;
  compiler::UnifiedAttentionConfig prefill;
  prefill.blockMRows = 128;
  prefill.numWarps = 8;
  for (const auto& config : {decode, prefill}) {
    INFO(config.kernelName());
    auto compileWith = [&](codegen::LlvmPipeline pipeline) {
      auto kernel = compiler::buildUnifiedAttention(config);
      REQUIRE(kernel.isOk());
      compiler::CompileOptions options;
      options.target = "sm_90a";
      options.llvmPipeline = pipeline;
      auto compiled = compiler::compileKernel(**kernel, options);
      INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
      REQUIRE(compiled.isOk());
      return *compiled;
    };
    compiler::CompiledKernel o3 = compileWith(codegen::LlvmPipeline::O3);
    compiler::CompiledKernel fast = compileWith(codegen::LlvmPipeline::Fast);
    CHECK(fast.llvmIrOptimized != o3.llvmIrOptimized);  // another pipeline did run
    CHECK(fast.llvmIrOptimized.size() < fast.llvmIr.size() * 3 / 4);  // and it simplified
    for (const char* needle : {"mma.sync.aligned.m16n8k16", "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                               "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", "cp.async.cg.shared.global",
                               "st.shared.v4.b32", "ld.shared.v4.b32", "st.global.v4", "bar.sync"}) {
      INFO(needle);
      CHECK(count(fast.ptx, needle) == count(o3.ptx, needle));
    }
    if (tests::havePtxas()) {
      std::string log;
      CHECK(tests::assemblesWithPtxas(fast.ptx, "sm_90a", &log));
      INFO(log);
    }
    // The cache never hands an O3 kernel to a fast-pipeline compile, or back.
    compiler::CompileOptions o3Options, fastOptions;
    o3Options.llvmPipeline = codegen::LlvmPipeline::O3;
    fastOptions.llvmPipeline = codegen::LlvmPipeline::Fast;
    CHECK(compiler::jitCacheKey(o3, o3Options) != compiler::jitCacheKey(fast, fastOptions));
  }
}

TEST_CASE("ATTNJIT_LLVM_PIPELINE picks the LLVM pipeline when the options do not", "[codegen]") {
  compiler::UnifiedAttentionConfig config;
  auto kernel = compiler::buildUnifiedAttention(config);
  REQUIRE(kernel.isOk());
  compiler::CompileOptions options;
  options.target = "sm_90a";
  options.stopAfter = "tir-opt";
  auto afterPasses = compiler::compileKernel(**kernel, options);
  REQUIRE(afterPasses.isOk());
  struct RestoreEnvironment {
    ~RestoreEnvironment() { ::unsetenv("ATTNJIT_LLVM_PIPELINE"); }
  } restore;
  ::setenv("ATTNJIT_LLVM_PIPELINE", "fast", 1);
  CHECK(compiler::jitCacheKey(*afterPasses, options).find("llvm-pipeline fast\n") != std::string::npos);
  compiler::CompileOptions explicitO3 = options;  // the options win over the environment
  explicitO3.llvmPipeline = codegen::LlvmPipeline::O3;
  CHECK(compiler::jitCacheKey(*afterPasses, explicitO3).find("llvm-o3 on\n") != std::string::npos);
  ::setenv("ATTNJIT_LLVM_PIPELINE", "O2", 1);
  compiler::CompileOptions toPtx;
  toPtx.target = "sm_90a";
  auto again = compiler::buildUnifiedAttention(config);
  REQUIRE(again.isOk());
  auto rejected = compiler::compileKernel(**again, toPtx);
  REQUIRE_FALSE(rejected.isOk());
  CHECK(rejected.diagnostic().str().find("ATTNJIT_LLVM_PIPELINE") != std::string::npos);
  CHECK(rejected.diagnostic().message == "unknown LLVM pipeline 'O2': expected fast (the default) or o3");
  ::setenv("ATTNJIT_LLVM_PIPELINE", "o3", 1);
  CHECK(compiler::jitCacheKey(*afterPasses, options).find("llvm-o3 on\n") != std::string::npos);
  ::unsetenv("ATTNJIT_LLVM_PIPELINE");
  CHECK(compiler::jitCacheKey(*afterPasses, options).find("llvm-pipeline fast\n") != std::string::npos);
}

TEST_CASE("attention with head sizes from 1 to 1024 compiles and assembles", "[codegen][ptxas][headsize]") {
  // The tilings the op picks for these head sizes (576/512: MLA's latent rows
  // read as DiffKV attention; f32 at 1024: no room for cp.async slots), then the
  // two families of tiles.
  const std::tuple<ir::ScalarKind, int, int> heads[] = {{ir::ScalarKind::BF16, 24, 0},
                                                        {ir::ScalarKind::BF16, 512, 0},
                                                        {ir::ScalarKind::BF16, 576, 512},
                                                        {ir::ScalarKind::BF16, 1024, 0},
                                                        {ir::ScalarKind::F32, 1024, 0}};
  for (const auto& [dtype, headSize, valueHeadSize] : heads)
    for (int queryLen : {1, 300}) {
      ops::PagedAttentionParams p;
      p.dtype = dtype;
      p.numQueryHeads = 32;
      p.numKvHeads = 8;
      p.headSize = headSize;
      p.valueHeadSize = valueHeadSize;
      p.blockSize = 16;
      p.numSeqs = 4;
      p.numTokens = 4 * queryLen;
      p.maxQueryLen = queryLen;
      const compiler::UnifiedAttentionConfig chosen = ops::selectPagedAttentionVariant(p);
      INFO(chosen.kernelName());
      if (std::max(headSize, valueHeadSize) > 256) CHECK(chosen.tileSize == 16);
      const compiler::CompiledKernel compiled = compileAttention(chosen, "sm_90a");
      tests::checkAssembles(compiled.ptx, "sm_90a");
    }
  for (int headSize : {1, 8, 24, 72, 320, 512, 1024})
    for (int blockMRows : {0, 128}) {
      compiler::UnifiedAttentionConfig config;
      config.headSize = headSize;
      config.blockMRows = blockMRows;
      config.numWarps = blockMRows ? 8 : 4;
      config.tileSize = headSize > 256 ? 16 : 32;
      INFO(config.kernelName());
      if (headSize == 1024 && blockMRows == 128) {
        // 128 rows of 1024 bf16 columns stage a 256 KiB output tile: more
        // than sm_90a's 227 KiB per block, an error rather than a kernel that
        // could never launch (the op takes 16-row tiles at such head sizes).
        CHECK(compileAttentionError(config, "sm_90a").find("262144 bytes of shared memory") != std::string::npos);
        continue;
      }
      const compiler::CompiledKernel compiled = compileAttention(config, "sm_90a");
      // A one-element head has no dot product to put on tensor cores.
      if (headSize > 1)
        CHECK((compiled.ptx.find("mma.sync.aligned.m16n8k16") != std::string::npos ||
               compiled.ptx.find("wgmma.mma_async") != std::string::npos));
      tests::checkAssembles(compiled.ptx, "sm_90a");
    }
}

TEST_CASE("attention with one-sided windows assembles in both tilings", "[codegen][ptxas][window]") {
  for (int right : {-1, 1, 40})
    for (int blockMRows : {0, 128}) {
      compiler::UnifiedAttentionConfig config;
      config.causal = false;
      config.slidingWindow = right == -1 ? 64 : 0;
      config.slidingWindowRight = right;
      config.blockMRows = blockMRows;
      config.numWarps = blockMRows ? 8 : 4;
      INFO(config.kernelName());
      const compiler::CompiledKernel compiled = compileAttention(config, "sm_90a");
      CHECK(compiled.tirOptimized.find(right > 0 ? "SLIDING_WINDOW_RIGHT" : "SLIDING_WINDOW") != std::string::npos);
      tests::checkAssembles(compiled.ptx, "sm_90a");
    }
}

TEST_CASE("attention with fp8 queries assembles for sm_80 and sm_90a", "[codegen][ptxas][qfp8]") {
  for (const char* arch : {"sm_80", "sm_90a"})
    for (int blockMRows : {0, 128}) {
      compiler::UnifiedAttentionConfig config;
      config.queryFp8 = true;
      config.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
      config.blockMRows = blockMRows;
      config.numWarps = blockMRows ? 8 : 4;
      INFO(config.kernelName() << " for " << arch);
      const compiler::CompiledKernel compiled = compileAttention(config, arch);
      // sm_90a's 8-warp prefill tile runs its dots on wgmma, reading the
      // dequantized K and V through descriptors.
      if (std::string(arch) == "sm_90a" && blockMRows) {
        CHECK(compiled.ptx.find("k16.f32.bf16.bf16") != std::string::npos);
        CHECK(compiled.ptx.find("mma.sync") == std::string::npos);
      } else {
        CHECK(compiled.ptx.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") != std::string::npos);
      }
      tests::checkAssembles(compiled.ptx, arch);
    }
}
