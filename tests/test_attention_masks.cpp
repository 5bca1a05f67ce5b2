// Masks and biases beyond the sliding window: chunked local attention (Llama 4's
// attention_chunk_size), vLLM's bidirectional multimodal ranges (mm_prefix_range)
// and tree attention's query-query bias (qq_bias). The float64 reference against
// softmaxes written out by hand, then the kernel on the interpreter against the
// reference in every tiling (decode, prefill tiles, split-KV), combined with the
// window, per-sequence causality and the other modifiers; names, parameters,
// validation and spec fields.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compiler/kernels/UnifiedAttention.h"
#include "compiler/spec/Spec.h"
#include "compiler/validation/AttentionProblem.h"
#include "compiler/validation/reference/AttentionReference.h"
#include "tests/test_attention_checks.h"

using attnjit::compiler::BatchShape;
using attnjit::compiler::buildUnifiedAttention;
using attnjit::compiler::UnifiedAttentionConfig;
using attnjit::ir::ScalarKind;
namespace reference = attnjit::validation::reference;
using attnjit::tests::mixedAttentionBatch;
using attnjit::tests::runAndCheck;

namespace {

UnifiedAttentionConfig gqaConfig(ScalarKind dtype, bool causal) {
  return attnjit::tests::gqaAttentionConfig(dtype, causal, 64);
}

// The op API's prefill tiling (128 rows over 8 warps, 64-key tiles).
UnifiedAttentionConfig prefillTiles(UnifiedAttentionConfig c) {
  c.blockMRows = 128;
  c.numWarps = 8;
  c.tileSize = 64;
  return c;
}

// One sequence of one head with D = 1, q = 0 (every raw score 0: visible keys
// weigh equally), `queries` new queries after the context, values v[j].
reference::AttentionInputs uniformProblem(std::vector<double> v, int queries) {
  reference::AttentionInputs in;
  in.numQueryHeads = 1;
  in.numKvHeads = 1;
  in.headSize = 1;
  in.cuSeqlensQ = {0, queries};
  in.seqLens = {static_cast<int>(v.size())};
  in.q.assign(static_cast<size_t>(queries), 0.0);
  in.keys = {std::vector<double>(v.size(), 1.0)};
  in.values = {std::move(v)};
  return in;
}

double mean(std::initializer_list<double> values) {
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

// A speculative-decoding batch: a few query tokens each after a long context,
// and one short prefill (a tree's tokens are queries of the same step).
BatchShape speculativeBatch(uint64_t seed) {
  BatchShape s;
  s.queryLens = {5, 8, 1, 7};
  s.contextLens = {130, 17, 64, 0};
  s.seed = seed;
  return s;
}

}  // namespace

// ---- The reference, against softmaxes written out by hand. ----

TEST_CASE("reference: chunked local attention sees only the query's own chunk", "[attention][masks]") {
  // Six keys, chunks of 4: queries at positions 3, 4, 5 (context 3).
  auto in = uniformProblem({1, 10, 100, 1000, 10000, 100000}, 3);
  in.attentionChunkSize = 4;
  std::vector<double> out = reference::referenceAttention(in);
  CHECK(out[0] == Approx(mean({1, 10, 100, 1000})));  // chunk 0, keys 0..3
  CHECK(out[1] == Approx(10000));                     // chunk 1 starts at 4: itself
  CHECK(out[2] == Approx(mean({10000, 100000})));
  // Non-causal: the whole chunk, later keys included.
  in.causal = false;
  out = reference::referenceAttention(in);
  CHECK(out[0] == Approx(mean({1, 10, 100, 1000})));
  CHECK(out[1] == Approx(mean({10000, 100000})));
  // With a window of 2 as well: the later of both starts.
  in.causal = true;
  in.slidingWindow = 2;
  out = reference::referenceAttention(in);
  CHECK(out[0] == Approx(mean({100, 1000})));
  CHECK(out[1] == Approx(10000));
  in.attentionChunkSize = -1;
  CHECK(reference::checkAttentionInputs(in) == "attentionChunkSize must not be negative");
}

TEST_CASE("reference: a bidirectional range opens its keys to its queries", "[attention][masks]") {
  // Six keys, all six positions are queries; range [1, 3] (inclusive), causal.
  auto in = uniformProblem({1, 10, 100, 1000, 10000, 100000}, 6);
  in.mmPrefixRanges = {{{1, 3}, {4, 4}}};  // the second is unused (first >= last)
  const std::vector<double> out = reference::referenceAttention(in);
  CHECK(out[0] == Approx(1));                                     // outside: causal
  CHECK(out[1] == Approx(mean({1, 10, 100, 1000})));              // keys 0..1 causal, 2..3 by the range
  CHECK(out[3] == Approx(mean({1, 10, 100, 1000})));              // the range's last position
  CHECK(out[4] == Approx(mean({1, 10, 100, 1000, 10000})));       // a single-position "range" does nothing
  // With a window of 1 the range still opens its keys (OR), the rest is the window.
  in.slidingWindow = 1;
  const std::vector<double> windowed = reference::referenceAttention(in);
  CHECK(windowed[0] == Approx(1));
  CHECK(windowed[2] == Approx(mean({10, 100, 1000})));
  CHECK(windowed[5] == Approx(100000));
  in.mmPrefixRanges = {{{1, 3}}, {{0, 1}}};
  CHECK(reference::checkAttentionInputs(in) == "mmPrefixRanges has 2 elements, expected 1");
}

TEST_CASE("reference: the query-query bias adds to the scores of query keys", "[attention][masks]") {
  // Context 2, three queries (positions 2..4); bias [3, 3]: row i, key of query k.
  auto in = uniformProblem({1, 10, 100, 1000, 10000}, 3);
  const double inf = std::numeric_limits<double>::infinity();
  in.qqBiasColumns = 3;
  in.qqBias = {0, 9, 9,                  // query 0 sees keys 0, 1 (context) and itself
               std::log(2.0), 0, 9,      // query 1: its key of query 0 weighs 2
               -inf, 0, 0};              // query 2: the key of query 0 hidden
  const std::vector<double> out = reference::referenceAttention(in);
  CHECK(out[0] == Approx(mean({1, 10, 100})));
  CHECK(out[1] == Approx((1 + 10 + 2 * 100 + 1000) / 5.0));
  CHECK(out[2] == Approx(mean({1, 10, 1000, 10000})));
  in.qqBias.pop_back();
  CHECK(reference::checkAttentionInputs(in) == "qqBias has 8 elements, expected 9");
}

// ---- The kernel on the interpreter against the reference. ----

TEST_CASE("chunked local attention: chunk sizes around tiles and blocks, every tiling", "[attention][masks]") {
  // 1: each query sees itself only; 7: inside a block; 16: a block; 32: a
  // decode tile; 33: a tile and one; 100: past the shorter sequences.
  for (int chunk : {1, 7, 16, 32, 33, 100}) {
    for (bool causal : {true, false}) {
      UnifiedAttentionConfig c = gqaConfig(ScalarKind::BF16, causal);
      c.attentionChunkSize = chunk;
      runAndCheck(c, mixedAttentionBatch(60 + static_cast<uint64_t>(chunk)), /*afterPasses=*/chunk == 33);
      runAndCheck(prefillTiles(c), mixedAttentionBatch(70 + static_cast<uint64_t>(chunk)));
    }
  }
  // With a window (the later start wins), sinks, ALiBi and softcap; f32.
  UnifiedAttentionConfig c = gqaConfig(ScalarKind::F32, true);
  c.attentionChunkSize = 24;
  c.slidingWindow = 10;
  c.sinks = true;
  c.alibi = true;
  c.softcap = 5;
  runAndCheck(c, mixedAttentionBatch(80));
  // Per-sequence causality: chunks bound the non-causal sequences on both sides.
  c = gqaConfig(ScalarKind::F16, false);
  c.perSequenceCausal = true;
  c.attentionChunkSize = 20;
  runAndCheck(c, mixedAttentionBatch(81), /*afterPasses=*/true);
}

TEST_CASE("chunked local attention: prefill tiles skip the mask on tiles every row sees", "[attention][masks]") {
  // Chunks that are multiples of the 64-key tile: programs inside one chunk run
  // its leading tiles unmasked; programs straddling a chunk start mask all.
  BatchShape longer;
  longer.queryLens = {300, 1, 130};
  longer.contextLens = {0, 500, 200};
  longer.seed = 83;
  for (int chunk : {128, 256}) {
    for (bool causal : {true, false}) {
      UnifiedAttentionConfig c = prefillTiles(gqaConfig(ScalarKind::BF16, causal));
      c.attentionChunkSize = chunk;
      runAndCheck(c, longer, /*afterPasses=*/chunk == 128);
    }
  }
  UnifiedAttentionConfig flagged = prefillTiles(gqaConfig(ScalarKind::BF16, false));
  flagged.perSequenceCausal = true;
  flagged.attentionChunkSize = 128;
  flagged.mmPrefixRanges = 2;
  runAndCheck(flagged, longer);
}

TEST_CASE("chunked local attention: decode reads nothing before its chunk, split or not", "[attention][masks]") {
  // The harness drops the block-table entries of blocks wholly before the
  // first query's chunk and fills the other hidden keys with NaN.
  BatchShape decode;
  decode.queryLens = {1, 1, 3};
  decode.contextLens = {300, 77, 129};
  decode.seed = 82;
  UnifiedAttentionConfig c = gqaConfig(ScalarKind::BF16, true);
  c.attentionChunkSize = 64;
  c.tileSize = 64;
  runAndCheck(c, decode);
  c.splitKv = true;
  c.outputLse = true;
  BatchShape split = decode;
  split.segmentTiles = 1;
  runAndCheck(c, split);
  split.numSegments = 3;  // cut on the GPU from each sequence's own range, at least a tile each
  runAndCheck(c, split, /*afterPasses=*/true);
}

TEST_CASE("bidirectional ranges: causal, non-causal, per sequence, with windows and chunks", "[attention][masks]") {
  for (int ranges : {1, 4}) {
    for (bool causal : {true, false}) {
      UnifiedAttentionConfig c = gqaConfig(ScalarKind::BF16, causal);
      c.mmPrefixRanges = ranges;
      runAndCheck(c, mixedAttentionBatch(90 + static_cast<uint64_t>(ranges)), /*afterPasses=*/ranges == 4);
      runAndCheck(prefillTiles(c), mixedAttentionBatch(92 + static_cast<uint64_t>(ranges)));
      // Ranges reaching keys before the window (and the poisoned keys the
      // harness leaves there only where no range reaches).
      c.slidingWindow = 9;
      runAndCheck(c, mixedAttentionBatch(94 + static_cast<uint64_t>(ranges)));
      c.slidingWindow = 0;
      c.attentionChunkSize = 16;
      runAndCheck(c, mixedAttentionBatch(96 + static_cast<uint64_t>(ranges)));
      runAndCheck(prefillTiles(c), mixedAttentionBatch(96 + static_cast<uint64_t>(ranges)));
    }
  }
  // Non-causal programs bounded by their chunk or window still walk to the end
  // of their rows' ranges (a fresh prefill whose first range starts at 0).
  BatchShape prefill;
  prefill.queryLens = {100, 37};
  prefill.contextLens = {0, 0};
  for (uint64_t seed = 110; seed < 114; ++seed) {
    prefill.seed = seed;
    UnifiedAttentionConfig bounded = gqaConfig(ScalarKind::BF16, false);
    bounded.mmPrefixRanges = 2;
    bounded.attentionChunkSize = 8;
    runAndCheck(bounded, prefill);
    bounded.attentionChunkSize = 0;
    bounded.slidingWindow = 5;
    runAndCheck(bounded, prefill);
  }
  UnifiedAttentionConfig c = gqaConfig(ScalarKind::F32, true);
  c.perSequenceCausal = true;
  c.mmPrefixRanges = 2;
  c.sinks = true;
  c.outputLse = true;
  runAndCheck(c, mixedAttentionBatch(98));
  // Split-KV: segments past a range's reach stay empty.
  c = gqaConfig(ScalarKind::BF16, true);
  c.mmPrefixRanges = 3;
  c.splitKv = true;
  BatchShape split = mixedAttentionBatch(99);
  split.segmentTiles = 1;
  runAndCheck(c, split);
}

TEST_CASE("query-query bias: speculative batches, prefill tiles, split-KV and other modifiers", "[attention][masks]") {
  for (ScalarKind dtype : {ScalarKind::F32, ScalarKind::BF16}) {
    for (bool causal : {true, false}) {
      UnifiedAttentionConfig c = gqaConfig(dtype, causal);
      c.qqBias = true;
      runAndCheck(c, speculativeBatch(100), /*afterPasses=*/dtype == ScalarKind::BF16);
      runAndCheck(c, mixedAttentionBatch(101));
    }
  }
  UnifiedAttentionConfig c = gqaConfig(ScalarKind::BF16, true);
  c.qqBias = true;
  runAndCheck(prefillTiles(c), mixedAttentionBatch(102));
  c.alibi = true;
  c.sinks = true;
  c.softcap = 20;
  c.slidingWindow = 40;
  runAndCheck(c, speculativeBatch(103));
  c = gqaConfig(ScalarKind::BF16, true);
  c.qqBias = true;
  c.mmPrefixRanges = 2;
  c.splitKv = true;
  c.outputLse = true;
  BatchShape split = speculativeBatch(104);
  split.segmentTiles = 2;
  runAndCheck(c, split);
}

// ---- Names, parameters, validation, spec fields. ----

TEST_CASE("masks: kernel names, parameters and validation", "[attention][masks]") {
  UnifiedAttentionConfig c = gqaConfig(ScalarKind::BF16, true);
  c.attentionChunkSize = 8192;
  c.mmPrefixRanges = 4;
  c.qqBias = true;
  c.outputLse = true;
  CHECK(c.kernelName() == "unified_attention_bf16_h8kv2_d64_bs16_causal_chunk8192_mm4_qqbias_lse");
  auto kernel = buildUnifiedAttention(c);
  REQUIRE(kernel.isOk());
  // out, q, kv_cache, block_tables, seq_lens, cu_seqlens_q, qq_bias,
  // mm_prefix_range, lse; scale ...; the strides, lse_stride_head, qq_bias_stride.
  CHECK((*kernel)->parameter(6)->name() == "qq_bias");
  CHECK((*kernel)->parameter(7)->name() == "mm_prefix_range");
  CHECK((*kernel)->parameter(8)->name() == "lse");
  const size_t last = (*kernel)->numParameters() - 1;
  CHECK((*kernel)->parameter(last - 1)->name() == "lse_stride_head");
  CHECK((*kernel)->parameter(last)->name() == "qq_bias_stride");

  c = gqaConfig(ScalarKind::BF16, true);
  c.attentionChunkSize = -3;
  CHECK(c.validate().diagnostic().message ==
        "attention_chunk_size (-3) must not be negative (0 turns chunked local attention off)");
  c.attentionChunkSize = 0;
  c.mmPrefixRanges = 33;
  CHECK(c.validate().diagnostic().message == "mm_prefix_ranges (33) must be between 0 (off) and 32 ranges per sequence");
  CHECK_FALSE(buildUnifiedAttention(c).isOk());
}

TEST_CASE("spec: attention_chunk_size, mm_prefix_ranges and qq_bias fields", "[spec][masks]") {
  const std::string base =
      "family: unified_attention\nparams:\n  dtype: bf16\n  num_query_heads: 8\n  num_kv_heads: 2\n"
      "  head_size: 64\n  block_size: 16\n  causal: true\n";
  auto spec = attnjit::compiler::loadSpecText(
      base + "  attention_chunk_size: 256\n  mm_prefix_ranges: [1, 2]\n  qq_bias: true\n", "m.yaml");
  REQUIRE(spec.isOk());
  REQUIRE(spec->variants.size() == 2);
  const UnifiedAttentionConfig& second = spec->variants[1].attention;
  CHECK(second.attentionChunkSize == 256);
  CHECK(second.mmPrefixRanges == 2);
  CHECK(second.qqBias);
  CHECK(attnjit::compiler::formatSpecParams(second).find(" attention_chunk_size=256 mm_prefix_ranges=2 qq_bias=true") !=
        std::string::npos);
  auto messageOf = [&](const std::string& extra) {
    auto s = attnjit::compiler::loadSpecText(base + extra, "m.yaml");
    return s.isOk() ? std::string("ok") : s.diagnostic().str();
  };
  CHECK(messageOf("  attention_chunk_size: -8\n").find("m.yaml:9:25: error: 'attention_chunk_size'") == 0);
  CHECK(messageOf("  mm_prefix_ranges: 40\n").find("mm_prefix_ranges (40) must be between 0 (off) and 32") !=
        std::string::npos);
  CHECK(messageOf("  qq_bias: yes please\n") == "m.yaml:9:12: error: 'qq_bias' must be true or false, got 'yes please'");
}
