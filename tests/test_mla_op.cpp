// The MLA decode op (compiler/ops/MlaDecodeOp.h): split planning and validation on
// the CPU; [gpu] launches on the harness's poisoned buffers checked against the
// float64 reference, unsplit and split, vLLM's [B, H] LSE layout and [H, B].
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <optional>

#include "compiler/driver/DeviceTarget.h"
#include "compiler/ops/MlaDecodeOp.h"
#include "compiler/validation/MlaDecodeProblem.h"
#include "runtime/DeviceBuffer.h"
#include "test_tools.h"

using namespace attnjit;
using support::Status;

namespace {

ops::MlaDecodeParams decodeParams(int numSeqs, int maxSeqLen) {
  ops::MlaDecodeParams p;
  p.numHeads = 128;
  p.blockSize = 16;
  p.numSeqs = numSeqs;
  p.maxSeqLen = maxSeqLen;
  p.numSms = 132;
  p.scale = 0.0417f;
  p.out = p.q = p.kvCache = p.blockTables = p.seqLens = 0x10000;
  p.qStrideBatch = 128 * 576;
  p.qStrideHead = 576;
  p.oStrideBatch = 128 * 512;
  p.oStrideHead = 512;
  p.blockTableStride = 64;
  p.kvStrideBlock = 16 * 576;
  p.kvStrideToken = 576;
  p.workspace = 0x20000;
  p.workspaceBytes = ops::mlaDecodeWorkspaceBytes(numSeqs, 128, 512, maxSeqLen).value();
  return p;
}

}  // namespace

TEST_CASE("mla op: f32 calls choose TF32 or exact dots by fp32_precision", "[mla_op][tf32]") {
  ops::MlaDecodeParams p = decodeParams(64, 4096);
  p.dtype = ir::ScalarKind::F32;
  const compiler::MlaDecodeConfig tf32 = ops::selectMlaDecodeVariant(p);
  CHECK(tf32.tf32Dots());
  p.fp32Precision = compiler::Fp32Precision::Ieee;
  const compiler::MlaDecodeConfig exact = ops::selectMlaDecodeVariant(p);
  CHECK_FALSE(exact.tf32Dots());
  CHECK(exact.kernelName().ends_with("_ieee"));
  CHECK(tf32.kernelName().find("_ieee") == std::string::npos);
  p.dtype = ir::ScalarKind::BF16;  // the field concerns f32 only
  CHECK(ops::selectMlaDecodeVariant(p).kernelName().find("_ieee") == std::string::npos);
}

TEST_CASE("mla op: the tiling follows the heads, the width and the cache format", "[mla_op]") {
  // Without a GPU the ops' target is sm_90a, whose blocks take the resident-q tilings.
  struct Expected {
    int numHeads, kvLoraRank;
    compiler::KvCacheFormat format;
    ir::ScalarKind dtype;
    int blockH, tileSize, numWarps;
    bool qInShared;
    bool f16Dots = false;  // fp8 latents meet bf16 q in f16
  } cases[] = {
      {128, 512, compiler::KvCacheFormat::Auto, ir::ScalarKind::BF16, 64, 64, 8, true},
      {100, 512, compiler::KvCacheFormat::Auto, ir::ScalarKind::BF16, 64, 64, 8, true},
      {64, 512, compiler::KvCacheFormat::Auto, ir::ScalarKind::F16, 64, 64, 8, true},
      {32, 512, compiler::KvCacheFormat::Auto, ir::ScalarKind::BF16, 32, 64, 4, true},
      {16, 512, compiler::KvCacheFormat::Auto, ir::ScalarKind::BF16, 16, 64, 4, true},
      {10, 512, compiler::KvCacheFormat::Auto, ir::ScalarKind::BF16, 16, 64, 4, true},
      {128, 256, compiler::KvCacheFormat::Auto, ir::ScalarKind::BF16, 64, 64, 4, true},
      {20, 256, compiler::KvCacheFormat::Auto, ir::ScalarKind::BF16, 32, 64, 4, true},
      {128, 512, compiler::KvCacheFormat::Fp8E4M3, ir::ScalarKind::BF16, 64, 64, 8, true, true},
      {128, 256, compiler::KvCacheFormat::Fp8E4M3, ir::ScalarKind::BF16, 64, 64, 4, true, true},
      {32, 512, compiler::KvCacheFormat::Fp8E4M3, ir::ScalarKind::BF16, 32, 64, 4, true, true},
      {16, 512, compiler::KvCacheFormat::Fp8E4M3, ir::ScalarKind::BF16, 16, 64, 4, true, true},
      {16, 512, compiler::KvCacheFormat::Fp8E4M3, ir::ScalarKind::F16, 16, 64, 4, true},
      {128, 512, compiler::KvCacheFormat::Auto, ir::ScalarKind::F32, 64, 32, 8, false},
  };
  for (const Expected& e : cases) {
    ops::MlaDecodeParams p = decodeParams(64, 4096);
    p.numHeads = e.numHeads;
    p.kvLoraRank = e.kvLoraRank;
    p.kvCacheFormat = e.format;
    p.dtype = e.dtype;
    const compiler::MlaDecodeConfig c = ops::selectMlaDecodeVariant(p);
    INFO(c.kernelName());
    CHECK(c.blockH == e.blockH);
    CHECK(c.tileSize == e.tileSize);
    CHECK(c.numWarps == e.numWarps);
    CHECK(c.qInShared == e.qInShared);
    CHECK((c.dotKind() == ir::ScalarKind::F16 && c.dtype == ir::ScalarKind::BF16) == e.f16Dots);
    CHECK((c.kernelName().find("_f16dots") != std::string::npos) == e.f16Dots);
    // Producer warps issue the copies of every 64-head tiling with 64-key tiles
    // (16-bit and fp8 latents, L = 512 on 8 warps, L = 256 on 4) on sm_90a.
    const bool producers = e.blockH == 64 && e.tileSize == 64 && compiler::opDeviceFacts().warpgroupMma;
    CHECK(c.warpSpecialize == producers);
    if (tests::havePtxas())
      tests::checkAssembles(tests::compileBuilt(compiler::buildMlaDecode(c), "sm_90a").ptx, "sm_90a");
  }
  // A batch that cannot fill 132 SMs with 64-head programs, however split, takes
  // 32 heads per program: one sequence of 4096 keys splits into 16 segments.
  ops::MlaDecodeParams single = decodeParams(1, 4096);
  CHECK(ops::selectMlaDecodeVariant(single).blockH == 32);
  single.numSeqs = 5;  // 5 x 2 head blocks x 16 segments fill the GPU
  CHECK(ops::selectMlaDecodeVariant(single).blockH == 64);
  // Exact f32 keeps the kernel's default tiling (FMA dots).
  ops::MlaDecodeParams exact = decodeParams(64, 4096);
  exact.dtype = ir::ScalarKind::F32;
  exact.fp32Precision = compiler::Fp32Precision::Ieee;
  CHECK(ops::selectMlaDecodeVariant(exact).blockH == compiler::MlaDecodeConfig{}.blockH);
}

TEST_CASE("mla op: the balanced split rule cuts only what the GPU waits on", "[mla_op]") {
  // B=64 x 128 heads: 128 programs already fill 132 SMs: no split (vLLM: 8).
  ops::MlaDecodeParams full = decodeParams(64, 4096);
  CHECK(ops::mlaDecodeSplitPlan(full).numSegments == 1);
  full.splitRule = ops::MlaSplitRule::Vllm;
  CHECK(ops::mlaDecodeSplitPlan(full).numSegments == 8);
  // B=64 x 64 heads: one 64-head program per sequence, 64 programs for 132 SMs:
  // each sequence is cut in two.
  ops::MlaDecodeParams half = decodeParams(64, 4096);
  half.numHeads = 64;
  CHECK(ops::selectMlaDecodeVariant(half).blockH == 64);
  CHECK(ops::mlaDecodeSplitPlan(half).numSegments == 2);
  // B=8 x 131072 keys: 64 programs; each long sequence is cut.
  ops::MlaDecodeParams longContext = decodeParams(8, 131072);
  const ops::MlaSplitPlan plan = ops::mlaDecodeSplitPlan(longContext);
  CHECK(plan.numSegments >= 4);
  CHECK(int64_t{plan.numSegments} * plan.segmentTiles * ops::selectMlaDecodeVariant(longContext).tileSize >= 131072);
  CHECK(ops::selectMlaDecodeVariant(longContext).splitKv);
  // Mixed lengths: Σ seq_lens says how much work there is, so the cut follows it.
  ops::MlaDecodeParams mixed = decodeParams(64, 8192);
  mixed.sumSeqLens = 64 * 600;  // mostly short sequences, one long
  CHECK(ops::mlaDecodeSplitPlan(mixed).numSegments > 1);
  // Batch invariance, and no workspace without the runtime's scratch: never split.
  longContext.batchInvariant = true;
  CHECK(ops::mlaDecodeSplitPlan(longContext).numSegments == 1);
  ops::MlaDecodeParams noWorkspace = decodeParams(8, 131072);
  noWorkspace.workspace = 0;
  noWorkspace.runtimeScratch = false;
  CHECK_FALSE(ops::selectMlaDecodeVariant(noWorkspace).splitKv);
  // No workspace: the runtime's scratch holds the plan a large workspace would.
  noWorkspace.runtimeScratch = true;
  CHECK(ops::mlaDecodeSplitPlan(noWorkspace).numSegments == plan.numSegments);
  CHECK(ops::mlaDecodeSplitPlan(noWorkspace).segmentTiles == plan.segmentTiles);
  // A workspace too small for two segments: unsplit, not the runtime's scratch.
  noWorkspace.workspace = 0x20000;
  noWorkspace.workspaceBytes = 64;
  CHECK(ops::mlaDecodeSplitPlan(noWorkspace).numSegments == 1);
}

TEST_CASE("mla op: validation names the argument", "[mla_op]") {
  ops::MlaDecodeParams p = decodeParams(4, 1000);
  REQUIRE(ops::validateMlaDecode(p).isOk());
  auto expectError = [](ops::MlaDecodeParams bad, const std::string& text) {
    support::Status s = ops::validateMlaDecode(bad);
    REQUIRE_FALSE(s.isOk());
    INFO(s.diagnostic().message);
    CHECK(s.diagnostic().message.find(text) != std::string::npos);
  };
  ops::MlaDecodeParams wide = p;
  wide.kvLoraRank = 536;
  expectError(wide, "mla decode:");
  ops::MlaDecodeParams nullQ = p;
  nullQ.q = 0;
  expectError(nullQ, "q is a null pointer");
  ops::MlaDecodeParams fp8 = p;
  fp8.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  expectError(fp8, "kv_scale is a null pointer");
  ops::MlaDecodeParams stride = p;
  stride.kvStrideToken = 520;
  expectError(stride, "kv_stride_token");
  ops::MlaDecodeParams lse = p;
  lse.lse = 0x30000;
  lse.lseStrideBatch = 1;
  lse.lseStrideHead = 2;
  expectError(lse, "lse strides");
  ops::MlaDecodeParams smallWorkspace = p;
  smallWorkspace.workspaceBytes = 1024;  // too small to split: unsplit, not an error
  CHECK(ops::validateMlaDecode(smallWorkspace));
  CHECK(ops::mlaDecodeSplitPlan(smallWorkspace).numSegments == 1);
}

TEST_CASE("mla op: launches match the float64 reference", "[gpu][mla_op]") {
  if (!tests::gpuPresent()) return;
  REQUIRE(runtime::activatePrimaryContext(0).isOk());
  struct Case {
    compiler::KvCacheFormat format;
    int kvLoraRank;
    int numHeads;
    std::vector<int> seqLens;
    bool withWorkspace;
    bool headMajorLse;  // [H, B] instead of vLLM's [B, H]
    ops::MlaSplitRule rule = ops::MlaSplitRule::Balanced;
    bool runtimeScratch = false;  // without a workspace: split into the runtime's scratch
  } cases[] = {
      {compiler::KvCacheFormat::Auto, 512, 128, {1000, 37, 2049, 0, 300}, false, false},
      {compiler::KvCacheFormat::Auto, 512, 128, {3000, 37, 2049, 0, 300}, true, false},
      {compiler::KvCacheFormat::Auto, 512, 16, {3000, 1, 700}, true, true},
      {compiler::KvCacheFormat::Auto, 512, 40, {1200, 65, 0, 31}, true, false},
      {compiler::KvCacheFormat::Fp8E4M3, 512, 128, {2500, 90}, true, false, ops::MlaSplitRule::Vllm},
      {compiler::KvCacheFormat::Auto, 256, 64, {1500, 513}, true, true},
      {compiler::KvCacheFormat::Fp8E4M3, 256, 128, {1700, 3, 640}, true, false},
      {compiler::KvCacheFormat::Auto, 512, 128, {3000, 37, 2049, 0, 300}, false, true, ops::MlaSplitRule::Balanced,
       true},
      // Head counts 16 to 128 over lengths around a 16-token block (1, 15, 16,
      // 17), a 4095-key context and a 65536-key one, mixed in one batch.
      {compiler::KvCacheFormat::Auto, 512, 16, {1, 15, 16, 17, 4095, 65536}, true, false},
      {compiler::KvCacheFormat::Auto, 512, 32, {17, 4095, 1, 16, 15}, true, false},
      {compiler::KvCacheFormat::Fp8E4M3, 512, 64, {4095, 1, 15, 16, 17}, true, false},
      {compiler::KvCacheFormat::Auto, 512, 128, {15, 4095, 1, 17, 16}, false, false},
      {compiler::KvCacheFormat::Fp8E4M3, 512, 128, {65536, 17, 1}, true, false},
  };
  for (const Case& c : cases) {
    compiler::MlaDecodeConfig config;
    config.kvCacheFormat = c.format;
    config.kvLoraRank = c.kvLoraRank;
    config.numHeads = c.numHeads;
    config.outputLse = true;
    validation::MlaDecodeBatch batch;
    batch.seqLens = c.seqLens;
    batch.seed = 3;
    auto problem = validation::MlaDecodeProblem::create(config, batch);
    REQUIRE(problem.isOk());
    auto& buffers = (*problem)->buffers();
    auto index = [&](const std::string& label) {
      for (size_t i = 0; i < buffers.size(); ++i)
        if (buffers[i].label == label) return i;
      FAIL("no buffer " << label);
      return size_t{0};
    };
    std::vector<runtime::DeviceBuffer> device;
    for (auto& buffer : buffers) {
      auto d = runtime::DeviceBuffer::allocate(std::max<size_t>(buffer.bytes.size(), 16));
      REQUIRE(d.isOk());
      REQUIRE(d->copyFromHost(buffer.bytes.data(), buffer.bytes.size()).isOk());
      device.push_back(std::move(*d));
    }
    const int numSeqs = static_cast<int>(c.seqLens.size());
    ops::MlaDecodeParams p;
    p.kvCacheFormat = c.format;
    p.kvLoraRank = c.kvLoraRank;
    p.numHeads = c.numHeads;
    p.blockSize = config.blockSize;
    p.splitRule = c.rule;
    p.numSeqs = numSeqs;
    p.maxSeqLen = *std::max_element(c.seqLens.begin(), c.seqLens.end());
    p.numSms = 132;
    p.scale = static_cast<float>(std::get<double>((*problem)->launches()[0].scalars[0]));
    p.out = device[index("out")].address();
    p.q = device[index("q")].address();
    p.kvCache = device[index("kv_cache")].address();
    p.blockTables = device[index("block_tables")].address();
    p.seqLens = device[index("seq_lens")].address();
    if (c.format != compiler::KvCacheFormat::Auto) p.kvScale = device[index("kv_scale")].address();
    // The harness's LSE is [B, H] with a padded batch stride (its 2D kernel's
    // last two scalars); the [H, B] case writes a scratch buffer and copies it
    // into that layout for the check.
    const int64_t harnessLseStrideBatch = std::get<int64_t>((*problem)->launches()[0].scalars[8]);
    const int64_t harnessLseStrideHead = std::get<int64_t>((*problem)->launches()[0].scalars[9]);
    std::optional<runtime::DeviceBuffer> headMajor;
    if (c.headMajorLse) {
      auto d = runtime::DeviceBuffer::allocate(static_cast<size_t>(numSeqs) * c.numHeads * 4);
      REQUIRE(d.isOk());
      REQUIRE(d->fill(0xff).isOk());
      headMajor = std::move(*d);
      p.lse = headMajor->address();
      p.lseStrideBatch = 1;
      p.lseStrideHead = numSeqs;
    } else {
      p.lse = device[index("lse")].address();
      p.lseStrideBatch = harnessLseStrideBatch;
      p.lseStrideHead = harnessLseStrideHead;
    }
    // The 2D kernel's scalars: scale, q strides, o strides, block-table and
    // cache strides, lse_stride_batch.
    const auto& scalars = (*problem)->launches()[0].scalars;
    p.qStrideBatch = std::get<int64_t>(scalars[1]);
    p.qStrideHead = std::get<int64_t>(scalars[2]);
    p.oStrideBatch = std::get<int64_t>(scalars[3]);
    p.oStrideHead = std::get<int64_t>(scalars[4]);
    p.blockTableStride = std::get<int64_t>(scalars[5]);
    p.kvStrideBlock = std::get<int64_t>(scalars[6]);
    p.kvStrideToken = std::get<int64_t>(scalars[7]);
    std::optional<runtime::DeviceBuffer> workspace;
    if (c.withWorkspace) {
      const uint64_t bytes = ops::mlaDecodeWorkspaceBytes(numSeqs, c.numHeads, c.kvLoraRank, p.maxSeqLen).value();
      auto w = runtime::DeviceBuffer::allocate(bytes);
      REQUIRE(w.isOk());
      REQUIRE(w->fill(0xff).isOk());
      p.workspace = w->address();
      p.workspaceBytes = bytes;
      workspace = std::move(*w);
      CHECK(ops::selectMlaDecodeVariant(p).splitKv);
    }
    p.runtimeScratch = c.runtimeScratch;
    if (c.runtimeScratch) CHECK(ops::selectMlaDecodeVariant(p).splitKv);
    INFO(ops::selectMlaDecodeVariant(p).kernelName() << " segments " << ops::mlaDecodeSplitPlan(p).numSegments);
    support::Status launched = ops::mlaDecode(p);
    INFO((launched ? std::string() : launched.diagnostic().str()));
    REQUIRE(launched.isOk());
    REQUIRE(runtime::synchronizeContext().isOk());
    std::vector<validation::MlaDecodeProblem::Buffer> after = buffers;
    for (size_t i = 0; i < after.size(); ++i)
      if (after[i].written) REQUIRE(device[i].copyToHost(after[i].bytes.data(), after[i].bytes.size()).isOk());
    if (headMajor) {
      std::vector<float> transposed(static_cast<size_t>(numSeqs) * c.numHeads);
      REQUIRE(headMajor->copyToHost(transposed.data(), transposed.size() * 4).isOk());
      auto& lse = after[index("lse")].bytes;
      for (int b = 0; b < numSeqs; ++b)
        for (int h = 0; h < c.numHeads; ++h)
          std::memcpy(lse.data() + static_cast<size_t>(b * harnessLseStrideBatch + h * harnessLseStrideHead) * 4,
                      &transposed[static_cast<size_t>(h) * numSeqs + b], 4);
    }
    validation::AttentionRunResult result;
    (*problem)->check(after, result);
    INFO("max abs error " << result.maxAbsError << " (tolerance " << result.tolerance << "); " << result.detail);
    CHECK(result.passed);
  }
}
