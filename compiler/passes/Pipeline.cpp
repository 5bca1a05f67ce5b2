#include "compiler/passes/Pipeline.h"

#include <chrono>

#include "ir/Printer.h"
#include "ir/Verifier.h"

namespace attnjit::compiler {

namespace {
using PassFunction = support::Status (*)(ir::Kernel&, const PassOptions&);
struct PassEntry {
  const char* name;
  PassFunction run;
};

// The pipeline. sm_80 and sm_90a share it for now; the wgmma/TMA path will
// branch here, visibly, when it lands.
constexpr PassEntry kPipeline[] = {
    {"cse", eliminateCommonSubexpressions},
    {"dce", eliminateDeadCode},
    {"pipeline-loads", pipelineLoads},
    {"dce-after-pipelining", eliminateDeadCode},
    {"assign-layouts", assignLayouts},
    {"cse-after-layouts", eliminateCommonSubexpressions},
};
}  // namespace

std::vector<std::string> pipelinePassNames() {
  std::vector<std::string> names;
  for (const auto& p : kPipeline) names.push_back(p.name);
  return names;
}

support::Status runPipeline(ir::Kernel& kernel, const PipelineOptions& options, std::vector<PassTiming>* timings) {
  for (const auto& pass : kPipeline) {
    auto start = std::chrono::steady_clock::now();
    support::Status status = pass.run(kernel, options.pass);
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
