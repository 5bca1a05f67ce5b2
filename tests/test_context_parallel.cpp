// Decode context parallelism: the shard planner (CPU), shards simulated on one
// GPU merged by LSE against the float64 reference ([gpu]), and the real
// multi-process NCCL run of examples/context_parallel where two GPUs exist.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <filesystem>
#include <numeric>

#include "compiler/validation/AttentionProblem.h"
#include "compiler/ops/CompanionOps.h"
#include "compiler/ops/ContextParallelShards.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "runtime/DeviceBuffer.h"
#include "test_paths.h"
#include "test_tools.h"

#ifdef ATTNJIT_HAVE_NCCL
#include "parallel/ContextParallel.h"
#endif

using namespace attnjit;
using support::Status;

namespace {

// A batch's logical block tables: sequence s's blocks are numbered from 1000·s.
std::vector<int32_t> numberedTables(const std::vector<int32_t>& seqLens, int blockSize, int64_t stride) {
  std::vector<int32_t> tables(seqLens.size() * stride, -7);
  for (size_t s = 0; s < seqLens.size(); ++s)
    for (int b = 0; b * blockSize < seqLens[s]; ++b) tables[s * stride + b] = static_cast<int32_t>(1000 * s + b);
  return tables;
}

}  // namespace

TEST_CASE("context parallel: shard owners by scheme", "[context_parallel]") {
  using ops::KvShardScheme;
  // 10 blocks on 4 ranks: chunks of 3 (the last rank gets 1), or every 4th.
  std::vector<int> contiguous, roundRobin;
  for (int i = 0; i < 10; ++i) {
    contiguous.push_back(ops::kvShardOwner(KvShardScheme::ContiguousChunks, i, 10, 4));
    roundRobin.push_back(ops::kvShardOwner(KvShardScheme::RoundRobinBlocks, i, 10, 4));
  }
  CHECK(contiguous == std::vector<int>{0, 0, 0, 1, 1, 1, 2, 2, 2, 3});
  CHECK(roundRobin == std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1});
  CHECK(ops::parseKvShardScheme("round_robin").isOk());
  auto bad = ops::parseKvShardScheme("striped");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.diagnostic().message.find("contiguous or round_robin") != std::string::npos);
}

TEST_CASE("context parallel: shards partition every sequence's blocks in order", "[context_parallel]") {
  const int blockSize = 16;
  const std::vector<int32_t> seqLens = {1, 16, 17, 100, 4099, 0, 530};
  const int64_t stride = 300;
  const std::vector<int32_t> tables = numberedTables(seqLens, blockSize, stride);
  for (auto scheme : {ops::KvShardScheme::ContiguousChunks, ops::KvShardScheme::RoundRobinBlocks}) {
    for (int ranks : {1, 2, 3, 8}) {
      INFO(ops::kvShardSchemeName(scheme) << " on " << ranks << " ranks");
      auto shards = ops::shardKvBlockTables(scheme, ranks, blockSize, seqLens, tables, stride);
      REQUIRE(shards.isOk());
      REQUIRE(shards->size() == static_cast<size_t>(ranks));
      for (size_t s = 0; s < seqLens.size(); ++s) {
        const int blocks = (seqLens[s] + blockSize - 1) / blockSize;
        std::vector<int> seen;  // logical block indices, gathered from all ranks
        int tokens = 0;
        for (int r = 0; r < ranks; ++r) {
          const ops::KvShard& shard = (*shards)[r];
          const int len = shard.seqLens[s];
          tokens += len;
          const int used = (len + blockSize - 1) / blockSize;
          REQUIRE(used <= shard.maxBlocksPerSeq);
          int previous = -1;
          for (int b = 0; b < used; ++b) {
            const int logical = shard.blockTables[s * shard.maxBlocksPerSeq + b] - static_cast<int>(1000 * s);
            CHECK(logical > previous);  // logical order within the shard
            CHECK(ops::kvShardOwner(scheme, logical, blocks, ranks) == r);
            // Only the shard's last block may be partial: it must then be the sequence's last.
            if (b + 1 < used) CHECK(logical + 1 < blocks);
            previous = logical;
            seen.push_back(logical);
          }
          // A shard's length is its full blocks plus what the sequence's last block holds.
          const bool holdsLast = std::find(seen.end() - used, seen.end(), blocks - 1) != seen.end();
          const int lastTokens = seqLens[s] - (blocks - 1) * blockSize;
          CHECK(len == (holdsLast && blocks > 0 ? (used - 1) * blockSize + lastTokens : used * blockSize));
        }
        CHECK(tokens == seqLens[s]);
        std::sort(seen.begin(), seen.end());
        std::vector<int> all(blocks);
        std::iota(all.begin(), all.end(), 0);
        CHECK(seen == all);
      }
    }
  }
}

TEST_CASE("context parallel: shard planner rejects bad input with the sequence named", "[context_parallel]") {
  const std::vector<int32_t> tables(20, 0);
  auto tooLong = ops::shardKvBlockTables(ops::KvShardScheme::RoundRobinBlocks, 2, 16, {32, 200}, tables, 10);
  REQUIRE_FALSE(tooLong.isOk());
  CHECK(tooLong.diagnostic().message.find("sequence 1 needs 13 blocks") != std::string::npos);
  auto negative = ops::shardKvBlockTables(ops::KvShardScheme::ContiguousChunks, 2, 16, {5, -1}, tables, 10);
  REQUIRE_FALSE(negative.isOk());
  CHECK(negative.diagnostic().message.find("seq_lens[1]") != std::string::npos);
  auto noRanks = ops::shardKvBlockTables(ops::KvShardScheme::ContiguousChunks, 0, 16, {5}, tables, 10);
  REQUIRE_FALSE(noRanks.isOk());
  CHECK(noRanks.diagnostic().message.find("num_ranks") != std::string::npos);
  auto shortTables = ops::shardKvBlockTables(ops::KvShardScheme::ContiguousChunks, 2, 16, {5, 5, 5}, tables, 10);
  REQUIRE_FALSE(shortTables.isOk());
  CHECK(shortTables.diagnostic().message.find("block_tables holds 20 entries") != std::string::npos);
}

TEST_CASE("context parallel: shards on one GPU merged by LSE match the float64 reference", "[gpu][context_parallel]") {
  if (!tests::gpuPresent()) return;
  REQUIRE(runtime::activatePrimaryContext(0).isOk());
  // Decode batch: one query per sequence after contexts of odd lengths, one
  // shorter than a block (empty shards on every other rank) and one of 0.
  compiler::UnifiedAttentionConfig config;  // bf16, 32/8 heads, D = 128, block 16, causal
  compiler::BatchShape shape;
  shape.queryLens = {1, 1, 1, 1, 1, 1};
  shape.contextLens = {4098, 16, 999, 2599, 0, 529};
  shape.seed = 5;
  auto problem = validation::UnifiedAttentionProblem::create(config, shape);
  REQUIRE(problem.isOk());
  auto& buffers = (*problem)->buffers();
  std::vector<runtime::DeviceBuffer> device;
  for (auto& buffer : buffers) {
    auto d = runtime::DeviceBuffer::allocate(std::max<size_t>(buffer.bytes.size(), 16));
    REQUIRE(d.isOk());
    REQUIRE(d->copyFromHost(buffer.bytes.data(), buffer.bytes.size()).isOk());
    device.push_back(std::move(*d));
  }
  const auto& scalars = (*problem)->scalarArguments();
  auto integer = [&](size_t i) { return std::get<int64_t>(scalars[i]); };
  auto int32s = [](const std::vector<uint8_t>& bytes) {
    std::vector<int32_t> values(bytes.size() / 4);
    std::memcpy(values.data(), bytes.data(), values.size() * 4);
    return values;
  };
  const std::vector<int32_t> tables = int32s(buffers[3].bytes), seqLens = int32s(buffers[4].bytes);
  const int numSeqs = static_cast<int>(seqLens.size());
  const int64_t tokens = numSeqs, heads = config.numQueryHeads, headSize = config.headSize;
  const size_t partialBytes = static_cast<size_t>(tokens * heads * headSize) * 2;

  for (auto scheme : {ops::KvShardScheme::RoundRobinBlocks, ops::KvShardScheme::ContiguousChunks}) {
    for (int ranks : {1, 2, 3, 4}) {
      INFO(ops::kvShardSchemeName(scheme) << " shards on " << ranks << " simulated ranks");
      auto shards = ops::shardKvBlockTables(scheme, ranks, config.blockSize, seqLens, tables, integer(7));
      REQUIRE(shards.isOk());
      auto partials = runtime::DeviceBuffer::allocate(partialBytes * ranks);
      auto lses = runtime::DeviceBuffer::allocate(static_cast<size_t>(tokens * heads) * 4 * ranks);
      REQUIRE((partials.isOk() && lses.isOk()));
      REQUIRE(partials->fill(0xff).isOk());  // NaN: an unwritten partial fails the check
      REQUIRE(lses->fill(0xff).isOk());
      REQUIRE(device[0].copyFromHost(buffers[0].bytes.data(), buffers[0].bytes.size()).isOk());  // poison again
      std::vector<runtime::DeviceBuffer> keepAlive;
      for (int r = 0; r < ranks; ++r) {
        const ops::KvShard& shard = (*shards)[r];
        auto shardTables = runtime::DeviceBuffer::allocate(shard.blockTables.size() * 4);
        auto shardLens = runtime::DeviceBuffer::allocate(std::max<size_t>(shard.seqLens.size() * 4, 16));
        REQUIRE((shardTables.isOk() && shardLens.isOk()));
        REQUIRE(shardTables->copyFromHost(shard.blockTables.data(), shard.blockTables.size() * 4).isOk());
        REQUIRE(shardLens->copyFromHost(shard.seqLens.data(), shard.seqLens.size() * 4).isOk());
        ops::PagedAttentionParams p;
        p.dtype = config.dtype;
        p.numQueryHeads = config.numQueryHeads;
        p.numKvHeads = config.numKvHeads;
        p.headSize = config.headSize;
        p.blockSize = config.blockSize;
        p.causal = false;  // every key of a shard precedes the decode query
        p.numSeqs = numSeqs;
        p.numTokens = tokens;
        p.maxQueryLen = 1;
        p.maxSeqLen = std::max(1, *std::max_element(shard.seqLens.begin(), shard.seqLens.end()));
        p.numSms = 132;
        p.scale = static_cast<float>(std::get<double>(scalars[0]));
        p.out = partials->address() + partialBytes * r;
        p.q = device[1].address();
        p.kvCache = device[2].address();
        p.blockTables = shardTables->address();
        p.seqLens = shardLens->address();
        p.cuSeqlensQ = device[5].address();
        p.lse = lses->address() + static_cast<uint64_t>(tokens * heads) * 4 * r;
        p.lseStrideHead = tokens;
        p.qStrideToken = integer(3);
        p.qStrideHead = integer(4);
        p.oStrideToken = heads * headSize;
        p.oStrideHead = headSize;
        p.blockTableStride = shard.maxBlocksPerSeq;
        p.kvStrideBlock = integer(8);
        p.kvStrideKv = integer(9);
        p.kvStrideToken = integer(10);
        p.kvStrideHead = integer(11);
        // Odd ranks split their shard's keys (split-KV with the LSE), even ones run 2D.
        std::optional<runtime::DeviceBuffer> workspace;
        if (r % 2 == 1) {
          const uint64_t bytes = ops::pagedAttentionWorkspaceBytes(tokens, p.numQueryHeads, p.headSize, p.maxSeqLen).value();
          auto w = runtime::DeviceBuffer::allocate(bytes);
          REQUIRE(w.isOk());
          p.workspace = w->address();
          p.workspaceBytes = bytes;
          workspace = std::move(*w);
        }
        support::Status launched = ops::pagedAttention(p);
        INFO((launched ? std::string() : launched.diagnostic().str()));
        REQUIRE(launched.isOk());
        REQUIRE(runtime::synchronizeContext().isOk());
        keepAlive.push_back(std::move(*shardTables));
        keepAlive.push_back(std::move(*shardLens));
        if (workspace) keepAlive.push_back(std::move(*workspace));
      }
      ops::MergePartialsParams m;
      m.dtype = config.dtype;
      m.numHeads = static_cast<int>(heads);
      m.headSize = static_cast<int>(headSize);
      m.numPartials = ranks;
      m.numTokens = tokens;
      m.output = device[0].address();
      m.partialOutputs = partials->address();
      m.partialLses = lses->address();
      m.outputStrideToken = integer(5);
      m.outputStrideHead = integer(6);
      m.partialStridePartial = tokens * heads * headSize;
      m.partialStrideToken = heads * headSize;
      m.partialStrideHead = headSize;
      m.lseStridePartial = tokens * heads;
      support::Status merged = ops::mergePartials(m);
      INFO((merged ? std::string() : merged.diagnostic().str()));
      REQUIRE(merged.isOk());
      REQUIRE(runtime::synchronizeContext().isOk());
      std::vector<uint8_t> output(buffers[0].bytes.size());
      REQUIRE(device[0].copyToHost(output.data(), output.size()).isOk());
      validation::AttentionRunResult result;
      (*problem)->check(output, result);
      INFO("max abs error " << result.maxAbsError << " (tolerance " << result.tolerance << "); " << result.detail);
      CHECK(result.passed);
    }
  }
}

#ifdef ATTNJIT_HAVE_NCCL
TEST_CASE("context parallel: joining checks the rank before touching NCCL", "[context_parallel]") {
  parallel::GroupId id;
  auto group = parallel::ContextParallelGroup::join(id, 2, 2);
  REQUIRE_FALSE(group.isOk());
  CHECK(group.diagnostic().message.find("rank 2 is not in [0, 2)") != std::string::npos);
  CHECK(parallel::mergeAcrossRanksWorkspaceBytes(ir::ScalarKind::BF16, 8, 32, 128, 2) ==
        2 * 8 * 32 * 128 * 2 + 2 * 8 * 32 * 4);
  CHECK(parallel::mergeAcrossRanksWorkspaceBytes(ir::ScalarKind::BF16, 0, 32, 128, 2) == 0);
}

TEST_CASE("context parallel: two GPUs over NCCL match one GPU and the float64 reference (paged and MLA)",
          "[gpu][nccl]") {
  if (!tests::gpuPresent()) return;
  const std::string example =
      std::filesystem::path(tests::cliPath()).parent_path().append("attnjit_context_parallel").string();
  // Counting in a child: this process may already hold a CUDA context, and the
  // example forks its ranks before touching CUDA.
  int listedCode = 0;
  const std::string listed = tests::runShell("nvidia-smi -L 2>/dev/null | grep -c '^GPU'", &listedCode);
  if (std::atoi(listed.c_str()) < 2) {
    tests::skipTest("the NCCL context-parallel run needs two GPUs (nvidia-smi lists " + listed + ")");
    return;
  }
  for (const char* model : {"paged", "mla"}) {
    for (const char* scheme : {"round_robin", "contiguous"}) {
      int exitCode = 0;
      const std::string output = tests::runShell(
          example + " --ranks 2 --mode check --model " + model + " --scheme " + scheme, &exitCode);
      INFO(output);
      CHECK(exitCode == 0);
      CHECK(output.find("PASSED") != std::string::npos);
    }
  }
}
#endif
