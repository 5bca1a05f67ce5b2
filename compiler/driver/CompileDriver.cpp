#include "compiler/driver/CompileDriver.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "codegen/Codegen.h"
#include "ir/KernelAttributes.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

namespace attnjit::compiler {

namespace {

std::string settingOrEnvironment(const std::string& setting, const char* variable) {
  if (!setting.empty()) return setting;
  const char* value = std::getenv(variable);
  return value ? value : "";
}

// Writes every stage of a compile to the dump folder. A folder that cannot be
// written costs a warning, never the compile.
void dumpStages(const std::string& dir, const CompiledKernel& k) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  auto write = [&](const std::string& suffix, const std::string& text) {
    if (text.empty()) return;
    std::ofstream out(std::filesystem::path(dir) / (k.name + suffix), std::ios::binary);
    out << text;
    if (!out)
      std::fprintf(stderr, "attnjit: warning: cannot write %s/%s%s\n", dir.c_str(), k.name.c_str(), suffix.c_str());
  };
  write(".tir", k.tir);
  write(".opt.tir", k.tirOptimized);
  write(".ll", k.llvmIr);
  write(".opt.ll", k.llvmIrOptimized);
  write(".ptx", k.ptx);
  std::ostringstream json;
  json << "{\"kernel\": \"" << k.name << "\", \"target\": \"" << k.target << "\", \"ptx_version\": " << k.ptxVersion
       << ", \"threads\": " << k.numThreads << ", \"shared_bytes\": " << k.sharedMemoryBytes
       << ", \"passes_ms\": " << k.passesMs << ", \"lower_ms\": " << k.lowerMs
       << ", \"llvm_o3_ms\": " << k.llvmOptimizeMs << ", \"ptx_emit_ms\": " << k.ptxEmitMs << ", \"overridden\": [";
  for (size_t i = 0; i < k.overridden.size(); ++i) json << (i ? ", " : "") << "\"" << k.overridden[i] << "\"";
  json << "]}\n";
  write(".json", json.str());
}

support::Expected<CompiledKernel> compileStages(ir::Kernel& kernel, const CompileOptions& options,
                                          const std::string& overrideDir);

}  // namespace

support::Expected<codegen::LlvmPipeline> resolveLlvmPipeline(const CompileOptions& options) {
  if (options.llvmPipeline) return *options.llvmPipeline;
  const std::string requested = settingOrEnvironment("", "ATTNJIT_LLVM_PIPELINE");
  if (requested.empty() || requested == "fast") return codegen::LlvmPipeline::Fast;
  if (requested == "o3") return codegen::LlvmPipeline::O3;
  return support::Diagnostic{support::Location{"ATTNJIT_LLVM_PIPELINE", 0, 0},
                        "unknown LLVM pipeline '" + requested + "': expected fast (the default) or o3"};
}

std::vector<PipelineStep> compilePipeline() {
  std::vector<PipelineStep> steps;
  for (const PipelinePass& pass : pipelinePasses()) steps.push_back({pass.name, pass.description, false});
  for (const codegen::CodegenStage& stage : codegen::codegenStages())
    steps.push_back({stage.name, stage.description, true});
  return steps;
}

std::string overrideDirectory(const CompileOptions& options) {
  return settingOrEnvironment(options.overrideDir, "ATTNJIT_OVERRIDE_DIR");
}

std::optional<std::string> readOverride(const std::string& dir, const std::string& file) {
  if (dir.empty()) return std::nullopt;
  std::ifstream in(std::filesystem::path(dir) / file, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

support::Expected<CompiledKernel> compileKernel(ir::Kernel& kernel, const CompileOptions& options) {
  const std::string dumpDir = settingOrEnvironment(options.dumpDir, "ATTNJIT_DUMP_DIR");
  const std::string overrideDir = overrideDirectory(options);
  // A hand-edited tile IR replaces the built kernel (it must define the same name).
  std::unique_ptr<ir::Module> replacement;
  ir::Kernel* work = &kernel;
  if (options.passesDone) {
    if (options.passesDone->wasOverridden("tir"))
      return support::Diagnostic{{}, "internal: '" + kernel.name() + "' resumed after passes that ran on an override"};
  } else if (auto text = readOverride(overrideDir, kernel.name() + ".tir")) {
    std::string path = (std::filesystem::path(overrideDir) / (kernel.name() + ".tir")).string();
    auto parsed = ir::parseModule(*text, path);
    if (!parsed) return parsed.status();
    replacement = std::move(*parsed);
    work = replacement->findKernel(kernel.name());
    if (!work)
      return support::Diagnostic{{path, 1, 1}, "override file does not define kernel '" + kernel.name() + "'"};
  }
  auto compiled = compileStages(*work, options, overrideDir);
  if (!compiled) return compiled;
  if (replacement) compiled->overridden.insert(compiled->overridden.begin(), "tir");
  if (!dumpDir.empty()) dumpStages(dumpDir, *compiled);
  return compiled;
}

namespace {

bool containsTensorLoads(const ir::Kernel& kernel) {
  bool found = false;
  ir::walk(kernel.body(), [&](const ir::Operation& op) { found = found || op.opcode() == ir::Opcode::LoadTensor; });
  return found;
}

support::Expected<CompiledKernel> compileStages(ir::Kernel& kernel, const CompileOptions& options,
                                          const std::string& overrideDir) {
  auto target = codegen::lookupTarget(options.target);
  if (!target) return target.status();
  auto ptxVersion = codegen::choosePtxVersion(*target, options.driverMaxPtx);
  if (!ptxVersion) return ptxVersion.status();
  CompiledKernel out;
  out.name = kernel.name();
  out.target = target->name;
  out.ptxVersion = *ptxVersion;
  if (const CompiledKernel* done = options.passesDone) {
    out.tir = done->tir;
    out.tirOptimized = done->tirOptimized;
    out.passTimings = done->passTimings;
    out.passesMs = done->passesMs;
    out.overridden = done->overridden;
  } else {
    if (support::Status s = ir::verifyKernel(kernel); !s) return s;
    out.tir = ir::printKernel(kernel);
    PipelineOptions pipeline = options.pipeline;
    pipeline.pass.numWarps = static_cast<int>(ir::kernelAttribute(kernel, ir::KernelAttribute::NumWarps));
    pipeline.pass.hasMmaSync = target->hasMmaSync;
    pipeline.pass.hasWgmma = target->hasWgmma;
    auto start = std::chrono::steady_clock::now();
    if (support::Status s = runPipeline(kernel, pipeline, &out.passTimings); !s) return s;
    out.passesMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    out.tirOptimized = ir::printKernel(kernel);
  }
  if (options.stopAfter == "tir-opt") return out;

  codegen::CodegenOptions cg;
  cg.target = *target;
  cg.ptxVersion = *ptxVersion;
  cg.optimize = options.optimizeLlvm;
  cg.printLlvmIr = options.keepLlvmIr || !settingOrEnvironment(options.dumpDir, "ATTNJIT_DUMP_DIR").empty();
  cg.printAfterAll = options.pipeline.printAfterAll;
  cg.printAfter = options.pipeline.printAfter;
  cg.dump = options.pipeline.dump;
  auto llvmPipeline = resolveLlvmPipeline(options);
  if (!llvmPipeline) return llvmPipeline.status();
  cg.llvmPipeline = *llvmPipeline;
  auto generated = codegen::generatePtx(kernel, cg);
  std::unique_ptr<ir::Module> expanded;
  if (!generated && containsTensorLoads(kernel)) {
    // The passes kept load_tensor tiles for TMA copies that code generation
    // could not make after all (e.g. no producer warps): the same kernel with
    // the masked loads they stand for. Deterministic, like every decision
    // codegen takes from the optimized IR the cache key holds.
    auto reparsed = ir::parseModule(out.tir, kernel.name() + ".tir");
    if (!reparsed) return reparsed.status();
    expanded = std::move(*reparsed);
    ir::Kernel* again = expanded->findKernel(kernel.name());
    if (!again) return support::Diagnostic{{}, "internal: '" + kernel.name() + "' lost in its own tile IR text"};
    PipelineOptions pipeline = options.pipeline;
    pipeline.pass.numWarps = static_cast<int>(ir::kernelAttribute(*again, ir::KernelAttribute::NumWarps));
    pipeline.pass.hasMmaSync = target->hasMmaSync;
    pipeline.pass.hasWgmma = target->hasWgmma;
    pipeline.pass.allowTensorMemoryAccelerator = false;
    pipeline.dump = nullptr;
    if (support::Status s = runPipeline(*again, pipeline, nullptr); !s) return s;
    generated = codegen::generatePtx(*again, cg);
  }
  if (!generated) return generated.status();
  out.tensorMaps = generated->tensorMaps;
  out.llvmIr = std::move(generated->llvmIr);
  out.llvmIrOptimized = std::move(generated->llvmIrOptimized);
  out.ptx = std::move(generated->ptx);
  if (auto ptx = readOverride(overrideDir, out.name + ".ptx")) {
    out.ptx = std::move(*ptx);
    out.overridden.push_back("ptx");
  }
  out.numThreads = generated->numThreads;
  out.sharedMemoryBytes = generated->sharedMemoryBytes;
  out.sharedMemoryUse = generated->sharedMemoryUse;
  out.warpSchedule = generated->warpSchedule;
  out.lowerMs = generated->lowerMs;
  out.llvmOptimizeMs = generated->optimizeMs;
  out.ptxEmitMs = generated->emitMs;
  out.codegenTimings = std::move(generated->stageTimings);
  return out;
}

}  // namespace

}  // namespace attnjit::compiler
