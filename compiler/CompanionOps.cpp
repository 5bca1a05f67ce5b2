#include "compiler/CompanionOps.h"

#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/Jit.h"
#include "compiler/KernelArguments.h"
#include "compiler/ReadyKernels.h"
#include "runtime/Module.h"

namespace attnjit::ops {

using compiler::CacheWriteConfig;
using compiler::KernelArgument;
using compiler::MergeAttnStatesConfig;
using ir::Status;

namespace {

using KernelBuilder = std::function<ir::Expected<std::unique_ptr<ir::Kernel>>()>;

// Per kernel name: its parameters (from building the kernel once per process,
// so validation needs no GPU and, after the first call, no IR). The loaded
// kernels are compiler/ReadyKernels.h's.
class OpKernels {
 public:
  static OpKernels& instance() {
    static OpKernels kernels;
    return kernels;
  }

  ir::Expected<std::shared_ptr<const std::vector<compiler::KernelParameter>>> parameters(const std::string& name,
                                                                                          const KernelBuilder& build) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = parameters_.find(name); it != parameters_.end()) return it->second;
    auto kernel = build();
    if (!kernel) return kernel.status();
    auto parameters = std::make_shared<const std::vector<compiler::KernelParameter>>(compiler::kernelParameters(**kernel));
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
  bool empty = false;  // zero tokens: nothing to launch
};

struct NamedStride {
  const char* name;
  int64_t value;
};

Status checkStridesPositive(const std::string& op, std::initializer_list<NamedStride> strides) {
  for (const NamedStride& s : strides)
    if (s.value <= 0)
      return Status::error({}, op + ": " + s.name + " (" + std::to_string(s.value) + ") must be positive");
  return Status::ok();
}

Status checkTokenCount(const std::string& op, int64_t numTokens) {
  if (numTokens < 0 || numTokens > std::numeric_limits<int32_t>::max())
    return Status::error({}, op + ": num_tokens (" + std::to_string(numTokens) + ") must be between 0 and " +
                                 std::to_string(std::numeric_limits<int32_t>::max()));
  return Status::ok();
}

ir::Expected<PreparedCall> prepareCacheWrite(const CacheWriteParams& p) {
  const std::string op = "cache write";
  const CacheWriteConfig config = selectCacheWriteVariant(p);
  if (Status s = config.validate(); !s) return Status::error({}, op + ": " + s.diagnostic().message);
  if (Status s = checkTokenCount(op, p.numTokens); !s) return s;
  PreparedCall call;
  call.kernelName = config.kernelName();
  call.build = [config] { return compiler::buildCacheWrite(config); };
  if (p.numTokens == 0) {
    call.empty = true;
    return call;
  }
  const bool scaled = compiler::isPerTensorFp8(config.cacheFormat);
  if (!scaled && (p.kScale != 0 || p.vScale != 0))
    return Status::error({}, op + ": k_scale/v_scale are given, but the cache format " +
                                 compiler::kvCacheFormatName(config.cacheFormat) +
                                 " has no per-tensor scales (only fp8_e4m3 and fp8_e5m2 do)");
  if (Status s = checkStridesPositive(op, {{"key_stride_token", p.keyStrideToken},
                                           {"key_stride_head", p.keyStrideHead},
                                           {"value_stride_token", p.valueStrideToken},
                                           {"value_stride_head", p.valueStrideHead},
                                           {"kv_stride_block", p.kvStrideBlock},
                                           {"kv_stride_kv", p.kvStrideKv},
                                           {"kv_stride_token", p.kvStrideToken},
                                           {"kv_stride_head", p.kvStrideHead}});
      !s)
    return s;
  // Parameters in the kernel's order (compiler/kernels/CacheWrite.h).
  std::vector<KernelArgument> arguments = {
      KernelArgument::devicePointer(p.key), KernelArgument::devicePointer(p.value),
      KernelArgument::devicePointer(p.kvCache), KernelArgument::devicePointer(p.slotMapping)};
  if (scaled) {
    arguments.push_back(KernelArgument::devicePointer(p.kScale));
    arguments.push_back(KernelArgument::devicePointer(p.vScale));
  }
  for (int64_t stride : {p.keyStrideToken, p.keyStrideHead, p.valueStrideToken, p.valueStrideHead, p.kvStrideBlock,
                         p.kvStrideKv, p.kvStrideToken, p.kvStrideHead})
    arguments.push_back(KernelArgument::integerValue(stride));
  auto parameters = OpKernels::instance().parameters(call.kernelName, call.build);
  if (!parameters) return parameters.status();
  auto packed = compiler::packKernelArguments(op, **parameters, arguments);
  if (!packed) return packed.status();
  call.arguments = std::move(*packed);
  call.grid = {static_cast<unsigned>(p.numTokens), static_cast<unsigned>(compiler::cacheWriteGridY(config)), 1};
  return call;
}

ir::Expected<PreparedCall> prepareMergeAttnStates(const MergeAttnStatesParams& p) {
  const std::string op = "merge_attn_states";
  const MergeAttnStatesConfig config = selectMergeAttnStatesVariant(p);
  if (Status s = config.validate(); !s) return Status::error({}, op + ": " + s.diagnostic().message);
  if (Status s = checkTokenCount(op, p.numTokens); !s) return s;
  PreparedCall call;
  call.kernelName = config.kernelName();
  call.build = [config] { return compiler::buildMergeAttnStates(config); };
  if (p.numTokens == 0) {
    call.empty = true;
    return call;
  }
  if (Status s = checkStridesPositive(op, {{"output_stride_token", p.outputStrideToken},
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
  arguments.push_back(KernelArgument::integerValue(p.numTokens));
  for (int64_t stride : {p.outputStrideToken, p.outputStrideHead, p.prefixStrideToken, p.prefixStrideHead,
                         p.suffixStrideToken, p.suffixStrideHead})
    arguments.push_back(KernelArgument::integerValue(stride));
  auto parameters = OpKernels::instance().parameters(call.kernelName, call.build);
  if (!parameters) return parameters.status();
  auto packed = compiler::packKernelArguments(op, **parameters, arguments);
  if (!packed) return packed.status();
  call.arguments = std::move(*packed);
  call.grid = {static_cast<unsigned>(compiler::mergeAttnStatesGridX(config, p.numTokens)),
               static_cast<unsigned>(p.numHeads), 1};
  return call;
}

Status launchPrepared(PreparedCall& call, runtime::StreamHandle stream) {
  if (call.empty) return Status::ok();
  auto ready = compiler::readyKernel(call.kernelName, call.build);
  if (!ready) return ready.status();
  runtime::LaunchConfig launch;
  launch.grid = call.grid;
  launch.block = {static_cast<unsigned>(ready->numThreads), 1, 1};
  launch.dynamicSharedBytes = static_cast<unsigned>(ready->sharedBytes);
  launch.stream = stream;
  std::vector<void*> pointers = call.arguments.driverPointers();
  return ready->loaded->function.launch(launch, pointers.data());
}

}  // namespace

CacheWriteConfig selectCacheWriteVariant(const CacheWriteParams& p) {
  CacheWriteConfig config;
  config.dtype = p.dtype;
  config.cacheFormat = p.cacheFormat;
  config.numKvHeads = p.numKvHeads;
  config.headSize = p.headSize;
  config.blockSize = p.blockSize;
  return config;
}

MergeAttnStatesConfig selectMergeAttnStatesVariant(const MergeAttnStatesParams& p) {
  MergeAttnStatesConfig config;
  config.dtype = p.dtype;
  config.numHeads = p.numHeads;
  config.headSize = p.headSize;
  config.outputLse = p.outputLse != 0;
  return config;
}

Status validateCacheWrite(const CacheWriteParams& params) { return prepareCacheWrite(params).status(); }

Status validateMergeAttnStates(const MergeAttnStatesParams& params) {
  return prepareMergeAttnStates(params).status();
}

Status cacheWrite(const CacheWriteParams& params) {
  auto call = prepareCacheWrite(params);
  if (!call) return call.status();
  return launchPrepared(*call, params.stream);
}

Status mergeAttnStates(const MergeAttnStatesParams& params) {
  auto call = prepareMergeAttnStates(params);
  if (!call) return call.status();
  return launchPrepared(*call, params.stream);
}

}  // namespace attnjit::ops
