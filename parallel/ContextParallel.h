// Decode context parallelism over NCCL: N ranks (one process per GPU) each run
// attention over their shard of the KV cache (compiler/ops/ContextParallelShards.h)
// with the LSE output; mergeAcrossRanks all-gathers the N partial outputs and
// LSEs and merges them by LSE (ops::mergePartials) into the result one GPU
// would give for the whole context, on every rank.
//
//   rank 0:  auto id = parallel::createGroupId();     // send id->bytes to the others
//   rank r:  runtime::activatePrimaryContext(r);       // the rank's GPU, current
//            auto group = parallel::ContextParallelGroup::join(id, r, N);
//            ops::pagedAttention(shard params with lse);   // causal = false
//            group->mergeAcrossRanks({... local out/lse, out, workspace, stream});
//
// NCCL is loaded at run time (parallel/NcclLibrary.h). Every call is enqueued on
// the caller's stream without host synchronization and without allocation (the
// gathered partials live in a caller-provided workspace), so a decode step can be
// captured in a CUDA graph. Set NCCL_NVLS_ENABLE=0 where NVLink multicast must
// stay off.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "support/Diagnostics.h"
#include "ir/Types.h"
#include "runtime/Driver.h"

namespace attnjit::parallel {

// The bytes every rank needs to join one group (NCCL's unique id). Rank 0
// creates it and hands it to the others (a pipe, a file, the engine's own
// control channel).
struct GroupId {
  std::array<char, 128> bytes{};
};
support::Expected<GroupId> createGroupId();

struct RankMergeParams {
  ir::ScalarKind dtype = ir::ScalarKind::BF16;  // the outputs: f32, f16 or bf16
  int numHeads = 0;
  int headSize = 0;
  int64_t numTokens = 0;
  // This rank's partial result, contiguous: output [num_tokens, num_heads,
  // head_size] and LSE f32 [num_heads, num_tokens] (natural log; lse_stride_head
  // = num_tokens in the paged-attention call). An empty shard's rows (LSE -inf)
  // weigh nothing, whatever their output holds.
  uint64_t localOutput = 0, localLse = 0;
  // The merged result: output rows with strides (token, head) in elements, and
  // optionally the merged LSE [num_heads, num_tokens] (0 = not written).
  uint64_t output = 0, outputLse = 0;
  int64_t outputStrideToken = 0, outputStrideHead = 0;
  // Scratch for the gathered partials (16-byte aligned), at least
  // mergeAcrossRanksWorkspaceBytes for this call's shape.
  uint64_t workspace = 0, workspaceBytes = 0;
  runtime::StreamHandle stream = nullptr;
};

// Workspace bytes for calls of up to maxTokens tokens on numRanks ranks.
uint64_t mergeAcrossRanksWorkspaceBytes(ir::ScalarKind dtype, int64_t maxTokens, int numHeads, int headSize,
                                        int numRanks);

class ContextParallelGroup {
 public:
  // Joins the group as `rank` of `numRanks` on the device of the calling
  // thread's current CUDA context (collective: returns once every rank joined).
  static support::Expected<std::unique_ptr<ContextParallelGroup>> join(const GroupId& id, int rank, int numRanks);
  ~ContextParallelGroup();
  ContextParallelGroup(const ContextParallelGroup&) = delete;
  ContextParallelGroup& operator=(const ContextParallelGroup&) = delete;

  int rank() const { return rank_; }
  int numRanks() const { return numRanks_; }

  // Collective: every rank calls it with the same shape. Validates the
  // arguments (errors name them) before enqueuing anything.
  support::Status mergeAcrossRanks(const RankMergeParams& params);

 private:
  ContextParallelGroup(void* comm, int rank, int numRanks) : comm_(comm), rank_(rank), numRanks_(numRanks) {}
  void* comm_ = nullptr;  // ncclComm_t
  int rank_ = 0, numRanks_ = 1;
};

}  // namespace attnjit::parallel
