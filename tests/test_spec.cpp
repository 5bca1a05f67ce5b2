// Spec loading: the shipped specs expand to the expected variants, and malformed
// specs fail with a located, readable error.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "compiler/spec/Spec.h"
#include "compiler/spec/VariantKernel.h"
#include "test_paths.h"

using attnjit::compiler::loadSpecFile;
using attnjit::compiler::loadSpecText;
using attnjit::compiler::Spec;
using attnjit::compiler::UnifiedAttentionConfig;
using attnjit::ir::ScalarKind;

namespace {

const std::string kSourceDir = attnjit::tests::sourceDir();

// A valid spec; the malformed cases below are small edits of it, so their
// expected line numbers can be read off this text.
const std::string kBaseSpec =
    "family: unified_attention\n"    // 1
    "params:\n"                      // 2
    "  dtype: bf16\n"                // 3
    "  num_query_heads: 32\n"        // 4
    "  num_kv_heads: 8\n"            // 5
    "  head_size: 128\n"             // 6
    "  block_size: 16\n"             // 7
    "  causal: true\n";              // 8

// kBaseSpec with the first occurrence of `from` replaced by `to`.
std::string edited(const std::string& from, const std::string& to) {
  std::string text = kBaseSpec;
  size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

Spec loadShipped(const std::string& name) {
  auto spec = loadSpecFile(kSourceDir + "/specs/" + name);
  INFO(name << ": " << (spec ? std::string() : spec.diagnostic().str()));
  REQUIRE(spec.isOk());
  return std::move(spec).value();
}

}  // namespace

TEST_CASE("spec: the decode spec expands to bf16 and f16 GQA decode variants", "[spec]") {
  Spec spec = loadShipped("unified_attention_decode.yaml");
  CHECK(spec.family == attnjit::compiler::Family::UnifiedAttention);
  CHECK(spec.target == "sm_90a");
  REQUIRE(spec.variants.size() == 2);
  CHECK(spec.variants[0].attention.dtype == ScalarKind::BF16);
  CHECK(spec.variants[1].attention.dtype == ScalarKind::F16);
  for (const auto& v : spec.variants) {
    CHECK(v.family == attnjit::compiler::Family::UnifiedAttention);
    CHECK(v.attention.numQueryHeads == 32);
    CHECK(v.attention.numKvHeads == 8);
    CHECK(v.attention.headSize == 128);
    CHECK(v.attention.blockSize == 16);
    CHECK(v.attention.causal);
    CHECK(v.location.line == 5);  // the 'params:' key
  }
  CHECK(spec.variants[0].name == "unified_attention_bf16_h32kv8_d128_bs16_causal");
  // A decode batch: one new token per sequence.
  REQUIRE(spec.shape.queryLens.size() == spec.shape.contextLens.size());
  CHECK(spec.shape.queryLens.size() >= 3);
  for (int q : spec.shape.queryLens) CHECK(q == 1);
}

TEST_CASE("spec: the prefill spec mixes prefill, chunked prefill and decode", "[spec]") {
  Spec spec = loadShipped("unified_attention_prefill.yaml");
  REQUIRE(spec.variants.size() == 2);
  CHECK(spec.variants[0].attention.causal);
  CHECK_FALSE(spec.variants[1].attention.causal);
  for (const auto& v : spec.variants) {
    CHECK(v.attention.dtype == ScalarKind::BF16);
    CHECK(v.attention.numQueryHeads == 8);
    CHECK(v.attention.numKvHeads == 2);
    CHECK(v.attention.headSize == 64);
    CHECK(v.attention.blockSize == 16);
  }
  CHECK(spec.shape.queryLens == std::vector<int>{19, 9, 1});
  CHECK(spec.shape.contextLens == std::vector<int>{0, 21, 40});
  CHECK(spec.shape.seed == 2);
}

TEST_CASE("spec: the f32 spec has a non-power-of-two head size", "[spec]") {
  Spec spec = loadShipped("unified_attention_f32.yaml");
  REQUIRE(spec.variants.size() == 2);
  for (const auto& v : spec.variants) {
    CHECK(v.attention.dtype == ScalarKind::F32);
    CHECK(v.attention.numQueryHeads == 4);
    CHECK(v.attention.numKvHeads == 4);
    CHECK(v.attention.headSize == 80);
    CHECK(v.attention.blockSize == 32);
  }
  CHECK(spec.variants[0].name == "unified_attention_f32_h4kv4_d80_bs32_causal");
  CHECK(spec.variants[1].name == "unified_attention_f32_h4kv4_d80_bs32_noncausal");
}

TEST_CASE("spec: lists expand to the cartesian product, first field slowest", "[spec]") {
  std::string text = edited("dtype: bf16", "dtype: [fp16, bfloat16, float32]");
  text.replace(text.find("causal: true"), 12, "causal: [true, false]");
  auto spec = loadSpecText(text, "product.yaml");
  INFO((spec ? std::string() : spec.diagnostic().str()));
  REQUIRE(spec.isOk());
  REQUIRE(spec->variants.size() == 6);
  const ScalarKind dtypes[] = {ScalarKind::F16, ScalarKind::F16, ScalarKind::BF16,
                               ScalarKind::BF16, ScalarKind::F32, ScalarKind::F32};
  for (size_t i = 0; i < 6; ++i) {
    CHECK(spec->variants[i].attention.dtype == dtypes[i]);
    CHECK(spec->variants[i].attention.causal == (i % 2 == 0));
  }
  CHECK(spec->path == "product.yaml");
  // Defaults of the optional fields and of the target.
  CHECK(spec->target == "sm_90a");
  CHECK(spec->variants[0].attention.tileSize == 32);
  CHECK(spec->variants[0].attention.numWarps == 4);
}

TEST_CASE("spec: optional fields, target and run section are read", "[spec]") {
  auto spec = loadSpecText(kBaseSpec +
                               "  tile_size: [16, 64]\n"
                               "  num_warps: 8\n"
                               "target: sm_80\n"
                               "run:\n"
                               "  query_lens: [3, 1]\n"
                               "  context_lens: [0, 90]\n"
                               "  seed: 42\n",
                           "optional.yaml");
  INFO((spec ? std::string() : spec.diagnostic().str()));
  REQUIRE(spec.isOk());
  CHECK(spec->target == "sm_80");
  REQUIRE(spec->variants.size() == 2);
  CHECK(spec->variants[0].attention.tileSize == 16);
  CHECK(spec->variants[1].attention.tileSize == 64);
  CHECK(spec->variants[1].attention.numWarps == 8);
  CHECK(spec->variants[0].name != spec->variants[1].name);
  CHECK(spec->shape.queryLens == std::vector<int>{3, 1});
  CHECK(spec->shape.contextLens == std::vector<int>{0, 90});
  CHECK(spec->shape.seed == 42);
}

TEST_CASE("spec: a scalar run length is a batch of one", "[spec]") {
  auto spec = loadSpecText(kBaseSpec + "run: {query_lens: 7, context_lens: 0}\n", "one.yaml");
  INFO((spec ? std::string() : spec.diagnostic().str()));
  REQUIRE(spec.isOk());
  CHECK(spec->shape.queryLens == std::vector<int>{7});
  CHECK(spec->shape.contextLens == std::vector<int>{0});
}

namespace {

struct MalformedSpec {
  std::string description;
  std::string text;
  int line, col;  // expected location, 1-based
  std::vector<std::string> messageParts;
};

std::vector<MalformedSpec> malformedSpecs() {
  std::string manyValues = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]";
  return {
      {"unknown top-level field",
       edited("family:", "famliy:"),
       1,
       1,
       {"unknown field 'famliy'", "did you mean 'family'?"}},
      {"unknown parameter",
       edited("head_size:", "head_sise:"),
       6,
       3,
       {"unknown field 'head_sise'", "did you mean 'head_size'?"}},
      {"unknown parameter without a close match",
       edited("head_size:", "zzz:"),
       6,
       3,
       {"unknown field 'zzz'", "known fields: dtype,"}},
      {"integer field with a word",
       edited("head_size: 128", "head_size: abc"),
       6,
       14,
       {"'head_size' must be an integer, got 'abc'"}},
      {"integer field with a fraction",
       edited("block_size: 16", "block_size: 16.5"),
       7,
       15,
       {"'block_size' must be an integer, got '16.5'"}},
      {"integer field quoted",
       edited("head_size: 128", "head_size: \"128\""),
       6,
       14,
       {"'head_size' must be an integer", "quoted"}},
      {"negative integer",
       edited("num_kv_heads: 8", "num_kv_heads: -8"),
       5,
       17,
       {"'num_kv_heads' must be a positive integer, got -8"}},
      {"zero", edited("num_query_heads: 32", "num_query_heads: 0"), 4, 20, {"'num_query_heads' must be a positive"}},
      {"integer overflow",
       edited("head_size: 128", "head_size: 99999999999999999999"),
       6,
       14,
       {"'head_size' must be an integer"}},
      {"empty list", edited("num_kv_heads: 8", "num_kv_heads: []"), 5, 17, {"'num_kv_heads' is an empty list"}},
      {"list inside a list",
       edited("num_kv_heads: 8", "num_kv_heads: [8, [2]]"),
       5,
       21,
       {"values of 'num_kv_heads' must be single values, got a list"}},
      {"mapping as a value",
       edited("head_size: 128", "head_size: {a: 1}"),
       6,
       14,
       {"'head_size' must be a value or a list of values, got a mapping"}},
      {"field without a value", edited("head_size: 128", "head_size:"), 6, 3, {"'head_size' has no value"}},
      {"missing required parameter", edited("  head_size: 128\n", ""), 2, 1, {"missing required field 'head_size'"}},
      {"missing family", edited("family: unified_attention\n", ""), 1, 1, {"missing required field 'family'"}},
      {"missing params", "family: unified_attention\ntarget: sm_90\n", 1, 1, {"missing required field 'params'"}},
      {"params without a value", "family: unified_attention\nparams:\n", 2, 1, {"'params' has no value"}},
      {"params as a list",
       "family: unified_attention\nparams: [1, 2]\n",
       2,
       9,
       {"'params' must be a mapping, got a list"}},
      {"unknown family",
       edited("family: unified_attention", "family: unified_attn"),
       1,
       9,
       {"unknown family 'unified_attn'", "did you mean 'unified_attention'?"}},
      {"family as a list",
       edited("family: unified_attention", "family: [unified_attention]"),
       1,
       9,
       {"'family' must be a string, got a list"}},
      {"unknown target", kBaseSpec + "target: sm_91\n", 9, 9, {"unknown target 'sm_91'", "sm_90a"}},
      {"unknown dtype", edited("dtype: bf16", "dtype: [bf16, int8]"), 3, 17, {"'dtype' must be one of", "'int8'"}},
      {"non-boolean causal",
       edited("causal: true", "causal: maybe"),
       8,
       11,
       {"'causal' must be true or false, got 'maybe'"}},
      {"duplicate field",
       edited("  causal: true\n", "  causal: true\n  dtype: f16\n"),
       9,
       3,
       {"duplicate field 'dtype'", "first given on line 3"}},
      {"invalid combination",
       edited("num_kv_heads: 8", "num_kv_heads: [8, 6]"),
       5,
       21,
       {"invalid variant (", "num_kv_heads=6", "num_kv_heads (6)"}},
      {"invalid block size", edited("block_size: 16", "block_size: 300"), 7, 15, {"invalid variant (", "block_size=300"}},
      {"two spellings of one dtype make duplicate names",
       edited("dtype: bf16", "dtype: [bf16, bfloat16]"),
       3,
       3,
       {"two variants are both named 'unified_attention_bf16_h32kv8_d128_bs16_causal'",
        "they differ only in dtype (bf16 vs bfloat16)"}},
      {"one value listed twice",
       edited("num_kv_heads: 8", "num_kv_heads: [8, 8]"),
       5,
       3,
       {"two variants are both named", "'num_kv_heads' lists 8 twice"}},
      {"too many variants",
       "family: unified_attention\nparams:\n  dtype: [bf16, f16]\n  num_query_heads: " + manyValues +
           "\n  num_kv_heads: " + manyValues +
           "\n  head_size: 128\n  block_size: 16\n  causal: [true, false]\n"
           "  tile_size: [16, 32, 64, 128, 256]\n",
       2,
       1,
       {"more than 4096 variants"}},
      {"run lists of different lengths",
       kBaseSpec + "run:\n  query_lens: [1, 2]\n  context_lens: [5]\n",
       10,
       3,
       {"'query_lens' has 2 entries but 'context_lens' has 1"}},
      {"unknown run field", kBaseSpec + "run:\n  seeds: 3\n", 10, 3, {"unknown field 'seeds'", "did you mean 'seed'?"}},
      {"zero query length",
       kBaseSpec + "run:\n  query_lens: [1, 0]\n  context_lens: [3, 3]\n",
       10,
       19,
       {"'query_lens' must be between 1 and"}},
      {"negative seed", kBaseSpec + "run:\n  seed: -1\n", 10, 9, {"'seed' must be at least 0, got -1"}},
      {"run as a scalar", kBaseSpec + "run: fast\n", 9, 6, {"'run' must be a mapping"}},
      {"YAML syntax error: unclosed list", edited("dtype: bf16", "dtype: [bf16, f16"), 4, 18, {"YAML syntax error"}},
      {"YAML syntax error: bad indentation",
       edited("  num_kv_heads: 8\n", "  num_kv_heads: 8\n bad: 1\n"),
       6,
       2,
       {"YAML syntax error"}},
      {"root is a list", "- family\n- params\n", 1, 1, {"top level of a spec must be a mapping", "got a list"}},
      {"root is a scalar", "just some words\n", 1, 1, {"must be a mapping", "got 'just some words'"}},
      {"empty text", "", 1, 1, {"the spec is empty"}},
      {"only a comment", "# nothing here\n", 1, 1, {"the spec is empty"}},
      {"two documents",
       kBaseSpec + "---\nfamily: unified_attention\n",
       10,
       1,
       {"one YAML document; found a second one here"}},
      {"complex key", "? [a, b]\n: 1\n", 1, 3, {"field names in the spec must be plain words"}},
      {"NUL byte", std::string("family: x\0y\n", 12), 1, 1, {"NUL bytes"}},
      {"deep nesting", std::string(5000, '['), 1, 1, {"nesting is too deep"}},
      {"oversized", kBaseSpec + "# " + std::string(1 << 20, 'x') + "\n", 1, 1, {"limited to 1048576 bytes"}},
  };
}

}  // namespace

TEST_CASE("spec: malformed specs fail with a located message", "[spec]") {
  for (const MalformedSpec& c : malformedSpecs()) {
    INFO("case: " << c.description << "\n" << c.text.substr(0, 400));
    auto spec = loadSpecText(c.text, "bad.yaml");
    REQUIRE_FALSE(spec.isOk());
    const auto& d = spec.diagnostic();
    INFO("got: " << d.str());
    CHECK(d.loc.file == "bad.yaml");
    CHECK(d.loc.line == c.line);
    CHECK(d.loc.col == c.col);
    for (const std::string& part : c.messageParts) CHECK(d.message.find(part) != std::string::npos);
    CHECK(d.str().rfind("bad.yaml:" + std::to_string(c.line) + ":" + std::to_string(c.col) + ": error: ", 0) == 0);
  }
}

TEST_CASE("spec: a file that does not exist is an error naming it", "[spec]") {
  auto spec = loadSpecFile(kSourceDir + "/specs/no_such_spec.yaml");
  REQUIRE_FALSE(spec.isOk());
  CHECK(spec.diagnostic().loc.file == kSourceDir + "/specs/no_such_spec.yaml");
  CHECK(spec.diagnostic().message == "no such file");
  auto directory = loadSpecFile(kSourceDir + "/specs");
  REQUIRE_FALSE(directory.isOk());
  CHECK(directory.diagnostic().message.find("is a directory") != std::string::npos);
}

TEST_CASE("spec: parameters format back in spec spelling", "[spec]") {
  attnjit::compiler::UnifiedAttentionConfig config;
  config.dtype = ScalarKind::F16;
  config.numQueryHeads = 12;
  config.numKvHeads = 3;
  config.headSize = 96;
  config.blockSize = 32;
  config.causal = false;
  config.tileSize = 64;
  config.numWarps = 8;
  CHECK(attnjit::compiler::formatSpecParams(config) ==
        "dtype=f16 num_query_heads=12 num_kv_heads=3 head_size=96 block_size=32 causal=false tile_size=64 num_warps=8 "
        "num_stages=2");
  config.blockMRows = 64;
  config.numStages = 1;
  CHECK(attnjit::compiler::formatSpecParams(config) ==
        "dtype=f16 num_query_heads=12 num_kv_heads=3 head_size=96 block_size=32 causal=false tile_size=64 num_warps=8 "
        "block_m=64 num_stages=1");
  config.deferRowSum = false;
  CHECK(attnjit::compiler::formatSpecParams(config).find(" num_stages=1 defer_row_sum=false") != std::string::npos);
  CHECK(config.kernelName().ends_with("_rowsum"));
  config.qInShared = true;
  CHECK(attnjit::compiler::formatSpecParams(config).find(" defer_row_sum=false q_in_shared=true") != std::string::npos);
  CHECK(config.kernelName().ends_with("_rowsum_qs"));
  // A boolean knob listed as [default, other] expands to two variants, the
  // second named with the knob's suffix; anything but a boolean is refused.
  auto twoVariants = [](const std::string& knob, bool UnifiedAttentionConfig::*member, const std::string& suffix) {
    INFO(knob);
    const bool byDefault = UnifiedAttentionConfig{}.*member;
    auto spec = loadSpecText(kBaseSpec + "  " + knob + ": [" + (byDefault ? "true, false" : "false, true") + "]\n",
                             knob + ".yaml");
    REQUIRE(spec.isOk());
    REQUIRE(spec->variants.size() == 2);
    CHECK(spec->variants[0].attention.*member == byDefault);
    CHECK(spec->variants[1].attention.*member != byDefault);
    CHECK(spec->variants[1].name == spec->variants[0].name + suffix);
    CHECK_FALSE(loadSpecText(kBaseSpec + "  " + knob + ": 2\n", "bad.yaml").isOk());
  };
  twoVariants("defer_row_sum", &UnifiedAttentionConfig::deferRowSum, "_rowsum");
  twoVariants("q_in_shared", &UnifiedAttentionConfig::qInShared, "_qs");
}

TEST_CASE("spec: lazy_rescale is the kernel's rule unless set, and a set value names the variant", "[spec]") {
  auto spec = loadSpecText(kBaseSpec + "  lazy_rescale: [true, false]\n", "lazy.yaml");
  INFO((spec ? std::string() : spec.diagnostic().str()));
  REQUIRE(spec.isOk());
  REQUIRE(spec->variants.size() == 2);
  auto unset = loadSpecText(kBaseSpec, "rule.yaml");
  REQUIRE(unset.isOk());
  const std::string& ruleName = unset->variants[0].name;
  CHECK_FALSE(unset->variants[0].attention.lazyRescale.has_value());
  CHECK(spec->variants[0].attention.lazyRescale == std::optional<bool>(true));
  CHECK(spec->variants[0].name == ruleName + "_lazy");
  CHECK(spec->variants[1].attention.lazyRescale == std::optional<bool>(false));
  CHECK(spec->variants[1].name == ruleName + "_eager");
  CHECK(attnjit::compiler::formatSpecParams(spec->variants[0].attention).ends_with(" lazy_rescale=true"));
  CHECK(attnjit::compiler::formatSpecParams(unset->variants[0].attention).find("lazy_rescale") == std::string::npos);
  auto bad = loadSpecText(kBaseSpec + "  lazy_rescale: sometimes\n", "bad.yaml");
  REQUIRE_FALSE(bad.isOk());
  CHECK(bad.diagnostic().str().find("'lazy_rescale' must be true or false, got 'sometimes'") != std::string::npos);
}

TEST_CASE("spec: family reduce_segments expands and formats its parameters", "[spec][reduce_segments]") {
  auto spec = loadSpecText(
      "family: reduce_segments\n"
      "params:\n"
      "  dtype: [f32, bf16]\n"
      "  num_query_heads: [32, 20]\n"
      "  head_size: 96\n"
      "  output_lse: true\n"
      "  lse_token_stride: [false, true]\n"
      "  num_warps: 8\n",
      "reduce.yaml");
  INFO((spec ? std::string() : spec.diagnostic().str()));
  REQUIRE(spec.isOk());
  REQUIRE(spec->variants.size() == 8);
  const auto& first = spec->variants[0];
  CHECK(first.family == attnjit::compiler::Family::ReduceSegments);
  CHECK(first.name == "reduce_segments_f32_h32_d96_lse_w8");
  CHECK(first.reduceSegments.numWarps == 8);
  CHECK(first.location.line == 2);
  CHECK(spec->variants[1].name == "reduce_segments_f32_h32_d96_lse_strided_w8");
  CHECK(spec->variants[7].name == "reduce_segments_bf16_h20_d96_lse_strided_w8");
  CHECK(spec->variants[7].reduceSegments.dtype == ScalarKind::BF16);
  CHECK(spec->variants[7].reduceSegments.numQueryHeads == 20);
  CHECK(attnjit::compiler::formatSpecParams(spec->variants[7].reduceSegments) ==
        "dtype=bf16 num_query_heads=20 head_size=96 output_lse=true lse_token_stride=true num_warps=8");
  attnjit::compiler::ReduceSegmentsConfig defaults;
  CHECK(attnjit::compiler::formatSpecParams(defaults) ==
        "dtype=bf16 num_query_heads=32 head_size=128 output_lse=false num_warps=4");

  for (const char* file : {"reduce_segments.yaml", "reduce_segments_mla.yaml"}) {
    const Spec shipped = loadShipped(file);
    CHECK(shipped.family == attnjit::compiler::Family::ReduceSegments);
    CHECK(shipped.variants.size() >= 2);
  }
  CHECK(loadShipped("reduce_segments.yaml").variants.size() == 6);
  const Spec mla = loadShipped("reduce_segments_mla.yaml");
  CHECK(mla.variants[0].name == "reduce_segments_f16_h128_d512_lse_strided");
  CHECK(mla.shape.numPartials == 3);
}

TEST_CASE("spec: reduce_segments errors are located and name the field", "[spec][reduce_segments]") {
  const std::string base =
      "family: reduce_segments\n"     // 1
      "params:\n"                     // 2
      "  dtype: bf16\n"               // 3
      "  num_query_heads: 32\n"       // 4
      "  head_size: 128\n"            // 5
      "  output_lse: false\n";        // 6
  auto with = [&](const std::string& from, const std::string& to) {
    std::string text = base;
    size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    return text.replace(at, from.size(), to);
  };
  struct Case {
    std::string description, text;
    int line, col;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"lse_token_stride without the LSE", base + "  lse_token_stride: true\n", 7, 21,
       "invalid variant (dtype=bf16 num_query_heads=32 head_size=128 output_lse=false lse_token_stride=true): "
       "lse_token_stride describes the LSE output: it needs output_lse: true"},
      {"near-miss field", with("num_query_heads", "num_query_head"), 4, 3,
       "unknown field 'num_query_head' in 'params' of family reduce_segments; did you mean 'num_query_heads'? (known "
       "fields: dtype, num_query_heads, head_size, output_lse, lse_token_stride, output_fp8, num_warps, "
       "segments_per_round, heads_per_program)"},
      {"negative segments per round", base + "  segments_per_round: -1\n", 7, 23,
       "'segments_per_round' must be a non-negative integer, got -1"},
      {"too many segments per round", base + "  segments_per_round: 17\n", 7, 23,
       "invalid variant (dtype=bf16 num_query_heads=32 head_size=128 output_lse=false segments_per_round=17): "
       "segments_per_round (17) must be between 0 (chosen by the kernel) and 16"},
      {"heads per program not a power of two", base + "  heads_per_program: 3\n", 7, 22,
       "invalid variant (dtype=bf16 num_query_heads=32 head_size=128 output_lse=false heads_per_program=3): "
       "heads_per_program (3) must be 0 (chosen by the kernel) or a power of two up to 16"},
      {"missing head size", with("  head_size: 128\n", ""), 2, 1, "missing required field 'head_size' in 'params'"},
      {"unsupported dtype", with("dtype: bf16", "dtype: f8"), 3, 10,
       "'dtype' must be one of f32, f16, bf16 (also fp32/float32, fp16/float16, bfloat16), got 'f8'"},
      {"head size too large", with("head_size: 128", "head_size: [128, 2048]"), 5, 20,
       "invalid variant (dtype=bf16 num_query_heads=32 head_size=2048 output_lse=false): head_size (2048) must be "
       "between 1 and 1024"},
      {"warps not a power of two", base + "  num_warps: 6\n", 7, 14,
       "invalid variant (dtype=bf16 num_query_heads=32 head_size=128 output_lse=false num_warps=6): num_warps (6) "
       "must be a power of two between 1 and 16"},
      {"quoted boolean", with("output_lse: false", "output_lse: \"false\""), 6, 15,
       "'output_lse' must be true or false, got 'false'"},
      {"zero heads", with("num_query_heads: 32", "num_query_heads: 0"), 4, 20,
       "'num_query_heads' must be a positive integer, got 0"},
  };
  for (const Case& c : cases) {
    INFO(c.description << "\n" << c.text);
    auto spec = loadSpecText(c.text, "bad.yaml");
    REQUIRE_FALSE(spec.isOk());
    CHECK(spec.diagnostic().str() == "bad.yaml:" + std::to_string(c.line) + ":" + std::to_string(c.col) +
                                         ": error: " + c.message);
  }
}

// The benchmark specs are run by hand on the GPU machine, where a typo costs
// device time: each must load, and each variant's kernel must build and verify.
TEST_CASE("spec: every benchmark spec loads and builds its kernels", "[spec]") {
  std::vector<std::filesystem::path> paths;
  for (const auto& entry : std::filesystem::directory_iterator(kSourceDir + "/bench"))
    if (entry.path().extension() == ".yaml") paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  REQUIRE(paths.size() >= 30);
  int variants = 0;
  for (const std::filesystem::path& path : paths) {
    INFO(path.string());
    auto spec = loadSpecFile(path.string());
    REQUIRE(spec.isOk());
    CHECK(!spec->variants.empty());
    for (const auto& variant : spec->variants) {
      INFO(variant.name);
      auto kernel = attnjit::compiler::buildVariantKernel(variant);
      CHECK(kernel.isOk());
      ++variants;
    }
  }
  CHECK(variants >= 100);
}
