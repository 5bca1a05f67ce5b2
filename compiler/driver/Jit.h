// The JIT: a kernel builder's output → a kernel loaded in the current CUDA
// context, through the process kernel cache (runtime/KernelCache.h: memory per
// context, then disk, then a fresh compile).
//
// The cache key is the text of everything that changes the machine code: the
// tile IR after the pass pipeline (layouts included), the target, the PTX
// version, the compile options, and the attnjit and LLVM versions. LLVM, PTX
// emission and the driver's PTX → cubin step run only on a miss.
//
// The passes themselves (2-8 ms on the attention kernels, most of a warm start)
// run only when the cache knows no alias for the kernel: the alias key is the
// same text with the tile IR *before* the passes, plus the identity of the
// attnjit binary (jitBuildIdentity), since the passes' code decides what they
// make of it. After a successful lookup by the full key, the alias is recorded
// (memory and disk); a later process with the same binary goes from the built
// kernel straight to the cached one. An alias whose key finds no kernel (the
// entry was damaged or removed) falls back to the passes and the full key. With
// an override folder in play no alias is used.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "compiler/driver/CompileDriver.h"
#include "runtime/KernelCache.h"

namespace attnjit::compiler {

using KernelFactory = std::function<support::Expected<std::unique_ptr<ir::Kernel>>()>;

struct JitKernel {
  std::shared_ptr<const runtime::LoadedKernel> loaded;
  std::string name;
  int numThreads = 0;
  int sharedMemoryBytes = 0;
  bool fromDisk = false;       // loaded from the disk cache
  bool compiledNow = false;    // this call ran LLVM and the driver
  double buildMs = 0;          // the kernel builder (tile IR as built)
  bool passesSkipped = false;  // an alias gave the key: the tile-IR passes did not run
  double passesMs = 0;         // tile-IR passes and key (or the alias lookup that replaced them)
  double lookupMs = 0;         // key → loaded kernel (includes any compile)
  CompiledKernel compiled;     // the stages, when compiledNow
};

// The cache key text of a kernel after the passes (see above).
std::string jitCacheKey(const CompiledKernel& afterPasses, const CompileOptions& options);

// The alias key text of a kernel as built (see above); empty when no alias may be
// used (no binary identity, an override folder, an unknown target).
std::string jitAliasKey(const ir::Kernel& beforePasses, const CompileOptions& options);

// attnjit's release version (the project version the compiler was built as).
const char* attnjitVersion();

// The attnjit binary that runs this code: path, size and modification time of the
// file it was loaded from (dladdr, else /proc/self/exe); empty when unknown.
const std::string& jitBuildIdentity();

// Builds the kernel, runs the passes (unless an alias names the key), and returns it loaded in the current context.
support::Expected<JitKernel> jitKernel(const KernelFactory& build, const CompileOptions& options,
                                  runtime::KernelCache& cache = runtime::KernelCache::processCache());

}  // namespace attnjit::compiler
