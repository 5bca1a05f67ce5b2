// convert_fp8 as tile IR: program p loads its block of elements (masked past
// num_elements), converts them through f32 (to fp8: divide by the scale, then
// the f32 -> fp8 cast rounds to nearest even and saturates, as vLLM's
// __nv_cvt_float_to_fp8 with __NV_SATFINITE; from fp8: the exact f32 value times
// the scale, rounded to dtype) and stores them.
#include "compiler/kernels/ConvertCache.h"

#include <algorithm>
#include <tuple>

#include "compiler/kernels/ConfigChecks.h"
#include "compiler/kernels/FlatKernel.h"
#include "ir/Builder.h"

namespace attnjit::compiler {

using ir::Builder;
using ir::CmpPredicate;
using ir::ScalarKind;
using ir::Type;
using ir::Value;

namespace {

void buildBody(Builder& b, const ConvertCacheConfig& config, ir::Kernel& kernel) {
  // The fp8 side promises no more than the wide side's vector holds in
  // elements (16 / element bytes): a thread then loads and stores the same
  // elements, and the converted tile needs no trip through shared memory.
  const int64_t wideBytes = ir::storageBits(config.dtype) / 8;
  const auto promise = [&](ScalarKind kind) {
    ir::Attributes attributes;
    const int64_t bytes = kind == config.dtype ? config.alignment : std::min<int64_t>(config.alignment, 16 / wideBytes);
    if (bytes > 1) attributes.set("align", bytes);
    return attributes;
  };
  Value* src = kernel.addParameter(Type::pointer(config.srcElement()), "src", promise(config.srcElement()));
  Value* dst = kernel.addParameter(Type::pointer(config.dstElement()), "dst", promise(config.dstElement()));
  Value* scale = kernel.addParameter(Type::scalar(ScalarKind::F32), "scale");
  ir::Attributes count;
  if (config.countDivisibility > 1) count.set("divisibility", int64_t{config.countDivisibility});
  Value* numElements = kernel.addParameter(Type::scalar(ScalarKind::I64), "num_elements", count);

  const int64_t n = config.blockElements;
  const ScalarKind F32 = ScalarKind::F32, I64 = ScalarKind::I64;
  Value* program = b.cast(b.programId(0, "program"), I64, "program_i64");
  Value* first = b.mul(program, b.cast(b.constexprValue("BLOCK_ELEMENTS", ScalarKind::I32), I64), "first");
  Value* index = b.add(b.splat(first, {n}), b.cast(b.arange(0, n), I64), "index");
  Value* inRange = b.cmp(CmpPredicate::Lt, index, b.splat(numElements, {n}), "in_range");
  Value* x = b.load(b.addPtr(b.splat(src, {n}), index), inRange, nullptr, "x");
  Value* xF32 = config.srcElement() == F32 ? x : b.cast(x, F32, "x_f32");
  Value* scales = b.splat(scale, {n});
  Value* y = config.toFp8 ? b.div(xF32, scales, "scaled") : b.mul(xF32, scales, "scaled");
  Value* converted = config.dstElement() == F32 ? y : b.cast(y, config.dstElement(), "converted");
  b.store(b.addPtr(b.splat(dst, {n}), index), converted, inRange);
}

}  // namespace

ScalarKind ConvertCacheConfig::fp8Element() const { return kvCacheValueKind(cacheFormat, dtype); }
ScalarKind ConvertCacheConfig::srcElement() const { return toFp8 ? dtype : fp8Element(); }
ScalarKind ConvertCacheConfig::dstElement() const { return toFp8 ? fp8Element() : dtype; }

std::string ConvertCacheConfig::kernelName() const {
  const std::string wide = ir::scalarName(dtype), narrow = kvCacheFormatName(cacheFormat);
  std::string name = "convert_cache_" + (toFp8 ? wide + "_to_" + narrow : narrow + "_to_" + wide);
  const ConvertCacheConfig defaults;
  if (blockElements != defaults.blockElements) name += "_b" + std::to_string(blockElements);
  if (numWarps != defaults.numWarps) name += "_w" + std::to_string(numWarps);
  if (alignment != defaults.alignment) name += "_a" + std::to_string(alignment);
  if (countDivisibility != defaults.countDivisibility) name += "_n" + std::to_string(countDivisibility);
  return name;
}

support::Status ConvertCacheConfig::validate() const {
  if (support::Status s = checkIoDtype(dtype); !s) return s;
  if (!isPerTensorFp8(cacheFormat))
    return configError(std::string("kv_cache_dtype ") + kvCacheFormatName(cacheFormat) +
                       " is not supported by convert_cache; use fp8_e4m3 or fp8_e5m2");
  for (const auto& [field, value, low, high] :
       {std::tuple{"block_elements", blockElements, 256, 65536}, std::tuple{"num_warps", numWarps, 1, 16},
        std::tuple{"alignment", alignment, 1, 16}, std::tuple{"count_divisibility", countDivisibility, 1, 16}})
    if (support::Status s = checkPowerOfTwo(field, value, low, high); !s) return s;
  return support::Status::ok();
}

support::Expected<std::unique_ptr<ir::Kernel>> buildConvertCache(const ConvertCacheConfig& config) {
  if (support::Status s = config.validate(); !s) return s;
  return buildFlatKernel(config.kernelName(),
                         std::string("vLLM convert_fp8, ") + ir::scalarName(config.srcElement()) + " -> " +
                             ir::scalarName(config.dstElement()) + ": grid = (ceil(num_elements / BLOCK_ELEMENTS)).",
                         config.numWarps, {{"BLOCK_ELEMENTS", int64_t{config.blockElements}}},
                         [&](Builder& b, ir::Kernel& kernel) { buildBody(b, config, kernel); });
}

int64_t convertCacheGridX(const ConvertCacheConfig& config, int64_t numElements) {
  return (numElements + config.blockElements - 1) / config.blockElements;
}

}  // namespace attnjit::compiler
