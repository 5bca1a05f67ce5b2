// attnjit's C++ embedding API: one Jit per device, kernels from specs,
// launches on the caller's stream, compile statistics, and the paged-attention,
// cache-write, merge, MLA cache-write and MLA decode ops. Link attnjit::attnjit (find_package(attnjit)).
//
//   attnjit::JitOptions options;   // device 0, default cache folder
//   auto jit = attnjit::Jit::create(options);
//   if (!jit) die(jit.diagnostic().str());
//   auto kernel = jit->kernelFromSpecFile("specs/merge_attn_states.yaml",
//                                         "merge_attn_states_bf16_h32_d128_lse");
//   if (!kernel) die(kernel.diagnostic().str());
//   attnjit::KernelArgument args[] = {attnjit::KernelArgument::devicePointer(out), ...};
//   if (auto s = kernel->launch({gridX, 32, 1}, args, stream); !s) die(s.message());
//   attnjit::CompileStats stats = kernel->stats();   // ms per stage, registers, spills
//
// Errors are values: every call that can fail on user input returns a Status or
// an Expected<T> whose diagnostic says what was wrong, at which spec line where
// there is one. Nothing here throws (beyond std::bad_alloc) or aborts on user
// input. Without a CUDA driver, everything but loading and launching works:
// specs load, kernels compile to PTX, op arguments validate.
//
// Threads: a Jit and its Kernels may be used from any number of threads.
// Launching a spec kernel makes the Jit's device's primary context current on
// the calling thread (what cudaSetDevice does; PyTorch and the CUDA runtime use
// the same context, so their pointers and streams work unchanged). An op runs
// in its stream's context instead (the default stream: the thread's current
// context, else the Jit's device's primary one) and restores the caller's
// current context afterwards.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compiler/ops/CompanionOps.h"
#include "compiler/driver/KernelArguments.h"
#include "compiler/ops/MlaDecodeOp.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/ops/PagedAttentionTuning.h"
#include "compiler/ops/SwapBlocks.h"
#include "compiler/spec/Spec.h"
#include "support/Diagnostics.h"
#include "runtime/Driver.h"

namespace attnjit {

using Status = support::Status;
using Diagnostic = support::Diagnostic;
template <typename T>
using Expected = support::Expected<T>;
using StreamHandle = runtime::StreamHandle;  // a CUstream; null: the default stream
using KernelArgument = compiler::KernelArgument;
using KernelParameter = compiler::KernelParameter;
// The ops' parameters, exactly the op-level API's structs (compiler/ops/PagedAttentionOp.h,
// compiler/ops/CompanionOps.h, compiler/ops/MlaDecodeOp.h): every field documented there.
using PagedAttentionParams = ops::PagedAttentionParams;
using CacheWriteParams = ops::CacheWriteParams;
using MergeAttnStatesParams = ops::MergeAttnStatesParams;
using MergePartialsParams = ops::MergePartialsParams;
using MlaCacheWriteParams = ops::MlaCacheWriteParams;
using GatherCacheParams = ops::GatherCacheParams;
using ConvertCacheParams = ops::ConvertCacheParams;
using SwapBlocksParams = ops::SwapBlocksParams;
using MlaDecodeParams = ops::MlaDecodeParams;
using MlaSplitRule = ops::MlaSplitRule;
// Split-KV workspace bytes for pagedAttention and mlaDecode.
using ops::mlaDecodeWorkspaceBytes;
using ops::pagedAttentionWorkspaceBytes;

// The library's version, e.g. "0.1.0".
const char* version();

struct JitOptions {
  int device = 0;              // CUDA device ordinal
  std::string cacheDirectory;  // disk kernel cache; empty: ATTNJIT_CACHE_DIR, else ~/.cache/attnjit
  bool bypassCache = false;    // compile every kernel afresh (also ATTNJIT_CACHE_DISABLE=1)
  // Code generation target, e.g. "sm_90a"; empty: the device's, else (no
  // driver) each spec's own `target`.
  std::string target;
};

// Where a loaded kernel came from.
enum class KernelOrigin {
  NotLoaded,  // compiled to PTX at most; never loaded on a device
  Compiled,   // compiled by this process (LLVM, ptxas in the driver)
  DiskCache,  // the cubin from the disk cache
  Memory,     // already loaded in this process
};
const char* kernelOriginName(KernelOrigin origin);  // "not-loaded", "compiled", "disk", "memory"

struct CompileStats {
  std::string target;  // what the kernel was compiled for
  KernelOrigin origin = KernelOrigin::NotLoaded;
  // Milliseconds per stage; a stage that did not run in this process (a cache
  // hit) reads 0. Passes always run: the optimized tile IR is the cache key.
  double passesMs = 0, llvmLowerMs = 0, llvmOptimizeMs = 0, ptxEmitMs = 0;
  double loadMs = 0;  // the whole load: passes, cache lookup, any compile and ptxas, module load
  int threads = 0;    // block size
  int dynamicSharedBytes = 0;
  // From the loaded cubin; -1 until loaded.
  int registers = -1;
  int spillBytes = -1;  // per-thread local memory
  int staticSharedBytes = -1;
};

struct GridDim {
  unsigned x = 1, y = 1, z = 1;
};

class Jit;

// One kernel variant of a spec: compiled to PTX on request, loaded on the
// runtime's device on first launch. Copies share the same kernel.
class Kernel {
 public:
  const std::string& name() const;
  std::string family() const;  // the spec spelling: "unified_attention", "merge_attn_states", ...
  // The variant's parameters in spec spelling ("dtype=bf16 num_heads=32 ...").
  std::string specParams() const;
  // In launch order, with the alignment and divisibility promises launch() checks.
  const std::vector<KernelParameter>& parameters() const;

  // Compiles to PTX for the Jit's target; needs no GPU. Idempotent.
  support::Status compile();
  // The PTX (compiles first when needed).
  support::Expected<std::string> ptx();
  // Loads the kernel on the Jit's device through the kernel caches (memory,
  // disk, else compile). launch() does this on first use.
  support::Status load();
  // Checks `arguments` against parameters() (count, kinds, null and misaligned
  // pointers, divisibility of strides) and launches a grid of `grid` blocks of
  // stats().threads threads on `stream`. Asynchronous.
  support::Status launch(GridDim grid, std::span<const KernelArgument> arguments, StreamHandle stream = nullptr);
  // launch()'s checks of the grid and the arguments alone; needs no GPU.
  support::Status checkLaunch(GridDim grid, std::span<const KernelArgument> arguments) const;
  CompileStats stats() const;

  struct State;

 private:
  friend class Jit;
  explicit Kernel(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

class Jit {
 public:
  // Fails on a bad option (negative or missing device, unknown target); without
  // a CUDA driver it succeeds, for compiling and validating on a CPU machine.
  static support::Expected<Jit> create(const JitOptions& options = {});

  int device() const;
  // The code generation target ("" when none is known: no driver and none asked
  // for; each kernel then uses its spec's).
  const std::string& target() const;
  // The disk cache's folder ("" when the disk cache is off).
  std::string cacheDirectory() const;

  // A kernel from a YAML spec (specs/README.md) given as text or as a file.
  // `variantName` picks one of the spec's variants (`attnjit list` names them);
  // it may be empty when the spec has exactly one.
  support::Expected<Kernel> kernelFromSpecText(const std::string& yaml, const std::string& variantName = "");
  support::Expected<Kernel> kernelFromSpecFile(const std::string& path, const std::string& variantName = "");
  // A kernel from a C++ description (compiler/spec/Spec.h: family + that family's config).
  support::Expected<Kernel> kernelForVariant(const compiler::Variant& variant);

  // The ops, on their stream's device (see the top of this file and
  // compiler/ops/PagedAttentionOp.h). validate*: the checks without the GPU.
  support::Status pagedAttention(const PagedAttentionParams& params);
  support::Status validatePagedAttention(const PagedAttentionParams& params) const;
  // Compiles or loads, on up to `threads` threads (0: every core), every kernel
  // pagedAttention may launch for calls with these static parameters
  // (ops::warmupPagedAttention); the number ready.
  support::Expected<int> warmupPagedAttention(const PagedAttentionParams& params, int threads = 0);
  // Measures the candidate plans of this call on its buffers, records the
  // fastest for its bucket and runs it (ops::tunePagedAttention).
  support::Expected<ops::PagedAttentionTuningReport> tunePagedAttention(const PagedAttentionParams& params);
  support::Status cacheWrite(const CacheWriteParams& params);
  support::Status validateCacheWrite(const CacheWriteParams& params) const;
  support::Status mergeAttnStates(const MergeAttnStatesParams& params);
  support::Status validateMergeAttnStates(const MergeAttnStatesParams& params) const;
  support::Status mergePartials(const MergePartialsParams& params);
  support::Status validateMergePartials(const MergePartialsParams& params) const;
  support::Status mlaCacheWrite(const MlaCacheWriteParams& params);
  support::Status validateMlaCacheWrite(const MlaCacheWriteParams& params) const;
  support::Status gatherCache(const GatherCacheParams& params);
  support::Status validateGatherCache(const GatherCacheParams& params) const;
  support::Status convertCache(const ConvertCacheParams& params);
  support::Status validateConvertCache(const ConvertCacheParams& params) const;
  // Block copies between caches (ops::swapBlocks): no kernel, no compilation.
  support::Status swapBlocks(const SwapBlocksParams& params);
  support::Status validateSwapBlocks(const SwapBlocksParams& params) const;
  support::Status mlaDecode(const MlaDecodeParams& params);
  support::Status validateMlaDecode(const MlaDecodeParams& params) const;

  struct State;

 private:
  explicit Jit(std::shared_ptr<State> state) : state_(std::move(state)) {}
  support::Expected<Kernel> kernelFromSpec(support::Expected<compiler::Spec> spec, const std::string& variantName);
  std::shared_ptr<State> state_;
};

}  // namespace attnjit
