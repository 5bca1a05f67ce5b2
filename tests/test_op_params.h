// A well-formed paged-attention op call shared by the op's test files: bf16,
// 32/8 heads, D=128, block 16, four decode tokens, fake but aligned device
// addresses (validation never dereferences them).
#pragma once

#include "compiler/ops/PagedAttentionOp.h"

namespace attnjit::tests {

inline ops::PagedAttentionParams validPagedAttentionParams() {
  ops::PagedAttentionParams p;
  p.dtype = ir::ScalarKind::BF16;
  p.numQueryHeads = 32;
  p.numKvHeads = 8;
  p.headSize = 128;
  p.blockSize = 16;
  p.numSeqs = 4;
  p.numTokens = 4;
  p.maxQueryLen = 1;
  p.scale = 0.088f;
  p.out = 0x10000;
  p.q = 0x20000;
  p.kvCache = 0x30000;
  p.blockTables = 0x40000;
  p.seqLens = 0x50000;
  p.cuSeqlensQ = 0x60000;
  p.qStrideToken = p.oStrideToken = 32 * 128;
  p.qStrideHead = p.oStrideHead = 128;
  p.blockTableStride = 7;
  p.kvStrideBlock = 2 * 16 * 8 * 128;
  p.kvStrideKv = 16 * 8 * 128;
  p.kvStrideToken = 8 * 128;
  p.kvStrideHead = 128;
  return p;
}

}  // namespace attnjit::tests
