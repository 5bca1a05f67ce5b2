// What `attnjit compile` and `attnjit inspect` work on: the kernels of a spec (its
// variants, built and verified) or of a .tir file (parsed and verified), narrowed
// by --variant, and the target they are compiled for.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "codegen/Target.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/cli/Command.h"
#include "ir/IR.h"

namespace attnjit::compiler::cli {

struct InputKernel {
  ir::Kernel* kernel;   // owned by KernelInput::module
  support::Location origin;  // the variant in the spec, or the .tir file
};

struct KernelInput {
  std::string path;
  std::string specTarget;  // the spec's `target`; empty for a .tir file
  std::unique_ptr<ir::Module> module;
  std::vector<InputKernel> kernels;  // the selected ones, in input order
};

// Loads the input of `command`; on failure the error is reported and the exit
// status returned (2 for bad input, 3 when a kernel builder produced invalid IR).
int loadKernelInput(const std::string& path, const ParsedArguments& args, const std::string& command,
                    KernelInput& input);

// The target to compile for: --arch when given (an empty --arch= is an error); else a spec's `target`; else the
// GPU of device 0 when a CUDA driver is present (its "a" variant where there is one:
// 90 → sm_90a); else sm_90a. An unknown --arch is an error listing the targets.
support::Expected<codegen::TargetInfo> chooseTarget(const ParsedArguments& args, const KernelInput& input,
                                               const std::string& command);

// compileKernel for one input kernel. A failure is reported naming the kernel and
// the target, at the kernel's origin when the diagnostic has no location of its
// own; the exit status is returned (2: the kernel cannot be compiled for the
// target, 3: an internal error of the compiler).
int compileInputKernel(const InputKernel& input, const CompileOptions& options, CompiledKernel& compiled);

// ptxas refused `compiled`'s PTX for `target`: a compiler bug (exit 3), or the
// user's, when the PTX came from the override folder (exit 2, at that file).
// Reports it and returns the exit status.
int reportPtxasRejection(const CompiledKernel& compiled, const CompileOptions& options, const std::string& target,
                         const support::Diagnostic& ptxasError);

}  // namespace attnjit::compiler::cli
