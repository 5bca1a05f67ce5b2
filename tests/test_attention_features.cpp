// The optional score modifiers of unified attention (sliding window, softcap,
// ALiBi, sinks): the float64 reference against hand-computed softmaxes, the kernel
// on the interpreter against the reference (alone, combined, after the pass
// pipeline), kernel names and parameters, validation and spec fields.
#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "compiler/validation/AttentionProblem.h"
#include "compiler/spec/Spec.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "ir/Printer.h"
#include "compiler/validation/reference/AttentionReference.h"
#include "tests/test_attention_checks.h"

namespace validation = attnjit::validation;

using attnjit::compiler::BatchShape;
using attnjit::compiler::buildUnifiedAttention;
using attnjit::validation::runUnifiedAttentionInterpreted;
using attnjit::compiler::UnifiedAttentionConfig;
using attnjit::ir::ScalarKind;
namespace reference = attnjit::validation::reference;
using attnjit::tests::mixedAttentionBatch;
using attnjit::tests::runAndCheck;

namespace {

// Head size 80: padded to 128 and masked.
UnifiedAttentionConfig gqaConfig(ScalarKind dtype, bool causal) {
  return attnjit::tests::gqaAttentionConfig(dtype, causal, 80);
}

std::string validationError(const UnifiedAttentionConfig& c) {
  auto s = c.validate();
  return s ? std::string("ok") : s.diagnostic().message;
}

// One sequence of one head with D = 1: keys k[j], values v[j], query q at the
// last position (context = keys - 1).
reference::AttentionInputs tinyProblem(double q, std::vector<double> k, std::vector<double> v) {
  reference::AttentionInputs in;
  in.numQueryHeads = 1;
  in.numKvHeads = 1;
  in.headSize = 1;
  in.cuSeqlensQ = {0, 1};
  in.seqLens = {static_cast<int>(k.size())};
  in.q = {q};
  in.keys = {std::move(k)};
  in.values = {std::move(v)};
  return in;
}

}  // namespace

// ---- The reference, against softmaxes written out by hand. ----

TEST_CASE("reference: a sink joins the denominator without a value", "[attention][features]") {
  auto in = tinyProblem(1.0, {2.0}, {0.5});
  in.sinks = {1.0};
  // One key with score 2 and a sink of 1: weight e^2 / (e^2 + e^1).
  const double expected = 0.5 * std::exp(2.0) / (std::exp(2.0) + std::exp(1.0));
  CHECK(reference::referenceAttention(in)[0] == Approx(expected).epsilon(1e-14));
}

TEST_CASE("reference: softcap bounds the scores with c·tanh(s/c)", "[attention][features]") {
  auto in = tinyProblem(1.0, {3.0, -1.0}, {1.0, -1.0});
  in.causal = false;
  in.softcap = 2.0;
  const double s0 = 2.0 * std::tanh(1.5), s1 = 2.0 * std::tanh(-0.5);
  const double expected = (std::exp(s0) - std::exp(s1)) / (std::exp(s0) + std::exp(s1));
  CHECK(reference::referenceAttention(in)[0] == Approx(expected).epsilon(1e-14));
}

TEST_CASE("reference: ALiBi adds vLLM's slope·(j - context_len)", "[attention][features]") {
  // q = 0: all raw scores are 0; the query is at p = 2 = context_len; slope ln 2
  // gives weights 2^-2, 2^-1, 2^0 for keys 0, 1, 2.
  auto in = tinyProblem(0.0, {1.0, 1.0, 1.0}, {4.0, 2.0, 1.0});
  in.alibiSlopes = {std::log(2.0)};
  const double expected = (0.25 * 4.0 + 0.5 * 2.0 + 1.0 * 1.0) / 1.75;
  CHECK(reference::referenceAttention(in)[0] == Approx(expected).epsilon(1e-14));

  // Against a sink the bias's origin matters: two new queries over no context
  // (context_len 0), the second at p = 1 sees keys 0 and 1 with biases 0 and ln 2
  // (vLLM's j - context_len; the textbook j - p would give -ln 2 and 0), and the
  // sink logit 0 weighs 1.
  in = tinyProblem(0.0, {1.0, 1.0}, {3.0, 5.0});
  in.cuSeqlensQ = {0, 2};
  in.q = {0.0, 0.0};
  in.alibiSlopes = {std::log(2.0)};
  in.sinks = {0.0};
  const std::vector<double> out = reference::referenceAttention(in);
  CHECK(out[0] == Approx(3.0 / 2).epsilon(1e-14));               // key 0 (weight 1) and the sink (1)
  CHECK(out[1] == Approx((3.0 + 2 * 5.0) / 4).epsilon(1e-14));  // keys 0, 1 (1, 2) and the sink (1)
}

TEST_CASE("reference: sqrt-ALiBi subtracts slope·sqrt(p - j) up to the query, nothing after it",
          "[attention][features]") {
  // q = 0: raw scores 0. The query at p = 2 (context 2) sees keys 0, 1, 2 at
  // distances 2, 1, 0: with slope 1 their weights are e^-sqrt(2), e^-1, 1.
  auto in = tinyProblem(0.0, {1.0, 1.0, 1.0}, {4.0, 2.0, 1.0});
  in.alibiSlopes = {1.0};
  in.alibiSqrt = true;
  const double w0 = std::exp(-std::sqrt(2.0)), w1 = std::exp(-1.0);
  CHECK(reference::referenceAttention(in)[0] == Approx((w0 * 4.0 + w1 * 2.0 + 1.0) / (w0 + w1 + 1.0)).epsilon(1e-14));

  // Bidirectional: the first of two new queries (p = 0) also sees key 1, after
  // it, with no bias; key 0 is at distance 0. Both weigh 1, as the sink (0) does.
  in = tinyProblem(0.0, {1.0, 1.0}, {3.0, 5.0});
  in.cuSeqlensQ = {0, 2};
  in.q = {0.0, 0.0};
  in.causal = false;
  in.alibiSlopes = {std::log(2.0)};
  in.alibiSqrt = true;
  in.sinks = {0.0};
  const std::vector<double> out = reference::referenceAttention(in);
  CHECK(out[0] == Approx((3.0 + 5.0) / 3).epsilon(1e-14));
  // The second (p = 1): key 0 at distance 1 weighs 2^-1, key 1 weighs 1.
  CHECK(out[1] == Approx((0.5 * 3.0 + 5.0) / 2.5).epsilon(1e-14));

  in.alibiSlopes.clear();
  CHECK(reference::checkAttentionInputs(in) == "alibiSqrt needs alibiSlopes");
}

TEST_CASE("reference: decoder and encoder sliding windows", "[attention][features]") {
  // Four keys, queries at positions 2 and 3 (context 2); q = 0, so visible keys are
  // averaged uniformly.
  reference::AttentionInputs in = tinyProblem(0.0, {0.0, 0.0, 0.0, 0.0}, {1.0, 10.0, 100.0, 1000.0});
  in.cuSeqlensQ = {0, 2};
  in.q = {0.0, 0.0};
  in.slidingWindow = 2;
  // Causal, window 2: position 2 sees keys 1, 2; position 3 sees keys 2, 3.
  std::vector<double> out = reference::referenceAttention(in);
  CHECK(out[0] == Approx(55.0));
  CHECK(out[1] == Approx(550.0));
  // Encoder window 2: |p - j| < 2: position 2 sees 1, 2, 3; position 3 sees 2, 3.
  in.causal = false;
  out = reference::referenceAttention(in);
  CHECK(out[0] == Approx(1110.0 / 3));
  CHECK(out[1] == Approx(550.0));
  // Window 1: each query sees only itself.
  in.slidingWindow = 1;
  out = reference::referenceAttention(in);
  CHECK(out[0] == Approx(100.0));
  CHECK(out[1] == Approx(1000.0));
}

TEST_CASE("reference: feature inputs of the wrong size are rejected", "[attention][features]") {
  auto in = tinyProblem(1.0, {1.0}, {1.0});
  in.sinks = {1.0, 2.0};
  CHECK(reference::checkAttentionInputs(in) == "sinks has 2 elements, expected 1");
  in.sinks.clear();
  in.alibiSlopes = {1.0, 2.0};
  CHECK(reference::checkAttentionInputs(in) == "alibiSlopes has 2 elements, expected 1");
  in.alibiSlopes.clear();
  in.slidingWindow = -1;
  CHECK(reference::checkAttentionInputs(in) == "slidingWindow must not be negative");
}

// ---- The kernel on the interpreter against the reference. ----

TEST_CASE("unified attention features: each alone, f32 and bf16, causal and not", "[attention][features]") {
  for (ScalarKind dtype : {ScalarKind::F32, ScalarKind::BF16}) {
    for (bool causal : {true, false}) {
      UnifiedAttentionConfig c = gqaConfig(dtype, causal);
      c.slidingWindow = 20;  // smaller than a tile
      runAndCheck(c, mixedAttentionBatch(1));
      c = gqaConfig(dtype, causal);
      c.softcap = 0.5;  // small enough to bend the scores (|s| reaches ~1)
      runAndCheck(c, mixedAttentionBatch(2));
      c = gqaConfig(dtype, causal);
      c.alibi = true;
      runAndCheck(c, mixedAttentionBatch(3));
      c = gqaConfig(dtype, causal);
      c.sinks = true;
      runAndCheck(c, mixedAttentionBatch(4));
      c = gqaConfig(dtype, causal);
      c.alibi = true;
      c.alibiSqrt = true;
      runAndCheck(c, mixedAttentionBatch(9));
    }
  }
}

TEST_CASE("unified attention features: all together, GQA, also after the passes", "[attention][features]") {
  for (ScalarKind dtype : {ScalarKind::F32, ScalarKind::BF16}) {
    for (bool causal : {true, false}) {
      UnifiedAttentionConfig c = gqaConfig(dtype, causal);
      c.slidingWindow = 37;
      c.softcap = 1.5;
      c.alibi = true;
      c.sinks = true;
      runAndCheck(c, mixedAttentionBatch(5));
      runAndCheck(c, mixedAttentionBatch(6), /*afterPasses=*/true);
    }
  }
  // GQA + window + softcap + sinks without ALiBi, f16, 4 query heads per KV head
  // in a 64-row query tile (16 tokens per program), no pipelining.
  UnifiedAttentionConfig c = gqaConfig(ScalarKind::F16, true);
  c.numQueryHeads = 16;
  c.numKvHeads = 4;
  c.headSize = 64;
  c.blockMRows = 64;
  c.numStages = 1;
  c.slidingWindow = 24;
  c.softcap = 30;
  c.sinks = true;
  runAndCheck(c, mixedAttentionBatch(7));
  runAndCheck(c, mixedAttentionBatch(8), /*afterPasses=*/true);
}

TEST_CASE("unified attention features: prefill tiles run unmasked tiles first, then masked ones",
          "[attention][features]") {
  // 64 rows (16 tokens x 4 heads) per program: the KV loop splits at the first
  // row's own key (causal) or the sequence's last tile. Softcap, ALiBi and sinks
  // apply in both loops; per-sequence causal flags choose the split per sequence.
  BatchShape batch;
  batch.queryLens = {70, 1, 33, 17};
  batch.contextLens = {0, 90, 41, 64};
  batch.seed = 31;
  for (bool causal : {true, false}) {
    UnifiedAttentionConfig c = gqaConfig(ScalarKind::BF16, causal);
    c.blockMRows = 64;
    c.qInShared = true;
    runAndCheck(c, batch, /*afterPasses=*/true);
    c.softcap = 20;
    c.alibi = true;
    c.sinks = true;
    runAndCheck(c, batch);
    c.perSequenceCausal = true;
    runAndCheck(c, batch, /*afterPasses=*/true);
    c.alibiSqrt = true;
    runAndCheck(c, batch, /*afterPasses=*/true);
  }
}

TEST_CASE("unified attention features: window sizes around tiles and contexts", "[attention][features]") {
  // 1: each query sees only its own key; 5 and 31: inside a tile; 32: exactly a tile;
  // 33: a tile and one; 1000: longer than every sequence (the same as no window).
  for (int window : {1, 5, 31, 32, 33, 1000}) {
    for (bool causal : {true, false}) {
      UnifiedAttentionConfig c = gqaConfig(ScalarKind::BF16, causal);
      c.slidingWindow = window;
      runAndCheck(c, mixedAttentionBatch(10 + static_cast<uint64_t>(window)), /*afterPasses=*/window == 5);
    }
  }
  // A window longer than the context agrees with the unwindowed kernel's output.
  UnifiedAttentionConfig windowed = gqaConfig(ScalarKind::F32, true);
  windowed.slidingWindow = 1000;
  auto withWindow = runUnifiedAttentionInterpreted(windowed, mixedAttentionBatch(9));
  auto without = runUnifiedAttentionInterpreted(gqaConfig(ScalarKind::F32, true), mixedAttentionBatch(9));
  REQUIRE(withWindow.isOk());
  REQUIRE(without.isOk());
  CHECK(withWindow->passed);
  CHECK(without->passed);
}

TEST_CASE("unified attention features: one-sided and asymmetric non-causal windows", "[attention][features][window]") {
  // (left sw, right r): a left-only window, right-only windows (r = 1: no key
  // after the query; r = 40: past a tile), and asymmetric ones.
  const std::pair<int, int> windows[] = {{33, -1}, {0, 1}, {0, 40}, {5, 70}, {100, 3}, {1, 1}};
  for (const auto& [left, right] : windows) {
    for (bool prefillTiles : {false, true}) {
      UnifiedAttentionConfig c = gqaConfig(ScalarKind::BF16, false);
      c.slidingWindow = left;
      c.slidingWindowRight = right;
      if (prefillTiles) {
        c.blockMRows = 128;
        c.numWarps = 8;
        c.tileSize = 64;
      }
      INFO("window (" << left << ", " << right << ")");
      runAndCheck(c, mixedAttentionBatch(40 + static_cast<uint64_t>(left + right)), /*afterPasses=*/right == 40);
    }
  }
  // Per-sequence causal: the right bound serves the non-causal sequences only.
  UnifiedAttentionConfig flagged = gqaConfig(ScalarKind::F16, false);
  flagged.perSequenceCausal = true;
  flagged.slidingWindow = 9;
  flagged.slidingWindowRight = 20;
  runAndCheck(flagged, mixedAttentionBatch(77), false);

  UnifiedAttentionConfig bad = gqaConfig(ScalarKind::BF16, true);
  bad.slidingWindowRight = 4;
  CHECK(bad.validate().diagnostic().message ==
        "sliding_window_right (4) needs non-causal attention (causal: false or per_sequence_causal): causal rows see "
        "no key after their own");
  bad.causal = false;
  bad.slidingWindowRight = -2;
  CHECK(bad.validate().diagnostic().message ==
        "sliding_window_right (-2) must be -1 (no right bound), 0 (the window's own) or a positive key count");
  bad.slidingWindowRight = -1;
  CHECK(bad.validate().diagnostic().message ==
        "sliding_window_right -1 (no right bound) needs a sliding_window: without one the window is already "
        "unbounded");
  bad.slidingWindow = 7;
  CHECK(bad.validate());
  CHECK(bad.kernelName() == "unified_attention_bf16_h8kv2_d80_bs16_noncausal_sw7_swrinf");
}

TEST_CASE("unified attention features: a decode far past the window reads no key before it",
          "[attention][features]") {
  // The harness drops the block-table entries of blocks wholly before every
  // query's window (an index far outside the cache: using one fails the
  // interpreter's bounds check) and fills the other hidden keys with NaN, so
  // passing proves the tile pruning and the load masks.
  BatchShape decode;
  decode.queryLens = {1, 1, 3};
  decode.contextLens = {300, 77, 129};
  decode.seed = 21;
  for (int window : {7, 40}) {
    UnifiedAttentionConfig c = gqaConfig(ScalarKind::BF16, true);
    c.slidingWindow = window;
    c.sinks = true;
    runAndCheck(c, decode);
    runAndCheck(c, decode, /*afterPasses=*/true);
  }
}

// ---- Kernel names, parameters, validation. ----

TEST_CASE("unified attention features: kernel names and parameters", "[attention][features]") {
  UnifiedAttentionConfig c = gqaConfig(ScalarKind::BF16, true);
  const std::string base = "unified_attention_bf16_h8kv2_d80_bs16_causal";
  CHECK(c.kernelName() == base);
  c.slidingWindow = 4096;
  c.softcap = 2.5;
  c.alibi = true;
  c.sinks = true;
  c.tileSize = 64;
  CHECK(c.kernelName() == base + "_sw4096_softcap2p5_alibi_sinks_t64");
  c.softcap = 50;
  CHECK(c.kernelName() == base + "_sw4096_softcap50_alibi_sinks_t64");
  c.alibiSqrt = true;
  CHECK(c.kernelName() == base + "_sw4096_softcap50_alibisqrt_sinks_t64");
  c.alibi = false;
  CHECK(c.validate().message().find("alibi_sqrt needs alibi: true") != std::string::npos);
  c.alibi = true;
  c.alibiSqrt = false;

  auto plain = buildUnifiedAttention(gqaConfig(ScalarKind::BF16, true));
  REQUIRE(plain.isOk());
  REQUIRE((*plain)->numParameters() == 18);
  CHECK((*plain)->parameter(6)->name() == "scale");
  const std::string plainText = attnjit::ir::printKernel(**plain);
  for (const char* word : {"tanh", "alibi", "sink", "SLIDING_WINDOW", "SOFTCAP"})
    CHECK(plainText.find(word) == std::string::npos);

  auto featured = buildUnifiedAttention(c);
  REQUIRE(featured.isOk());
  REQUIRE((*featured)->numParameters() == 20);
  CHECK((*featured)->parameter(5)->name() == "cu_seqlens_q");
  CHECK((*featured)->parameter(6)->name() == "alibi_slopes");
  CHECK((*featured)->parameter(7)->name() == "sinks");
  CHECK((*featured)->parameter(8)->name() == "scale");
  const std::string text = attnjit::ir::printKernel(**featured);
  CHECK(text.find("tanh") != std::string::npos);
  CHECK(text.find("SLIDING_WINDOW") != std::string::npos);

  c.alibi = false;
  auto sinksOnly = buildUnifiedAttention(c);
  REQUIRE(sinksOnly.isOk());
  REQUIRE((*sinksOnly)->numParameters() == 19);
  CHECK((*sinksOnly)->parameter(6)->name() == "sinks");
}

TEST_CASE("unified attention features: impossible values are rejected", "[attention][features]") {
  UnifiedAttentionConfig c = gqaConfig(ScalarKind::BF16, true);
  c.slidingWindow = -4;
  CHECK(validationError(c) == "sliding_window (-4) must not be negative (0 turns the window off)");
  CHECK_FALSE(buildUnifiedAttention(c).isOk());
  c.slidingWindow = 0;
  c.softcap = -1.5;
  CHECK(validationError(c) == "softcap (-1.5) must be a finite number >= 0 (0 turns it off)");
  c.softcap = std::nan("");
  CHECK(validationError(c) == "softcap (nan) must be a finite number >= 0 (0 turns it off)");
  c.softcap = INFINITY;
  CHECK(validationError(c) == "softcap (inf) must be a finite number >= 0 (0 turns it off)");
  c.softcap = 0;
  CHECK(validationError(c) == "ok");
}

// ---- Spec fields. ----

namespace {
std::string featureSpec(const std::string& extraParams) {
  return "family: unified_attention\n"
         "params:\n"
         "  dtype: bf16\n"
         "  num_query_heads: 8\n"
         "  num_kv_heads: 2\n"
         "  head_size: 64\n"
         "  block_size: 16\n"
         "  causal: true\n" +
         extraParams;
}
}  // namespace

TEST_CASE("spec: sliding_window, softcap, alibi and sinks fields", "[spec][features]") {
  auto spec = attnjit::compiler::loadSpecText(
      featureSpec("  sliding_window: [0, 128]\n  softcap: 30.5\n  alibi: true\n  sinks: [false, true]\n"),
      "f.yaml");
  REQUIRE(spec.isOk());
  REQUIRE(spec->variants.size() == 4);
  const auto& last = spec->variants[3].attention;
  CHECK(last.slidingWindow == 128);
  CHECK(last.softcap == 30.5);
  CHECK(last.alibi);
  CHECK(last.sinks);
  CHECK(spec->variants[0].attention.slidingWindow == 0);
  CHECK_FALSE(spec->variants[0].attention.sinks);
  CHECK(spec->variants[3].name == "unified_attention_bf16_h8kv2_d64_bs16_causal_sw128_softcap30p5_alibi_sinks");
  CHECK(attnjit::compiler::formatSpecParams(last).find(" sliding_window=128 softcap=30.5 alibi=true sinks=true") !=
        std::string::npos);

  auto defaults = attnjit::compiler::loadSpecText(featureSpec(""), "f.yaml");
  REQUIRE(defaults.isOk());
  CHECK(defaults->variants[0].attention.slidingWindow == 0);
  CHECK(defaults->variants[0].attention.softcap == 0);
  CHECK_FALSE(defaults->variants[0].attention.alibi);
  CHECK_FALSE(defaults->variants[0].attention.sinks);
}

TEST_CASE("spec: bad feature values are located errors", "[spec][features]") {
  auto messageOf = [](const std::string& extra) {
    auto spec = attnjit::compiler::loadSpecText(featureSpec(extra), "f.yaml");
    return spec.isOk() ? std::string("ok") : spec.diagnostic().str();
  };
  CHECK(messageOf("  sliding_window: -1\n") ==
        "f.yaml:9:19: error: 'sliding_window' must be an integer >= 0 (0 turns the window off), got '-1'");
  CHECK(messageOf("  softcap: -2\n") ==
        "f.yaml:9:12: error: 'softcap' must be a decimal number >= 0 such as 30 or 50.0 (0 turns it off), got '-2'");
  CHECK(messageOf("  softcap: fifty\n") ==
        "f.yaml:9:12: error: 'softcap' must be a decimal number >= 0 such as 30 or 50.0 (0 turns it off), got "
        "'fifty'");
  CHECK(messageOf("  alibi: maybe\n") == "f.yaml:9:10: error: 'alibi' must be true or false, got 'maybe'");
  CHECK(messageOf("  sinks: \"true\"\n") == "f.yaml:9:10: error: 'sinks' must be true or false, got 'true'");
}

TEST_CASE("unified attention features: fp8 queries with their scale", "[attention][features][qfp8]") {
  // vLLM's Q_IS_FP8: fp8 q and an fp8 cache (per-tensor), also with the other
  // caches and outputs, 2D and the prefill tiling.
  for (auto format : {attnjit::compiler::KvCacheFormat::Fp8E4M3, attnjit::compiler::KvCacheFormat::Auto,
                      attnjit::compiler::KvCacheFormat::Int8PerTokenHead})
    for (bool prefillTiles : {false, true}) {
      UnifiedAttentionConfig c = gqaConfig(ScalarKind::BF16, true);
      c.queryFp8 = true;
      c.kvCacheFormat = format;
      if (prefillTiles) {
        c.blockMRows = 128;
        c.numWarps = 8;
        c.tileSize = 64;
      }
      runAndCheck(c, mixedAttentionBatch(61), /*afterPasses=*/prefillTiles);
    }
  UnifiedAttentionConfig f16 = gqaConfig(ScalarKind::F16, false);
  f16.queryFp8 = true;
  f16.outputFp8 = true;
  runAndCheck(f16, mixedAttentionBatch(62), false);
  UnifiedAttentionConfig named = gqaConfig(ScalarKind::BF16, true);
  named.queryFp8 = true;
  CHECK(named.kernelName() == "unified_attention_bf16_h8kv2_d80_bs16_causal_qfp8");
}

TEST_CASE("unified attention reads head-major (HND) caches through the same strides", "[attention][interpreter]") {
  // vLLM's HND layout, [blocks, 2, heads, block_size, D]: the kernels take the
  // cache's four strides, so the same kernels read it; the decode tiling, the
  // prefill tiling, a per-tensor fp8 cache and a sliding window, each on both
  // layouts.
  BatchShape headMajor = mixedAttentionBatch(41);
  headMajor.headMajorCache = true;
  REQUIRE(headMajor.str().find("kv_layout=hnd") != std::string::npos);
  std::vector<UnifiedAttentionConfig> configs(4);
  configs[1].blockMRows = 128;
  configs[1].numWarps = 8;
  configs[1].tileSize = 64;
  configs[2].kvCacheFormat = attnjit::compiler::KvCacheFormat::Fp8E4M3;
  configs[3].slidingWindow = 24;
  configs[3].blockSize = 8;
  for (const auto& config : configs) {
    runAndCheck(config, headMajor, /*afterPasses=*/true);
    BatchShape tokenMajor = headMajor;
    tokenMajor.headMajorCache = false;
    runAndCheck(config, tokenMajor, /*afterPasses=*/true);
  }
  // The strides the kernels get are the head-major ones (D = 128, block 16, 8 KV heads).
  auto problem = validation::UnifiedAttentionProblem::create(UnifiedAttentionConfig{}, headMajor);
  REQUIRE(problem.isOk());
  const auto& layout = (*problem)->deviceLayout();
  CHECK(layout.kvStrideToken == 128);
  CHECK(layout.kvStrideHead == 16 * 128);
  CHECK(layout.kvStrideKv == 8 * 16 * 128);
  CHECK(layout.kvStrideBlock == 2 * 8 * 16 * 128);
  // The key is parsed and printed; DiffKV's packed cache has no HND form.
  BatchShape parsed;
  CHECK(parsed.set("kv_layout=hnd"));
  CHECK(parsed.headMajorCache);
  CHECK(parsed.set("kv_layout=nhd"));
  CHECK_FALSE(parsed.headMajorCache);
  CHECK(parsed.set("kv_layout=khd").diagnostic().message == "kv_layout: 'khd' is not nhd or hnd");
  UnifiedAttentionConfig diffKv;
  diffKv.headSize = 192;
  diffKv.valueHeadSize = 128;
  auto refused = validation::runUnifiedAttentionInterpreted(diffKv, headMajor, false);
  REQUIRE_FALSE(refused.isOk());
  CHECK(refused.diagnostic().message == "kv_layout=hnd: DiffKV's packed cache has only the NHD layout");
}
