// The argument checks every op makes before anything reaches the GPU, with
// messages that start with the op's name ("paged attention: q_stride_token (250)
// must be a multiple of 8 ...").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "support/Diagnostics.h"

namespace attnjit::ops {

// stride >= count · extent, exactly: a product past int64 exceeds every stride.
inline bool strideCovers(int64_t stride, int64_t count, int64_t extent) {
  int64_t product = 0;
  return !__builtin_mul_overflow(count, extent, &product) && stride >= product;
}

class ArgumentChecks {
 public:
  explicit ArgumentChecks(std::string op) : op_(std::move(op)) {}
  const std::string& op() const { return op_; }

  // "<op>: <message>".
  support::Status error(const std::string& message) const;
  // A device pointer: non-null when `required`, and `alignment`-byte aligned (the
  // kernels are compiled to assume it) when given.
  support::Status pointer(const char* name, uint64_t address, uint64_t alignment, bool required) const;

  // A stride the kernel is compiled to assume is a positive multiple of `multiple`.
  struct Stride {
    const char* name;
    int64_t value;
    int64_t multiple = 1;
  };
  // Every stride positive and a multiple of its `multiple`; `why` ends the
  // message of a stride that is not ("for head size 128 and kv_cache_dtype auto").
  support::Status strides(std::initializer_list<Stride> strides, const std::string& why = {}) const;
  // A token count a kernel indexes with 32 bits: 0 .. 2^31 - 1.
  support::Status tokenCount(int64_t numTokens) const;
  // Separate per-token-head scale tensors (paged attention, cache write): with
  // `separate`, positive strides; without, no tensor and no stride given (that
  // message ends "<formatLabel> <format>, kv_scale_layout <layout>").
  struct ScaleTensors {
    uint64_t kScaleCache, vScaleCache;
    int64_t strideBlock, strideToken, strideHead;
  };
  support::Status separateScales(bool separate, const ScaleTensors& tensors, const char* formatLabel,
                                 const char* format, const char* layout) const;

 private:
  std::string op_;
};

}  // namespace attnjit::ops
