// vLLM's swap_blocks and copy_blocks: whole cache blocks copied between two
// caches (host and device, both ways: swapping a preempted sequence's blocks out
// and back in) or inside one (copy-on-write of a shared prefix block), driven by a
// host list of (source block, destination block) pairs:
//
//   dst[dst_block] = src[src_block]   for each pair, in the list's order
//
// where block b of a cache is the blockBytes bytes at base + b · blockStride.
// Each side is device memory, or host memory (pinned for a copy that overlaps
// other work and for CUDA-graph capture), on either side; the kind of each copy
// follows from the pointers (unified addressing). Pairs whose blocks follow
// each other on both sides merge into one copy (vLLM issues one copy per
// block); a merged copy never covers bytes it also writes, so a list whose
// later pairs read blocks earlier pairs wrote (in one cache) copies as the
// list says. More than 8 copies inside the current GPU run as the copy_blocks
// kernel (compiler/kernels/CopyBlocks.h), one launch per run of pairs that do
// not depend on each other; otherwise each run of independent copies goes out
// as one cuMemcpyBatchAsync (CUDA 12.8+ drivers, outside graph capture, from
// CUDA memory; runtime::copyBatchAsync), the rest as one cuMemcpyAsync each.
//
// vLLM's copy_blocks takes every layer's key and value caches at once; here a call
// moves one cache (a layer's key cache, say), and an engine calls once per cache.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/Driver.h"
#include "support/Diagnostics.h"

namespace attnjit::ops {

struct SwapBlocksParams {
  // Bytes of one block (vLLM's block_size_in_bytes: block_size · heads · head
  // size · element size for one of K or V).
  int64_t blockBytes = 0;
  // Bytes from one block to the next; 0 means blockBytes (blocks back to back).
  int64_t srcBlockStride = 0, dstBlockStride = 0;
  // Blocks in each cache: every index in the mapping must be below them.
  int64_t srcNumBlocks = 0, dstNumBlocks = 0;
  // Base addresses (device pointers or host pointers); src may equal dst.
  uint64_t src = 0, dst = 0;
  // Host memory: numPairs (source block, destination block) pairs, i.e. vLLM's
  // [num_pairs, 2] int64 block_mapping (which vLLM also keeps on the host).
  const int64_t* blockMapping = nullptr;
  int64_t numPairs = 0;
  runtime::StreamHandle stream = nullptr;  // null: the default stream
};

// One cuMemcpyAsync: `bytes` bytes from src + srcOffset to dst + dstOffset.
struct BlockCopy {
  int64_t srcOffset = 0, dstOffset = 0, bytes = 0;
  friend bool operator==(const BlockCopy&, const BlockCopy&) = default;
};

// The copies a call issues, in order, after checking every argument (errors name
// the pair and the block). A pair copying a block onto itself copies nothing.
support::Expected<std::vector<BlockCopy>> planSwapBlocks(const SwapBlocksParams& params);

// The copies split into runs that may execute in any order among themselves:
// no copy of a run reads or writes bytes another copy of the same run writes.
// Returns each run's first index, then copies.size(). `src` and `dst` are the
// bases the offsets count from.
std::vector<size_t> independentCopyRuns(const std::vector<BlockCopy>& copies, uint64_t src, uint64_t dst);

// planSwapBlocks' checks, without touching the GPU.
support::Status validateSwapBlocks(const SwapBlocksParams& params);

// Validate, then queue the copies on params.stream.
support::Status swapBlocks(const SwapBlocksParams& params);

}  // namespace attnjit::ops
