// Small helpers shared by the companion problems (MergeAttnStatesProblem,
// CacheWriteProblem): typed host arrays over raw bytes, poison patterns, and a
// portable random stream.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "ir/Numeric.h"
#include "ir/Types.h"

namespace attnjit::validation::problem_data {

// Quiet-NaN bit pattern of a float kind; for 1-byte kinds 0x7F (NaN in e4m3, e5m2
// and a plausible int8 value: checks compare bits, not values).
inline uint32_t poisonBits(ir::ScalarKind kind) {
  switch (kind) {
    case ir::ScalarKind::F16: return 0x7E00;
    case ir::ScalarKind::BF16: return 0x7FC0;
    case ir::ScalarKind::F32: return 0x7FC00000;
    default: return 0x7F;
  }
}

inline size_t elementBytes(ir::ScalarKind kind) { return static_cast<size_t>(ir::storageBytes(kind)); }

inline uint32_t getBits(const std::vector<uint8_t>& bytes, ir::ScalarKind kind, size_t index) {
  uint32_t bits = 0;
  std::memcpy(&bits, &bytes[index * elementBytes(kind)], elementBytes(kind));  // little-endian host
  return bits;
}
inline void setBits(std::vector<uint8_t>& bytes, ir::ScalarKind kind, size_t index, uint32_t bits) {
  std::memcpy(&bytes[index * elementBytes(kind)], &bits, elementBytes(kind));
}
// A buffer of `elements` elements of `kind`, every one poisoned.
inline std::vector<uint8_t> poisonedBuffer(ir::ScalarKind kind, size_t elements) {
  std::vector<uint8_t> bytes(elements * elementBytes(kind));
  for (size_t i = 0; i < elements; ++i) setBits(bytes, kind, i, poisonBits(kind));
  return bytes;
}
inline double getFloat(const std::vector<uint8_t>& bytes, ir::ScalarKind kind, size_t index) {
  return ir::decodeFloat(getBits(bytes, kind, index), kind);
}
inline void setFloat(std::vector<uint8_t>& bytes, ir::ScalarKind kind, size_t index, double value) {
  setBits(bytes, kind, index, ir::encodeFloat(value, kind));
}

// Half of e4m3's spacing at magnitude x (e4m3fn: 3 mantissa bits, normal from
// 2^-6, subnormal spacing 2^-9): the most its round to nearest moves a value.
inline double halfE4m3Spacing(double x) {
  const int exponent = std::max(-6, std::ilogb(std::max(x, std::ldexp(1.0, -6))));
  return std::ldexp(1.0, exponent - 4);
}

// fp8 output holds e4m3(o / scale) saturated at ±448. Compared in o's units:
// got·scale against the reference clamped to ±448·scale, with the part of the
// difference e4m3's own rounding of a value within `tolerance` of the
// reference may account for (to subtract from the error).
struct Fp8OutputComparison {
  double got, want, roundingAllowance;
};
inline Fp8OutputComparison compareFp8Output(double gotE4m3, double want, double scale, double tolerance) {
  const double limit = 448 * scale;
  const double clamped = std::clamp(want, -limit, limit);
  return {gotE4m3 * scale, clamped, scale * halfE4m3Spacing((std::abs(clamped) + tolerance) / scale)};
}

// Deterministic uniform values from the engine's raw output (portable across
// standard libraries, unlike std::uniform_real_distribution).
class RandomStream {
 public:
  explicit RandomStream(uint64_t seed) : engine_(seed) {}
  double unit() { return (static_cast<double>(engine_() >> 11) + 0.5) * std::ldexp(1.0, -53); }  // (0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * unit(); }
  uint64_t below(uint64_t n) { return engine_() % n; }

 private:
  std::mt19937_64 engine_;
};

}  // namespace attnjit::validation::problem_data
