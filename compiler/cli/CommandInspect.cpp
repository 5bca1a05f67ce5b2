// attnjit inspect: what each kernel of a spec or .tir file asks of the GPU, one
// table row per kernel: block size, dynamic shared memory, the PTX instruction mix
// and, where ptxas is installed, registers, spills and stack.
#include <algorithm>
#include <cstdio>

#include "compiler/driver/CompileDriver.h"
#include "compiler/cli/Command.h"
#include "compiler/cli/CudaTools.h"
#include "compiler/cli/KernelInput.h"
#include "compiler/cli/PtxInstructionMix.h"

namespace attnjit::compiler::cli {
namespace {

using Row = std::vector<std::string>;

Row headerRow(bool withPtxas) {
  Row header = {"kernel",   "threads",   "warps",     "stages",    "setmaxnreg", "pingpong", "smem",
                "slots",    "operands",  "convs",     "scratch",   "mma",        "wgmma",    "ldmatrix",
                "cp.async", "tma",       "mbarrier",  "shfl",      "bar.sync",   "ld.global", "ld.g.vec",
                "st.global", "ld.shared", "st.shared", "ex2"};
  if (withPtxas) header.insert(header.end(), {"regs", "spill.st", "spill.ld", "stack"});
  return header;
}

Row kernelRow(const CompiledKernel& compiled, const PtxInstructionMix& mix, const PtxasResources* resources) {
  auto n = [](int value) { return std::to_string(value); };
  const codegen::SharedMemoryUse& use = compiled.sharedMemoryUse;
  const codegen::WarpSchedule& schedule = compiled.warpSchedule;
  std::string warps = n(schedule.computeWarps);
  if (schedule.producerWarps > 0) warps += "+" + n(schedule.producerWarps) + "p";
  const std::string stages = schedule.asyncBuffers > 0 ? n(schedule.slotsPerBuffer) : "-";
  const std::string maxRegisters = schedule.computeRegisters > 0
                                       ? n(schedule.computeRegisters) + "/" + n(schedule.producerRegisters)
                                       : "-";
  Row row = {compiled.name,    n(compiled.numThreads),
             warps,            stages,
             maxRegisters,     schedule.pingPong ? "yes" : "no",
             n(compiled.sharedMemoryBytes), n(use.slots),
             n(use.operands),  n(use.conversions),
             n(use.scratch),   n(mix.mma),
             n(mix.wgmma),     n(mix.ldmatrix),
             n(mix.cpAsync),   n(mix.tma),
             n(mix.mbarrier),
             n(mix.shfl),      n(mix.barSync),
             n(mix.ldGlobal),  n(mix.ldGlobalVector),
             n(mix.stGlobal),  n(mix.ldShared),
             n(mix.stShared),  n(mix.ex2)};
  if (resources != nullptr) {
    if (resources->found) {
      row.insert(row.end(), {n(resources->registers), n(resources->spillStoreBytes), n(resources->spillLoadBytes),
                             n(resources->stackFrameBytes)});
    } else {
      row.insert(row.end(), {"?", "?", "?", "?"});
    }
  }
  return row;
}

// Left-aligned names, right-aligned numbers, two spaces between columns.
void printTable(const std::vector<Row>& rows) {
  std::vector<size_t> widths(rows.front().size(), 0);
  for (const Row& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  for (const Row& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      std::string pad(widths[i] - row[i].size(), ' ');
      line += i == 0 ? row[i] + pad : "  " + pad + row[i];
    }
    std::printf("%s\n", line.c_str());
  }
}

int runInspect(const ParsedArguments& args) {
  auto path = singleInput(args, "inspect", "input (a spec .yaml or a .tir file)");
  if (!path) {
    reportError(path.diagnostic());
    return kExitUserError;
  }
  KernelInput input;
  if (int status = loadKernelInput(*path, args, "inspect", input); status != kExitSuccess) return status;
  auto target = chooseTarget(args, input, "inspect");
  if (!target) {
    reportError(target.diagnostic());
    return kExitUserError;
  }
  std::string ptxas = findOnPath("ptxas");
  CompileOptions options;
  options.target = target->name;
  options.driverMaxPtx = ptxas.empty() ? 0 : ptxasMaxPtxVersion(ptxas);

  std::vector<Row> rows = {headerRow(!ptxas.empty())};
  for (const InputKernel& kernel : input.kernels) {
    CompiledKernel compiled;
    if (int status = compileInputKernel(kernel, options, compiled); status != kExitSuccess) return status;
    PtxasResources resources;
    if (!ptxas.empty()) {
      auto assembled = assemblePtx(ptxas, compiled.ptx, target->name, true);
      if (!assembled) return reportPtxasRejection(compiled, options, target->name, assembled.diagnostic());
      resources = parsePtxasResources(assembled->ptxasLog);
    }
    rows.push_back(kernelRow(compiled, countPtxInstructions(compiled.ptx), ptxas.empty() ? nullptr : &resources));
  }
  std::printf("target %s, PTX instruction counts are static (each instruction in the text once)\n",
              target->name.c_str());
  printTable(rows);
  if (ptxas.empty()) std::fprintf(stderr, "attnjit inspect: note: no ptxas on the PATH, so no register report\n");
  return kExitSuccess;
}

}  // namespace

Command inspectCommand() {
  return Command{
      "inspect",
      "Per kernel: warp roles, copy stages, shared memory, PTX instruction mix, registers and spills.",
      "attnjit inspect <spec.yaml|kernel.tir> [--arch=sm_XX] [--variant=NAME]",
      "Compiles every kernel to PTX (the target is chosen as for 'attnjit compile') and prints\n"
      "one row per kernel:\n"
      "  threads    block size: 32 per warp, producer warps included\n"
      "  warps      the warps that compute, and '+Np' the producer warps that only issue\n"
      "             the K/V copies (warp_specialize)\n"
      "  stages     slots of each cp.async buffer: tiles in flight ('-': no cp.async pipeline)\n"
      "  setmaxnreg registers a compute / producer thread asks for with setmaxnreg ('-': none)\n"
      "  pingpong   whether the two compute warpgroups take turns issuing their warpgroup MMAs\n"
      "  smem       dynamic shared memory in bytes, and where it goes: cp.async slots,\n"
      "             loop-invariant mma operands, shared conversions' buffers (each with its\n"
      "             alignment padding) and the conversion scratch after them (an epilogue\n"
      "             that reuses the buffers once the last loop is done may need more)\n"
      "  slots, operands, convs, scratch\n"
      "             those parts\n"
      "  mma .. ex2 static counts of PTX instructions: mma.sync, wgmma.mma_async, ldmatrix,\n"
      "             cp.async copies, TMA box copies (cp.async.bulk.tensor), mbarrier operations\n"
      "             (the producer warps' hand-over), shfl,\n"
      "             bar.sync, ld.global (ld.g.vec: of those, the .v2/.v4 vector loads), st.global,\n"
      "             ld.shared, st.shared, ex2\n"
      "  regs, spill.st, spill.ld, stack\n"
      "             registers per thread and bytes of spill stores, spill loads and stack\n"
      "             frame, from 'ptxas -v'; these columns appear only when ptxas is on the PATH\n",
      {
          {"--arch", "sm_XX", false, "target GPU architecture"},
          {"--variant", "NAME", false, "only this variant (spec) or kernel (.tir), by name"},
          {"--help", "", false, "show this help"},
      },
      runInspect,
  };
}

}  // namespace attnjit::compiler::cli
