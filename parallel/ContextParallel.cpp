#include "parallel/ContextParallel.h"

#include <cstring>
#include <string>

#include "compiler/ops/CompanionOps.h"
#include "parallel/NcclLibrary.h"

namespace attnjit::parallel {

using ir::ScalarKind;
using support::Status;

namespace {

constexpr uint64_t kAlignment = 16;

uint64_t alignUp(uint64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// Bytes of one rank's partial output and LSE.
struct PartialBytes {
  uint64_t output = 0, lse = 0;
};
PartialBytes partialBytes(ScalarKind dtype, int64_t tokens, int numHeads, int headSize) {
  const uint64_t rows = static_cast<uint64_t>(tokens) * static_cast<uint64_t>(numHeads);
  return {rows * static_cast<uint64_t>(headSize) * (ir::storageBits(dtype) / 8), rows * sizeof(float)};
}

support::Status argumentError(const std::string& message) {
  return support::Status::error({}, "mergeAcrossRanks: " + message);
}

}  // namespace

support::Expected<GroupId> createGroupId() {
  auto nccl = nccl::api();
  if (!nccl) return nccl.status();
  nccl::UniqueId id;
  if (support::Status s = nccl::check((*nccl)->getUniqueId(&id), "ncclGetUniqueId"); !s) return s;
  GroupId group;
  static_assert(sizeof(group.bytes) == sizeof(id.internal));
  std::memcpy(group.bytes.data(), id.internal, sizeof(id.internal));
  return group;
}

uint64_t mergeAcrossRanksWorkspaceBytes(ScalarKind dtype, int64_t maxTokens, int numHeads, int headSize,
                                        int numRanks) {
  if (maxTokens <= 0 || numHeads <= 0 || headSize <= 0 || numRanks <= 0) return 0;
  const PartialBytes one = partialBytes(dtype, maxTokens, numHeads, headSize);
  return alignUp(one.output * static_cast<uint64_t>(numRanks)) + alignUp(one.lse * static_cast<uint64_t>(numRanks));
}

support::Expected<std::unique_ptr<ContextParallelGroup>> ContextParallelGroup::join(const GroupId& id, int rank,
                                                                                int numRanks) {
  if (numRanks < 1 || rank < 0 || rank >= numRanks)
    return support::Status::error({}, "context parallel: rank " + std::to_string(rank) + " is not in [0, " +
                                 std::to_string(numRanks) + ")");
  auto nccl = nccl::api();
  if (!nccl) return nccl.status();
  // NCCL picks the device from the CUDA runtime, which adopts the calling
  // thread's current driver context: the caller's activated primary context.
  if (auto context = runtime::currentOrPrimaryContext(); !context) return context.status();
  nccl::UniqueId ncclId;
  std::memcpy(ncclId.internal, id.bytes.data(), sizeof(ncclId.internal));
  nccl::Comm comm = nullptr;
  if (support::Status s = nccl::check((*nccl)->commInitRank(&comm, numRanks, ncclId, rank), "ncclCommInitRank"); !s)
    return s;
  return std::unique_ptr<ContextParallelGroup>(new ContextParallelGroup(comm, rank, numRanks));
}

ContextParallelGroup::~ContextParallelGroup() {
  if (comm_ == nullptr) return;
  if (auto nccl = nccl::api()) (void)(*nccl)->commDestroy(static_cast<nccl::Comm>(comm_));
}

support::Status ContextParallelGroup::mergeAcrossRanks(const RankMergeParams& p) {
  if (p.numTokens < 0) return argumentError("num_tokens (" + std::to_string(p.numTokens) + ") is negative");
  if (p.numHeads <= 0 || p.headSize <= 0)
    return argumentError("num_heads (" + std::to_string(p.numHeads) + ") and head_size (" +
                         std::to_string(p.headSize) + ") must be positive");
  if (p.numTokens == 0) return support::Status::ok();
  for (auto [pointer, name] : {std::pair{p.localOutput, "local_output"}, std::pair{p.localLse, "local_lse"},
                               std::pair{p.output, "output"}, std::pair{p.workspace, "workspace"}}) {
    if (pointer == 0) return argumentError(std::string(name) + " is null");
    if (pointer % kAlignment != 0) return argumentError(std::string(name) + " is not 16-byte aligned");
  }
  const uint64_t needed = mergeAcrossRanksWorkspaceBytes(p.dtype, p.numTokens, p.numHeads, p.headSize, numRanks_);
  if (p.workspaceBytes < needed)
    return argumentError("workspace too small: " + std::to_string(p.workspaceBytes) + " bytes, " +
                         std::to_string(needed) + " needed for " + std::to_string(p.numTokens) + " tokens on " +
                         std::to_string(numRanks_) + " ranks");
  const PartialBytes one = partialBytes(p.dtype, p.numTokens, p.numHeads, p.headSize);
  const uint64_t gatheredOutput = p.workspace;
  const uint64_t gatheredLse = p.workspace + alignUp(one.output * static_cast<uint64_t>(numRanks_));

  // The merge's arguments are checked before any collective is enqueued, so a
  // bad call fails on every rank alike instead of leaving peers waiting.
  ops::MergePartialsParams merge;
  merge.dtype = p.dtype;
  merge.numHeads = p.numHeads;
  merge.headSize = p.headSize;
  merge.numTokens = p.numTokens;
  merge.numPartials = numRanks_;
  merge.output = p.output;
  merge.outputLse = p.outputLse;
  merge.outputStrideToken = p.outputStrideToken;
  merge.outputStrideHead = p.outputStrideHead;
  merge.partialOutputs = gatheredOutput;
  merge.partialStridePartial = p.numTokens * p.numHeads * p.headSize;
  merge.partialStrideToken = static_cast<int64_t>(p.numHeads) * p.headSize;
  merge.partialStrideHead = p.headSize;
  merge.partialLses = gatheredLse;
  merge.lseStridePartial = p.numTokens * p.numHeads;
  merge.stream = p.stream;
  if (support::Status s = ops::validateMergePartials(merge); !s) return argumentError(s.diagnostic().message);

  auto nccl = nccl::api();
  if (!nccl) return nccl.status();
  const nccl::Api& api = **nccl;
  auto comm = static_cast<nccl::Comm>(comm_);
  // Both gathers in one group: NCCL runs them as one operation. Rank r's bytes
  // land at offset r·count, which is the [N, ...] layout the merge reads.
  if (support::Status s = nccl::check(api.groupStart(), "ncclGroupStart"); !s) return s;
  support::Status gathered = nccl::check(api.allGather(reinterpret_cast<const void*>(p.localOutput),
                                              reinterpret_cast<void*>(gatheredOutput), one.output, nccl::kUint8, comm,
                                              p.stream),
                                "ncclAllGather (outputs)", comm);
  if (gathered)
    gathered = nccl::check(api.allGather(reinterpret_cast<const void*>(p.localLse),
                                         reinterpret_cast<void*>(gatheredLse), one.lse, nccl::kUint8, comm, p.stream),
                           "ncclAllGather (LSEs)", comm);
  support::Status ended = nccl::check(api.groupEnd(), "ncclGroupEnd", comm);
  if (!gathered) return gathered;
  if (!ended) return ended;
  return ops::mergePartials(merge);
}

}  // namespace attnjit::parallel
