#include "compiler/PagedAttentionOp.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <unordered_map>

#include "compiler/AttentionGpu.h"
#include "compiler/Jit.h"
#include "runtime/Module.h"

namespace attnjit::ops {

using compiler::UnifiedAttentionConfig;
using ir::Status;

namespace {

Status argumentError(const std::string& message) { return Status::error({}, "paged attention: " + message); }

// A kernel loaded in one context, with what a launch needs.
struct ReadyKernel {
  std::shared_ptr<const runtime::LoadedKernel> loaded;
  int numThreads = 0;
  int sharedBytes = 0;
};

// Variant (kernel name) and context → ready kernel. The JIT behind it would
// re-run the tile-IR passes (milliseconds) to make its key; this memo keeps the
// steady-state cost of a call at one lookup.
class ReadyKernels {
 public:
  static ReadyKernels& instance() {
    static ReadyKernels kernels;
    return kernels;
  }

  ir::Expected<ReadyKernel> get(const UnifiedAttentionConfig& config) {
    auto context = runtime::currentOrPrimaryContext();
    if (!context) return context.status();
    std::string key = config.kernelName() + "@" + std::to_string(reinterpret_cast<uintptr_t>(*context));
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = ready_.find(key); it != ready_.end()) return it->second;
    if (target_.empty()) {
      auto target = compiler::localTarget();
      if (!target) return target.status();
      target_ = *target;
    }
    compiler::CompileOptions options;
    options.target = target_;
    if (auto ptxIsa = runtime::driverMaxPtxIsa()) options.driverMaxPtx = ptxIsa->asNumber();
    auto jit = compiler::jitKernel([&] { return compiler::buildUnifiedAttention(config); }, options);
    if (!jit) return jit.status();
    ReadyKernel ready{jit->loaded, jit->numThreads, jit->sharedMemoryBytes};
    ready_.emplace(key, ready);
    return ready;
  }

 private:
  std::mutex mutex_;
  std::string target_;
  std::unordered_map<std::string, ReadyKernel> ready_;
};

int searchSteps(int numSeqs) { return static_cast<int>(std::bit_width(static_cast<unsigned>(numSeqs))); }

}  // namespace

UnifiedAttentionConfig selectPagedAttentionVariant(const PagedAttentionParams& p) {
  UnifiedAttentionConfig config;
  config.dtype = p.dtype;
  config.numQueryHeads = p.numQueryHeads;
  config.numKvHeads = p.numKvHeads;
  config.headSize = p.headSize;
  config.blockSize = p.blockSize;
  config.causal = p.causal;
  const int perKv = p.numKvHeads > 0 && p.numQueryHeads % p.numKvHeads == 0 ? p.numQueryHeads / p.numKvHeads : 1;
  // Measured on the H200 (docs/perf-log.md, 2026-11-29): decode B=64 ctx 4096
  // 0.296 ms with 64-token tiles vs 0.359 ms with 32; prefill 8 x 2048 causal
  // 2.17 ms with 128 rows / 8 warps vs 4.21 ms with vLLM's 16 rows.
  const bool prefillLike = static_cast<int64_t>(p.maxQueryLen) * perKv >= 128 && config.minimumBlockM() <= 128;
  if (prefillLike) {
    config.blockMRows = 128;
    config.numWarps = 8;
  } else if (p.dtype != ir::ScalarKind::F32) {
    config.tileSize = 64;
  }
  return config;
}

namespace {

// The checks of validatePagedAttention for the variant already selected.
Status validateFor(const PagedAttentionParams& p, const UnifiedAttentionConfig& config) {
  if (Status s = config.validate(); !s) return argumentError(s.diagnostic().message);
  if (p.numSeqs < 1) return argumentError("num_seqs (" + std::to_string(p.numSeqs) + ") must be at least 1");
  if (p.numTokens < p.numSeqs)
    return argumentError("num_tokens (" + std::to_string(p.numTokens) + ") is less than num_seqs (" +
                         std::to_string(p.numSeqs) + "): every sequence brings at least one query token");
  if (p.maxQueryLen < 1 || p.maxQueryLen > p.numTokens)
    return argumentError("max_query_len (" + std::to_string(p.maxQueryLen) + ") must be between 1 and num_tokens (" +
                         std::to_string(p.numTokens) + ")");
  if (!std::isfinite(p.scale) || p.scale <= 0)
    return argumentError("scale (" + std::to_string(p.scale) + ") must be a positive finite number");
  const std::pair<const char*, uint64_t> pointers[] = {{"out", p.out},
                                                       {"q", p.q},
                                                       {"kv_cache", p.kvCache},
                                                       {"block_tables", p.blockTables},
                                                       {"seq_lens", p.seqLens},
                                                       {"cu_seqlens_q", p.cuSeqlensQ}};
  for (const auto& [name, pointer] : pointers) {
    if (pointer == 0) return argumentError(std::string(name) + " is a null pointer");
    if (pointer % 16 != 0)
      return argumentError(std::string(name) + " (0x" + [&] {
               char text[32];
               std::snprintf(text, sizeof text, "%llx", static_cast<unsigned long long>(pointer));
               return std::string(text);
             }() + ") is not 16-byte aligned, as the kernel is compiled to assume");
  }
  // Row strides of q, out and the cache are compiled as multiples of 8 when the
  // head size is (16-byte vectors); the block-table stride is free.
  const int64_t rowMultiple = p.headSize % 8 == 0 ? 8 : 1;
  const struct {
    const char* name;
    int64_t value;
    int64_t multiple;
  } strides[] = {{"q_stride_token", p.qStrideToken, rowMultiple},   {"q_stride_head", p.qStrideHead, rowMultiple},
                 {"o_stride_token", p.oStrideToken, rowMultiple},   {"o_stride_head", p.oStrideHead, rowMultiple},
                 {"block_table_stride", p.blockTableStride, 1},     {"kv_stride_block", p.kvStrideBlock, rowMultiple},
                 {"kv_stride_kv", p.kvStrideKv, rowMultiple},       {"kv_stride_token", p.kvStrideToken, rowMultiple},
                 {"kv_stride_head", p.kvStrideHead, rowMultiple}};
  for (const auto& s : strides) {
    if (s.value <= 0) return argumentError(std::string(s.name) + " (" + std::to_string(s.value) + ") must be positive");
    if (s.value % s.multiple != 0)
      return argumentError(std::string(s.name) + " (" + std::to_string(s.value) + ") must be a multiple of " +
                           std::to_string(s.multiple) + " for head size " + std::to_string(p.headSize));
  }
  return Status::ok();
}

}  // namespace

Status validatePagedAttention(const PagedAttentionParams& p) { return validateFor(p, selectPagedAttentionVariant(p)); }

Status pagedAttention(const PagedAttentionParams& p) {
  const UnifiedAttentionConfig config = selectPagedAttentionVariant(p);
  if (Status s = validateFor(p, config); !s) return s;
  auto ready = ReadyKernels::instance().get(config);
  if (!ready) return ready.status();

  // Parameters in the kernel's order (compiler/kernels/UnifiedAttention.h).
  uint64_t pointers[] = {p.out, p.q, p.kvCache, p.blockTables, p.seqLens, p.cuSeqlensQ};
  float scale = p.scale;
  int32_t numSeqs = p.numSeqs, steps = searchSteps(p.numSeqs);
  int64_t strides[] = {p.qStrideToken,  p.qStrideHead,   p.oStrideToken,  p.oStrideHead,  p.blockTableStride,
                       p.kvStrideBlock, p.kvStrideKv,    p.kvStrideToken, p.kvStrideHead};
  void* params[6 + 3 + 9];
  for (int i = 0; i < 6; ++i) params[i] = &pointers[i];
  params[6] = &scale;
  params[7] = &numSeqs;
  params[8] = &steps;
  for (int i = 0; i < 9; ++i) params[9 + i] = &strides[i];

  runtime::LaunchConfig launch;
  launch.grid = {static_cast<unsigned>(compiler::unifiedAttentionGridX(config, p.numSeqs, p.numTokens)),
                 static_cast<unsigned>(p.numKvHeads), 1};
  launch.block = {static_cast<unsigned>(ready->numThreads), 1, 1};
  launch.dynamicSharedBytes = static_cast<unsigned>(ready->sharedBytes);
  launch.stream = p.stream;
  return ready->loaded->function.launch(launch, params);
}

}  // namespace attnjit::ops
