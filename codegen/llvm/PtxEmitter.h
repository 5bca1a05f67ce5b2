// LLVM module → optimized LLVM module → PTX text, with LLVM 22's NVPTX backend
// in-process. Internal to codegen/ (LLVM-typed).
#pragma once

#include <memory>
#include <string>

#include "codegen/Codegen.h"
#include "codegen/Target.h"

namespace llvm {
class Module;
class TargetMachine;
class LLVMContext;
}  // namespace llvm

namespace attnjit::codegen {

// A TargetMachine for nvptx64-nvidia-cuda, CPU = target.name, features = +ptxNN,
// aggressive optimization, FMA contraction allowed (what CUDA does by default).
support::Expected<std::unique_ptr<llvm::TargetMachine>> createNvptxTargetMachine(const TargetInfo& target,
                                                                            int ptxVersion);

// Sets the module's triple and data layout for `tm`.
void prepareModule(llvm::Module& module, llvm::TargetMachine& tm);

// Runs `pipeline` with the new pass manager. O3: LLVM's default pipeline
// (NVVMReflect and NVVMIntrRange come from the TargetMachine's callbacks; they are
// not added again). Fast: kFastPipeline in PtxEmitter.cpp. A failure is a compiler
// bug report.
support::Status optimizeModule(llvm::Module& module, llvm::TargetMachine& tm, LlvmPipeline pipeline);

// Emits PTX (legacy pass manager: the MC layer still needs it). The module must
// have been prepared for `tm`. Fast leaves out the backend's straight-line
// strength reduction and n-ary reassociation (see LlvmPipeline).
support::Expected<std::string> emitPtx(llvm::Module& module, llvm::TargetMachine& tm, LlvmPipeline pipeline);

// Textual LLVM IR, and a verifier run whose failure is a compiler bug report.
std::string printModule(const llvm::Module& module);
support::Status verifyLlvmModule(const llvm::Module& module);

}  // namespace attnjit::codegen
