// Decode context parallelism: which rank holds which KV blocks of a sequence.
//
// When one GPU cannot hold or serve a long context, each of N ranks keeps a shard
// of every sequence's paged KV cache. A decode step then runs on each rank over
// its shard (paged attention with the LSE output), the N partial outputs and
// LSEs are gathered, and merged by LSE (compiler/kernels/MergePartials.h) into
// the result one GPU would give for the whole context.
//
// Sharding works on whole cache blocks, so a rank's shard of a sequence is itself
// a paged sequence: its block-table row lists the rank's blocks in logical order,
// and its seq_len is the number of tokens in them. Only a sequence's last block
// can be partial, and it is the last of its owner's blocks in both schemes, so
// every shard is a prefix of full blocks plus at most one partial block.
//
// Attention on a shard is bidirectional (causal = false): a decode query comes
// after every cached key, so causal masking would hide nothing, and a shard's
// positions are not the sequence's positions. Features that depend on absolute
// positions (sliding window, ALiBi) or that must count once (sinks) are not
// sharded this way; the context-parallel helper refuses them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "support/Diagnostics.h"

namespace attnjit::ops {

enum class KvShardScheme {
  // Rank r holds logical blocks [r·c, (r+1)·c) with c = ceil(blocks / ranks):
  // a rank serves a contiguous range of positions (what a prefill that writes
  // its own chunk produces).
  ContiguousChunks,
  // Rank r holds logical blocks r, r + N, r + 2N, ...: every rank's shard grows
  // by one block every N blocks, so decode work stays balanced as the context
  // grows.
  RoundRobinBlocks,
};

// "contiguous" or "round_robin", and back; the error lists the names.
std::string kvShardSchemeName(KvShardScheme scheme);
support::Expected<KvShardScheme> parseKvShardScheme(const std::string& name);

// The rank that holds logical block `blockIndex` of a sequence of `numBlocks`
// blocks (0 <= blockIndex < numBlocks, numRanks >= 1).
int kvShardOwner(KvShardScheme scheme, int blockIndex, int numBlocks, int numRanks);

// One rank's view of a batch: a block table (num_seqs rows of maxBlocksPerSeq
// entries, row stride maxBlocksPerSeq, unused entries 0) and seq_lens.
struct KvShard {
  int maxBlocksPerSeq = 0;
  std::vector<int32_t> blockTables;
  std::vector<int32_t> seqLens;
};

// Splits a batch's block tables among numRanks ranks. blockTables holds num_seqs
// rows of blockTableStride entries, of which the first ceil(seq_len / blockSize)
// are used; the entries are copied, so the shards index the same physical cache
// (one device simulating N ranks) — an engine with a cache per rank renumbers
// each shard's blocks into its own pool. Errors name the sequence.
support::Expected<std::vector<KvShard>> shardKvBlockTables(KvShardScheme scheme, int numRanks, int blockSize,
                                                      const std::vector<int32_t>& seqLens,
                                                      const std::vector<int32_t>& blockTables,
                                                      int64_t blockTableStride);

}  // namespace attnjit::ops
