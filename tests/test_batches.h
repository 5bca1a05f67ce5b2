// Batches shared by the attention tests.
#pragma once

#include <cstdint>

#include "compiler/AttentionProblem.h"

namespace attnjit::tests {

// A decode far past a tile, a chunked prefill, a short context and a fresh
// prefill; no length is a multiple of the tile (32) or block (16) size.
inline compiler::AttentionShape mixedAttentionBatch(uint64_t seed) {
  compiler::AttentionShape s;
  s.queryLens = {1, 13, 1, 45};
  s.contextLens = {101, 37, 5, 0};
  s.seed = seed;
  return s;
}

}  // namespace attnjit::tests
