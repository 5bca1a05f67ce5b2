#include "compiler/validation/AttentionProblem.h"

#include "compiler/passes/Pipeline.h"
#include "compiler/validation/ProblemData.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <variant>

#include "compiler/kernels/ConfigChecks.h"
#include "compiler/kernels/ReduceSegments.h"
#include "support/ParallelFor.h"
#include "ir/Interpreter.h"
#include "ir/KernelAttributes.h"
#include "ir/Numeric.h"
#include "compiler/validation/reference/AttentionReference.h"

namespace attnjit::validation {

using ir::ScalarKind;
using support::Status;

namespace {

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// Largest max-abs error accepted for a data type, for outputs of magnitude <= 1
// (values are averages of V entries in [-1, 1]). Inputs are rounded to the data type
// before both the kernel and the reference see them, so only the kernel's own
// roundings count:
// - P is rounded to the data type before P·V while the denominator L sums the
//   unrounded P, giving |Σ P̃v - Σ Pv| / Σ P <= u · max|v| <= u;
// - the output is rounded to the data type: another u·|o| <= u;
// - everything else is f32 (u32 = 2^-24): scores, exp2 (whose argument error is at
//   most |S|·u32 with |S| <= sqrt(D)·log2(e) < 25) and sums over at most a few
//   hundred keys, all far below the two terms above for f16/bf16.
// u is 2^-11 for f16 and 2^-8 for bf16 (unit roundoff), so the bound is 2u; we allow
// 4u for the GPU's approximate exp2 and reordered sums. f32 with tf32 dots: the
// reference rounds q, k and v as the kernel does (reference::AttentionInputs),
// P's rounding to tf32 (u = 2^-11) remains, and the output is not rounded: as
// f16. Exact f32 keeps P in f32: its error is a few hundred u32 at worst, ~2e-5.
double attentionTolerance(ScalarKind dtype, bool tf32) {
  if (tf32) return 4 * std::ldexp(1.0, -11);
  switch (dtype) {
    case ScalarKind::F16:
      return 4 * std::ldexp(1.0, -11);  // 1.95e-3
    case ScalarKind::BF16:
      return 4 * std::ldexp(1.0, -8);  // 1.56e-2
    default:
      return 2e-5;
  }
}

// Quiet-NaN bit pattern of a data type: the value poisoning every byte the kernel
// must not read (unused cache slots, padding) or must overwrite (the output).
uint32_t nanBits(ScalarKind dtype) {
  switch (dtype) {
    case ScalarKind::F16:
      return 0x7E00;
    case ScalarKind::BF16:
      return 0x7FC0;
    case ScalarKind::F8E4M3:
      return 0x7F;
    default:
      return 0x7FC00000;
  }
}

// A host buffer of `dtype` elements.
class TypedBuffer {
 public:
  TypedBuffer(ScalarKind dtype, size_t elements)
      : dtype_(dtype),
        elementBytes_(static_cast<size_t>(ir::storageBits(dtype) / 8)),
        bytes_(elements * elementBytes_) {
    for (size_t i = 0; i < elements; ++i) setBits(i, nanBits(dtype));
  }
  void set(size_t index, double value) { setBits(index, ir::encodeFloat(value, dtype_)); }
  double get(size_t index) const { return ir::decodeFloat(getBits(index), dtype_); }
  uint32_t getBits(size_t index) const {
    uint32_t bits = 0;
    std::memcpy(&bits, &bytes_[index * elementBytes_], elementBytes_);  // little-endian host
    return bits;
  }
  void* data() { return bytes_.data(); }
  size_t byteSize() const { return bytes_.size(); }

 private:
  void setBits(size_t index, uint32_t bits) { std::memcpy(&bytes_[index * elementBytes_], &bits, elementBytes_); }

  ScalarKind dtype_;
  size_t elementBytes_;
  std::vector<uint8_t> bytes_;
};

// Deterministic values uniform in [-1, 1], never zero after rounding to the data
// type. Uses the engine's raw output (portable across standard libraries, unlike
// std::uniform_real_distribution).
class RandomValues {
 public:
  RandomValues(uint64_t seed, ScalarKind dtype) : engine_(seed), dtype_(dtype) {}
  double next() {
    while (true) {
      const double unit = (static_cast<double>(engine_() >> 11) + 0.5) * std::ldexp(1.0, -53);  // (0, 1)
      const double value = ir::roundToFloatKind(2 * unit - 1, dtype_);
      if (value != 0) return value;
    }
  }
  // A uniformly random permutation of 0..n-1 (Fisher-Yates).
  std::vector<int> permutation(int n) {
    std::vector<int> p(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) p[static_cast<size_t>(i)] = i;
    for (int i = n - 1; i > 0; --i) std::swap(p[static_cast<size_t>(i)], p[engine_() % static_cast<uint64_t>(i + 1)]);
    return p;
  }

 private:
  std::mt19937_64 engine_;
  ScalarKind dtype_;
};

// Padding (in elements) after each token's row of q and of the output. Distinct
// values, so a kernel that mixes up the two strides reads or writes the wrong place.
constexpr int64_t kQTokenPadding = 8;
constexpr int64_t kOutTokenPadding = 24;
// Unused physical blocks in the cache beyond those the block tables use, and extra
// block-table columns; both are never to be touched.
constexpr int kSpareBlocks = 3;
constexpr int kSpareBlockTableColumns = 2;
// Block-table entries past a sequence's last block: a block index far outside the
// cache, so a kernel that uses one fails the interpreter's bounds check.
constexpr int32_t kUnusedBlockEntry = std::numeric_limits<int32_t>::max();
// Per-tensor fp8 scales: inputs in [-1, 1] become values up to 128 and 64, well
// inside e4m3's and e5m2's range, and the two differ so a swap is caught.
constexpr float kKeyScale = 1.0f / 128, kValueScale = 1.0f / 64;
// fp8 queries: e4m3 values standing for q · kQueryScale (inputs in [-1, 1] become
// e4m3 values up to 32, in its normal range).
constexpr float kQueryScale = 1.0f / 32;

// A cache of `elements` pointer elements where every byte is 0xFF unless it is an
// auto-format cache (then the dtype's NaN): NaN in fp8 (both formats) and in an
// inline f32 scale, so a kernel that uses an unwritten row produces NaN.
std::vector<uint8_t> poisonedCache(compiler::KvCacheFormat format, ScalarKind dtype, size_t elements) {
  if (format == compiler::KvCacheFormat::Auto) {
    TypedBuffer buffer(dtype, elements);
    const auto* bytes = static_cast<const uint8_t*>(buffer.data());
    return std::vector<uint8_t>(bytes, bytes + buffer.byteSize());
  }
  const size_t bytes = elements * static_cast<size_t>(ir::storageBits(compiler::kvCachePointerKind(format, dtype)) / 8);
  return std::vector<uint8_t>(bytes, 0xFF);
}

// Rounds half away from zero (vLLM's int8 writer) and clamps to [-qmax, qmax].
double roundHalfAway(double y, double qmax) {
  double r = std::trunc(y);
  if (std::abs(y - r) >= 0.5) r += y < 0 ? -1 : 1;
  return std::clamp(r, -qmax, qmax);
}

// Writes one (token, head) row of D logical values into the cache at `row` in the
// format's encoding, and replaces each logical value by the value its encoding
// stands for (unchanged for auto: inputs are already rounded to the dtype).
// Returns a per-token-head row's scale, which is also stored after the values
// when `inlineScale` (else the caller stores it in a scale tensor); 0 otherwise.
float encodeCacheRow(compiler::KvCacheFormat format, ScalarKind dtype, float perTensorScale, double* values, int D,
                     uint8_t* row, bool inlineScale) {
  if (format == compiler::KvCacheFormat::Int4PerTokenHead && !inlineScale) {
    // vLLM's asymmetric int4: unsigned nibbles q with a zero point zp, both
    // stored in the scale's low four mantissa bits; q stands for (q - zp) ·
    // the scale with those bits cleared.
    double lo = values[0], hi = values[0];
    for (int d = 1; d < D; ++d) lo = std::min(lo, values[d]), hi = std::max(hi, values[d]);
    const float scale = std::max(static_cast<float>((hi - lo) / 15.0), 1e-6f);
    const double zeroPoint = std::clamp(roundHalfAway(-lo / scale, 1e9), 0.0, 15.0);
    uint32_t bits = 0;
    std::memcpy(&bits, &scale, sizeof bits);
    bits = (bits & ~uint32_t{15}) | static_cast<uint32_t>(zeroPoint);
    float packed = 0, cleared = 0;
    std::memcpy(&packed, &bits, sizeof packed);
    const uint32_t clearedBits = bits & ~uint32_t{15};
    std::memcpy(&cleared, &clearedBits, sizeof cleared);
    std::fill(row, row + D / 2, uint8_t{0});
    for (int d = 0; d < D; ++d) {
      const double q = std::clamp(roundHalfAway(values[d] / scale + zeroPoint, 1e9), 0.0, 15.0);
      row[d / 2] = static_cast<uint8_t>(row[d / 2] | (d % 2 == 0 ? static_cast<int>(q) : static_cast<int>(q) << 4));
      values[d] = (q - zeroPoint) * static_cast<double>(cleared);
    }
    return packed;
  }
  const ScalarKind valueKind = compiler::kvCacheValueKind(format, dtype);
  const double qmax = compiler::kvCacheQuantMax(format);
  switch (format) {
    case compiler::KvCacheFormat::Auto: {
      const size_t elementBytes = static_cast<size_t>(ir::storageBits(dtype) / 8);
      for (int d = 0; d < D; ++d) {
        const uint32_t bits = ir::encodeFloat(values[d], dtype);
        std::memcpy(row + static_cast<size_t>(d) * elementBytes, &bits, elementBytes);
      }
      return 0;
    }
    case compiler::KvCacheFormat::Fp8E4M3:
    case compiler::KvCacheFormat::Fp8E5M2:
      for (int d = 0; d < D; ++d) {
        const double q = ir::roundToFloatKind(std::clamp(values[d] / perTensorScale, -qmax, qmax), valueKind);
        row[d] = static_cast<uint8_t>(ir::encodeFloat(q, valueKind));
        values[d] = q * perTensorScale;
      }
      return 0;
    case compiler::KvCacheFormat::Int8PerTokenHead:
    case compiler::KvCacheFormat::Fp8PerTokenHead:
    case compiler::KvCacheFormat::Int4PerTokenHead: {
      double amax = 0;
      for (int d = 0; d < D; ++d) amax = std::max(amax, std::abs(values[d]));
      const float scale = std::max(static_cast<float>(amax / qmax), 1e-6f);
      if (format == compiler::KvCacheFormat::Int4PerTokenHead) std::fill(row, row + D / 2, uint8_t{0});
      for (int d = 0; d < D; ++d) {
        const double y = values[d] / scale;
        double q = 0;
        if (format == compiler::KvCacheFormat::Fp8PerTokenHead) {
          q = ir::roundToFloatKind(std::clamp(y, -qmax, qmax), ScalarKind::F8E4M3);
          row[d] = static_cast<uint8_t>(ir::encodeFloat(q, ScalarKind::F8E4M3));
        } else if (format == compiler::KvCacheFormat::Int8PerTokenHead) {
          q = roundHalfAway(y, qmax);
          row[d] = static_cast<uint8_t>(static_cast<int8_t>(q));
        } else {
          q = roundHalfAway(y, qmax);
          const uint8_t nibble = static_cast<uint8_t>(static_cast<int>(q) & 0xF);
          row[d / 2] = static_cast<uint8_t>(row[d / 2] | (d % 2 == 0 ? nibble : nibble << 4));
        }
        values[d] = q * static_cast<double>(scale);
      }
      if (inlineScale) std::memcpy(row + compiler::kvCacheScaleByteOffset(format, D), &scale, sizeof scale);
      return scale;
    }
  }
  return 0;
}

}  // namespace

struct UnifiedAttentionProblem::Data {
  compiler::UnifiedAttentionConfig config;
  int64_t lseStrideHead = 0;
  reference::AttentionInputs logical;
  int64_t numTokens = 0;
  int64_t oStrideToken = 0, oStrideHead = 0;
  int checkStride = 1;
  int outputScaleBuffer = -1;  // output_fp8: the index of the output_scale buffer
};

support::Expected<std::unique_ptr<UnifiedAttentionProblem>> UnifiedAttentionProblem::create(
    const compiler::UnifiedAttentionConfig& config, const compiler::BatchShape& shape) {
  if (support::Status s = config.validate(); !s) return s;
  if (support::Status s = shape.validate(); !s) return s;
  std::unique_ptr<UnifiedAttentionProblem> problem(new UnifiedAttentionProblem());
  problem->data_ = std::make_shared<Data>();
  Data& data = *problem->data_;
  data.config = config;
  data.checkStride = shape.checkStride;

  const ScalarKind dtype = config.dtype;
  const int numSeqs = static_cast<int>(shape.queryLens.size());
  const int64_t Hq = config.numQueryHeads, Hkv = config.numKvHeads, D = config.headSize;
  const int64_t Dv = config.effectiveValueHeadSize();
  const int64_t blockSize = config.blockSize;

  // ---- The logical problem (also the reference's input). ----
  reference::AttentionInputs& logical = data.logical;
  logical.numQueryHeads = config.numQueryHeads;
  logical.numKvHeads = config.numKvHeads;
  logical.headSize = config.headSize;
  logical.valueHeadSize = static_cast<int>(Dv);
  logical.causal = config.causal;
  logical.scale = 1.0 / std::sqrt(static_cast<double>(D));
  logical.slidingWindow = config.slidingWindow;
  logical.slidingWindowRight = config.slidingWindowRight;
  logical.softcap = config.softcap;
  logical.alibiSqrt = config.alibiSqrt;
  logical.attentionChunkSize = config.attentionChunkSize;
  logical.tf32Queries = config.tf32Dots();
  logical.tf32Cache = config.tf32Dots() && config.kvCacheFormat == compiler::KvCacheFormat::Auto;
  logical.cuSeqlensQ.push_back(0);
  for (int s = 0; s < numSeqs; ++s) {
    logical.cuSeqlensQ.push_back(logical.cuSeqlensQ.back() + shape.queryLens[static_cast<size_t>(s)]);
    logical.seqLens.push_back(shape.queryLens[static_cast<size_t>(s)] + shape.contextLens[static_cast<size_t>(s)]);
  }
  const int64_t numTokens = logical.cuSeqlensQ.back();
  data.numTokens = numTokens;
  // Each sequence's queries, keys and values come from a stream of their own
  // (seed, sequence index): the same sequence in two batches of one seed gets the
  // same data, which the batch-invariance tests compare.
  RandomValues random(shape.seed, dtype);
  logical.q.resize(static_cast<size_t>(numTokens * Hq * D));
  logical.keys.resize(static_cast<size_t>(numSeqs));
  logical.values.resize(static_cast<size_t>(numSeqs));
  support::parallelFor(numSeqs, [&](int s) {
    RandomValues sequenceRandom(shape.seed * 0x100000001B3ull + static_cast<uint64_t>(s) + 1, dtype);
    for (int64_t t = logical.cuSeqlensQ[static_cast<size_t>(s)]; t < logical.cuSeqlensQ[static_cast<size_t>(s) + 1];
         ++t)
      for (int64_t i = 0; i < Hq * D; ++i) logical.q[static_cast<size_t>(t * Hq * D + i)] = sequenceRandom.next();
    const size_t kvRows = static_cast<size_t>(logical.seqLens[static_cast<size_t>(s)] * Hkv);
    auto& keys = logical.keys[static_cast<size_t>(s)];
    auto& values = logical.values[static_cast<size_t>(s)];
    keys.resize(kvRows * static_cast<size_t>(D));
    values.resize(kvRows * static_cast<size_t>(Dv));
    for (double& x : keys) x = sequenceRandom.next();
    for (double& x : values) x = sequenceRandom.next();
    // Keys are [seq_len, Hkv, D]: key j's rows scaled by 1 + key_ramp·j, rounded
    // to the data type so that the reference sees what the kernel reads.
    if (shape.keyRamp != 0)
      for (size_t i = 0; i < keys.size(); ++i) {
        const double position = static_cast<double>(i / static_cast<size_t>(Hkv * D));
        keys[i] = ir::roundToFloatKind(keys[i] * (1 + shape.keyRamp * position), dtype);
      }
  });
  // fp8 queries: each query is what its e4m3 value stands for, so the reference
  // sees exactly what the kernel reads.
  if (config.queryFp8)
    for (double& x : logical.q) x = ir::roundToFloatKind(x / kQueryScale, ScalarKind::F8E4M3) * kQueryScale;

  // ---- Device layouts. ----
  const int64_t qStrideToken = Hq * D + kQTokenPadding, qStrideHead = D;
  const int64_t oStrideToken = Hq * Dv + kOutTokenPadding, oStrideHead = Dv;
  data.oStrideToken = oStrideToken;
  data.oStrideHead = oStrideHead;
  TypedBuffer q(config.queryFp8 ? ScalarKind::F8E4M3 : dtype, static_cast<size_t>(numTokens * qStrideToken));
  const double qStored = config.queryFp8 ? 1.0 / kQueryScale : 1.0;  // exact: a power of two
  for (int64_t t = 0; t < numTokens; ++t)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t d = 0; d < D; ++d)
        q.set(static_cast<size_t>(t * qStrideToken + h * qStrideHead + d),
              logical.q[static_cast<size_t>((t * Hq + h) * D + d)] * qStored);

  // Cache (num_blocks, 2, block_size, Hkv, row) in the config's format or, when the
  // config names a value head size (DiffKV, equal to head_size included), vLLM's
  // packed (num_blocks, block_size, Hkv, K row ‖ V row); sequences'
  // blocks are a random permutation of the physical blocks, so the block table is
  // exercised. Quantized formats replace each logical K/V value by what its
  // quantized form stands for, so the reference sees exactly the cache's content.
  const compiler::KvCacheFormat format = config.kvCacheFormat;
  const ScalarKind cachePointerKind = compiler::kvCachePointerKind(format, dtype);
  const int64_t cacheElementBytes = ir::storageBits(cachePointerKind) / 8;
  const int64_t rowElements = config.keyRowElements();
  const int64_t valueRowElements = config.valueRowElements();
  const bool packedLayout = config.valueHeadSize != 0;
  std::vector<int> blocksPerSeq;
  int usedBlocks = 0;
  for (int seqLen : logical.seqLens) {
    blocksPerSeq.push_back(static_cast<int>((seqLen + blockSize - 1) / blockSize));
    usedBlocks += blocksPerSeq.back();
  }
  const int numBlocks = usedBlocks + kSpareBlocks;
  // NHD (vLLM's flash layout): [blocks, 2, block_size, Hkv, row]; HND (head-major):
  // [blocks, 2, Hkv, block_size, row]; DiffKV: [blocks, block_size, Hkv, D + Dv].
  if (shape.headMajorCache && packedLayout)
    return support::Diagnostic{{}, "kv_layout=hnd: DiffKV's packed cache has only the NHD layout"};
  const bool headMajor = shape.headMajorCache;
  const int64_t kvStrideHead =
      packedLayout ? rowElements + valueRowElements : headMajor ? blockSize * rowElements : rowElements;
  const int64_t kvStrideToken = headMajor ? rowElements : Hkv * kvStrideHead;
  const int64_t kvStrideKv = packedLayout ? rowElements : blockSize * Hkv * rowElements;
  const int64_t kvStrideBlock = packedLayout ? blockSize * kvStrideToken : 2 * kvStrideKv;
  std::vector<uint8_t> kvCache = poisonedCache(format, dtype, static_cast<size_t>(numBlocks * kvStrideBlock));
  // Separate per-token-head scales: [num_blocks, block_size, Hkv] f32 per K and V,
  // blocks padded by 3 scales so the block stride is checked; NaN until written.
  const bool separateScales = config.separateScales();
  const int64_t scaleStrideHead = 1, scaleStrideToken = Hkv, scaleStrideBlock = blockSize * Hkv + 3;
  std::vector<float> kScaleCache, vScaleCache;
  if (separateScales) {
    kScaleCache.assign(static_cast<size_t>(numBlocks * scaleStrideBlock), std::numeric_limits<float>::quiet_NaN());
    vScaleCache = kScaleCache;
  }
  const int64_t blockTableStride =
      *std::max_element(blocksPerSeq.begin(), blocksPerSeq.end()) + kSpareBlockTableColumns;
  std::vector<int32_t> blockTables(static_cast<size_t>(numSeqs * blockTableStride), kUnusedBlockEntry);
  const std::vector<int> physicalOrder = random.permutation(numBlocks);
  size_t nextPhysical = 0;
  for (int s = 0; s < numSeqs; ++s)
    for (int b = 0; b < blocksPerSeq[static_cast<size_t>(s)]; ++b)
      blockTables[static_cast<size_t>(s * blockTableStride + b)] = physicalOrder[nextPhysical++];
  // Sequences own disjoint blocks: their rows are encoded in parallel.
  support::parallelFor(numSeqs, [&](int s) {
    for (int64_t pos = 0; pos < logical.seqLens[static_cast<size_t>(s)]; ++pos) {
      const int64_t block = blockTables[static_cast<size_t>(s * blockTableStride + pos / blockSize)];
      const int64_t slot = block * kvStrideBlock + (pos % blockSize) * kvStrideToken;
      for (int64_t h = 0; h < Hkv; ++h) {
        for (int kv = 0; kv < 2; ++kv) {
          std::vector<double>& rows =
              kv == 0 ? logical.keys[static_cast<size_t>(s)] : logical.values[static_cast<size_t>(s)];
          const int64_t rowSize = kv == 0 ? D : Dv;
          const size_t logicalIndex = static_cast<size_t>((pos * Hkv + h) * rowSize);
          const int64_t element = slot + kv * kvStrideKv + h * kvStrideHead;
          const float rowScale =
              encodeCacheRow(format, dtype, kv == 0 ? kKeyScale : kValueScale, &rows[logicalIndex],
                             static_cast<int>(rowSize), &kvCache[static_cast<size_t>(element * cacheElementBytes)],
                             !separateScales);
          if (separateScales)
            (kv == 0 ? kScaleCache : vScaleCache)[static_cast<size_t>(
                block * scaleStrideBlock + (pos % blockSize) * scaleStrideToken + h * scaleStrideHead)] = rowScale;
        }
      }
    }
  });
  // Bidirectional ranges (mm_prefix_ranges per sequence), from their own
  // stream: every third unused (first >= last, as padding is), the others over
  // [0, seq_len). The first of each sequence holds its first query and starts
  // a third of the sequence or more before it, so that queries see later keys
  // and keys tiles before their window or chunk.
  if (config.mmPrefixRanges > 0) {
    uint64_t state = shape.seed ^ 0xA24BAED4963EE407ull;
    auto nextInt = [&state](int64_t bound) {  // splitmix64, in [0, bound)
      state += 0x9E3779B97F4A7C15ull;
      uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      return bound <= 0 ? int64_t{0} : static_cast<int64_t>((z ^ (z >> 31)) % static_cast<uint64_t>(bound));
    };
    for (int s = 0; s < numSeqs; ++s) {
      const int64_t seqLen = logical.seqLens[static_cast<size_t>(s)];
      const int64_t contextLen = seqLen - shape.queryLens[static_cast<size_t>(s)];
      std::vector<std::pair<int, int>> ranges;
      for (int r = 0; r < config.mmPrefixRanges; ++r) {
        if (r % 3 == 2) {
          ranges.push_back({r % 2 == 0 ? 0 : -1, r % 2 == 0 ? 0 : -1});
          continue;
        }
        const int64_t queryLen = seqLen - contextLen;
        const int64_t first = r == 0 ? std::max<int64_t>(0, contextLen - seqLen / 3 - nextInt(seqLen / 4 + 1))
                                     : nextInt(seqLen);
        const int64_t last = r == 0 ? std::min(seqLen - 1, contextLen + 1 + nextInt(std::max<int64_t>(queryLen, 2)))
                                    : std::min(seqLen - 1, first + 1 + nextInt(std::max<int64_t>(seqLen / 3, 2)));
        ranges.push_back({static_cast<int>(first), static_cast<int>(last)});
      }
      logical.mmPrefixRanges.push_back(std::move(ranges));
    }
  }
  // A sliding window hides keys j <= context_len - sw from every query of the
  // sequence (the first query, at context_len, sees the latest keys), and local
  // chunks the keys before the first query's chunk. vLLM may free such blocks
  // and reuse their slots: poison the hidden rows with NaN and drop the
  // block-table entries of blocks that hold only hidden keys, so a kernel that
  // reads any of them fails. A bidirectional range keeps its keys.
  if (config.slidingWindow > 0 || config.attentionChunkSize > 0) {
    const std::vector<uint8_t> poisonRow =
        poisonedCache(format, dtype, static_cast<size_t>(std::max(rowElements, valueRowElements)));
    for (int s = 0; s < numSeqs; ++s) {
      const int64_t contextLen =
          logical.seqLens[static_cast<size_t>(s)] - (logical.cuSeqlensQ[static_cast<size_t>(s) + 1] -
                                                     logical.cuSeqlensQ[static_cast<size_t>(s)]);
      int64_t hiddenKeys = 0;
      if (config.slidingWindow > 0) hiddenKeys = std::max<int64_t>(0, contextLen - config.slidingWindow + 1);
      if (config.attentionChunkSize > 0)
        hiddenKeys = std::max<int64_t>(hiddenKeys, contextLen / config.attentionChunkSize * config.attentionChunkSize);
      if (!logical.mmPrefixRanges.empty())
        for (const auto& [first, last] : logical.mmPrefixRanges[static_cast<size_t>(s)])
          if (first < last) hiddenKeys = std::min<int64_t>(hiddenKeys, std::max(first, 0));
      for (int64_t pos = 0; pos < hiddenKeys; ++pos) {
        const int64_t block = blockTables[static_cast<size_t>(s * blockTableStride + pos / blockSize)];
        const int64_t slot = block * kvStrideBlock + (pos % blockSize) * kvStrideToken;
        for (int64_t h = 0; h < Hkv; ++h)
          for (int kv = 0; kv < 2; ++kv) {
            if (separateScales)
              (kv == 0 ? kScaleCache : vScaleCache)[static_cast<size_t>(
                  block * scaleStrideBlock + (pos % blockSize) * scaleStrideToken + h * scaleStrideHead)] =
                  std::numeric_limits<float>::quiet_NaN();
            const size_t bytes = static_cast<size_t>((kv == 0 ? rowElements : valueRowElements) * cacheElementBytes);
            std::copy(poisonRow.begin(), poisonRow.begin() + static_cast<ptrdiff_t>(bytes),
                      kvCache.begin() +
                          static_cast<ptrdiff_t>((slot + kv * kvStrideKv + h * kvStrideHead) * cacheElementBytes));
          }
      }
      for (int64_t b = 0; b < hiddenKeys / blockSize; ++b)
        blockTables[static_cast<size_t>(s * blockTableStride + b)] = kUnusedBlockEntry;
    }
  }
  std::vector<int32_t> seqLens(logical.seqLens.begin(), logical.seqLens.end());
  std::vector<int32_t> cuSeqlensQ(logical.cuSeqlensQ.begin(), logical.cuSeqlensQ.end());
  const ScalarKind outKind = config.outputFp8 ? ScalarKind::F8E4M3 : dtype;
  TypedBuffer out(outKind, static_cast<size_t>(numTokens * oStrideToken));  // all NaN until written
  // Per-sequence causal flags: alternating, starting causal, with one flag byte of
  // 2 (any nonzero value means causal).
  std::vector<int8_t> causalFlags;
  if (config.perSequenceCausal) {
    for (int s = 0; s < numSeqs; ++s) {
      causalFlags.push_back(static_cast<int8_t>(s % 2 == 0 ? (s == 2 ? 2 : 1) : 0));
      logical.causalPerSequence.push_back(s % 2 == 0);
    }
  }

  auto bytesOf = [](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    return std::vector<uint8_t>(b, b + n);
  };
  auto& buffers = problem->buffers_;
  buffers = {
      {"out", bytesOf(out.data(), out.byteSize())},
      {"q", bytesOf(q.data(), q.byteSize())},
      {"kv_cache", std::move(kvCache)},
      {"block_tables", bytesOf(blockTables.data(), blockTables.size() * sizeof(int32_t))},
      {"seq_lens", bytesOf(seqLens.data(), seqLens.size() * sizeof(int32_t))},
      {"cu_seqlens_q", bytesOf(cuSeqlensQ.data(), cuSeqlensQ.size() * sizeof(int32_t))},
  };
  if (config.perSequenceCausal) buffers.push_back({"causal_flags", bytesOf(causalFlags.data(), causalFlags.size())});
  if (compiler::isPerTensorFp8(format)) {
    for (float scale : {kKeyScale, kValueScale})
      buffers.push_back({scale == kKeyScale ? "k_scale" : "v_scale", bytesOf(&scale, sizeof scale)});
  }
  if (config.queryFp8) buffers.push_back({"q_scale", bytesOf(&kQueryScale, sizeof kQueryScale)});
  // Per-head ALiBi slopes and sink logits (f32 [Hq]), from their own random stream
  // so the other inputs do not depend on which features are on. Slopes are
  // positive as in ALiBi, at most 0.25 (a bias of a few units over tens of keys);
  // sinks in [-2, 2], the range of the scores, so that they visibly matter.
  RandomValues featureRandom(shape.seed ^ 0x9E3779B97F4A7C15ull, ScalarKind::F32);
  auto perHeadBuffer = [&](const char* label, double magnitude, bool positive, std::vector<double>& logicalValues) {
    std::vector<float> values(static_cast<size_t>(Hq));
    for (float& v : values) {
      const double r = featureRandom.next();
      v = static_cast<float>(magnitude * (positive ? std::abs(r) : r));
      logicalValues.push_back(v);
    }
    buffers.push_back({label, bytesOf(values.data(), values.size() * sizeof(float))});
  };
  if (config.alibi) perHeadBuffer("alibi_slopes", 0.25, /*positive=*/true, logical.alibiSlopes);
  if (config.sinks) perHeadBuffer("sinks", 2.0, /*positive=*/false, logical.sinks);
  // qq_bias: [n, n] for the longest query n, values in [-1, 1] with -inf at
  // some earlier keys (never a query's own), as a tree mask hides non-ancestors.
  const int64_t qqBiasColumns =
      config.qqBias ? *std::max_element(shape.queryLens.begin(), shape.queryLens.end()) : 0;
  if (config.qqBias) {
    std::vector<float> bias(static_cast<size_t>(qqBiasColumns * qqBiasColumns));
    for (int64_t i = 0; i < qqBiasColumns; ++i)
      for (int64_t k = 0; k < qqBiasColumns; ++k) {
        const double r = featureRandom.next();
        bias[static_cast<size_t>(i * qqBiasColumns + k)] =
            k != i && (i + 2 * k) % 5 == 3 ? -std::numeric_limits<float>::infinity() : static_cast<float>(r);
      }
    logical.qqBias.assign(bias.begin(), bias.end());
    logical.qqBiasColumns = static_cast<int>(qqBiasColumns);
    buffers.push_back({"qq_bias", bytesOf(bias.data(), bias.size() * sizeof(float))});
  }
  if (config.mmPrefixRanges > 0) {
    std::vector<int32_t> ranges;
    for (const auto& sequenceRanges : logical.mmPrefixRanges)
      for (const auto& [first, last] : sequenceRanges) {
        ranges.push_back(first);
        ranges.push_back(last);
      }
    buffers.push_back({"mm_prefix_range", bytesOf(ranges.data(), ranges.size() * sizeof(int32_t))});
  }
  if (config.outputFp8) {
    data.outputScaleBuffer = static_cast<int>(buffers.size());
    const float outputScale = static_cast<float>(shape.outputScale);
    buffers.push_back({"output_scale", bytesOf(&outputScale, sizeof outputScale)});
  }
  // LSE [Hq, num_tokens] with a padded head stride, poisoned.
  const int64_t lseStrideHead = numTokens + 5;
  if (config.outputLse) {
    problem->lseBuffer_ = static_cast<int>(buffers.size());
    const std::vector<float> poison(static_cast<size_t>(Hq * lseStrideHead), std::numeric_limits<float>::quiet_NaN());
    buffers.push_back({"lse", bytesOf(poison.data(), poison.size() * sizeof(float))});
  }
  if (separateScales) {
    buffers.push_back({"k_scale_cache", bytesOf(kScaleCache.data(), kScaleCache.size() * sizeof(float))});
    buffers.push_back({"v_scale_cache", bytesOf(vScaleCache.data(), vScaleCache.size() * sizeof(float))});
  }
  const size_t attentionPointers = buffers.size();

  Launch attention;
  attention.gridX = compiler::unifiedAttentionGridX(config, numSeqs, numTokens);
  attention.gridY = Hkv;
  if (config.persistent && shape.programs > 0) {
    // Persistent programs walk the (query block, KV head) items whatever the
    // grid: one row of at most as many programs as items.
    attention.gridX = std::min<int64_t>(shape.programs, attention.gridX * Hkv);
    attention.gridY = 1;
  }
  // As the op: a batch of one query token per sequence (decode) finds its
  // sequences without the search (seq_search_steps -1), except when checked.
  const bool oneTokenEach = !config.checkBounds && std::all_of(shape.queryLens.begin(), shape.queryLens.end(),
                                                               [](int queryLen) { return queryLen == 1; });
  const int64_t seqSearchSteps = compiler::unifiedAttentionSeqSearchSteps(numSeqs, oneTokenEach);
  attention.scalars = {logical.scale, int64_t{numSeqs}, seqSearchSteps, qStrideToken, qStrideHead};
  if (!config.splitKv) attention.scalars.insert(attention.scalars.end(), {oStrideToken, oStrideHead});
  attention.scalars.insert(attention.scalars.end(),
                           {blockTableStride, kvStrideBlock, kvStrideKv, kvStrideToken, kvStrideHead});
  if (config.outputLse && !config.splitKv) attention.scalars.push_back(lseStrideHead);
  if (config.qqBias) attention.scalars.push_back(qqBiasColumns);
  if (separateScales)
    attention.scalars.insert(attention.scalars.end(), {scaleStrideBlock, scaleStrideToken, scaleStrideHead});
  if (config.clusterSplit > 0) {
    // One cluster of cluster_split programs per (query block, KV head): as
    // split_kv's segments, num_segments per sequence cut on the GPU, or
    // segments of a fixed length that cover the longest sequence.
    const int64_t maxSeqLen = *std::max_element(logical.seqLens.begin(), logical.seqLens.end());
    const int64_t tiles = (maxSeqLen + config.tileSize - 1) / config.tileSize;
    attention.gridZ = config.clusterSplit;
    attention.scalars.push_back(shape.numSegments > 0 ? int64_t{-shape.segmentTiles}
                                                      : std::max<int64_t>(1, (tiles + config.clusterSplit - 1) /
                                                                                 config.clusterSplit));
  }
  if (config.splitKv) {
    // Segments of segment_tiles KV tiles, enough for the longest sequence; or
    // num_segments per sequence, cut on the GPU (segment_tiles = -minimum).
    const int64_t maxSeqLen = *std::max_element(logical.seqLens.begin(), logical.seqLens.end());
    const int64_t tiles = (maxSeqLen + config.tileSize - 1) / config.tileSize;
    const bool perSequence = shape.numSegments > 0;
    const int64_t numSegments =
        perSequence ? shape.numSegments : (tiles + shape.segmentTiles - 1) / shape.segmentTiles;
    attention.gridZ = numSegments;
    attention.scalars.insert(attention.scalars.end(),
                             {numSegments, int64_t{perSequence ? -shape.segmentTiles : shape.segmentTiles}});
    const int64_t rows = numTokens * Hq * numSegments;
    const size_t segmOutput = buffers.size();
    auto poisonedF32 = [&](const char* label, int64_t n) {
      const std::vector<float> poison(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
      buffers.push_back({label, bytesOf(poison.data(), poison.size() * sizeof(float))});
    };
    poisonedF32("segm_output", rows * config.valueHeadSizePadded());
    poisonedF32("segm_max", rows);
    poisonedF32("segm_expsum", rows);
    attention.pointers = {segmOutput, segmOutput + 1, segmOutput + 2};
    // Stage 1 writes scratch only: the LSE and the fp8 output scale are stage 2's.
    for (size_t i = 1; i < attentionPointers; ++i)
      if (static_cast<int>(i) != problem->lseBuffer_ && static_cast<int>(i) != data.outputScaleBuffer)
        attention.pointers.push_back(i);
    Launch reduce;
    reduce.reduceSegments = true;
    reduce.pointers = {0, segmOutput, segmOutput + 1, segmOutput + 2};
    if (config.outputLse) reduce.pointers.push_back(static_cast<size_t>(problem->lseBuffer_));
    if (config.outputFp8) reduce.pointers.push_back(static_cast<size_t>(data.outputScaleBuffer));
    reduce.scalars = {numSegments, oStrideToken, oStrideHead};
    if (config.outputLse) reduce.scalars.push_back(lseStrideHead);
    reduce.gridX = numTokens;
    reduce.gridY = compiler::reduceSegmentsGridY(compiler::reduceSegmentsFor(data.config));
    problem->launches_ = {attention, reduce};
  } else {
    for (size_t i = 0; i < attentionPointers; ++i) attention.pointers.push_back(i);
    problem->launches_ = {attention};
  }
  data.lseStrideHead = lseStrideHead;
  problem->layout_ = {logical.scale,
                      numBlocks,
                      qStrideToken,
                      qStrideHead,
                      oStrideToken,
                      oStrideHead,
                      blockTableStride,
                      kvStrideBlock,
                      kvStrideKv,
                      kvStrideToken,
                      kvStrideHead,
                      lseStrideHead,
                      separateScales ? scaleStrideBlock : 0,
                      separateScales ? scaleStrideToken : 0,
                      separateScales ? scaleStrideHead : 0};

  const double elementBytes = ir::storageBits(dtype) / 8.0;
  // One K row and one V row per (key, KV head).
  const double cacheRowBytes = static_cast<double>((rowElements + valueRowElements) * cacheElementBytes) +
                               (separateScales ? 2.0 * sizeof(float) : 0.0);
  double visiblePairs = 0, keys = 0;
  for (int s = 0; s < numSeqs; ++s) {
    const int64_t queryLen = shape.queryLens[static_cast<size_t>(s)];
    const int64_t seqLen = logical.seqLens[static_cast<size_t>(s)];
    const int64_t contextLen = seqLen - queryLen;
    keys += static_cast<double>(seqLen);
    const bool causal =
        logical.causalPerSequence.empty() ? config.causal : logical.causalPerSequence[static_cast<size_t>(s)];
    if (config.slidingWindow > 0 || config.rightWindow() > 0 || config.attentionChunkSize > 0 ||
        config.mmPrefixRanges > 0) {
      const int64_t chunk = config.attentionChunkSize;
      for (int64_t position = contextLen; position < seqLen; ++position) {
        int64_t firstKey = config.slidingWindow > 0 ? std::max<int64_t>(0, position + 1 - config.slidingWindow) : 0;
        int64_t endKey = causal ? position + 1
                                : (config.rightWindow() > 0 ? std::min(seqLen, position + config.rightWindow()) : seqLen);
        if (chunk > 0) {
          firstKey = std::max(firstKey, position / chunk * chunk);
          endKey = std::min(endKey, (position / chunk + 1) * chunk);
        }
        visiblePairs += static_cast<double>(std::max<int64_t>(0, endKey - firstKey));
        if (config.mmPrefixRanges == 0) continue;
        for (int64_t key = 0; key < seqLen; ++key) {
          if (key >= firstKey && key < endKey) continue;
          for (const auto& [first, last] : logical.mmPrefixRanges[static_cast<size_t>(s)])
            if (first < last && position >= first && position <= last && key >= first && key <= last) {
              visiblePairs += 1;
              break;
            }
        }
      }
      continue;
    }
    visiblePairs += causal ? static_cast<double>(queryLen) * static_cast<double>(contextLen) +
                                        static_cast<double>(queryLen) * static_cast<double>(queryLen + 1) / 2
                                  : static_cast<double>(queryLen) * static_cast<double>(seqLen);
  }
  const double outElementBytes = ir::storageBits(outKind) / 8.0;
  problem->minimumBytes_ = (config.queryFp8 ? 1.0 : elementBytes) * static_cast<double>(numTokens * Hq * D) +
                           outElementBytes * static_cast<double>(numTokens * Hq * Dv) +
                           keys * static_cast<double>(Hkv) * cacheRowBytes;
  // 2·Dqk FLOPs per score and 2·Dv per P·V term: 4·D·Hq per visible pair when equal.
  problem->flops_ = 2.0 * static_cast<double>((D + Dv) * Hq) * visiblePairs;
  return problem;
}

support::Expected<std::unique_ptr<ir::Kernel>> UnifiedAttentionProblem::buildKernel(const Launch& launch) const {
  if (launch.reduceSegments) return compiler::buildReduceSegments(compiler::reduceSegmentsFor(data_->config));
  return compiler::buildUnifiedAttention(data_->config);
}

int UnifiedAttentionProblem::bufferIndex(const std::string& label) const {
  for (size_t i = 0; i < buffers_.size(); ++i)
    if (buffers_[i].label == label) return static_cast<int>(i);
  return -1;
}

void UnifiedAttentionProblem::check(const std::vector<uint8_t>& output, AttentionRunResult& result,
                                    const std::vector<uint8_t>* lse) const {
  const Data& data = *data_;
  const ScalarKind dtype = data.config.dtype;
  const ScalarKind outKind = data.config.outputFp8 ? ScalarKind::F8E4M3 : dtype;
  const int64_t Hq = data.config.numQueryHeads, D = data.config.effectiveValueHeadSize();  // output rows are V-sized
  result.tolerance = attentionTolerance(dtype, data.config.tf32Dots());
  result.outputStrideToken = data.oStrideToken;
  result.maxAbsError = 0;
  result.maxRelError = 0;
  // fp8 output is compared in o's units, the error counting only beyond e4m3's
  // own rounding (problem_data::compareFp8Output).
  double outputScale = 1;
  if (data.config.outputFp8) {
    float stored = 0;
    std::memcpy(&stored, buffers_[static_cast<size_t>(data.outputScaleBuffer)].bytes.data(), sizeof stored);
    outputScale = stored;
  }
  TypedBuffer out(outKind, output.size() / static_cast<size_t>(ir::storageBits(outKind) / 8));
  std::memcpy(out.data(), output.data(), output.size());
  std::vector<double> expectedLse;
  const std::vector<double> expected = reference::referenceAttention(data.logical, data.checkStride, &expectedLse);
  double maxAbsReference = 0;
  for (double x : expected)
    if (std::isfinite(x)) maxAbsReference = std::max(maxAbsReference, std::abs(x));
  auto describeElement = [](int64_t t, int64_t h, int64_t d, double got, double want) {
    std::ostringstream text;
    text << "token " << t << ", head " << h << ", dim " << d << ": got " << got << ", expected " << want;
    return text.str();
  };
  bool allFinite = true;
  std::string worst;
  for (int64_t t = 0; t < data.numTokens; ++t)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t d = 0; d < D; ++d) {
        double got = out.get(static_cast<size_t>(t * data.oStrideToken + h * data.oStrideHead + d));
        double want = expected[static_cast<size_t>((t * Hq + h) * D + d)];
        double roundingAllowance = 0;
        if (data.config.outputFp8 && std::isfinite(got) && std::isfinite(want)) {
          const auto compared = problem_data::compareFp8Output(got, want, outputScale, result.tolerance);
          got = compared.got;
          want = compared.want;
          roundingAllowance = compared.roundingAllowance;
        }
        if (!std::isfinite(got)) {
          if (allFinite) result.detail = "non-finite output at " + describeElement(t, h, d, got, want);
          allFinite = false;
          continue;
        }
        if (!std::isfinite(want)) continue;  // a token outside the checked sample
        const double err = std::max(0.0, std::abs(got - want) - roundingAllowance);
        result.maxRelError = std::max(result.maxRelError, err / (std::abs(want) + 1e-3 * maxAbsReference));
        if (err > result.maxAbsError || worst.empty()) {
          result.maxAbsError = err;
          worst = "largest error at " + describeElement(t, h, d, got, want);
        }
      }
  bool paddingIntact = true;
  for (int64_t t = 0; t < data.numTokens && paddingIntact; ++t)
    for (int64_t i = Hq * D; i < data.oStrideToken; ++i)
      if (out.getBits(static_cast<size_t>(t * data.oStrideToken + i)) != nanBits(outKind)) {
        paddingIntact = false;
        if (allFinite) result.detail = "the kernel wrote padding after token " + std::to_string(t) + "'s output row";
        break;
      }
  if (!allFinite) result.maxAbsError = std::numeric_limits<double>::infinity();
  if (allFinite && paddingIntact) result.detail = worst;
  result.passed = allFinite && paddingIntact && result.maxAbsError <= result.tolerance;
  if (!data.config.outputLse) return;
  // The LSE is f32 arithmetic throughout (scores, exp2, the sum, lg2): a few ulps
  // of f32 relative to its magnitude, plus the approximate exp2/lg2 (2^-22).
  if (!lse) {
    result.passed = false;
    result.detail = "the run did not return the lse buffer to check";
    return;
  }
  for (int64_t t = 0; t < data.numTokens; ++t)
    for (int64_t h = 0; h < Hq; ++h) {
      const double want = expectedLse[static_cast<size_t>(t * Hq + h)];
      float got = 0;
      std::memcpy(&got, lse->data() + static_cast<size_t>(h * data.lseStrideHead + t) * sizeof(float), sizeof got);
      if (std::isnan(want)) continue;  // outside the checked sample
      const double allowed = 2e-4 * (1.0 + std::abs(want));
      if (!(std::abs(got - want) <= allowed)) {
        std::ostringstream text;
        text << "lse of token " << t << ", head " << h << ": got " << got << ", expected " << want;
        result.detail = text.str();
        result.passed = false;
        return;
      }
    }
  // Padding between heads' LSE rows stays poisoned.
  for (int64_t h = 0; h < Hq; ++h)
    for (int64_t t = data.numTokens; t < data.lseStrideHead; ++t) {
      float got = 0;
      std::memcpy(&got, lse->data() + static_cast<size_t>(h * data.lseStrideHead + t) * sizeof(float), sizeof got);
      if (!std::isnan(got)) {
        result.detail = "the kernel wrote lse padding after head " + std::to_string(h) + "'s row";
        result.passed = false;
        return;
      }
    }
}

support::Expected<AttentionRunResult> runUnifiedAttentionInterpreted(const compiler::UnifiedAttentionConfig& config,
                                                                const compiler::BatchShape& shape, bool afterPasses,
                                                                bool wgmmaTarget) {
  auto problem = UnifiedAttentionProblem::create(config, shape);
  if (!problem) return problem.status();
  AttentionRunResult result;
  ir::InterpreterMemory memory;
  std::vector<uint64_t> addresses;
  for (auto& buffer : (*problem)->buffers())
    addresses.push_back(memory.map(buffer.bytes.data(), buffer.bytes.size(), buffer.label));
  result.gridX = (*problem)->gridX();
  result.gridY = (*problem)->gridY();
  for (const auto& launch : (*problem)->launches()) {
    const auto buildStart = std::chrono::steady_clock::now();
    auto kernel = (*problem)->buildKernel(launch);
    if (!kernel) return kernel.status();
    if (afterPasses) {
      compiler::PipelineOptions pipeline;
      pipeline.pass.numWarps = static_cast<int>(ir::kernelAttribute(**kernel, ir::KernelAttribute::NumWarps));
      pipeline.pass.hasWgmma = wgmmaTarget;
      if (support::Status s = compiler::runPipeline(**kernel, pipeline, nullptr); !s) return s;
    }
    result.buildMs += millisecondsSince(buildStart);
    std::vector<ir::KernelArgument> args;
    for (size_t index : launch.pointers) args.push_back(ir::PointerArg{addresses[index]});
    for (const auto& scalar : launch.scalars) std::visit([&](auto v) { args.push_back(v); }, scalar);
    const auto runStart = std::chrono::steady_clock::now();
    if (support::Status s = ir::interpretKernel(**kernel, {launch.gridX, launch.gridY, launch.gridZ}, args, memory); !s)
      return s;
    result.runMs += millisecondsSince(runStart);
  }
  const int lse = (*problem)->lseBuffer();
  (*problem)->check((*problem)->buffers()[0].bytes, result,
                    lse >= 0 ? &(*problem)->buffers()[static_cast<size_t>(lse)].bytes : nullptr);
  result.output = std::move((*problem)->buffers()[0].bytes);
  return result;
}

}  // namespace attnjit::validation
