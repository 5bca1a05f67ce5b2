// Float64 references of the companion kernels (merge_attn_states, merge_partials,
// the KV cache writes and their quantization), written from vLLM's definitions and independent of the IR
// and the compiler.
#pragma once

#include <cstdint>
#include <vector>

namespace attnjit::validation::reference {

// merge_attn_states over [numTokens][numHeads][headSize] outputs and
// [numHeads][numTokens] natural-log LSEs. An infinite LSE (either sign) means an
// empty key set; when both sides are empty the prefix output is taken and the LSE
// is -inf (vLLM's CUDA kernel). Tokens at or after `tokensWithContext` (when it is
// not negative) have no prefix: their output and LSE are the suffix's, the LSE as
// given (+inf included).
struct MergeInputs {
  int numTokens = 0, numHeads = 0, headSize = 0;
  std::vector<double> prefixOutput, suffixOutput;
  std::vector<double> prefixLse, suffixLse;
  int tokensWithContext = -1;
};
struct MergeOutputs {
  std::vector<double> output;  // [numTokens][numHeads][headSize]
  std::vector<double> lse;     // [numHeads][numTokens]
};
MergeOutputs referenceMergeAttnStates(const MergeInputs& inputs);

// The N-way merge (merge_partials) over partialOutputs [numPartials][numTokens]
// [numHeads][headSize] and partialLses [numPartials][numHeads][numTokens]:
// M = max finite LSE, w_i = exp(lse_i - M), out = Σ w_i o_i / Σ w_i, lse =
// log Σ w_i + M. Infinite LSEs are empty partials (weight 0, output ignored);
// all empty: partial 0's output and LSE -inf; any NaN LSE: output and LSE NaN.
struct MergePartialsInputs {
  int numPartials = 0, numTokens = 0, numHeads = 0, headSize = 0;
  std::vector<double> partialOutputs;
  std::vector<double> partialLses;
};
MergeOutputs referenceMergePartials(const MergePartialsInputs& inputs);

// vLLM's concat_and_cache_mla: token t's kv_c [kvLoraRank] ‖ k_pe [ropeDim] goes
// to cache slot slots[t] (slot -1: skipped). `scale` 0 stores the values as
// they are; otherwise each value is x / scale clamped to ±quantMax (the fp8
// format's largest finite value), before rounding to the cache type.
struct MlaCacheWriteInputs {
  int numTokens = 0, kvLoraRank = 0, ropeDim = 0;
  int64_t numSlots = 0;
  std::vector<double> kvC, kPe;  // [numTokens][kvLoraRank], [numTokens][ropeDim]
  std::vector<int64_t> slots;    // per token
  double scale = 0;
  double quantMax = 0;
};
struct MlaCacheRows {
  std::vector<int64_t> owner;   // per slot: the token written there, or -1
  std::vector<double> values;   // [numSlots][kvLoraRank + ropeDim], meaningful where owner >= 0
};
MlaCacheRows referenceMlaCacheWrite(const MlaCacheWriteInputs& inputs);

// vLLM's cp_gather_cache / gather_and_maybe_dequant_cache over the logical
// cache: sequence s contributes its rows at positions starts[s] ..
// starts[s] + counts[s] - 1, in sequence order, each value times `scale`
// (1 for a plain copy). The result is [Σ counts][entrySize].
struct GatherCacheInputs {
  int entrySize = 0;
  std::vector<std::vector<double>> rows;  // per sequence: [positions][entrySize], as stored
  std::vector<int> starts, counts;
  double scale = 1;
};
std::vector<double> referenceGatherCache(const GatherCacheInputs& inputs);

// vLLM's convert_fp8 of one element before any rounding: x / scale on the way
// to fp8, x · scale on the way back (the kernel then rounds to f32 and to the
// destination type; fp8 saturates).
double referenceConvertFp8(double x, double scale, bool toFp8);

// OCP fp8 decoding: e4m3fn (bias 7, no infinities, S.1111.111 = NaN) and e5m2
// (bias 15, IEEE-like).
double decodeFp8E4M3(uint8_t bits);
double decodeFp8E5M2(uint8_t bits);

enum class QuantFormat { Int8, Fp8E4M3, Fp8E5M2, Int4 };
// Largest magnitude of the format: 127, 448, 57344, 7.
double quantMax(QuantFormat format);
// Half the distance between neighbouring representable values around |y| (|y| at
// most quantMax): the largest error of rounding y to nearest.
double halfQuantStep(double y, QuantFormat format);
// Value of element d of an int4 row (two's-complement nibbles, element 2i in the
// low nibble of byte i, 2i + 1 in the high one).
double decodeInt4(const uint8_t* rowBytes, int d);
// The per-(token, head) scale vLLM stores: max|x| / QMAX computed in double, then
// rounded to float, floored at float(1e-6).
float perTokenHeadScale(const double* row, int n, QuantFormat format);

}  // namespace attnjit::validation::reference
