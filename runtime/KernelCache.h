// The kernel cache: key → kernel ready to launch, per CUDA context, backed by the disk cache.
//
// getOrCompile(key, compile) returns, in order of preference:
//  1. the kernel already loaded in the calling thread's context (memory);
//  2. the cubin from the disk cache, loaded into the context;
//  3. a fresh compile: `compile()` produces PTX (and possibly a cubin); without a cubin the
//     cache links the PTX with the driver; the result is stored on disk and loaded.
// On disk the key is the caller's key plus the loader's toolchain identity (for the driver:
// its version), because the driver's PTX compiler produced the cubin: a driver update never
// loads an entry the old driver wrote.
// Aliases: a second, cheaper key that stands for a kernel key (the JIT's key of a kernel
// before its tile-IR passes, so that a warm start skips them). resolveAlias looks in memory,
// then on disk, where an alias is an entry without code whose metadata holds the kernel key
// (same file format, checks and atomic writes as kernels). An alias only names a key: the
// kernel itself is still found, checked and loaded through getOrCompile.
// Concurrent requests for the same key in the same context compile once: the others wait for
// that result (single flight). A failure is returned to every waiter and is not cached, so a
// later request tries again. ATTNJIT_CACHE_DISABLE=1 skips every lookup (memory and disk):
// each request compiles, and the caller's handle alone keeps the module loaded.
//
// Everything that needs a GPU (context identity, linking, loading) sits behind KernelLoader,
// so the cache logic is tested on machines without one.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/DiskCache.h"
#include "runtime/Driver.h"
#include "runtime/Module.h"

namespace attnjit::runtime {

// What a compile produces.
struct CompiledKernel {
  std::string entryName;            // the kernel's symbol in the PTX / cubin
  std::string ptx;
  std::vector<std::uint8_t> cubin;  // empty: the cache links `ptx` through the driver
  StringMap metadata;               // anything the launcher needs later (stored on disk)
};

using CompileFunction = std::function<support::Expected<CompiledKernel>()>;

// A kernel ready to launch. The module stays loaded while any copy of the owning
// shared_ptr (the cache's or a caller's) exists.
struct LoadedKernel {
  enum class Origin { Compiled, DiskCache };

  Function function;
  std::string ptx;
  StringMap metadata;
  Origin origin = Origin::Compiled;
  std::shared_ptr<void> module;
};

// The GPU-facing steps of the cache.
class KernelLoader {
 public:
  struct LoadedModule {
    Function function;
    std::shared_ptr<void> module;  // unloads the module when the last owner lets go
  };

  virtual ~KernelLoader() = default;
  // The calling thread's context (kernels are cached per context).
  virtual support::Expected<ContextHandle> currentContext() = 0;
  // PTX → cubin for the current context's device.
  virtual support::Expected<std::vector<std::uint8_t>> linkPtx(const std::string& ptx, const std::string& ptxName) = 0;
  // Loads `cubin` into the current context and finds the kernel `entryName`.
  virtual support::Expected<LoadedModule> load(const std::vector<std::uint8_t>& cubin,
                                               const std::string& entryName) = 0;
  // Names the version of whatever turns PTX into a cubin (e.g. "cuda-driver 12080"); it joins
  // the disk key so that a changed toolchain never loads an entry the old one wrote. Empty:
  // nothing to add.
  virtual std::string toolchainIdentity() { return {}; }
};

// The loader that uses the CUDA driver (Driver.h, Module.h).
std::unique_ptr<KernelLoader> makeDriverKernelLoader();

class KernelCache {
 public:
  // Metadata key under which the disk entry records the kernel's entry name.
  static constexpr const char* kEntryNameKey = "attnjit.entry";
  // Metadata key under which an alias entry records the kernel key it stands for.
  static constexpr const char* kAliasOfKey = "attnjit.alias_of";
  // Metadata key of a kernel's tensor-map recipes (runtime/TensorMap.h), when it takes maps.
  static constexpr const char* kTensorMapsKey = "attnjit.tensor_maps";

  struct Stats {
    std::uint64_t memoryHits = 0;  // includes requests that waited for an in-flight compile
    std::uint64_t diskHits = 0;
    std::uint64_t compiles = 0;
    std::uint64_t compileFailures = 0;
    std::uint64_t diskMisses = 0;
    std::string lastDiskMissReason;
    std::uint64_t aliasHits = 0;  // resolveAlias answers, from memory or disk

  };

  // `bypassLookups`: the ATTNJIT_CACHE_DISABLE behaviour (see above).
  KernelCache(std::unique_ptr<KernelLoader> loader, DiskCache disk, bool bypassLookups = cacheDisabledByEnvironment());
  KernelCache(const KernelCache&) = delete;
  KernelCache& operator=(const KernelCache&) = delete;

  // The process-wide cache: the driver loader and the disk cache the environment asks for.
  static KernelCache& processCache();

  // `keyText` must identify everything the compiled code depends on (kernel, options,
  // target SM, compiler version): it is the whole cache key in memory; on disk the loader's
  // toolchain identity is appended (diskKey).
  support::Expected<std::shared_ptr<const LoadedKernel>> getOrCompile(const std::string& keyText,
                                                             const CompileFunction& compile);

  // The kernel key `aliasText` stands for, when recordAlias stored one (in this cache's
  // memory or on disk); nullopt otherwise, and always when lookups are bypassed. A damaged
  // alias entry is removed and reads as none.
  std::optional<std::string> resolveAlias(const std::string& aliasText);
  // Remembers that `aliasText` stands for `keyText` (memory and disk). Call it only after
  // getOrCompile(keyText) succeeded: the caller vouches that the alias determines the key.
  void recordAlias(const std::string& aliasText, const std::string& keyText);

  // Receives one line per disk miss that has a reason worth logging (not "no entry").
  void setLogSink(std::function<void(const std::string&)> log);
  Stats stats() const;
  // Forgets the loaded kernels (their modules unload once no caller holds them) and the
  // aliases held in memory.
  void clearMemory();
  const DiskCache& disk() const { return disk_; }
  // The key text the disk entry for `keyText` is stored under.
  std::string diskKey(const std::string& keyText);

 private:
  using Result = support::Expected<std::shared_ptr<const LoadedKernel>>;

  Result build(const std::string& keyText, const CompileFunction& compile, bool useDisk);
  Result buildGuarded(const std::string& keyText, const CompileFunction& compile, bool useDisk);
  std::optional<Result> loadFromDisk(const std::string& diskKeyText);
  void noteDiskMiss(const std::string& reason);

  std::unique_ptr<KernelLoader> loader_;
  DiskCache disk_;
  bool bypassLookups_;

  mutable std::mutex mutex_;
  // A key's result, or its in-flight compile; `ticket` identifies the request that owns it.
  struct Slot {
    std::shared_future<Result> result;
    std::uint64_t ticket = 0;
  };
  std::map<std::pair<ContextHandle, std::string>, Slot> kernels_;
  std::map<std::string, std::string> aliases_;  // alias text → kernel key text
  std::uint64_t nextTicket_ = 0;
  Stats stats_;
  std::function<void(const std::string&)> log_;
};

}  // namespace attnjit::runtime
