#include "compiler/validation/CacheWriteProblem.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "compiler/validation/ProblemData.h"
#include "compiler/validation/reference/CompanionReference.h"

namespace attnjit::validation {

using ir::ScalarKind;
using namespace problem_data;

namespace {

constexpr int64_t kKeyPadding = 8, kValuePadding = 16;  // after each token's row
constexpr int kSpareBlocks = 3;                         // never written

// Head h's fp8 scale: the tensor's, or with per-head scales the tensor's times
// 1 + h/4 (distinct per head, so a kernel reading another head's scale fails).
float sourceScale(float tensorScale, bool perHead, int64_t head) {
  return perHead ? tensorScale * (1.0f + static_cast<float>(head) / 4) : tensorScale;
}

reference::QuantFormat quantFormat(ScalarKind cacheKind) {
  return cacheKind == ScalarKind::I4       ? reference::QuantFormat::Int4
         : cacheKind == ScalarKind::I8     ? reference::QuantFormat::Int8
         : cacheKind == ScalarKind::F8E4M3 ? reference::QuantFormat::Fp8E4M3
                                           : reference::QuantFormat::Fp8E5M2;
}

double decodeQuantized(uint8_t bits, ScalarKind cacheKind) {
  switch (cacheKind) {
    case ScalarKind::I8: return static_cast<int8_t>(bits);
    case ScalarKind::F8E4M3: return reference::decodeFp8E4M3(bits);
    default: return reference::decodeFp8E5M2(bits);
  }
}

// vLLM's asymmetric int4 row (D values x, stored nibbles `row`, the stored scale
// with its zero point in the low mantissa bits) against the exact arithmetic:
// the writer divides as Triton does (2 ulp) and the stored scale drops four bits,
// so the scale must agree to 2^-18, the zero point to one step, and every value
// (q - zp) · scale to half a step (plus those relative errors).
template <typename Fail>
void checkAsymmetricInt4Row(const double* x, int D, const uint8_t* row, float stored, AttentionRunResult& result,
                            Fail fail) {
  double lo = x[0], hi = x[0];
  for (int d = 1; d < D; ++d) lo = std::min(lo, x[d]), hi = std::max(hi, x[d]);
  const double expectedScale = std::max((hi - lo) / 15.0, 1e-6);
  uint32_t bits = 0;
  std::memcpy(&bits, &stored, sizeof bits);
  const int zeroPoint = static_cast<int>(bits & 15u);
  const uint32_t clearedBits = bits & ~uint32_t{15};
  float scale = 0;
  std::memcpy(&scale, &clearedBits, sizeof scale);
  const double expectedZeroPoint = std::clamp(std::round(-lo / expectedScale), 0.0, 15.0);
  std::ostringstream text;
  text.precision(9);
  if (!(std::abs(scale - expectedScale) <= expectedScale * std::ldexp(1.0, -18))) {
    text << "stored scale " << scale << " (zero point bits cleared), expected " << expectedScale;
    fail(text.str());
    return;
  }
  if (std::abs(zeroPoint - expectedZeroPoint) > 1) {
    text << "stored zero point " << zeroPoint << ", expected " << expectedZeroPoint;
    fail(text.str());
    return;
  }
  for (int d = 0; d < D; ++d) {
    const int q = (row[d / 2] >> (d % 2 == 0 ? 0 : 4)) & 0xF;
    const double value = (q - zeroPoint) * static_cast<double>(scale);
    const double allowed = 0.5 * scale * (1 + 1e-3) + std::abs(x[d]) * 1e-5;
    const double err = std::abs(value - x[d]);
    result.tolerance = std::max(result.tolerance, allowed);
    result.maxAbsError = std::max(result.maxAbsError, err);
    result.maxRelError = std::max(result.maxRelError, err / allowed);
    if (err > allowed) {
      text << "dim " << d << ": stored " << q << " with zero point " << zeroPoint << " and scale " << scale
           << " stands for " << value << ", input " << x[d];
      fail(text.str());
      return;
    }
  }
}

}  // namespace

struct CacheWriteProblem::Data {
  compiler::CacheWriteConfig config;
  int64_t numTokens = 0, numBlocks = 0;
  std::vector<int64_t> slots;                // per token; -1 = padding
  std::vector<double> keys, values;          // [T][Hkv][D] and [T][Hkv][Dv], rounded to the dtype
  int64_t strideBlock = 0, strideKv = 0, strideToken = 0, strideHead = 0;  // cache, elements
  // Separate per-token-head scales: [num_blocks, block_size, Hkv] f32 per K and V,
  // blocks padded by 3 scales; buffer indices of k_scale_cache (v after it), or -1.
  int64_t scaleStrideBlock = 0, scaleStrideToken = 0, scaleStrideHead = 0;
  int scaleCacheBuffer = -1;
};

support::Expected<std::unique_ptr<CacheWriteProblem>> CacheWriteProblem::create(
    const compiler::CacheWriteConfig& config, const compiler::BatchShape& shape) {
  if (support::Status s = config.validate(); !s) return s;
  if (support::Status s = shape.validate(); !s) return s;
  auto data = std::make_shared<Data>();
  data->config = config;
  const ScalarKind dt = config.dtype;
  const int64_t Hkv = config.numKvHeads, D = config.headSize, bs = config.blockSize, row = config.cacheRowElements();
  const int64_t Dv = config.effectiveValueHeadSize(), valueRow = config.cacheValueRowElements();
  RandomStream random(shape.seed);

  // Blocks of every sequence (context and new tokens), a permutation of the cache's.
  std::vector<int64_t> blocksPerSeq;
  int64_t usedBlocks = 0;
  for (size_t s = 0; s < shape.queryLens.size(); ++s) {
    blocksPerSeq.push_back((shape.queryLens[s] + shape.contextLens[s] + bs - 1) / bs);
    usedBlocks += blocksPerSeq.back();
  }
  data->numBlocks = usedBlocks + kSpareBlocks;
  std::vector<int64_t> physical(static_cast<size_t>(data->numBlocks));
  for (size_t i = 0; i < physical.size(); ++i) physical[i] = static_cast<int64_t>(i);
  for (size_t i = physical.size() - 1; i > 0; --i) std::swap(physical[i], physical[random.below(i + 1)]);
  size_t nextBlock = 0;
  for (size_t s = 0; s < shape.queryLens.size(); ++s) {
    const size_t first = nextBlock;
    nextBlock += static_cast<size_t>(blocksPerSeq[s]);
    for (int i = 0; i < shape.queryLens[s]; ++i) {
      const int64_t pos = shape.contextLens[s] + i;
      const bool padding = random.below(8) == 0;
      data->slots.push_back(padding ? -1 : physical[first + static_cast<size_t>(pos / bs)] * bs + pos % bs);
    }
  }
  const int64_t T = static_cast<int64_t>(data->slots.size());
  data->numTokens = T;

  // Rows: uniform in [-1, 1] times 2^k (k in -6..6) per row; one row in 16 all zero.
  auto fillRows = [&](std::vector<double>& rows, int64_t rowSize) {
    rows.resize(static_cast<size_t>(T * Hkv * rowSize));
    for (int64_t r = 0; r < T * Hkv; ++r) {
      const bool zero = random.below(16) == 0;
      const double magnitude = std::ldexp(1.0, static_cast<int>(random.below(13)) - 6);
      for (int64_t d = 0; d < rowSize; ++d)
        rows[static_cast<size_t>(r * rowSize + d)] =
            zero ? 0.0 : ir::roundToFloatKind(magnitude * random.uniform(-1, 1), dt);
    }
  };
  fillRows(data->keys, D);
  fillRows(data->values, Dv);

  // (num_blocks, 2, block_size, Hkv, row), or vLLM's DiffKV packing when the config
  // names a value head size (equal to head_size included):
  // (num_blocks, block_size, Hkv, K row ‖ V row).
  if (config.valueHeadSize != 0) {
    data->strideHead = row + valueRow;
    data->strideToken = Hkv * data->strideHead;
    data->strideKv = row;
    data->strideBlock = bs * data->strideToken;
  } else {
    data->strideHead = row;
    data->strideToken = Hkv * row;
    data->strideKv = bs * Hkv * row;
    data->strideBlock = 2 * data->strideKv;
  }
  // Below 16-byte alignment the token strides are exactly as aligned as the
  // variant assumes and no more (a multiple of source_align bytes, an odd one), so
  // a wider access than the kernel may make faults on the GPU.
  auto tokenStride = [&](int64_t rowElements, int64_t padding) {
    const int64_t stride = Hkv * rowElements + padding;
    if (config.sourceAlign >= 16) return stride;
    const int64_t alignElements = std::max<int64_t>(1, config.sourceAlign / static_cast<int64_t>(elementBytes(dt)));
    const int64_t rounded = (stride + alignElements - 1) / alignElements * alignElements;
    return (rounded / alignElements) % 2 == 0 ? rounded + alignElements : rounded;
  };
  const int64_t keyStride = tokenStride(D, kKeyPadding), valueStride = tokenStride(Dv, kValuePadding);
  auto sourceRows = [&](const std::vector<double>& rows, int64_t strideToken, int64_t rowSize) {
    std::vector<uint8_t> bytes = poisonedBuffer(dt, static_cast<size_t>(T * strideToken));
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < Hkv * rowSize; ++i)
        setFloat(bytes, dt, static_cast<size_t>(t * strideToken + i), rows[static_cast<size_t>(t * Hkv * rowSize + i)]);
    return bytes;
  };
  std::unique_ptr<CacheWriteProblem> problem(new CacheWriteProblem());
  auto& buffers = problem->buffers_;
  buffers.push_back({"key", sourceRows(data->keys, keyStride, D), false});
  buffers.push_back({"value", sourceRows(data->values, valueStride, Dv), false});
  buffers.push_back(
      {"kv_cache",
       poisonedBuffer(config.cachePointerElement(), static_cast<size_t>(data->numBlocks * data->strideBlock)), true});
  std::vector<uint8_t> slotBytes(data->slots.size() * sizeof(int64_t));
  std::memcpy(slotBytes.data(), data->slots.data(), slotBytes.size());
  buffers.push_back({"slot_mapping", std::move(slotBytes), false});
  if (compiler::isPerTensorFp8(config.cacheFormat)) {
    for (float scale : {kKeyScale, kValueScale}) {
      const int64_t count = config.perHeadScales ? Hkv : 1;
      std::vector<uint8_t> bytes(static_cast<size_t>(count) * sizeof(float));
      for (int64_t h = 0; h < count; ++h) {
        const float headScale = sourceScale(scale, config.perHeadScales, h);
        std::memcpy(bytes.data() + h * static_cast<int64_t>(sizeof(float)), &headScale, sizeof headScale);
      }
      buffers.push_back({scale == kKeyScale ? "k_scale" : "v_scale", std::move(bytes), false});
    }
  }
  if (config.separateScales()) {
    data->scaleStrideHead = 1;
    data->scaleStrideToken = Hkv;
    data->scaleStrideBlock = bs * Hkv + 3;
    data->scaleCacheBuffer = static_cast<int>(buffers.size());
    for (const char* label : {"k_scale_cache", "v_scale_cache"})
      buffers.push_back(
          {label, poisonedBuffer(ScalarKind::F32, static_cast<size_t>(data->numBlocks * data->scaleStrideBlock)), true});
  }
  problem->scalars_ = {keyStride,        D,   valueStride, Dv, data->strideBlock, data->strideKv, data->strideToken,
                       data->strideHead};
  if (config.separateScales())
    problem->scalars_.insert(problem->scalars_.end(),
                             {data->scaleStrideBlock, data->scaleStrideToken, data->scaleStrideHead});
  problem->grid_ = {T, compiler::cacheWriteGridY(config), 1};
  const int64_t written = std::count_if(data->slots.begin(), data->slots.end(), [](int64_t s) { return s >= 0; });
  problem->minimumBytes_ = static_cast<double>(written * Hkv) *
                               (static_cast<double>(D + Dv) * static_cast<double>(elementBytes(dt)) +
                                static_cast<double>(row + valueRow) *
                                    static_cast<double>(elementBytes(config.cachePointerElement())) +
                                (config.separateScales() ? 2.0 * sizeof(float) : 0.0)) +
                           8.0 * static_cast<double>(T);
  problem->data_ = std::move(data);
  return problem;
}

void CacheWriteProblem::check(const std::vector<Buffer>& after, AttentionRunResult& result) const {
  const Data& data = *data_;
  const compiler::CacheWriteConfig& config = data.config;
  const ScalarKind dt = config.dtype, cacheKind = config.cacheElement(), pointerKind = config.cachePointerElement();
  const int64_t Hkv = config.numKvHeads, bs = config.blockSize;
  const std::vector<uint8_t>& cache = after[2].bytes;
  const bool perTokenHead = compiler::isPerTokenHead(config.cacheFormat);
  result.maxAbsError = 0;
  result.maxRelError = 0;
  result.tolerance = 0;
  std::string failure, worst;
  auto fail = [&](int64_t t, int64_t h, const char* kv, const std::string& what) {
    if (!failure.empty()) return;
    std::ostringstream text;
    text << "token " << t << " (slot " << data.slots[static_cast<size_t>(t)] << "), " << kv << " head " << h << ": "
         << what;
    failure = text.str();
  };

  std::vector<int64_t> owner(static_cast<size_t>(data.numBlocks * bs), -1);  // slot → token
  for (int64_t t = 0; t < data.numTokens; ++t)
    if (data.slots[static_cast<size_t>(t)] >= 0) owner[static_cast<size_t>(data.slots[static_cast<size_t>(t)])] = t;

  for (int64_t slot = 0; slot < data.numBlocks * bs; ++slot)
    for (int kv = 0; kv < 2; ++kv)
      for (int64_t h = 0; h < Hkv; ++h) {
        const int64_t base = (slot / bs) * data.strideBlock + kv * data.strideKv + (slot % bs) * data.strideToken +
                             h * data.strideHead;
        const int64_t t = owner[static_cast<size_t>(slot)];
        const char* kvName = kv == 0 ? "K" : "V";
        // Separate scales: the f32 of this (slot, head) in its tensor.
        const float* separateScale = nullptr;
        if (data.scaleCacheBuffer >= 0) {
          const std::vector<uint8_t>& scales = after[static_cast<size_t>(data.scaleCacheBuffer + kv)].bytes;
          const int64_t index =
              (slot / bs) * data.scaleStrideBlock + (slot % bs) * data.scaleStrideToken + h * data.scaleStrideHead;
          separateScale = reinterpret_cast<const float*>(scales.data()) + index;
          if (t < 0 && getBits(scales, ScalarKind::F32, static_cast<size_t>(index)) != poisonBits(ScalarKind::F32) &&
              failure.empty())
            failure = "the kernel wrote the " + std::string(kvName) + " scale of slot " + std::to_string(slot) +
                      ", head " + std::to_string(h) + ", which no token maps to";
        }
        const int64_t D = kv == 0 ? config.headSize : config.effectiveValueHeadSize();
        const int64_t row = kv == 0 ? config.cacheRowElements() : config.cacheValueRowElements();
        if (t < 0) {
          for (int64_t i = 0; i < row; ++i)
            if (getBits(cache, pointerKind, static_cast<size_t>(base + i)) != poisonBits(pointerKind)) {
              std::ostringstream text;
              text << "the kernel wrote slot " << slot << " (" << kvName << ", head " << h
                   << "), which no token maps to";
              if (failure.empty()) failure = text.str();
              break;
            }
          continue;
        }
        const double* x = &(kv == 0 ? data.keys : data.values)[static_cast<size_t>((t * Hkv + h) * D)];
        if (config.cacheFormat == compiler::KvCacheFormat::Auto) {
          for (int64_t d = 0; d < D; ++d)
            if (getBits(cache, dt, static_cast<size_t>(base + d)) != ir::encodeFloat(x[d], dt)) {
              std::ostringstream text;
              text << "dim " << d << ": got " << getFloat(cache, dt, static_cast<size_t>(base + d)) << ", expected "
                   << x[d];
              fail(t, h, kvName, text.str());
              result.maxAbsError = std::numeric_limits<double>::infinity();
            }
          continue;
        }
        if (config.asymmetricInt4()) {
          checkAsymmetricInt4Row(x, static_cast<int>(D), &cache[static_cast<size_t>(base)], *separateScale,
                                 result, [&](const std::string& what) { fail(t, h, kvName, what); });
          continue;
        }
        const reference::QuantFormat format = quantFormat(cacheKind);
        float scale = sourceScale(kv == 0 ? kKeyScale : kValueScale, config.perHeadScales, h);
        if (perTokenHead) {
          const float expectedScale = reference::perTokenHeadScale(x, static_cast<int>(D), format);
          float stored = 0;
          if (separateScale)
            std::memcpy(&stored, separateScale, sizeof stored);
          else
            std::memcpy(&stored,
                        &cache[static_cast<size_t>(
                            base + compiler::kvCacheScaleByteOffset(config.cacheFormat, static_cast<int>(D)))],
                        sizeof stored);
          if (std::memcmp(&stored, &expectedScale, sizeof stored) != 0) {
            std::ostringstream text;
            text.precision(9);
            text << "stored scale " << stored << ", expected " << expectedScale;
            fail(t, h, kvName, text.str());
          }
          scale = expectedScale;
        }
        const double qmax = reference::quantMax(format);
        for (int64_t d = 0; d < D; ++d) {
          const double y = x[d] / static_cast<double>(scale);
          const double clamped = std::clamp(y, -qmax, qmax);
          const double q = cacheKind == ScalarKind::I4
                               ? reference::decodeInt4(&cache[static_cast<size_t>(base)], static_cast<int>(d))
                               : decodeQuantized(cache[static_cast<size_t>(base + d)], cacheKind);
          // Half a step at the value's magnitude, plus the f32 division's rounding.
          const double allowed = (reference::halfQuantStep(clamped, format) + std::ldexp(std::abs(y), -22)) * scale;
          const double err = std::isnan(q) ? std::numeric_limits<double>::infinity() : std::abs(q - clamped) * scale;
          result.tolerance = std::max(result.tolerance, allowed);
          result.maxRelError = std::max(result.maxRelError, err / allowed);
          if (err > result.maxAbsError || worst.empty()) {
            std::ostringstream text;
            text << "token " << t << ", " << kvName << " head " << h << ", dim " << d << ": stored " << q
                 << " (scale " << scale << "), input " << x[d];
            worst = text.str();
            result.maxAbsError = std::max(result.maxAbsError, err);
          }
          if (err > allowed) {
            std::ostringstream text;
            text << "dim " << d << ": stored " << q << " for x / scale = " << y << " (allowed error "
                 << allowed / scale << ")";
            fail(t, h, kvName, text.str());
          }
        }
      }
  result.detail = failure.empty() ? (worst.empty() ? "all rows exact" : "largest error at " + worst) : failure;
  result.passed = failure.empty();
}

support::Expected<AttentionRunResult> runCacheWriteInterpreted(const compiler::CacheWriteConfig& config,
                                                          const compiler::BatchShape& shape) {
  auto problem = CacheWriteProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemInterpreted([&] { return compiler::buildCacheWrite(config); }, **problem);
}

support::Expected<GpuRunResult> runCacheWriteGpu(const compiler::CacheWriteConfig& config,
                                                 const compiler::BatchShape& shape, const GpuRunOptions& options) {
  auto problem = CacheWriteProblem::create(config, shape);
  if (!problem) return problem.status();
  return runProblemGpu([&] { return compiler::buildCacheWrite(config); }, **problem, options);
}

}  // namespace attnjit::validation
