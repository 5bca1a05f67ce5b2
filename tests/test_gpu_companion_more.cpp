// [gpu] merge_partials (N-way LSE merge) and mla_cache_write (concat_and_cache_mla)
// JIT-compiled for the local GPU, through the harness and through the op API
// (compiler/ops/CompanionOps.h) on device buffers, and checked against the float64
// references on poisoned buffers. Skips with a visible message where no CUDA
// driver or GPU is present.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "compiler/ops/CompanionOps.h"
#include "compiler/validation/MergePartialsProblem.h"
#include "compiler/validation/MlaCacheWriteProblem.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "tests/test_tools.h"

using namespace attnjit;

namespace {

compiler::BatchShape raggedBatch(int numPartials) {
  compiler::BatchShape s;
  s.queryLens = {37, 1, 130, 5, 300};
  s.contextLens = {77, 300, 0, 61, 17};
  s.seed = 17;
  s.numPartials = numPartials;
  return s;
}

void expectPassed(const support::Expected<validation::GpuRunResult>& result, const std::string& name) {
  INFO(name);
  INFO((result.isOk() ? result->check.detail : result.diagnostic().str()));
  REQUIRE(result.isOk());
  CHECK(result->check.passed);
}

// A problem's buffers on the device, then (after the op ran) back on the host for its check.
struct DeviceCopy {
  std::vector<runtime::DeviceBuffer> buffers;

  explicit DeviceCopy(const validation::KernelProblem& problem) {
    for (const auto& buffer : problem.buffers()) {
      auto d = runtime::DeviceBuffer::allocate(std::max<size_t>(buffer.bytes.size(), 16));
      REQUIRE(d.isOk());
      REQUIRE(d->copyFromHost(buffer.bytes.data(), buffer.bytes.size()).isOk());
      buffers.push_back(std::move(*d));
    }
  }
  uint64_t address(const validation::KernelProblem& problem, const std::string& label) const {
    for (size_t i = 0; i < problem.buffers().size(); ++i)
      if (problem.buffers()[i].label == label) return buffers[i].address();
    FAIL("no buffer " << label);
    return 0;
  }
  validation::AttentionRunResult check(const validation::KernelProblem& problem) const {
    REQUIRE(runtime::synchronizeContext().isOk());
    std::vector<validation::KernelProblem::Buffer> after = problem.buffers();
    for (size_t i = 0; i < after.size(); ++i)
      REQUIRE(buffers[i].copyToHost(after[i].bytes.data(), after[i].bytes.size()).isOk());
    validation::AttentionRunResult result;
    problem.check(after, result);
    return result;
  }
};

int64_t scalar(const validation::KernelProblem& problem, size_t i) {
  return std::get<int64_t>(problem.scalarArguments()[i]);
}

}  // namespace

TEST_CASE("GPU merge_partials across dtypes head sizes and partial counts", "[gpu][merge_partials]") {
  if (!tests::gpuPresent()) return;
  for (auto dtype : {ir::ScalarKind::BF16, ir::ScalarKind::F16, ir::ScalarKind::F32})
    for (int headSize : {64, 80, 128, 256})
      for (int numPartials : {1, 2, 3, 8}) {
        compiler::MergePartialsConfig c;
        c.dtype = dtype;
        c.headSize = headSize;
        c.numHeads = 6;
        c.outputLse = numPartials != 3;
        expectPassed(validation::runMergePartialsGpu(c, raggedBatch(numPartials), {}),
                     c.kernelName() + " with " + std::to_string(numPartials) + " partials");
      }
}

TEST_CASE("GPU mla_cache_write in every format width and block size", "[gpu][mla_cache_write]") {
  if (!tests::gpuPresent()) return;
  for (auto dtype : {ir::ScalarKind::BF16, ir::ScalarKind::F16, ir::ScalarKind::F32})
    for (auto format : {compiler::KvCacheFormat::Auto, compiler::KvCacheFormat::Fp8E4M3,
                        compiler::KvCacheFormat::Fp8E5M2})
      for (int kvLoraRank : {512, 256})
        for (int blockSize : {16, 64}) {
          compiler::MlaCacheWriteConfig c;
          c.dtype = dtype;
          c.cacheFormat = format;
          c.kvLoraRank = kvLoraRank;
          c.blockSize = blockSize;
          expectPassed(validation::runMlaCacheWriteGpu(c, raggedBatch(2), {}), c.kernelName());
        }
}

TEST_CASE("GPU merge_partials op on device buffers matches the reference", "[gpu][merge_partials][op]") {
  if (!tests::gpuPresent()) return;
  REQUIRE(runtime::activatePrimaryContext(0).isOk());
  for (int numPartials : {1, 4, 8})
    for (bool outputLse : {true, false}) {
      compiler::MergePartialsConfig config;
      config.dtype = ir::ScalarKind::BF16;
      config.numHeads = 8;
      config.headSize = 128;
      config.outputLse = outputLse;
      auto problem = validation::MergePartialsProblem::create(config, raggedBatch(numPartials));
      REQUIRE(problem.isOk());
      const validation::KernelProblem& kp = **problem;
      DeviceCopy device(kp);
      ops::MergePartialsParams p;
      p.dtype = config.dtype;
      p.numHeads = config.numHeads;
      p.headSize = config.headSize;
      p.numPartials = numPartials;
      p.numTokens = scalar(kp, 1);
      p.output = device.address(kp, "output");
      if (outputLse) p.outputLse = device.address(kp, "output_lse");
      p.partialOutputs = device.address(kp, "partial_outputs");
      p.partialLses = device.address(kp, "partial_lses");
      p.outputStrideToken = scalar(kp, 2);
      p.outputStrideHead = scalar(kp, 3);
      p.partialStridePartial = scalar(kp, 4);
      p.partialStrideToken = scalar(kp, 5);
      p.partialStrideHead = scalar(kp, 6);
      p.lseStridePartial = scalar(kp, 7);
      INFO(ops::selectMergePartialsVariant(p).kernelName() << " with " << numPartials << " partials");
      // Twice: the second call finds the kernel loaded (and must give the same result).
      for (int call = 0; call < 2; ++call) {
        support::Status launched = ops::mergePartials(p);
        INFO((launched ? std::string() : launched.diagnostic().str()));
        REQUIRE(launched.isOk());
      }
      const validation::AttentionRunResult result = device.check(kp);
      INFO("max abs error " << result.maxAbsError << " (tolerance " << result.tolerance << "); " << result.detail);
      CHECK(result.passed);
    }
}

TEST_CASE("GPU mla_cache_write op on device buffers matches the reference", "[gpu][mla_cache_write][op]") {
  if (!tests::gpuPresent()) return;
  REQUIRE(runtime::activatePrimaryContext(0).isOk());
  for (auto format : {compiler::KvCacheFormat::Auto, compiler::KvCacheFormat::Fp8E4M3}) {
    compiler::MlaCacheWriteConfig config;
    config.dtype = ir::ScalarKind::BF16;
    config.cacheFormat = format;
    config.blockSize = 64;
    auto problem = validation::MlaCacheWriteProblem::create(config, raggedBatch(2));
    REQUIRE(problem.isOk());
    const validation::KernelProblem& kp = **problem;
    DeviceCopy device(kp);
    ops::MlaCacheWriteParams p;
    p.dtype = config.dtype;
    p.cacheFormat = format;
    p.kvLoraRank = config.kvLoraRank;
    p.ropeDim = config.ropeDim;
    p.blockSize = config.blockSize;
    p.numTokens = kp.grid().x;
    p.kvC = device.address(kp, "kv_c");
    p.kPe = device.address(kp, "k_pe");
    p.kvCache = device.address(kp, "kv_cache");
    p.slotMapping = device.address(kp, "slot_mapping");
    if (format != compiler::KvCacheFormat::Auto) p.scale = device.address(kp, "scale");
    p.kvCStrideToken = scalar(kp, 0);
    p.kPeStrideToken = scalar(kp, 1);
    p.cacheStrideBlock = scalar(kp, 2);
    p.cacheStrideToken = scalar(kp, 3);
    INFO(ops::selectMlaCacheWriteVariant(p).kernelName());
    support::Status launched = ops::mlaCacheWrite(p);
    INFO((launched ? std::string() : launched.diagnostic().str()));
    REQUIRE(launched.isOk());
    const validation::AttentionRunResult result = device.check(kp);
    INFO("max abs error " << result.maxAbsError << " (tolerance " << result.tolerance << "); " << result.detail);
    CHECK(result.passed);
  }
}
