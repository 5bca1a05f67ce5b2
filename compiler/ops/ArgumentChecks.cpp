#include "compiler/ops/ArgumentChecks.h"

#include <cstdio>
#include <limits>

namespace attnjit::ops {

support::Status ArgumentChecks::error(const std::string& message) const {
  return support::Status::error({}, op_ + ": " + message);
}

support::Status ArgumentChecks::pointer(const char* name, uint64_t address, uint64_t alignment, bool required) const {
  if (address == 0) return required ? error(std::string(name) + " is a null pointer") : support::Status::ok();
  if (address % alignment != 0) {
    char text[32];
    std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(address));
    return error(std::string(name) + " (" + text + ") is not " + std::to_string(alignment) +
                 "-byte aligned, as the kernel is compiled to assume");
  }
  return support::Status::ok();
}

support::Status ArgumentChecks::strides(std::initializer_list<Stride> strides, const std::string& why) const {
  for (const Stride& s : strides) {
    if (s.value <= 0) return error(std::string(s.name) + " (" + std::to_string(s.value) + ") must be positive");
    if (s.value % s.multiple != 0)
      return error(std::string(s.name) + " (" + std::to_string(s.value) + ") must be a multiple of " +
                   std::to_string(s.multiple) + (why.empty() ? "" : " " + why));
  }
  return support::Status::ok();
}

support::Status ArgumentChecks::tokenCount(int64_t numTokens) const {
  if (numTokens < 0 || numTokens > std::numeric_limits<int32_t>::max())
    return error("num_tokens (" + std::to_string(numTokens) + ") must be between 0 and " +
                 std::to_string(std::numeric_limits<int32_t>::max()));
  return support::Status::ok();
}

support::Status ArgumentChecks::separateScales(bool separate, const ScaleTensors& t, const char* formatLabel,
                                               const char* format, const char* layout) const {
  if (separate)
    return strides({{"scale_stride_block", t.strideBlock}, {"scale_stride_token", t.strideToken},
                    {"scale_stride_head", t.strideHead}});
  if (t.kScaleCache != 0 || t.vScaleCache != 0 || t.strideBlock != 0 || t.strideToken != 0 || t.strideHead != 0)
    return error(std::string("k_scale_cache/v_scale_cache and their strides are only used with separate "
                             "per-token-head scales (kv_scale_layout separate); ") +
                 formatLabel + " " + format + ", kv_scale_layout " + layout);
  return support::Status::ok();
}

}  // namespace attnjit::ops
