#include "compiler/validation/reference/CompanionReference.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnjit::validation::reference {

MergeOutputs referenceMergeAttnStates(const MergeInputs& in) {
  const size_t T = static_cast<size_t>(in.numTokens), H = static_cast<size_t>(in.numHeads),
               D = static_cast<size_t>(in.headSize);
  const double negInf = -std::numeric_limits<double>::infinity();
  MergeOutputs out;
  out.output.assign(T * H * D, 0.0);
  out.lse.assign(H * T, 0.0);
  for (size_t h = 0; h < H; ++h)
    for (size_t t = 0; t < T; ++t) {
      double p = in.prefixLse[h * T + t], s = in.suffixLse[h * T + t];
      if (in.tokensWithContext >= 0 && t >= static_cast<size_t>(in.tokensWithContext)) {
        const double* sRow = &in.suffixOutput[(t * H + h) * D];
        std::copy(sRow, sRow + D, &out.output[(t * H + h) * D]);
        out.lse[h * T + t] = s;
        continue;
      }
      if (std::isinf(p)) p = negInf;
      if (std::isinf(s)) s = negInf;
      const double* pOut = &in.prefixOutput[(t * H + h) * D];
      const double* sOut = &in.suffixOutput[(t * H + h) * D];
      double* o = &out.output[(t * H + h) * D];
      const double m = std::max(p, s);
      if (m == negInf) {
        std::copy(pOut, pOut + D, o);
        out.lse[h * T + t] = negInf;
        continue;
      }
      const double pWeight = std::exp(p - m), sWeight = std::exp(s - m);
      for (size_t d = 0; d < D; ++d) o[d] = (pOut[d] * pWeight + sOut[d] * sWeight) / (pWeight + sWeight);
      out.lse[h * T + t] = std::log(pWeight + sWeight) + m;
    }
  return out;
}

MergeOutputs referenceMergePartials(const MergePartialsInputs& in) {
  const size_t N = static_cast<size_t>(in.numPartials), T = static_cast<size_t>(in.numTokens),
               H = static_cast<size_t>(in.numHeads), D = static_cast<size_t>(in.headSize);
  const double negInf = -std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  MergeOutputs out;
  out.output.assign(T * H * D, 0.0);
  out.lse.assign(H * T, 0.0);
  auto partialRow = [&](size_t i, size_t t, size_t h) { return &in.partialOutputs[((i * T + t) * H + h) * D]; };
  for (size_t h = 0; h < H; ++h)
    for (size_t t = 0; t < T; ++t) {
      double* o = &out.output[(t * H + h) * D];
      double m = negInf;
      bool anyNan = false;
      for (size_t i = 0; i < N; ++i) {
        const double lse = in.partialLses[(i * H + h) * T + t];
        anyNan = anyNan || std::isnan(lse);
        if (std::isfinite(lse)) m = std::max(m, lse);
      }
      if (anyNan) {
        std::fill(o, o + D, nan);
        out.lse[h * T + t] = nan;
        continue;
      }
      if (m == negInf) {
        std::copy(partialRow(0, t, h), partialRow(0, t, h) + D, o);
        out.lse[h * T + t] = negInf;
        continue;
      }
      double weightSum = 0;
      for (size_t i = 0; i < N; ++i) {
        const double lse = in.partialLses[(i * H + h) * T + t];
        if (!std::isfinite(lse)) continue;
        const double w = std::exp(lse - m);
        weightSum += w;
        for (size_t d = 0; d < D; ++d) o[d] += w * partialRow(i, t, h)[d];
      }
      for (size_t d = 0; d < D; ++d) o[d] /= weightSum;
      out.lse[h * T + t] = std::log(weightSum) + m;
    }
  return out;
}

std::vector<double> referenceGatherCache(const GatherCacheInputs& in) {
  std::vector<double> out;
  const size_t width = static_cast<size_t>(in.entrySize);
  for (size_t s = 0; s < in.rows.size(); ++s)
    for (int i = 0; i < in.counts[s]; ++i) {
      const size_t position = static_cast<size_t>(in.starts[s] + i);
      for (size_t e = 0; e < width; ++e) out.push_back(in.rows[s][position * width + e] * in.scale);
    }
  return out;
}

double referenceConvertFp8(double x, double scale, bool toFp8) { return toFp8 ? x / scale : x * scale; }

MlaCacheRows referenceMlaCacheWrite(const MlaCacheWriteInputs& in) {
  const size_t L = static_cast<size_t>(in.kvLoraRank), R = static_cast<size_t>(in.ropeDim), W = L + R;
  MlaCacheRows rows;
  rows.owner.assign(static_cast<size_t>(in.numSlots), -1);
  rows.values.assign(static_cast<size_t>(in.numSlots) * W, 0.0);
  auto stored = [&](double x) {
    return in.scale == 0 ? x : std::clamp(x / in.scale, -in.quantMax, in.quantMax);
  };
  for (size_t t = 0; t < static_cast<size_t>(in.numTokens); ++t) {
    const int64_t slot = in.slots[t];
    if (slot < 0) continue;
    rows.owner[static_cast<size_t>(slot)] = static_cast<int64_t>(t);
    double* row = &rows.values[static_cast<size_t>(slot) * W];
    for (size_t l = 0; l < L; ++l) row[l] = stored(in.kvC[t * L + l]);
    for (size_t r = 0; r < R; ++r) row[L + r] = stored(in.kPe[t * R + r]);
  }
  return rows;
}

namespace {
double decodeFp8(uint8_t bits, int exponentBits, int bias, bool hasInfinity) {
  const int mantissaBits = 7 - exponentBits;
  const int sign = bits >> 7, exponent = (bits >> mantissaBits) & ((1 << exponentBits) - 1);
  const int mantissa = bits & ((1 << mantissaBits) - 1);
  const double signFactor = sign ? -1.0 : 1.0;
  const int maxExponent = (1 << exponentBits) - 1;
  if (hasInfinity && exponent == maxExponent)
    return mantissa == 0 ? signFactor * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  if (!hasInfinity && exponent == maxExponent && mantissa == (1 << mantissaBits) - 1)
    return std::numeric_limits<double>::quiet_NaN();
  if (exponent == 0) return signFactor * std::ldexp(mantissa, 1 - bias - mantissaBits);
  return signFactor * std::ldexp((1 << mantissaBits) + mantissa, exponent - bias - mantissaBits);
}
}  // namespace

double decodeFp8E4M3(uint8_t bits) { return decodeFp8(bits, 4, 7, false); }
double decodeFp8E5M2(uint8_t bits) { return decodeFp8(bits, 5, 15, true); }

double quantMax(QuantFormat format) {
  switch (format) {
    case QuantFormat::Int8: return 127;
    case QuantFormat::Fp8E4M3: return 448;
    case QuantFormat::Fp8E5M2: return 57344;
    case QuantFormat::Int4: return 7;
  }
  return 0;
}

double decodeInt4(const uint8_t* rowBytes, int d) {
  const int byte = rowBytes[d / 2];
  const int nibble = d % 2 == 0 ? byte & 0xF : byte >> 4;
  return nibble >= 8 ? nibble - 16 : nibble;
}

double halfQuantStep(double y, QuantFormat format) {
  if (format == QuantFormat::Int8 || format == QuantFormat::Int4) return 0.5;
  const int mantissaBits = format == QuantFormat::Fp8E4M3 ? 3 : 2;
  const int minNormalExponent = format == QuantFormat::Fp8E4M3 ? -6 : -14;
  const double a = std::abs(y);
  const int exponent = a > 0 ? std::max(static_cast<int>(std::floor(std::log2(a))), minNormalExponent)
                             : minNormalExponent;
  return std::ldexp(1.0, exponent - mantissaBits - 1);
}

float perTokenHeadScale(const double* row, int n, QuantFormat format) {
  double amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::abs(row[i]));
  return std::max(static_cast<float>(amax / quantMax(format)), 1e-6f);
}

}  // namespace attnjit::validation::reference
