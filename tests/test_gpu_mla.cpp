// [gpu] MLA latent decode JIT-compiled for the local GPU: every variant of
// specs/mla_decode.yaml on a moderate batch (6 sequences, contexts up to ~2000
// keys, one empty), checked against the float64 reference on poisoned buffers
// (outputs, LSE, split-KV scratch and unused cache rows start as NaN). Skips with
// a visible message where no CUDA driver or GPU is present.
#include <catch2/catch.hpp>

#include "compiler/spec/VariantKernel.h"
#include "compiler/validation/VariantRuns.h"
#include "compiler/validation/MlaDecodeProblem.h"
#include "compiler/spec/Spec.h"
#include "tests/test_paths.h"
#include "tests/test_tools.h"

using namespace attnjit;

namespace {

void expectPassed(const support::Expected<validation::GpuRunResult>& result, const std::string& name) {
  INFO(name);
  INFO((result.isOk() ? result->check.detail : result.diagnostic().str()));
  REQUIRE(result.isOk());
  INFO("max abs error " << result->check.maxAbsError << ", tolerance " << result->check.tolerance << ", "
                        << result->registers << " registers, " << result->spillBytes << " spill bytes");
  CHECK(result->check.passed);
}

}  // namespace

TEST_CASE("GPU mla_decode: every variant of specs/mla_decode.yaml against the float64 reference", "[gpu][mla]") {
  if (!tests::gpuPresent()) return;
  auto spec = compiler::loadSpecFile(tests::sourceDir() + "/specs/mla_decode.yaml");
  REQUIRE(spec.isOk());
  compiler::BatchShape shape;
  shape.queryLens = {1, 1, 1, 1, 1, 1};
  shape.contextLens = {1999, 0, 517, 1024, 33, 1300};
  shape.seed = 21;
  shape.segmentTiles = 16;  // split variants: 256 keys (16-key tiles) per segment, 8 segments
  for (const auto& variant : spec->variants) expectPassed(validation::runVariantGpu(variant, shape, {}), variant.name);
}

TEST_CASE("GPU mla_decode: tiling knobs, q in shared memory, f16, empty sequences and split counts", "[gpu][mla]") {
  if (!tests::gpuPresent()) return;
  validation::MlaDecodeBatch batch;
  batch.seqLens = {0, 1, 2000, 777, 64, 0, 1500, 129};
  batch.seed = 5;
  // q re-read from L1 or kept in shared memory (as the op's tilings keep it).
  for (int blockH : {16, 32, 64})
    for (int tileSize : {16, 32, 64})
      for (bool qInShared : {false, true})
        for (bool split : {false, true}) {
          compiler::MlaDecodeConfig c;
          c.numHeads = 128;
          c.blockH = blockH;
          c.tileSize = tileSize;
          c.numWarps = blockH == 64 ? 8 : 4;
          c.qInShared = qInShared;
          c.splitKv = split;
          c.outputLse = true;
          batch.segmentTiles = 512 / tileSize;
          expectPassed(validation::runMlaDecodeGpu(c, batch, {}), c.kernelName());
        }
  // The op's fp8 tiling: the latent cast in registers, each chunk stored once
  // for its two conversions, mma.sync over column blocks.
  for (int tileSize : {32, 64})
    for (bool split : {false, true}) {
      compiler::MlaDecodeConfig c;
      c.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
      c.numHeads = 128;
      c.blockH = 64;
      c.tileSize = tileSize;
      c.numWarps = 8;
      c.qInShared = true;
      c.splitKv = split;
      c.outputLse = true;
      batch.segmentTiles = 512 / tileSize;
      expectPassed(validation::runMlaDecodeGpu(c, batch, {}), c.kernelName());
    }
  for (auto format : {compiler::KvCacheFormat::Auto, compiler::KvCacheFormat::Fp8E4M3})
    for (int segmentTiles : {1, 3, 125}) {
      compiler::MlaDecodeConfig c;
      c.dtype = ir::ScalarKind::F16;
      c.kvCacheFormat = format;
      c.kvLoraRank = 256;
      c.numHeads = 16;
      c.splitKv = true;
      c.outputLse = true;
      batch.segmentTiles = segmentTiles;
      expectPassed(validation::runMlaDecodeGpu(c, batch, {}), c.kernelName());
    }
}

TEST_CASE("GPU mla_decode with producer warps (warp_specialize) agrees with float64", "[gpu][mla]") {
  if (!tests::gpuPresent()) return;
  // The op's Hopper tiling (64 heads, 64 keys, 8 warps, q in shared memory)
  // with a warpgroup of producers copying the five latent chunks of each tile:
  // long rows take the slots through many phases, empty ones leave the loop
  // without a tile, short splits leave segments empty.
  validation::MlaDecodeBatch batch;
  batch.seqLens = {0, 1, 4000, 777, 64, 0, 1500, 129};
  batch.seed = 9;
  for (auto format : {compiler::KvCacheFormat::Auto, compiler::KvCacheFormat::Fp8E4M3})
    for (bool split : {false, true}) {
      compiler::MlaDecodeConfig c;
      c.kvCacheFormat = format;
      c.numHeads = 128;
      c.blockH = 64;
      c.tileSize = 64;
      c.numWarps = 8;
      c.qInShared = true;
      c.warpSpecialize = true;
      c.splitKv = split;
      c.outputLse = true;
      batch.segmentTiles = 7;
      expectPassed(validation::runMlaDecodeGpu(c, batch, {}), c.kernelName());
    }
}

TEST_CASE("GPU mla_decode in f32 and over blocks of 1 and 24 tokens", "[gpu][mla]") {
  if (!tests::gpuPresent()) return;
  validation::MlaDecodeBatch batch;
  batch.seqLens = {0, 1, 700, 129};
  batch.seed = 9;
  for (bool split : {false, true})
    for (auto precision : {compiler::Fp32Precision::Tf32, compiler::Fp32Precision::Ieee}) {
      compiler::MlaDecodeConfig c;
      c.dtype = ir::ScalarKind::F32;
      c.fp32Precision = precision;
      c.numHeads = 16;
      c.splitKv = split;
      c.outputLse = true;
      batch.segmentTiles = 4;
      expectPassed(validation::runMlaDecodeGpu(c, batch, {}), c.kernelName());
    }
  for (int blockSize : {1, 24}) {
    compiler::MlaDecodeConfig c;
    c.numHeads = 16;
    c.blockSize = blockSize;
    expectPassed(validation::runMlaDecodeGpu(c, batch, {}), c.kernelName());
  }
}
