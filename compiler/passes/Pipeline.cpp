#include "compiler/passes/Pipeline.h"

#include <chrono>

#include "ir/Printer.h"
#include "ir/Verifier.h"

namespace attnjit::compiler {

namespace {
using PassFunction = support::Status (*)(ir::Kernel&, const PassOptions&);
struct PassEntry {
  PipelinePass pass;
  PassFunction run;
};

// The pipeline. sm_80 and sm_90a share it; codegen's stages follow it
// (codegen::codegenStages()).
constexpr PassEntry kPipeline[] = {
    {{"expand-tensor-loads", "load_tensor rewritten as the masked load of pointers it stands for"},
     expandTensorLoads},
    {{"cse", "identical side-effect-free ops merged"}, eliminateCommonSubexpressions},
    {{"dce", "ops whose results nothing uses removed"}, eliminateDeadCode},
    {{"pipeline-loads", "a loop's tile loads issued one iteration ahead (kernel attribute num_stages = 2)"},
     pipelineLoads},
    {{"dce-after-pipelining", "the loads pipelining replaced removed"}, eliminateDeadCode},
    {{"assign-layouts", "every tile value given a layout; convert_layout where producer and consumer differ"},
     assignLayouts},
    {{"cse-after-layouts", "the index math layout assignment recomputed per consumer merged"},
     eliminateCommonSubexpressions},
};
}  // namespace

std::vector<PipelinePass> pipelinePasses() {
  std::vector<PipelinePass> passes;
  for (const auto& entry : kPipeline) passes.push_back(entry.pass);
  return passes;
}

std::vector<std::string> pipelinePassNames() {
  std::vector<std::string> names;
  for (const auto& entry : kPipeline) names.push_back(entry.pass.name);
  return names;
}

support::Status runPipeline(ir::Kernel& kernel, const PipelineOptions& options, std::vector<PassTiming>* timings) {
  for (const auto& [pass, run] : kPipeline) {
    auto start = std::chrono::steady_clock::now();
    support::Status status = run(kernel, options.pass);
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (timings) timings->push_back({pass.name, ms});
    if (!status) return status;
    if (options.verifyEachPass)
      if (support::Status v = ir::verifyKernel(kernel); !v)
        return support::Status::error(v.diagnostic().loc,
                                 "internal: IR invalid after pass '" + std::string(pass.name) + "': " +
                                     v.diagnostic().message);
    if (options.dump && (options.printAfterAll || options.printAfter == pass.name))
      options.dump("// -----// IR after " + std::string(pass.name) + " //----- //\n" + ir::printKernel(kernel));
  }
  return support::Status::ok();
}

}  // namespace attnjit::compiler
