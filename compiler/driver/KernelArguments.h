// Launch arguments from an embedding API (C++ facade, C API, Python), checked
// against what the kernel was compiled to assume before anything reaches the
// driver: one argument per parameter, of the right kind, no null pointer,
// `{align = N}` pointers aligned, `{divisibility = N}` integers multiples of N,
// 32-bit integers in range. A violated promise would make the kernel read the
// wrong memory silently; here it is an error that names the parameter.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "support/Diagnostics.h"
#include "ir/IR.h"

namespace attnjit::compiler {

// A kernel parameter's value, stored in the exact width its type needs.
struct PackedParameter {
  alignas(8) unsigned char bytes[8] = {};
};

// `value` converted to `type` (f32, f64, i64; every other scalar as i32).
PackedParameter packParameter(const ir::Type& type, const std::variant<int64_t, double>& value);

struct KernelArgument {
  enum class Kind { Pointer, Integer, Real };
  Kind kind = Kind::Integer;
  uint64_t pointer = 0;  // a device address, for Kind::Pointer
  int64_t integer = 0;   // for Kind::Integer
  double real = 0;       // for Kind::Real

  static KernelArgument devicePointer(uint64_t address) { return {Kind::Pointer, address, 0, 0}; }
  static KernelArgument integerValue(int64_t value) { return {Kind::Integer, 0, value, 0}; }
  static KernelArgument realValue(double value) { return {Kind::Real, 0, 0, value}; }
};

const char* kernelArgumentKindName(KernelArgument::Kind kind);

// A kernel parameter with the promises a launcher must keep (0: none).
struct KernelParameter {
  std::string name;
  ir::Type type;
  int64_t alignBytes = 0;    // {align = N} on a pointer
  int64_t divisibility = 0;  // {divisibility = N} on an integer
  KernelArgument::Kind kind() const;
};

std::vector<KernelParameter> kernelParameters(const ir::Kernel& kernel);

// Arguments packed at the widths the kernel reads, in parameter order.
class PackedArguments {
 public:
  void append(const PackedParameter& value) { values_.push_back(value); }
  size_t size() const { return values_.size(); }
  // What cuLaunchKernel takes: entry i points at parameter i's bytes. Valid
  // until this object changes or dies.
  std::vector<void*> driverPointers();

 private:
  std::vector<PackedParameter> values_;
};

// Checks `arguments` against `parameters` (see the top of the file) and packs
// them. Errors read "<what>: parameter 'name' ...".
support::Expected<PackedArguments> packKernelArguments(const std::string& what,
                                                       const std::vector<KernelParameter>& parameters,
                                                       std::span<const KernelArgument> arguments);

}  // namespace attnjit::compiler
