#include "compiler/ops/CompanionOps.h"

#include "compiler/ops/ArgumentChecks.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "compiler/ops/BoundsCheckedLaunch.h"
#include "compiler/driver/Jit.h"
#include "compiler/driver/KernelArguments.h"
#include "compiler/ops/ReadyKernels.h"
#include "runtime/Module.h"

namespace attnjit::ops {

using compiler::CacheWriteConfig;
using compiler::KernelArgument;
using compiler::MergeAttnStatesConfig;
using compiler::MergePartialsConfig;
using compiler::MlaCacheWriteConfig;
using support::Status;

namespace {

using KernelBuilder = std::function<support::Expected<std::unique_ptr<ir::Kernel>>()>;

// Per kernel name: its parameters (from building the kernel once per process,
// so validation needs no GPU and, after the first call, no IR). The loaded
// kernels are compiler/ops/ReadyKernels.h's.
class OpKernels {
 public:
  static OpKernels& instance() {
    static OpKernels kernels;
    return kernels;
  }

  support::Expected<std::shared_ptr<const std::vector<compiler::KernelParameter>>> parameters(const std::string& name,
                                                                                          const KernelBuilder& build) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = parameters_.find(name); it != parameters_.end()) return it->second;
    auto kernel = build();
    if (!kernel) return kernel.status();
    auto parameters =
        std::make_shared<const std::vector<compiler::KernelParameter>>(compiler::kernelParameters(**kernel));
    parameters_.emplace(name, parameters);
    return parameters;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const std::vector<compiler::KernelParameter>>> parameters_;
};

// A validated call: what to launch and with what.
struct PreparedCall {
  std::string kernelName;
  KernelBuilder build;
  compiler::PackedArguments arguments;
  runtime::Dim3 grid;
  // Checked kernels: the index of the bounds_record argument (packed with
  // kRecordPlaceholder, replaced at launch by runBoundsChecked's buffer) and the
  // message context; -1 for unchecked kernels.
  int recordArgument = -1;
  compiler::BoundsCheckContext boundsContext;
  bool empty = false;  // zero tokens: nothing to launch
};

// Stands in for the bounds_record pointer while a checked call is validated and
// packed (a non-null, aligned address no launch ever sees).
constexpr uint64_t kRecordPlaceholder = 16;

// A call of `config`'s kernel: the variant's checks and the token count; a call
// with no tokens launches nothing (empty).
template <typename Config>
support::Expected<PreparedCall> startCall(const ArgumentChecks& checks, const Config& config, int64_t numTokens,
                                          KernelBuilder build) {
  if (support::Status s = config.validate(); !s) return checks.error(s.diagnostic().message);
  if (support::Status s = checks.tokenCount(numTokens); !s) return s;
  PreparedCall call;
  call.kernelName = config.kernelName();
  call.build = std::move(build);
  call.empty = numTokens == 0;
  return call;
}

// `arguments` checked against the kernel's parameters and packed into `call`.
support::Status packArguments(const ArgumentChecks& checks, PreparedCall& call,
                              const std::vector<KernelArgument>& arguments) {
  auto parameters = OpKernels::instance().parameters(call.kernelName, call.build);
  if (!parameters) return parameters.status();
  auto packed = compiler::packKernelArguments(checks.op(), **parameters, arguments);
  if (!packed) return packed.status();
  call.arguments = std::move(*packed);
  return support::Status::ok();
}

support::Expected<PreparedCall> prepareCacheWrite(const CacheWriteParams& p) {
  const ArgumentChecks checks("cache write");
  const CacheWriteConfig config = selectCacheWriteVariant(p);
  auto started = startCall(checks, config, p.numTokens, [config] { return compiler::buildCacheWrite(config); });
  if (!started) return started.status();
  PreparedCall call = std::move(*started);
  if (call.empty) return call;
  const bool scaled = compiler::isPerTensorFp8(config.cacheFormat);
  if (!scaled && (p.kScale != 0 || p.vScale != 0))
    return checks.error(std::string("k_scale/v_scale are given, but the cache format ") +
                                 compiler::kvCacheFormatName(config.cacheFormat) +
                                 " has no per-tensor scales (only fp8_e4m3 and fp8_e5m2 do)");
  const bool separateScales = config.separateScales();
  if (support::Status s = checks.separateScales(
          separateScales,
          {p.kScaleCache, p.vScaleCache, p.scaleStrideBlock, p.scaleStrideToken, p.scaleStrideHead},
          "the cache format is", compiler::kvCacheFormatName(config.cacheFormat),
          compiler::kvScaleLayoutName(config.scaleLayout));
      !s)
    return s;
  if (support::Status s = checks.strides({{"key_stride_token", p.keyStrideToken},
                                           {"key_stride_head", p.keyStrideHead},
                                           {"value_stride_token", p.valueStrideToken},
                                           {"value_stride_head", p.valueStrideHead},
                                           {"kv_stride_block", p.kvStrideBlock},
                                           {"kv_stride_kv", p.kvStrideKv},
                                           {"kv_stride_token", p.kvStrideToken},
                                           {"kv_stride_head", p.kvStrideHead}});
      !s)
    return s;
  if (config.checkBounds && p.numBlocks < 1)
    return checks.error("num_blocks (" + std::to_string(p.numBlocks) +
                                 ") must be the KV cache's block count (at least 1) when bounds checking is on "
                                 "(check_bounds or ATTNJIT_CHECK_BOUNDS=1)");
  // Parameters in the kernel's order (compiler/kernels/CacheWrite.h).
  std::vector<KernelArgument> arguments = {
      KernelArgument::devicePointer(p.key), KernelArgument::devicePointer(p.value),
      KernelArgument::devicePointer(p.kvCache), KernelArgument::devicePointer(p.slotMapping)};
  if (scaled) {
    arguments.push_back(KernelArgument::devicePointer(p.kScale));
    arguments.push_back(KernelArgument::devicePointer(p.vScale));
  }
  if (separateScales) {
    arguments.push_back(KernelArgument::devicePointer(p.kScaleCache));
    arguments.push_back(KernelArgument::devicePointer(p.vScaleCache));
  }
  if (config.checkBounds) {
    call.recordArgument = static_cast<int>(arguments.size());
    arguments.push_back(KernelArgument::devicePointer(kRecordPlaceholder));
  }
  for (int64_t stride : {p.keyStrideToken, p.keyStrideHead, p.valueStrideToken, p.valueStrideHead, p.kvStrideBlock,
                         p.kvStrideKv, p.kvStrideToken, p.kvStrideHead})
    arguments.push_back(KernelArgument::integerValue(stride));
  if (separateScales)
    for (int64_t stride : {p.scaleStrideBlock, p.scaleStrideToken, p.scaleStrideHead})
      arguments.push_back(KernelArgument::integerValue(stride));
  if (config.checkBounds) {
    arguments.push_back(KernelArgument::integerValue(p.numBlocks));
    call.boundsContext = {checks.op(), p.numBlocks, p.blockSize, 0, p.numTokens};
  }
  if (support::Status s = packArguments(checks, call, arguments); !s) return s;
  call.grid = {static_cast<unsigned>(p.numTokens), static_cast<unsigned>(compiler::cacheWriteGridY(config)), 1};
  return call;
}

support::Expected<PreparedCall> prepareMergeAttnStates(const MergeAttnStatesParams& p) {
  const ArgumentChecks checks("merge_attn_states");
  const MergeAttnStatesConfig config = selectMergeAttnStatesVariant(p);
  auto started = startCall(checks, config, p.numTokens, [config] { return compiler::buildMergeAttnStates(config); });
  if (!started) return started.status();
  if (p.prefillTokensWithContext < -1)
    return checks.error("prefill_tokens_with_context (" + std::to_string(p.prefillTokensWithContext) +
                        ") must be -1 (every token has a prefix) or a token count");
  PreparedCall call = std::move(*started);
  if (call.empty) return call;
  if (support::Status s = checks.strides({{"output_stride_token", p.outputStrideToken},
                                           {"output_stride_head", p.outputStrideHead},
                                           {"prefix_stride_token", p.prefixStrideToken},
                                           {"prefix_stride_head", p.prefixStrideHead},
                                           {"suffix_stride_token", p.suffixStrideToken},
                                           {"suffix_stride_head", p.suffixStrideHead}});
      !s)
    return s;
  // Parameters in the kernel's order (compiler/kernels/MergeAttnStates.h).
  std::vector<KernelArgument> arguments = {KernelArgument::devicePointer(p.output)};
  if (config.outputLse) arguments.push_back(KernelArgument::devicePointer(p.outputLse));
  for (uint64_t pointer : {p.prefixOutput, p.prefixLse, p.suffixOutput, p.suffixLse})
    arguments.push_back(KernelArgument::devicePointer(pointer));
  if (config.outputFp8) arguments.push_back(KernelArgument::devicePointer(p.outputScale));
  arguments.push_back(KernelArgument::integerValue(p.numTokens));
  if (config.contextTokenLimit) arguments.push_back(KernelArgument::integerValue(p.prefillTokensWithContext));
  for (int64_t stride : {p.outputStrideToken, p.outputStrideHead, p.prefixStrideToken, p.prefixStrideHead,
                         p.suffixStrideToken, p.suffixStrideHead})
    arguments.push_back(KernelArgument::integerValue(stride));
  if (support::Status s = packArguments(checks, call, arguments); !s) return s;
  call.grid = {static_cast<unsigned>(compiler::mergeAttnStatesGridX(config, p.numTokens)),
               static_cast<unsigned>(p.numHeads), 1};
  return call;
}

support::Expected<PreparedCall> prepareMergePartials(const MergePartialsParams& p) {
  const ArgumentChecks checks("merge_partials");
  const MergePartialsConfig config = selectMergePartialsVariant(p);
  auto started = startCall(checks, config, p.numTokens, [config] { return compiler::buildMergePartials(config); });
  if (!started) return started.status();
  if (p.numPartials < 1)
    return checks.error("num_partials (" + std::to_string(p.numPartials) + ") must be at least 1");
  PreparedCall call = std::move(*started);
  if (call.empty) return call;
  if (support::Status s = checks.strides({{"output_stride_token", p.outputStrideToken},
                                           {"output_stride_head", p.outputStrideHead},
                                           {"partial_stride_partial", p.partialStridePartial},
                                           {"partial_stride_token", p.partialStrideToken},
                                           {"partial_stride_head", p.partialStrideHead},
                                           {"lse_stride_partial", p.lseStridePartial}});
      !s)
    return s;
  // Each partial's LSEs are a [num_heads, num_tokens] block; shorter strides
  // would make partials share LSEs (a layout mistake, not a merge).
  const int64_t lseBlock = int64_t{p.numHeads} * p.numTokens;
  if (p.numPartials > 1 && p.lseStridePartial < lseBlock)
    return checks.error("lse_stride_partial (" + std::to_string(p.lseStridePartial) +
                                 ") is smaller than one partial's LSE block, num_heads · num_tokens = " +
                                 std::to_string(lseBlock));
  // Parameters in the kernel's order (compiler/kernels/MergePartials.h).
  std::vector<KernelArgument> arguments = {KernelArgument::devicePointer(p.output)};
  if (config.outputLse) arguments.push_back(KernelArgument::devicePointer(p.outputLse));
  arguments.push_back(KernelArgument::devicePointer(p.partialOutputs));
  arguments.push_back(KernelArgument::devicePointer(p.partialLses));
  arguments.push_back(KernelArgument::integerValue(p.numPartials));
  arguments.push_back(KernelArgument::integerValue(p.numTokens));
  for (int64_t stride : {p.outputStrideToken, p.outputStrideHead, p.partialStridePartial, p.partialStrideToken,
                         p.partialStrideHead, p.lseStridePartial})
    arguments.push_back(KernelArgument::integerValue(stride));
  if (support::Status s = packArguments(checks, call, arguments); !s) return s;
  call.grid = {static_cast<unsigned>(compiler::mergePartialsGridX(config, p.numTokens)),
               static_cast<unsigned>(p.numHeads), 1};
  return call;
}

// A per-tensor scale is only read by the fp8 formats: one given with another
// format is a caller's mistake, not ignored.
support::Status checkScaleUse(const ArgumentChecks& checks, compiler::KvCacheFormat format, uint64_t scale) {
  if (compiler::isPerTensorFp8(format) || scale == 0) return support::Status::ok();
  return checks.error(std::string("scale is given, but the cache format ") + compiler::kvCacheFormatName(format) +
                      " has no per-tensor scale (only fp8_e4m3 and fp8_e5m2 do)");
}

support::Expected<PreparedCall> prepareMlaCacheWrite(const MlaCacheWriteParams& p) {
  const ArgumentChecks checks("mla cache write");
  const MlaCacheWriteConfig config = selectMlaCacheWriteVariant(p);
  auto started = startCall(checks, config, p.numTokens, [config] { return compiler::buildMlaCacheWrite(config); });
  if (!started) return started.status();
  PreparedCall call = std::move(*started);
  if (call.empty) return call;
  const bool scaled = compiler::isPerTensorFp8(config.cacheFormat);
  if (support::Status s = checkScaleUse(checks, config.cacheFormat, p.scale); !s) return s;
  if (support::Status s = checks.strides({{"kv_c_stride_token", p.kvCStrideToken},
                                           {"k_pe_stride_token", p.kPeStrideToken},
                                           {"cache_stride_block", p.cacheStrideBlock},
                                           {"cache_stride_token", p.cacheStrideToken}});
      !s)
    return s;
  if (p.cacheStrideToken < config.cacheRowElements())
    return checks.error("cache_stride_token (" + std::to_string(p.cacheStrideToken) +
                                 ") is smaller than a cache row, kv_lora_rank + rope_dim = " +
                                 std::to_string(config.cacheRowElements()));
  // Parameters in the kernel's order (compiler/kernels/MlaCacheWrite.h).
  std::vector<KernelArgument> arguments = {
      KernelArgument::devicePointer(p.kvC), KernelArgument::devicePointer(p.kPe),
      KernelArgument::devicePointer(p.kvCache), KernelArgument::devicePointer(p.slotMapping)};
  if (scaled) arguments.push_back(KernelArgument::devicePointer(p.scale));
  for (int64_t stride : {p.kvCStrideToken, p.kPeStrideToken, p.cacheStrideBlock, p.cacheStrideToken})
    arguments.push_back(KernelArgument::integerValue(stride));
  if (support::Status s = packArguments(checks, call, arguments); !s) return s;
  call.grid = {static_cast<unsigned>(p.numTokens), 1, 1};
  return call;
}

support::Expected<PreparedCall> prepareGatherCache(const GatherCacheParams& p) {
  const ArgumentChecks checks("gather cache");
  const compiler::GatherCacheConfig config = selectGatherCacheVariant(p);
  auto started = startCall(checks, config, p.numTokens, [config] { return compiler::buildGatherCache(config); });
  if (!started) return started.status();
  if (p.numSeqs < 1)
    return checks.error("num_seqs (" + std::to_string(p.numSeqs) + ") must be at least 1");
  PreparedCall call = std::move(*started);
  if (call.empty) return call;
  const bool scaled = compiler::isPerTensorFp8(config.cacheFormat);
  if (support::Status s = checkScaleUse(checks, config.cacheFormat, p.scale); !s) return s;
  if (support::Status s = checks.strides({{"dst_stride_token", p.dstStrideToken},
                                           {"block_table_stride", p.blockTableStride},
                                           {"cache_stride_block", p.cacheStrideBlock},
                                           {"cache_stride_token", p.cacheStrideToken}});
      !s)
    return s;
  if (p.dstStrideToken < p.entrySize || p.cacheStrideToken < p.entrySize)
    return checks.error("dst_stride_token (" + std::to_string(p.dstStrideToken) + ") and cache_stride_token (" +
                        std::to_string(p.cacheStrideToken) + ") must be at least entry_size (" +
                        std::to_string(p.entrySize) + "): rows would overlap");
  // Parameters in the kernel's order (compiler/kernels/GatherCache.h).
  std::vector<KernelArgument> arguments = {
      KernelArgument::devicePointer(p.dst), KernelArgument::devicePointer(p.cache),
      KernelArgument::devicePointer(p.blockTable), KernelArgument::devicePointer(p.cuSeqLens)};
  if (config.seqStarts) arguments.push_back(KernelArgument::devicePointer(p.seqStarts));
  if (scaled) arguments.push_back(KernelArgument::devicePointer(p.scale));
  arguments.push_back(KernelArgument::integerValue(p.numSeqs));
  arguments.push_back(KernelArgument::integerValue(std::bit_width(static_cast<unsigned>(p.numSeqs))));
  arguments.push_back(KernelArgument::integerValue(p.numTokens));
  for (int64_t stride : {p.dstStrideToken, p.blockTableStride, p.cacheStrideBlock, p.cacheStrideToken})
    arguments.push_back(KernelArgument::integerValue(stride));
  if (support::Status s = packArguments(checks, call, arguments); !s) return s;
  call.grid = {static_cast<unsigned>(compiler::gatherCacheGridX(config, p.numTokens)), 1, 1};
  return call;
}

// The most elements one call converts: the grid's x extent stays below 2^31 at
// the smallest block (256), and every byte offset below 2^63.
constexpr int64_t kMaxConvertElements = int64_t{1} << 39;

support::Expected<PreparedCall> prepareConvertCache(const ConvertCacheParams& p) {
  const ArgumentChecks checks("convert cache");
  const compiler::ConvertCacheConfig config = selectConvertCacheVariant(p);
  if (support::Status s = config.validate(); !s) return checks.error(s.diagnostic().message);
  if (p.numElements < 0 || p.numElements > kMaxConvertElements)
    return checks.error("num_elements (" + std::to_string(p.numElements) + ") must be between 0 and 2^39");
  if (!std::isfinite(p.scale) || p.scale == 0)
    return checks.error("scale (" + std::to_string(p.scale) + ") must be finite and not zero");
  PreparedCall call;
  call.kernelName = config.kernelName();
  call.build = [config] { return compiler::buildConvertCache(config); };
  call.empty = p.numElements == 0;
  if (call.empty) return call;
  const auto bytes = [&](ir::ScalarKind kind) {
    return static_cast<uint64_t>(p.numElements) * static_cast<uint64_t>(ir::storageBits(kind) / 8);
  };
  // The ranges' ends, saturated: an address near 2^64 cannot wrap past the other.
  const auto end = [](uint64_t start, uint64_t size) {
    return size > std::numeric_limits<uint64_t>::max() - start ? std::numeric_limits<uint64_t>::max() : start + size;
  };
  const uint64_t srcEnd = end(p.src, bytes(config.srcElement())), dstEnd = end(p.dst, bytes(config.dstElement()));
  if (p.src != 0 && p.dst != 0 && p.src < dstEnd && p.dst < srcEnd)
    return checks.error("src and dst overlap; the conversion changes the element size, so it cannot run in place");
  for (const auto& [name, address, kind] : {std::tuple{"src", p.src, config.srcElement()},
                                            std::tuple{"dst", p.dst, config.dstElement()}})
    if (support::Status s = checks.pointer(name, address, static_cast<uint64_t>(ir::storageBits(kind) / 8), true); !s)
      return s;
  // Parameters in the kernel's order (compiler/kernels/ConvertCache.h).
  const std::vector<KernelArgument> arguments = {
      KernelArgument::devicePointer(p.src), KernelArgument::devicePointer(p.dst),
      KernelArgument::realValue(p.scale), KernelArgument::integerValue(p.numElements)};
  if (support::Status s = packArguments(checks, call, arguments); !s) return s;
  call.grid = {static_cast<unsigned>(compiler::convertCacheGridX(config, p.numElements)), 1, 1};
  return call;
}

support::Status launchPrepared(PreparedCall& call, runtime::StreamHandle stream) {
  if (call.empty) return support::Status::ok();
  auto ready = readyKernel(call.kernelName, call.build);
  if (!ready) return ready.status();
  const runtime::LaunchConfig launch = ready->launchConfig(call.grid, stream);
  std::vector<void*> pointers = call.arguments.driverPointers();
  if (call.recordArgument < 0) return ready->loaded->function.launch(launch, pointers.data());
  return runBoundsChecked(call.boundsContext, stream, [&](uint64_t record) {
    std::memcpy(pointers[static_cast<size_t>(call.recordArgument)], &record, sizeof record);
    return ready->loaded->function.launch(launch, pointers.data());
  });
}

}  // namespace

CacheWriteConfig selectCacheWriteVariant(const CacheWriteParams& p) {
  CacheWriteConfig config;
  config.dtype = p.dtype;
  config.cacheFormat = p.cacheFormat;
  config.numKvHeads = p.numKvHeads;
  config.headSize = p.headSize;
  config.valueHeadSize = p.valueHeadSize;
  config.blockSize = p.blockSize;
  config.checkBounds = p.checkBounds || boundsCheckFromEnvironment();
  config.perHeadScales = p.perHeadScales;
  config.scaleLayout = p.scaleLayout;
  // A call whose variant is invalid fails validation with its own message; the
  // alignments are derived from valid sizes only.
  if (!config.validate()) return config;
  // The widest alignment whose promises the call keeps, for the sources and the
  // cache apart. A call whose pointers miss even the element's alignment keeps
  // the narrowest variant, and argument packing reports the pointer.
  auto widestKept = [](int narrowest, auto kept) {
    for (int align = 16; align > narrowest; align /= 2)
      if (kept(align)) return align;
    return narrowest;
  };
  auto divides = [](int64_t divisor, std::initializer_list<int64_t> values) {
    for (int64_t v : values)
      if (v % divisor != 0) return false;
    return true;
  };
  const int sourceBytes = ir::storageBits(config.dtype) / 8;
  config.sourceAlign = widestKept(sourceBytes, [&](int align) {
    CacheWriteConfig candidate = config;
    candidate.sourceAlign = align;
    return p.key % static_cast<uint64_t>(align) == 0 && p.value % static_cast<uint64_t>(align) == 0 &&
           divides(candidate.keyStrideDivisibility(), {p.keyStrideToken, p.keyStrideHead}) &&
           divides(candidate.valueStrideDivisibility(), {p.valueStrideToken, p.valueStrideHead});
  });
  const int cacheBytes = std::max(1, ir::storageBits(config.cachePointerElement()) / 8);
  config.cacheAlign = widestKept(cacheBytes, [&](int align) {
    CacheWriteConfig candidate = config;
    candidate.cacheAlign = align;
    return p.kvCache % static_cast<uint64_t>(align) == 0 &&
           divides(candidate.cacheStrideDivisibility(), {p.kvStrideBlock, p.kvStrideKv, p.kvStrideToken, p.kvStrideHead});
  });
  return config;
}

MergeAttnStatesConfig selectMergeAttnStatesVariant(const MergeAttnStatesParams& p) {
  MergeAttnStatesConfig config;
  config.dtype = p.dtype;
  config.numHeads = p.numHeads;
  config.headSize = p.headSize;
  config.outputLse = p.outputLse != 0;
  config.outputFp8 = p.outputScale != 0;
  config.contextTokenLimit = p.prefillTokensWithContext >= 0 && p.prefillTokensWithContext < p.numTokens;
  // Warps so that each thread loads 32 bytes of each input (two 16-byte vectors):
  // faster than 64 bytes per thread (bench/merge_attn_states.yaml; measured:
  // docs/perf-log.md, 2026-11-30).
  const int64_t rowBytes = static_cast<int64_t>(config.headSizePadded()) * ir::storageBits(p.dtype) / 8;
  const int64_t warps = config.blockTokens * rowBytes / (32 * 32);
  config.numWarps = static_cast<int>(std::clamp<int64_t>(warps, 1, 4));
  return config;
}

MergePartialsConfig selectMergePartialsVariant(const MergePartialsParams& p) {
  MergePartialsConfig config;
  config.dtype = p.dtype;
  config.numHeads = p.numHeads;
  config.headSize = p.headSize;
  config.outputLse = p.outputLse != 0;
  return config;
}

MlaCacheWriteConfig selectMlaCacheWriteVariant(const MlaCacheWriteParams& p) {
  MlaCacheWriteConfig config;
  config.dtype = p.dtype;
  config.cacheFormat = p.cacheFormat;
  config.kvLoraRank = p.kvLoraRank;
  config.ropeDim = p.ropeDim;
  config.blockSize = p.blockSize;
  return config;
}

compiler::GatherCacheConfig selectGatherCacheVariant(const GatherCacheParams& p) {
  compiler::GatherCacheConfig config;
  config.dtype = p.dtype;
  config.cacheFormat = p.cacheFormat;
  config.entrySize = p.entrySize;
  config.blockSize = p.blockSize;
  config.seqStarts = p.seqStarts != 0;
  // The widest divisibility the row strides keep (vectors of up to 16 bytes).
  config.strideDivisibility = 16;
  while (config.strideDivisibility > 1 &&
         (p.dstStrideToken % config.strideDivisibility != 0 || p.cacheStrideToken % config.strideDivisibility != 0 ||
          p.cacheStrideBlock % config.strideDivisibility != 0))
    config.strideDivisibility /= 2;
  return config;
}

support::Status validateGatherCache(const GatherCacheParams& params) { return prepareGatherCache(params).status(); }

compiler::ConvertCacheConfig selectConvertCacheVariant(const ConvertCacheParams& p) {
  compiler::ConvertCacheConfig config;
  config.dtype = p.dtype;
  config.cacheFormat = p.cacheFormat;
  config.toFp8 = p.toFp8;
  // The widest vectors the call keeps: pointer alignment in bytes, and the
  // element count's divisibility (masks constant over a vector), both up to 16.
  config.alignment = 16;
  while (config.alignment > 1 && ((p.src | p.dst) % static_cast<uint64_t>(config.alignment)) != 0)
    config.alignment /= 2;
  config.countDivisibility = 16;
  while (config.countDivisibility > 1 && p.numElements % config.countDivisibility != 0) config.countDivisibility /= 2;
  // Narrower accesses hold one element per register and convert their tile's
  // layout through shared memory between the load and the store: 1024-element
  // blocks keep that at 8 elements a thread (94 registers, not 232).
  if (config.alignment < 16 || config.countDivisibility < 16) config.blockElements = 1024;
  return config;
}

support::Status validateConvertCache(const ConvertCacheParams& params) {
  return prepareConvertCache(params).status();
}

support::Status convertCache(const ConvertCacheParams& params) {
  auto call = prepareConvertCache(params);
  if (!call) return call.status();
  return launchPrepared(*call, params.stream);
}

support::Status gatherCache(const GatherCacheParams& params) {
  auto call = prepareGatherCache(params);
  if (!call) return call.status();
  return launchPrepared(*call, params.stream);
}

support::Status validateCacheWrite(const CacheWriteParams& params) { return prepareCacheWrite(params).status(); }

support::Status validateMergePartials(const MergePartialsParams& params) {
  return prepareMergePartials(params).status();
}

support::Status validateMlaCacheWrite(const MlaCacheWriteParams& params) {
  return prepareMlaCacheWrite(params).status();
}

support::Status validateMergeAttnStates(const MergeAttnStatesParams& params) {
  return prepareMergeAttnStates(params).status();
}

support::Status cacheWrite(const CacheWriteParams& params) {
  auto call = prepareCacheWrite(params);
  if (!call) return call.status();
  return launchPrepared(*call, params.stream);
}

support::Status mergeAttnStates(const MergeAttnStatesParams& params) {
  auto call = prepareMergeAttnStates(params);
  if (!call) return call.status();
  return launchPrepared(*call, params.stream);
}

support::Status mergePartials(const MergePartialsParams& params) {
  auto call = prepareMergePartials(params);
  if (!call) return call.status();
  return launchPrepared(*call, params.stream);
}

support::Status mlaCacheWrite(const MlaCacheWriteParams& params) {
  auto call = prepareMlaCacheWrite(params);
  if (!call) return call.status();
  return launchPrepared(*call, params.stream);
}

}  // namespace attnjit::ops
