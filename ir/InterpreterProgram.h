// The interpreter's execution plan and per-program state (internal to the
// interpreter). A kernel is compiled once per launch into blocks of CompiledOps
// whose operands and results are slot indices; every program then runs the plan
// against one reused vector of RuntimeValue slots.
//
// Each op family of ir/Ops.def has an interpret<Family> function (declared below
// from the op table, so a family without one fails to link).
#pragma once

#include <array>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "ir/IR.h"
#include "ir/Interpreter.h"
#include "ir/InterpreterValue.h"

namespace attnjit::ir {

struct CompiledOp {
  const Operation* op = nullptr;
  std::vector<int> operands;  // slot index per operand
  std::vector<int> results;   // slot index per result
  std::vector<int> regions;   // index into CompiledKernel::blocks per region
};

struct CompiledBlock {
  std::vector<int> arguments;  // slot index per block argument
  std::vector<CompiledOp> ops;
};

class ClusterExchange;

struct CompiledKernel {
  std::vector<CompiledBlock> blocks;  // blocks[0] is the kernel body
  int numSlots = 0;
};

class ProgramContext {
 public:
  ProgramContext(const Kernel& kernel, const CompiledKernel& plan, LaunchGrid grid, InterpreterMemory& memory)
      : kernel_(kernel), plan_(plan), grid_(grid), memory_(memory), slots_(plan.numSlots) {}

  const Kernel& kernel() const { return kernel_; }
  LaunchGrid grid() const { return grid_; }
  InterpreterMemory& memory() { return memory_; }
  // This program's index along axis 0..2.
  int64_t programId(int axis) const { return programId_[axis]; }
  void setProgramId(int64_t x, int64_t y, int64_t z) { programId_ = {x, y, z}; }

  // The cluster this program meets at cluster_reduce_* ops, and its rank there
  // (null outside a kernel of clusters).
  ClusterExchange* cluster() const { return cluster_; }
  int clusterRank() const { return clusterRank_; }
  void setCluster(ClusterExchange* cluster, int rank) {
    cluster_ = cluster;
    clusterRank_ = rank;
  }

  // Told each op's results (InterpreterObserverScope); null: none.
  void setObserver(InterpreterObserver* observer) { observer_ = observer; }

  RuntimeValue& slot(int index) { return slots_[index]; }
  RuntimeValue& operand(const CompiledOp& op, size_t i) { return slots_[op.operands[i]]; }
  RuntimeValue& result(const CompiledOp& op, size_t i = 0) { return slots_[op.results[i]]; }

  // Runs the ops of a compiled block in order (its terminator included).
  support::Status runBlock(int blockIndex);
  const CompiledBlock& block(int blockIndex) const { return plan_.blocks[blockIndex]; }

  // An error at the op's location, naming the op and this program.
  support::Status error(const CompiledOp& op, const std::string& message) const;

 private:
  const Kernel& kernel_;
  const CompiledKernel& plan_;
  LaunchGrid grid_;
  InterpreterMemory& memory_;
  std::array<int64_t, 3> programId_{};
  ClusterExchange* cluster_ = nullptr;
  int clusterRank_ = 0;
  InterpreterObserver* observer_ = nullptr;
  std::vector<RuntimeValue> slots_;
};

// Where the programs of one cluster, each on a host thread of its own, meet at a
// cluster_reduce_* op: each publishes its operand, waits for the others, combines
// all of them in rank order, and waits again before its operand may change. A
// cluster whose programs do not all meet (one ended, or failed, while another
// waits) is broken: every waiting program returns, and the one that found it out
// names the cause.
class ClusterExchange {
 public:
  explicit ClusterExchange(int size);
  int size() const { return size_; }
  // The operands published at the current meeting, by rank.
  const RuntimeValue& published(int rank) const { return *published_[static_cast<size_t>(rank)]; }
  void publish(int rank, const RuntimeValue& value) { published_[static_cast<size_t>(rank)] = &value; }
  // Waits until every program of the cluster has called meet() once more; false
  // where the cluster is broken (`cause` then says why, when this program found it).
  bool meet(int rank, std::string& cause);
  // A program's end: `failed` where it ended with an error (which breaks the
  // cluster if another program still waits or comes later).
  void finish(int rank, bool failed);
  // The rank whose status explains a broken cluster: the first to fail or to find
  // the cluster broken; -1 where the cluster did not break.
  int causeRank() const { return causeRank_; }

 private:
  void breakCluster(int rank);
  const int size_;
  std::vector<const RuntimeValue*> published_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int arrived_ = 0;
  int finished_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
  int causeRank_ = -1;
};

#define ATTNJIT_OP(Enum, spelling, Family) support::Status interpret##Family(ProgramContext& ctx, const CompiledOp& op);
#include "ir/Ops.def"

// PTX min.NaN / max.NaN: NaN if either operand is NaN; -0 is below +0.
template <typename T>
T minPropagatingNaN(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}
template <typename T>
T maxPropagatingNaN(T a, T b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<T>::quiet_NaN();
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

// Copies the elements of `from` into `to` (both of the given element class),
// reusing `to`'s capacity.
void copyElements(const RuntimeValue& from, RuntimeValue& to, ElementClass cls);

}  // namespace attnjit::ir
