#include "runtime/KernelCache.h"

#include <exception>

#include "runtime/DriverInternal.h"

namespace attnjit::runtime {
namespace {

class DriverKernelLoader final : public KernelLoader {
 public:
  support::Expected<ContextHandle> currentContext() override { return currentOrPrimaryContext(); }

  // Kernels with warpgroup MMAs or register moves keep their PTX as the module
  // image, which the driver compiles whole-program when it loads it (Module.h,
  // needsWholeProgramCompile); the disk cache stores that image like a cubin.
  support::Expected<std::vector<std::uint8_t>> linkPtx(const std::string& ptx, const std::string& ptxName) override {
    return moduleImageForPtx(ptx, ptxName);
  }

  support::Expected<LoadedModule> load(const std::vector<std::uint8_t>& cubin, const std::string& entryName) override {
    auto module = Module::load(cubin, entryName + ".ptx");
    if (!module) return module.status();
    auto owned = std::make_shared<Module>(std::move(*module));
    auto function = owned->function(entryName);
    if (!function) return function.status();
    return LoadedModule{*function, owned};
  }

  std::string toolchainIdentity() override {
    // Without a driver nothing is linked or loaded, so nothing reaches the disk either.
    auto version = driverVersion();
    if (!version) return std::string();
    return "cuda-driver " + std::to_string(*version) + (everyKernelWholeProgram() ? " whole-program" : "");
  }
};

}  // namespace

std::unique_ptr<KernelLoader> makeDriverKernelLoader() { return std::make_unique<DriverKernelLoader>(); }

KernelCache::KernelCache(std::unique_ptr<KernelLoader> loader, DiskCache disk, bool bypassLookups)
    : loader_(std::move(loader)), disk_(std::move(disk)), bypassLookups_(bypassLookups) {}

KernelCache& KernelCache::processCache() {
  // Never destroyed: at process exit the driver may already be torn down, and unloading
  // modules then would only produce errors.
  static KernelCache* cache = new KernelCache(makeDriverKernelLoader(), DiskCache::fromEnvironment());
  return *cache;
}

void KernelCache::setLogSink(std::function<void(const std::string&)> log) {
  std::lock_guard<std::mutex> lock(mutex_);
  log_ = std::move(log);
}

KernelCache::Stats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void KernelCache::clearMemory() {
  std::lock_guard<std::mutex> lock(mutex_);
  // In-flight compiles keep running; their results are simply not remembered.
  kernels_.clear();
  aliases_.clear();
}

std::string KernelCache::diskKey(const std::string& keyText) {
  std::string toolchain = loader_->toolchainIdentity();
  if (toolchain.empty()) return keyText;
  return keyText + "\ntoolchain " + toolchain + "\n";
}

namespace {
// Alias entries live beside the kernels; this prefix keeps their disk keys apart from any
// kernel key (the JIT's start with "attnjit <version>").
std::string aliasDiskKey(const std::string& aliasText) { return "attnjit alias\n" + aliasText; }
}  // namespace

std::optional<std::string> KernelCache::resolveAlias(const std::string& aliasText) {
  if (bypassLookups_) return std::nullopt;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = aliases_.find(aliasText);
    if (it != aliases_.end()) {
      ++stats_.aliasHits;
      return it->second;
    }
  }
  if (!disk_.enabled()) return std::nullopt;
  DiskLookup lookup = disk_.load(aliasDiskKey(aliasText));
  if (!lookup.hit()) {
    if (lookup.missReason != "no entry") noteDiskMiss("alias: " + lookup.missReason);
    return std::nullopt;
  }
  auto target = lookup.entry->metadata.find(kAliasOfKey);
  if (target == lookup.entry->metadata.end() || target->second.empty()) {
    noteDiskMiss("alias entry names no kernel key");
    return std::nullopt;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.aliasHits;
  aliases_[aliasText] = target->second;
  return target->second;
}

void KernelCache::recordAlias(const std::string& aliasText, const std::string& keyText) {
  if (bypassLookups_) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto [it, inserted] = aliases_.try_emplace(aliasText, keyText);
    if (!inserted && it->second == keyText) return;  // known, and so already on disk
    it->second = keyText;
  }
  if (disk_.enabled()) disk_.store(aliasDiskKey(aliasText), CacheEntry{{}, {}, {{kAliasOfKey, keyText}}});
}

void KernelCache::noteDiskMiss(const std::string& reason) {
  std::function<void(const std::string&)> log;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.diskMisses;
    stats_.lastDiskMissReason = reason;
    log = log_;
  }
  if (log && reason != "no entry") log("attnjit: kernel cache: disk miss: " + reason);
}

namespace {
// The tensor maps a kernel's metadata records (kTensorMapsKey), or none.
support::Expected<std::shared_ptr<const TensorMapParameters>> tensorMapsOf(const StringMap& metadata) {
  auto found = metadata.find(KernelCache::kTensorMapsKey);
  if (found == metadata.end()) return std::shared_ptr<const TensorMapParameters>();
  auto parsed = parseTensorMapRecipes(found->second);
  if (!parsed) return parsed.status();
  return std::shared_ptr<const TensorMapParameters>(std::make_shared<TensorMapParameters>(std::move(*parsed)));
}
}  // namespace

std::optional<KernelCache::Result> KernelCache::loadFromDisk(const std::string& diskKeyText) {
  DiskLookup lookup = disk_.load(diskKeyText);
  if (!lookup.hit()) {
    noteDiskMiss(lookup.missReason);
    return std::nullopt;
  }
  CacheEntry& entry = *lookup.entry;
  auto name = entry.metadata.find(kEntryNameKey);
  if (name == entry.metadata.end() || name->second.empty()) {
    noteDiskMiss("entry for this key records no kernel name");
    return std::nullopt;
  }
  auto loaded = loader_->load(entry.cubin, name->second);
  if (!loaded) {
    // E.g. a cubin for another device: compile again; the store replaces the entry.
    noteDiskMiss("cached cubin did not load: " + loaded.diagnostic().message);
    return std::nullopt;
  }
  auto maps = tensorMapsOf(entry.metadata);
  if (!maps) {
    noteDiskMiss("entry's tensor map recipes do not parse: " + maps.diagnostic().message);
    return std::nullopt;
  }
  auto kernel = std::make_shared<LoadedKernel>();
  kernel->function = loaded->function;
  kernel->function.setTensorMaps(std::move(*maps));
  kernel->module = std::move(loaded->module);
  kernel->ptx = std::move(entry.ptx);
  kernel->metadata = std::move(entry.metadata);
  kernel->origin = LoadedKernel::Origin::DiskCache;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.diskHits;
  }
  return Result(std::shared_ptr<const LoadedKernel>(std::move(kernel)));
}

KernelCache::Result KernelCache::build(const std::string& keyText, const CompileFunction& compile, bool useDisk) {
  const std::string diskKeyText = useDisk && disk_.enabled() ? diskKey(keyText) : std::string();
  if (useDisk && disk_.enabled()) {
    if (auto fromDisk = loadFromDisk(diskKeyText)) return std::move(*fromDisk);
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.compiles;
  }
  auto failed = [&](support::Status status) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.compileFailures;
    return Result(std::move(status));
  };
  support::Expected<CompiledKernel> compiled = compile();
  if (!compiled) return failed(compiled.status());
  CompiledKernel& kernel = *compiled;
  if (kernel.entryName.empty())
    return failed(runtimeError("kernel compile for key '" + keyText + "' named no entry point"));
  if (kernel.cubin.empty()) {
    if (kernel.ptx.empty())
      return failed(runtimeError("kernel compile for '" + kernel.entryName + "' produced no code"));
    auto cubin = loader_->linkPtx(kernel.ptx, kernel.entryName + ".ptx");
    if (!cubin) return failed(cubin.status());
    kernel.cubin = std::move(*cubin);
  }
  auto loaded = loader_->load(kernel.cubin, kernel.entryName);
  if (!loaded) return failed(loaded.status());

  kernel.metadata[kEntryNameKey] = kernel.entryName;
  // Only code that loaded is stored: a bad cubin must not poison later processes.
  if (useDisk && disk_.enabled()) {
    CacheEntry entry{std::move(kernel.cubin), kernel.ptx, kernel.metadata};
    disk_.store(diskKeyText, entry);
  }
  auto maps = tensorMapsOf(kernel.metadata);
  if (!maps) return failed(maps.status());
  auto result = std::make_shared<LoadedKernel>();
  result->function = loaded->function;
  result->function.setTensorMaps(std::move(*maps));
  result->module = std::move(loaded->module);
  result->ptx = std::move(kernel.ptx);
  result->metadata = std::move(kernel.metadata);
  result->origin = LoadedKernel::Origin::Compiled;
  return Result(std::shared_ptr<const LoadedKernel>(std::move(result)));
}

// An exception escaping a compile callback must not strand the requests waiting on it.
KernelCache::Result KernelCache::buildGuarded(const std::string& keyText, const CompileFunction& compile,
                                              bool useDisk) {
  try {
    return build(keyText, compile, useDisk);
  } catch (const std::exception& error) {
    return runtimeError("kernel compile for key '" + keyText + "' threw: " + error.what());
  } catch (...) {
    return runtimeError("kernel compile for key '" + keyText + "' threw a non-standard exception");
  }
}

KernelCache::Result KernelCache::getOrCompile(const std::string& keyText, const CompileFunction& compile) {
  auto context = loader_->currentContext();
  if (!context) return context.status();
  if (bypassLookups_) return buildGuarded(keyText, compile, /*useDisk=*/false);

  const std::pair<ContextHandle, std::string> slot{*context, keyText};
  std::promise<Result> promise;
  std::shared_future<Result> pending;
  std::uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = kernels_.find(slot);
    if (it != kernels_.end()) {
      ++stats_.memoryHits;
      pending = it->second.result;
    } else {
      ticket = ++nextTicket_;
      kernels_.emplace(slot, Slot{promise.get_future().share(), ticket});
    }
  }
  // Another request owns this key: wait (outside the lock) for its result.
  if (ticket == 0) return pending.get();

  Result result = buildGuarded(keyText, compile, /*useDisk=*/true);
  if (!result) {
    // Forget the failure before publishing it, so the next request compiles again (unless
    // clearMemory already dropped this slot and a newer request took the key).
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = kernels_.find(slot);
    if (it != kernels_.end() && it->second.ticket == ticket) kernels_.erase(it);
  }
  promise.set_value(result);
  return result;
}

}  // namespace attnjit::runtime
