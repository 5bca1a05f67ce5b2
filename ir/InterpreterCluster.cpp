// The interpreter's thread-block clusters: the meeting of a cluster's programs
// (each on a host thread of its own, started by interpretKernel) and the
// cluster_reduce_* ops that meet there.
#include "ir/InterpreterProgram.h"

namespace attnjit::ir {

ClusterExchange::ClusterExchange(int size) : size_(size), published_(static_cast<size_t>(size), nullptr) {}

void ClusterExchange::breakCluster(int rank) {
  if (!broken_) causeRank_ = rank;
  broken_ = true;
  changed_.notify_all();
}

namespace {
const char* const kEndedWithoutMeeting =
    "a program of this cluster ended without reaching it (every program of a cluster must reach each cluster op "
    "equally often: control flow uniform across the cluster)";
}  // namespace

bool ClusterExchange::meet(int rank, std::string& cause) {
  std::unique_lock lock(mutex_);
  if (broken_) return false;
  if (finished_ > 0) {
    cause = kEndedWithoutMeeting;
    breakCluster(rank);
    return false;
  }
  const uint64_t generation = generation_;
  if (++arrived_ == size_) {
    arrived_ = 0;
    ++generation_;
    changed_.notify_all();
    return true;
  }
  changed_.wait(lock, [&] { return broken_ || generation_ != generation; });
  if (generation_ != generation) return true;
  // Broken by a program that ended normally while this one waited: the first
  // waiter to wake names it.
  if (causeRank_ < 0) {
    causeRank_ = rank;
    cause = kEndedWithoutMeeting;
  }
  return false;
}

void ClusterExchange::finish(int rank, bool failed) {
  std::lock_guard lock(mutex_);
  ++finished_;
  // Another program waiting at a meeting will never see this one: the cluster
  // cannot meet again. The waiting one names the cause where this one did not fail.
  if (failed) {
    breakCluster(rank);
  } else if (arrived_ > 0 && !broken_) {
    broken_ = true;
    changed_.notify_all();
  }
}

// Both meetings come first: the operands stay published (unchanged) until every
// program has combined them, so the second meeting follows the combination.
support::Status interpretClusterReduce(ProgramContext& ctx, const CompiledOp& op) {
  ClusterExchange* cluster = ctx.cluster();
  if (!cluster) return ctx.error(op, "runs outside a cluster (the kernel's cluster_size is 1)");
  const int rank = ctx.clusterRank();
  cluster->publish(rank, ctx.operand(op, 0));
  std::string cause;
  const auto brokenError = [&] {
    return ctx.error(op, cause.empty() ? std::string("the cluster broke up: another of its programs failed or ended "
                                                     "without reaching this op")
                                       : cause);
  };
  if (!cluster->meet(rank, cause)) return brokenError();
  const bool isSum = op.op->opcode() == Opcode::ClusterReduceSum;
  RuntimeValue& out = ctx.result(op);
  const size_t count = cluster->published(0).floats.size();
  out.floats.resize(count);
  for (size_t i = 0; i < count; ++i) {
    float combined = static_cast<float>(cluster->published(0).floats[i]);
    for (int r = 1; r < cluster->size(); ++r) {
      const float next = static_cast<float>(cluster->published(r).floats[i]);
      combined = isSum ? combined + next : maxPropagatingNaN(combined, next);
    }
    out.floats[i] = combined;
  }
  if (!cluster->meet(rank, cause)) return brokenError();
  return support::Status::ok();
}

}  // namespace attnjit::ir
