#include "compiler/validation/reference/ReduceSegmentsReference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace attnjit::validation::reference {

ReduceSegmentsOutputs referenceReduceSegments(const ReduceSegmentsInputs& in) {
  const size_t T = static_cast<size_t>(in.numTokens), H = static_cast<size_t>(in.numHeads),
               S = static_cast<size_t>(in.numSegments), D = static_cast<size_t>(in.headSize);
  const double negInf = -std::numeric_limits<double>::infinity();
  ReduceSegmentsOutputs out;
  out.output.assign(T * H * D, 0.0);
  out.lse.assign(T * H, negInf);
  for (size_t t = 0; t < T; ++t)
    for (size_t h = 0; h < H; ++h) {
      const size_t row = t * H + h;
      double m = negInf;
      for (size_t s = 0; s < S; ++s) m = std::max(m, in.segmentMaxima[row * S + s]);
      if (m == negInf) continue;  // no segment saw a key: out 0, lse -inf
      double sum = 0;
      double* o = &out.output[row * D];
      for (size_t s = 0; s < S; ++s) {
        const double segmentMax = in.segmentMaxima[row * S + s];
        if (segmentMax == negInf) continue;
        const double w = std::exp2(segmentMax - m);
        sum += w * in.segmentSums[row * S + s];
        const double* acc = &in.segmentOutputs[(row * S + s) * D];
        for (size_t d = 0; d < D; ++d) o[d] += w * acc[d];
      }
      for (size_t d = 0; d < D; ++d) o[d] /= sum;
      out.lse[row] = std::numbers::ln2 * (m + std::log2(sum));
    }
  return out;
}

}  // namespace attnjit::validation::reference
