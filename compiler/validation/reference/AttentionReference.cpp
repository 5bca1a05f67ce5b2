#include "compiler/validation/reference/AttentionReference.h"
#include "compiler/validation/reference/Tf32.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace attnjit::validation::reference {

namespace {
std::string describeMismatch(const char* what, size_t got, size_t expected) {
  return std::string(what) + " has " + std::to_string(got) + " elements, expected " + std::to_string(expected);
}
}  // namespace

std::string checkAttentionInputs(const AttentionInputs& in) {
  if (in.numKvHeads < 1) return "numKvHeads must be at least 1";
  if (in.numQueryHeads < 1 || in.numQueryHeads % in.numKvHeads != 0)
    return "numQueryHeads (" + std::to_string(in.numQueryHeads) + ") must be a positive multiple of numKvHeads (" +
           std::to_string(in.numKvHeads) + ")";
  if (in.headSize < 1) return "headSize must be at least 1";
  if (in.valueHeadSize < 0) return "valueHeadSize must not be negative (0 = headSize)";
  if (in.cuSeqlensQ.size() != in.seqLens.size() + 1)
    return describeMismatch("cuSeqlensQ", in.cuSeqlensQ.size(), in.seqLens.size() + 1);
  if (in.cuSeqlensQ.front() != 0) return "cuSeqlensQ[0] must be 0";
  const size_t numSeqs = in.seqLens.size();
  if (in.keys.size() != numSeqs) return describeMismatch("keys", in.keys.size(), numSeqs);
  if (in.values.size() != numSeqs) return describeMismatch("values", in.values.size(), numSeqs);
  if (!in.causalPerSequence.empty() && in.causalPerSequence.size() != numSeqs)
    return describeMismatch("causalPerSequence", in.causalPerSequence.size(), numSeqs);
  const size_t rowSize = static_cast<size_t>(in.headSize);
  const size_t valueRowSize = static_cast<size_t>(in.effectiveValueHeadSize());
  for (size_t s = 0; s < numSeqs; ++s) {
    const int queryLen = in.cuSeqlensQ[s + 1] - in.cuSeqlensQ[s];
    if (queryLen < 0) return "cuSeqlensQ decreases at sequence " + std::to_string(s);
    if (in.seqLens[s] < queryLen)
      return "sequence " + std::to_string(s) + ": seq_len " + std::to_string(in.seqLens[s]) +
             " is shorter than its query_len " + std::to_string(queryLen);
    const size_t kvSize = static_cast<size_t>(in.seqLens[s]) * static_cast<size_t>(in.numKvHeads) * rowSize;
    if (in.keys[s].size() != kvSize) return describeMismatch("keys of a sequence", in.keys[s].size(), kvSize);
    const size_t valuesSize = kvSize / rowSize * valueRowSize;
    if (in.values[s].size() != valuesSize)
      return describeMismatch("values of a sequence", in.values[s].size(), valuesSize);
  }
  if (in.slidingWindow < 0) return "slidingWindow must not be negative";
  if (in.attentionChunkSize < 0) return "attentionChunkSize must not be negative";
  if (!in.mmPrefixRanges.empty() && in.mmPrefixRanges.size() != numSeqs)
    return describeMismatch("mmPrefixRanges", in.mmPrefixRanges.size(), numSeqs);
  if (in.qqBiasColumns < 0 ||
      in.qqBias.size() != static_cast<size_t>(in.qqBiasColumns) * static_cast<size_t>(in.qqBiasColumns))
    return describeMismatch("qqBias", in.qqBias.size(),
                            static_cast<size_t>(in.qqBiasColumns) * static_cast<size_t>(std::max(in.qqBiasColumns, 0)));
  if (!(in.softcap >= 0) || !std::isfinite(in.softcap)) return "softcap must be a finite number >= 0";
  if (!in.alibiSlopes.empty() && in.alibiSlopes.size() != static_cast<size_t>(in.numQueryHeads))
    return describeMismatch("alibiSlopes", in.alibiSlopes.size(), static_cast<size_t>(in.numQueryHeads));
  if (in.alibiSqrt && in.alibiSlopes.empty()) return "alibiSqrt needs alibiSlopes";
  if (!in.sinks.empty() && in.sinks.size() != static_cast<size_t>(in.numQueryHeads))
    return describeMismatch("sinks", in.sinks.size(), static_cast<size_t>(in.numQueryHeads));
  const size_t qSize = static_cast<size_t>(in.cuSeqlensQ.back()) * static_cast<size_t>(in.numQueryHeads) * rowSize;
  if (in.q.size() != qSize) return describeMismatch("q", in.q.size(), qSize);
  return {};
}

std::vector<double> referenceAttention(const AttentionInputs& in, int tokenStride, std::vector<double>* lse) {
  const std::string problem = checkAttentionInputs(in);
  if (!problem.empty()) {
    std::fprintf(stderr, "referenceAttention: invalid inputs: %s\n", problem.c_str());
    std::abort();
  }
  const size_t D = static_cast<size_t>(in.headSize);
  const size_t Dv = static_cast<size_t>(in.effectiveValueHeadSize());
  const size_t Hq = static_cast<size_t>(in.numQueryHeads);
  const size_t Hkv = static_cast<size_t>(in.numKvHeads);
  const size_t queriesPerKv = Hq / Hkv;
  std::vector<double> out(in.q.size() / D * Dv, 0.0);
  if (lse) lse->assign(in.q.size() / D, std::numeric_limits<double>::quiet_NaN());
  std::vector<double> scores;
  const std::vector<double> tf32Q = in.tf32Queries ? roundedToTf32(in.q) : std::vector<double>();
  const std::vector<double>& queries = in.tf32Queries ? tf32Q : in.q;
  std::vector<double> tf32Keys, tf32Values;

  for (size_t s = 0; s + 1 < in.cuSeqlensQ.size(); ++s) {
    if (in.tf32Cache) {
      tf32Keys = roundedToTf32(in.keys[s]);
      tf32Values = roundedToTf32(in.values[s]);
    }
    const std::vector<double>& keys = in.tf32Cache ? tf32Keys : in.keys[s];
    const std::vector<double>& values = in.tf32Cache ? tf32Values : in.values[s];
    const size_t firstToken = static_cast<size_t>(in.cuSeqlensQ[s]);
    const size_t queryLen = static_cast<size_t>(in.cuSeqlensQ[s + 1]) - firstToken;
    const size_t seqLen = static_cast<size_t>(in.seqLens[s]);
    const size_t contextLen = seqLen - queryLen;
    for (size_t i = 0; i < queryLen; ++i) {
      const size_t token = firstToken + i;
      if (tokenStride > 1 && token % static_cast<size_t>(tokenStride) != 0 && i + 1 != queryLen) {
        std::fill(&out[token * Hq * Dv], &out[(token + 1) * Hq * Dv], std::numeric_limits<double>::quiet_NaN());
        continue;
      }
      // The rules give the interval [firstKey, endKey); a range may add keys.
      const size_t position = contextLen + i;
      size_t firstKey = 0;
      const bool causal = in.causalPerSequence.empty() ? in.causal : in.causalPerSequence[s];
      size_t endKey = causal ? position + 1 : seqLen;
      if (in.slidingWindow > 0) {
        const size_t window = static_cast<size_t>(in.slidingWindow);
        firstKey = position + 1 > window ? position + 1 - window : 0;
      }
      const int right = in.slidingWindowRight != 0 ? in.slidingWindowRight : in.slidingWindow;
      if (!causal && right > 0) endKey = std::min(seqLen, position + static_cast<size_t>(right));
      if (in.attentionChunkSize > 0) {
        const size_t chunk = static_cast<size_t>(in.attentionChunkSize);
        firstKey = std::max(firstKey, position / chunk * chunk);
        endKey = std::min(endKey, (position / chunk + 1) * chunk);
      }
      auto visible = [&](size_t j) {
        if (j >= firstKey && j < endKey) return true;
        if (in.mmPrefixRanges.empty()) return false;
        const auto p = static_cast<long long>(position), key = static_cast<long long>(j);
        for (const auto& [first, last] : in.mmPrefixRanges[s])
          if (first < last && p >= first && p <= last && key >= first && key <= last) return true;
        return false;
      };
      for (size_t h = 0; h < Hq; ++h) {
        const size_t kvHead = h / queriesPerKv;
        const double* q = &queries[(token * Hq + h) * D];
        // Invisible keys keep -inf (weight 0).
        scores.assign(seqLen, -std::numeric_limits<double>::infinity());
        double maxScore = in.sinks.empty() ? -std::numeric_limits<double>::infinity() : in.sinks[h];
        for (size_t j = 0; j < seqLen; ++j) {
          if (!visible(j)) continue;
          const double* k = &keys[(j * Hkv + kvHead) * D];
          double dot = 0;
          for (size_t d = 0; d < D; ++d) dot += q[d] * k[d];
          double score = dot * in.scale;
          if (in.softcap > 0) score = in.softcap * std::tanh(score / in.softcap);
          if (!in.alibiSlopes.empty() && in.alibiSqrt)
            score -= j <= position ? in.alibiSlopes[h] * std::sqrt(static_cast<double>(position - j)) : 0.0;
          else if (!in.alibiSlopes.empty())
            score += in.alibiSlopes[h] * (static_cast<double>(j) - static_cast<double>(contextLen));
          const size_t n = static_cast<size_t>(in.qqBiasColumns);
          if (!in.qqBias.empty() && i < n && j >= contextLen && j - contextLen < n)
            score += in.qqBias[i * n + (j - contextLen)];
          scores[j] = score;
          maxScore = std::max(maxScore, score);
        }
        double denominator = in.sinks.empty() ? 0.0 : std::exp(in.sinks[h] - maxScore);
        for (double& score : scores) {
          score = std::isinf(score) && score < 0 ? 0.0 : std::exp(score - maxScore);
          denominator += score;
        }
        if (lse) (*lse)[token * Hq + h] = maxScore + std::log(denominator);
        double* o = &out[(token * Hq + h) * Dv];
        for (size_t j = 0; j < seqLen; ++j) {
          if (scores[j] == 0.0) continue;
          const double* v = &values[(j * Hkv + kvHead) * Dv];
          const double weight = scores[j] / denominator;
          for (size_t d = 0; d < Dv; ++d) o[d] += weight * v[d];
        }
      }
    }
  }
  return out;
}

}  // namespace attnjit::validation::reference
