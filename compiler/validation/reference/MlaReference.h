// Float64 reference of MLA latent decode (vLLM's TRITON_MLA decode), written from
// the definition and independent of the IR and the compiler: for sequence b and
// query head h,
//   s_j  = scale · (q[b, h, :] · latent_b[j, :])          over the whole W = L + R row
//   out  = Σ_j softmax(s)_j · latent_b[j, :L]             (the value is the first L entries)
//   lse  = log Σ_j exp(s_j)                               (natural log)
// A sequence without keys gives out = 0 and lse = -inf.
#pragma once

#include <vector>

namespace attnjit::validation::reference {

struct MlaDecodeInputs {
  int numHeads = 0, kvLoraRank = 0, ropeDim = 0;
  double scale = 0;
  std::vector<double> q;                    // [B][H][L + R]
  std::vector<std::vector<double>> latent;  // per sequence: [seq_len][L + R]
  // f32 kernels on TF32 dots: q and an f32 latent cache are rounded to tf32
  // (reference/Tf32.h) before the float64 math, as the kernel rounds them
  // (an fp8 cache holds values tf32 represents).
  bool tf32Queries = false, tf32Latent = false;
};
struct MlaDecodeOutputs {
  std::vector<double> output;  // [B][H][L]
  std::vector<double> lse;     // [B][H]
};
// Sequences with b % checkStride != 0 (except the last) are skipped: their
// entries are NaN (large benchmark batches check a sample).
MlaDecodeOutputs referenceMlaDecode(const MlaDecodeInputs& inputs, int checkStride = 1);

}  // namespace attnjit::validation::reference
