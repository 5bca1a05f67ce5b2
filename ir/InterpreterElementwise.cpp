// Elementwise ops: binary and unary arithmetic, comparison, selection, cast and
// bitcast. Float arithmetic follows the GPU: f32 in float, f16/bf16/fp8 in float
// rounded to the element kind, f64 in double; integers wrap to their width.
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "ir/InterpreterProgram.h"
#include "ir/Numeric.h"

namespace attnjit::ir {

namespace {

// exp2 and exp in f32 arithmetic flush results below the smallest normal f32 to
// +0, as the GPU's ex2.approx.ftz does (ir/Ops.def); f64 keeps them.
template <typename T>
T flushSubnormalF32(T r) {
  if constexpr (std::is_same_v<T, float>) return std::fabs(r) < std::numeric_limits<float>::min() ? T{0} : r;
  return r;
}

// Applies f elementwise in the arithmetic of `kind`: double for f64, float
// otherwise, rounded back to the kind for f16/bf16/fp8. f is a generic lambda so
// the same source serves float and double.
template <typename F>
void mapFloats(const std::vector<double>& a, const std::vector<double>& b, std::vector<double>& out, ScalarKind kind,
               F f) {
  const size_t n = a.size();
  ATTNJIT_CHECK(b.size() == n, "elementwise operands of different sizes");
  out.resize(n);
  if (kind == ScalarKind::F64) {
    for (size_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
  } else if (kind == ScalarKind::F32) {
    for (size_t i = 0; i < n; ++i) out[i] = f(static_cast<float>(a[i]), static_cast<float>(b[i]));
  } else {
    for (size_t i = 0; i < n; ++i)
      out[i] = roundToFloatKind(f(static_cast<float>(a[i]), static_cast<float>(b[i])), kind);
  }
}

template <typename F>
void mapFloats(const std::vector<double>& a, std::vector<double>& out, ScalarKind kind, F f) {
  const size_t n = a.size();
  out.resize(n);
  if (kind == ScalarKind::F64) {
    for (size_t i = 0; i < n; ++i) out[i] = f(a[i]);
  } else if (kind == ScalarKind::F32) {
    for (size_t i = 0; i < n; ++i) out[i] = f(static_cast<float>(a[i]));
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = roundToFloatKind(f(static_cast<float>(a[i])), kind);
  }
}

// Applies f to the signed values of the operands and wraps the result.
template <typename F>
void mapInts(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>& out, ScalarKind kind,
             F f) {
  const size_t n = a.size();
  ATTNJIT_CHECK(b.size() == n, "elementwise operands of different sizes");
  out.resize(n);
  const IntWrapper wrap(kind);
  if (kind == ScalarKind::I1) {
    for (size_t i = 0; i < n; ++i) out[i] = wrap(f(signedValue(a[i], kind), signedValue(b[i], kind)));
  } else {
    for (size_t i = 0; i < n; ++i) out[i] = wrap(f(a[i], b[i]));
  }
}

int64_t wrappingAdd(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
int64_t wrappingSub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}
int64_t wrappingMul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

support::Status floatBinary(ProgramContext& ctx, const CompiledOp& op, ScalarKind kind) {
  const auto& a = ctx.operand(op, 0).floats;
  const auto& b = ctx.operand(op, 1).floats;
  auto& out = ctx.result(op).floats;
  switch (op.op->opcode()) {
    case Opcode::Add:
      mapFloats(a, b, out, kind, [](auto x, auto y) { return x + y; });
      return support::Status::ok();
    case Opcode::Sub:
      mapFloats(a, b, out, kind, [](auto x, auto y) { return x - y; });
      return support::Status::ok();
    case Opcode::Mul:
      mapFloats(a, b, out, kind, [](auto x, auto y) { return x * y; });
      return support::Status::ok();
    case Opcode::Div:
      mapFloats(a, b, out, kind, [](auto x, auto y) { return x / y; });
      return support::Status::ok();
    case Opcode::Rem:
      mapFloats(a, b, out, kind, [](auto x, auto y) { return std::fmod(x, y); });
      return support::Status::ok();
    case Opcode::Min:
      mapFloats(a, b, out, kind, [](auto x, auto y) { return minPropagatingNaN(x, y); });
      return support::Status::ok();
    case Opcode::Max:
      mapFloats(a, b, out, kind, [](auto x, auto y) { return maxPropagatingNaN(x, y); });
      return support::Status::ok();
    default:
      return ctx.error(op, std::string("is not defined on float operands (") + scalarName(kind) + ")");
  }
}

support::Status intBinary(ProgramContext& ctx, const CompiledOp& op, ScalarKind kind) {
  const auto& a = ctx.operand(op, 0).ints;
  const auto& b = ctx.operand(op, 1).ints;
  auto& out = ctx.result(op).ints;
  const int bits = valueBits(kind);
  switch (op.op->opcode()) {
    case Opcode::Add:
      mapInts(a, b, out, kind, wrappingAdd);
      break;
    case Opcode::Sub:
      mapInts(a, b, out, kind, wrappingSub);
      break;
    case Opcode::Mul:
      mapInts(a, b, out, kind, wrappingMul);
      break;
    case Opcode::Div:
      // Division by zero gives 0 here (undefined on the GPU); INT_MIN / -1 wraps.
      mapInts(a, b, out, kind, [](int64_t x, int64_t y) -> int64_t {
        if (y == 0) return 0;
        if (y == -1) return wrappingSub(0, x);
        return x / y;
      });
      break;
    case Opcode::Rem:
      mapInts(a, b, out, kind, [](int64_t x, int64_t y) -> int64_t {
        if (y == 0 || y == -1) return 0;
        return x % y;
      });
      break;
    case Opcode::Min:
      mapInts(a, b, out, kind, [](int64_t x, int64_t y) { return x < y ? x : y; });
      break;
    case Opcode::Max:
      mapInts(a, b, out, kind, [](int64_t x, int64_t y) { return x > y ? x : y; });
      break;
    case Opcode::And:
      mapInts(a, b, out, kind, [](int64_t x, int64_t y) { return x & y; });
      break;
    case Opcode::Or:
      mapInts(a, b, out, kind, [](int64_t x, int64_t y) { return x | y; });
      break;
    case Opcode::Xor:
      mapInts(a, b, out, kind, [](int64_t x, int64_t y) { return x ^ y; });
      break;
    case Opcode::Shl:
      // The amount is taken as unsigned: anything outside [0, bits) shifts all out.
      mapInts(a, b, out, kind, [bits](int64_t x, int64_t amount) -> int64_t {
        if (amount < 0 || amount >= bits) return 0;
        return static_cast<int64_t>(static_cast<uint64_t>(x) << amount);
      });
      break;
    case Opcode::Shr:
      mapInts(a, b, out, kind, [bits](int64_t x, int64_t amount) -> int64_t {
        if (amount < 0 || amount >= bits) return x < 0 ? -1 : 0;
        return x >> amount;
      });
      break;
    default:
      return ctx.error(op, "is not a binary op");
  }
  return support::Status::ok();
}

}  // namespace

support::Status interpretBinary(ProgramContext& ctx, const CompiledOp& op) {
  const Type& type = op.op->result(0)->type();
  switch (elementClass(type)) {
    case ElementClass::Float:
      return floatBinary(ctx, op, type.scalarKind());
    case ElementClass::Int:
      return intBinary(ctx, op, type.scalarKind());
    case ElementClass::Pointer:
      break;
  }
  return ctx.error(op, "is not defined on pointers (use addptr)");
}

support::Status interpretUnary(ProgramContext& ctx, const CompiledOp& op) {
  const Type& type = op.op->result(0)->type();
  const ScalarKind kind = type.scalarKind();
  const Opcode code = op.op->opcode();
  if (elementClass(type) == ElementClass::Int) {
    if (code != Opcode::Neg && code != Opcode::Abs) return ctx.error(op, "requires float operands");
    const auto& a = ctx.operand(op, 0).ints;
    auto& out = ctx.result(op).ints;
    out.resize(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const int64_t x = signedValue(a[i], kind);
      out[i] = wrapInt(code == Opcode::Abs && x >= 0 ? x : wrappingSub(0, x), kind);
    }
    return support::Status::ok();
  }
  if (elementClass(type) == ElementClass::Pointer) return ctx.error(op, "is not defined on pointers");
  const auto& a = ctx.operand(op, 0).floats;
  auto& out = ctx.result(op).floats;
  // Computed in float (double for f64) with the correctly rounded std:: functions.
  switch (code) {
    case Opcode::Neg:
      mapFloats(a, out, kind, [](auto x) { return -x; });
      break;
    case Opcode::Abs:
      mapFloats(a, out, kind, [](auto x) { return std::fabs(x); });
      break;
    case Opcode::Exp2:
      mapFloats(a, out, kind, [](auto x) { return flushSubnormalF32(std::exp2(x)); });
      break;
    case Opcode::Log2:
      mapFloats(a, out, kind, [](auto x) { return std::log2(x); });
      break;
    case Opcode::Exp:
      mapFloats(a, out, kind, [](auto x) { return flushSubnormalF32(std::exp(x)); });
      break;
    case Opcode::Log:
      mapFloats(a, out, kind, [](auto x) { return std::log(x); });
      break;
    case Opcode::Sqrt:
      mapFloats(a, out, kind, [](auto x) { return std::sqrt(x); });
      break;
    case Opcode::Rsqrt:
      mapFloats(a, out, kind, [](auto x) { return decltype(x){1} / std::sqrt(x); });
      break;
    case Opcode::Tanh:
      mapFloats(a, out, kind, [](auto x) { return std::tanh(x); });
      break;
    default:
      return ctx.error(op, "is not a unary op");
  }
  return support::Status::ok();
}

namespace {

template <typename T>
bool compare(CmpPredicate pred, T a, T b) {
  switch (pred) {
    case CmpPredicate::Eq:
      return a == b;
    case CmpPredicate::Ne:
      return a != b;
    case CmpPredicate::Lt:
      return a < b;
    case CmpPredicate::Le:
      return a <= b;
    case CmpPredicate::Gt:
      return a > b;
    case CmpPredicate::Ge:
      return a >= b;
  }
  return false;
}

}  // namespace

support::Status interpretCompare(ProgramContext& ctx, const CompiledOp& op) {
  CmpPredicate pred{};
  if (!parseCmpPredicate(op.op->attrs().getString("pred"), pred))
    return ctx.error(op, "unknown predicate '" + op.op->attrs().getString("pred") + "'");
  const Type& operandType = op.op->operand(0)->type();
  const ScalarKind kind = operandType.scalarKind();
  const RuntimeValue& a = ctx.operand(op, 0);
  const RuntimeValue& b = ctx.operand(op, 1);
  auto& out = ctx.result(op).ints;
  // Floats compare ordered (C++ semantics: NaN makes all but != false); integers
  // signed; pointers by address.
  switch (elementClass(operandType)) {
    case ElementClass::Float:
      out.resize(a.floats.size());
      for (size_t i = 0; i < out.size(); ++i) out[i] = compare(pred, a.floats[i], b.floats.at(i));
      break;
    case ElementClass::Int:
      out.resize(a.ints.size());
      for (size_t i = 0; i < out.size(); ++i)
        out[i] = compare(pred, signedValue(a.ints[i], kind), signedValue(b.ints.at(i), kind));
      break;
    case ElementClass::Pointer:
      out.resize(a.addresses.size());
      for (size_t i = 0; i < out.size(); ++i) out[i] = compare(pred, a.addresses[i], b.addresses.at(i));
      break;
  }
  return support::Status::ok();
}

namespace {

template <typename T>
void selectElements(const std::vector<int64_t>& cond, const std::vector<T>& a, const std::vector<T>& b,
                    std::vector<T>& out) {
  const size_t n = a.size();
  ATTNJIT_CHECK(b.size() == n && (cond.size() == n || cond.size() == 1), "select operands of different sizes");
  out.resize(n);
  const bool uniform = cond.size() == 1;
  for (size_t i = 0; i < n; ++i) out[i] = cond[uniform ? 0 : i] ? a[i] : b[i];
}

}  // namespace

support::Status interpretSelect(ProgramContext& ctx, const CompiledOp& op) {
  const auto& cond = ctx.operand(op, 0).ints;
  const RuntimeValue& a = ctx.operand(op, 1);
  const RuntimeValue& b = ctx.operand(op, 2);
  RuntimeValue& out = ctx.result(op);
  switch (elementClass(op.op->result(0)->type())) {
    case ElementClass::Float:
      selectElements(cond, a.floats, b.floats, out.floats);
      break;
    case ElementClass::Int:
      selectElements(cond, a.ints, b.ints, out.ints);
      break;
    case ElementClass::Pointer:
      selectElements(cond, a.addresses, b.addresses, out.addresses);
      break;
  }
  return support::Status::ok();
}

support::Status interpretCast(ProgramContext& ctx, const CompiledOp& op) {
  const Type& fromType = op.op->operand(0)->type();
  const Type& toType = op.op->result(0)->type();
  const ScalarKind to = toType.scalarKind();
  const ElementClass fromClass = elementClass(fromType);
  const ElementClass toClass = elementClass(toType);
  if (fromClass == ElementClass::Pointer || toClass == ElementClass::Pointer)
    return ctx.error(op, "cannot convert pointers (" + fromType.str() + " to " + toType.str() + ")");
  const RuntimeValue& in = ctx.operand(op, 0);
  RuntimeValue& out = ctx.result(op);
  if (fromClass == ElementClass::Float && toClass == ElementClass::Float) {
    out.floats.resize(in.floats.size());
    for (size_t i = 0; i < in.floats.size(); ++i) out.floats[i] = roundToFloatKind(in.floats[i], to);
  } else if (fromClass == ElementClass::Float) {
    out.ints.resize(in.floats.size());
    for (size_t i = 0; i < in.floats.size(); ++i) out.ints[i] = floatToInt(in.floats[i], to);
  } else if (toClass == ElementClass::Float) {
    // Signed, except that i1 converts to 0 or 1: its stored value.
    out.floats.resize(in.ints.size());
    for (size_t i = 0; i < in.ints.size(); ++i) out.floats[i] = intToFloatKind(in.ints[i], to);
  } else {
    out.ints.resize(in.ints.size());
    const IntWrapper wrap(to);
    for (size_t i = 0; i < in.ints.size(); ++i) {
      const int64_t x = in.ints[i];
      // i1 zero-extends (its stored 0/1); to i1 is x != 0; others sign-extend or truncate.
      out.ints[i] = to == ScalarKind::I1 ? (x != 0 ? 1 : 0) : wrap(x);
    }
  }
  return support::Status::ok();
}

// Exact: the value is an integer in [-15, 15], which every result type holds.
support::Status interpretUnpackNibbles(ProgramContext& ctx, const CompiledOp& op) {
  const int shift = op.op->attrs().getInt("high") != 0 ? 4 : 0;
  const int64_t flip = op.op->attrs().has("flip") ? op.op->attrs().getInt("flip") : 0;
  const auto& bytes = ctx.operand(op, 0).ints;
  const auto& zeroPoints = ctx.operand(op, 1).ints;
  auto& out = ctx.result(op).floats;
  out.resize(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int64_t nibble = static_cast<int64_t>((static_cast<uint64_t>(bytes[i]) & 0xFF) >> shift & 0xF) ^ flip;
    const int64_t zeroPoint = static_cast<int64_t>(static_cast<uint64_t>(zeroPoints.at(i)) & 0xF);
    out[i] = static_cast<double>(nibble - zeroPoint);
  }
  return support::Status::ok();
}

namespace {

uint64_t floatBits(double x, ScalarKind kind) {
  if (kind == ScalarKind::F64) return std::bit_cast<uint64_t>(x);
  return encodeFloat(x, kind);
}

double floatFromBits(uint64_t bits, ScalarKind kind) {
  if (kind == ScalarKind::F64) return std::bit_cast<double>(bits);
  return decodeFloat(static_cast<uint32_t>(bits), kind);
}

uint64_t intBits(int64_t x, ScalarKind kind) {
  const int bits = valueBits(kind);
  return bits == 64 ? static_cast<uint64_t>(x) : static_cast<uint64_t>(x) & ((uint64_t{1} << bits) - 1);
}

}  // namespace

// Reinterprets bits. NaN payloads are not kept: values are held as doubles, so a
// NaN comes back as the kind's canonical NaN.
support::Status interpretBitcast(ProgramContext& ctx, const CompiledOp& op) {
  const Type& fromType = op.op->operand(0)->type();
  const Type& toType = op.op->result(0)->type();
  const ScalarKind from = fromType.scalarKind();
  const ScalarKind to = toType.scalarKind();
  const ElementClass fromClass = elementClass(fromType);
  const ElementClass toClass = elementClass(toType);
  if (fromClass == ElementClass::Pointer && toClass == ElementClass::Pointer &&
      !addressesNibbles(from) && !addressesNibbles(to)) {
    // Byte addresses either way (the verifier rejects i4 pointees).
    ctx.result(op).addresses = ctx.operand(op, 0).addresses;
    return support::Status::ok();
  }
  if (fromClass == ElementClass::Pointer || toClass == ElementClass::Pointer)
    return ctx.error(op, "cannot reinterpret pointers (" + fromType.str() + " to " + toType.str() + ")");
  if (valueBits(from) != valueBits(to))
    return ctx.error(op, std::string("element widths differ (") + scalarName(from) + " to " + scalarName(to) + ")");
  const RuntimeValue& in = ctx.operand(op, 0);
  RuntimeValue& out = ctx.result(op);
  const size_t n = fromClass == ElementClass::Float ? in.floats.size() : in.ints.size();
  if (toClass == ElementClass::Float)
    out.floats.resize(n);
  else
    out.ints.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t bits = fromClass == ElementClass::Float ? floatBits(in.floats[i], from) : intBits(in.ints[i], from);
    if (toClass == ElementClass::Float)
      out.floats[i] = floatFromBits(bits, to);
    else
      out.ints[i] = wrapInt(static_cast<int64_t>(bits), to);
  }
  return support::Status::ok();
}

}  // namespace attnjit::ir
