#include "compiler/driver/Jit.h"

#include <chrono>
#include <optional>

#include <dlfcn.h>
#include <sys/stat.h>

#include "codegen/Codegen.h"
#include "codegen/Target.h"
#include "ir/Printer.h"

namespace attnjit::compiler {

namespace {

double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The lines every key starts with: versions, target, PTX version, LLVM pipeline.
std::string keyHeader(const std::string& target, int ptxVersion, const CompileOptions& options) {
  std::string key = "attnjit " ATTNJIT_VERSION_STRING "\n";
  key += "llvm " + codegen::llvmVersion() + "\n";
  key += "codegen revision " + std::to_string(codegen::kCodegenRevision) + "\n";
  key += "target " + target + " ptx " + std::to_string(ptxVersion) + "\n";
  // A bad ATTNJIT_LLVM_PIPELINE fails the compile itself (compileKernel), so a
  // key made with it never reaches the cache.
  auto pipeline = resolveLlvmPipeline(options);
  if (!options.optimizeLlvm)
    key += "llvm-o3 off\n";
  else if (!pipeline || *pipeline == codegen::LlvmPipeline::O3)
    key += "llvm-o3 on\n";
  else
    key += "llvm-pipeline fast\n";
  return key;
}

}  // namespace

const char* attnjitVersion() { return ATTNJIT_VERSION_STRING; }

const std::string& jitBuildIdentity() {
  static const std::string identity = [] {
    std::string path;
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&jitBuildIdentity), &info) != 0 && info.dli_fname != nullptr)
      path = info.dli_fname;
    struct stat file {};
    if (path.empty() || ::stat(path.c_str(), &file) != 0) {
      path = "/proc/self/exe";
      if (::stat(path.c_str(), &file) != 0) return std::string();
    }
    return "binary " + path + " bytes " + std::to_string(file.st_size) + " modified " +
           std::to_string(file.st_mtim.tv_sec) + "." + std::to_string(file.st_mtim.tv_nsec) + " inode " +
           std::to_string(file.st_ino);
  }();
  return identity;
}

std::string jitCacheKey(const CompiledKernel& k, const CompileOptions& options) {
  std::string key = keyHeader(k.target, k.ptxVersion, options);
  for (const auto& stage : k.overridden) key += "override " + stage + "\n";
  key += k.tirOptimized;
  return key;
}

std::string jitAliasKey(const ir::Kernel& beforePasses, const CompileOptions& options) {
  if (jitBuildIdentity().empty() || !overrideDirectory(options).empty()) return {};
  auto target = codegen::lookupTarget(options.target);
  if (!target) return {};
  auto ptxVersion = codegen::choosePtxVersion(*target, options.driverMaxPtx);
  if (!ptxVersion) return {};
  return keyHeader(target->name, *ptxVersion, options) + jitBuildIdentity() + "\nbefore passes\n" +
         ir::printKernel(beforePasses);
}

support::Expected<JitKernel> jitKernel(const KernelFactory& build, const CompileOptions& options,
                                  runtime::KernelCache& cache) {
  auto buildStart = std::chrono::steady_clock::now();
  auto kernel = build();
  if (!kernel) return kernel.status();
  JitKernel out;
  out.buildMs = millisecondsSince(buildStart);
  out.name = (*kernel)->name();
  auto start = std::chrono::steady_clock::now();
  const std::string aliasKey = jitAliasKey(**kernel, options);
  std::optional<std::string> aliased = aliasKey.empty() ? std::nullopt : cache.resolveAlias(aliasKey);

  // The passes and the full key; on the alias path only when the alias's kernel is gone.
  std::optional<CompiledKernel> afterPasses;
  std::string fullKey;
  auto runPasses = [&]() -> support::Status {
    CompileOptions passesOnly = options;
    passesOnly.stopAfter = "tir-opt";
    auto passed = compileKernel(**kernel, passesOnly);
    if (!passed) return passed.status();
    afterPasses = std::move(*passed);
    out.name = afterPasses->name;
    fullKey = jitCacheKey(*afterPasses, options);
    // A hand-edited PTX changes the bytes without changing the IR: it joins the key.
    if (auto ptx = readOverride(overrideDirectory(options), out.name + ".ptx"))
      fullKey += "\noverride ptx\n" + *ptx;
    return support::Status::ok();
  };
  if (aliased) {
    out.passesSkipped = true;
  } else if (support::Status s = runPasses(); !s) {
    return s;
  }
  out.passesMs = millisecondsSince(start);

  bool staleAlias = false;
  auto compile = [&](const std::string& key) -> support::Expected<runtime::CompiledKernel> {
    if (!afterPasses) {
      if (support::Status s = runPasses(); !s) return s;
      out.passesSkipped = false;
      if (fullKey != key) {
        staleAlias = true;
        return support::Diagnostic{{}, "the cache's alias for '" + out.name + "' names another kernel key"};
      }
    }
    CompileOptions toPtx = options;
    toPtx.keepLlvmIr = false;  // the cache keeps the PTX only (a dump folder still gets the IR)
    // Codegen continues from the kernel the key was made of, passes done; only a
    // kernel an override .tir replaced is built and compiled again from the start.
    const bool tirOverridden = afterPasses->wasOverridden("tir");
    ir::Kernel* work = kernel->get();
    support::Expected<std::unique_ptr<ir::Kernel>> rebuilt = std::unique_ptr<ir::Kernel>();
    if (tirOverridden) {
      rebuilt = build();
      if (!rebuilt) return rebuilt.status();
      work = rebuilt->get();
    } else {
      toPtx.passesDone = &*afterPasses;
    }
    auto compiled = compileKernel(*work, toPtx);
    if (!compiled) return compiled.status();
    out.compiledNow = true;
    runtime::CompiledKernel result;
    result.entryName = compiled->name;
    result.ptx = compiled->ptx;
    result.metadata["threads"] = std::to_string(compiled->numThreads);
    result.metadata["shared_bytes"] = std::to_string(compiled->sharedMemoryBytes);
    result.metadata["target"] = compiled->target;
    if (!compiled->tensorMaps.empty()) result.metadata[runtime::KernelCache::kTensorMapsKey] = compiled->tensorMaps;
    out.compiled = std::move(*compiled);
    return result;
  };
  auto lookupStart = std::chrono::steady_clock::now();
  const std::string& key = aliased ? *aliased : fullKey;
  auto loaded = cache.getOrCompile(key, [&] { return compile(key); });
  if (!loaded && aliased) {
    // A stale alias, or a failure this request only waited for (another request
    // holding the same alias met the stale key): the passes and the full key decide.
    if (!afterPasses) {
      if (support::Status s = runPasses(); !s) return s;
      out.passesSkipped = false;
    }
    staleAlias = true;
    loaded = cache.getOrCompile(fullKey, [&] { return compile(fullKey); });
  }
  if (!loaded) return loaded.status();
  if (!aliasKey.empty() && (!aliased || staleAlias)) cache.recordAlias(aliasKey, fullKey);
  out.lookupMs = millisecondsSince(lookupStart);
  out.loaded = *loaded;
  out.fromDisk = (*loaded)->origin == runtime::LoadedKernel::Origin::DiskCache;
  auto number = [&](const char* field) {
    auto it = (*loaded)->metadata.find(field);
    return it == (*loaded)->metadata.end() ? -1 : std::atoi(it->second.c_str());
  };
  out.numThreads = number("threads");
  out.sharedMemoryBytes = number("shared_bytes");
  if (out.numThreads <= 0 || out.sharedMemoryBytes < 0)
    return support::Diagnostic{{}, "kernel cache entry for '" + out.name + "' lacks its launch metadata"};
  return out;
}

}  // namespace attnjit::compiler
