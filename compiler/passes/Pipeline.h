// The tile-IR pass pipeline: one readable list (Pipeline.cpp), with printing
// after passes and pass timing for the CLI (--print-after-all, --print-after=,
// --time-passes).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "compiler/passes/Passes.h"
#include "ir/IR.h"

namespace attnjit::compiler {

struct PipelineOptions {
  PassOptions pass;
  bool printAfterAll = false;
  std::string printAfter;     // a pass name, or empty
  bool verifyEachPass = true; // run the verifier after every pass
  // Receives "// -----// IR after <pass> //----- //" dumps.
  std::function<void(const std::string&)> dump;
};

struct PassTiming {
  std::string pass;
  double milliseconds;
};

// The tile-IR passes in order, with what each does; codegen's stages follow
// them (codegen::codegenStages()), and compiler::compilePipeline() lists both.
struct PipelinePass {
  const char* name;
  const char* description;
};
std::vector<PipelinePass> pipelinePasses();
std::vector<std::string> pipelinePassNames();

// Runs every pass on the kernel; a pass failure or a verifier failure after a
// pass returns the diagnostic naming the pass.
support::Status runPipeline(ir::Kernel& kernel, const PipelineOptions& options, std::vector<PassTiming>* timings);

}  // namespace attnjit::compiler
