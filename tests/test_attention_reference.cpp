// The float64 attention reference checked on cases small enough to compute by hand,
// so the reference the kernels are compared with is itself verified.
#include <catch2/catch.hpp>
#include <cmath>

#include "compiler/validation/reference/AttentionReference.h"

namespace validation = attnjit::validation;

using attnjit::validation::reference::AttentionInputs;
using attnjit::validation::reference::checkAttentionInputs;
using attnjit::validation::reference::referenceAttention;

namespace {

// One sequence, one query head, one KV head, head size 2.
AttentionInputs singleHead(std::vector<double> q, std::vector<double> keys, std::vector<double> values, int queryLen,
                           bool causal) {
  AttentionInputs in;
  in.numQueryHeads = 1;
  in.numKvHeads = 1;
  in.headSize = 2;
  in.cuSeqlensQ = {0, queryLen};
  in.seqLens = {static_cast<int>(keys.size() / 2)};
  in.causal = causal;
  in.scale = 1.0;
  in.q = std::move(q);
  in.keys = {std::move(keys)};
  in.values = {std::move(values)};
  return in;
}

}  // namespace

TEST_CASE("reference: a single key returns its value", "[attention][reference]") {
  auto in = singleHead({0.3, -0.7}, {0.9, 0.2}, {0.25, -1.5}, 1, true);
  REQUIRE(checkAttentionInputs(in).empty());
  const auto out = referenceAttention(in);
  REQUIRE(out.size() == 2);
  CHECK(out[0] == 0.25);
  CHECK(out[1] == -1.5);
}

TEST_CASE("reference: equal scores average the values", "[attention][reference]") {
  // q·k0 = q·k1 = 0.5.
  auto in = singleHead({1.0, 0.0}, {0.5, 1.0, 0.5, -1.0}, {1.0, 2.0, 3.0, -4.0}, 1, false);
  const auto out = referenceAttention(in);
  CHECK(out[0] == Approx(2.0).epsilon(1e-15));
  CHECK(out[1] == Approx(-1.0).epsilon(1e-15));
}

TEST_CASE("reference: scores weight values by their softmax", "[attention][reference]") {
  // Scores ln 3 and 0 give weights 3/4 and 1/4; halving q and doubling the scale
  // changes nothing.
  auto in = singleHead({std::log(3.0), 0.0}, {1.0, 0.0, 0.0, 1.0}, {4.0, 0.0, 0.0, 8.0}, 1, false);
  auto out = referenceAttention(in);
  CHECK(out[0] == Approx(3.0).epsilon(1e-14));
  CHECK(out[1] == Approx(2.0).epsilon(1e-14));
  in.q = {std::log(3.0) / 2, 0.0};
  in.scale = 2.0;
  out = referenceAttention(in);
  CHECK(out[0] == Approx(3.0).epsilon(1e-14));
  CHECK(out[1] == Approx(2.0).epsilon(1e-14));
}

TEST_CASE("reference: causal masking hides later keys", "[attention][reference]") {
  // Two queries, no context: query 0 sees key 0 only; query 1 sees both keys with
  // scores ln 3 and 0.
  const double ln3 = std::log(3.0);
  auto in = singleHead({5.0, 5.0, ln3, 0.0}, {1.0, 0.0, 0.0, 1.0}, {4.0, 0.0, 0.0, 8.0}, 2, true);
  auto out = referenceAttention(in);
  CHECK(out[0] == 4.0);
  CHECK(out[1] == 0.0);
  CHECK(out[2] == Approx(3.0).epsilon(1e-14));
  CHECK(out[3] == Approx(2.0).epsilon(1e-14));

  // Non-causal: query 0 now sees key 1 too; its scores are 5 and 5 (equal).
  in.causal = false;
  out = referenceAttention(in);
  CHECK(out[0] == Approx(2.0).epsilon(1e-14));
  CHECK(out[1] == Approx(4.0).epsilon(1e-14));
}

TEST_CASE("reference: context tokens are visible to every query", "[attention][reference]") {
  // seq_len 3, one query: it sits at position 2 and sees all three keys (equal scores).
  auto in = singleHead({0.0, 0.0}, {1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {1.0, 10.0, 2.0, 20.0, 6.0, 60.0}, 1, true);
  const auto out = referenceAttention(in);
  CHECK(out[0] == Approx(3.0).epsilon(1e-14));
  CHECK(out[1] == Approx(30.0).epsilon(1e-14));
}

TEST_CASE("reference: large scores do not overflow", "[attention][reference]") {
  // Scores 1000 and 1000 - ln 3: weights 3/4 and 1/4; exp(1000) alone would overflow.
  auto in = singleHead({1000.0, 1.0}, {1.0, 0.0, 1.0, -std::log(3.0)}, {4.0, 0.0, 0.0, 8.0}, 1, false);
  const auto out = referenceAttention(in);
  CHECK(out[0] == Approx(3.0).epsilon(1e-12));
  CHECK(out[1] == Approx(2.0).epsilon(1e-12));
}

TEST_CASE("reference: query heads read their group's KV head", "[attention][reference]") {
  // Hq = 4, Hkv = 2: heads 0, 1 read KV head 0 and heads 2, 3 read KV head 1. One key,
  // so each output is the value of its KV head.
  AttentionInputs in;
  in.numQueryHeads = 4;
  in.numKvHeads = 2;
  in.headSize = 1;
  in.cuSeqlensQ = {0, 1};
  in.seqLens = {1};
  in.q = {0.1, 0.2, 0.3, 0.4};
  in.keys = {{0.5, -0.5}};
  in.values = {{7.0, -9.0}};
  const auto out = referenceAttention(in);
  CHECK(out == std::vector<double>{7.0, 7.0, -9.0, -9.0});
}

TEST_CASE("reference: sequences of a batch are independent", "[attention][reference]") {
  // Two sequences with one query each; sequence 1 has a context of one token.
  AttentionInputs in;
  in.numQueryHeads = 1;
  in.numKvHeads = 1;
  in.headSize = 1;
  in.cuSeqlensQ = {0, 1, 2};
  in.seqLens = {1, 2};
  in.q = {0.5, 0.0};
  in.keys = {{1.0}, {3.0, -3.0}};
  in.values = {{-2.0}, {10.0, 20.0}};
  const auto out = referenceAttention(in);
  CHECK(out[0] == -2.0);
  CHECK(out[1] == Approx(15.0).epsilon(1e-15));
}

TEST_CASE("reference: inconsistent inputs are described", "[attention][reference]") {
  auto in = singleHead({0.3, -0.7}, {0.9, 0.2}, {0.25, -1.5}, 1, true);
  in.numQueryHeads = 3;
  in.numKvHeads = 2;
  CHECK(checkAttentionInputs(in) == "numQueryHeads (3) must be a positive multiple of numKvHeads (2)");
  in = singleHead({0.3, -0.7}, {0.9, 0.2}, {0.25, -1.5}, 2, true);
  CHECK(checkAttentionInputs(in) == "sequence 0: seq_len 1 is shorter than its query_len 2");
  in = singleHead({0.3}, {0.9, 0.2}, {0.25, -1.5}, 1, true);
  CHECK(checkAttentionInputs(in) == "q has 1 elements, expected 2");
}
