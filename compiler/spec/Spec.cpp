// Spec loading: YAML text → validated variants.
//
// The loader is strict on purpose: a spec is a small hand-written file, and a typo
// silently falling back to a default would compile a kernel nobody asked for. Every
// error points at the offending node (file:line:col, 1-based) and names the field.
// yaml-cpp reports problems by throwing; every exception is caught at the boundary
// and becomes a Diagnostic, so no input (binary garbage, deep nesting) can crash.
#include "compiler/spec/Spec.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "compiler/spec/YamlScalars.h"

namespace attnjit::compiler {
namespace {

using support::Diagnostic;
using support::Expected;
using support::Location;
using support::Status;

// Larger files are not hand-written specs; the cap also bounds yaml-cpp's memory.
constexpr uintmax_t kMaxSpecBytes = 1 << 20;
// The cartesian product grows fast; a spec this large is almost certainly a mistake.
constexpr size_t kMaxVariants = 4096;
// Bounds for the run batch so the interpreter finishes and sizes stay in int range.
constexpr int kMaxRunSequences = 4096;
constexpr int kMaxRunTokens = 1 << 20;

const std::array<const char*, 7> kTargets = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120"};
const std::array<const char*, 4> kTopLevelFields = {"family", "target", "params", "run"};
const std::array<const char*, 5> kRunFields = {"query_lens", "context_lens", "seed", "segment_tiles", "num_partials"};

// Counts the documents of a YAML stream (stopping at two) and remembers where the
// second one starts.
class DocumentCounter : public YAML::EventHandler {
 public:
  int documents = 0;
  YAML::Mark secondDocument;

  void OnDocumentStart(const YAML::Mark&) override {
    ++documents;
    awaitingRoot_ = documents == 2;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { root(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { root(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    root(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    root(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    root(mark);
  }
  void OnMapEnd() override {}

 private:
  void root(const YAML::Mark& mark) {
    if (!awaitingRoot_) return;
    secondDocument = mark;
    awaitingRoot_ = false;
  }
  bool awaitingRoot_ = false;
};

// One parameter of a family whose variants are described by a Config.
template <typename Config>
struct ParamField {
  const char* name;
  bool required;
  // Parses one scalar into the config; the error message names the field.
  std::function<support::Status(const YAML::Node&, Config&)> apply;
};

class SpecLoader {
 public:
  explicit SpecLoader(std::string path) : path_(std::move(path)) {}

  support::Expected<Spec> load(const std::string& text);

 private:
  // A params field as written: its key and its values (one, or the list items).
  template <typename Config>
  struct GivenField {
    const ParamField<Config>* field;
    YAML::Node key;
    std::vector<YAML::Node> values;
  };
  template <typename Config>
  static std::optional<size_t> blameField(const std::string& message, const std::vector<GivenField<Config>>& given);

  support::Location locationOf(const YAML::Node& node) const { return yamlLocation(path_, node.Mark()); }
  support::Status errorAt(const YAML::Node& node, std::string message) const {
    return errorAt(node.Mark(), std::move(message));
  }
  support::Status errorAt(const YAML::Mark& mark, std::string message) const {
    return support::Status::error(yamlLocation(path_, mark), std::move(message));
  }

  // Checks the keys of a mapping: plain scalars, no duplicates, all known.
  support::Status checkKeys(const YAML::Node& mapping, const std::string& section,
                   const std::vector<std::string>& known) const;
  support::Expected<std::string> stringField(const YAML::Node& value, const std::string& field) const;
  support::Expected<int64_t> integerScalar(const YAML::Node& value, const std::string& field, int64_t min,
                                  int64_t max) const;
  support::Expected<std::vector<YAML::Node>> scalarOrList(const YAML::Node& value, const std::string& field) const;

  support::Status loadRoot(const YAML::Node& root, Spec& spec);
  support::Status loadParams(const YAML::Node& key, const YAML::Node& params, Spec& spec);
  // The variants of one family: Config's fields, validated, stored by `store`.
  template <typename Config>
  support::Status loadFamilyParams(const YAML::Node& key, const YAML::Node& params, Spec& spec,
                          const std::vector<ParamField<Config>>& fields,
                          const std::function<void(Variant&, const Config&)>& store);
  support::Status loadRun(const YAML::Node& run, Spec& spec);
  support::Expected<std::vector<int>> intList(const YAML::Node& value, const std::string& field, int min,
                                              int max) const;

  std::string path_;
};

support::Status SpecLoader::checkKeys(const YAML::Node& mapping, const std::string& section,
                             const std::vector<std::string>& known) const {
  std::map<std::string, int> firstLine;
  for (auto it = mapping.begin(); it != mapping.end(); ++it) {
    YAML::Node key = it->first;
    if (!key.IsScalar()) return errorAt(key, "field names in " + section + " must be plain words");
    const std::string& name = key.Scalar();
    int line = locationOf(key).line;
    auto [previous, inserted] = firstLine.emplace(name, line);
    if (!inserted) {
      return errorAt(key, "duplicate field '" + support::excerpt(name) + "' in " + section + " (first given on line " +
                              std::to_string(previous->second) + ")");
    }
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      std::string message = "unknown field '" + support::excerpt(name) + "' in " + section;
      std::string suggestion = support::closestName(name, known);
      if (!suggestion.empty()) message += "; did you mean '" + suggestion + "'?";
      message += " (known fields: " + support::joinNames(known) + ")";
      return errorAt(key, message);
    }
  }
  return support::Status::ok();
}

support::Expected<std::string> SpecLoader::stringField(const YAML::Node& value, const std::string& field) const {
  if (!value.IsScalar()) {
    return errorAt(value, "'" + field + "' must be a string, got " + describeNode(value));
  }
  return value.Scalar();
}

support::Expected<int64_t> SpecLoader::integerScalar(const YAML::Node& value, const std::string& field, int64_t min,
                                            int64_t max) const {
  if (!value.IsScalar()) return errorAt(value, "'" + field + "' must be an integer, got " + describeNode(value));
  const std::string& text = value.Scalar();
  if (isQuoted(value)) {
    return errorAt(value, "'" + field + "' must be an integer, got the quoted string '" + support::excerpt(text) + "'");
  }
  std::optional<int64_t> parsed = parseDecimal(text);
  if (!parsed) return errorAt(value, "'" + field + "' must be an integer, got '" + support::excerpt(text) + "'");
  if (*parsed < min || *parsed > max) {
    std::string range = max >= std::numeric_limits<int32_t>::max()
                            ? "at least " + std::to_string(min)
                            : "between " + std::to_string(min) + " and " + std::to_string(max);
    return errorAt(value, "'" + field + "' must be " + range + ", got " + text);
  }
  return *parsed;
}

support::Expected<std::vector<YAML::Node>> SpecLoader::scalarOrList(const YAML::Node& value,
                                                           const std::string& field) const {
  std::vector<YAML::Node> items;
  if (value.IsNull()) return errorAt(value, "'" + field + "' has no value");
  if (value.IsMap()) return errorAt(value, "'" + field + "' must be a value or a list of values, got a mapping");
  if (value.IsScalar()) {
    items.push_back(value);
    return items;
  }
  if (value.size() == 0) return errorAt(value, "'" + field + "' is an empty list; give at least one value");
  for (const YAML::Node& item : value) {
    if (!item.IsScalar()) {
      return errorAt(item, "the values of '" + field + "' must be single values, got " + describeNode(item));
    }
    items.push_back(item);
  }
  return items;
}

support::Expected<std::vector<int>> SpecLoader::intList(const YAML::Node& value, const std::string& field, int min,
                                               int max) const {
  auto items = scalarOrList(value, field);
  if (!items) return items.status();
  if (items->size() > static_cast<size_t>(kMaxRunSequences)) {
    return errorAt(value, "'" + field + "' lists " + std::to_string(items->size()) + " sequences; at most " +
                              std::to_string(kMaxRunSequences) + " are supported");
  }
  std::vector<int> result;
  for (const YAML::Node& item : *items) {
    auto parsed = integerScalar(item, field, min, max);
    if (!parsed) return parsed.status();
    result.push_back(static_cast<int>(*parsed));
  }
  return result;
}

// Field parsers, one per kind of value, shared by every family so a field reads
// and reports the same way wherever it appears. Integer parameters must be
// positive here; which combinations a kernel supports is its Config::validate's
// business.
template <typename Config>
using FieldParser = std::function<support::Status(const YAML::Node&, Config&)>;

// An integer from `minimum` (1: positive, 0: non-negative) to INT32_MAX.
template <typename Config>
FieldParser<Config> integerField(const char* name, int Config::* member, int minimum) {
  return [name, member, minimum](const YAML::Node& node, Config& config) -> support::Status {
    if (isQuoted(node) || !parseDecimal(node.Scalar())) {
      std::string got = isQuoted(node) ? "the quoted string '" + support::excerpt(node.Scalar()) + "'" : "'" + support::excerpt(node.Scalar()) + "'";
      return support::Status::error({}, "'" + std::string(name) + "' must be an integer, got " + got);
    }
    int64_t value = *parseDecimal(node.Scalar());
    if (value < minimum || value > std::numeric_limits<int32_t>::max())
      return support::Status::error({}, "'" + std::string(name) + "' must be a " +
                                            (minimum > 0 ? "positive" : "non-negative") + " integer, got " +
                                            node.Scalar());
    config.*member = static_cast<int>(value);
    return support::Status::ok();
  };
}

template <typename Config>
FieldParser<Config> positiveField(const char* name, int Config::* member) {
  return integerField(name, member, 1);
}

template <typename Config>
FieldParser<Config> nonNegativeField(const char* name, int Config::* member) {
  return integerField(name, member, 0);
}

template <typename Config>
FieldParser<Config> dtypeField() {
  return [](const YAML::Node& node, Config& config) -> support::Status {
    std::optional<ir::ScalarKind> kind = parseDtypeName(node.Scalar());
    if (!kind) {
      return support::Status::error({}, "'dtype' must be one of f32, f16, bf16 (also fp32/float32, fp16/float16, "
                                        "bfloat16), got '" + support::excerpt(node.Scalar()) + "'");
    }
    config.dtype = *kind;
    return support::Status::ok();
  };
}

// A boolean field; a std::optional<bool> member stays unset (the kernel's
// rule) unless the spec names it.
template <typename Config, typename Member>
FieldParser<Config> boolField(const char* name, Member Config::* member) {
  return [name, member](const YAML::Node& node, Config& config) -> support::Status {
    std::optional<bool> value = isQuoted(node) ? std::nullopt : parseBool(node.Scalar());
    if (!value)
      return support::Status::error({},
                                    "'" + std::string(name) + "' must be true or false, got '" + support::excerpt(node.Scalar()) + "'");
    config.*member = *value;
    return support::Status::ok();
  };
}

// vLLM's kv_cache_dtype spellings (compiler/kernels/KvCacheFormat.h).
template <typename Config>
FieldParser<Config> cacheFormatField(KvCacheFormat Config::* member) {
  return [member](const YAML::Node& node, Config& config) -> support::Status {
    std::optional<KvCacheFormat> format = isQuoted(node) ? std::nullopt : parseKvCacheFormat(node.Scalar());
    if (!format)
      return support::Status::error({}, std::string("'kv_cache_dtype' must be one of ") + kvCacheFormatChoices() +
                                            ", got '" + support::excerpt(node.Scalar()) + "'");
    config.*member = *format;
    return support::Status::ok();
  };
}

// A field naming one of an enum's values: `parse` maps the spelling (unquoted),
// `choices` lists them for the error ("tf32 or ieee").
template <typename Config, typename Enum>
FieldParser<Config> choiceField(const char* field, std::optional<Enum> (*parse)(std::string_view),
                                const char* choices, Enum Config::* member) {
  return [field, parse, choices, member](const YAML::Node& node, Config& config) -> support::Status {
    std::optional<Enum> choice = isQuoted(node) ? std::nullopt : parse(node.Scalar());
    if (!choice)
      return support::Status::error({}, std::string("'") + field + "' must be " + choices + ", got '" +
                                            support::excerpt(node.Scalar()) + "'");
    config.*member = *choice;
    return support::Status::ok();
  };
}

template <typename Config>
FieldParser<Config> fp32PrecisionField(Fp32Precision Config::* member) {
  return choiceField<Config, Fp32Precision>("fp32_precision", parseFp32Precision, "tf32 or ieee", member);
}

template <typename Config>
FieldParser<Config> kvScaleLayoutField(KvScaleLayout Config::* member) {
  return choiceField<Config, KvScaleLayout>("kv_scales", parseKvScaleLayout, "inline or separate", member);
}

template <typename Config>
FieldParser<Config> fp8DotDtypeField(Fp8DotDtype Config::* member) {
  return choiceField<Config, Fp8DotDtype>("fp8_dot_dtype", parseFp8DotDtype, "dtype or f16", member);
}

// Score modifiers (off by default): the window is an integer >= 0 and the
// softcap a plain decimal number >= 0; 0 turns either off.
template <typename Config>
FieldParser<Config> slidingWindowField() {
  return [](const YAML::Node& node, Config& config) -> support::Status {
    std::optional<int64_t> value = isQuoted(node) ? std::nullopt : parseDecimal(node.Scalar());
    if (!value || *value < 0 || *value > std::numeric_limits<int32_t>::max())
      return support::Status::error({}, "'sliding_window' must be an integer >= 0 (0 turns the window off), got '" +
                                            support::excerpt(node.Scalar()) + "'");
    config.slidingWindow = static_cast<int>(*value);
    return support::Status::ok();
  };
}

template <typename Config>
FieldParser<Config> slidingWindowRightField() {
  return [](const YAML::Node& node, Config& config) -> support::Status {
    std::optional<int64_t> value = isQuoted(node) ? std::nullopt : parseDecimal(node.Scalar());
    if (!value || *value < -1 || *value > std::numeric_limits<int32_t>::max())
      return support::Status::error({}, "'sliding_window_right' must be -1 (no right bound), 0 (the window's own) or "
                                        "a positive key count, got '" +
                                            support::excerpt(node.Scalar()) + "'");
    config.slidingWindowRight = static_cast<int>(*value);
    return support::Status::ok();
  };
}

template <typename Config>
FieldParser<Config> softcapField() {
  return [](const YAML::Node& node, Config& config) -> support::Status {
    const std::string& text = node.Scalar();
    double value = 0;
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, value, std::chars_format::fixed);
    if (isQuoted(node) || text.empty() || ec != std::errc() || ptr != end || !std::isfinite(value) || value < 0)
      return support::Status::error(
          {}, "'softcap' must be a decimal number >= 0 such as 30 or 50.0 (0 turns it off), got '" + support::excerpt(text) + "'");
    config.softcap = value;
    return support::Status::ok();
  };
}

// The `params` fields of each family, specialized below: a family in
// Families.def without its field table fails to link.
template <typename Config>
std::vector<ParamField<Config>> specFields();

template <>
std::vector<ParamField<UnifiedAttentionConfig>> specFields() {
  using C = UnifiedAttentionConfig;
  return {
      {"dtype", true, dtypeField<C>()},
      {"fp32_precision", false, fp32PrecisionField(&C::fp32Precision)},
      {"fp8_dot_dtype", false, fp8DotDtypeField(&C::fp8DotDtype)},
      {"num_query_heads", true, positiveField("num_query_heads", &C::numQueryHeads)},
      {"num_kv_heads", true, positiveField("num_kv_heads", &C::numKvHeads)},
      {"head_size", true, positiveField("head_size", &C::headSize)},
      {"value_head_size", false, positiveField("value_head_size", &C::valueHeadSize)},
      {"block_size", true, positiveField("block_size", &C::blockSize)},
      {"causal", true, boolField("causal", &C::causal)},
      {"tile_size", false, positiveField("tile_size", &C::tileSize)},
      {"num_warps", false, positiveField("num_warps", &C::numWarps)},
      {"block_m", false, positiveField("block_m", &C::blockMRows)},
      {"num_stages", false, positiveField("num_stages", &C::numStages)},
      {"async_copy", false, boolField("async_copy", &C::asyncCopy)},
      {"sink_slot_reads", false, boolField("sink_slot_reads", &C::sinkSlotReads)},
      {"defer_row_sum", false, boolField("defer_row_sum", &C::deferRowSum)},
      {"q_in_shared", false, boolField("q_in_shared", &C::qInShared)},
      {"overlap_softmax", false, boolField("overlap_softmax", &C::overlapSoftmax)},
      {"prefetch_scores", false, boolField("prefetch_scores", &C::prefetchScores)},
      {"warp_specialize", false, boolField("warp_specialize", &C::warpSpecialize)},
      {"ping_pong", false, boolField("ping_pong", &C::pingPong)},
      {"softmax_turns", false, boolField("softmax_turns", &C::softmaxTurns)},
      {"tma", false, boolField("tma", &C::tensorMemoryAccelerator)},
      {"producer_registers", false, positiveField("producer_registers", &C::producerRegisters)},
      {"persistent", false, boolField("persistent", &C::persistent)},
      {"lazy_rescale", false, boolField("lazy_rescale", &C::lazyRescale)},
      {"sliding_window", false, slidingWindowField<C>()},
      {"sliding_window_right", false, slidingWindowRightField<C>()},
      {"attention_chunk_size", false, positiveField("attention_chunk_size", &C::attentionChunkSize)},
      {"mm_prefix_ranges", false, positiveField("mm_prefix_ranges", &C::mmPrefixRanges)},
      {"qq_bias", false, boolField("qq_bias", &C::qqBias)},
      {"softcap", false, softcapField<C>()},
      {"alibi", false, boolField("alibi", &C::alibi)},
      {"alibi_sqrt", false, boolField("alibi_sqrt", &C::alibiSqrt)},
      {"sinks", false, boolField("sinks", &C::sinks)},
      {"kv_cache_dtype", false, cacheFormatField(&C::kvCacheFormat)},
      {"kv_scales", false, kvScaleLayoutField(&C::kvScaleLayout)},
      {"output_lse", false, boolField("output_lse", &C::outputLse)},
      {"output_fp8", false, boolField("output_fp8", &C::outputFp8)},
      {"query_fp8", false, boolField("query_fp8", &C::queryFp8)},
      {"per_sequence_causal", false, boolField("per_sequence_causal", &C::perSequenceCausal)},
      {"split_kv", false, boolField("split_kv", &C::splitKv)},
      {"cluster_split", false, nonNegativeField("cluster_split", &C::clusterSplit)},
  };
}

// merge_attn_states and merge_partials take the same fields.
template <typename C>
std::vector<ParamField<C>> mergeFields() {
  return {
      {"dtype", true, dtypeField<C>()},
      {"num_heads", true, positiveField("num_heads", &C::numHeads)},
      {"head_size", true, positiveField("head_size", &C::headSize)},
      {"output_lse", false, boolField("output_lse", &C::outputLse)},
      {"block_tokens", false, positiveField("block_tokens", &C::blockTokens)},
      {"num_warps", false, positiveField("num_warps", &C::numWarps)},
  };
}

template <>
std::vector<ParamField<MergeAttnStatesConfig>> specFields() {
  using C = MergeAttnStatesConfig;
  std::vector<ParamField<C>> fields = mergeFields<C>();
  fields.push_back({"output_fp8", false, boolField("output_fp8", &C::outputFp8)});
  fields.push_back({"context_token_limit", false, boolField("context_token_limit", &C::contextTokenLimit)});
  return fields;
}

template <>
std::vector<ParamField<CacheWriteConfig>> specFields() {
  using C = CacheWriteConfig;
  return {
      {"dtype", true, dtypeField<C>()},
      {"kv_cache_dtype", false, cacheFormatField(&C::cacheFormat)},
      {"num_kv_heads", true, positiveField("num_kv_heads", &C::numKvHeads)},
      {"head_size", true, positiveField("head_size", &C::headSize)},
      {"value_head_size", false, positiveField("value_head_size", &C::valueHeadSize)},
      {"block_size", true, positiveField("block_size", &C::blockSize)},
      {"num_warps", false, positiveField("num_warps", &C::numWarps)},
      {"source_align", false, positiveField("source_align", &C::sourceAlign)},
      {"cache_align", false, positiveField("cache_align", &C::cacheAlign)},
      {"per_head_scales", false, boolField("per_head_scales", &C::perHeadScales)},
      {"kv_scales", false, kvScaleLayoutField(&C::scaleLayout)},
  };
}

template <>
std::vector<ParamField<MergePartialsConfig>> specFields() {
  return mergeFields<MergePartialsConfig>();
}

template <>
std::vector<ParamField<GatherCacheConfig>> specFields() {
  using C = GatherCacheConfig;
  return {
      {"dtype", true, dtypeField<C>()},
      {"kv_cache_dtype", false, cacheFormatField(&C::cacheFormat)},
      {"entry_size", true, positiveField("entry_size", &C::entrySize)},
      {"block_size", true, positiveField("block_size", &C::blockSize)},
      {"seq_starts", false, boolField("seq_starts", &C::seqStarts)},
      {"block_tokens", false, positiveField("block_tokens", &C::blockTokens)},
      {"num_warps", false, positiveField("num_warps", &C::numWarps)},
      {"stride_divisibility", false, positiveField("stride_divisibility", &C::strideDivisibility)},
  };
}

template <>
std::vector<ParamField<ConvertCacheConfig>> specFields() {
  using C = ConvertCacheConfig;
  return {
      {"dtype", true, dtypeField<C>()},
      {"kv_cache_dtype", true, cacheFormatField(&C::cacheFormat)},
      {"to_fp8", true, boolField("to_fp8", &C::toFp8)},
      {"block_elements", false, positiveField("block_elements", &C::blockElements)},
      {"num_warps", false, positiveField("num_warps", &C::numWarps)},
      {"alignment", false, positiveField("alignment", &C::alignment)},
      {"count_divisibility", false, positiveField("count_divisibility", &C::countDivisibility)},
  };
}

template <>
std::vector<ParamField<MlaCacheWriteConfig>> specFields() {
  using C = MlaCacheWriteConfig;
  return {
      {"dtype", true, dtypeField<C>()},
      {"kv_cache_dtype", false, cacheFormatField(&C::cacheFormat)},
      {"kv_lora_rank", true, positiveField("kv_lora_rank", &C::kvLoraRank)},
      {"rope_dim", true, positiveField("rope_dim", &C::ropeDim)},
      {"block_size", true, positiveField("block_size", &C::blockSize)},
      {"num_warps", false, positiveField("num_warps", &C::numWarps)},
  };
}

template <>
std::vector<ParamField<MlaDecodeConfig>> specFields() {
  using C = MlaDecodeConfig;
  // MLA has no score modifiers: alibi, sliding_window and softcap parse so that
  // MlaDecodeConfig::validate rejects them by name rather than as unknown fields.
  return {
      {"dtype", true, dtypeField<C>()},
      {"fp32_precision", false, fp32PrecisionField(&C::fp32Precision)},
      {"fp8_dot_dtype", false, fp8DotDtypeField(&C::fp8DotDtype)},
      {"num_heads", true, positiveField("num_heads", &C::numHeads)},
      {"kv_lora_rank", true, positiveField("kv_lora_rank", &C::kvLoraRank)},
      {"rope_dim", true, positiveField("rope_dim", &C::ropeDim)},
      {"block_size", true, positiveField("block_size", &C::blockSize)},
      {"block_h", false, positiveField("block_h", &C::blockH)},
      {"tile_size", false, positiveField("tile_size", &C::tileSize)},
      {"num_warps", false, positiveField("num_warps", &C::numWarps)},
      {"num_stages", false, positiveField("num_stages", &C::numStages)},
      {"q_in_shared", false, boolField("q_in_shared", &C::qInShared)},
      {"warp_specialize", false, boolField("warp_specialize", &C::warpSpecialize)},
      {"kv_cache_dtype", false, cacheFormatField(&C::kvCacheFormat)},
      {"split_kv", false, boolField("split_kv", &C::splitKv)},
      {"output_lse", false, boolField("output_lse", &C::outputLse)},
      {"alibi", false, boolField("alibi", &C::alibi)},
      {"sliding_window", false, slidingWindowField<C>()},
      {"softcap", false, softcapField<C>()},
  };
}

template <>
std::vector<ParamField<ReduceSegmentsConfig>> specFields() {
  using C = ReduceSegmentsConfig;
  return {
      {"dtype", true, dtypeField<C>()},
      {"num_query_heads", true, positiveField("num_query_heads", &C::numQueryHeads)},
      {"head_size", true, positiveField("head_size", &C::headSize)},
      {"output_lse", false, boolField("output_lse", &C::outputLse)},
      {"lse_token_stride", false, boolField("lse_token_stride", &C::lseTokenStride)},
      {"output_fp8", false, boolField("output_fp8", &C::outputFp8)},
      {"num_warps", false, positiveField("num_warps", &C::numWarps)},
      {"segments_per_round", false, nonNegativeField("segments_per_round", &C::segmentsPerRound)},
      {"heads_per_program", false, nonNegativeField("heads_per_program", &C::programHeads)},
  };
}

// The field an invalid combination is reported at: the first one the validation
// message names (it names fields in spec spelling), preferring fields with several
// values, since the single-valued ones were fine with the other values; else the
// last field with several values; else none.
template <typename Config>
std::optional<size_t> SpecLoader::blameField(const std::string& message,
                                             const std::vector<GivenField<Config>>& given) {
  std::optional<size_t> blamed, lastVarying;
  std::pair<bool, size_t> best{true, std::string::npos};  // (single-valued, position in message)
  for (size_t i = 0; i < given.size(); ++i) {
    bool singleValued = given[i].values.size() == 1;
    if (!singleValued) lastVarying = i;
    size_t position = message.find(given[i].field->name);
    if (position == std::string::npos) continue;
    std::pair<bool, size_t> rank{singleValued, position};
    if (!blamed || rank < best) {
      blamed = i;
      best = rank;
    }
  }
  return blamed ? blamed : lastVarying;
}

support::Status SpecLoader::loadParams(const YAML::Node& key, const YAML::Node& params, Spec& spec) {
  if (params.IsNull()) return errorAt(key, "'params' has no value; expected a mapping of kernel parameters");
  if (!params.IsMap()) return errorAt(params, "'params' must be a mapping, got " + describeNode(params));
  switch (spec.family) {
#define ATTNJIT_FAMILY(Enum, spelling, Config, member, build)                                    \
  case Family::Enum:                                                                            \
    return loadFamilyParams<Config>(key, params, spec, specFields<Config>(),                     \
                                    [](Variant& v, const Config& c) { v.member = c; });
#include "compiler/kernels/Families.def"
  }
  ATTNJIT_CHECK(false, "a spec whose family is outside the family table");
  return support::Status::ok();
}

template <typename Config>
support::Status SpecLoader::loadFamilyParams(const YAML::Node& key, const YAML::Node& params, Spec& spec,
                                    const std::vector<ParamField<Config>>& fields,
                                    const std::function<void(Variant&, const Config&)>& store) {
  std::vector<std::string> names;
  for (const ParamField<Config>& f : fields) names.push_back(f.name);
  if (support::Status s = checkKeys(params, std::string("'params' of family ") + familyName(spec.family), names); !s)
    return s;

  // The values of every given field, each parsed once so errors surface in file
  // order before any combination is considered.
  std::vector<GivenField<Config>> given;
  for (const ParamField<Config>& field : fields) {
    // Optional rather than assignment: assigning a YAML::Node rebinds the node it
    // aliases inside the document.
    std::optional<YAML::Node> keyNode, valueNode;
    for (auto it = params.begin(); it != params.end(); ++it) {
      if (it->first.Scalar() == field.name) {
        keyNode.emplace(it->first);
        valueNode.emplace(it->second);
      }
    }
    if (!keyNode) {
      if (field.required) {
        return errorAt(key, "missing required field '" + std::string(field.name) + "' in 'params'");
      }
      continue;
    }
    if (valueNode->IsNull()) return errorAt(*keyNode, "'" + std::string(field.name) + "' has no value");
    auto values = scalarOrList(*valueNode, field.name);
    if (!values) return values.status();
    Config scratch;
    for (const YAML::Node& v : *values) {
      if (support::Status s = field.apply(v, scratch); !s) return errorAt(v, s.diagnostic().message);
    }
    given.push_back({&field, *keyNode, std::move(*values)});
  }

  size_t count = 1;
  for (const GivenField<Config>& g : given) {
    count *= g.values.size();  // each factor <= file size, so the product of capped values cannot wrap
    if (count > kMaxVariants) {
      return errorAt(key, "'params' expands to more than " + std::to_string(kMaxVariants) +
                              " variants; split the spec into several files");
    }
  }

  // Odometer over the given fields; the first field varies slowest.
  std::vector<size_t> index(given.size(), 0);
  std::map<std::string, size_t> variantByName;
  std::vector<std::vector<size_t>> choices;
  for (size_t n = 0; n < count; ++n) {
    Config config;
    std::string description;
    for (size_t i = 0; i < given.size(); ++i) {
      const YAML::Node& value = given[i].values[index[i]];
      support::Status applied = given[i].field->apply(value, config);
      ATTNJIT_CHECK(applied.isOk(), "a value that parsed once failed to parse again");
      description += (description.empty() ? "" : " ") + std::string(given[i].field->name) + "=" + value.Scalar();
    }
    if (support::Status s = config.validate(); !s) {
      YAML::Mark where = key.Mark();
      if (std::optional<size_t> blamed = blameField(s.diagnostic().message, given)) {
        where = given[*blamed].values[index[*blamed]].Mark();
      }
      return errorAt(where, "invalid variant (" + description + "): " + s.diagnostic().message);
    }

    Variant variant;
    variant.name = config.kernelName();
    variant.family = spec.family;
    store(variant, config);
    variant.location = locationOf(key);
    auto [existing, inserted] = variantByName.emplace(variant.name, spec.variants.size());
    if (!inserted) {
      // Name the fields that differ: the kernel name does not encode them (or they
      // are two spellings of one value, or one value listed twice).
      const std::vector<size_t>& other = choices[existing->second];
      std::string differing;
      YAML::Mark where = key.Mark();
      for (size_t i = 0; i < given.size(); ++i) {
        if (other[i] == index[i]) continue;
        if (differing.empty()) where = given[i].key.Mark();
        const std::string& first = given[i].values[other[i]].Scalar();
        const std::string& second = given[i].values[index[i]].Scalar();
        std::string field = given[i].field->name;
        differing += (differing.empty() ? "" : ", ") +
                     (first == second ? "'" + field + "' lists " + first + " twice"
                                      : field + " (" + first + " vs " + second + ")");
      }
      std::string reason = "they differ only in " + differing;
      return errorAt(where, "two variants are both named '" + variant.name + "': " + reason);
    }
    spec.variants.push_back(std::move(variant));
    choices.push_back(index);

    for (size_t i = given.size(); i-- > 0;) {
      if (++index[i] < given[i].values.size()) break;
      index[i] = 0;
    }
  }
  return support::Status::ok();
}

support::Status SpecLoader::loadRun(const YAML::Node& run, Spec& spec) {
  if (!run.IsMap()) return errorAt(run, "'run' must be a mapping (query_lens, context_lens, seed), got " +
                                            describeNode(run));
  if (support::Status s = checkKeys(run, "'run'", {kRunFields.begin(), kRunFields.end()}); !s) return s;
  std::optional<YAML::Mark> queryKey, contextKey;
  for (auto it = run.begin(); it != run.end(); ++it) {
    std::string name = it->first.Scalar();
    YAML::Node value = it->second;
    if (value.IsNull()) return errorAt(it->first, "'" + name + "' has no value");
    if (name == "seed") {
      auto seed = integerScalar(value, name, 0, std::numeric_limits<int64_t>::max());
      if (!seed) return seed.status();
      spec.shape.seed = static_cast<uint64_t>(*seed);
      continue;
    }
    if (name == "num_partials") {  // merge_partials: partial results merged per token
      auto partials = integerScalar(value, name, 1, 1024);
      if (!partials) return partials.status();
      spec.shape.numPartials = static_cast<int>(*partials);
      continue;
    }
    if (name == "segment_tiles") {  // split-KV variants: KV tiles per segment
      auto tiles = integerScalar(value, name, 1, 1 << 20);
      if (!tiles) return tiles.status();
      spec.shape.segmentTiles = static_cast<int>(*tiles);
      continue;
    }
    // A sequence needs at least one new query token; a context may be empty.
    bool isQuery = name == "query_lens";
    auto lens = intList(value, name, isQuery ? 1 : 0, kMaxRunTokens);
    if (!lens) return lens.status();
    (isQuery ? spec.shape.queryLens : spec.shape.contextLens) = std::move(*lens);
    (isQuery ? queryKey : contextKey) = it->first.Mark();
  }
  if (spec.shape.queryLens.size() != spec.shape.contextLens.size()) {
    YAML::Mark where = queryKey ? *queryKey : contextKey ? *contextKey : run.Mark();
    return errorAt(where, "'query_lens' has " + std::to_string(spec.shape.queryLens.size()) +
                              " entries but 'context_lens' has " + std::to_string(spec.shape.contextLens.size()) +
                              "; give one of each per sequence");
  }
  // Whole-batch limits (total tokens) are the problem's own rules.
  if (support::Status s = spec.shape.validate(); !s) return errorAt(run, "'run': " + s.diagnostic().message);
  return support::Status::ok();
}

support::Status SpecLoader::loadRoot(const YAML::Node& root, Spec& spec) {
  if (support::Status s = checkKeys(root, "the spec", {kTopLevelFields.begin(), kTopLevelFields.end()}); !s) return s;
  bool hasFamily = false;
  std::optional<YAML::Node> paramsKey, paramsValue;
  for (auto it = root.begin(); it != root.end(); ++it) {
    std::string name = it->first.Scalar();
    YAML::Node value = it->second;
    if (name == "params") {
      paramsKey.emplace(it->first);
      paramsValue.emplace(value);
      continue;
    }
    if (value.IsNull()) return errorAt(it->first, "'" + name + "' has no value");
    if (name == "family") {
      auto family = stringField(value, name);
      if (!family) return family.status();
      std::optional<Family> parsed = parseFamily(*family);
      if (!parsed) {
        const std::vector<std::string> known = familyNames();
        std::string message = "unknown family '" + support::excerpt(*family) + "'";
        if (std::string s = support::closestName(*family, known); !s.empty()) message += "; did you mean '" + s + "'?";
        return errorAt(value, message + " (known families: " + support::joinNames(known) + ")");
      }
      spec.family = *parsed;
      hasFamily = true;
    } else if (name == "target") {
      auto target = stringField(value, name);
      if (!target) return target.status();
      std::vector<std::string> known(kTargets.begin(), kTargets.end());
      if (std::find(known.begin(), known.end(), *target) == known.end()) {
        std::string message = "unknown target '" + *target + "'";
        if (std::string s = support::closestName(*target, known); !s.empty()) message += "; did you mean '" + s + "'?";
        return errorAt(value, message + " (supported: " + support::joinNames(known) + ")");
      }
      spec.target = *target;
    } else if (name == "run") {
      if (support::Status s = loadRun(value, spec); !s) return s;
    }
  }
  if (!hasFamily) return errorAt(root, "missing required field 'family' (e.g. 'family: unified_attention')");
  if (!paramsKey) return errorAt(root, "missing required field 'params'");
  return loadParams(*paramsKey, *paramsValue, spec);
}

support::Expected<Spec> SpecLoader::load(const std::string& text) {
  support::Location start{path_, 1, 1};
  if (text.size() > kMaxSpecBytes) {
    return support::Diagnostic{start, "the spec is " + std::to_string(text.size()) + " bytes; specs are limited to " +
                                 std::to_string(kMaxSpecBytes) + " bytes"};
  }
  if (text.find('\0') != std::string::npos) {
    return support::Diagnostic{start, "the spec contains NUL bytes; expected YAML text"};
  }
  Spec spec;
  spec.path = path_;
  try {
    // Count documents with a bounded walk instead of YAML::LoadAll: on some
    // malformed inputs yaml-cpp 0.7 reports new documents forever without
    // consuming input (found by fuzzing: tests/data/fuzz-regressions/spec/).
    DocumentCounter counter;
    {
      std::istringstream stream(text);
      YAML::Parser parser(stream);
      while (counter.documents < 2 && parser.HandleNextDocument(counter)) {
      }
    }
    if (counter.documents > 1) {
      return support::Diagnostic{yamlLocation(path_, counter.secondDocument),
                        "a spec holds one YAML document; found a second one here"};
    }
    YAML::Node document = YAML::Load(text);
    if (counter.documents == 0 || document.IsNull()) {
      return support::Diagnostic{start, "the spec is empty; expected a mapping with 'family' and 'params'"};
    }
    std::vector<YAML::Node> documents{document};
    const YAML::Node& root = documents[0];
    if (!root.IsMap()) {
      return support::Diagnostic{
          locationOf(root),
          "the top level of a spec must be a mapping (family:, params:, ...), got " + describeNode(root)};
    }
    if (support::Status s = loadRoot(root, spec); !s) return s;
  } catch (const YAML::DeepRecursion& e) {
    return support::Diagnostic{yamlLocation(path_, e.mark), "the YAML nesting is too deep (yaml-cpp stops at " +
                                                       std::to_string(e.depth()) + " levels)"};
  } catch (const YAML::Exception& e) {
    return support::Diagnostic{yamlLocation(path_, e.mark), "YAML syntax error: " + e.msg};
  } catch (const std::exception& e) {
    return support::Diagnostic{start, std::string("cannot read the spec: ") + e.what()};
  }
  return spec;
}

}  // namespace

support::Expected<Spec> loadSpecText(const std::string& text, const std::string& path) {
  return SpecLoader(path).load(text);
}

namespace {
// The softcap as written in a spec: the shortest decimal that reads back exactly.
std::string softcapText(double softcap) {
  char text[64];
  auto [end, ec] = std::to_chars(text, text + sizeof text, softcap, std::chars_format::fixed);
  return ec == std::errc() ? std::string(text, end) : std::to_string(softcap);
}
}  // namespace

std::string formatSpecParams(const UnifiedAttentionConfig& config) {
  return "dtype=" + std::string(ir::scalarName(config.dtype)) + " num_query_heads=" +
         std::to_string(config.numQueryHeads) + " num_kv_heads=" + std::to_string(config.numKvHeads) +
         " head_size=" + std::to_string(config.headSize) +
         (config.valueHeadSize != 0 ? " value_head_size=" + std::to_string(config.valueHeadSize) : std::string()) +
         " block_size=" + std::to_string(config.blockSize) +
         " causal=" + (config.causal ? "true" : "false") + " tile_size=" + std::to_string(config.tileSize) +
         " num_warps=" + std::to_string(config.numWarps) +
         (config.blockMRows != 0 ? " block_m=" + std::to_string(config.blockMRows) : std::string()) +
         " num_stages=" + std::to_string(config.numStages) + (config.asyncCopy ? "" : " async_copy=false") +
         (config.sinkSlotReads ? "" : " sink_slot_reads=false") +
         (config.deferRowSum ? "" : " defer_row_sum=false") + (config.qInShared ? " q_in_shared=true" : "") +
         (config.overlapSoftmax ? " overlap_softmax=true" : "") +
         (config.prefetchScores ? " prefetch_scores=true" : "") +
         (config.warpSpecialize ? " warp_specialize=true" : "") + (config.pingPong ? " ping_pong=true" : "") +
         (config.softmaxTurns ? " softmax_turns=true" : "") +
         (config.producerRegisters != 0 ? " producer_registers=" + std::to_string(config.producerRegisters)
                                        : std::string()) +
         (config.tensorMemoryAccelerator ? " tma=true" : "") + (config.persistent ? " persistent=true" : "") +
         (config.lazyRescale ? std::string(" lazy_rescale=") + (*config.lazyRescale ? "true" : "false") : "") +
         (config.slidingWindow != 0 ? " sliding_window=" + std::to_string(config.slidingWindow) : std::string()) +
         (config.slidingWindowRight != 0 ? " sliding_window_right=" + std::to_string(config.slidingWindowRight)
                                         : std::string()) +
         (config.attentionChunkSize != 0 ? " attention_chunk_size=" + std::to_string(config.attentionChunkSize)
                                         : std::string()) +
         (config.mmPrefixRanges != 0 ? " mm_prefix_ranges=" + std::to_string(config.mmPrefixRanges) : std::string()) +
         (config.qqBias ? " qq_bias=true" : "") +
         (config.softcap != 0 ? " softcap=" + softcapText(config.softcap) : std::string()) +
         (config.alibi ? " alibi=true" : "") + (config.alibiSqrt ? " alibi_sqrt=true" : "") +
         (config.sinks ? " sinks=true" : "") +
         (config.perSequenceCausal ? " per_sequence_causal=true" : "") +
         (config.kvCacheFormat != KvCacheFormat::Auto ? std::string(" kv_cache_dtype=") +
                                                            kvCacheFormatName(config.kvCacheFormat)
                                                      : std::string()) +
         (config.kvScaleLayout != KvScaleLayout::Inline ? std::string(" kv_scales=") +
                                                              kvScaleLayoutName(config.kvScaleLayout)
                                                        : std::string()) +
         (config.outputLse ? " output_lse=true" : "") + (config.outputFp8 ? " output_fp8=true" : "") + (config.queryFp8 ? " query_fp8=true" : "") +
         (config.fp8DotDtype == Fp8DotDtype::F16 ? " fp8_dot_dtype=f16" : "") +
         (config.dtype == ir::ScalarKind::F32 && config.fp32Precision == Fp32Precision::Ieee ? " fp32_precision=ieee"
                                                                                            : "") +
         (config.splitKv ? " split_kv=true" : "") +
         (config.clusterSplit > 0 ? " cluster_split=" + std::to_string(config.clusterSplit) : "");
}

std::string formatSpecParams(const MergeAttnStatesConfig& config) {
  return "dtype=" + std::string(ir::scalarName(config.dtype)) + " num_heads=" + std::to_string(config.numHeads) +
         " head_size=" + std::to_string(config.headSize) + " output_lse=" + (config.outputLse ? "true" : "false") +
         (config.outputFp8 ? " output_fp8=true" : "") + (config.contextTokenLimit ? " context_token_limit=true" : "") +
         " block_tokens=" + std::to_string(config.blockTokens) + " num_warps=" + std::to_string(config.numWarps);
}

std::string formatSpecParams(const CacheWriteConfig& config) {
  return "dtype=" + std::string(ir::scalarName(config.dtype)) + " kv_cache_dtype=" +
         kvCacheFormatName(config.cacheFormat) + " num_kv_heads=" + std::to_string(config.numKvHeads) +
         " head_size=" + std::to_string(config.headSize) +
         (config.valueHeadSize != 0 ? " value_head_size=" + std::to_string(config.valueHeadSize) : std::string()) +
         " block_size=" + std::to_string(config.blockSize) + " num_warps=" + std::to_string(config.numWarps) +
         (config.sourceAlign != 16 ? " source_align=" + std::to_string(config.sourceAlign) : std::string()) +
         (config.cacheAlign != 16 ? " cache_align=" + std::to_string(config.cacheAlign) : std::string()) +
         (config.perHeadScales ? " per_head_scales=true" : "") +
         (config.scaleLayout != KvScaleLayout::Inline ? std::string(" kv_scales=") +
                                                            kvScaleLayoutName(config.scaleLayout)
                                                      : std::string());
}

std::string formatSpecParams(const MergePartialsConfig& config) {
  return "dtype=" + std::string(ir::scalarName(config.dtype)) + " num_heads=" + std::to_string(config.numHeads) +
         " head_size=" + std::to_string(config.headSize) + " output_lse=" + (config.outputLse ? "true" : "false") +
         " block_tokens=" + std::to_string(config.blockTokens) + " num_warps=" + std::to_string(config.numWarps);
}

std::string formatSpecParams(const MlaCacheWriteConfig& config) {
  return "dtype=" + std::string(ir::scalarName(config.dtype)) + " kv_cache_dtype=" +
         kvCacheFormatName(config.cacheFormat) + " kv_lora_rank=" + std::to_string(config.kvLoraRank) +
         " rope_dim=" + std::to_string(config.ropeDim) + " block_size=" + std::to_string(config.blockSize) +
         " num_warps=" + std::to_string(config.numWarps);
}

std::string formatSpecParams(const GatherCacheConfig& config) {
  return "dtype=" + std::string(ir::scalarName(config.dtype)) + " kv_cache_dtype=" +
         kvCacheFormatName(config.cacheFormat) + " entry_size=" + std::to_string(config.entrySize) +
         " block_size=" + std::to_string(config.blockSize) + (config.seqStarts ? " seq_starts=true" : "") +
         " block_tokens=" + std::to_string(config.blockTokens) + " num_warps=" + std::to_string(config.numWarps) +
         (config.strideDivisibility != 16 ? " stride_divisibility=" + std::to_string(config.strideDivisibility)
                                          : std::string());
}

std::string formatSpecParams(const ConvertCacheConfig& config) {
  return "dtype=" + std::string(ir::scalarName(config.dtype)) + " kv_cache_dtype=" +
         kvCacheFormatName(config.cacheFormat) + " to_fp8=" + (config.toFp8 ? "true" : "false") +
         " block_elements=" + std::to_string(config.blockElements) + " num_warps=" + std::to_string(config.numWarps) +
         (config.alignment != 16 ? " alignment=" + std::to_string(config.alignment) : std::string()) +
         (config.countDivisibility != 16 ? " count_divisibility=" + std::to_string(config.countDivisibility)
                                         : std::string());
}

std::string formatSpecParams(const ReduceSegmentsConfig& config) {
  return "dtype=" + std::string(ir::scalarName(config.dtype)) + " num_query_heads=" +
         std::to_string(config.numQueryHeads) + " head_size=" + std::to_string(config.headSize) +
         " output_lse=" + (config.outputLse ? "true" : "false") +
         (config.lseTokenStride ? " lse_token_stride=true" : "") + (config.outputFp8 ? " output_fp8=true" : "") +
         " num_warps=" + std::to_string(config.numWarps) +
         (config.segmentsPerRound != 0 ? " segments_per_round=" + std::to_string(config.segmentsPerRound) : "") +
         (config.programHeads != 0 ? " heads_per_program=" + std::to_string(config.programHeads) : "");
}

std::string formatSpecParams(const MlaDecodeConfig& config) {
  return "dtype=" + std::string(ir::scalarName(config.dtype)) + " num_heads=" + std::to_string(config.numHeads) +
         " kv_lora_rank=" + std::to_string(config.kvLoraRank) + " rope_dim=" + std::to_string(config.ropeDim) +
         " block_size=" + std::to_string(config.blockSize) + " block_h=" + std::to_string(config.blockH) +
         " tile_size=" + std::to_string(config.tileSize) + " num_warps=" + std::to_string(config.numWarps) +
         " num_stages=" + std::to_string(config.numStages) + (config.qInShared ? " q_in_shared=true" : "") +
         (config.warpSpecialize ? " warp_specialize=true" : "") +
         (config.kvCacheFormat != KvCacheFormat::Auto
              ? std::string(" kv_cache_dtype=") + kvCacheFormatName(config.kvCacheFormat)
              : std::string()) +
         (config.fp8DotDtype == Fp8DotDtype::F16 ? " fp8_dot_dtype=f16" : "") +
         (config.dtype == ir::ScalarKind::F32 && config.fp32Precision == Fp32Precision::Ieee ? " fp32_precision=ieee"
                                                                                            : "") +
         (config.outputLse ? " output_lse=true" : "") + (config.splitKv ? " split_kv=true" : "");
}

support::Expected<Spec> loadSpecFile(const std::string& path) {
  auto text = support::readInputFile(path, kMaxSpecBytes, "spec");
  if (!text) return text.status();
  return loadSpecText(*text, path);
}

}  // namespace attnjit::compiler
