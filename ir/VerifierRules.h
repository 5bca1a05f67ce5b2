// Internal to the verifier: the per-family rule functions and the helpers they
// share. Every message a rule produces is located at the op and starts with the
// op's name in quotes ("'dot': ..."), so a user reading the IR finds the culprit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "ir/IR.h"

// Returns the failure of `expr` from the enclosing rule, if it failed.
#define ATTNJIT_VERIFY(expr)                                                  \
  do {                                                                        \
    if (::attnjit::support::Status verifyStatus_ = (expr); !verifyStatus_.isOk()) \
      return verifyStatus_;                                                   \
  } while (0)

namespace attnjit::ir {

// One rule per op family of Ops.def. They are declared from the op table, so a
// family whose rule is missing fails to link.
#define ATTNJIT_OP(Enum, spelling, Family) support::Status verify##Family(const Operation& op, const Kernel& kernel);
#include "ir/Ops.def"

// "'<op>': message", located at the op.
support::Status opError(const Operation& op, const std::string& message);

// "[16,64]"
std::string shapeStr(const std::vector<int64_t>& shape);
// "(f32, tile<16xf32>)"
std::string typeListStr(const std::vector<Type>& types);
std::vector<Type> operandTypes(const Operation& op);
std::vector<Type> resultTypes(const Operation& op);
// "operand 2 ('acc')" or "operand 2" when the value has no name.
std::string operandStr(const Operation& op, size_t index);

// Why `t` is not a well-formed type (tile rank outside 1..3, an extent < 1, a
// layout on a non-tile), or an empty string when it is.
std::string typeDefect(const Type& t);

// Size limits that keep a kernel's compile bounded: codegen unrolls a tile into
// the registers of each thread (32 · num_warps threads share it), so both the
// tile and its per-thread share are capped.
inline constexpr int64_t kMaxTileElements = int64_t{1} << 20;
inline constexpr int64_t kMaxTileElementsPerThread = 1024;

// ---- shape of the op ----
// No operand is null (IR built by hand can hold one).
support::Status checkOperandsPresent(const Operation& op);
support::Status checkOperandCount(const Operation& op, size_t count);
support::Status checkOperandCount(const Operation& op, size_t min, size_t max);
support::Status checkResultCount(const Operation& op, size_t count);
support::Status checkRegionCount(const Operation& op, size_t count);

// ---- attributes ----
// Every attribute of op is in `known`; the first unknown one is named.
support::Status checkKnownAttributes(const Operation& op, std::initializer_list<std::string_view> known);
// The attribute exists and has the stated kind; `out` receives its value.
support::Status requireIntAttr(const Operation& op, std::string_view key, int64_t& out);
support::Status requireStringAttr(const Operation& op, std::string_view key, std::string& out);
support::Status requireIntListAttr(const Operation& op, std::string_view key, std::vector<int64_t>& out);
// Optional string attribute: `out` is left untouched when absent.
support::Status optionalStringAttr(const Operation& op, std::string_view key, std::string& out);

// ---- types ----
// Numeric: an integer other than i1, or a float; never a pointer.
bool isNumeric(const Type& t);
// The result type must equal `expected` exactly (layout included).
support::Status checkResultType(const Operation& op, const Type& expected, const std::string& why);
// The result type must equal `expected` in shape and element; its layout is free
// (ops such as reduce or reshape give their result a layout of their own).
support::Status checkResultShapeAndElement(const Operation& op, const Type& expected, const std::string& why);
// Operand `index` is a tile (rank >= 1).
support::Status checkTileOperand(const Operation& op, size_t index);

// yield `yieldOp` passes values of exactly the result types of `parent` (a for or if).
support::Status checkYieldMatchesParent(const Operation& yieldOp, const Operation& parent);
// Region `index` of op is non-empty and ends with a yield.
support::Status checkRegionEndsWithYield(const Operation& op, size_t index, const char* regionName);

}  // namespace attnjit::ir
