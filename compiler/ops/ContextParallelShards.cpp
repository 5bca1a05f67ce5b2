#include "compiler/ops/ContextParallelShards.h"

#include <algorithm>

namespace attnjit::ops {

using support::Status;

std::string kvShardSchemeName(KvShardScheme scheme) {
  return scheme == KvShardScheme::ContiguousChunks ? "contiguous" : "round_robin";
}

support::Expected<KvShardScheme> parseKvShardScheme(const std::string& name) {
  if (name == "contiguous") return KvShardScheme::ContiguousChunks;
  if (name == "round_robin") return KvShardScheme::RoundRobinBlocks;
  return support::Status::error({}, "unknown KV shard scheme '" + name + "' (expected contiguous or round_robin)");
}

int kvShardOwner(KvShardScheme scheme, int blockIndex, int numBlocks, int numRanks) {
  if (scheme == KvShardScheme::RoundRobinBlocks) return blockIndex % numRanks;
  const int chunk = (numBlocks + numRanks - 1) / numRanks;
  return blockIndex / chunk;
}

support::Expected<std::vector<KvShard>> shardKvBlockTables(KvShardScheme scheme, int numRanks, int blockSize,
                                                      const std::vector<int32_t>& seqLens,
                                                      const std::vector<int32_t>& blockTables,
                                                      int64_t blockTableStride) {
  if (numRanks < 1)
    return support::Status::error({}, "context parallel: num_ranks (" + std::to_string(numRanks) + ") must be >= 1");
  if (blockSize < 1)
    return support::Status::error({},
                                  "context parallel: block_size (" + std::to_string(blockSize) + ") must be positive");
  const int64_t numSeqs = static_cast<int64_t>(seqLens.size());
  if (blockTableStride < 1 || static_cast<int64_t>(blockTables.size()) < numSeqs * blockTableStride)
    return support::Status::error({}, "context parallel: block_tables holds " + std::to_string(blockTables.size()) +
                                 " entries, fewer than num_seqs (" + std::to_string(numSeqs) +
                                 ") x block_table_stride (" + std::to_string(blockTableStride) + ")");
  // Blocks per rank of the longest sequence bound every shard's row.
  int maxShardBlocks = 0;
  for (int64_t s = 0; s < numSeqs; ++s) {
    const int seqLen = seqLens[s];
    if (seqLen < 0)
      return support::Status::error(
          {}, "context parallel: seq_lens[" + std::to_string(s) + "] = " + std::to_string(seqLen) + " is negative");
    const int64_t blocks = (static_cast<int64_t>(seqLen) + blockSize - 1) / blockSize;
    if (blocks > blockTableStride)
      return support::Status::error({}, "context parallel: sequence " + std::to_string(s) + " needs " +
                                            std::to_string(blocks) + " blocks (seq_len " + std::to_string(seqLen) +
                                            ", block_size " + std::to_string(blockSize) +
                                            ") but its block-table row has " + std::to_string(blockTableStride));
    std::vector<int> perRank(numRanks, 0);
    for (int i = 0; i < blocks; ++i) ++perRank[kvShardOwner(scheme, i, static_cast<int>(blocks), numRanks)];
    maxShardBlocks = std::max(maxShardBlocks, *std::max_element(perRank.begin(), perRank.end()));
  }
  const int rowLength = std::max(1, maxShardBlocks);
  std::vector<KvShard> shards(numRanks);
  for (KvShard& shard : shards) {
    shard.maxBlocksPerSeq = rowLength;
    shard.blockTables.assign(numSeqs * rowLength, 0);
    shard.seqLens.assign(numSeqs, 0);
  }
  for (int64_t s = 0; s < numSeqs; ++s) {
    const int seqLen = seqLens[s];
    const int blocks = (seqLen + blockSize - 1) / blockSize;
    std::vector<int> filled(numRanks, 0);
    for (int i = 0; i < blocks; ++i) {
      KvShard& shard = shards[kvShardOwner(scheme, i, blocks, numRanks)];
      const int tokens = std::min(blockSize, seqLen - i * blockSize);
      const int rank = static_cast<int>(&shard - shards.data());
      shard.blockTables[s * rowLength + filled[rank]++] = blockTables[s * blockTableStride + i];
      shard.seqLens[s] += tokens;
    }
  }
  return shards;
}

}  // namespace attnjit::ops
