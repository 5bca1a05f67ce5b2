#include "compiler/CompileDriver.h"

#include <chrono>

#include "codegen/Codegen.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

namespace attnjit::compiler {

ir::Expected<CompiledKernel> compileKernel(ir::Kernel& kernel, const CompileOptions& options) {
  auto target = codegen::lookupTarget(options.target);
  if (!target) return target.status();
  auto ptxVersion = codegen::choosePtxVersion(*target, options.driverMaxPtx);
  if (!ptxVersion) return ptxVersion.status();
  if (ir::Status s = ir::verifyKernel(kernel); !s) return s;

  CompiledKernel out;
  out.name = kernel.name();
  out.target = target->name;
  out.ptxVersion = *ptxVersion;
  out.tir = ir::printKernel(kernel);

  PipelineOptions pipeline = options.pipeline;
  pipeline.pass.numWarps = kernel.numWarps();
  pipeline.pass.hasMmaSync = target->hasMmaSync;
  auto start = std::chrono::steady_clock::now();
  if (ir::Status s = runPipeline(kernel, pipeline, &out.passTimings); !s) return s;
  out.passesMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  out.tirOptimized = ir::printKernel(kernel);
  if (options.stopAfter == "tir-opt") return out;

  codegen::CodegenOptions cg;
  cg.target = *target;
  cg.ptxVersion = *ptxVersion;
  cg.optimize = options.optimizeLlvm;
  auto generated = codegen::generatePtx(kernel, cg);
  if (!generated) return generated.status();
  out.llvmIr = std::move(generated->llvmIr);
  out.llvmIrOptimized = std::move(generated->llvmIrOptimized);
  out.ptx = std::move(generated->ptx);
  out.numThreads = generated->numThreads;
  out.sharedMemoryBytes = generated->sharedMemoryBytes;
  out.lowerMs = generated->lowerMs;
  out.llvmOptimizeMs = generated->optimizeMs;
  out.ptxEmitMs = generated->emitMs;
  return out;
}

}  // namespace attnjit::compiler
