// Producer warps for the cp.async pipelines (kernel attribute warp_specialize,
// codegen/lower/WarpSpecialization.cpp): the roles, the mbarrier protocol and
// the registers, read off the PTX, and ptxas accepting it. The schedule runs on
// the GPU ([gpu] "GPU prefill with producer warps").
#include <catch2/catch.hpp>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "codegen/Codegen.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/kernels/MlaDecode.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "ir/KernelAttributes.h"
#include "tests/test_attention_checks.h"
#include "tests/test_tools.h"

using namespace attnjit;
using attnjit::tests::countOf;

namespace {

compiler::CompiledKernel compile(const compiler::UnifiedAttentionConfig& config, const std::string& target) {
  auto kernel = compiler::buildUnifiedAttention(config);
  REQUIRE(kernel.isOk());
  compiler::CompileOptions options;
  options.target = target;
  auto compiled = compiler::compileKernel(**kernel, options);
  INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
  REQUIRE(compiled.isOk());
  return *compiled;
}

// An mbarrier with one expected arrival per phase (the model's producer and
// compute warps each act as one party).
struct ModelBarrier {
  int completedPhases = 0;
  void arrive() { ++completedPhases; }
  // mbarrier.try_wait.parity: true once the phase of that parity is complete,
  // i.e. when it is not the current phase (a fresh barrier is in phase 0).
  bool tryWait(int parity) const { return parity != (completedPhases & 1); }
};

// The protocol's arithmetic for buffers of `slots` slots: fill of iteration
// i, slot of fill f, parities, and the slot the compute warps carry into
// iteration i.
struct SlotProtocol {
  int slots = 2;
  std::function<int(int)> fillOfIteration, slotOf, emptyWaitParity, fullWaitParity, slotOfIteration;
};

// What the producer does, fill by fill, and what the compute warps do, read by
// read, for runSlotModel.
struct ModelFill {
  int number, slot;
  int emptyParity;  // the parity it waits for on its slot's empty barrier; -1: no wait
};
struct ModelRead {
  int fill, slot, fullParity;
  bool unread;  // the compute warps take the fill without reading it (its loop's exit)
};

// The slot barriers under a random interleaving of the producer (issuing
// `fills` in order, each after its empty wait), the copies landing (each
// arrives on its slot's full barrier) and the compute warps (each read waits
// on full, checks the slot holds its fill, landed, and releases it on empty).
// Empty when every fill lands, every read finds its own fill after it landed
// and no fill overwrites an unread one; else what went wrong.
std::string runSlotModel(int slots, const std::vector<ModelFill>& fills, const std::vector<ModelRead>& reads,
                         std::mt19937& random) {
  struct Slot {
    int fill = -1;
    bool landed = false, read = true;
  };
  std::vector<Slot> state(static_cast<size_t>(slots));
  std::vector<ModelBarrier> full(state.size()), empty(state.size());
  std::vector<ModelFill> inFlight;
  size_t nextFill = 0, nextRead = 0;
  for (;;) {
    std::vector<std::function<std::string()>> enabled;
    if (nextFill < fills.size()) {
      const ModelFill fill = fills[nextFill];
      if (fill.emptyParity < 0 || empty[fill.slot].tryWait(fill.emptyParity))
        enabled.push_back([&, fill]() -> std::string {
          if (!state[fill.slot].read)
            return "fill " + std::to_string(fill.number) + " overwrote unread fill " +
                   std::to_string(state[fill.slot].fill);
          state[fill.slot] = {fill.number, false, false};
          inFlight.push_back(fill);
          ++nextFill;
          return {};
        });
    }
    for (size_t i = 0; i < inFlight.size(); ++i)
      enabled.push_back([&, i]() -> std::string {
        const ModelFill fill = inFlight[i];
        inFlight.erase(inFlight.begin() + static_cast<long>(i));
        if (state[fill.slot].fill != fill.number)
          return "fill " + std::to_string(fill.number) + " landed in a refilled slot";
        state[fill.slot].landed = true;
        full[fill.slot].arrive();
        return {};
      });
    if (nextRead < reads.size()) {
      const ModelRead read = reads[nextRead];
      if (full[read.slot].tryWait(read.fullParity))
        enabled.push_back([&, read]() -> std::string {
          Slot& slot = state[read.slot];
          if (slot.fill != read.fill || !slot.landed)
            return std::string(read.unread ? "taking unread fill " : "read of fill ") + std::to_string(read.fill) +
                   " found fill " + std::to_string(slot.fill) + (slot.landed ? "" : " before it landed");
          slot.read = true;
          empty[read.slot].arrive();
          ++nextRead;
          return {};
        });
    }
    if (enabled.empty())
      return nextFill == fills.size() && nextRead == reads.size() && inFlight.empty()
                 ? std::string()
                 : "deadlock at fill " + std::to_string(nextFill) + ", read " + std::to_string(nextRead);
    std::uniform_int_distribution<size_t> pick(0, enabled.size() - 1);
    if (std::string error = enabled[pick(random)](); !error.empty()) return error;
  }
}

// One pipelined loop of `iterations`: fills 0 .. iterations (fill f > 0 waits
// on its slot's empty barrier first), iteration i reads fill i from the slot
// the carried chain names.
std::string runSlotProtocol(const SlotProtocol& p, int iterations, std::mt19937& random) {
  std::vector<ModelFill> fills;
  for (int n = 0; n <= iterations; ++n) {
    const int fill = n == 0 ? 0 : p.fillOfIteration(n - 1);
    fills.push_back({fill, p.slotOf(fill), n == 0 ? -1 : p.emptyWaitParity(fill)});
  }
  std::vector<ModelRead> reads;
  for (int i = 0; i < iterations; ++i) reads.push_back({i, p.slotOfIteration(i), p.fullWaitParity(i), false});
  return runSlotModel(p.slots, fills, reads, random);
}

// Carried fills (persistent programs' KV loops, WarpSpecialization.h): runs of
// `runs[r]` iterations each, one after the other on the same ring of slots,
// fills numbered on from run to run (run r's fills f = 0 .. n_r are ring fill
// base_r + f, base_{r+1} = base_r + n_r + 1), every fill waiting for its slot's
// release (the prologue's too), the compute warps' slot chain starting at the
// slot of base_r, and at each run's exit the compute warps taking the unread
// fill base_r + n_r (waiting for it, then releasing its slot). The producer
// runs ahead into later runs as far as the slots allow. The arithmetic comes
// from the emitted table; `takeUnread` and the compute warps' count of a run's
// fills (n_r + 1 + `readCountSkew`) can be broken to show that the model notices.
std::string runCarriedFills(const codegen::SlotProtocolTable& table, int slots, const std::vector<int>& runs,
                            std::mt19937& random, bool takeUnread = true, int readCountSkew = 0) {
  auto at = [](const std::vector<int>& values, int n) { return values.at(static_cast<size_t>(n)); };
  std::vector<ModelFill> fills;
  std::vector<ModelRead> reads;
  int base = 0, readBase = 0;
  for (int n : runs) {
    for (int f = base; f <= base + n; ++f) fills.push_back({f, at(table.slotOfFill, f), at(table.emptyWaitParity, f)});
    const int chainStart = at(table.slotOfFill, readBase);
    for (int i = 0; i < n; ++i)
      reads.push_back({readBase + i, (chainStart + i) % slots, at(table.fullWaitParity, readBase + i), false});
    if (takeUnread)
      reads.push_back({readBase + n, at(table.slotOfFill, readBase + n), at(table.fullWaitParity, readBase + n), true});
    base += n + 1;
    readBase += n + 1 + readCountSkew;
  }
  return runSlotModel(slots, fills, reads, random);
}

// What --print-after=plan-warp-specialization says about `config` on `target`.
std::string planOf(const compiler::UnifiedAttentionConfig& config, const std::string& target) {
  compiler::CompileOptions options;
  options.target = target;
  std::string dump;
  options.pipeline.printAfter = "plan-warp-specialization";
  options.pipeline.dump = [&](const std::string& text) { dump += text; };
  auto kernel = compiler::buildUnifiedAttention(config);
  REQUIRE(kernel.isOk());
  REQUIRE(compiler::compileKernel(**kernel, options).isOk());
  return dump;
}

}  // namespace

TEST_CASE("warp_specialize gives the copies to producer warps that hand slots over through mbarriers",
          "[codegen][warp-specialize]") {
  std::vector<compiler::UnifiedAttentionConfig> configs;
  for (bool causal : {true, false}) {
    configs.push_back(tests::hopperPrefillTiling());
    configs.back().causal = causal;
  }
  for (compiler::KvCacheFormat format : {compiler::KvCacheFormat::Fp8E4M3, compiler::KvCacheFormat::Int8PerTokenHead}) {
    configs.push_back(tests::hopperPrefillTiling());
    configs.back().kvCacheFormat = format;
  }
  configs.push_back(tests::hopperPrefillTiling());  // DiffKV
  configs.back().headSize = 192;
  configs.back().valueHeadSize = 128;
  configs.push_back(tests::hopperPrefillTiling());  // Q in shared memory, 32-key tiles
  configs.back().tileSize = 32;
  configs.back().qInShared = true;
  for (compiler::UnifiedAttentionConfig config : configs) {
    const compiler::CompiledKernel plain = compile(config, "sm_90a");
    config.warpSpecialize = true;
    INFO(config.kernelName());
    const compiler::CompiledKernel specialized = compile(config, "sm_90a");
    const std::string& ptx = specialized.ptx;
    // The launch: a warpgroup of producers after the 8 compute warps, 168
    // registers a thread, moved from the producers to the compute warps.
    CHECK(plain.numThreads == 256);
    CHECK(specialized.numThreads == 384);
    CHECK(ptx.find(".maxntid 384, 1, 1") != std::string::npos);
    CHECK(ptx.find(".maxnreg 168") != std::string::npos);
    // setmaxnreg only moves the launch's registers between the roles: 128
    // producer threads at 72 and 256 compute threads at 216 hold exactly
    // 384 × 168; asking for more makes the compute warps wait forever.
    CHECK(countOf(ptx, "setmaxnreg.dec.sync.aligned.u32 \t72;") == 1);
    CHECK(countOf(ptx, "setmaxnreg.inc.sync.aligned.u32 \t216;") == 1);
    CHECK(128 * 72 + 256 * 216 == 384 * 168);
    // Two pipelined loops (unmasked, masked tiles), each with a K and a V
    // buffer (DiffKV: two for K), each filled before the loop and in its body:
    // the unspecialized kernel commits one cp.async group per fill. Full and
    // empty barriers for both slots of every buffer.
    const int fills = countOf(plain.ptx, "cp.async.commit_group");
    CHECK(fills == (config.valueHeadSize != 0 ? 12 : 8));
    CHECK(countOf(ptx, "mbarrier.init.shared.b64") == 2 * fills);
    // The mbarriers take the first KiB of dynamic shared memory, the only
    // shared memory there is: a static array before it would move the
    // 128-byte-swizzled wgmma slots off the 1024-byte grid the hardware
    // swizzles on (ptxas ignores an extern array's alignment).
    CHECK(countOf(ptx, ".shared .align") == countOf(ptx, ".extern .shared .align 1024 .b8 attnjit_shared[];"));
    CHECK(countOf(ptx, "mbarrier.init.shared.b64 \t[attnjit_shared+" + std::to_string(8 * (2 * fills - 1)) + "]") ==
          1);
    // fp8 K and V, cast to bf16 only for wgmma, are cast by the producers on
    // the way (AsyncBuffer::castOnCopy): the slots hold bf16 tiles (twice the
    // bytes) and the compute warps' conversion buffers are gone.
    const bool castOnCopy = config.kvCacheFormat == compiler::KvCacheFormat::Fp8E4M3;
    if (castOnCopy) {
      CHECK(plain.sharedMemoryUse.conversions > 0);
      CHECK(specialized.sharedMemoryUse.conversions == 0);
      CHECK(specialized.sharedMemoryUse.slots == 2 * plain.sharedMemoryUse.slots + 1024);
    } else {
      CHECK(specialized.sharedMemoryBytes == plain.sharedMemoryBytes + 1024);
      CHECK(specialized.sharedMemoryUse.slots == plain.sharedMemoryUse.slots + 1024);
    }
    // The producers issue the same copies every warp issued before (each
    // producer thread those of two compute threads), and each fill arrives on
    // its full barrier when its copies land; no commit groups. Casting
    // producers load 16 bytes per copy into registers, store the cast's 32,
    // and arrive once their stores are fenced for the async proxy.
    if (castOnCopy) {
      CHECK(countOf(ptx, "cp.async.cg.shared.global") == 0);
      CHECK(countOf(ptx, "ld.global.v4.b32") >= 2 * countOf(plain.ptx, "cp.async.cg.shared.global"));
      // One fence per fill of a loop's buffers, then their arrivals; the
      // compute warps read what the producers fenced and fence nothing.
      CHECK(countOf(ptx, "fence.proxy.async.shared::cta;\n\tmbarrier.arrive.shared.b64") == 4);
      CHECK(countOf(ptx, "fence.proxy.async.shared::cta") == 4);
    } else {
      CHECK(countOf(ptx, "cp.async.cg.shared.global") == 2 * countOf(plain.ptx, "cp.async.cg.shared.global"));
      CHECK(countOf(ptx, "cp.async.mbarrier.arrive.noinc.shared.b64") == fills);
    }
    CHECK(countOf(ptx, "cp.async.commit_group") == 0);
    CHECK(countOf(ptx, "cp.async.wait_group") == 0);
    // Each body fill waits for its slot to be empty; each compute iteration
    // waits for its K and V slots (at least) and hands both back once.
    CHECK(countOf(ptx, "mbarrier.try_wait.parity.shared.b64") >= fills);
    CHECK(countOf(ptx, "mbarrier.arrive.shared.b64") == fills / 2 + (castOnCopy ? fills : 0));
    // 16-bit caches: wgmma alone reads K's and V's slots, and each goes back
    // as soon as the MMAs reading it completed (K's before the softmax): an
    // arrival right after each of the two loops' Q·Kᵀ and P·V groups.
    if (config.kvCacheFormat == compiler::KvCacheFormat::Auto)
      CHECK(countOf(ptx, "wgmma.wait_group.sync.aligned 0;\n}\n\t// end inline asm\n\tmbarrier.arrive.shared.b64") ==
            4);
    // Barrier 0 spans both roles: after the barriers' initialization and at
    // each loop's exit in each role. Every other barrier is the compute warps'.
    CHECK(countOf(ptx, "bar.sync \t0, 384;") == 1 + 2 * 2);
    CHECK(countOf(ptx, "bar.sync \t0;") == 0);
    CHECK(countOf(ptx, "bar.sync \t") == countOf(ptx, "bar.sync \t0, 384;") + countOf(ptx, "bar.sync \t1, 256;"));
    CHECK(countOf(ptx, "cp.async.wait_all") == 2);  // the producers' loop exits
    // The tensor-core work is the same.
    CHECK(countOf(ptx, "wgmma.mma_async") == countOf(plain.ptx, "wgmma.mma_async"));
    CHECK(countOf(ptx, "fence.proxy.async.shared::cta") >= 4);
    if (tests::havePtxas()) {
      // Whole-program, as the register moves need: the runtime's relocatable
      // compile ignores setmaxnreg and then serializes the MMAs for want of
      // registers (docs/architecture.md, "Producer warps").
      const std::string info = tests::ptxasInfo(ptx, "sm_90a", /*relocatable=*/false);
      INFO(info);
      CHECK(info.find("Used 168 registers") != std::string::npos);
      CHECK(info.find("serialized") == std::string::npos);
      CHECK(info.find("setmaxnreg' ignored") == std::string::npos);
      // Without their address arithmetic the compute warps fit in 216 registers
      // (DiffKV's 64-key tiles spill 48 bytes), and the producers in 72.
      if (config.valueHeadSize == 0)
        CHECK(info.find(" 0 bytes spill stores") != std::string::npos);
    }
  }
}

TEST_CASE("producer_registers: setmaxnreg gives the producers the count asked, the compute warps the rest",
          "[codegen][warp-specialize]") {
  // The 128-key bidirectional tiling with Q in shared memory (the op's): its
  // producers copy 16 rows of 16 bytes a thread per fill and spill at the
  // rule's 72 registers; at 104 neither role spills (compute warps at 200).
  compiler::UnifiedAttentionConfig config = tests::hopperPrefillTiling();
  config.causal = false;
  config.tileSize = 128;
  config.qInShared = true;
  config.warpSpecialize = true;
  const compiler::CompiledKernel rule = compile(config, "sm_90a");
  config.producerRegisters = 104;
  CHECK(config.kernelName().ends_with("_t128_w8_m128_qs_ws_pr104"));
  const compiler::CompiledKernel asked = compile(config, "sm_90a");
  CHECK(countOf(rule.ptx, "setmaxnreg.dec.sync.aligned.u32 \t72;") == 1);
  CHECK(countOf(asked.ptx, "setmaxnreg.dec.sync.aligned.u32 \t104;") == 1);
  CHECK(countOf(asked.ptx, "setmaxnreg.inc.sync.aligned.u32 \t200;") == 1);
  CHECK(128 * 104 + 256 * 200 <= 384 * 168);
  // Only the split moves: the same instructions otherwise.
  CHECK(countOf(asked.ptx, "wgmma.mma_async") == countOf(rule.ptx, "wgmma.mma_async"));
  CHECK(countOf(asked.ptx, "cp.async.cg.shared.global") == countOf(rule.ptx, "cp.async.cg.shared.global"));
  if (tests::havePtxas()) {
    const std::string ruleInfo = tests::ptxasInfo(rule.ptx, "sm_90a", /*relocatable=*/false);
    const std::string askedInfo = tests::ptxasInfo(asked.ptx, "sm_90a", /*relocatable=*/false);
    INFO(ruleInfo << askedInfo);
    CHECK(ruleInfo.find(" 0 bytes spill stores") == std::string::npos);
    CHECK(askedInfo.find(" 0 bytes spill stores") != std::string::npos);
  }
  // The config says what it cannot split.
  config.producerRegisters = 100;
  CHECK(config.validate().diagnostic().str().find("multiple of 8 from 24 to 152") != std::string::npos);
  config.producerRegisters = 160;
  CHECK_FALSE(config.validate().isOk());
  config.producerRegisters = 104;
  config.warpSpecialize = false;
  CHECK(config.validate().diagnostic().str().find("producer_registers needs warp_specialize") != std::string::npos);
  // A .tir kernel's attribute: multiples of 8 from 24 only.
  ir::Kernel kernel("k");
  ir::setKernelAttribute(kernel, ir::KernelAttribute::ProducerRegisters, 20);
  CHECK(ir::verifyKernelAttributes(kernel).diagnostic().str().find("0, or a multiple of 8 in 24..256") !=
        std::string::npos);
  ir::setKernelAttribute(kernel, ir::KernelAttribute::ProducerRegisters, 96);
  CHECK(ir::verifyKernelAttributes(kernel).isOk());
}

TEST_CASE("warp_specialize leaves kernels unchanged where it does not apply", "[codegen][warp-specialize]") {
  compiler::UnifiedAttentionConfig config = tests::hopperPrefillTiling();
  CHECK(planOf(config, "sm_90a").find("no producer warps: kernel attribute warp_specialize = 0") != std::string::npos);
  config.warpSpecialize = true;
  CHECK(planOf(config, "sm_90a").find("4 producer warps after 8 compute warps (a producer thread copies for 2)") !=
        std::string::npos);
  CHECK(planOf(config, "sm_90").find("no producer warps: the target has no wgmma") != std::string::npos);
  // No wgmma/setmaxnreg before sm_90a.
  for (const char* target : {"sm_80", "sm_90"}) {
    INFO(target);
    const compiler::CompiledKernel compiled = compile(config, target);
    CHECK(compiled.numThreads == 256);
    CHECK(countOf(compiled.ptx, "mbarrier") == 0);
    CHECK(countOf(compiled.ptx, "setmaxnreg") == 0);
  }
  // No cp.async: nothing to produce.
  compiler::UnifiedAttentionConfig registersOnly = config;
  registersOnly.asyncCopy = false;
  CHECK(compile(registersOnly, "sm_90a").numThreads == 256);
  // 128-key decode tiles load their block numbers two tiles ahead and convert
  // them into the copy layouts, which the producers cannot do without a barrier.
  compiler::UnifiedAttentionConfig carried;
  carried.tileSize = 128;
  carried.warpSpecialize = true;
  CHECK(compile(carried, "sm_90a").numThreads == 128);
  CHECK(planOf(carried, "sm_90a").find("no producer warps: copy addresses computed by 'convert_layout'") !=
        std::string::npos);
  // 128-key prefill tiles load their block numbers once per copy layout when
  // producers issue the copies (8 loads a thread, which layout assignment
  // otherwise replaces by one load and two conversions).
  compiler::UnifiedAttentionConfig wide = config;
  wide.tileSize = 128;
  const compiler::CompiledKernel wideTiles = compile(wide, "sm_90a");
  CHECK(wideTiles.numThreads == 384);
  wide.warpSpecialize = false;
  CHECK(countOf(compile(wide, "sm_90a").ptx, "cp.async.mbarrier") == 0);
}

TEST_CASE("warp_specialize at head size 256: P·V's 128 accumulator registers fit the 168 of the launch",
          "[codegen][warp-specialize]") {
  compiler::UnifiedAttentionConfig config = tests::hopperPrefillTiling();
  config.headSize = 256;
  config.tileSize = 32;
  config.warpSpecialize = true;
  const compiler::CompiledKernel compiled = compile(config, "sm_90a");
  CHECK(compiled.numThreads == 384);
  CHECK(compiled.ptx.find("m64n256k16") != std::string::npos);
  tests::checkAssembles(compiled.ptx, "sm_90a");
}

TEST_CASE("warp_specialize on a 4-warp decode kernel: 256 threads, no register moves", "[codegen][warp-specialize]") {
  compiler::UnifiedAttentionConfig config;  // the decode tiling: 4 warps, 64-key tiles, mma.sync
  config.tileSize = 64;
  config.warpSpecialize = true;
  const compiler::CompiledKernel compiled = compile(config, "sm_90a");
  CHECK(compiled.numThreads == 256);
  // 255 registers a thread at launch already: no setmaxnreg, no register cap.
  CHECK(countOf(compiled.ptx, "setmaxnreg") == 0);
  CHECK(compiled.ptx.find(".maxnreg") == std::string::npos);
  CHECK(countOf(compiled.ptx, "mbarrier.try_wait.parity.shared.b64") > 0);
  CHECK(countOf(compiled.ptx, "bar.sync \t0;") == 0);
  tests::checkAssembles(compiled.ptx, "sm_90a");
}

TEST_CASE("warp_specialize on MLA decode: the five latent chunks of a tile copied by the producers",
          "[codegen][warp-specialize]") {
  for (compiler::KvCacheFormat format : {compiler::KvCacheFormat::Auto, compiler::KvCacheFormat::Fp8E4M3})
    for (bool split : {false, true}) {
      compiler::MlaDecodeConfig config;  // the op's Hopper tiling
      config.kvCacheFormat = format;
      config.blockH = 64;
      config.tileSize = 64;
      config.numWarps = 8;
      config.qInShared = true;
      config.splitKv = split;
      const auto build = [&](bool specialize) {
        compiler::MlaDecodeConfig c = config;
        c.warpSpecialize = specialize;
        auto kernel = compiler::buildMlaDecode(c);
        REQUIRE(kernel);
        compiler::CompileOptions options;
        options.target = "sm_90a";
        auto compiled = compiler::compileKernel(**kernel, options);
        INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
        REQUIRE(compiled);
        return *compiled;
      };
      const compiler::CompiledKernel plain = build(false);
      const compiler::CompiledKernel specialized = build(true);
      INFO(specialized.name);
      CHECK(specialized.numThreads == plain.numThreads + 128);
      // One loop, its latent tile in five chunk buffers, each filled before the
      // loop and in its body.
      const int fills = countOf(plain.ptx, "cp.async.commit_group");
      CHECK(fills == 10);
      // fp8 latents are cast to bf16 by the producers on the way
      // (AsyncBuffer::castOnCopy): no cp.async, one plain arrival per fill, and
      // the slots hold the bf16 chunks the compute warps used to cast and store.
      const bool castOnCopy = format == compiler::KvCacheFormat::Fp8E4M3;
      CHECK(countOf(specialized.ptx, "cp.async.mbarrier.arrive.noinc.shared.b64") == (castOnCopy ? 0 : fills));
      CHECK(countOf(specialized.ptx, "mbarrier.init.shared.b64") == 2 * fills);
      CHECK(countOf(specialized.ptx, "mbarrier.arrive.shared.b64") == fills / 2 + (castOnCopy ? fills : 0));
      if (castOnCopy) {
        CHECK(countOf(specialized.ptx, "cp.async.cg.shared.global") == 0);
        CHECK(specialized.sharedMemoryUse.conversions == 0);
        CHECK(plain.sharedMemoryUse.conversions > 0);
      }
      CHECK(countOf(specialized.ptx, "cp.async.commit_group") == 0);
      CHECK(countOf(specialized.ptx, "wgmma.mma_async") == countOf(plain.ptx, "wgmma.mma_async"));
      // Each iteration waits for the five chunks once, before Q·Kᵀ (P·V reads
      // four of the same slots without waiting again), as each producer fill
      // waits for its five slots to be empty; the compute warps then fence
      // once for cp.async's copies, not at all for the producers' casts.
      CHECK(countOf(specialized.ptx, "mbarrier.try_wait.parity.shared.b64") == fills);
      const std::string& ptx = specialized.ptx;
      const size_t lastWait = ptx.rfind("mbarrier.try_wait.parity.shared.b64");
      const size_t firstGroup = ptx.find("wgmma.fence.sync.aligned", lastWait);
      REQUIRE(firstGroup != std::string::npos);
      CHECK(countOf(ptx.substr(lastWait, firstGroup - lastWait), "fence.proxy.async") == (castOnCopy ? 0 : 1));
      if (tests::havePtxas()) {
        const std::string info = tests::ptxasInfo(specialized.ptx, "sm_90a", /*relocatable=*/false);
        INFO(info);
        CHECK(info.find("Used 168 registers") != std::string::npos);
        CHECK(info.find("serialized") == std::string::npos);
        // The compute warps fit in 216 registers, give or take the few dozen
        // bytes of spills the call-free f32 divisions add.
        if (format == compiler::KvCacheFormat::Auto) {
          const size_t spills = info.find(" bytes spill stores");
          REQUIRE(spills != std::string::npos);
          const size_t start = info.rfind(' ', spills - 1) + 1;
          CHECK(std::stoi(info.substr(start, spills - start)) <= 64);
        }
      }
    }
}

TEST_CASE("the slot protocol codegen emits holds under every interleaving tried", "[codegen][warp-specialize]") {
  constexpr int kIterations = 24;
  auto at = [](const std::vector<int>& values) {
    return [&values](int n) { return values.at(static_cast<size_t>(n)); };
  };
  std::mt19937 random(7);
  for (int slots = 2; slots <= 4; ++slots) {
    const codegen::SlotProtocolTable table = codegen::warpSpecializationSlotProtocol(kIterations + 2, slots);
    const SlotProtocol emitted{slots,
                               at(table.fillOfIteration),
                               at(table.slotOfFill),
                               at(table.emptyWaitParity),
                               at(table.fullWaitParity),
                               at(table.slotOfIteration)};
    for (int iterations = 0; iterations <= kIterations; ++iterations)
      for (int schedule = 0; schedule < 200; ++schedule) {
        INFO(slots << " slots, " << iterations << " iterations, schedule " << schedule);
        CHECK(runSlotProtocol(emitted, iterations, random).empty());
      }
    // The model catches the mistakes the protocol could make.
    INFO(slots << " slots");
    SlotProtocol noInitialPhase = emitted;  // the first fill of a slot waits for a release
    noInitialPhase.emptyWaitParity = [slots](int fill) { return (fill / slots) & 1; };
    CHECK(runSlotProtocol(noInitialPhase, 4, random).find("deadlock") != std::string::npos);
    SlotProtocol phasePerFill = emitted;  // parity flipping every iteration, not every use of a slot
    phasePerFill.fullWaitParity = [](int iteration) { return iteration & 1; };
    bool readEarly = false;
    for (int schedule = 0; schedule < 400 && !readEarly; ++schedule)
      readEarly = runSlotProtocol(phasePerFill, 3 * slots, random).find(" before it landed") != std::string::npos;
    CHECK(readEarly);
    SlotProtocol noEmptyWait = emitted;  // refilling without waiting for the release
    noEmptyWait.emptyWaitParity = [](int) { return 1; };
    bool overwrote = false;
    for (int schedule = 0; schedule < 400 && !overwrote; ++schedule)
      overwrote = runSlotProtocol(noEmptyWait, 3 * slots, random).find("overwrote") != std::string::npos;
    CHECK(overwrote);
    SlotProtocol twoSlotChain = emitted;  // the compute warps alternating two slots of more
    twoSlotChain.slotOfIteration = [](int iteration) { return iteration & 1; };
    if (slots > 2) CHECK(!runSlotProtocol(twoSlotChain, 4, random).empty());
  }
}

TEST_CASE("ping_pong: the two compute warpgroups take turns issuing their MMAs through named barriers 2 and 3",
          "[codegen][warp-specialize]") {
  for (bool causal : {true, false})
    for (bool overlapSoftmax : {false, true})
      for (bool prefetchScores : {false, true}) {
        compiler::UnifiedAttentionConfig config = tests::hopperPrefillTiling();
        config.causal = causal;
        config.overlapSoftmax = overlapSoftmax;
        config.prefetchScores = prefetchScores;
        if (overlapSoftmax && prefetchScores) config.producerRegisters = 96;  // no spills
        config.warpSpecialize = true;
        const compiler::CompiledKernel free = compile(config, "sm_90a");
        config.pingPong = true;
        INFO(config.kernelName());
        CHECK(config.kernelName().find("_wspp") != std::string::npos);
        const compiler::CompiledKernel turns = compile(config, "sm_90a");
        const std::string& ptx = turns.ptx;
        CHECK(planOf(config, "sm_90a").find("the two compute warpgroups take turns issuing their MMAs in 2 loops") !=
              std::string::npos);
        // Every wgmma group in the two pipelined loops: warpgroup g waits on
        // barrier 2 + g, issues, commits and hands the turn to the other.
        // overlap_softmax issues Q·Kᵀ and the lagging P·V as one group per
        // iteration, and the last P·V after the loops without a turn;
        // prefetch_scores the first tile's Q·Kᵀ before them, without a turn.
        const int loopGroups = overlapSoftmax ? 2 : 4;
        CHECK(countOf(ptx, "wgmma.fence.sync.aligned") == countOf(free.ptx, "wgmma.fence.sync.aligned"));
        CHECK(countOf(ptx, "wgmma.fence.sync.aligned") ==
              loopGroups + (overlapSoftmax ? 1 : 0) + (prefetchScores ? 1 : 0));
        for (const char* turn : {"@wgmma_first bar.sync 2, 256;\n@!wgmma_first bar.sync 3, 256;\nwgmma.fence",
                                 "wgmma.commit_group.sync.aligned;\n@wgmma_first bar.arrive 3, 256;\n"
                                 "@!wgmma_first bar.arrive 2, 256;\n"})
          CHECK(countOf(ptx, turn) == loopGroups);
        // Each loop: warpgroup 1 hands the first turn to warpgroup 0 before it,
        // which takes the turn handed over after warpgroup 1's last group at its exit.
        CHECK(countOf(ptx, "@turn bar.arrive 2, 256;") == 2);
        CHECK(countOf(ptx, "@turn bar.sync 2, 256;") == 2);
        CHECK(countOf(free.ptx, "bar.arrive") == 0);
        CHECK(countOf(ptx, "wgmma.mma_async") == countOf(free.ptx, "wgmma.mma_async"));
        if (tests::havePtxas()) {
          const std::string info = tests::ptxasInfo(ptx, "sm_90a", /*relocatable=*/false);
          INFO(info);
          CHECK(info.find("used 4 barriers") != std::string::npos);
          CHECK(info.find(" 0 bytes spill stores") != std::string::npos);
          CHECK(info.find("serialized") == std::string::npos);
        }
      }
  // Without producer warps there are no turns to take.
  compiler::UnifiedAttentionConfig unspecialized = tests::hopperPrefillTiling();
  unspecialized.pingPong = true;
  auto refused = compiler::buildUnifiedAttention(unspecialized);
  REQUIRE_FALSE(refused.isOk());
  CHECK(refused.diagnostic().str().find("ping_pong needs warp_specialize: true") != std::string::npos);
}

TEST_CASE("softmax_turns: the compute warpgroups take turns running the softmax between Q·Kᵀ and P·V",
          "[codegen][warp-specialize]") {
  for (bool causal : {true, false})
    for (int tileSize : {64, 128}) {
      compiler::UnifiedAttentionConfig config = tests::hopperPrefillTiling();
      config.causal = causal;
      config.tileSize = tileSize;
      config.qInShared = tileSize == 128;
      config.warpSpecialize = true;
      const compiler::CompiledKernel free = compile(config, "sm_90a");
      config.softmaxTurns = true;
      INFO(config.kernelName());
      CHECK(config.kernelName().ends_with("_wsst"));
      const std::string ptx = compile(config, "sm_90a").ptx;
      CHECK(planOf(config, "sm_90a").find("the two compute warpgroups take turns running their softmax in 2 loops") !=
            std::string::npos);
      // The MMAs and their groups are the producer kernel's, issued without turns.
      CHECK(countOf(ptx, "wgmma.mma_async") == countOf(free.ptx, "wgmma.mma_async"));
      CHECK(countOf(ptx, "wgmma.fence.sync.aligned") == countOf(free.ptx, "wgmma.fence.sync.aligned"));
      CHECK(countOf(ptx, "@wgmma_first") == 0);
      // Per loop: warpgroup g takes its turn (barrier 2 + g) once Q·Kᵀ completed
      // and hands it to the other before it waits for the V slot.
      const std::string take = "@turn_first bar.sync 2, 256;\n@!turn_first bar.sync 3, 256;";
      const std::string hand = "@turn_first bar.arrive 3, 256;\n@!turn_first bar.arrive 2, 256;";
      CHECK(countOf(ptx, take) == 2);
      CHECK(countOf(ptx, hand) == 2);
      CHECK(countOf(ptx, "@turn bar.arrive 2, 256;") == 2);  // before each loop: the first turn to warpgroup 0
      CHECK(countOf(ptx, "@turn bar.sync 2, 256;") == 2);    // after it: warpgroup 0 takes the last
      size_t at = 0;
      for (int loop = 0; loop < 2; ++loop) {
        const size_t qkWait = ptx.find("wgmma.wait_group.sync.aligned 0;", at);
        const size_t taken = ptx.find(take, at);
        const size_t handed = ptx.find(hand, at);
        const size_t vWait = ptx.find("mbarrier.try_wait", handed);
        const size_t pvIssue = ptx.find("wgmma.fence.sync.aligned", handed);
        REQUIRE(handed != std::string::npos);
        CHECK(qkWait < taken);
        CHECK(taken < handed);
        CHECK(handed < vWait);
        CHECK(vWait < pvIssue);
        CHECK(ptx.find("wgmma.fence.sync.aligned", taken) == pvIssue);  // no MMA inside the turn
        at = pvIssue + 1;
      }
      if (tests::havePtxas()) {
        const std::string info = tests::ptxasInfo(ptx, "sm_90a", /*relocatable=*/false);
        INFO(info);
        CHECK(info.find("used 4 barriers") != std::string::npos);
        CHECK(info.find("serialized") == std::string::npos);
        if (tileSize == 64) CHECK(info.find(" 0 bytes spill stores") != std::string::npos);
      }
    }
  // Configurations it does not combine with.
  compiler::UnifiedAttentionConfig unspecialized = tests::hopperPrefillTiling();
  unspecialized.softmaxTurns = true;
  auto refused = compiler::buildUnifiedAttention(unspecialized);
  REQUIRE_FALSE(refused.isOk());
  CHECK(refused.diagnostic().str().find("softmax_turns needs warp_specialize: true") != std::string::npos);
  compiler::UnifiedAttentionConfig both = tests::hopperPrefillTiling();
  both.warpSpecialize = true;
  both.softmaxTurns = true;
  both.pingPong = true;
  refused = compiler::buildUnifiedAttention(both);
  REQUIRE_FALSE(refused.isOk());
  CHECK(refused.diagnostic().str().find("softmax_turns and ping_pong are two ways to take turns") != std::string::npos);
  both.pingPong = false;
  both.overlapSoftmax = true;
  refused = compiler::buildUnifiedAttention(both);
  REQUIRE_FALSE(refused.isOk());
  CHECK(refused.diagnostic().str().find("softmax_turns is unsupported with overlap_softmax") != std::string::npos);
  // Dots that lower as mma.sync take no turns (int8 per-token-head K and V at
  // D=256 on this tiling): no take without its hand-over, whatever the plan
  // expected.
  compiler::UnifiedAttentionConfig int8Wide = tests::hopperPrefillTiling();
  int8Wide.headSize = 256;
  int8Wide.kvCacheFormat = compiler::KvCacheFormat::Int8PerTokenHead;
  int8Wide.warpSpecialize = true;
  int8Wide.softmaxTurns = true;
  const std::string int8Ptx = compile(int8Wide, "sm_90a").ptx;
  CHECK(countOf(int8Ptx, "@turn_first bar.sync") == countOf(int8Ptx, "@turn_first bar.arrive"));
  CHECK(countOf(int8Ptx, "@turn bar.arrive 2, 256;") == countOf(int8Ptx, "@turn bar.sync 2, 256;"));
}

TEST_CASE("ping_pong and softmax_turns need two compute warpgroups that split the rows",
          "[codegen][warp-specialize]") {
  // Four compute warps are one warpgroup: nobody to take turns with.
  for (bool softmaxTurns : {false, true}) {
    compiler::UnifiedAttentionConfig fourWarps;
    fourWarps.blockMRows = 64;
    fourWarps.numWarps = 4;
    fourWarps.tileSize = 64;
    fourWarps.warpSpecialize = true;
    fourWarps.pingPong = !softmaxTurns;
    fourWarps.softmaxTurns = softmaxTurns;
    CHECK(planOf(fourWarps, "sm_90a")
              .find(std::string(softmaxTurns ? "no softmax turns" : "no ping-pong") +
                    ": 4 compute warps, not two warpgroups") != std::string::npos);
    CHECK(countOf(compile(fourWarps, "sm_90a").ptx, "bar.arrive") == 0);
  }
  // MLA's warpgroups split the latent columns and share the rows' softmax.
  compiler::MlaDecodeConfig mla;
  mla.blockH = 64;
  mla.tileSize = 64;
  mla.numWarps = 8;
  mla.qInShared = true;
  mla.warpSpecialize = true;
  auto kernel = compiler::buildMlaDecode(mla);
  REQUIRE(kernel);
  ir::setKernelAttribute(**kernel, ir::KernelAttribute::WarpSpecialize, 2);
  compiler::CompileOptions options;
  options.target = "sm_90a";
  std::string dump;
  options.pipeline.printAfter = "plan-warp-specialization";
  options.pipeline.dump = [&](const std::string& text) { dump += text; };
  auto compiled = compiler::compileKernel(**kernel, options);
  REQUIRE(compiled);
  CHECK(dump.find("no ping-pong: a warpgroup MMA whose warpgroups split its columns") != std::string::npos);
  CHECK(countOf(compiled->ptx, "bar.arrive") == 0);
}

namespace {

// The turn protocol of ping-pong on a model of two named barriers (256
// threads each: one warpgroup waits with bar.sync, the other arrives): before
// each loop warpgroup 1 arrives on warpgroup 0's barrier; each of `groups`
// wgmma groups per iteration waits on the own barrier, issues, and arrives on
// the other's; after the loop warpgroup 0 waits on its own once more, and both
// meet at the CTA barrier of the pipelined loop's exit. Runs both warpgroups under a random interleaving. Empty when the issues alternate
// 0, 1, 0, 1, ..., every barrier phase has one waiting and one arriving
// warpgroup, and no arrival is left pending at the end; else what went wrong.
struct TurnProtocol {
  bool firstTurnHandedOver = true;  // warpgroup 1 arrives on warpgroup 0's barrier before each loop
  bool lastTurnTaken = true;        // warpgroup 0 waits on its barrier after each loop
};

std::string runTurns(const TurnProtocol& protocol, int loops, int iterations, int groups, std::mt19937& random) {
  enum class Step { Arrive, Sync, Issue, Cta };
  struct Action {
    Step step;
    int barrier;
  };
  std::vector<Action> programs[2];
  for (int loop = 0; loop < loops; ++loop) {
    if (protocol.firstTurnHandedOver) programs[1].push_back({Step::Arrive, 0});
    for (int i = 0; i < iterations * groups; ++i)
      for (int g = 0; g < 2; ++g) {
        programs[g].push_back({Step::Sync, g});
        programs[g].push_back({Step::Issue, g});
        programs[g].push_back({Step::Arrive, 1 - g});
      }
    if (protocol.lastTurnTaken) programs[0].push_back({Step::Sync, 0});
    for (auto& program : programs) program.push_back({Step::Cta, 0});
  }
  struct Barrier {
    int arrived = 0, waiting = -1;  // warpgroups arrived in this phase; the one blocked in bar.sync
  } barriers[2];
  size_t pc[2] = {0, 0};
  std::vector<int> issues;
  for (;;) {
    const bool atCta[2] = {pc[0] < programs[0].size() && programs[0][pc[0]].step == Step::Cta,
                           pc[1] < programs[1].size() && programs[1][pc[1]].step == Step::Cta};
    if (atCta[0] && atCta[1]) {
      ++pc[0];
      ++pc[1];
      continue;
    }
    std::vector<int> runnable;
    for (int g = 0; g < 2; ++g) {
      if (pc[g] == programs[g].size() || atCta[g]) continue;
      const Action& a = programs[g][pc[g]];
      // bar.sync blocks until the phase completes; a warpgroup blocked on it is not runnable.
      if (a.step == Step::Sync && barriers[a.barrier].waiting == g) continue;
      runnable.push_back(g);
    }
    if (runnable.empty()) break;
    const int g = runnable[std::uniform_int_distribution<size_t>(0, runnable.size() - 1)(random)];
    const Action& a = programs[g][pc[g]];
    Barrier& barrier = barriers[a.barrier];
    if (a.step == Step::Issue) {
      issues.push_back(g);
      ++pc[g];
      continue;
    }
    ++barrier.arrived;
    if (a.step == Step::Sync) barrier.waiting = g;
    if (barrier.arrived == 2) {  // 256 threads: the phase completes and releases its waiter
      if (barrier.waiting == -1) return "barrier " + std::to_string(a.barrier) + " completed by arrivals alone";
      const int waiter = barrier.waiting;
      barrier = Barrier{};
      ++pc[waiter];
      if (waiter != g) ++pc[g];
    } else if (a.step == Step::Arrive) {
      ++pc[g];
    }
  }
  for (int g = 0; g < 2; ++g)
    if (pc[g] != programs[g].size()) return "deadlock: warpgroup " + std::to_string(g) + " stuck";
  for (int b = 0; b < 2; ++b)
    if (barriers[b].arrived != 0) return "an arrival left pending on barrier " + std::to_string(b);
  for (size_t i = 0; i < issues.size(); ++i)
    if (issues[i] != static_cast<int>(i % 2)) return "issue " + std::to_string(i) + " out of turn";
  return {};
}

}  // namespace

TEST_CASE("the ping-pong turn protocol alternates the warpgroups and balances its barriers",
          "[codegen][warp-specialize]") {
  std::mt19937 random(11);
  for (int loops = 1; loops <= 2; ++loops)
    for (int iterations = 0; iterations <= 6; ++iterations)
      for (int groups = 1; groups <= 2; ++groups)
        for (int schedule = 0; schedule < 100; ++schedule) {
          INFO(loops << " loops, " << iterations << " iterations, " << groups << " groups, schedule " << schedule);
          const std::string result = runTurns({}, loops, iterations, groups, random);
          INFO(result);
          CHECK(result.empty());
        }
  // The model catches a protocol without the hand-over before the loop or the
  // turn taken after it.
  CHECK(runTurns({.firstTurnHandedOver = false}, 1, 3, 1, random).find("deadlock") != std::string::npos);
  CHECK(runTurns({.lastTurnTaken = false}, 1, 3, 1, random) == "an arrival left pending on barrier 0");
  bool arrivalsAlone = false;  // the second loop's hand-over meets the first's pending arrival
  for (int schedule = 0; schedule < 100 && !arrivalsAlone; ++schedule)
    arrivalsAlone = runTurns({.lastTurnTaken = false}, 2, 3, 1, random).find("completed by arrivals alone") !=
                    std::string::npos;
  CHECK(arrivalsAlone);
}

TEST_CASE("warp_specialize inside a persistent program's work-item loop: fills carried on rings of slots",
          "[codegen][warp-specialize][persistent]") {
  // The KV loops run once per work item. Their K buffers share bytes, as do
  // their V buffers, so each pair shares one ring of slot barriers, and fill
  // numbers count on across the loops and items: no barrier is made new, no
  // whole-CTA barrier at a loop's exit, and the producers wait for their last
  // copies once, at their end.
  for (bool causal : {true, false}) {
    compiler::UnifiedAttentionConfig config = tests::hopperPrefillTiling();
    config.causal = causal;
    config.warpSpecialize = true;
    const compiler::CompiledKernel single = compile(config, "sm_90a");
    config.persistent = true;
    INFO(config.kernelName());
    CHECK(planOf(config, "sm_90a").find("4 producer warps after 8 compute warps") != std::string::npos);
    CHECK(planOf(config, "sm_90a").find("2 loops run again, their fills carried on 2 rings of slots") !=
          std::string::npos);
    const compiler::CompiledKernel persistent = compile(config, "sm_90a");
    const std::string& ptx = persistent.ptx;
    CHECK(persistent.numThreads == 384);
    // Two KV loops, each with a K and a V buffer of two slots, a full and an
    // empty barrier each: 16 barriers for the plain kernel, 8 on two rings.
    CHECK(countOf(single.ptx, "mbarrier.init.shared.b64") == 16);
    CHECK(countOf(ptx, "mbarrier.init.shared.b64") == 8);
    CHECK(countOf(ptx, "mbarrier.inval") == 0);
    CHECK(countOf(single.ptx, "bar.sync \t0, 384;") == 5);  // the start; two loop exits in each role
    CHECK(countOf(ptx, "bar.sync \t0, 384;") == 1);
    CHECK(countOf(ptx, "cp.async.wait_all") == 1);
    // The compute warps wait on full barriers for the fills they read and, at
    // each loop's exit, for the unread one of each buffer (4 more waits).
    CHECK(countOf(ptx, "mbarrier.try_wait") > countOf(single.ptx, "mbarrier.try_wait"));
    CHECK(countOf(ptx, "wgmma.mma_async") == countOf(single.ptx, "wgmma.mma_async"));
    if (tests::havePtxas()) {
      const std::string info = tests::ptxasInfo(ptx, "sm_90a", /*relocatable=*/false);
      INFO(info);
      CHECK(info.find("Used 168 registers") != std::string::npos);
      CHECK(info.find("serialized") == std::string::npos);
      CHECK(info.find(" 0 bytes spill stores") != std::string::npos);
    }
  }
}

TEST_CASE("carried fills: runs of a KV loop share the ring of slots under every interleaving tried",
          "[codegen][warp-specialize][persistent]") {
  std::mt19937 random(11);
  const std::vector<std::vector<int>> runLists = {{0}, {1}, {5, 0, 3}, {0, 0, 0, 2}, {7, 1, 1, 6}, {2, 9, 0, 4, 1}};
  for (int slots = 2; slots <= 4; ++slots) {
    const codegen::SlotProtocolTable table = codegen::warpSpecializationSlotProtocol(64, slots);
    // The compute warps' chain steps through the slots in order, so a chain
    // started at the slot of fill b names the slot of fill b + i.
    for (int i = 0; i < 64; ++i) REQUIRE(table.slotOfIteration[static_cast<size_t>(i)] == i % slots);
    for (const std::vector<int>& runs : runLists)
      for (int schedule = 0; schedule < 300; ++schedule) {
        INFO(slots << " slots, runs of " << runs.size() << " loops, schedule " << schedule);
        CHECK(runCarriedFills(table, slots, runs, random).empty());
      }
    INFO(slots << " slots");
    // Without taking the unread fill its slot is never released.
    CHECK(runCarriedFills(table, slots, {3, 3, 3}, random, false).find("deadlock") != std::string::npos);
    // Compute warps that count a run's fills without the unread one read the
    // wrong fills (or wait for phases that never come).
    CHECK(!runCarriedFills(table, slots, {3, 2, 4}, random, true, -1).empty());
  }
}
