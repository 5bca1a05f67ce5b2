// Batches and the checked interpreter run shared by the attention tests.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <string>
#include <utility>

#include "compiler/driver/CompileDriver.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "compiler/validation/AttentionProblem.h"
#include "tests/test_tools.h"

namespace attnjit::tests {

// The op API's Hopper prefill tiling (sm_90a, warpgroup MMAs): 128 query rows
// over 8 warps of 16, 64-key tiles, Q in registers.
inline compiler::UnifiedAttentionConfig hopperPrefillTiling() {
  compiler::UnifiedAttentionConfig c;
  c.blockMRows = 128;
  c.numWarps = 8;
  c.tileSize = 64;
  return c;
}

// The score-modifier tests' kernel: 8 query heads over 2 KV heads, block 16.
inline compiler::UnifiedAttentionConfig gqaAttentionConfig(ir::ScalarKind dtype, bool causal, int headSize) {
  compiler::UnifiedAttentionConfig c;
  c.dtype = dtype;
  c.numQueryHeads = 8;
  c.numKvHeads = 2;
  c.headSize = headSize;
  c.blockSize = 16;
  c.causal = causal;
  return c;
}

// A decode far past a tile, a chunked prefill, a short context and a fresh
// prefill; no length is a multiple of the tile (32) or block (16) size.
inline compiler::BatchShape mixedAttentionBatch(uint64_t seed) {
  compiler::BatchShape s;
  s.queryLens = {1, 13, 1, 45};
  s.contextLens = {101, 37, 5, 0};
  s.seed = seed;
  return s;
}

// The unified attention kernel of `config`, compiled to PTX for `target`.
inline compiler::CompiledKernel compileAttention(const compiler::UnifiedAttentionConfig& config,
                                                 const std::string& target) {
  return compileBuilt(compiler::buildUnifiedAttention(config), target);
}

// The error compiling the unified attention kernel of `config` for `target`
// reports; a kernel that builds must be the one refused.
inline std::string compileAttentionError(const compiler::UnifiedAttentionConfig& config, const std::string& target) {
  auto kernel = compiler::buildUnifiedAttention(config);
  REQUIRE(kernel);
  compiler::CompileOptions options;
  options.target = target;
  auto refused = compiler::compileKernel(**kernel, options);
  REQUIRE_FALSE(refused);
  return refused.diagnostic().message;
}

// `config` on the CPU interpreter (after the tile-IR passes with `afterPasses`)
// against the float64 reference; a failure names the kernel, the batch and the
// largest error.
inline validation::AttentionRunResult runAndCheck(const compiler::UnifiedAttentionConfig& config,
                                                const compiler::BatchShape& shape, bool afterPasses = false) {
  INFO(config.kernelName() << " on " << shape.str() << (afterPasses ? " after the passes" : ""));
  auto result = validation::runUnifiedAttentionInterpreted(config, shape, afterPasses);
  if (!result) FAIL(result.diagnostic().str());
  INFO("max abs error " << result->maxAbsError << " (tolerance " << result->tolerance << "); " << result->detail);
  CHECK(result->passed);
  return *result;
}

}  // namespace attnjit::tests
