// The compile driver: tile IR → passes → LLVM IR → PTX, with every stage kept
// for inspection (--emit, ATTNJIT_DUMP_DIR) and timed.
#pragma once

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "codegen/Codegen.h"
#include "compiler/passes/Pipeline.h"
#include "ir/IR.h"

namespace attnjit::compiler {

struct CompiledKernel;

struct CompileOptions {
  std::string target = "sm_90a";
  int driverMaxPtx = 0;  // the CUDA driver's PTX ISA limit (0: unknown, no clamp)
  PipelineOptions pipeline;
  bool optimizeLlvm = true;
  // Which LLVM pipeline optimizes (when optimizeLlvm): the fast one tailored to
  // lowered tiles, or O3 (codegen::LlvmPipeline documents the trade-off).
  // Unset: the environment's ATTNJIT_LLVM_PIPELINE (fast or o3), else fast.
  std::optional<codegen::LlvmPipeline> llvmPipeline;
  // Stop after this stage: "tir-opt", "llvm", "ptx" (default: all the way to PTX).
  std::string stopAfter = "ptx";
  // Keep the LLVM IR text of the compile (CompiledKernel::llvmIr, llvmIrOptimized);
  // always kept when a dump folder is set. The JIT and `aot` need only the PTX.
  bool keepLlvmIr = true;
  // Every stage of every compile is written here as <kernel>.tir, .opt.tir, .ll,
  // .opt.ll, .ptx and .json (empty: the ATTNJIT_DUMP_DIR environment variable).
  std::string dumpDir;
  // Hand-edited stages replace generated ones: <kernel>.tir replaces the built
  // kernel before the passes, <kernel>.ptx the generated PTX (empty: the
  // ATTNJIT_OVERRIDE_DIR environment variable).
  std::string overrideDir;
  // The kernel has been through the pass pipeline already, in this compile's
  // earlier stop at "tir-opt" (the JIT's cache key): codegen starts from the
  // kernel as it is and the result takes these stages' text and timings. Not
  // for a kernel an override .tir replaced (that stop compiled the override,
  // not the kernel).
  const CompiledKernel* passesDone = nullptr;
};

struct CompiledKernel {
  std::string name;
  std::string target;
  int ptxVersion = 0;
  std::string tir;           // as built / parsed
  std::string tirOptimized;  // after the pass pipeline
  std::string llvmIr, llvmIrOptimized, ptx;
  int numThreads = 0;
  int sharedMemoryBytes = 0;
  // The tensor maps the kernel takes after its parameters (codegen::CodegenResult::tensorMaps).
  std::string tensorMaps;
  codegen::SharedMemoryUse sharedMemoryUse;  // where those bytes go
  codegen::WarpSchedule warpSchedule;        // warp roles, their registers, copy slots
  std::vector<PassTiming> passTimings;
  std::vector<codegen::StageTiming> codegenTimings;  // codegen's stages, in the order they ran
  // Stages taken from the override folder ("tir", "ptx"), for logs and cache keys.
  std::vector<std::string> overridden;
  // Whether the override folder replaced `stage` ("tir", "ptx", ...).
  bool wasOverridden(const std::string& stage) const {
    return std::find(overridden.begin(), overridden.end(), stage) != overridden.end();
  }
  double passesMs = 0, lowerMs = 0, llvmOptimizeMs = 0, ptxEmitMs = 0;
};

// Everything the compiler does to a kernel, in order: the tile-IR passes
// (compiler/passes/Pipeline.cpp), then codegen's stages (codegen/lower/Lowering.cpp).
// --print-after takes any of these names, --time-passes times each.
struct PipelineStep {
  std::string name;
  std::string description;
  bool codegen = false;  // a codegen stage (prints LLVM IR or a plan), else a tile-IR pass
};
std::vector<PipelineStep> compilePipeline();

// Compiles `kernel` (which the passes rewrite in place).
// The LLVM pipeline `options` ask for (see CompileOptions::llvmPipeline); an error
// names a bad ATTNJIT_LLVM_PIPELINE.
support::Expected<codegen::LlvmPipeline> resolveLlvmPipeline(const CompileOptions& options);

support::Expected<CompiledKernel> compileKernel(ir::Kernel& kernel, const CompileOptions& options);

// The override folder `options` ask for: CompileOptions::overrideDir, else
// ATTNJIT_OVERRIDE_DIR; empty when neither is set.
std::string overrideDirectory(const CompileOptions& options);
// The text of `dir/file` when that file exists (a hand-edited stage); nullopt otherwise.
std::optional<std::string> readOverride(const std::string& dir, const std::string& file);

}  // namespace attnjit::compiler
