// The interpreter's representation of one SSA value at run time (internal to the
// interpreter). The element type is the Value's static type; the runtime value
// holds only the elements, row-major, in exactly one of three arrays chosen by
// that type (a scalar is a one-element value):
//
//   floats     every element already rounded to the element kind, so the double
//              holds the exact value the GPU register would (f16/bf16/fp8/f32 are
//              all exactly representable as double)
//   ints       every element wrapped to the kind's width and sign-extended; i1 is 0
//              or 1 (its signed value is 0 or -1, see signedValue)
//   addresses  pointer elements: InterpreterMemory addresses in bytes, except for
//              pointers to i4, which count nibbles (byte address * 2 + nibble)
//
// The arrays keep their capacity when a slot is overwritten (next loop iteration,
// next program), so steady-state execution does not allocate.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/Types.h"

namespace attnjit::ir {

enum class ElementClass : uint8_t { Float, Int, Pointer };

inline ElementClass elementClass(const Type& type) {
  if (type.hasPointerElements()) return ElementClass::Pointer;
  return isFloat(type.scalarKind()) ? ElementClass::Float : ElementClass::Int;
}

struct RuntimeValue {
  std::vector<double> floats;
  std::vector<int64_t> ints;
  std::vector<uint64_t> addresses;
};

// The two's complement value of an integer element: i1's stored 1 is -1 for the
// signed ops (comparison, min/max, division), as in LLVM.
inline int64_t signedValue(int64_t stored, ScalarKind kind) { return kind == ScalarKind::I1 ? -stored : stored; }

// wrapInt (ir/Numeric.h) with the kind's width looked up once, for inner loops.
class IntWrapper {
 public:
  explicit IntWrapper(ScalarKind kind)
      : isBool_(kind == ScalarKind::I1), unusedBits_(64 - valueBits(kind)) {}
  int64_t operator()(int64_t x) const {
    if (isBool_) return x & 1;
    return static_cast<int64_t>(static_cast<uint64_t>(x) << unusedBits_) >> unusedBits_;
  }

 private:
  bool isBool_;
  int unusedBits_;
};

// Pointers to i4 address nibbles; every other pointee is addressed in bytes.
inline bool addressesNibbles(ScalarKind pointee) { return pointee == ScalarKind::I4; }

}  // namespace attnjit::ir
