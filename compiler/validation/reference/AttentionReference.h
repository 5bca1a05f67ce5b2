// Naive float64 attention over the logical (unpaged) problem: the reference every
// attention kernel is compared with. Deliberately the textbook formula — softmax with
// the row maximum subtracted, one query row at a time — and independent of the IR and
// the compiler, so a shared bug cannot cancel out.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace attnjit::validation::reference {

// A varlen batch of sequences. Sequence s owns query tokens
// [cuSeqlensQ[s], cuSeqlensQ[s+1]); they are its last query_len positions, after
// context_len = seqLens[s] - query_len tokens already present. Query head h reads
// KV head h / (numQueryHeads / numKvHeads).
struct AttentionInputs {
  int numQueryHeads = 0;
  int numKvHeads = 0;
  int headSize = 0;       // of q and k
  int valueHeadSize = 0;  // of v and the output; 0 = headSize (DiffKV sets it apart)
  std::vector<int> cuSeqlensQ;  // num_seqs + 1 entries, cuSeqlensQ[0] = 0, non-decreasing
  std::vector<int> seqLens;     // num_seqs entries: context + new query tokens
  // Causal: the query at position p (0-based in its sequence) sees keys 0..p.
  // Non-causal: every query sees all seqLens[s] keys.
  bool causal = true;
  // When not empty (num_seqs entries): sequence s is causal iff causalPerSequence[s]
  // (overrides `causal`).
  std::vector<bool> causalPerSequence;
  double scale = 1.0;     // multiplies q·k before the softmax
  // Optional score modifiers, all off by default. With p the query's absolute
  // position (context_len + its index) and j a key's:
  // - slidingWindow > 0: causal sees keys with p - j < slidingWindow (decoder window
  //   (sw-1, 0)); non-causal sees keys with |p - j| < slidingWindow (encoder window).
  int slidingWindow = 0;
  // - slidingWindowRight (non-causal rows): r > 0 sees keys with j - p < r; 0 the
  //   window's own extent (slidingWindow, or none without one); -1 no right bound.
  int slidingWindowRight = 0;
  // - attentionChunkSize > 0 (chunked local attention): only keys of the query's
  //   own chunk, j / attentionChunkSize == p / attentionChunkSize.
  int attentionChunkSize = 0;
  // - mmPrefixRanges (empty = off, else num_seqs lists): [first, last] position
  //   ranges (inclusive; first >= last: unused). A key outside the rules above is
  //   still visible when p and j lie in one range of the sequence.
  std::vector<std::vector<std::pair<int, int>>> mmPrefixRanges;
  // - qqBias (qqBiasColumns² entries, row-major; empty = off): query index i of
  //   its sequence's queries gets qqBias[i·n + k] added to its score for the key
  //   of query index k (position context_len + k), for i, k < n, after the
  //   modifiers below; -inf hides the key.
  std::vector<double> qqBias;
  int qqBiasColumns = 0;
  // - softcap > 0: the score s = scale·q·k becomes softcap·tanh(s / softcap).
  double softcap = 0;
  // - alibiSlopes (numQueryHeads entries, empty = off): adds slope[h]·(j - c) to the
  //   (capped) score, c = context_len: vLLM's bias. The textbook slope·(j - p) differs
  //   by slope·(p - c) per query, which cancels in the softmax except against a sink,
  //   so only with sinks does the choice matter; vLLM's is the one served.
  std::vector<double> alibiSlopes;
  // - alibiSqrt (with alibiSlopes): the bias is -slope[h]·sqrt(p - j) for keys at
  //   or before the query (j <= p) and 0 after it: vLLM's sqrt-ALiBi.
  bool alibiSqrt = false;
  // - sinks (numQueryHeads entries, empty = off): a logit that joins the softmax's
  //   denominator as exp(sink[h]) but contributes no value.
  std::vector<double> sinks;
  // tf32 dots (f32 kernels on the tensor cores): the operands the kernel rounds
  // to tf32 (11 significant bits, to nearest, ties away) are rounded here
  // too, before the float64 math: q for the scores, and keys and values when
  // the cache holds f32 (quantized caches hold values tf32 represents
  // exactly). The kernel's rounding of P before P·V is left to the tolerance.
  bool tf32Queries = false;
  bool tf32Cache = false;
  std::vector<double> q;  // [num_tokens][numQueryHeads][headSize]
  // Per sequence, [seqLens[s]][numKvHeads][headSize] (keys) and
  // [seqLens[s]][numKvHeads][value head size] (values).
  std::vector<std::vector<double>> keys;
  std::vector<std::vector<double>> values;
  int effectiveValueHeadSize() const { return valueHeadSize > 0 ? valueHeadSize : headSize; }
};

// Empty when `inputs` is consistent (sizes match, head counts divide, lengths
// valid); otherwise a message naming what is wrong.
std::string checkAttentionInputs(const AttentionInputs& inputs);

// out[t][h][d] (d < the value head size) = sum_j softmax_j(scale · q[t][h]·k[j]) · v[j][d] over the keys j
// visible to token t (scores modified as the optional fields above say). Inputs must pass checkAttentionInputs (checked; a violation
// aborts, since it is a bug in the caller's test code). A query that sees no key
// (impossible with query_len <= seq_len) would get 0.
//
// With tokenStride > 1 only every tokenStride-th token (and each sequence's last
// token) is computed; the other rows are NaN. Large benchmark shapes check a sample
// this way instead of spending minutes in float64.
//
// With `lse`, also the natural-log LSE of each (token, head), log(Σ_j exp(s_j)
// (+ exp(sink))), at lse[token · numQueryHeads + head] (NaN for unchecked tokens).
std::vector<double> referenceAttention(const AttentionInputs& inputs, int tokenStride = 1,
                                       std::vector<double>* lse = nullptr);

}  // namespace attnjit::validation::reference
