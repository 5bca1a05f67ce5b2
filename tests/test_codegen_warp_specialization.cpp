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

// The protocol's arithmetic: fill of iteration i, slot of fill f, parities.
struct SlotProtocol {
  std::function<int(int)> fillOfIteration, slotOf, emptyWaitParity, fullWaitParity;
};

// One pipelined loop of `iterations` under a random interleaving of the
// producer (fills 0 .. iterations; fill f > 0 waits on its slot's empty
// barrier first), the copies landing (each arrives on its slot's full
// barrier), and the compute warps (iteration i waits on full, reads fill i
// from the slot the carried xor chain names, releases it on empty). Empty
// when every fill lands, every iteration reads its own fill after it landed
// and no fill overwrites an unread one; else what went wrong.
std::string runSlotProtocol(const SlotProtocol& p, int iterations, std::mt19937& random) {
  struct Slot {
    int fill = -1;
    bool landed = false, read = true;
  } slots[2];
  ModelBarrier full[2], empty[2];
  std::vector<int> inFlight;
  int nextFill = 0, iteration = 0, consumerSlot = 0;
  for (;;) {
    std::vector<std::function<std::string()>> enabled;
    if (nextFill <= iterations) {
      const int fill = nextFill == 0 ? 0 : p.fillOfIteration(nextFill - 1);
      const int slot = p.slotOf(fill);
      if (nextFill == 0 || empty[slot].tryWait(p.emptyWaitParity(fill)))
        enabled.push_back([&, fill, slot]() -> std::string {
          if (!slots[slot].read) return "fill " + std::to_string(fill) + " overwrote unread fill " +
                                        std::to_string(slots[slot].fill);
          slots[slot] = {fill, false, false};
          inFlight.push_back(fill);
          ++nextFill;
          return {};
        });
    }
    for (size_t i = 0; i < inFlight.size(); ++i)
      enabled.push_back([&, i]() -> std::string {
        const int fill = inFlight[i];
        const int slot = p.slotOf(fill);
        inFlight.erase(inFlight.begin() + static_cast<long>(i));
        if (slots[slot].fill != fill) return "fill " + std::to_string(fill) + " landed in a refilled slot";
        slots[slot].landed = true;
        full[slot].arrive();
        return {};
      });
    if (iteration < iterations && full[consumerSlot].tryWait(p.fullWaitParity(iteration)))
      enabled.push_back([&]() -> std::string {
        Slot& slot = slots[consumerSlot];
        if (slot.fill != iteration || !slot.landed)
          return "iteration " + std::to_string(iteration) + " read fill " + std::to_string(slot.fill) +
                 (slot.landed ? "" : " before it landed");
        slot.read = true;
        empty[consumerSlot].arrive();
        consumerSlot ^= 1;
        ++iteration;
        return {};
      });
    if (enabled.empty())
      return nextFill > iterations && iteration == iterations && inFlight.empty()
                 ? std::string()
                 : "deadlock at fill " + std::to_string(nextFill) + ", iteration " + std::to_string(iteration);
    std::uniform_int_distribution<size_t> pick(0, enabled.size() - 1);
    if (std::string error = enabled[pick(random)](); !error.empty()) return error;
  }
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

// The op API's Hopper prefill tiling: 128 rows over 8 warps, 64-key tiles.
compiler::UnifiedAttentionConfig hopperPrefill() {
  compiler::UnifiedAttentionConfig c;
  c.blockMRows = 128;
  c.numWarps = 8;
  c.tileSize = 64;
  return c;
}

}  // namespace

TEST_CASE("warp_specialize gives the copies to producer warps that hand slots over through mbarriers",
          "[codegen][warp-specialize]") {
  std::vector<compiler::UnifiedAttentionConfig> configs;
  for (bool causal : {true, false}) {
    configs.push_back(hopperPrefill());
    configs.back().causal = causal;
  }
  for (compiler::KvCacheFormat format : {compiler::KvCacheFormat::Fp8E4M3, compiler::KvCacheFormat::Int8PerTokenHead}) {
    configs.push_back(hopperPrefill());
    configs.back().kvCacheFormat = format;
  }
  configs.push_back(hopperPrefill());  // DiffKV
  configs.back().headSize = 192;
  configs.back().valueHeadSize = 128;
  configs.push_back(hopperPrefill());  // Q in shared memory, 32-key tiles
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
    CHECK(countOf(ptx, "setmaxnreg.dec.sync.aligned.u32 \t64;") == 1);
    CHECK(countOf(ptx, "setmaxnreg.inc.sync.aligned.u32 \t224;") == 1);
    // Two pipelined loops (unmasked, masked tiles), each with a K and a V
    // buffer (DiffKV: two for K), each filled before the loop and in its body:
    // the unspecialized kernel commits one cp.async group per fill. Full and
    // empty barriers for both slots of every buffer.
    const int fills = countOf(plain.ptx, "cp.async.commit_group");
    CHECK(fills == (config.valueHeadSize != 0 ? 12 : 8));
    CHECK(countOf(ptx, "mbarrier.init.shared.b64") == 2 * fills);
    // The producers issue the same copies every warp issued before (each
    // producer thread those of two compute threads), and each fill arrives on
    // its full barrier when its copies land; no commit groups.
    CHECK(countOf(ptx, "cp.async.cg.shared.global") == 2 * countOf(plain.ptx, "cp.async.cg.shared.global"));
    CHECK(countOf(ptx, "cp.async.mbarrier.arrive.noinc.shared.b64") == fills);
    CHECK(countOf(ptx, "cp.async.commit_group") == 0);
    CHECK(countOf(ptx, "cp.async.wait_group") == 0);
    // Each body fill waits for its slot to be empty; each compute iteration
    // waits for its K and V slots (at least) and hands both back once.
    CHECK(countOf(ptx, "mbarrier.try_wait.parity.shared.b64") >= fills);
    CHECK(countOf(ptx, "mbarrier.arrive.shared.b64") == fills / 2);
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
      const std::string info = tests::ptxasInfo(ptx, "sm_90a");
      INFO(info);
      CHECK(info.find("Used 168 registers") != std::string::npos);
      CHECK(info.find("serialized") == std::string::npos);
      CHECK(info.find("setmaxnreg' ignored") == std::string::npos);
      // Without their address arithmetic the compute warps fit in 224 registers
      // (DiffKV's 64-key tiles spill 48 bytes), and the producers in 64.
      if (config.valueHeadSize == 0)
        CHECK(info.find(" 0 bytes spill stores") != std::string::npos);
    }
  }
}

TEST_CASE("warp_specialize leaves kernels unchanged where it does not apply", "[codegen][warp-specialize]") {
  compiler::UnifiedAttentionConfig config = hopperPrefill();
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
  // 128-key tiles carry their block numbers through a layout conversion, which
  // the producers cannot run without a barrier.
  compiler::UnifiedAttentionConfig carried = config;
  carried.tileSize = 128;
  CHECK(compile(carried, "sm_90a").numThreads == 256);
  CHECK(planOf(carried, "sm_90a").find("no producer warps: copy addresses computed by 'convert_layout'") !=
        std::string::npos);
}

TEST_CASE("warp_specialize at head size 256: P·V's 128 accumulator registers fit the 168 of the launch",
          "[codegen][warp-specialize]") {
  compiler::UnifiedAttentionConfig config = hopperPrefill();
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
      CHECK(countOf(specialized.ptx, "cp.async.mbarrier.arrive.noinc.shared.b64") == fills);
      CHECK(countOf(specialized.ptx, "mbarrier.init.shared.b64") == 2 * fills);
      CHECK(countOf(specialized.ptx, "mbarrier.arrive.shared.b64") == fills / 2);
      CHECK(countOf(specialized.ptx, "cp.async.commit_group") == 0);
      CHECK(countOf(specialized.ptx, "wgmma.mma_async") == countOf(plain.ptx, "wgmma.mma_async"));
      if (tests::havePtxas()) {
        const std::string info = tests::ptxasInfo(specialized.ptx, "sm_90a");
        INFO(info);
        CHECK(info.find("Used 168 registers") != std::string::npos);
        CHECK(info.find("serialized") == std::string::npos);
        if (format == compiler::KvCacheFormat::Auto) CHECK(info.find(" 0 bytes spill stores") != std::string::npos);
      }
    }
}

TEST_CASE("the slot protocol codegen emits holds under every interleaving tried", "[codegen][warp-specialize]") {
  constexpr int kIterations = 24;
  const codegen::SlotProtocolTable table = codegen::warpSpecializationSlotProtocol(kIterations + 2);
  auto at = [](const std::vector<int>& values) {
    return [&values](int n) { return values.at(static_cast<size_t>(n)); };
  };
  const SlotProtocol emitted{at(table.fillOfIteration), at(table.slotOfFill), at(table.emptyWaitParity),
                             at(table.fullWaitParity)};
  std::mt19937 random(7);
  for (int iterations = 0; iterations <= kIterations; ++iterations)
    for (int schedule = 0; schedule < 200; ++schedule) {
      INFO(iterations << " iterations, schedule " << schedule);
      CHECK(runSlotProtocol(emitted, iterations, random).empty());
    }
  // The model catches the mistakes the protocol could make.
  SlotProtocol noInitialPhase = emitted;  // the first fill of a slot waits for a release
  noInitialPhase.emptyWaitParity = [](int fill) { return (fill >> 1) & 1; };
  CHECK(runSlotProtocol(noInitialPhase, 4, random).find("deadlock") != std::string::npos);
  SlotProtocol phasePerFill = emitted;  // parity flipping every iteration, not every use of a slot
  phasePerFill.fullWaitParity = [](int iteration) { return iteration & 1; };
  CHECK(runSlotProtocol(phasePerFill, 4, random).find("iteration 1 read fill") != std::string::npos);
  SlotProtocol noEmptyWait = emitted;  // refilling without waiting for the release
  noEmptyWait.emptyWaitParity = [](int fill) { return 1 ^ (fill & 0); };
  bool overwrote = false;
  for (int schedule = 0; schedule < 200 && !overwrote; ++schedule)
    overwrote = runSlotProtocol(noEmptyWait, 6, random).find("overwrote") != std::string::npos;
  CHECK(overwrote);
}
