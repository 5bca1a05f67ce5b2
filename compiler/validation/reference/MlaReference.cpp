#include "compiler/validation/reference/MlaReference.h"
#include "compiler/validation/reference/Tf32.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnjit::validation::reference {

MlaDecodeOutputs referenceMlaDecode(const MlaDecodeInputs& inputs, int checkStride) {
  const size_t B = inputs.latent.size(), H = static_cast<size_t>(inputs.numHeads);
  const size_t L = static_cast<size_t>(inputs.kvLoraRank), W = L + static_cast<size_t>(inputs.ropeDim);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  MlaDecodeOutputs result;
  result.output.assign(B * H * L, nan);
  result.lse.assign(B * H, nan);
  const std::vector<double> tf32Q = inputs.tf32Queries ? roundedToTf32(inputs.q) : std::vector<double>();
  const std::vector<double>& queries = inputs.tf32Queries ? tf32Q : inputs.q;
  std::vector<double> tf32Latent;
  for (size_t b = 0; b < B; ++b) {
    if (b % static_cast<size_t>(std::max(1, checkStride)) != 0 && b + 1 != B) continue;
    if (inputs.tf32Latent) tf32Latent = roundedToTf32(inputs.latent[b]);
    const std::vector<double>& latent = inputs.tf32Latent ? tf32Latent : inputs.latent[b];
    const size_t keys = latent.size() / W;
    std::vector<double> scores(keys);
    for (size_t h = 0; h < H; ++h) {
      const double* q = &queries[(b * H + h) * W];
      double* out = &result.output[(b * H + h) * L];
      if (keys == 0) {
        std::fill(out, out + L, 0.0);
        result.lse[b * H + h] = -std::numeric_limits<double>::infinity();
        continue;
      }
      double maxScore = -std::numeric_limits<double>::infinity();
      for (size_t j = 0; j < keys; ++j) {
        double dot = 0;
        for (size_t d = 0; d < W; ++d) dot += q[d] * latent[j * W + d];
        scores[j] = inputs.scale * dot;
        maxScore = std::max(maxScore, scores[j]);
      }
      double sum = 0;
      std::fill(out, out + L, 0.0);
      for (size_t j = 0; j < keys; ++j) {
        const double weight = std::exp(scores[j] - maxScore);
        sum += weight;
        for (size_t d = 0; d < L; ++d) out[d] += weight * latent[j * W + d];
      }
      for (size_t d = 0; d < L; ++d) out[d] /= sum;
      result.lse[b * H + h] = maxScore + std::log(sum);
    }
  }
  return result;
}

}  // namespace attnjit::validation::reference
