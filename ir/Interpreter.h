// The CPU interpreter: runs a kernel over its whole grid on host buffers with the
// numeric semantics of the generated GPU code (our TRITON_INTERPRET). Programs run
// one after another; within a program, tile ops run elementwise in order.
//
// Pointers are virtual addresses handed out by InterpreterMemory; every load and
// store is bounds-checked against the buffer the address falls in, so an
// out-of-bounds access is reported as an error naming the op and buffer, not a
// crash.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "ir/IR.h"

namespace attnjit::ir {

class InterpreterMemory {
 public:
  // Makes [data, data + bytes) visible to kernels; returns its base address.
  // The memory must stay alive while kernels run.
  uint64_t map(void* data, size_t bytes, std::string label);

  struct Region {
    uint8_t* data;
    size_t bytes;
    std::string label;
  };
  // The region containing [address, address + size), or nullptr.
  const Region* find(uint64_t address, size_t size) const;
  // Text naming the buffer and offset of an address, for error messages.
  std::string describe(uint64_t address) const;

 private:
  std::vector<Region> regions_;  // region i lives at address (i + 1) << 40
};

struct PointerArg {
  uint64_t address;
};
// One kernel argument: a pointer (an address from InterpreterMemory), an integer
// or a float, matched to the parameter's type.
using KernelArgument = std::variant<PointerArg, int64_t, double>;

struct LaunchGrid {
  int64_t x = 1, y = 1, z = 1;
};

// Runs every program of the grid. Errors (argument mismatch, out-of-bounds access,
// division of a pointer...) name the op's location and the program id.
support::Status interpretKernel(const Kernel& kernel, LaunchGrid grid, const std::vector<KernelArgument>& args,
                       InterpreterMemory& memory);

// Progress over the grid for callers whose runs take long (the CLI's `run
// --interpret` prints it). While a scope lives, interpretKernel on the same thread
// calls `report(kernel name, programs done, programs in the grid)` about once a
// second, and once more at the end of a grid it has reported on. Scopes nest: the
// innermost reports.
class InterpreterProgressScope {
 public:
  using Report = std::function<void(const std::string& kernel, int64_t done, int64_t total)>;
  explicit InterpreterProgressScope(Report report);
  ~InterpreterProgressScope();
  InterpreterProgressScope(const InterpreterProgressScope&) = delete;
  InterpreterProgressScope& operator=(const InterpreterProgressScope&) = delete;

  static const Report* current();

 private:
  Report report_;
  const Report* previous_;
};

struct RuntimeValue;

// Every value the interpreter computes, for checks of what the compiler claims
// about them (tests: the axis facts codegen relies on). While a scope lives,
// interpretKernel on the same thread calls kernelStarts before a kernel's grid
// and valueComputed after each op for each of its results, from the thread
// running the program (a cluster's programs run on threads of their own, so
// valueComputed must be safe to call from several). The value's elements are
// row-major (ir/InterpreterValue.h). Scopes nest: the innermost observes.
class InterpreterObserver {
 public:
  virtual ~InterpreterObserver() = default;
  virtual void kernelStarts(const Kernel& kernel) = 0;
  virtual void valueComputed(const Operation& op, size_t result, const RuntimeValue& value) = 0;
};

class InterpreterObserverScope {
 public:
  explicit InterpreterObserverScope(InterpreterObserver& observer);
  ~InterpreterObserverScope();
  InterpreterObserverScope(const InterpreterObserverScope&) = delete;
  InterpreterObserverScope& operator=(const InterpreterObserverScope&) = delete;

  static InterpreterObserver* current();

 private:
  InterpreterObserver* previous_;
};

}  // namespace attnjit::ir
