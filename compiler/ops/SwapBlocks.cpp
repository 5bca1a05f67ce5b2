#include "compiler/ops/SwapBlocks.h"

#include <algorithm>
#include <initializer_list>
#include <iterator>
#include <map>
#include <string>

#include "compiler/kernels/CopyBlocks.h"
#include "compiler/ops/ArgumentChecks.h"
#include "compiler/ops/ReadyKernels.h"
#include "runtime/Module.h"
#include "runtime/StreamScratch.h"
#include "runtime/Stream.h"

namespace attnjit::ops {

namespace {

// [begin, end) byte ranges of the two sides; meaningful only when src and dst
// may share memory, i.e. always (two caches may be views of one allocation).
bool rangesOverlap(uint64_t aBegin, uint64_t aEnd, uint64_t bBegin, uint64_t bEnd) {
  return aBegin < bEnd && bBegin < aEnd;
}

// A union of byte ranges kept as disjoint [begin, end) intervals.
class ByteRanges {
 public:
  bool overlaps(uint64_t begin, uint64_t end) const {
    auto next = ranges_.lower_bound(begin);
    if (next != ranges_.end() && next->first < end) return true;
    return next != ranges_.begin() && std::prev(next)->second > begin;
  }
  void add(uint64_t begin, uint64_t end) {
    auto it = ranges_.lower_bound(begin);
    if (it != ranges_.begin() && std::prev(it)->second >= begin) it = std::prev(it);
    while (it != ranges_.end() && it->first <= end) {
      begin = std::min(begin, it->first);
      end = std::max(end, it->second);
      it = ranges_.erase(it);
    }
    ranges_.emplace(begin, end);
  }
  void clear() { ranges_.clear(); }

 private:
  std::map<uint64_t, uint64_t> ranges_;
};

}  // namespace

std::vector<size_t> independentCopyRuns(const std::vector<BlockCopy>& copies, uint64_t src, uint64_t dst) {
  std::vector<size_t> starts;
  ByteRanges read, written;
  for (size_t i = 0; i < copies.size(); ++i) {
    const uint64_t bytes = static_cast<uint64_t>(copies[i].bytes);
    const uint64_t from = src + static_cast<uint64_t>(copies[i].srcOffset);
    const uint64_t to = dst + static_cast<uint64_t>(copies[i].dstOffset);
    // Reading what the run writes, or writing what it reads or writes, needs
    // the order of the list: a new run.
    if (starts.empty() || written.overlaps(from, from + bytes) || written.overlaps(to, to + bytes) ||
        read.overlaps(to, to + bytes)) {
      starts.push_back(i);
      read.clear();
      written.clear();
    }
    read.add(from, from + bytes);
    written.add(to, to + bytes);
  }
  starts.push_back(copies.size());
  return starts;
}

support::Expected<std::vector<BlockCopy>> planSwapBlocks(const SwapBlocksParams& p) {
  const ArgumentChecks checks("swap_blocks");
  if (p.blockBytes <= 0) return checks.error("block_bytes (" + std::to_string(p.blockBytes) + ") must be positive");
  const int64_t srcStride = p.srcBlockStride == 0 ? p.blockBytes : p.srcBlockStride;
  const int64_t dstStride = p.dstBlockStride == 0 ? p.blockBytes : p.dstBlockStride;
  if (srcStride < p.blockBytes || dstStride < p.blockBytes)
    return checks.error("block strides (src " + std::to_string(srcStride) + ", dst " + std::to_string(dstStride) +
                        ") must be at least block_bytes (" + std::to_string(p.blockBytes) +
                        "): blocks may not overlap");
  if (p.numPairs < 0) return checks.error("num_pairs (" + std::to_string(p.numPairs) + ") must not be negative");
  if (p.srcNumBlocks < 0 || p.dstNumBlocks < 0)
    return checks.error("block counts (src " + std::to_string(p.srcNumBlocks) + ", dst " +
                        std::to_string(p.dstNumBlocks) + ") must not be negative");
  std::vector<BlockCopy> copies;
  if (p.numPairs == 0) return copies;
  if (p.blockMapping == nullptr) return checks.error("block_mapping is null with " + std::to_string(p.numPairs) + " pairs");
  if (p.src == 0) return checks.error("src is null");
  if (p.dst == 0) return checks.error("dst is null");
  // The last byte of each cache must be addressable: (num_blocks - 1) · stride +
  // block_bytes fits in 63 bits, and so does every offset below it.
  auto extent = [](int64_t numBlocks, int64_t stride, int64_t blockBytes, int64_t* bytes) {
    int64_t last = 0;
    return numBlocks == 0 || (!__builtin_mul_overflow(numBlocks - 1, stride, &last) &&
                              !__builtin_add_overflow(last, blockBytes, bytes));
  };
  int64_t srcBytes = 0, dstBytes = 0;
  if (!extent(p.srcNumBlocks, srcStride, p.blockBytes, &srcBytes) ||
      !extent(p.dstNumBlocks, dstStride, p.blockBytes, &dstBytes))
    return checks.error("a cache of that many blocks at that stride exceeds the 64-bit address space");
  if (p.src + static_cast<uint64_t>(srcBytes) < p.src || p.dst + static_cast<uint64_t>(dstBytes) < p.dst)
    return checks.error("a cache of that many blocks at that stride exceeds the 64-bit address space");

  // Consecutive pairs merge while both sides advance by one block, the blocks are
  // back to back, and the merged ranges stay apart.
  const bool srcDense = srcStride == p.blockBytes, dstDense = dstStride == p.blockBytes;
  bool extendable = false;  // the last copy ends with the previous pair's blocks
  int64_t previousSrc = 0, previousDst = 0;
  for (int64_t i = 0; i < p.numPairs; ++i) {
    const int64_t srcBlock = p.blockMapping[2 * i], dstBlock = p.blockMapping[2 * i + 1];
    if (srcBlock < 0 || srcBlock >= p.srcNumBlocks)
      return checks.error("block_mapping[" + std::to_string(i) + "]: source block " + std::to_string(srcBlock) +
                          " is outside src's " + std::to_string(p.srcNumBlocks) + " blocks");
    if (dstBlock < 0 || dstBlock >= p.dstNumBlocks)
      return checks.error("block_mapping[" + std::to_string(i) + "]: destination block " + std::to_string(dstBlock) +
                          " is outside dst's " + std::to_string(p.dstNumBlocks) + " blocks");
    const BlockCopy copy{srcBlock * srcStride, dstBlock * dstStride, p.blockBytes};
    const uint64_t srcBegin = p.src + static_cast<uint64_t>(copy.srcOffset);
    const uint64_t dstBegin = p.dst + static_cast<uint64_t>(copy.dstOffset);
    if (srcBegin == dstBegin) {  // a block onto itself
      extendable = false;
      continue;
    }
    if (rangesOverlap(srcBegin, srcBegin + p.blockBytes, dstBegin, dstBegin + p.blockBytes))
      return checks.error("block_mapping[" + std::to_string(i) + "]: source block " + std::to_string(srcBlock) +
                          " and destination block " + std::to_string(dstBlock) + " overlap in memory");
    if (extendable && srcDense && dstDense && srcBlock == previousSrc + 1 && dstBlock == previousDst + 1) {
      BlockCopy& run = copies.back();
      const uint64_t runSrc = p.src + static_cast<uint64_t>(run.srcOffset);
      const uint64_t runDst = p.dst + static_cast<uint64_t>(run.dstOffset);
      const uint64_t merged = static_cast<uint64_t>(run.bytes + p.blockBytes);
      if (!rangesOverlap(runSrc, runSrc + merged, runDst, runDst + merged)) {
        run.bytes += p.blockBytes;
        previousSrc = srcBlock;
        previousDst = dstBlock;
        continue;
      }
    }
    copies.push_back(copy);
    extendable = true;
    previousSrc = srcBlock;
    previousDst = dstBlock;
  }
  return copies;
}

support::Status validateSwapBlocks(const SwapBlocksParams& params) { return planSwapBlocks(params).status(); }

namespace {

constexpr size_t kMostCopiesWithoutKernel = 8;

// The largest power of two up to 16 dividing every value.
int commonAlignment(std::initializer_list<uint64_t> values) {
  int alignment = 16;
  for (uint64_t v : values)
    while (alignment > 1 && v % static_cast<uint64_t>(alignment) != 0) alignment /= 2;
  return alignment;
}

// Whether no pair reads or writes a block another pair writes, decided by
// sorting block numbers (cheaper than independentCopyRuns' ranges, which
// remain for the cases this cannot decide: false means "maybe not"). Caches
// in disjoint memory conflict only through a destination written twice; one
// cache (same base and stride) also where a pair reads another's destination.
bool pairsIndependent(const SwapBlocksParams& p, int64_t srcStride, int64_t dstStride) {
  const size_t n = static_cast<size_t>(p.numPairs);
  std::vector<int64_t> destinations(n);
  for (size_t i = 0; i < n; ++i) destinations[i] = p.blockMapping[2 * i + 1];
  std::sort(destinations.begin(), destinations.end());
  if (std::adjacent_find(destinations.begin(), destinations.end()) != destinations.end()) return false;
  const uint64_t srcEnd = p.src + static_cast<uint64_t>((p.srcNumBlocks - 1) * srcStride + p.blockBytes);
  const uint64_t dstEnd = p.dst + static_cast<uint64_t>((p.dstNumBlocks - 1) * dstStride + p.blockBytes);
  if (!rangesOverlap(p.src, srcEnd, p.dst, dstEnd)) return true;
  if (p.src != p.dst || srcStride != dstStride) return false;
  std::vector<int64_t> sources(n);
  for (size_t i = 0; i < n; ++i) sources[i] = p.blockMapping[2 * i];
  std::sort(sources.begin(), sources.end());
  // A block both read and written: order matters (self-pairs were skipped by
  // the plan; here they make the answer "maybe not").
  for (size_t i = 0, j = 0; i < n && j < n;) {
    if (sources[i] == destinations[j]) return false;
    sources[i] < destinations[j] ? ++i : ++j;
  }
  return true;
}

// Both caches in the current device's memory, several pairs, not capturing a
// graph (the mapping's upload from host memory cannot be captured): the pairs
// run as copy_blocks kernels, one launch per run of independent pairs, from a
// copy of the mapping in the runtime's stream-ordered scratch. Returns false,
// having queued nothing, where that does not apply or no scratch is free.
support::Expected<bool> copyBlocksOnDevice(const SwapBlocksParams& p, int64_t srcStride, int64_t dstStride) {
  if (p.numPairs < 2) return false;
  const int device = runtime::currentContextDevice();
  if (device < 0 || runtime::deviceMemoryOrdinal(p.src) != device || runtime::deviceMemoryOrdinal(p.dst) != device)
    return false;
  auto capturing = runtime::streamIsCapturing(p.stream);
  if (!capturing) return capturing.status();
  if (*capturing) return false;
  compiler::CopyBlocksConfig config;
  config.alignment = commonAlignment({p.src, p.dst, static_cast<uint64_t>(srcStride), static_cast<uint64_t>(dstStride),
                                      static_cast<uint64_t>(p.blockBytes)});
  while (compiler::copyBlocksGridY(config, p.blockBytes) > 65535 && config.chunkBytes < 65536) config.chunkBytes *= 2;
  if (compiler::copyBlocksGridY(config, p.blockBytes) > 65535) return false;

  // Runs over the pairs as listed (the kernel copies whole pairs, unmerged).
  std::vector<size_t> runs;
  if (pairsIndependent(p, srcStride, dstStride)) {
    runs = {0, static_cast<size_t>(p.numPairs)};
  } else {
    std::vector<BlockCopy> pairs;
    pairs.reserve(static_cast<size_t>(p.numPairs));
    for (int64_t i = 0; i < p.numPairs; ++i)
      pairs.push_back({p.blockMapping[2 * i] * srcStride, p.blockMapping[2 * i + 1] * dstStride, p.blockBytes});
    runs = independentCopyRuns(pairs, p.src, p.dst);
  }
  if (static_cast<int64_t>(runs.size()) - 1 > p.numPairs / 2) return false;  // mostly chains: copies do as well

  const uint64_t mappingBytes = static_cast<uint64_t>(p.numPairs) * 2 * sizeof(int64_t);
  auto scratch = runtime::allocateStreamScratch(mappingBytes, p.stream);
  if (!scratch) return false;
  auto kernel = readyKernel(config.kernelName(), [config] { return compiler::buildCopyBlocks(config); });
  support::Status status = kernel.status();
  // From pageable host memory the driver stages the mapping before returning.
  if (status) status = runtime::copyAsync(*scratch, reinterpret_cast<uint64_t>(p.blockMapping), mappingBytes, p.stream);
  for (size_t r = 0; status && r + 1 < runs.size(); ++r) {
    const runtime::LaunchConfig launch = kernel->launchConfig(
        {static_cast<unsigned>(runs[r + 1] - runs[r]),
         static_cast<unsigned>(compiler::copyBlocksGridY(config, p.blockBytes)), 1},
        p.stream);
    // Parameters in the kernel's order (compiler/kernels/CopyBlocks.h).
    uint64_t src = p.src, dst = p.dst, mapping = *scratch + runs[r] * 2 * sizeof(int64_t);
    int64_t strideFrom = srcStride, strideTo = dstStride, blockBytes = p.blockBytes;
    void* arguments[] = {&src, &dst, &mapping, &strideFrom, &strideTo, &blockBytes};
    status = kernel->loaded->function.launch(launch, arguments);
  }
  const support::Status released = runtime::releaseStreamScratch(*scratch, p.stream);
  if (!status) return status;
  if (!released) return released;
  return true;
}

}  // namespace

support::Status swapBlocks(const SwapBlocksParams& params) {
  auto copies = planSwapBlocks(params);
  if (!copies) return copies.status();
  const int64_t srcStride = params.srcBlockStride == 0 ? params.blockBytes : params.srcBlockStride;
  const int64_t dstStride = params.dstBlockStride == 0 ? params.blockBytes : params.dstBlockStride;
  // A few (merged) copies run at the copy rate; many single blocks go faster as
  // one kernel.
  if (copies->size() > kMostCopiesWithoutKernel) {
    auto onDevice = copyBlocksOnDevice(params, srcStride, dstStride);
    if (!onDevice) return onDevice.status();
    if (*onDevice) return support::Status::ok();
  }
  // Pageable host sources keep one copy each: the driver stages each before
  // the call returns, where a batch could read them later.
  const std::vector<size_t> runs = runtime::isCudaMemory(params.src)
                                       ? independentCopyRuns(*copies, params.src, params.dst)
                                       : std::vector<size_t>{};
  if (runs.empty()) {
    for (const BlockCopy& copy : *copies)
      if (support::Status s = runtime::copyAsync(params.dst + static_cast<uint64_t>(copy.dstOffset),
                                                 params.src + static_cast<uint64_t>(copy.srcOffset),
                                                 static_cast<std::size_t>(copy.bytes), params.stream);
          !s)
        return s;
    return support::Status::ok();
  }
  std::vector<runtime::CopyRange> batch;
  for (size_t r = 0; r + 1 < runs.size(); ++r) {
    batch.clear();
    for (size_t i = runs[r]; i < runs[r + 1]; ++i) {
      const BlockCopy& copy = (*copies)[i];
      batch.push_back({params.dst + static_cast<uint64_t>(copy.dstOffset),
                       params.src + static_cast<uint64_t>(copy.srcOffset), static_cast<std::size_t>(copy.bytes)});
    }
    if (support::Status s = runtime::copyBatchAsync(batch, params.stream); !s) return s;
  }
  return support::Status::ok();
}

}  // namespace attnjit::ops
