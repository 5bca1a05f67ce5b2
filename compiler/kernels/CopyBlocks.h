// Kernel builder: whole cache blocks copied inside one GPU by a device list of
// (source block, destination block) pairs — swap_blocks' copies when both caches
// are device memory (compiler/ops/SwapBlocks.h), vLLM's copy_blocks:
//
//   dst[mapping[2p + 1] · dst_stride + i] = src[mapping[2p] · src_stride + i]
//   for p < num_pairs, i < block_bytes
//
// Grid: (num_pairs, ceil(block_bytes / CHUNK_BYTES)); program (p, c) copies
// bytes [c · CHUNK_BYTES, (c + 1) · CHUNK_BYTES) of pair p's block, the last
// chunk masked. Programs run in any order: no pair may read or write bytes
// another pair of the launch writes (the op splits dependent pairs into
// launches of their own).
#pragma once

#include <memory>
#include <string>

#include "ir/IR.h"

namespace attnjit::compiler {

struct CopyBlocksConfig {
  int chunkBytes = 4096;  // bytes per program, a power of two from 256 to 65536
  int numWarps = 4;
  // A power of two up to 16 that both bases, both strides and block_bytes are
  // multiples of: bytes then move in vectors that wide. The op picks what its
  // call keeps.
  int alignment = 16;

  // e.g. "copy_blocks", "copy_blocks_a4" ("_c", "_w", "_a" for non-default
  // chunk, warps and alignment).
  std::string kernelName() const;
  support::Status validate() const;
};

// Kernel parameters, in order:
//   src ptr<i8>, dst ptr<i8>, block_mapping ptr<i64> ([num_pairs, 2]),
//   src_stride i64, dst_stride i64, block_bytes i64 (bytes).
// Pointers, strides and block_bytes are multiples of `alignment`.
support::Expected<std::unique_ptr<ir::Kernel>> buildCopyBlocks(const CopyBlocksConfig& config);

// Grid y for blocks of `blockBytes` bytes (grid x is the number of pairs).
int64_t copyBlocksGridY(const CopyBlocksConfig& config, int64_t blockBytes);

}  // namespace attnjit::compiler
