// The JIT: a kernel builder's output → a kernel loaded in the current CUDA
// context, through the process kernel cache (runtime/KernelCache.h: memory per
// context, then disk, then a fresh compile).
//
// The cache key is the text of everything that changes the machine code: the
// tile IR after the pass pipeline (layouts included), the target, the PTX
// version, the compile options, and the attnjit and LLVM versions. The passes run
// before the lookup (a few milliseconds); LLVM, PTX emission and the driver's
// PTX → cubin step run only on a miss.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "compiler/CompileDriver.h"
#include "runtime/KernelCache.h"

namespace attnjit::compiler {

using KernelFactory = std::function<ir::Expected<std::unique_ptr<ir::Kernel>>()>;

struct JitKernel {
  std::shared_ptr<const runtime::LoadedKernel> loaded;
  std::string name;
  int numThreads = 0;
  int sharedMemoryBytes = 0;
  bool fromDisk = false;       // loaded from the disk cache
  bool compiledNow = false;    // this call ran LLVM and the driver
  double passesMs = 0;         // tile-IR passes (always run: they make the key)
  double lookupMs = 0;         // key → loaded kernel (includes any compile)
  CompiledKernel compiled;     // the stages, when compiledNow
};

// The cache key text of a kernel after the passes (see above).
std::string jitCacheKey(const CompiledKernel& afterPasses, const CompileOptions& options);

// Builds the kernel, runs the passes, and returns it loaded in the current context.
ir::Expected<JitKernel> jitKernel(const KernelFactory& build, const CompileOptions& options,
                                  runtime::KernelCache& cache = runtime::KernelCache::processCache());

}  // namespace attnjit::compiler
