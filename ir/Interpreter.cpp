// interpretKernel: argument binding, the execution plan, the grid loop, op
// dispatch and structured control flow (for, if, yield, return).
#include "ir/Interpreter.h"

#include <chrono>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>

#include "ir/InterpreterProgram.h"
#include "ir/KernelAttributes.h"
#include "ir/Numeric.h"
#include "ir/Verifier.h"

namespace attnjit::ir {

namespace {

// Assigns a slot to every value of the kernel and flattens its blocks.
class PlanBuilder {
 public:
  CompiledKernel build(const Kernel& kernel) {
    compileBlock(kernel.body());
    plan_.numSlots = static_cast<int>(slots_.size());
    return std::move(plan_);
  }

 private:
  int slotOf(const Value* v) {
    auto [it, inserted] = slots_.try_emplace(v, static_cast<int>(slots_.size()));
    return it->second;
  }

  int compileBlock(const Block& block) {
    const int index = static_cast<int>(plan_.blocks.size());
    plan_.blocks.emplace_back();
    CompiledBlock compiled;
    for (const auto& arg : block.arguments()) compiled.arguments.push_back(slotOf(arg.get()));
    for (const auto& op : block.operations()) {
      CompiledOp step;
      step.op = op.get();
      for (const Value* v : op->operands()) step.operands.push_back(slotOf(v));
      for (const auto& r : op->results()) step.results.push_back(slotOf(r.get()));
      for (const auto& region : op->regions()) step.regions.push_back(compileBlock(*region));
      compiled.ops.push_back(std::move(step));
    }
    plan_.blocks[index] = std::move(compiled);
    return index;
  }

  CompiledKernel plan_;
  std::unordered_map<const Value*, int> slots_;
};

const char* argumentKindName(const KernelArgument& arg) {
  if (std::holds_alternative<PointerArg>(arg)) return "a pointer";
  if (std::holds_alternative<int64_t>(arg)) return "an integer";
  return "a float";
}

// Stores the argument into the parameter's slot, converted to its type.
support::Status bindArgument(const Kernel& kernel, size_t index, const KernelArgument& arg, RuntimeValue& slot) {
  const Value* param = kernel.parameter(index);
  const Type& type = param->type();
  auto mismatch = [&](const char* expected) {
    return support::Status::error(kernel.location(), "argument " + std::to_string(index) + " ('" + param->name() +
                                                "') of kernel '" + kernel.name() + "' expects " + expected + " (" +
                                                type.str() + "), got " + argumentKindName(arg));
  };
  if (type.isTile()) return mismatch("a tile, which cannot be passed as an argument");
  switch (elementClass(type)) {
    case ElementClass::Pointer: {
      const auto* pointer = std::get_if<PointerArg>(&arg);
      if (!pointer) return mismatch("a pointer");
      const uint64_t address = pointer->address;
      slot.addresses.assign(1, addressesNibbles(type.scalarKind()) ? address * 2 : address);
      return support::Status::ok();
    }
    case ElementClass::Int: {
      const auto* integer = std::get_if<int64_t>(&arg);
      if (!integer) return mismatch("an integer");
      slot.ints.assign(1, wrapInt(*integer, type.scalarKind()));
      return support::Status::ok();
    }
    case ElementClass::Float: {
      const auto* real = std::get_if<double>(&arg);
      if (!real) return mismatch("a float");
      slot.floats.assign(1, roundToFloatKind(*real, type.scalarKind()));
      return support::Status::ok();
    }
  }
  return support::Status::ok();
}

support::Status checkGrid(const Kernel& kernel, LaunchGrid grid) {
  const int64_t extents[] = {grid.x, grid.y, grid.z};
  for (int axis = 0; axis < 3; ++axis) {
    // program_id is an i32, so every extent must fit one.
    if (extents[axis] < 0 || extents[axis] > std::numeric_limits<int32_t>::max())
      return support::Status::error(kernel.location(), "grid extent " + std::to_string(extents[axis]) + " along axis " +
                                                  std::to_string(axis) + " of kernel '" + kernel.name() +
                                                  "' is out of range [0, 2^31)");
  }
  const int64_t clusterSize = kernelAttribute(kernel, KernelAttribute::ClusterSize);
  if (grid.z % clusterSize != 0)
    return support::Status::error(kernel.location(), "grid extent " + std::to_string(grid.z) + " along axis 2 of kernel '" +
                                                         kernel.name() + "' is not a multiple of its cluster_size (" +
                                                         std::to_string(clusterSize) + ")");
  return support::Status::ok();
}

}  // namespace

support::Status ProgramContext::runBlock(int blockIndex) {
  for (const CompiledOp& op : plan_.blocks[blockIndex].ops) {
    support::Status status;
    switch (op.op->opcode()) {
#define ATTNJIT_OP(Enum, spelling, Family) \
  case Opcode::Enum:                       \
    status = interpret##Family(*this, op); \
    break;
#include "ir/Ops.def"
    }
    if (!status.isOk()) return status;
    if (observer_ != nullptr)
      for (size_t i = 0; i < op.results.size(); ++i) observer_->valueComputed(*op.op, i, slots_[op.results[i]]);
  }
  return support::Status::ok();
}

support::Status ProgramContext::error(const CompiledOp& op, const std::string& message) const {
  return support::Status::error(op.op->location(), std::string(op.op->name()) + ": " + message + " (program (" +
                                              std::to_string(programId_[0]) + ", " + std::to_string(programId_[1]) +
                                              ", " + std::to_string(programId_[2]) + "))");
}

void copyElements(const RuntimeValue& from, RuntimeValue& to, ElementClass cls) {
  switch (cls) {
    case ElementClass::Float:
      to.floats.assign(from.floats.begin(), from.floats.end());
      return;
    case ElementClass::Int:
      to.ints.assign(from.ints.begin(), from.ints.end());
      return;
    case ElementClass::Pointer:
      to.addresses.assign(from.addresses.begin(), from.addresses.end());
      return;
  }
}

support::Status interpretFor(ProgramContext& ctx, const CompiledOp& op) {
  const ScalarKind ivKind = op.op->operand(0)->type().scalarKind();
  const int64_t lo = signedValue(ctx.operand(op, 0).ints.at(0), ivKind);
  const int64_t hi = signedValue(ctx.operand(op, 1).ints.at(0), ivKind);
  const int64_t step = signedValue(ctx.operand(op, 2).ints.at(0), ivKind);
  if (step <= 0) return ctx.error(op, "for step must be positive, got " + std::to_string(step));
  uint64_t tripCount = 0;
  if (lo < hi) {
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    const auto stride = static_cast<uint64_t>(step);
    tripCount = span / stride + (span % stride != 0 ? 1 : 0);
  }
  constexpr uint64_t kMaxTripCount = uint64_t{1} << 31;
  if (tripCount > kMaxTripCount)
    return ctx.error(op,
                     "loop of " + std::to_string(tripCount) + " iterations exceeds the interpreter's limit of 2^31");

  const CompiledBlock& body = ctx.block(op.regions.at(0));
  const CompiledOp& yield = body.ops.back();
  const size_t numIterArgs = op.results.size();
  std::vector<ElementClass> classes(numIterArgs);
  for (size_t i = 0; i < numIterArgs; ++i) {
    classes[i] = elementClass(op.op->result(i)->type());
    copyElements(ctx.operand(op, 3 + i), ctx.slot(body.arguments[1 + i]), classes[i]);
  }
  RuntimeValue& inductionVar = ctx.slot(body.arguments[0]);
  for (uint64_t trip = 0; trip < tripCount; ++trip) {
    // Below hi, so it fits the induction variable's type.
    inductionVar.ints.assign(1, wrapInt(lo + static_cast<int64_t>(trip) * step, ivKind));
    support::Status status = ctx.runBlock(op.regions[0]);
    if (!status.isOk()) return status;
    // Yielded values may be the iter args themselves (in any order), so they go
    // through the result slots before becoming the next iteration's iter args.
    for (size_t i = 0; i < numIterArgs; ++i) copyElements(ctx.operand(yield, i), ctx.result(op, i), classes[i]);
    for (size_t i = 0; i < numIterArgs; ++i) std::swap(ctx.result(op, i), ctx.slot(body.arguments[1 + i]));
  }
  for (size_t i = 0; i < numIterArgs; ++i)
    copyElements(ctx.slot(body.arguments[1 + i]), ctx.result(op, i), classes[i]);
  return support::Status::ok();
}

support::Status interpretIf(ProgramContext& ctx, const CompiledOp& op) {
  const bool condition = ctx.operand(op, 0).ints.at(0) != 0;
  const int region = op.regions.at(condition ? 0 : 1);
  support::Status status = ctx.runBlock(region);
  if (!status.isOk()) return status;
  const CompiledOp& yield = ctx.block(region).ops.back();
  for (size_t i = 0; i < op.results.size(); ++i)
    copyElements(ctx.operand(yield, i), ctx.result(op, i), elementClass(op.op->result(i)->type()));
  return support::Status::ok();
}

// The parent op (for, if) reads the yielded values once its region has run.
support::Status interpretYield(ProgramContext&, const CompiledOp&) { return support::Status::ok(); }

// `return` is the last op of the body, so reaching it ends the program.
support::Status interpretReturn(ProgramContext&, const CompiledOp&) { return support::Status::ok(); }

support::Status interpretKernel(const Kernel& kernel, LaunchGrid grid, const std::vector<KernelArgument>& args,
                       InterpreterMemory& memory) {
  if (support::Status verified = verifyKernel(kernel); !verified.isOk()) return verified;
  if (support::Status gridOk = checkGrid(kernel, grid); !gridOk.isOk()) return gridOk;
  if (args.size() != kernel.numParameters())
    return support::Status::error(kernel.location(), "kernel '" + kernel.name() + "' takes " +
                                                std::to_string(kernel.numParameters()) + " arguments, got " +
                                                std::to_string(args.size()));

  const CompiledKernel plan = PlanBuilder().build(kernel);
  InterpreterObserver* observer = InterpreterObserverScope::current();
  if (observer != nullptr) observer->kernelStarts(kernel);
  // One context per program of a cluster (one outside clusters), its arguments bound.
  const int clusterSize = static_cast<int>(kernelAttribute(kernel, KernelAttribute::ClusterSize));
  std::vector<std::unique_ptr<ProgramContext>> contexts;
  for (int rank = 0; rank < clusterSize; ++rank) {
    contexts.push_back(std::make_unique<ProgramContext>(kernel, plan, grid, memory));
    contexts.back()->setObserver(observer);
    const CompiledBlock& body = plan.blocks[0];
    for (size_t i = 0; i < args.size(); ++i) {
      support::Status bound = bindArgument(kernel, i, args[i], contexts.back()->slot(body.arguments[i]));
      if (!bound.isOk()) return bound;
    }
  }
  ProgramContext& ctx = *contexts[0];
  // A cluster's programs run together, each on a thread of its own, and meet at
  // its cluster_reduce_* ops; the first program to fail (or to find that the
  // others cannot meet it) gives the error.
  const auto runCluster = [&](int64_t x, int64_t y, int64_t firstZ) -> support::Status {
    ClusterExchange exchange(clusterSize);
    std::vector<support::Status> statuses(static_cast<size_t>(clusterSize));
    std::vector<std::thread> threads;
    for (int rank = 0; rank < clusterSize; ++rank)
      threads.emplace_back([&, rank] {
        ProgramContext& program = *contexts[static_cast<size_t>(rank)];
        program.setProgramId(x, y, firstZ + rank);
        program.setCluster(&exchange, rank);
        statuses[static_cast<size_t>(rank)] = program.runBlock(0);
        exchange.finish(rank, !statuses[static_cast<size_t>(rank)].isOk());
      });
    for (std::thread& thread : threads) thread.join();
    if (exchange.causeRank() >= 0) return statuses[static_cast<size_t>(exchange.causeRank())];
    for (const support::Status& status : statuses)
      if (!status.isOk()) return status;
    return support::Status::ok();
  };
  const InterpreterProgressScope::Report* report = InterpreterProgressScope::current();
  int64_t total = 0;  // saturates: three extents below 2^31 can overflow a product
  if (__builtin_mul_overflow(grid.x, grid.y, &total) || __builtin_mul_overflow(total, grid.z, &total))
    total = std::numeric_limits<int64_t>::max();
  int64_t done = 0;
  bool reported = false;
  auto lastReport = std::chrono::steady_clock::now();
  for (int64_t z = 0; z < grid.z; z += clusterSize)
    for (int64_t y = 0; y < grid.y; ++y)
      for (int64_t x = 0; x < grid.x; ++x) {
        support::Status status;
        if (clusterSize == 1) {
          ctx.setProgramId(x, y, z);
          status = ctx.runBlock(0);
        } else {
          status = runCluster(x, y, z);
        }
        if (!status.isOk()) return status;
        done += clusterSize;
        if (report == nullptr) continue;
        const auto now = std::chrono::steady_clock::now();
        if (now - lastReport >= std::chrono::seconds(1)) {
          (*report)(kernel.name(), done, total);
          lastReport = now;
          reported = true;
        }
      }
  if (reported) (*report)(kernel.name(), total, total);
  return support::Status::ok();
}

namespace {
thread_local const InterpreterProgressScope::Report* currentProgressReport = nullptr;
}  // namespace

InterpreterProgressScope::InterpreterProgressScope(Report report)
    : report_(std::move(report)), previous_(currentProgressReport) {
  currentProgressReport = &report_;
}

InterpreterProgressScope::~InterpreterProgressScope() { currentProgressReport = previous_; }

const InterpreterProgressScope::Report* InterpreterProgressScope::current() { return currentProgressReport; }

namespace {
thread_local InterpreterObserver* currentObserver = nullptr;
}  // namespace

InterpreterObserverScope::InterpreterObserverScope(InterpreterObserver& observer) : previous_(currentObserver) {
  currentObserver = &observer;
}

InterpreterObserverScope::~InterpreterObserverScope() { currentObserver = previous_; }

InterpreterObserver* InterpreterObserverScope::current() { return currentObserver; }

}  // namespace attnjit::ir
