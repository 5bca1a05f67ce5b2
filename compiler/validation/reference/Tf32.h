// TF32 rounding for the float64 references of kernels whose f32 dots run on the
// tensor cores: written from the format's definition (11 significant bits,
// to nearest, ties away from zero: PTX cvt.rna.tf32.f32 on normal numbers),
// independent of the compiler's own rounding code.
#pragma once

#include <cmath>
#include <vector>

namespace attnjit::validation::reference {

inline double roundToTf32(double x) {
  if (!std::isfinite(x) || x == 0) return x;
  int exponent = 0;
  const double mantissa = std::frexp(x, &exponent);  // |mantissa| in [0.5, 1)
  return std::ldexp(std::round(std::ldexp(mantissa, 11)), exponent - 11);
}

inline std::vector<double> roundedToTf32(const std::vector<double>& values) {
  std::vector<double> rounded(values.size());
  for (size_t i = 0; i < values.size(); ++i) rounded[i] = roundToTf32(values[i]);
  return rounded;
}

}  // namespace attnjit::validation::reference
