#include "codegen/llvm/PtxEmitter.h"

#include "codegen/Codegen.h"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Config/llvm-config.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/OptBisect.h>
#include <llvm/IR/PassManager.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/CommandLine.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/TargetParser/Triple.h>

#include <algorithm>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <vector>

namespace attnjit::codegen {

namespace {
void initializeNvptxOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    // 32-bit pointers for shared memory (the target machine's data layout reads
    // this option; it has no API): shared addresses fit 32 bits, and 64-bit ones
    // double the registers that addresses of shared tiles hold across the KV loop.
    // The option belongs to the LLVM linked into attnjit alone.
    auto& options = llvm::cl::getRegisteredOptions();
    auto shortPointers = options.find("nvptx-short-ptr");
    if (shortPointers != options.end()) static_cast<llvm::cl::opt<bool>*>(shortPointers->second)->setValue(true);
  });
}
}  // namespace

support::Expected<std::unique_ptr<llvm::TargetMachine>> createNvptxTargetMachine(const TargetInfo& target,
                                                                            int ptxVersion) {
  initializeNvptxOnce();
  llvm::Triple triple("nvptx64-nvidia-cuda");
  std::string error;
  const llvm::Target* llvmTarget = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!llvmTarget) return support::Diagnostic{{}, "LLVM has no NVPTX target: " + error};
  llvm::TargetOptions options;
  options.AllowFPOpFusion = llvm::FPOpFusion::Fast;
  // The backend at its default level, not Aggressive. At Aggressive NVPTX's IR
  // passes run GVN where the default runs EarlyCSE; GVN's memory-dependence
  // queries grow quadratically with the loads and stores of one block (most of
  // the f32 FMA kernel's emission time, a large share of the others'). On every
  // shipped spec (LLVM 22) the attention and MLA kernels' PTX is byte-identical,
  // and the companion kernels' unrolled loops come out with the same or a few
  // fewer instructions (measured: docs/perf-log.md, 2026-11-30). The middle
  // end's pipeline does not depend on this level.
  std::unique_ptr<llvm::TargetMachine> tm(llvmTarget->createTargetMachine(
      triple, target.name, ptxFeature(ptxVersion), options, llvm::Reloc::PIC_, std::nullopt,
      llvm::CodeGenOptLevel::Default));
  if (!tm) return support::Diagnostic{{}, "LLVM could not create a TargetMachine for " + target.name};
  return tm;
}

void prepareModule(llvm::Module& module, llvm::TargetMachine& tm) {
  module.setTargetTriple(tm.getTargetTriple());
  module.setDataLayout(tm.createDataLayout());
}

namespace {

// LlvmPipeline::Fast, in the new pass manager's text form. On the shipped kernels
// (LLVM 22, -time-passes) O3 spends much of its time in its eight
// InstCombine runs and most of the rest in passes with nothing to do on lowered
// tiles (inliner and IPO, loop and SLP vectorizers, unrolling, loop rotation and
// unswitching: no calls, allocas or unrollable loops). What the PTX needs from the
// middle end: lane-id arithmetic folded (InstCombine, twice: GVN exposes more),
// repeated address and coordinate computations shared (EarlyCSE, GVN), per-block
// address terms hoisted out of the KV loop (LICM: without it ptxas needs up to 9
// more registers on MLA decode), the ranges of the special registers
// (nvvm-intr-range: they let InstCombine drop masks), and alignment proven on
// shared-memory accesses (infer-alignment) so that the backend's load/store
// vectorizer still forms ld.shared.v4. Value ranges (correlated-propagation)
// and induction-variable simplification in rotated loops (loop-rotate, indvars)
// narrow the 64-bit index arithmetic of the paged-cache addresses, which without
// them comes out with more 64-bit multiplies and shifts than O3's. GVN runs
// without memory dependence analysis: EarlyCSE already removed every redundant
// load, so the PTX of every shipped kernel is byte-identical without it
// (LLVM 22), and its queries grow quadratically with the loads and stores of one
// block (most of this pipeline's time on the f32 kernel). Measured:
// docs/perf-log.md, 2026-11-30.
constexpr const char* kFastPipeline =
    "nvvm-reflect,function(nvvm-intr-range,early-cse,instcombine<no-verify-fixpoint>,simplifycfg,"
    "correlated-propagation,loop(loop-rotate),loop-mssa(licm),loop(indvars),gvn<no-memdep>,"
    "instcombine<no-verify-fixpoint>,infer-alignment,dce)";

// Skips the passes named (by their pass argument) in the legacy codegen pipeline
// of one LLVMContext: the supported way to leave a pass out of a TargetMachine's
// fixed pipeline (OptPassGate, which -opt-bisect-limit also uses). A pass named
// in `cleanups` is skipped when it comes right after a skipped pass: it is that
// pass's clean-up (NVPTX runs an EarlyCSE after SLSR and after
// NaryReassociate), with nothing to clean when the pass did not run.
class SkipPassesGate final : public llvm::OptPassGate {
 public:
  SkipPassesGate(std::initializer_list<llvm::StringRef> skipped, std::initializer_list<llvm::StringRef> cleanups)
      : skipped_(skipped), cleanups_(cleanups) {}
  bool shouldRunPass(llvm::StringRef passName, llvm::StringRef) const override {
    const bool skip = contains(skipped_, passName) || (previousSkipped_ && contains(cleanups_, passName));
    previousSkipped_ = skip;
    return !skip;
  }
  bool isEnabled() const override { return true; }

 private:
  static bool contains(const std::vector<llvm::StringRef>& names, llvm::StringRef name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  }
  std::vector<llvm::StringRef> skipped_;
  std::vector<llvm::StringRef> cleanups_;
  // The gate belongs to one compile's LLVMContext: no other thread asks it.
  mutable bool previousSkipped_ = false;
};

// Installs `gate` on `context` for its lifetime, then restores the previous one.
class ScopedPassGate {
 public:
  ScopedPassGate(llvm::LLVMContext& context, llvm::OptPassGate& gate)
      : context_(context), previous_(context.getOptPassGate()) {
    context_.setOptPassGate(gate);
  }
  ~ScopedPassGate() { context_.setOptPassGate(previous_); }
  ScopedPassGate(const ScopedPassGate&) = delete;
  ScopedPassGate& operator=(const ScopedPassGate&) = delete;

 private:
  llvm::LLVMContext& context_;
  llvm::OptPassGate& previous_;
};

}  // namespace

support::Status optimizeModule(llvm::Module& module, llvm::TargetMachine& tm, LlvmPipeline pipeline) {
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
  llvm::ModulePassManager mpm;
  if (pipeline == LlvmPipeline::O3) {
    mpm = pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3);
  } else if (llvm::Error error = pb.parsePassPipeline(mpm, kFastPipeline)) {
    return support::Status::error({}, "internal: LLVM rejects the fast pipeline '" + std::string(kFastPipeline) +
                                     "': " + llvm::toString(std::move(error)));
  }
  mpm.run(module, mam);
  return support::Status::ok();
}

support::Expected<std::string> emitPtx(llvm::Module& module, llvm::TargetMachine& tm, LlvmPipeline pipeline) {
  // "slsr": StraightLineStrengthReduce asks ScalarEvolution whether it may reuse
  // each candidate, which scans the rest of the block: quadratic in our blocks of
  // thousands of unrolled instructions (a large share of emission on the
  // attention kernels). "nary-reassociate" only regroups what SLSR leaves:
  // without SLSR the PTX of every shipped kernel is byte-identical with or
  // without it (LLVM 22). The EarlyCSE that follows each of them then finds
  // nothing of theirs to clean: skipping those two keeps the PTX of every
  // kernel of specs/ and bench/ byte-identical and saves compile time (the
  // EarlyCSE after the backend's LoopStrengthReduce still runs; measured:
  // docs/perf-log.md, 2026-11-30). The names are LLVM's pass arguments; a
  // renamed pass would run again, costing time, never correctness.
  SkipPassesGate skipStraightLineScalarPasses({"slsr", "nary-reassociate"}, {"early-cse"});
  std::optional<ScopedPassGate> gate;
  if (pipeline == LlvmPipeline::Fast) gate.emplace(module.getContext(), skipStraightLineScalarPasses);
  llvm::SmallString<0> buffer;
  llvm::raw_svector_ostream stream(buffer);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, stream, nullptr, llvm::CodeGenFileType::AssemblyFile))
    return support::Diagnostic{{}, "the NVPTX backend cannot emit assembly for this module"};
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

support::Status verifyLlvmModule(const llvm::Module& module) {
  std::string text;
  llvm::raw_string_ostream stream(text);
  if (llvm::verifyModule(module, &stream))
    return support::Status::error({}, "internal: generated LLVM IR is invalid: " + text);
  return support::Status::ok();
}

}  // namespace attnjit::codegen
