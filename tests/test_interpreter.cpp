// The CPU interpreter (ir/Interpreter.h): kernels built with ir::Builder run on
// host buffers and are checked against scalar C++ loops and float64 references.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "ir/Builder.h"
#include "ir/Interpreter.h"
#include "ir/Numeric.h"

namespace support = attnjit::support;

using namespace attnjit::ir;

namespace {

const Type kI32 = Type::scalar(ScalarKind::I32);
const Type kF32 = Type::scalar(ScalarKind::F32);

Type ptrTo(ScalarKind k) { return Type::pointer(k); }

// [rows, cols] tile of offsets r * rowStride + c.
Value* offsets2d(Builder& b, int64_t rows, int64_t cols, int64_t rowStride) {
  Value* r = b.expandDims(b.arange(0, rows), 1);
  Value* scaled = b.mul(r, b.constInt(rowStride, Type::tile({rows, 1}, kI32)));
  Value* c = b.expandDims(b.arange(0, cols), 0);
  return b.add(b.broadcast(scaled, {rows, cols}), b.broadcast(c, {rows, cols}));
}

Value* pointersAt(Builder& b, Value* base, Value* offsets) {
  return b.addPtr(b.splat(base, offsets->type().shape()), offsets);
}

// Host buffers holding elements in their memory encoding.
std::vector<uint8_t> packFloats(const std::vector<double>& values, ScalarKind kind) {
  const size_t size = storageBits(kind) / 8;
  std::vector<uint8_t> bytes(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    uint64_t bits = kind == ScalarKind::F64 ? std::bit_cast<uint64_t>(values[i]) : encodeFloat(values[i], kind);
    std::memcpy(bytes.data() + i * size, &bits, size);  // little-endian host
  }
  return bytes;
}

std::vector<double> unpackFloats(const std::vector<uint8_t>& bytes, ScalarKind kind) {
  const size_t size = storageBits(kind) / 8;
  std::vector<double> values(bytes.size() / size);
  for (size_t i = 0; i < values.size(); ++i) {
    uint64_t bits = 0;
    std::memcpy(&bits, bytes.data() + i * size, size);
    values[i] = kind == ScalarKind::F64 ? std::bit_cast<double>(bits) : decodeFloat(static_cast<uint32_t>(bits), kind);
  }
  return values;
}

template <typename T>
std::vector<uint8_t> packInts(const std::vector<T>& values) {
  std::vector<uint8_t> bytes(values.size() * sizeof(T));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

template <typename T>
std::vector<T> unpackInts(const std::vector<uint8_t>& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

using ElementwiseBody = std::function<Value*(Builder&, Value*, Value*)>;

// Runs out[i] = body(a[i], b[i]) for i < n in one program and returns out.
std::vector<uint8_t> runElementwise(ScalarKind inKind, ScalarKind outKind, int64_t n, std::vector<uint8_t> a,
                                    std::vector<uint8_t> b, const ElementwiseBody& body) {
  Kernel kernel("elementwise");
  Value* pa = kernel.addParameter(ptrTo(inKind), "a");
  Value* pb = kernel.addParameter(ptrTo(inKind), "b");
  Value* po = kernel.addParameter(ptrTo(outKind), "out");
  Builder builder(kernel);
  Value* offsets = builder.arange(0, n);
  Value* va = builder.load(pointersAt(builder, pa, offsets));
  Value* vb = builder.load(pointersAt(builder, pb, offsets));
  builder.store(pointersAt(builder, po, offsets), body(builder, va, vb));
  support::Status built = builder.finish();
  INFO(built.message());
  REQUIRE(built.isOk());

  std::vector<uint8_t> out(static_cast<size_t>(n) * storageBits(outKind) / 8, 0xCD);
  InterpreterMemory memory;
  const uint64_t addressA = memory.map(a.data(), a.size(), "a");
  const uint64_t addressB = memory.map(b.data(), b.size(), "b");
  const uint64_t addressOut = memory.map(out.data(), out.size(), "out");
  support::Status ran =
      interpretKernel(kernel, {}, {PointerArg{addressA}, PointerArg{addressB}, PointerArg{addressOut}}, memory);
  INFO(ran.message());
  REQUIRE(ran.isOk());
  return out;
}

std::vector<double> randomValues(size_t n, double lo, double hi, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

// f32 operands: random values plus the special ones, each rounded to f32.
std::vector<double> f32Operands(uint64_t seed) {
  std::vector<double> v = randomValues(56, -4, 4, seed);
  for (double s : {0.0, -0.0, 1.0, -1.0, std::numeric_limits<double>::infinity(),
                   -std::numeric_limits<double>::infinity(), std::nan(""), 1e-40})
    v.push_back(s);
  for (double& x : v) x = static_cast<float>(x);
  return v;
}

bool sameFloat(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// bf16 rounding by the classic integer trick (round to nearest even on the f32 bits).
double bf16Of(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x);
  bits += 0x7FFF + ((bits >> 16) & 1);
  return std::bit_cast<float>(bits & 0xFFFF0000u);
}

}  // namespace

TEST_CASE("vector add over a grid with a masked tail", "[interp]") {
  constexpr int64_t kBlock = 64;
  Kernel kernel("vector_add");
  kernel.constexprs().push_back({"BLOCK", int64_t{kBlock}});
  Value* px = kernel.addParameter(ptrTo(ScalarKind::F32), "x");
  Value* py = kernel.addParameter(ptrTo(ScalarKind::F32), "y");
  Value* pout = kernel.addParameter(ptrTo(ScalarKind::F32), "out");
  Value* n = kernel.addParameter(kI32, "n");
  Builder b(kernel);
  Value* start = b.mul(b.programId(0), b.constexprValue("BLOCK", ScalarKind::I32));
  Value* offsets = b.add(b.splat(start, {kBlock}), b.arange(0, kBlock));
  Value* mask = b.cmp(CmpPredicate::Lt, offsets, b.splat(n, {kBlock}));
  Value* zero = b.constFloat(0.0, Type::tile({kBlock}, kF32));
  Value* x = b.load(pointersAt(b, px, offsets), mask, zero);
  Value* y = b.load(pointersAt(b, py, offsets), mask, zero);
  b.store(pointersAt(b, pout, offsets), b.add(x, y), mask);
  REQUIRE(b.finish().isOk());

  const int count = 1000;  // 15 full blocks and a tail of 40
  std::vector<float> xs(count), ys(count), out(count, -1.0f);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-10, 10);
  for (int i = 0; i < count; ++i) {
    xs[i] = dist(rng);
    ys[i] = dist(rng);
  }
  InterpreterMemory memory;
  // Exactly sized buffers: touching a masked-off lane would be an out-of-bounds error.
  const uint64_t ax = memory.map(xs.data(), count * sizeof(float), "x");
  const uint64_t ay = memory.map(ys.data(), count * sizeof(float), "y");
  const uint64_t aout = memory.map(out.data(), count * sizeof(float), "out");
  const LaunchGrid grid{(count + kBlock - 1) / kBlock, 1, 1};
  support::Status status =
      interpretKernel(kernel, grid, {PointerArg{ax}, PointerArg{ay}, PointerArg{aout}, int64_t{count}}, memory);
  INFO(status.message());
  REQUIRE(status.isOk());
  for (int i = 0; i < count; ++i) REQUIRE(out[i] == xs[i] + ys[i]);
}

TEST_CASE("f32 binary ops compute in float, min/max propagate NaN", "[interp]") {
  const std::vector<double> a = f32Operands(1), b = f32Operands(2);
  const int64_t n = static_cast<int64_t>(a.size());
  struct Case {
    Opcode op;
    std::function<float(float, float)> expected;
  };
  const auto nanOr = [](float x, float y, float r) { return std::isnan(x) || std::isnan(y) ? NAN : r; };
  const std::vector<Case> cases = {
      {Opcode::Add, [](float x, float y) { return x + y; }},
      {Opcode::Sub, [](float x, float y) { return x - y; }},
      {Opcode::Mul, [](float x, float y) { return x * y; }},
      {Opcode::Div, [](float x, float y) { return x / y; }},
      {Opcode::Rem, [](float x, float y) { return std::fmod(x, y); }},
      {Opcode::Min, [&](float x, float y) { return nanOr(x, y, std::fmin(x, y)); }},
      {Opcode::Max, [&](float x, float y) { return nanOr(x, y, std::fmax(x, y)); }},
  };
  for (const Case& c : cases) {
    INFO(opcodeName(c.op));
    const auto out =
        unpackFloats(runElementwise(ScalarKind::F32, ScalarKind::F32, n, packFloats(a, ScalarKind::F32),
                                    packFloats(b, ScalarKind::F32),
                                    [&](Builder& bl, Value* x, Value* y) { return bl.binary(c.op, x, y); }),
                     ScalarKind::F32);
    for (int64_t i = 0; i < n; ++i) {
      INFO("a = " << a[i] << ", b = " << b[i]);
      const double expected = c.expected(static_cast<float>(a[i]), static_cast<float>(b[i]));
      // fmin/fmax may return either zero for -0 vs +0; the interpreter orders -0 below +0.
      if (expected == 0 && (c.op == Opcode::Min || c.op == Opcode::Max)) REQUIRE(out[i] == 0);
      else REQUIRE(sameFloat(out[i], expected));
    }
  }
  // -0 is the minimum of (-0, +0), +0 the maximum.
  const auto zeros = packFloats({-0.0, 0.0}, ScalarKind::F32), swapped = packFloats({0.0, -0.0}, ScalarKind::F32);
  const auto mins = unpackFloats(runElementwise(ScalarKind::F32, ScalarKind::F32, 2, zeros, swapped,
                                                [](Builder& bl, Value* x, Value* y) { return bl.min(x, y); }),
                                 ScalarKind::F32);
  CHECK((std::signbit(mins[0]) && std::signbit(mins[1])));
}

TEST_CASE("bf16, f16 and fp8 arithmetic rounds the f32 result to the element kind", "[interp]") {
  const std::vector<double> a = randomValues(64, -3, 3, 3), b = randomValues(64, -3, 3, 4);
  SECTION("bf16 add") {
    const auto out = unpackFloats(
        runElementwise(ScalarKind::BF16, ScalarKind::BF16, 64, packFloats(a, ScalarKind::BF16),
                       packFloats(b, ScalarKind::BF16), [](Builder& bl, Value* x, Value* y) { return bl.add(x, y); }),
        ScalarKind::BF16);
    for (int i = 0; i < 64; ++i) {
      const float x = static_cast<float>(bf16Of(static_cast<float>(a[i])));
      const float y = static_cast<float>(bf16Of(static_cast<float>(b[i])));
      REQUIRE(out[i] == bf16Of(x + y));
    }
  }
  SECTION("f16 mul and fp8 e4m3 sub") {
    for (ScalarKind kind : {ScalarKind::F16, ScalarKind::F8E4M3}) {
      const Opcode op = kind == ScalarKind::F16 ? Opcode::Mul : Opcode::Sub;
      const auto out =
          unpackFloats(runElementwise(kind, kind, 64, packFloats(a, kind), packFloats(b, kind),
                                      [op](Builder& bl, Value* x, Value* y) { return bl.binary(op, x, y); }),
                       kind);
      for (int i = 0; i < 64; ++i) {
        const auto x = static_cast<float>(roundToFloatKind(a[i], kind));
        const auto y = static_cast<float>(roundToFloatKind(b[i], kind));
        REQUIRE(out[i] == roundToFloatKind(op == Opcode::Mul ? x * y : x - y, kind));
      }
    }
  }
}

TEST_CASE("integer binary ops wrap, division by zero gives 0, shifts saturate", "[interp]") {
  const std::vector<int32_t> a = {5, -7, 100, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max(),
                                  -1, 0, 123456789, -99, 1 << 30, 17, -17};
  const std::vector<int32_t> b = {3, 2, 0, -1, 1, 31, 32, -3, -1, 2, 40, 4};
  const int64_t n = static_cast<int64_t>(a.size());
  const auto wrap32 = [](int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); };
  struct Case {
    Opcode op;
    std::function<int32_t(int64_t, int64_t)> expected;
  };
  const std::vector<Case> cases = {
      {Opcode::Add, [&](int64_t x, int64_t y) { return wrap32(x + y); }},
      {Opcode::Sub, [&](int64_t x, int64_t y) { return wrap32(x - y); }},
      {Opcode::Mul, [&](int64_t x, int64_t y) { return wrap32(x * y); }},
      {Opcode::Div, [&](int64_t x, int64_t y) { return y == 0 ? 0 : wrap32(x / y); }},
      {Opcode::Rem, [&](int64_t x, int64_t y) { return y == 0 ? 0 : wrap32(x % y); }},
      {Opcode::Min, [&](int64_t x, int64_t y) { return wrap32(std::min(x, y)); }},
      {Opcode::Max, [&](int64_t x, int64_t y) { return wrap32(std::max(x, y)); }},
      {Opcode::And, [&](int64_t x, int64_t y) { return wrap32(x & y); }},
      {Opcode::Or, [&](int64_t x, int64_t y) { return wrap32(x | y); }},
      {Opcode::Xor, [&](int64_t x, int64_t y) { return wrap32(x ^ y); }},
      {Opcode::Shl, [&](int64_t x, int64_t y) { return y < 0 || y >= 32 ? 0 : wrap32(x * (int64_t{1} << y)); }},
      {Opcode::Shr, [&](int64_t x, int64_t y) { return y < 0 || y >= 32 ? (x < 0 ? -1 : 0) : wrap32(x >> y); }},
  };
  for (const Case& c : cases) {
    INFO(opcodeName(c.op));
    const auto out =
        unpackInts<int32_t>(runElementwise(ScalarKind::I32, ScalarKind::I32, n, packInts(a), packInts(b),
                                           [&](Builder& bl, Value* x, Value* y) { return bl.binary(c.op, x, y); }));
    for (int64_t i = 0; i < n; ++i) {
      INFO("a = " << a[i] << ", b = " << b[i]);
      REQUIRE(out[i] == c.expected(a[i], b[i]));
    }
  }
  const auto sums = unpackInts<int8_t>(runElementwise(ScalarKind::I8, ScalarKind::I8, 2, packInts<int8_t>({100, -128}),
                                                      packInts<int8_t>({100, -1}),
                                                      [](Builder& bl, Value* x, Value* y) { return bl.add(x, y); }));
  CHECK(sums == std::vector<int8_t>{-56, 127});
}

TEST_CASE("unary ops match the std:: float functions", "[interp]") {
  std::vector<double> a = randomValues(60, 0.01, 5, 5);
  for (double s : {0.0, -1.5, std::numeric_limits<double>::infinity(), std::nan("")}) a.push_back(s);
  for (double& x : a) x = static_cast<float>(x);
  const int64_t n = static_cast<int64_t>(a.size());
  struct Case {
    Opcode op;
    std::function<float(float)> expected;
  };
  const std::vector<Case> cases = {
      {Opcode::Neg, [](float x) { return -x; }},          {Opcode::Abs, [](float x) { return std::fabs(x); }},
      {Opcode::Exp2, [](float x) { return ::exp2f(x); }}, {Opcode::Log2, [](float x) { return ::log2f(x); }},
      {Opcode::Exp, [](float x) { return ::expf(x); }},   {Opcode::Log, [](float x) { return ::logf(x); }},
      {Opcode::Sqrt, [](float x) { return ::sqrtf(x); }},
      {Opcode::Rsqrt, [](float x) { return 1.0f / ::sqrtf(x); }},
      {Opcode::Tanh, [](float x) { return ::tanhf(x); }},
  };
  for (const Case& c : cases) {
    INFO(opcodeName(c.op));
    const auto out = unpackFloats(runElementwise(ScalarKind::F32, ScalarKind::F32, n, packFloats(a, ScalarKind::F32),
                                                 packFloats(a, ScalarKind::F32),
                                                 [&](Builder& bl, Value* x, Value*) { return bl.unary(c.op, x); }),
                                  ScalarKind::F32);
    for (int64_t i = 0; i < n; ++i) {
      INFO("x = " << a[i]);
      REQUIRE(sameFloat(out[i], c.expected(static_cast<float>(a[i]))));
    }
  }
  const auto negated = unpackInts<int32_t>(runElementwise(
      ScalarKind::I32, ScalarKind::I32, 3, packInts<int32_t>({5, -9, std::numeric_limits<int32_t>::min()}),
      packInts<int32_t>({0, 0, 0}), [](Builder& bl, Value* x, Value*) { return bl.unary(Opcode::Abs, x); }));
  CHECK(negated == std::vector<int32_t>{5, 9, std::numeric_limits<int32_t>::min()});
  // exp2 and exp flush subnormal f32 results to +0, as ex2.approx.ftz does on the GPU.
  const std::vector<double> deep = {-126.0, -126.5, -140.0, -87.0, -88.0};
  const auto flushed =
      unpackFloats(runElementwise(ScalarKind::F32, ScalarKind::F32, 5, packFloats(deep, ScalarKind::F32),
                                  packFloats(deep, ScalarKind::F32),
                                  [](Builder& bl, Value* x, Value*) { return bl.unary(Opcode::Exp2, x); }),
                   ScalarKind::F32);
  CHECK(flushed[0] == std::numeric_limits<float>::min());  // 2^-126, the smallest normal
  CHECK(flushed[1] == 0.0);
  CHECK(flushed[2] == 0.0);
  const auto flushedExp =
      unpackFloats(runElementwise(ScalarKind::F32, ScalarKind::F32, 5, packFloats(deep, ScalarKind::F32),
                                  packFloats(deep, ScalarKind::F32),
                                  [](Builder& bl, Value* x, Value*) { return bl.unary(Opcode::Exp, x); }),
                   ScalarKind::F32);
  CHECK(flushedExp[3] == ::expf(-87.0f));  // 1.6e-38: normal
  CHECK(flushedExp[4] == 0.0);             // 6.0e-39: subnormal
}

TEST_CASE("comparisons are ordered and select picks per element", "[interp]") {
  const std::vector<double> a = {1, 2, 3, NAN, NAN, -0.0}, b = {2, 2, 1, 1, NAN, 0.0};
  const auto packedA = packFloats(a, ScalarKind::F32), packedB = packFloats(b, ScalarKind::F32);
  auto compare = [&](CmpPredicate pred) {
    return unpackInts<uint8_t>(runElementwise(ScalarKind::F32, ScalarKind::I1, 6, packedA, packedB,
                                              [pred](Builder& bl, Value* x, Value* y) { return bl.cmp(pred, x, y); }));
  };
  CHECK(compare(CmpPredicate::Lt) == std::vector<uint8_t>{1, 0, 0, 0, 0, 0});
  CHECK(compare(CmpPredicate::Le) == std::vector<uint8_t>{1, 1, 0, 0, 0, 1});
  CHECK(compare(CmpPredicate::Eq) == std::vector<uint8_t>{0, 1, 0, 0, 0, 1});
  CHECK(compare(CmpPredicate::Ne) == std::vector<uint8_t>{1, 0, 1, 1, 1, 0});
  CHECK(compare(CmpPredicate::Gt) == std::vector<uint8_t>{0, 0, 1, 0, 0, 0});
  CHECK(compare(CmpPredicate::Ge) == std::vector<uint8_t>{0, 1, 1, 0, 0, 1});
  const auto larger = unpackFloats(runElementwise(ScalarKind::F32, ScalarKind::F32, 6, packedA, packedB,
                                                  [](Builder& bl, Value* x, Value* y) {
                                                    return bl.select(bl.cmp(CmpPredicate::Gt, x, y), x, y);
                                                  }),
                                   ScalarKind::F32);
  CHECK(larger[0] == 2);
  CHECK(larger[2] == 3);
  CHECK(larger[3] == 1);  // NaN > 1 is false
  const auto signedLess = unpackInts<uint8_t>(
      runElementwise(ScalarKind::I32, ScalarKind::I1, 2, packInts<int32_t>({-1, 3}), packInts<int32_t>({1, 3}),
                     [](Builder& bl, Value* x, Value* y) { return bl.cmp(CmpPredicate::Lt, x, y); }));
  CHECK(signedLess == std::vector<uint8_t>{1, 0});
}

TEST_CASE("casts among float and integer kinds", "[interp]") {
  std::vector<double> values = randomValues(40, -600, 600, 6);
  for (double s : {0.5, -0.5, 1e-3, 70000.0, -70000.0, 1e-9, std::numeric_limits<double>::infinity(), std::nan(""), 3.0,
                   -2.5, 255.9, -129.0})
    values.push_back(s);
  for (double& x : values) x = static_cast<float>(x);
  const int64_t n = static_cast<int64_t>(values.size());
  const auto input = packFloats(values, ScalarKind::F32);

  for (ScalarKind kind : {ScalarKind::F16, ScalarKind::BF16, ScalarKind::F8E4M3, ScalarKind::F8E5M2, ScalarKind::F64}) {
    INFO(scalarName(kind));
    const auto out = unpackFloats(runElementwise(ScalarKind::F32, kind, n, input, input,
                                                 [kind](Builder& bl, Value* x, Value*) { return bl.cast(x, kind); }),
                                  kind);
    for (int64_t i = 0; i < n; ++i) REQUIRE(sameFloat(out[i], roundToFloatKind(values[i], kind)));
  }
  const auto bytes =
      unpackInts<int8_t>(runElementwise(ScalarKind::F32, ScalarKind::I8, n, input, input,
                                        [](Builder& bl, Value* x, Value*) { return bl.cast(x, ScalarKind::I8); }));
  for (int64_t i = 0; i < n; ++i) {
    INFO("x = " << values[i]);
    const double v = values[i];
    const int8_t expected = std::isnan(v) ? 0 : v >= 127 ? 127 : v <= -128 ? -128 : static_cast<int8_t>(std::trunc(v));
    REQUIRE(bytes[i] == expected);
  }
  // i32 → f32 rounds to nearest even; → i1 is x != 0; i1 → i32 is 0 or 1; i32 → i8 truncates.
  const std::vector<int32_t> ints = {16777217, 16777219, -3, 0, 256 + 7};
  const auto asFloat =
      unpackFloats(runElementwise(ScalarKind::I32, ScalarKind::F32, 5, packInts(ints), packInts(ints),
                                  [](Builder& bl, Value* x, Value*) { return bl.cast(x, ScalarKind::F32); }),
                   ScalarKind::F32);
  CHECK(asFloat == std::vector<double>{16777216, 16777220, -3, 0, 263});
  const auto truthy = unpackInts<int32_t>(runElementwise(
      ScalarKind::I32, ScalarKind::I32, 5, packInts(ints), packInts(ints),
      [](Builder& bl, Value* x, Value*) { return bl.cast(bl.cast(x, ScalarKind::I1), ScalarKind::I32); }));
  CHECK(truthy == std::vector<int32_t>{1, 1, 1, 0, 1});
  const auto narrowed =
      unpackInts<int8_t>(runElementwise(ScalarKind::I32, ScalarKind::I8, 5, packInts(ints), packInts(ints),
                                        [](Builder& bl, Value* x, Value*) { return bl.cast(x, ScalarKind::I8); }));
  CHECK(narrowed == std::vector<int8_t>{1, 3, -3, 0, 7});
}

TEST_CASE("loads of fp8, bf16 and i4 decode the memory encodings", "[interp]") {
  // e4m3: 1.0, 448, 2^-9, -1.0, NaN; e5m2: 1.0, -inf, 57344, 2^-16, -2.0.
  const std::vector<uint8_t> e4m3 = {0x38, 0x7E, 0x01, 0xB8, 0x7F}, e5m2 = {0x3C, 0xFC, 0x7B, 0x01, 0xC0};
  const auto e4m3Out =
      unpackFloats(runElementwise(ScalarKind::F8E4M3, ScalarKind::F32, 5, e4m3, e4m3,
                                  [](Builder& bl, Value* x, Value*) { return bl.cast(x, ScalarKind::F32); }),
                   ScalarKind::F32);
  CHECK(e4m3Out[0] == 1.0);
  CHECK(e4m3Out[1] == 448.0);
  CHECK(e4m3Out[2] == std::ldexp(1.0, -9));
  CHECK(e4m3Out[3] == -1.0);
  CHECK(std::isnan(e4m3Out[4]));
  const auto e5m2Out =
      unpackFloats(runElementwise(ScalarKind::F8E5M2, ScalarKind::F32, 5, e5m2, e5m2,
                                  [](Builder& bl, Value* x, Value*) { return bl.cast(x, ScalarKind::F32); }),
                   ScalarKind::F32);
  CHECK(e5m2Out ==
        std::vector<double>{1.0, -std::numeric_limits<double>::infinity(), 57344.0, std::ldexp(1.0, -16), -2.0});
  // bf16 as little-endian uint16: 1.0 = 0x3F80, -3.0 = 0xC040.
  const std::vector<uint8_t> bf16 = {0x80, 0x3F, 0x40, 0xC0};
  const auto bf16Out =
      unpackFloats(runElementwise(ScalarKind::BF16, ScalarKind::F32, 2, bf16, bf16,
                                  [](Builder& bl, Value* x, Value*) { return bl.cast(x, ScalarKind::F32); }),
                   ScalarKind::F32);
  CHECK(bf16Out == std::vector<double>{1.0, -3.0});
  // i4: element e is nibble e&1 (low first) of byte e>>1, sign-extended.
  const std::vector<uint8_t> nibbles = {0x21, 0xF8, 0x7A};
  const auto i4Out =
      unpackInts<int32_t>(runElementwise(ScalarKind::I4, ScalarKind::I32, 6, nibbles, nibbles,
                                         [](Builder& bl, Value* x, Value*) { return bl.cast(x, ScalarKind::I32); }));
  CHECK(i4Out == std::vector<int32_t>{1, 2, -8, -1, -6, 7});
}

TEST_CASE("unpack_nibbles reads a byte's nibble, flipped, minus a zero point's low four bits", "[interp][quant]") {
  // Every byte against zero points that cycle through 0..15 and carry high bits
  // the op ignores (+ 16 * i).
  constexpr int64_t n = 256;
  std::vector<uint8_t> bytes(n), zeroBytes(n);
  for (int64_t i = 0; i < n; ++i) {
    bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
    zeroBytes[static_cast<size_t>(i)] = static_cast<uint8_t>((i * 7) % 16 + 16 * (i % 5));
  }
  for (ScalarKind kind : {ScalarKind::BF16, ScalarKind::F16, ScalarKind::F32})
    for (bool high : {false, true})
      for (int flip : {0, 8, 5}) {
        INFO(scalarName(kind) << " high " << high << " flip " << flip);
        const auto out = unpackFloats(runElementwise(ScalarKind::I8, kind, n, bytes, zeroBytes,
                                                     [&](Builder& bl, Value* x, Value* z) {
                                                       return bl.unpackNibbles(x, bl.cast(z, ScalarKind::I32), high,
                                                                               flip, kind);
                                                     }),
                                      kind);
        for (int64_t i = 0; i < n; ++i) {
          const int nibble = (high ? i >> 4 : i) & 15;
          const int zeroPoint = zeroBytes[static_cast<size_t>(i)] & 15;
          REQUIRE(out[static_cast<size_t>(i)] == static_cast<double>((nibble ^ flip) - zeroPoint));
        }
      }
}

TEST_CASE("bitcast reinterprets the encodings", "[interp]") {
  const auto bits =
      unpackInts<int32_t>(runElementwise(ScalarKind::F32, ScalarKind::I32, 2, packFloats({1.0, -2.0}, ScalarKind::F32),
                                         packFloats({0, 0}, ScalarKind::F32),
                                         [](Builder& bl, Value* x, Value*) { return bl.bitcast(x, ScalarKind::I32); }));
  CHECK(bits == std::vector<int32_t>{0x3F800000, static_cast<int32_t>(0xC0000000u)});
  const auto halves =
      unpackFloats(runElementwise(ScalarKind::I16, ScalarKind::F16, 2,
                                  packInts<int16_t>({0x3C00, static_cast<int16_t>(0xFC00)}), packInts<int16_t>({0, 0}),
                                  [](Builder& bl, Value* x, Value*) { return bl.bitcast(x, ScalarKind::F16); }),
                   ScalarKind::F16);
  CHECK(halves == std::vector<double>{1.0, -std::numeric_limits<double>::infinity()});
  const auto fromBf16 = unpackInts<int16_t>(runElementwise(
      ScalarKind::BF16, ScalarKind::I16, 1, packFloats({-3.0}, ScalarKind::BF16), packFloats({0}, ScalarKind::BF16),
      [](Builder& bl, Value* x, Value*) { return bl.bitcast(x, ScalarKind::I16); }));
  CHECK(fromBf16 == std::vector<int16_t>{static_cast<int16_t>(0xC040)});
}

namespace {

// c[M,N] = c + a[M,K]·b[K,N] in one program; a, b of `kind`, c f32. `makeDot`
// builds the dot from the loaded operands and accumulator.
support::Status interpretDot(ScalarKind kind, const std::vector<double>& a, const std::vector<double>& b,
                    std::vector<float>& c, int64_t M, int64_t N, int64_t K,
                    const std::function<Value*(Builder&, Value*, Value*, Value*)>& makeDot) {
  Kernel kernel("dot");
  Value* pa = kernel.addParameter(ptrTo(kind), "a");
  Value* pb = kernel.addParameter(ptrTo(kind), "b");
  Value* pc = kernel.addParameter(ptrTo(ScalarKind::F32), "c");
  Builder bl(kernel);
  Value* va = bl.load(pointersAt(bl, pa, offsets2d(bl, M, K, K)));
  Value* vb = bl.load(pointersAt(bl, pb, offsets2d(bl, K, N, N)));
  Value* cPointers = pointersAt(bl, pc, offsets2d(bl, M, N, N));
  bl.store(cPointers, makeDot(bl, va, vb, bl.load(cPointers)));
  if (support::Status built = bl.finish(); !built) return built;
  auto bytesA = packFloats(a, kind), bytesB = packFloats(b, kind);
  InterpreterMemory memory;
  const uint64_t addressA = memory.map(bytesA.data(), bytesA.size(), "a");
  const uint64_t addressB = memory.map(bytesB.data(), bytesB.size(), "b");
  const uint64_t addressC = memory.map(c.data(), c.size() * sizeof(float), "c");
  return interpretKernel(kernel, {}, {PointerArg{addressA}, PointerArg{addressB}, PointerArg{addressC}}, memory);
}

std::vector<float> runDot(ScalarKind kind, bool tf32, const std::vector<double>& a, const std::vector<double>& b,
                          std::vector<float> c, int64_t M, int64_t N, int64_t K) {
  support::Status ran = interpretDot(kind, a, b, c, M, N, K, [&](Builder& bl, Value* va, Value* vb, Value* acc) {
    return bl.dot(va, vb, acc, tf32);
  });
  INFO(ran.message());
  REQUIRE(ran.isOk());
  return c;
}

}  // namespace

TEST_CASE("dot 16x32x8 matches a float64 reference", "[interp]") {
  constexpr int64_t M = 16, N = 8, K = 32;
  const std::vector<double> a = randomValues(M * K, -2, 2, 11), b = randomValues(K * N, -2, 2, 12);
  std::vector<float> c0(M * N);
  for (int64_t i = 0; i < M * N; ++i) c0[i] = static_cast<float>(i % 7) - 3.0f;

  // Reference in double from inputs rounded as `round` says; error bound relative
  // to sum |terms| (f32 accumulation over K terms).
  auto check = [&](const std::vector<float>& got, const std::function<double(double)>& round, double relTol) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double sum = c0[m * N + n], magnitude = std::fabs(sum);
        for (int64_t k = 0; k < K; ++k) {
          const double term = round(a[m * K + k]) * round(b[k * N + n]);
          sum += term;
          magnitude += std::fabs(term);
        }
        INFO("m = " << m << ", n = " << n);
        REQUIRE(std::fabs(got[m * N + n] - sum) <= relTol * magnitude);
      }
  };
  SECTION("bf16") {
    const auto got = runDot(ScalarKind::BF16, false, a, b, c0, M, N, K);
    check(got, [](double x) { return roundToFloatKind(x, ScalarKind::BF16); }, 4e-6);
  }
  SECTION("f32 ieee and tf32") {
    const auto ieee = runDot(ScalarKind::F32, false, a, b, c0, M, N, K);
    const auto asF32 = [](double x) { return static_cast<double>(static_cast<float>(x)); };
    check(ieee, asF32, 4e-6);
    const auto tf32 = runDot(ScalarKind::F32, true, a, b, c0, M, N, K);
    check(tf32, [](double x) { return static_cast<double>(roundToTf32(static_cast<float>(x))); }, 4e-6);
    // tf32 keeps 11 significant bits: visibly different from ieee, within its precision.
    check(tf32, asF32, 2e-3);
    int differing = 0;
    for (int64_t i = 0; i < M * N; ++i) differing += tf32[i] != ieee[i];
    CHECK(differing > M * N / 2);
  }
}

TEST_CASE("dot's k_extent and n_extent promises are checked, and kept ones change nothing", "[interp]") {
  // a[16, 16] · b[16, 8] with a's columns 12.. and b's rows 12.. zero, and b's
  // columns 6.. zero: k_extent = 12 and n_extent = 6 hold.
  constexpr int64_t M = 16, N = 8, K = 16;
  std::vector<double> a = randomValues(M * K, -2, 2, 21), b = randomValues(K * N, -2, 2, 22);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 12; k < K; ++k) a[m * K + k] = 0;
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n)
      if (k >= 12 || n >= 6) b[k * N + n] = 0;
  auto run = [&](Builder::DotOptions extents, const std::vector<double>& bValues) {
    std::vector<float> c(M * N, 0.5f);
    return interpretDot(ScalarKind::BF16, a, bValues, c, M, N, K, [&](Builder& bl, Value* va, Value* vb, Value* acc) {
      return bl.dot(va, vb, acc, extents);
    });
  };
  CHECK(run({12, 6}, b).isOk());
  CHECK(run({12, 0}, b).isOk());
  // A nonzero product past either extent fails the run, naming the element.
  std::vector<double> pastK = b, pastN = b;
  pastK[13 * N + 2] = 1.0;  // a[:, 13] is zero: still a zero product
  CHECK(run({12, 6}, pastK).isOk());
  const support::Status wrongK = run({11, 6}, b);  // column 11 of a and row 11 of b are not zero
  REQUIRE_FALSE(wrongK.isOk());
  CHECK(wrongK.message().find("k_extent / n_extent promise a zero product") != std::string::npos);
  pastN[3 * N + 7] = 1.0;
  const support::Status wrongN = run({12, 6}, pastN);
  REQUIRE_FALSE(wrongN.isOk());
  CHECK(wrongN.message().find("b[3, 7]") != std::string::npos);
}

TEST_CASE("reductions along an axis", "[interp]") {
  constexpr int64_t R = 4, C = 8;
  std::vector<float> x(R * C);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-5, 5);
  for (float& v : x) v = dist(rng);
  x[2 * C + 5] = NAN;  // row 2, column 5
  // Signed zeros: as PTX max.NaN / min.NaN, -0 orders below +0 whatever the
  // order of the operands. Row 1 holds only zeros, its min is -0; column 6
  // holds -0 below a +0, its max is +0.
  for (int64_t c = 0; c < C; ++c) x[1 * C + c] = (c % 3 == 1) ? -0.0f : 0.0f;
  for (int64_t r = 0; r < R; ++r) x[r * C + 6] = r == 2 ? 0.0f : -0.0f;

  Kernel kernel("reduce");
  Value* px = kernel.addParameter(ptrTo(ScalarKind::F32), "x");
  Value* psum = kernel.addParameter(ptrTo(ScalarKind::F32), "row_sums");
  Value* pmax = kernel.addParameter(ptrTo(ScalarKind::F32), "col_maxes");
  Value* pmin = kernel.addParameter(ptrTo(ScalarKind::F32), "row_mins");
  Value* ptotal = kernel.addParameter(ptrTo(ScalarKind::I32), "index_total");
  Builder b(kernel);
  Value* tile = b.load(pointersAt(b, px, offsets2d(b, R, C, C)));
  b.store(pointersAt(b, psum, b.arange(0, R)), b.reduce(Opcode::ReduceSum, tile, 1));
  b.store(pointersAt(b, pmax, b.arange(0, C)), b.reduce(Opcode::ReduceMax, tile, 0));
  b.store(pointersAt(b, pmin, b.arange(0, R)), b.reduce(Opcode::ReduceMin, tile, 1));
  b.store(ptotal, b.reduce(Opcode::ReduceSum, b.arange(0, 100), 0));  // rank 1 → scalar
  support::Status built = b.finish();
  INFO(built.message());
  REQUIRE(built.isOk());

  std::vector<float> sums(R), maxes(C), mins(R);
  int32_t total = 0;
  InterpreterMemory memory;
  std::vector<KernelArgument> args = {PointerArg{memory.map(x.data(), x.size() * 4, "x")},
                                      PointerArg{memory.map(sums.data(), R * 4, "row_sums")},
                                      PointerArg{memory.map(maxes.data(), C * 4, "col_maxes")},
                                      PointerArg{memory.map(mins.data(), R * 4, "row_mins")},
                                      PointerArg{memory.map(&total, 4, "index_total")}};
  support::Status ran = interpretKernel(kernel, {}, args, memory);
  INFO(ran.message());
  REQUIRE(ran.isOk());
  for (int64_t r = 0; r < R; ++r) {
    float sum = 0, minimum = INFINITY;
    bool hasNan = false;
    for (int64_t c = 0; c < C; ++c) {
      const float v = x[r * C + c];
      sum += v;  // f32, in order
      if (v < minimum || (v == minimum && std::signbit(v))) minimum = v;
      hasNan = hasNan || std::isnan(v);
    }
    INFO("row " << r);
    CHECK(sameFloat(sums[r], sum));
    CHECK(sameFloat(mins[r], hasNan ? NAN : minimum));
    if (r == 1) CHECK(std::signbit(mins[r]));
  }
  for (int64_t c = 0; c < C; ++c) {
    float maximum = -INFINITY;
    for (int64_t r = 0; r < R; ++r) {
      const float v = x[r * C + c];
      if (v > maximum || (v == maximum && !std::signbit(v))) maximum = v;
    }
    INFO("column " << c);
    CHECK(sameFloat(maxes[c], c == 5 ? NAN : maximum));
    if (c == 6) CHECK((maxes[c] == 0.0f && !std::signbit(maxes[c])));
  }
  CHECK(total == 4950);
}

TEST_CASE("for loop with iter_args accumulates a running sum", "[interp]") {
  constexpr int64_t W = 8;
  Kernel kernel("running_sum");
  Value* px = kernel.addParameter(ptrTo(ScalarKind::F32), "x");
  Value* pout = kernel.addParameter(ptrTo(ScalarKind::F32), "out");
  Value* pints = kernel.addParameter(ptrTo(ScalarKind::I32), "ints");
  Value* rows = kernel.addParameter(kI32, "rows");
  Builder b(kernel);
  auto loop = b.beginFor(b.i32(0), rows, b.i32(1), {b.constFloat(0.0, Type::tile({W}, kF32))}, "row", {"acc"});
  Value* offsets = b.add(b.splat(b.mul(loop.inductionVar, b.i32(W)), {W}), b.arange(0, W));
  Value* next = b.add(loop.iterArgs[0], b.load(pointersAt(b, px, offsets)));
  std::vector<Value*> acc = b.endFor({next});
  b.store(pointersAt(b, pout, b.arange(0, W)), acc[0]);
  // iv = 1, 4, 7: s sums them; (p, q) are swapped every iteration.
  auto swapLoop = b.beginFor(b.i32(1), b.i32(10), b.i32(3), {b.i32(0), b.i32(100), b.i32(200)});
  std::vector<Value*> swapped =
      b.endFor({b.add(swapLoop.iterArgs[0], swapLoop.inductionVar), swapLoop.iterArgs[2], swapLoop.iterArgs[1]});
  // A loop that runs zero times yields its initial values.
  auto emptyLoop = b.beginFor(b.i32(5), b.i32(2), b.i32(1), {b.i32(42)});
  std::vector<Value*> untouched = b.endFor({b.add(emptyLoop.iterArgs[0], b.i32(1))});
  const std::vector<Value*> results = {swapped[0], swapped[1], swapped[2], untouched[0]};
  for (size_t i = 0; i < results.size(); ++i) b.store(b.addPtr(pints, b.i32(static_cast<int64_t>(i))), results[i]);
  support::Status built = b.finish();
  INFO(built.message());
  REQUIRE(built.isOk());

  constexpr int kRows = 5;
  std::vector<float> x(kRows * W), out(W);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i) - 1.3f;
  std::vector<int32_t> ints(4);
  InterpreterMemory memory;
  std::vector<KernelArgument> args = {PointerArg{memory.map(x.data(), x.size() * 4, "x")},
                                      PointerArg{memory.map(out.data(), W * 4, "out")},
                                      PointerArg{memory.map(ints.data(), 16, "ints")}, int64_t{kRows}};
  support::Status ran = interpretKernel(kernel, {}, args, memory);
  INFO(ran.message());
  REQUIRE(ran.isOk());
  for (int64_t w = 0; w < W; ++w) {
    float sum = 0;
    for (int r = 0; r < kRows; ++r) sum += x[r * W + w];
    CHECK(out[w] == sum);
  }
  CHECK(ints == std::vector<int32_t>{12, 200, 100, 42});
}

TEST_CASE("for loop with a non-positive step is an error", "[interp]") {
  Kernel kernel("bad_step");
  Value* step = kernel.addParameter(kI32, "step");
  Builder b(kernel);
  b.beginFor(b.i32(0), b.i32(10), step, {});
  b.endFor({});
  REQUIRE(b.finish().isOk());
  InterpreterMemory memory;
  support::Status status = interpretKernel(kernel, {}, {int64_t{0}}, memory);
  REQUIRE_FALSE(status.isOk());
  CHECK_THAT(status.message(), Catch::Contains("for step must be positive"));
  CHECK(interpretKernel(kernel, {}, {int64_t{4}}, memory).isOk());
}

TEST_CASE("if/else yields the results of the region that ran", "[interp]") {
  Kernel kernel("branch");
  Value* pout = kernel.addParameter(ptrTo(ScalarKind::F32), "out");
  Builder b(kernel);
  Value* pid = b.programId(0);
  b.beginIf(b.cmp(CmpPredicate::Lt, pid, b.i32(2)), {kF32});
  Value* thenValue = b.f32(1.5);
  b.beginElse({thenValue});
  Value* elseValue = b.mul(b.cast(pid, ScalarKind::F32), b.f32(-1.0));
  std::vector<Value*> result = b.endIf({elseValue});
  b.store(b.addPtr(pout, pid), result[0]);
  support::Status built = b.finish();
  INFO(built.message());
  REQUIRE(built.isOk());
  std::vector<float> out(4, 0.0f);
  InterpreterMemory memory;
  support::Status ran = interpretKernel(kernel, {4, 1, 1}, {PointerArg{memory.map(out.data(), 16, "out")}}, memory);
  INFO(ran.message());
  REQUIRE(ran.isOk());
  CHECK(out == std::vector<float>{1.5f, 1.5f, -2.0f, -3.0f});
}

TEST_CASE("programs run x fastest, then y, then z", "[interp]") {
  // Each program appends its id (x + 10y + 100z) to a log at position counter++.
  Kernel kernel("order");
  Value* pcounter = kernel.addParameter(ptrTo(ScalarKind::I32), "counter");
  Value* plog = kernel.addParameter(ptrTo(ScalarKind::I32), "log");
  Builder b(kernel);
  Value* id = b.add(b.add(b.programId(0), b.mul(b.programId(1), b.i32(10))), b.mul(b.programId(2), b.i32(100)));
  Value* sizes =
      b.add(b.numPrograms(0), b.add(b.mul(b.numPrograms(1), b.i32(10)), b.mul(b.numPrograms(2), b.i32(100))));
  Value* position = b.load(pcounter);
  b.store(b.addPtr(plog, position), b.add(b.mul(id, b.i32(1000)), sizes));
  b.store(pcounter, b.add(position, b.i32(1)));
  REQUIRE(b.finish().isOk());
  int32_t counter = 0;
  std::vector<int32_t> log(12);
  InterpreterMemory memory;
  support::Status ran = interpretKernel(
      kernel, {3, 2, 2},
      {PointerArg{memory.map(&counter, 4, "counter")}, PointerArg{memory.map(log.data(), 48, "log")}}, memory);
  INFO(ran.message());
  REQUIRE(ran.isOk());
  std::vector<int32_t> expected;
  for (int z = 0; z < 2; ++z)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 3; ++x) expected.push_back((x + 10 * y + 100 * z) * 1000 + 223);
  CHECK(log == expected);
}

TEST_CASE("tile rearrangement keeps row-major order", "[interp]") {
  Kernel kernel("rearrange");
  Value* pin = kernel.addParameter(ptrTo(ScalarKind::I32), "in");
  Value* ptransposed = kernel.addParameter(ptrTo(ScalarKind::I32), "transposed");
  Value* preshaped = kernel.addParameter(ptrTo(ScalarKind::I32), "reshaped");
  Builder b(kernel);
  Value* tile = b.load(pointersAt(b, pin, offsets2d(b, 2, 3, 3)));
  b.store(pointersAt(b, ptransposed, offsets2d(b, 3, 2, 2)), b.transpose(tile, {1, 0}));
  b.store(pointersAt(b, preshaped, offsets2d(b, 3, 2, 2)), b.reshape(tile, {3, 2}));
  support::Status built = b.finish();
  INFO(built.message());
  REQUIRE(built.isOk());
  std::vector<int32_t> in = {0, 1, 2, 3, 4, 5}, transposed(6), reshaped(6);
  InterpreterMemory memory;
  support::Status ran =
      interpretKernel(kernel, {},
                      {PointerArg{memory.map(in.data(), 24, "in")}, PointerArg{memory.map(transposed.data(), 24, "t")},
                       PointerArg{memory.map(reshaped.data(), 24, "r")}},
                      memory);
  INFO(ran.message());
  REQUIRE(ran.isOk());
  CHECK(transposed == std::vector<int32_t>{0, 3, 1, 4, 2, 5});
  CHECK(reshaped == in);
}

TEST_CASE("out-of-bounds accesses are errors naming the buffer, program and element", "[interp]") {
  Kernel kernel("overrun");
  Value* px = kernel.addParameter(ptrTo(ScalarKind::F32), "x");
  Value* pout = kernel.addParameter(ptrTo(ScalarKind::F32), "out");
  Value* shift = kernel.addParameter(kI32, "shift");
  Builder b(kernel);
  b.setLocation({"overrun.tir", 7, 3});
  Value* offsets = b.add(b.arange(0, 16), b.splat(b.add(b.mul(b.programId(0), b.i32(16)), shift), {16}));
  Value* x = b.load(pointersAt(b, px, offsets));
  b.store(pointersAt(b, pout, b.arange(0, 16)), x);
  REQUIRE(b.finish().isOk());
  std::vector<float> xs(24), out(16);
  InterpreterMemory memory;
  const uint64_t ax = memory.map(xs.data(), xs.size() * 4, "keys");
  const uint64_t aout = memory.map(out.data(), out.size() * 4, "out");
  SECTION("past the end") {
    support::Status status = interpretKernel(kernel, {2, 1, 1}, {PointerArg{ax}, PointerArg{aout}, int64_t{0}}, memory);
    REQUIRE_FALSE(status.isOk());
    const std::string message = status.message();
    CHECK_THAT(message, Catch::StartsWith("overrun.tir:7:3: error: load"));
    CHECK_THAT(message, Catch::Contains("program (1, 0, 0)"));
    CHECK_THAT(message, Catch::Contains("element 8"));
    CHECK_THAT(message, Catch::Contains("byte offset 96 of buffer 'keys' (96 bytes), past its end"));
  }
  SECTION("before the start") {
    support::Status status =
        interpretKernel(kernel, {1, 1, 1}, {PointerArg{ax}, PointerArg{aout}, int64_t{-2}}, memory);
    REQUIRE_FALSE(status.isOk());
    CHECK_THAT(status.message(), Catch::Contains("element 0"));
    CHECK_THAT(status.message(), Catch::Contains("8 bytes before the start of buffer 'keys'"));
  }
  SECTION("unmapped") {
    support::Status status =
        interpretKernel(kernel, {1, 1, 1}, {PointerArg{uint64_t{12345}}, PointerArg{aout}, int64_t{0}}, memory);
    REQUIRE_FALSE(status.isOk());
    CHECK_THAT(status.message(), Catch::Contains("in no mapped buffer"));
  }
}

TEST_CASE("pointers reinterpreted to a wider pointee read at their byte address and must stay aligned", "[interp]") {
  // f32 values at byte offset `start` of a byte buffer, read through the bytes'
  // pointers bitcast to f32 pointers (how per-token-head scales are read).
  Kernel kernel("reinterpret");
  Value* bytes = kernel.addParameter(ptrTo(ScalarKind::I8), "bytes");
  Value* pout = kernel.addParameter(ptrTo(ScalarKind::F32), "out");
  Value* start = kernel.addParameter(kI32, "start");
  Builder b(kernel);
  b.setLocation({"reinterpret.tir", 4, 3});
  Value* offsets = b.add(b.mul(b.arange(0, 4), b.splat(b.i32(8), {4})), b.splat(start, {4}));
  Value* floats = b.bitcast(pointersAt(b, bytes, offsets), ScalarKind::F32);
  b.store(pointersAt(b, pout, b.arange(0, 4)), b.load(floats));
  REQUIRE(b.finish().isOk());
  std::vector<uint8_t> row(32, 0);
  const float values[4] = {1.5f, -2.0f, 0.25f, 3.0e-5f};
  for (int i = 0; i < 4; ++i) std::memcpy(row.data() + 8 * i + 4, &values[i], 4);
  std::vector<float> out(4, 0.0f);
  InterpreterMemory memory;
  const uint64_t rowAddress = memory.map(row.data(), row.size(), "rows");
  const uint64_t outAddress = memory.map(out.data(), out.size() * 4, "out");
  SECTION("aligned") {
    support::Status status =
        interpretKernel(kernel, {1, 1, 1}, {PointerArg{rowAddress}, PointerArg{outAddress}, int64_t{4}}, memory);
    INFO(status.message());
    REQUIRE(status.isOk());
    CHECK(out == std::vector<float>{1.5f, -2.0f, 0.25f, 3.0e-5f});
  }
  SECTION("misaligned") {
    support::Status status =
        interpretKernel(kernel, {1, 1, 1}, {PointerArg{rowAddress}, PointerArg{outAddress}, int64_t{2}}, memory);
    REQUIRE_FALSE(status.isOk());
    CHECK_THAT(status.message(), Catch::StartsWith("reinterpret.tir:4:3: error: load"));
    CHECK_THAT(status.message(),
               Catch::Contains("element 0 of f32 is misaligned (the GPU needs 4-byte alignment): byte offset 2 of "
                               "buffer 'rows' (32 bytes)"));
  }
}

TEST_CASE("arguments must match the parameters", "[interp]") {
  Kernel kernel("typed");
  Value* px = kernel.addParameter(ptrTo(ScalarKind::F32), "x");
  Value* scale = kernel.addParameter(kF32, "scale");
  Value* count = kernel.addParameter(kI32, "count");
  Builder b(kernel);
  b.store(px, b.mul(scale, b.cast(count, ScalarKind::F32)));
  REQUIRE(b.finish().isOk());
  float x = 0;
  InterpreterMemory memory;
  const uint64_t ax = memory.map(&x, 4, "x");

  support::Status wrongKind = interpretKernel(kernel, {}, {int64_t{3}, 2.0, int64_t{3}}, memory);
  REQUIRE_FALSE(wrongKind.isOk());
  CHECK_THAT(wrongKind.message(), Catch::Contains("argument 0 ('x')"));
  CHECK_THAT(wrongKind.message(), Catch::Contains("expects a pointer"));
  support::Status floatForInt = interpretKernel(kernel, {}, {PointerArg{ax}, 2.0, 3.0}, memory);
  REQUIRE_FALSE(floatForInt.isOk());
  CHECK_THAT(floatForInt.message(), Catch::Contains("argument 2 ('count')"));
  support::Status tooFew = interpretKernel(kernel, {}, {PointerArg{ax}, 2.0}, memory);
  REQUIRE_FALSE(tooFew.isOk());
  CHECK_THAT(tooFew.message(), Catch::Contains("takes 3 arguments, got 2"));

  // Arguments are converted to the parameter types: f32 rounding, i32 wrapping.
  support::Status ok = interpretKernel(kernel, {}, {PointerArg{ax}, 0.1, int64_t{(int64_t{1} << 32) + 3}}, memory);
  INFO(ok.message());
  REQUIRE(ok.isOk());
  CHECK(x == 0.1f * 3.0f);
}
