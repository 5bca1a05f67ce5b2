#include "compiler/validation/KernelProblem.h"

#include <chrono>
#include <cmath>

#include "ir/Interpreter.h"

namespace attnjit::validation {

support::Expected<AttentionRunResult> runProblemInterpreted(const ProblemKernelBuilder& build,
                                                       const KernelProblem& problem) {
  AttentionRunResult result;
  const auto buildStart = std::chrono::steady_clock::now();
  auto kernel = build();
  if (!kernel) return kernel.status();
  result.buildMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - buildStart).count();

  std::vector<KernelProblem::Buffer> buffers = problem.buffers();  // the run works on a copy
  ir::InterpreterMemory memory;
  std::vector<ir::KernelArgument> args;
  for (auto& buffer : buffers)
    args.push_back(ir::PointerArg{memory.map(buffer.bytes.data(), buffer.bytes.size(), buffer.label)});
  for (const auto& scalar : problem.scalarArguments()) std::visit([&](auto v) { args.push_back(v); }, scalar);
  ir::LaunchGrid grid;
  grid.x = problem.grid().x;
  grid.y = problem.grid().y;
  grid.z = problem.grid().z;
  result.gridX = grid.x;
  result.gridY = grid.y;
  const auto runStart = std::chrono::steady_clock::now();
  if (support::Status s = ir::interpretKernel(**kernel, grid, args, memory); !s) return s;
  result.runMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - runStart).count();
  problem.check(buffers, result);
  return result;
}

double weightedCombineTolerance(ir::ScalarKind dtype, int count) {
  const double accumulation = 1e-6 * (count + 4);
  switch (dtype) {
    case ir::ScalarKind::F16: return 2 * std::ldexp(1.0, -11) + accumulation;
    case ir::ScalarKind::BF16: return 2 * std::ldexp(1.0, -8) + accumulation;
    default: return accumulation;
  }
}

}  // namespace attnjit::validation
