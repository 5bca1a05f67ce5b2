// runPagedAttentionOpGpu: a unified-attention problem launched through the op API.
#include <algorithm>
#include <chrono>
#include <optional>

#include "compiler/AttentionGpu.h"
#include "compiler/GpuLaunchSupport.h"
#include "compiler/PagedAttentionOp.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"

namespace attnjit::compiler {

using ir::Status;

ir::Expected<PagedAttentionOpRun> runPagedAttentionOpGpu(const UnifiedAttentionConfig& config,
                                                         const AttentionShape& shape, const GpuRunOptions& options) {
  UnifiedAttentionConfig problemConfig = config;
  problemConfig.splitKv = false;  // the op decides; the problem's buffers are the same either way
  auto problem = UnifiedAttentionProblem::create(problemConfig, shape);
  if (!problem) return problem.status();
  if (auto context = runtime::activatePrimaryContext(0); !context) return context.status();

  auto& buffers = (*problem)->buffers();
  std::vector<runtime::DeviceBuffer> device;
  for (auto& buffer : buffers) {
    auto d = runtime::DeviceBuffer::allocate(std::max<size_t>(buffer.bytes.size(), 16));
    if (!d) return d.status();
    if (Status s = d->copyFromHost(buffer.bytes.data(), buffer.bytes.size()); !s) return s;
    device.push_back(std::move(*d));
  }
  auto address = [&](const char* label) -> uint64_t {
    const int index = (*problem)->bufferIndex(label);
    return index < 0 ? 0 : device[static_cast<size_t>(index)].address();
  };

  const auto& layout = (*problem)->deviceLayout();
  ops::PagedAttentionParams p;
  p.dtype = config.dtype;
  p.numQueryHeads = config.numQueryHeads;
  p.numKvHeads = config.numKvHeads;
  p.headSize = config.headSize;
  p.valueHeadSize = config.valueHeadSize;
  p.blockSize = config.blockSize;
  p.causal = config.causal;
  p.kvCacheFormat = config.kvCacheFormat;
  p.slidingWindow = config.slidingWindow;
  p.softcap = config.softcap;
  p.checkBounds = config.checkBounds;
  p.numBlocks = layout.numBlocks;
  p.numSeqs = layout.numSeqs;
  p.numTokens = layout.numTokens;
  p.maxQueryLen = layout.maxQueryLen;
  p.maxSeqLen = layout.maxSeqLen;
  p.minSeqLen = layout.minSeqLen;
  p.scale = static_cast<float>(layout.scale);
  p.out = address("out");
  p.q = address("q");
  p.kvCache = address("kv_cache");
  p.blockTables = address("block_tables");
  p.seqLens = address("seq_lens");
  p.cuSeqlensQ = address("cu_seqlens_q");
  p.kScale = address("k_scale");
  p.vScale = address("v_scale");
  p.causalFlags = address("causal_flags");
  p.alibiSlopes = address("alibi_slopes");
  p.sinks = address("sinks");
  p.lse = address("lse");
  if (p.lse) p.lseStrideHead = layout.lseStrideHead;
  p.qStrideToken = layout.qStrideToken;
  p.qStrideHead = layout.qStrideHead;
  p.oStrideToken = layout.oStrideToken;
  p.oStrideHead = layout.oStrideHead;
  p.blockTableStride = layout.blockTableStride;
  p.kvStrideBlock = layout.kvStrideBlock;
  p.kvStrideKv = layout.kvStrideKv;
  p.kvStrideToken = layout.kvStrideToken;
  p.kvStrideHead = layout.kvStrideHead;
  std::optional<runtime::DeviceBuffer> workspace;
  if (const uint64_t bytes = ops::pagedAttentionWorkspaceBytes(p.numTokens, p.numQueryHeads,
                                                               config.effectiveValueHeadSize(), p.maxSeqLen)) {
    auto w = runtime::DeviceBuffer::allocate(bytes);
    if (!w) return w.status();
    workspace = std::move(*w);
    p.workspace = workspace->address();
    p.workspaceBytes = bytes;
  }
  if (Status s = ops::validatePagedAttention(p); !s) return s;

  PagedAttentionOpRun result;
  result.kernelName = ops::selectPagedAttentionVariant(p).kernelName();
  const ops::SplitKvPlan plan = ops::pagedAttentionSplitPlan(p);
  result.numSegments = plan.numSegments;
  result.segmentTiles = plan.segmentTiles;

  // ---- Correctness: the first call (compiling or loading) on the poisoned outputs. ----
  const auto firstStart = std::chrono::steady_clock::now();
  if (Status s = ops::pagedAttention(p); !s) return s;
  if (Status s = runtime::synchronizeContext(); !s) return s;
  result.firstCallMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - firstStart).count();
  std::vector<uint8_t> output(buffers[0].bytes.size());
  if (Status s = device[0].copyToHost(output.data(), output.size()); !s) return s;
  std::vector<uint8_t> lse;
  if (const int lseIndex = (*problem)->lseBuffer(); lseIndex >= 0) {
    lse.resize(buffers[static_cast<size_t>(lseIndex)].bytes.size());
    if (Status s = device[static_cast<size_t>(lseIndex)].copyToHost(lse.data(), lse.size()); !s) return s;
  }
  GpuRunResult& run = result.run;
  (*problem)->check(output, run.check, (*problem)->lseBuffer() >= 0 ? &lse : nullptr);
  run.check.gridX = (*problem)->gridX();
  run.check.gridY = (*problem)->gridY();

  // ---- Timing. ----
  if (options.timedIterations > 0) {
    for (int i = 0; i < options.warmupIterations; ++i)
      if (Status s = ops::pagedAttention(p); !s) return s;
    if (Status s = timeMedian(options.timedIterations, [&] { return ops::pagedAttention(p); }, &run.medianMs); !s)
      return s;
    run.gbPerSecond = (*problem)->minimumBytes() / (run.medianMs * 1e6);
    run.tflops = (*problem)->flops() / (run.medianMs * 1e9);
    run.copyGbPerSecond =
        copyCeilingGbPerSecond((*problem)->minimumBytes(), std::max(5, options.timedIterations / 2));
  }
  return result;
}

}  // namespace attnjit::compiler
