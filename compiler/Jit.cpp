#include "compiler/Jit.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "codegen/Codegen.h"

namespace attnjit::compiler {

namespace {
double millisecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}
}  // namespace

std::string jitCacheKey(const CompiledKernel& k, const CompileOptions& options) {
  std::string key = "attnjit " ATTNJIT_VERSION_STRING "\n";
  key += "llvm " + codegen::llvmVersion() + "\n";
  key += "codegen revision " + std::to_string(codegen::kCodegenRevision) + "\n";
  key += "target " + k.target + " ptx " + std::to_string(k.ptxVersion) + "\n";
  // A bad ATTNJIT_LLVM_PIPELINE fails the compile itself (compileKernel), so a
  // key made with it never reaches the cache.
  auto pipeline = resolveLlvmPipeline(options);
  if (!options.optimizeLlvm)
    key += "llvm-o3 off\n";
  else if (!pipeline || *pipeline == codegen::LlvmPipeline::O3)
    key += "llvm-o3 on\n";
  else
    key += "llvm-pipeline fast\n";
  for (const auto& stage : k.overridden) key += "override " + stage + "\n";
  key += k.tirOptimized;
  return key;
}

ir::Expected<JitKernel> jitKernel(const KernelFactory& build, const CompileOptions& options,
                                  runtime::KernelCache& cache) {
  auto kernel = build();
  if (!kernel) return kernel.status();
  CompileOptions passesOnly = options;
  passesOnly.stopAfter = "tir-opt";
  auto start = std::chrono::steady_clock::now();
  auto afterPasses = compileKernel(**kernel, passesOnly);
  if (!afterPasses) return afterPasses.status();
  JitKernel out;
  out.name = afterPasses->name;
  out.passesMs = millisecondsSince(start);

  std::string key = jitCacheKey(*afterPasses, options);
  // A hand-edited PTX changes the bytes without changing the IR: it joins the key.
  const char* overrideEnv = std::getenv("ATTNJIT_OVERRIDE_DIR");
  std::string overrideDir = !options.overrideDir.empty() ? options.overrideDir : (overrideEnv ? overrideEnv : "");
  if (!overrideDir.empty()) {
    std::ifstream ptx(std::filesystem::path(overrideDir) / (out.name + ".ptx"), std::ios::binary);
    if (ptx) key += "\noverride ptx\n" + std::string(std::istreambuf_iterator<char>(ptx), {});
  }
  auto lookupStart = std::chrono::steady_clock::now();
  auto loaded = cache.getOrCompile(key, [&]() -> ir::Expected<runtime::CompiledKernel> {
    CompileOptions toPtx = options;
    toPtx.keepLlvmIr = false;  // the cache keeps the PTX only (a dump folder still gets the IR)
    // Codegen continues from the kernel the key was made of, passes done; only a
    // kernel an override .tir replaced is built and compiled again from the start.
    const bool tirOverridden = afterPasses->wasOverridden("tir");
    ir::Kernel* work = kernel->get();
    ir::Expected<std::unique_ptr<ir::Kernel>> rebuilt = std::unique_ptr<ir::Kernel>();
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
    out.compiled = std::move(*compiled);
    return result;
  });
  if (!loaded) return loaded.status();
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
    return ir::Diagnostic{{}, "kernel cache entry for '" + out.name + "' lacks its launch metadata"};
  return out;
}

}  // namespace attnjit::compiler
