#include "codegen/llvm/PtxEmitter.h"

#include "codegen/Codegen.h"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/PassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Triple.h>

#include <mutex>

namespace attnjit::codegen {

namespace {
void initializeNvptxOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
  });
}
}  // namespace

ir::Expected<std::unique_ptr<llvm::TargetMachine>> createNvptxTargetMachine(const TargetInfo& target,
                                                                            int ptxVersion) {
  initializeNvptxOnce();
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string error;
  const llvm::Target* llvmTarget = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!llvmTarget) return ir::Diagnostic{{}, "LLVM has no NVPTX target: " + error};
  llvm::TargetOptions options;
  options.AllowFPOpFusion = llvm::FPOpFusion::Fast;
  std::unique_ptr<llvm::TargetMachine> tm(llvmTarget->createTargetMachine(
      triple, target.name, ptxFeature(ptxVersion), options, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Aggressive));
  if (!tm) return ir::Diagnostic{{}, "LLVM could not create a TargetMachine for " + target.name};
  return tm;
}

void prepareModule(llvm::Module& module, llvm::TargetMachine& tm) {
  module.setTargetTriple(tm.getTargetTriple());
  module.setDataLayout(tm.createDataLayout());
}

void optimizeModule(llvm::Module& module, llvm::TargetMachine& tm) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  mpm.run(module, mam);
}

ir::Expected<std::string> emitPtx(llvm::Module& module, llvm::TargetMachine& tm) {
  llvm::SmallString<0> buffer;
  llvm::raw_svector_ostream stream(buffer);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, stream, nullptr, llvm::CodeGenFileType::AssemblyFile))
    return ir::Diagnostic{{}, "the NVPTX backend cannot emit assembly for this module"};
  pm.run(module);
  return std::string(buffer.str());
}

std::string llvmVersion() { return LLVM_VERSION_STRING; }

std::string printModule(const llvm::Module& module) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  module.print(stream, nullptr);
  return text;
}

ir::Status verifyLlvmModule(const llvm::Module& module) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  if (llvm::verifyModule(module, &stream))
    return ir::Status::error({}, "internal: generated LLVM IR is invalid: " + text);
  return ir::Status::ok();
}

}  // namespace attnjit::codegen
