#include "compiler/spec/BatchShape.h"

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "compiler/kernels/ConfigChecks.h"

namespace attnjit::compiler {

namespace {

support::Status shapeError(const std::string& message) { return support::Status::error(support::Location{}, message); }

// Partials of a merge_partials run batch (keeps host data for the reference small).
constexpr int kMaxShapePartials = 1024;
constexpr int kMaxShapeSegments = 64;  // the op splits into at most kSplitKvMaxSegments

template <typename Int>
bool parseInteger(std::string_view text, Int& out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end && !text.empty();
}

support::Status parseLengthList(const std::string& key, std::string_view text, std::vector<int>& out) {
  std::vector<int> values;
  size_t pos = 0;
  while (true) {
    const size_t comma = text.find(',', pos);
    const std::string_view item =
        text.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    // "VxN" repeats V N times: query_lens=1x64 is a decode batch of 64.
    const size_t times = item.find('x');
    int value = 0, count = 1;
    if (!parseInteger(item.substr(0, times), value) ||
        (times != std::string_view::npos && (!parseInteger(item.substr(times + 1), count) || count < 1 ||
                                             count > (1 << 20))))
      return shapeError(key + ": '" + support::excerpt(item) +
                        "' is not an integer or VALUExCOUNT (expected a list like 1,17,40 or 4095x64)");
    values.insert(values.end(), static_cast<size_t>(count), value);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  out = std::move(values);
  return support::Status::ok();
}

// "1,17,40"; a run of three or more equal values in set()'s "VxN" form, so that a
// uniform batch of thousands of sequences prints (and echoes in errors) as "1x4096".
std::string joinInts(const std::vector<int>& values) {
  std::string s;
  for (size_t i = 0; i < values.size();) {
    size_t run = 1;
    while (i + run < values.size() && values[i + run] == values[i]) ++run;
    s += (i ? "," : "") + std::to_string(values[i]);
    if (run >= 3) {
      s += "x" + std::to_string(run);
    } else {
      run = 1;
    }
    i += run;
  }
  return s;
}

}  // namespace

support::Status BatchShape::set(const std::string& keyEqualsValue) {
  const size_t eq = keyEqualsValue.find('=');
  if (eq == std::string::npos)
    return shapeError("expected key=value (query_lens=..., context_lens=..., seed=N), got '" + support::excerpt(keyEqualsValue) + "'");
  const std::string key = keyEqualsValue.substr(0, eq);
  const std::string_view value = std::string_view(keyEqualsValue).substr(eq + 1);
  if (key == "query_lens") return parseLengthList(key, value, queryLens);
  if (key == "context_lens") return parseLengthList(key, value, contextLens);
  if (key == "segment_tiles") {
    uint64_t parsed = 0;
    if (!parseInteger(value, parsed) || parsed < 1 || parsed > (1u << 20))
      return shapeError("segment_tiles: '" + support::excerpt(value) + "' is not a positive integer");
    segmentTiles = static_cast<int>(parsed);
    return support::Status::ok();
  }
  if (key == "num_segments") {
    uint64_t parsed = 0;
    if (!parseInteger(value, parsed) || parsed > static_cast<uint64_t>(kMaxShapeSegments))
      return shapeError("num_segments: '" + support::excerpt(value) + "' is not an integer between 0 and " +
                        std::to_string(kMaxShapeSegments));
    numSegments = static_cast<int>(parsed);
    return support::Status::ok();
  }
  if (key == "num_partials") {
    uint64_t parsed = 0;
    if (!parseInteger(value, parsed) || parsed < 1 || parsed > static_cast<uint64_t>(kMaxShapePartials))
      return shapeError("num_partials: '" + support::excerpt(value) + "' is not an integer between 1 and " +
                        std::to_string(kMaxShapePartials));
    numPartials = static_cast<int>(parsed);
    return support::Status::ok();
  }
  if (key == "check_stride") {
    uint64_t parsed = 0;
    if (!parseInteger(value, parsed) || parsed < 1 || parsed > (1u << 30))
      return shapeError("check_stride: '" + support::excerpt(value) + "' is not a positive integer");
    checkStride = static_cast<int>(parsed);
    return support::Status::ok();
  }
  if (key == "programs") {
    uint64_t parsed = 0;
    if (!parseInteger(value, parsed) || parsed > (1u << 30))
      return shapeError("programs: '" + support::excerpt(value) + "' is not a non-negative integer");
    programs = static_cast<int>(parsed);
    return support::Status::ok();
  }
  if (key == "seed") {
    uint64_t parsed = 0;
    if (!parseInteger(value, parsed))
      return shapeError("seed: '" + support::excerpt(value) + "' is not a non-negative integer");
    seed = parsed;
    return support::Status::ok();
  }
  if (key == "key_ramp") {
    const std::string text(value);
    char* end = nullptr;
    const double parsed = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !(parsed >= 0) || parsed > 1e3)
      return shapeError("key_ramp: '" + support::excerpt(text) + "' is not a number between 0 and 1000");
    keyRamp = parsed;
    return support::Status::ok();
  }
  if (key == "output_scale") {
    const std::string text(value);
    char* end = nullptr;
    const double parsed = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !(parsed > 0) || parsed > 1e6 || parsed < 1e-6)
      return shapeError("output_scale: '" + support::excerpt(text) + "' is not a number between 1e-6 and 1e6");
    outputScale = parsed;
    return support::Status::ok();
  }
  if (key == "kv_layout") {
    if (value != "nhd" && value != "hnd")
      return shapeError("kv_layout: '" + support::excerpt(value) + "' is not nhd or hnd");
    headMajorCache = value == "hnd";
    return support::Status::ok();
  }
  return shapeError("unknown shape key '" + support::excerpt(key) +
                    "' (expected query_lens, context_lens, seed, check_stride, segment_tiles, num_segments, num_partials, "
                    "key_ramp, output_scale, kv_layout or programs)");
}

std::string BatchShape::str() const {
  return "query_lens=" + joinInts(queryLens) + " context_lens=" + joinInts(contextLens) +
         " seed=" + std::to_string(seed) + (checkStride != 1 ? " check_stride=" + std::to_string(checkStride) : "") +
         (segmentTiles != 1 ? " segment_tiles=" + std::to_string(segmentTiles) : "") +
         (numSegments != 0 ? " num_segments=" + std::to_string(numSegments) : "") +
         (numPartials != 2 ? " num_partials=" + std::to_string(numPartials) : "") +
         (programs != 0 ? " programs=" + std::to_string(programs) : "") +
         (keyRamp != 0 ? " key_ramp=" + numberText(keyRamp) : "") +
         (outputScale != kDefaultOutputScale ? " output_scale=" + numberText(outputScale) : "") +
         (headMajorCache ? " kv_layout=hnd" : "");
}

support::Status BatchShape::validate() const {
  if (queryLens.empty()) return shapeError("query_lens is empty: a batch needs at least one sequence");
  if (numPartials < 1 || numPartials > kMaxShapePartials)
    return shapeError("num_partials (" + std::to_string(numPartials) + ") must be between 1 and " +
                      std::to_string(kMaxShapePartials));
  if (queryLens.size() != contextLens.size())
    return shapeError("query_lens has " + std::to_string(queryLens.size()) + " entries but context_lens has " +
                      std::to_string(contextLens.size()));
  int64_t totalQueries = 0, totalKeys = 0;
  for (size_t i = 0; i < queryLens.size(); ++i) {
    if (queryLens[i] < 1)
      return shapeError("query_lens[" + std::to_string(i) + "] (" + std::to_string(queryLens[i]) +
                        ") must be at least 1");
    if (segmentTiles < 1) return shapeError("segment_tiles must be at least 1");
    if (contextLens[i] < 0)
      return shapeError("context_lens[" + std::to_string(i) + "] (" + std::to_string(contextLens[i]) +
                        ") must not be negative");
    totalQueries += queryLens[i];
    totalKeys += int64_t{queryLens[i]} + contextLens[i];
  }
  constexpr int64_t kMaxTokens = int64_t{1} << 24;  // keeps every 32-bit index in the kernel far from overflow
  if (totalQueries > kMaxTokens || totalKeys > kMaxTokens)
    return shapeError("the batch has " + std::to_string(totalQueries) + " query tokens and " +
                      std::to_string(totalKeys) + " keys; at most " + std::to_string(kMaxTokens) + " of each");
  return support::Status::ok();
}

}  // namespace attnjit::compiler
