// The interpreter's execution plan and per-program state (internal to the
// interpreter). A kernel is compiled once per launch into blocks of CompiledOps
// whose operands and results are slot indices; every program then runs the plan
// against one reused vector of RuntimeValue slots.
//
// Each op family of ir/Ops.def has an interpret<Family> function (declared below
// from the op table, so a family without one fails to link).
#pragma once

#include <array>
#include <cstdint>
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
  std::vector<RuntimeValue> slots_;
};

#define ATTNJIT_OP(Enum, spelling, Family) support::Status interpret##Family(ProgramContext& ctx, const CompiledOp& op);
#include "ir/Ops.def"

// Copies the elements of `from` into `to` (both of the given element class),
// reusing `to`'s capacity.
void copyElements(const RuntimeValue& from, RuntimeValue& to, ElementClass cls);

}  // namespace attnjit::ir
