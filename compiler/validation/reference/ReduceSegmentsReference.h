// Float64 reference of reduce_segments, stage 2 of split-KV attention (vLLM's
// reduce_segments), written from its definition and independent of the IR and
// the compiler.
#pragma once

#include <vector>

namespace attnjit::validation::reference {

// Per (token, head, segment) s: an unnormalized partial output acc_s [headSize],
// the segment's maximum score m_s in log2 units (-inf: the segment saw no key)
// and its sum l_s = Σ 2^(score - m_s). With M = max_s m_s and w_s = 2^(m_s - M):
//   out = Σ_s w_s·acc_s / Σ_s w_s·l_s,   lse = ln 2 · (M + log2 Σ_s w_s·l_s).
// Segments with m_s = -inf weigh nothing and their acc_s is not used. A row with
// every segment empty has out = 0 and lse = -inf.
struct ReduceSegmentsInputs {
  int numTokens = 0, numHeads = 0, numSegments = 0, headSize = 0;
  std::vector<double> segmentOutputs;  // [numTokens][numHeads][numSegments][headSize]
  std::vector<double> segmentMaxima;   // [numTokens][numHeads][numSegments]
  std::vector<double> segmentSums;     // [numTokens][numHeads][numSegments]
};
struct ReduceSegmentsOutputs {
  std::vector<double> output;  // [numTokens][numHeads][headSize]
  std::vector<double> lse;     // [numTokens][numHeads], natural log
};
ReduceSegmentsOutputs referenceReduceSegments(const ReduceSegmentsInputs& inputs);

}  // namespace attnjit::validation::reference
