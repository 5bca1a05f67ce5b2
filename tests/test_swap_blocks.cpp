// swap_blocks (vLLM's swap_blocks and copy_blocks): the copy plan (runs merged
// only where stream order is kept), the argument checks, the C entry points, and
// copies on the GPU host to device, device to host and inside one cache, against
// a byte-for-byte emulation of the pairs applied one at a time.
#include <catch2/catch.hpp>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnjit/attnjit.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/kernels/CopyBlocks.h"
#include "compiler/ops/SwapBlocks.h"
#include "ir/Interpreter.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Stream.h"
#include "tests/test_tools.h"

using namespace attnjit;
using ops::BlockCopy;
using ops::SwapBlocksParams;

namespace {

SwapBlocksParams denseParams(const std::vector<int64_t>& mapping, int64_t blockBytes = 100) {
  SwapBlocksParams p;
  p.blockBytes = blockBytes;
  p.srcNumBlocks = 16;
  p.dstNumBlocks = 16;
  p.src = 0x100000;
  p.dst = 0x900000;
  p.blockMapping = mapping.data();
  p.numPairs = static_cast<int64_t>(mapping.size() / 2);
  return p;
}

std::vector<BlockCopy> plan(const SwapBlocksParams& p) {
  auto copies = ops::planSwapBlocks(p);
  if (!copies) FAIL(copies.diagnostic().str());
  return *copies;
}

std::string message(const SwapBlocksParams& p) {
  support::Status s = ops::validateSwapBlocks(p);
  return s ? std::string("ok") : s.diagnostic().message;
}

// The pairs applied one at a time to host images of the two caches (the same
// image when src is dst).
void emulate(const std::vector<int64_t>& mapping, const std::vector<uint8_t>& src, std::vector<uint8_t>& dst,
             bool sameCache, int64_t blockBytes, int64_t srcStride, int64_t dstStride) {
  for (size_t i = 0; i + 1 < mapping.size(); i += 2) {
    const uint8_t* from = (sameCache ? dst.data() : src.data()) + mapping[i] * srcStride;
    std::vector<uint8_t> block(from, from + blockBytes);
    std::memcpy(dst.data() + mapping[i + 1] * dstStride, block.data(), static_cast<size_t>(blockBytes));
  }
}

std::vector<uint8_t> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng() & 0xFF);
  return bytes;
}

}  // namespace

TEST_CASE("swap_blocks: consecutive pairs become one copy, gaps and turns start another", "[swap_blocks]") {
  const std::vector<int64_t> mapping{3, 0, 4, 1, 5, 2, 9, 7, 10, 8, 2, 9, 1, 10};
  CHECK(plan(denseParams(mapping)) ==
        std::vector<BlockCopy>{{300, 0, 300}, {900, 700, 200}, {200, 900, 100}, {100, 1000, 100}});
}

TEST_CASE("swap_blocks: inside one cache, a run never reads what it writes", "[swap_blocks]") {
  // 0 -> 1, 1 -> 2: block 2 must receive the old block 0 (through block 1), so
  // the two pairs stay two copies; 5 -> 9, 6 -> 10 merge (the ranges stay apart).
  const std::vector<int64_t> mapping{0, 1, 1, 2, 5, 9, 6, 10};
  SwapBlocksParams p = denseParams(mapping);
  p.dst = p.src;
  CHECK(plan(p) == std::vector<BlockCopy>{{0, 100, 100}, {100, 200, 100}, {500, 900, 200}});
  // A block onto itself copies nothing and ends the run before it.
  const std::vector<int64_t> self{3, 3, 4, 4, 7, 2, 8, 3};
  p.blockMapping = self.data();
  p.numPairs = 4;
  CHECK(plan(p) == std::vector<BlockCopy>{{700, 200, 200}});
}

TEST_CASE("swap_blocks: copies batch into runs that need no order among themselves", "[swap_blocks]") {
  auto runs = [](const std::vector<BlockCopy>& copies, uint64_t src, uint64_t dst) {
    return ops::independentCopyRuns(copies, src, dst);
  };
  // Separate caches, distinct destinations: one run whatever the sources.
  const std::vector<BlockCopy> scattered{{0, 500, 100}, {900, 0, 100}, {0, 200, 100}, {300, 800, 200}};
  CHECK(runs(scattered, 0x1000, 0x9000) == std::vector<size_t>{0, 4});
  // The same destination twice: the later copy must land last.
  const std::vector<BlockCopy> rewrite{{0, 500, 100}, {200, 100, 100}, {300, 550, 100}};
  CHECK(runs(rewrite, 0x1000, 0x9000) == std::vector<size_t>{0, 2, 3});
  // Inside one cache (offsets in blocks of 100): 1 -> 2 reads what 0 -> 1
  // wrote, so it starts a run; 5 -> 9 and 6 -> 3 join it (they touch nothing
  // it writes); 3 -> 7 reads the block 6 -> 3 wrote and starts another.
  const std::vector<BlockCopy> chain{{0, 100, 100}, {100, 200, 100}, {500, 900, 100}, {600, 300, 100},
                                     {300, 700, 100}};
  CHECK(runs(chain, 0x1000, 0x1000) == std::vector<size_t>{0, 1, 4, 5});
  // Writing a block an earlier copy of the run reads: 2 -> 5 then 8 -> 2.
  const std::vector<BlockCopy> overwriteSource{{200, 500, 100}, {800, 200, 100}};
  CHECK(runs(overwriteSource, 0x1000, 0x1000) == std::vector<size_t>{0, 1, 2});
  // Merged runs of several blocks are ranges: a copy inside one conflicts.
  const std::vector<BlockCopy> merged{{0, 1000, 400}, {1200, 1300, 100}, {2000, 3000, 100}};
  CHECK(runs(merged, 0x1000, 0x1000) == std::vector<size_t>{0, 1, 3});
  CHECK(runs({}, 0, 0) == std::vector<size_t>{0});
}

TEST_CASE("copy_blocks kernel: pairs of strided blocks on the interpreter, and ptxas", "[swap_blocks]") {
  // Blocks of 1000 bytes at strides 1040 (src) and 1008 (dst); the chunk is
  // smaller than a block, so the last chunk of each block is masked.
  compiler::CopyBlocksConfig config;
  config.chunkBytes = 256;
  config.alignment = 8;
  CHECK(config.kernelName() == "copy_blocks_c256_a8");
  auto kernel = compiler::buildCopyBlocks(config);
  REQUIRE(kernel);
  constexpr int64_t kBlock = 1000, kSrcStride = 1040, kDstStride = 1008, kBlocks = 6;
  std::vector<uint8_t> src = randomBytes(kSrcStride * kBlocks, 3), dst(kDstStride * kBlocks, 0xEE);
  std::vector<int64_t> mapping{4, 0, 0, 5, 2, 2, 5, 3};
  std::vector<uint8_t> expected = dst;
  emulate(mapping, src, expected, false, kBlock, kSrcStride, kDstStride);
  ir::InterpreterMemory memory;
  const uint64_t srcAddress = memory.map(src.data(), src.size(), "src");
  const uint64_t dstAddress = memory.map(dst.data(), dst.size(), "dst");
  const uint64_t mappingAddress = memory.map(mapping.data(), mapping.size() * sizeof(int64_t), "block_mapping");
  const ir::LaunchGrid grid{static_cast<int64_t>(mapping.size() / 2), compiler::copyBlocksGridY(config, kBlock), 1};
  CHECK(grid.y == 4);
  const support::Status run = ir::interpretKernel(
      **kernel, grid,
      {ir::PointerArg{srcAddress}, ir::PointerArg{dstAddress}, ir::PointerArg{mappingAddress}, kSrcStride, kDstStride,
       kBlock},
      memory);
  INFO((run ? std::string() : run.diagnostic().str()));
  REQUIRE(run);
  CHECK(dst == expected);  // gaps between destination blocks untouched

  // Every alignment assembles; 16-byte blocks move in 16-byte vectors.
  for (int alignment : {1, 2, 4, 8, 16}) {
    config = compiler::CopyBlocksConfig{};
    config.alignment = alignment;
    auto built = compiler::buildCopyBlocks(config);
    REQUIRE(built);
    auto compiled = compiler::compileKernel(**built, compiler::CompileOptions{});
    REQUIRE(compiled);
    if (alignment == 16) CHECK(compiled->ptx.find("ld.global.v4.b32") != std::string::npos);
    tests::checkAssembles(compiled->ptx, "sm_90a");
  }
  config.chunkBytes = 100;
  CHECK(config.validate().diagnostic().message == "chunk_bytes (100) must be a power of two between 256 and 65536");
}

TEST_CASE("swap_blocks: strided blocks copy one block at a time", "[swap_blocks]") {
  const std::vector<int64_t> mapping{0, 0, 1, 1, 2, 2};
  SwapBlocksParams p = denseParams(mapping);
  p.srcBlockStride = 256;
  CHECK(plan(p) == std::vector<BlockCopy>{{0, 0, 100}, {256, 100, 100}, {512, 200, 100}});
  p.srcBlockStride = 0;
  p.dstBlockStride = 100;  // equal to block_bytes: dense
  CHECK(plan(p) == std::vector<BlockCopy>{{0, 0, 300}});
}

TEST_CASE("swap_blocks: argument errors name the pair and the block", "[swap_blocks]") {
  std::vector<int64_t> mapping{0, 1, 16, 2};
  SwapBlocksParams p = denseParams(mapping);
  CHECK(message(p) == "swap_blocks: block_mapping[1]: source block 16 is outside src's 16 blocks");
  mapping = {0, 1, 2, -1};
  CHECK(message(p) == "swap_blocks: block_mapping[1]: destination block -1 is outside dst's 16 blocks");
  mapping = {0, 1, 2, 3};
  CHECK(message(p) == "ok");
  p.blockBytes = 0;
  CHECK(message(p) == "swap_blocks: block_bytes (0) must be positive");
  p.blockBytes = 100;
  p.dstBlockStride = 64;
  CHECK(message(p).find("must be at least block_bytes (100)") != std::string::npos);
  p.dstBlockStride = 0;
  p.blockMapping = nullptr;
  CHECK(message(p) == "swap_blocks: block_mapping is null with 2 pairs");
  p.blockMapping = mapping.data();
  p.src = 0;
  CHECK(message(p) == "swap_blocks: src is null");
  p.src = 0x100000;
  p.srcNumBlocks = int64_t{1} << 62;
  CHECK(message(p).find("exceeds the 64-bit address space") != std::string::npos);
  p.srcNumBlocks = 16;
  // Two views of one allocation whose blocks overlap.
  p.dst = p.src + 50;
  mapping = {0, 0};
  p.numPairs = 1;
  CHECK(message(p) == "swap_blocks: block_mapping[0]: source block 0 and destination block 0 overlap in memory");
  p.numPairs = 0;  // nothing to copy: nothing else to check
  p.src = 0;
  CHECK(message(p) == "ok");
}

TEST_CASE("swap_blocks through the C API checks its struct", "[swap_blocks][capi]") {
  attnjit_jit* jit = nullptr;
  REQUIRE(attnjit_jit_create(nullptr, &jit) == ATTNJIT_OK);
  attnjit_swap_blocks_params params;
  attnjit_swap_blocks_params_init(&params);
  const int64_t mapping[] = {0, 3};
  params.block_bytes = 64;
  params.src_num_blocks = 4;
  params.dst_num_blocks = 2;
  params.src = 0x1000;
  params.dst = 0x2000;
  params.block_mapping = mapping;
  params.num_pairs = 1;
  CHECK(attnjit_swap_blocks_validate(jit, &params) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnjit_last_error_message()).find("destination block 3 is outside dst's 2 blocks") !=
        std::string::npos);
  params.dst_num_blocks = 4;
  CHECK(attnjit_swap_blocks_validate(jit, &params) == ATTNJIT_OK);
  params.num_pairs = 0;
  CHECK(attnjit_swap_blocks(jit, &params) == ATTNJIT_OK);  // nothing to copy: no driver needed
  attnjit_jit_destroy(jit);
}

TEST_CASE("swap_blocks on the GPU: host to device, device to host, inside one cache", "[gpu][swap_blocks]") {
  if (!tests::gpuPresent()) return;
  REQUIRE(runtime::activatePrimaryContext(0).isOk());
  constexpr int64_t kBlock = 1000, kBlocks = 12;
  const std::vector<uint8_t> host = randomBytes(kBlock * kBlocks, 5);
  auto device = runtime::DeviceBuffer::allocate(kBlock * kBlocks);
  REQUIRE(device);
  REQUIRE(device->fill(0xAB).isOk());
  std::vector<uint8_t> expected(kBlock * kBlocks, 0xAB);

  // Host to device, with a run of three and single blocks.
  const std::vector<int64_t> swapIn{11, 0, 1, 2, 2, 3, 3, 4, 0, 9};
  SwapBlocksParams p;
  p.blockBytes = kBlock;
  p.srcNumBlocks = p.dstNumBlocks = kBlocks;
  p.src = reinterpret_cast<uint64_t>(host.data());
  p.dst = device->address();
  p.blockMapping = swapIn.data();
  p.numPairs = static_cast<int64_t>(swapIn.size() / 2);
  REQUIRE(ops::swapBlocks(p).isOk());
  emulate(swapIn, host, expected, false, kBlock, kBlock, kBlock);
  std::vector<uint8_t> back(kBlock * kBlocks);
  REQUIRE(runtime::synchronizeStream(nullptr).isOk());
  REQUIRE(device->copyToHost(back.data(), back.size()).isOk());
  CHECK(back == expected);

  // Inside the device cache: a chain (0 -> 1 -> 2 carries block 0 twice) and a run.
  const std::vector<int64_t> copyOnWrite{9, 10, 10, 11, 2, 5, 3, 6, 4, 7};
  p.src = p.dst = device->address();
  p.blockMapping = copyOnWrite.data();
  p.numPairs = static_cast<int64_t>(copyOnWrite.size() / 2);
  REQUIRE(ops::swapBlocks(p).isOk());
  emulate(copyOnWrite, expected, expected, true, kBlock, kBlock, kBlock);
  REQUIRE(runtime::synchronizeStream(nullptr).isOk());
  REQUIRE(device->copyToHost(back.data(), back.size()).isOk());
  CHECK(back == expected);

  // Device to host into strided host blocks (a block and a 24-byte gap each).
  constexpr int64_t kHostStride = kBlock + 24;
  std::vector<uint8_t> swapped(kHostStride * 4, 0x5C);
  std::vector<uint8_t> swappedExpected = swapped;
  const std::vector<int64_t> swapOut{3, 0, 4, 1, 11, 3};
  p.src = device->address();
  p.dst = reinterpret_cast<uint64_t>(swapped.data());
  p.dstNumBlocks = 4;
  p.dstBlockStride = kHostStride;
  p.blockMapping = swapOut.data();
  p.numPairs = 3;
  REQUIRE(ops::swapBlocks(p).isOk());
  REQUIRE(runtime::synchronizeStream(nullptr).isOk());
  emulate(swapOut, expected, swappedExpected, false, kBlock, kBlock, kHostStride);
  CHECK(swapped == swappedExpected);
}

TEST_CASE("swap_blocks on the GPU: batched copies on a stream keep the list's order", "[gpu][swap_blocks]") {
  if (!tests::gpuPresent()) return;
  REQUIRE(runtime::activatePrimaryContext(0).isOk());
  auto stream = runtime::Stream::create();
  REQUIRE(stream);
  constexpr int64_t kBlock = 4096, kBlocks = 64;
  const std::vector<uint8_t> host = randomBytes(kBlock * kBlocks, 9);
  auto device = runtime::DeviceBuffer::allocate(kBlock * kBlocks);
  REQUIRE(device);
  REQUIRE(device->fill(0x3C).isOk());
  std::vector<uint8_t> expected(kBlock * kBlocks, 0x3C), back(kBlock * kBlocks);
  SwapBlocksParams p;
  p.blockBytes = kBlock;
  p.srcNumBlocks = p.dstNumBlocks = kBlocks;
  p.stream = stream->handle();

  // Host to device: every block, scattered (one batch of 64 copies).
  std::vector<int64_t> swapIn;
  for (int64_t b = 0; b < kBlocks; ++b) {
    swapIn.push_back(b);
    swapIn.push_back((b * 37 + 11) % kBlocks);
  }
  p.src = reinterpret_cast<uint64_t>(host.data());
  p.dst = device->address();
  p.blockMapping = swapIn.data();
  p.numPairs = kBlocks;
  REQUIRE(ops::swapBlocks(p).isOk());
  emulate(swapIn, host, expected, false, kBlock, kBlock, kBlock);
  REQUIRE(stream->synchronize().isOk());
  REQUIRE(device->copyToHost(back.data(), back.size()).isOk());
  CHECK(back == expected);

  // Inside the cache: scattered copy-on-write pairs with chains, a rewritten
  // destination and a source overwritten later, against the sequential order.
  const std::vector<int64_t> copyOnWrite{1, 40, 2, 41, 40, 42, 3, 43, 43, 1, 5, 44, 6, 44, 7, 45, 2, 7, 9, 46};
  p.src = p.dst = device->address();
  p.blockMapping = copyOnWrite.data();
  p.numPairs = static_cast<int64_t>(copyOnWrite.size() / 2);
  REQUIRE(ops::swapBlocks(p).isOk());
  emulate(copyOnWrite, expected, expected, true, kBlock, kBlock, kBlock);
  REQUIRE(stream->synchronize().isOk());
  REQUIRE(device->copyToHost(back.data(), back.size()).isOk());
  CHECK(back == expected);

  // The legacy default stream (the batch detours through a stream of the
  // runtime's own): the fill before it and the copy back after it keep their order.
  REQUIRE(device->fill(0x11).isOk());
  std::fill(expected.begin(), expected.end(), uint8_t{0x11});
  std::vector<int64_t> scattered;
  for (int64_t b = 0; b < 24; ++b) {
    scattered.push_back(b);
    scattered.push_back(63 - b);
  }
  const std::vector<uint8_t> marks = randomBytes(kBlock * 24, 13);
  REQUIRE(runtime::copyAsync(device->address(), reinterpret_cast<uint64_t>(marks.data()), marks.size(), nullptr).isOk());
  std::copy(marks.begin(), marks.end(), expected.begin());
  p.stream = nullptr;
  p.blockMapping = scattered.data();
  p.numPairs = 24;
  REQUIRE(ops::swapBlocks(p).isOk());
  emulate(scattered, expected, expected, true, kBlock, kBlock, kBlock);
  REQUIRE(runtime::synchronizeStream(nullptr).isOk());
  REQUIRE(device->copyToHost(back.data(), back.size()).isOk());
  CHECK(back == expected);
}
