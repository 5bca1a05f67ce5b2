#include "compiler/ops/SplitKv.h"

#include "compiler/driver/DeviceTarget.h"
#include "compiler/kernels/ConfigChecks.h"
#include "compiler/ops/ReadyKernels.h"
#include "runtime/Module.h"

namespace attnjit::ops {

SplitKvScratch splitKvScratch(int64_t numTokens, int numQueryHeads, int rowWidth, int64_t numSegments) {
  const uint64_t rows = static_cast<uint64_t>(numTokens) * static_cast<uint64_t>(numQueryHeads) *
                        static_cast<uint64_t>(numSegments);
  return {rows * static_cast<uint64_t>(compiler::nextPowerOfTwo(rowWidth)) * 4, (rows * 4 + 15) / 16 * 16};
}

compiler::ReduceSegmentsConfig launchedReduceSegments(const compiler::ReduceSegmentsConfig& config, int64_t numTokens) {
  return compiler::reduceSegmentsForLaunch(config, numTokens, compiler::opDeviceFacts().smCount);
}

support::Status launchReduceSegments(const ReduceSegmentsLaunch& r) {
  const compiler::ReduceSegmentsConfig reduce = launchedReduceSegments(r.config, r.numTokens);
  auto reducer = readyKernel(reduce.kernelName(), [&] { return compiler::buildReduceSegments(reduce); });
  if (!reducer) return reducer.status();
  // In the kernel's parameter order (compiler/kernels/ReduceSegments.cpp).
  uint64_t pointers[6] = {r.out, r.scratch.output, r.scratch.maximum, r.scratch.expsum};
  int numPointers = 4;
  if (reduce.outputLse) pointers[numPointers++] = r.lse;
  if (reduce.outputFp8) pointers[numPointers++] = r.outputScale;
  int32_t numSegments = r.numSegments;
  int64_t strides[4] = {r.oStrideToken, r.oStrideHead, r.lseStrideHead, r.lseStrideToken};
  const int numStrides = !reduce.outputLse ? 2 : reduce.lseTokenStride ? 4 : 3;
  void* params[11];
  int n = 0;
  for (int i = 0; i < numPointers; ++i) params[n++] = &pointers[i];
  params[n++] = &numSegments;
  for (int i = 0; i < numStrides; ++i) params[n++] = &strides[i];
  return reducer->loaded->function.launch(
      reducer->launchConfig(
          {static_cast<unsigned>(r.numTokens), static_cast<unsigned>(compiler::reduceSegmentsGridY(reduce)), 1},
          r.stream),
      params);
}

}  // namespace attnjit::ops
