// Exact scalar numerics (ir/Numeric.h): every narrow float format is checked
// exhaustively against an independent decoder and a brute-force "nearest value,
// ties to even" rounding built from the table of all representable values.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

#include "ir/Numeric.h"

using namespace attnjit::ir;

namespace {

struct FormatSpec {
  ScalarKind kind;
  int exponentBits;
  int mantissaBits;
  int bias;
  bool ieeeSpecials;  // all-ones exponent is inf/NaN (false for e4m3fn: only S.1111.111 is NaN)
  bool saturates;
  double maxFinite;
};

const FormatSpec kFormats[] = {
    {ScalarKind::F16, 5, 10, 15, true, false, 65504.0},
    {ScalarKind::BF16, 8, 7, 127, true, false, 3.3895313892515355e38},
    {ScalarKind::F8E4M3, 4, 3, 7, false, true, 448.0},
    {ScalarKind::F8E5M2, 5, 2, 15, true, true, 57344.0},
};

int totalBits(const FormatSpec& f) { return 1 + f.exponentBits + f.mantissaBits; }

// Decodes with pow() straight from the format's definition.
double referenceDecode(uint32_t bits, const FormatSpec& f) {
  const uint32_t mantissa = bits & ((1u << f.mantissaBits) - 1);
  const uint32_t exponent = (bits >> f.mantissaBits) & ((1u << f.exponentBits) - 1);
  const bool negative = (bits >> (f.exponentBits + f.mantissaBits)) & 1;
  const uint32_t allOnes = (1u << f.exponentBits) - 1;
  double value = 0;
  if (f.ieeeSpecials && exponent == allOnes) {
    value = mantissa ? std::nan("") : std::numeric_limits<double>::infinity();
  } else if (!f.ieeeSpecials && exponent == allOnes && mantissa == (1u << f.mantissaBits) - 1) {
    value = std::nan("");
  } else if (exponent == 0) {
    value = mantissa * std::pow(2.0, 1 - f.bias - f.mantissaBits);
  } else {
    value = (1.0 + mantissa / std::pow(2.0, f.mantissaBits)) * std::pow(2.0, static_cast<int>(exponent) - f.bias);
  }
  return negative ? -value : value;
}

struct Representable {
  double value;
  uint32_t bits;
};

// All finite non-negative values of the format, ascending.
std::vector<Representable> positiveTable(const FormatSpec& f) {
  std::vector<Representable> table;
  const uint32_t signBit = 1u << (totalBits(f) - 1);
  for (uint32_t bits = 0; bits < signBit; ++bits) {
    const double v = referenceDecode(bits, f);
    if (std::isfinite(v)) table.push_back({v, bits});
  }
  std::sort(table.begin(), table.end(), [](const auto& a, const auto& b) { return a.value < b.value; });
  return table;
}

// Nearest representable value, ties to the even encoding; beyond the largest
// finite value, halfway to the next (nonexistent) step overflows.
double referenceRound(double x, const FormatSpec& f, const std::vector<Representable>& table) {
  if (std::isnan(x)) return x;
  const double magnitude = std::fabs(x);
  const double top = table.back().value;
  const double topStep = top - table[table.size() - 2].value;
  double result = 0;
  if (magnitude > top) {
    if (f.saturates) {
      result = top;
    } else {
      // The step above the top equals the top binade's step; the top's encoding is odd.
      result = magnitude >= top + topStep / 2 ? std::numeric_limits<double>::infinity() : top;
    }
  } else {
    auto upper = std::lower_bound(table.begin(), table.end(), magnitude,
                                  [](const Representable& r, double v) { return r.value < v; });
    if (upper->value == magnitude) {
      result = upper->value;
    } else {
      auto lower = upper - 1;
      const double below = magnitude - lower->value, above = upper->value - magnitude;
      if (below < above) result = lower->value;
      else if (above < below) result = upper->value;
      else result = (lower->bits & 1) == 0 ? lower->value : upper->value;
    }
  }
  return std::copysign(result, x);
}

bool sameValue(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

double bf16FromBits(uint32_t bits) { return std::bit_cast<float>(bits << 16); }

}  // namespace

TEST_CASE("decodeFloat matches the format definition for every bit pattern", "[numeric]") {
  for (const FormatSpec& f : kFormats) {
    INFO(scalarName(f.kind));
    const uint32_t count = 1u << totalBits(f);
    for (uint32_t bits = 0; bits < count; ++bits) {
      INFO("bits " << bits);
      REQUIRE(sameValue(decodeFloat(bits, f.kind), referenceDecode(bits, f)));
    }
  }
  // bf16 is the upper half of an f32.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) REQUIRE(sameValue(decodeFloat(bits, ScalarKind::BF16), bf16FromBits(bits)));
}

TEST_CASE("encodeFloat inverts decodeFloat for every bit pattern", "[numeric]") {
  for (const FormatSpec& f : kFormats) {
    INFO(scalarName(f.kind));
    const uint32_t count = 1u << totalBits(f);
    int nanCount = 0;
    for (uint32_t bits = 0; bits < count; ++bits) {
      const double value = decodeFloat(bits, f.kind);
      INFO("bits " << bits);
      if (std::isnan(value)) {
        ++nanCount;
        REQUIRE(std::isnan(decodeFloat(encodeFloat(value, f.kind), f.kind)));
        continue;
      }
      if (std::isinf(value) && f.saturates) {
        // satfinite: e5m2 decodes its infinity codes but conversions saturate.
        REQUIRE(decodeFloat(encodeFloat(value, f.kind), f.kind) == std::copysign(f.maxFinite, value));
        continue;
      }
      REQUIRE(encodeFloat(value, f.kind) == bits);
      REQUIRE(sameValue(roundToFloatKind(value, f.kind), value));
    }
    // e4m3fn has exactly two NaN codes and no infinities.
    if (f.kind == ScalarKind::F8E4M3) CHECK(nanCount == 2);
    if (f.kind == ScalarKind::F8E5M2) CHECK(nanCount == 6);
  }
}

TEST_CASE("rounding matches brute-force nearest-even at ties, near ties and at random", "[numeric]") {
  std::mt19937_64 rng(12345);
  for (const FormatSpec& f : kFormats) {
    INFO(scalarName(f.kind));
    const std::vector<Representable> table = positiveTable(f);
    std::vector<double> probes;
    for (size_t i = 0; i + 1 < table.size(); ++i) {
      const double mid = (table[i].value + table[i + 1].value) / 2;  // exact: one extra bit
      probes.push_back(mid);
      probes.push_back(std::nextafter(mid, 0.0));
      probes.push_back(std::nextafter(mid, 1e300));
    }
    const double top = table.back().value;
    const double topStep = top - table[table.size() - 2].value;
    for (double v : {top + topStep / 2, std::nextafter(top + topStep / 2, 0.0), top + topStep, top * 4, 1e300,
                     std::numeric_limits<double>::denorm_min(), table[1].value / 2, table[1].value / 3})
      probes.push_back(v);
    std::uniform_real_distribution<double> exponent(std::log2(table[1].value) - 2, std::log2(top) + 1);
    for (int i = 0; i < 20000; ++i) probes.push_back(std::exp2(exponent(rng)));
    for (double p : probes)
      for (double x : {p, -p}) {
        INFO("x = " << x);
        const double expected = referenceRound(x, f, table);
        REQUIRE(sameValue(roundToFloatKind(x, f.kind), expected));
        REQUIRE(sameValue(decodeFloat(encodeFloat(x, f.kind), f.kind), expected));
      }
  }
}

TEST_CASE("known constants of f16, bf16 and fp8", "[numeric]") {
  // bf16: 8 significant bits. 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even wins.
  CHECK(roundToFloatKind(1.00390625, ScalarKind::BF16) == 1.0);
  CHECK(roundToFloatKind(1.01171875, ScalarKind::BF16) == 1.015625);  // 1 + 3*2^-8: up to even 1 + 2^-6
  CHECK(encodeFloat(1.0, ScalarKind::BF16) == 0x3F80);
  CHECK(encodeFloat(-3.0, ScalarKind::BF16) == 0xC040);
  CHECK(std::isinf(roundToFloatKind(3.4e38, ScalarKind::BF16)));
  // Rounded once from double: through float the 2^-30 would be lost first and the
  // tie would go down to 1.
  CHECK(roundToFloatKind(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30), ScalarKind::BF16) == 1.0078125);

  CHECK(encodeFloat(1.0, ScalarKind::F16) == 0x3C00);
  CHECK(encodeFloat(65504.0, ScalarKind::F16) == 0x7BFF);
  CHECK(roundToFloatKind(65519.0, ScalarKind::F16) == 65504.0);
  CHECK(encodeFloat(65520.0, ScalarKind::F16) == 0x7C00);  // halfway to 65536: even is infinity
  CHECK(encodeFloat(-std::numeric_limits<double>::infinity(), ScalarKind::F16) == 0xFC00);
  CHECK(encodeFloat(-0.0, ScalarKind::F16) == 0x8000);
  CHECK(encodeFloat(std::ldexp(1.0, -24), ScalarKind::F16) == 0x0001);      // smallest subnormal
  CHECK(encodeFloat(std::ldexp(1.0, -25), ScalarKind::F16) == 0x0000);      // tie with 0: even
  CHECK(encodeFloat(std::ldexp(3.0, -25), ScalarKind::F16) == 0x0002);      // tie between 1 and 2 ulps: even
  CHECK(encodeFloat(std::ldexp(1.0, -14), ScalarKind::F16) == 0x0400);      // smallest normal
  CHECK(encodeFloat(std::ldexp(2047.0, -25), ScalarKind::F16) == 0x0400);   // tie 0x3FF / 0x400: even
  CHECK(decodeFloat(0x03FF, ScalarKind::F16) == std::ldexp(1023.0, -24));  // largest subnormal
  CHECK(encodeFloat(std::nan(""), ScalarKind::F16) == 0x7FFF);

  CHECK(encodeFloat(0.0625, ScalarKind::F8E4M3) == 0x18);
  CHECK(encodeFloat(1.0, ScalarKind::F8E4M3) == 0x38);
  CHECK(encodeFloat(448.0, ScalarKind::F8E4M3) == 0x7E);
  CHECK(encodeFloat(464.0, ScalarKind::F8E4M3) == 0x7E);  // halfway to 480 (which would be NaN): saturates
  CHECK(encodeFloat(1e9, ScalarKind::F8E4M3) == 0x7E);
  CHECK(encodeFloat(std::numeric_limits<double>::infinity(), ScalarKind::F8E4M3) == 0x7E);
  CHECK(encodeFloat(-std::numeric_limits<double>::infinity(), ScalarKind::F8E4M3) == 0xFE);
  CHECK(encodeFloat(std::nan(""), ScalarKind::F8E4M3) == 0x7F);
  CHECK(std::isnan(decodeFloat(0xFF, ScalarKind::F8E4M3)));
  CHECK(encodeFloat(std::ldexp(1.0, -9), ScalarKind::F8E4M3) == 0x01);
  CHECK(encodeFloat(std::ldexp(1.0, -10), ScalarKind::F8E4M3) == 0x00);
  CHECK(encodeFloat(std::ldexp(1.5, -10), ScalarKind::F8E4M3) == 0x01);
  CHECK(roundToFloatKind(-500.0, ScalarKind::F8E4M3) == -448.0);

  CHECK(encodeFloat(57344.0, ScalarKind::F8E5M2) == 0x7B);
  CHECK(encodeFloat(65536.0, ScalarKind::F8E5M2) == 0x7B);
  CHECK(encodeFloat(std::numeric_limits<double>::infinity(), ScalarKind::F8E5M2) == 0x7B);
  CHECK(std::isinf(decodeFloat(0x7C, ScalarKind::F8E5M2)));
  CHECK(encodeFloat(std::ldexp(1.0, -16), ScalarKind::F8E5M2) == 0x01);
  CHECK(encodeFloat(1.0, ScalarKind::F8E5M2) == 0x3C);
  CHECK(std::isnan(roundToFloatKind(std::nan(""), ScalarKind::F8E5M2)));
}

TEST_CASE("f32 and f64 rounding", "[numeric]") {
  CHECK(roundToFloatKind(0.1, ScalarKind::F64) == 0.1);
  CHECK(roundToFloatKind(0.1, ScalarKind::F32) == static_cast<double>(0.1f));
  CHECK(encodeFloat(1.0, ScalarKind::F32) == 0x3F800000u);
  CHECK(decodeFloat(0xC0000000u, ScalarKind::F32) == -2.0);
  CHECK(std::isinf(roundToFloatKind(1e39, ScalarKind::F32)));
}

TEST_CASE("intToFloatKind rounds once, even beyond 2^53", "[numeric]") {
  // 2^60 + 2^52 is halfway between two bf16 values (ulp 2^53): even is 2^60. One
  // more unit breaks the tie upward, which a detour through double would lose.
  const int64_t tie = (int64_t{1} << 60) + (int64_t{1} << 52);
  CHECK(intToFloatKind(tie, ScalarKind::BF16) == std::ldexp(1.0, 60));
  CHECK(intToFloatKind(tie + 1, ScalarKind::BF16) == std::ldexp(1.0, 60) + std::ldexp(1.0, 53));
  CHECK(intToFloatKind(-(tie + 1), ScalarKind::BF16) == -(std::ldexp(1.0, 60) + std::ldexp(1.0, 53)));
  CHECK(intToFloatKind(16777217, ScalarKind::F32) == 16777216.0);
  CHECK(intToFloatKind(2049, ScalarKind::F16) == 2048.0);
  CHECK(intToFloatKind(2051, ScalarKind::F16) == 2052.0);
  CHECK(intToFloatKind(100000, ScalarKind::F16) == std::numeric_limits<double>::infinity());
  CHECK(intToFloatKind(1000, ScalarKind::F8E4M3) == 448.0);
  CHECK(intToFloatKind(std::numeric_limits<int64_t>::min(), ScalarKind::F64) == -std::ldexp(1.0, 63));
  CHECK(intToFloatKind(-7, ScalarKind::F8E5M2) == -7.0);
}

TEST_CASE("roundToTf32 rounds to nearest, ties away from zero", "[numeric]") {
  const float one = 1.0f;
  CHECK(roundToTf32(one + std::ldexp(1.0f, -11)) == one + std::ldexp(1.0f, -10));  // tie: away (RNE would give 1)
  CHECK(roundToTf32(-(one + std::ldexp(1.0f, -11))) == -(one + std::ldexp(1.0f, -10)));
  CHECK(roundToTf32(one + std::ldexp(1.0f, -12)) == one);
  CHECK(roundToTf32(one + std::ldexp(3.0f, -12)) == one + std::ldexp(1.0f, -10));
  CHECK(roundToTf32(3.0f) == 3.0f);
  CHECK(std::isinf(roundToTf32(std::numeric_limits<float>::infinity())));
  CHECK(std::isnan(roundToTf32(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("floatToInt truncates and saturates", "[numeric]") {
  CHECK(floatToInt(3.7, ScalarKind::I32) == 3);
  CHECK(floatToInt(-3.7, ScalarKind::I32) == -3);
  CHECK(floatToInt(1e10, ScalarKind::I32) == 2147483647);
  CHECK(floatToInt(-1e10, ScalarKind::I32) == -2147483648LL);
  CHECK(floatToInt(2147483647.9, ScalarKind::I32) == 2147483647);
  CHECK(floatToInt(std::nan(""), ScalarKind::I32) == 0);
  CHECK(floatToInt(200.0, ScalarKind::I8) == 127);
  CHECK(floatToInt(-200.0, ScalarKind::I8) == -128);
  CHECK(floatToInt(-128.9, ScalarKind::I8) == -128);
  CHECK(floatToInt(40000.0, ScalarKind::I16) == 32767);
  CHECK(floatToInt(7.9, ScalarKind::I4) == 7);
  CHECK(floatToInt(-9.0, ScalarKind::I4) == -8);
  CHECK(floatToInt(1e19, ScalarKind::I64) == std::numeric_limits<int64_t>::max());
  CHECK(floatToInt(std::ldexp(1.0, 63), ScalarKind::I64) == std::numeric_limits<int64_t>::max());
  CHECK(floatToInt(-1e19, ScalarKind::I64) == std::numeric_limits<int64_t>::min());
  CHECK(floatToInt(std::numeric_limits<double>::infinity(), ScalarKind::I64) == std::numeric_limits<int64_t>::max());
  CHECK(floatToInt(std::ldexp(1.0, 62), ScalarKind::I64) == (int64_t{1} << 62));
  CHECK(floatToInt(0.5, ScalarKind::I1) == 1);
  CHECK(floatToInt(0.0, ScalarKind::I1) == 0);
  CHECK(floatToInt(-0.0, ScalarKind::I1) == 0);
  CHECK(floatToInt(std::nan(""), ScalarKind::I1) == 1);  // NaN != 0
}

TEST_CASE("wrapInt wraps and sign-extends to the kind's width", "[numeric]") {
  CHECK(wrapInt(200, ScalarKind::I8) == -56);
  CHECK(wrapInt(-129, ScalarKind::I8) == 127);
  CHECK(wrapInt(65535, ScalarKind::I16) == -1);
  CHECK(wrapInt(int64_t{1} << 31, ScalarKind::I32) == -(int64_t{1} << 31));
  CHECK(wrapInt(0x1'0000'0005LL, ScalarKind::I32) == 5);
  CHECK(wrapInt(std::numeric_limits<int64_t>::min(), ScalarKind::I64) == std::numeric_limits<int64_t>::min());
  CHECK(wrapInt(7, ScalarKind::I4) == 7);
  CHECK(wrapInt(8, ScalarKind::I4) == -8);
  CHECK(wrapInt(15, ScalarKind::I4) == -1);
  CHECK(wrapInt(-9, ScalarKind::I4) == 7);
  CHECK(wrapInt(2, ScalarKind::I1) == 0);
  CHECK(wrapInt(3, ScalarKind::I1) == 1);
  CHECK(wrapInt(-1, ScalarKind::I1) == 1);
}
