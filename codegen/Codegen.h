// Tile IR (after layout assignment) → LLVM IR → PTX. The public face of codegen/:
// nothing LLVM-typed crosses it.
#pragma once

#include <string>

#include "codegen/Target.h"
#include "ir/IR.h"

namespace attnjit::codegen {

struct CodegenOptions {
  TargetInfo target;
  int ptxVersion = 0;  // from choosePtxVersion
  bool optimize = true;
};

struct CodegenResult {
  std::string kernelName;
  std::string llvmIr;           // as lowered
  std::string llvmIrOptimized;  // after O3
  std::string ptx;
  int numThreads = 0;           // block size (num_warps × 32)
  int sharedMemoryBytes = 0;    // dynamic shared memory the kernel needs
  double lowerMs = 0, optimizeMs = 0, emitMs = 0;
};

// Every tile value must carry a layout (compiler::assignLayouts). Unsupported
// combinations (an op/type pair the backend cannot lower yet, e.g. fp8 on sm_80)
// return a diagnostic naming the op, its types and the target.
ir::Expected<CodegenResult> generatePtx(const ir::Kernel& kernel, const CodegenOptions& options);

// The version of the LLVM linked in ("22.1.8"): part of every cache key.
std::string llvmVersion();

// The revision of the lowering: bumped whenever the PTX generated for the same
// tile IR changes, so JIT cache keys (compiler/Jit.cpp) never match entries a
// previous attnjit compiled differently. 2: cp.async for pipelined tiles.
inline constexpr int kCodegenRevision = 2;

}  // namespace attnjit::codegen
