#include "ir/Numeric.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "support/Diagnostics.h"

namespace attnjit::ir {

namespace {

// A binary floating-point format narrower than f32. One rounding routine,
// parameterized by this table, serves f16, bf16 and both fp8 kinds.
struct FloatFormat {
  int exponentBits;
  int mantissaBits;  // explicit (stored) fraction bits
  int bias;
  double maxFinite;
  // e4m3fn has no infinity: the all-ones exponent is a normal binade except for
  // the mantissa-all-ones NaN pattern.
  bool hasInfinity;
  // fp8 conversions saturate out-of-range values, infinities included
  // (PTX cvt.rn.satfinite); f16 and bf16 overflow to infinity.
  bool saturates;
  // The canonical NaN produced when encoding a NaN (what PTX cvt produces).
  uint32_t nanBits;

  int minNormalExponent() const { return 1 - bias; }
  uint32_t exponentMask() const { return (1u << exponentBits) - 1; }
  uint32_t mantissaMask() const { return (1u << mantissaBits) - 1; }
  int signShift() const { return exponentBits + mantissaBits; }
};

const FloatFormat kF16 = {5, 10, 15, 65504.0, true, false, 0x7FFF};
const FloatFormat kBF16 = {8, 7, 127, std::ldexp(255.0, 120), true, false, 0x7FFF};  // (2 - 2^-7) * 2^127
const FloatFormat kE4M3 = {4, 3, 7, 448.0, false, true, 0x7F};
const FloatFormat kE5M2 = {5, 2, 15, 57344.0, true, true, 0x7F};

const FloatFormat* narrowFormat(ScalarKind kind) {
  switch (kind) {
    case ScalarKind::F16:
      return &kF16;
    case ScalarKind::BF16:
      return &kBF16;
    case ScalarKind::F8E4M3:
      return &kE4M3;
    case ScalarKind::F8E5M2:
      return &kE5M2;
    default:
      return nullptr;
  }
}

// Rounds x to the format, ties to even. The value is scaled so that the target's
// quantum (the weight of its last mantissa bit at x's exponent, or at the minimum
// normal exponent for subnormals) becomes 1; scaling by a power of two is exact in
// double, so the integer rounding below sees x's exact value.
double roundToFormat(double x, const FloatFormat& format) {
  if (std::isnan(x)) return std::numeric_limits<double>::quiet_NaN();
  if (std::isinf(x)) return format.hasInfinity && !format.saturates ? x : std::copysign(format.maxFinite, x);
  if (x == 0) return x;
  const double magnitude = std::fabs(x);
  int frexpExponent = 0;
  std::frexp(magnitude, &frexpExponent);  // magnitude = m * 2^e, m in [0.5, 1)
  const int leadingBitExponent = frexpExponent - 1;
  const int quantumExponent = std::max(leadingBitExponent, format.minNormalExponent()) - format.mantissaBits;
  const double scaled = std::ldexp(magnitude, -quantumExponent);
  const double truncated = std::floor(scaled);
  const double fraction = scaled - truncated;
  double rounded = truncated;
  if (fraction > 0.5 || (fraction == 0.5 && std::fmod(truncated, 2.0) != 0)) rounded += 1;
  double result = std::ldexp(rounded, quantumExponent);
  if (result > format.maxFinite)
    result = format.saturates ? format.maxFinite : std::numeric_limits<double>::infinity();
  return std::copysign(result, x);
}

uint32_t encodeWithFormat(double x, const FloatFormat& format) {
  const double rounded = roundToFormat(x, format);
  if (std::isnan(rounded)) return format.nanBits;
  const uint32_t sign = std::signbit(rounded) ? 1u << format.signShift() : 0u;
  const double magnitude = std::fabs(rounded);
  if (std::isinf(magnitude)) return sign | (format.exponentMask() << format.mantissaBits);
  if (magnitude == 0) return sign;
  int frexpExponent = 0;
  std::frexp(magnitude, &frexpExponent);
  const int exponent = frexpExponent - 1;
  if (exponent < format.minNormalExponent()) {
    const auto mantissa =
        static_cast<uint32_t>(std::ldexp(magnitude, format.mantissaBits - format.minNormalExponent()));
    return sign | mantissa;
  }
  const auto biased = static_cast<uint32_t>(exponent + format.bias);
  const auto significand = static_cast<uint32_t>(std::ldexp(magnitude, format.mantissaBits - exponent));
  return sign | (biased << format.mantissaBits) | (significand & format.mantissaMask());
}

double decodeWithFormat(uint32_t bits, const FloatFormat& format) {
  const bool negative = (bits >> format.signShift()) & 1u;
  const uint32_t exponent = (bits >> format.mantissaBits) & format.exponentMask();
  const uint32_t mantissa = bits & format.mantissaMask();
  double magnitude = 0;
  if (format.hasInfinity && exponent == format.exponentMask()) {
    if (mantissa != 0) return std::numeric_limits<double>::quiet_NaN();
    magnitude = std::numeric_limits<double>::infinity();
  } else if (!format.hasInfinity && exponent == format.exponentMask() && mantissa == format.mantissaMask()) {
    return std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<double>(mantissa), format.minNormalExponent() - format.mantissaBits);
  } else {
    const double significand = static_cast<double>(mantissa | (1u << format.mantissaBits));
    magnitude = std::ldexp(significand, static_cast<int>(exponent) - format.bias - format.mantissaBits);
  }
  return negative ? -magnitude : magnitude;
}

// Fast path for the interpreter's hottest conversion: an f32 value (exact as
// float) to bf16 is round-to-nearest-even on the upper 16 bits of its encoding.
double roundFloatToBF16(float x) {
  if (std::isnan(x)) return std::numeric_limits<double>::quiet_NaN();
  uint32_t bits = std::bit_cast<uint32_t>(x);
  bits += 0x7FFFu + ((bits >> 16) & 1u);  // a carry into the exponent is the next binade (or infinity)
  return std::bit_cast<float>(bits & 0xFFFF0000u);
}

// Decoding tables for the formats with at most 16 bits other than bf16 (which is
// the upper half of an f32), built once from decodeWithFormat. Every value is
// exact as float.
template <size_t N>
std::vector<float> decodingTable(const FloatFormat& format) {
  std::vector<float> table(N);
  for (size_t bits = 0; bits < N; ++bits)
    table[bits] = static_cast<float>(decodeWithFormat(static_cast<uint32_t>(bits), format));
  return table;
}

}  // namespace

double roundToFloatKind(double x, ScalarKind kind) {
  if (kind == ScalarKind::F64) return x;
  if (kind == ScalarKind::F32) return static_cast<float>(x);
  if (kind == ScalarKind::BF16 && static_cast<double>(static_cast<float>(x)) == x)
    return roundFloatToBF16(static_cast<float>(x));
  const FloatFormat* format = narrowFormat(kind);
  ATTNJIT_CHECK(format != nullptr, std::string("roundToFloatKind on a non-float kind ") + scalarName(kind));
  return roundToFormat(x, *format);
}

uint32_t encodeFloat(double x, ScalarKind kind) {
  if (kind == ScalarKind::F32) return std::bit_cast<uint32_t>(static_cast<float>(x));
  const FloatFormat* format = narrowFormat(kind);
  ATTNJIT_CHECK(format != nullptr, std::string("encodeFloat: no 32-bit encoding for ") + scalarName(kind));
  return encodeWithFormat(x, *format);
}

double decodeFloat(uint32_t bits, ScalarKind kind) {
  switch (kind) {
    case ScalarKind::F32:
      return std::bit_cast<float>(bits);
    case ScalarKind::BF16:
      return std::bit_cast<float>((bits & 0xFFFFu) << 16);
    case ScalarKind::F16: {
      static const std::vector<float> table = decodingTable<0x10000>(kF16);
      return table[bits & 0xFFFFu];
    }
    case ScalarKind::F8E4M3: {
      static const std::vector<float> table = decodingTable<0x100>(kE4M3);
      return table[bits & 0xFFu];
    }
    case ScalarKind::F8E5M2: {
      static const std::vector<float> table = decodingTable<0x100>(kE5M2);
      return table[bits & 0xFFu];
    }
    default:
      break;
  }
  ATTNJIT_CHECK(false, std::string("decodeFloat: no 32-bit encoding for ") + scalarName(kind));
  return 0;
}

double intToFloatKind(int64_t x, ScalarKind kind) {
  ATTNJIT_CHECK(isFloat(kind), std::string("intToFloatKind to a non-float kind ") + scalarName(kind));
  if (kind == ScalarKind::F64) return static_cast<double>(x);
  if (kind == ScalarKind::F32) return static_cast<float>(x);
  // Beyond 2^53 the integer is first cut to 53 significant bits with the dropped
  // bits OR-ed into the last one (a sticky bit). The targets keep at most 11
  // significant bits, so the sticky bit decides ties exactly as the full integer
  // would, and the conversion to double is exact.
  const uint64_t magnitude = x < 0 ? uint64_t{0} - static_cast<uint64_t>(x) : static_cast<uint64_t>(x);
  const int excessBits = std::max(0, static_cast<int>(std::bit_width(magnitude)) - 53);
  uint64_t kept = magnitude >> excessBits;
  if (excessBits > 0 && (magnitude & ((uint64_t{1} << excessBits) - 1)) != 0) kept |= 1;
  const double shortened = std::ldexp(static_cast<double>(kept), excessBits);
  return roundToFloatKind(x < 0 ? -shortened : shortened, kind);
}

float roundToTf32(float x) {
  if (!std::isfinite(x)) return x;
  // Adding half of the last kept bit's weight to the magnitude bits and truncating
  // rounds ties away from zero (the sign bit is untouched; a carry into the
  // exponent is the correct next binade, up to infinity).
  constexpr uint32_t kDroppedBits = 13;  // 23 - 10
  uint32_t bits = std::bit_cast<uint32_t>(x);
  bits += uint32_t{1} << (kDroppedBits - 1);
  bits &= ~((uint32_t{1} << kDroppedBits) - 1);
  return std::bit_cast<float>(bits);
}

int64_t floatToInt(double x, ScalarKind kind) {
  ATTNJIT_CHECK(isInteger(kind), std::string("floatToInt to a non-integer kind ") + scalarName(kind));
  // Like `cmp ne` (unordered), NaN != 0 holds, so NaN converts to true.
  if (kind == ScalarKind::I1) return x != 0 ? 1 : 0;
  if (std::isnan(x)) return 0;
  const int bits = valueBits(kind);
  const double limit = std::ldexp(1.0, bits - 1);  // 2^(bits-1), exact
  const double truncated = std::trunc(x);
  if (truncated >= limit) return bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1;
  if (truncated <= -limit) return bits == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1));
  return static_cast<int64_t>(truncated);
}

int64_t wrapInt(int64_t x, ScalarKind kind) {
  ATTNJIT_CHECK(isInteger(kind), std::string("wrapInt to a non-integer kind ") + scalarName(kind));
  if (kind == ScalarKind::I1) return x & 1;
  const int bits = valueBits(kind);
  if (bits == 64) return x;
  const int unused = 64 - bits;
  return static_cast<int64_t>(static_cast<uint64_t>(x) << unused) >> unused;
}

}  // namespace attnjit::ir
