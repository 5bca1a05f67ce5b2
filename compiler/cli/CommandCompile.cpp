// attnjit compile: a spec's variants (or a .tir file's kernels) through the compile
// driver to the requested stage, with the pipeline's inspection knobs (printing IR
// after passes, pass timings) on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "compiler/driver/CompileDriver.h"
#include "support/NameSuggestion.h"
#include "compiler/passes/Pipeline.h"
#include "compiler/cli/Command.h"
#include "compiler/cli/CudaTools.h"
#include "compiler/cli/KernelInput.h"
#include "ir/Printer.h"

namespace attnjit::compiler::cli {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kStages = {"tir", "tir-opt", "llvm", "llvm-opt", "ptx", "cubin", "sass"};

bool needsCudaToolkit(const std::string& stage) { return stage == "cubin" || stage == "sass"; }

// Everything the command line decided, validated before any kernel is compiled.
struct CompileRequest {
  std::string stage;
  std::string ptxas;         // for cubin and sass
  std::string disassembler;  // for sass: nvdisasm or cuobjdump
  bool printAfterAll = false;
  std::string printAfter;
  bool timePasses = false;

  // --emit=tir alone prints the kernels as built; the pass pipeline runs only
  // when a later stage or a look at the passes is asked for.
  bool runsPipeline() const { return stage != "tir" || printAfterAll || !printAfter.empty() || timePasses; }
  bool runsCodegen() const { return stage != "tir" && stage != "tir-opt"; }
};

int parseRequest(const ParsedArguments& args, CompileRequest& request) {
  request.stage = args.value("--emit", "tir");
  if (std::find(kStages.begin(), kStages.end(), request.stage) == kStages.end()) {
    std::string message = "unknown --emit value '" + support::excerpt(request.stage) + "' (stages: " + support::joinNames(kStages) + ")";
    if (std::string s = support::closestName(request.stage, kStages); !s.empty())
      message += "; did you mean '" + s + "'?";
    reportUsageError("compile", message);
    return kExitUserError;
  }
  request.printAfterAll = args.has("--print-after-all");
  request.timePasses = args.has("--time-passes");
  if (args.has("--print-after")) {
    request.printAfter = args.value("--print-after");
    std::vector<std::string> passes, stages, names;
    for (const PipelineStep& step : compilePipeline()) {
      (step.codegen ? stages : passes).push_back(step.name);
      names.push_back(step.name);
    }
    if (std::find(names.begin(), names.end(), request.printAfter) == names.end()) {
      std::string message = "unknown pass '" + support::excerpt(request.printAfter) + "' for --print-after (tile-IR passes: " +
                            support::joinNames(passes) + "; codegen stages: " + support::joinNames(stages) + ")";
      if (std::string s = support::closestName(request.printAfter, names); !s.empty())
        message += "; did you mean '" + s + "'?";
      reportUsageError("compile", message);
      return kExitUserError;
    }
  }
  if (needsCudaToolkit(request.stage)) {
    request.ptxas = findOnPath("ptxas");
    if (request.ptxas.empty()) {
      reportUsageError("compile", "--emit=" + request.stage + " needs ptxas from the CUDA toolkit on the PATH");
      return kExitUserError;
    }
  }
  if (request.stage == "sass") {
    request.disassembler = findOnPath("nvdisasm");
    if (request.disassembler.empty()) request.disassembler = findOnPath("cuobjdump");
    if (request.disassembler.empty()) {
      reportUsageError("compile", "--emit=sass needs nvdisasm or cuobjdump from the CUDA toolkit on the PATH");
      return kExitUserError;
    }
  }
  return kExitSuccess;
}

void printPassTimings(const CompiledKernel& compiled, const CompileRequest& request, double ptxasMs) {
  std::string table = "===-- pass timings: " + compiled.name + " (" + compiled.target + ") --===\n";
  auto row = [&](const std::string& what, double ms) {
    char line[128];
    std::snprintf(line, sizeof line, "  %-28s %10.3f ms\n", what.c_str(), ms);
    table += line;
  };
  for (const PassTiming& t : compiled.passTimings) row(t.pass, t.milliseconds);
  // The pipeline total also holds the verifier runs between passes.
  row("passes (with verification)", compiled.passesMs);
  double total = compiled.passesMs;
  if (request.runsCodegen()) {
    for (const codegen::StageTiming& t : compiled.codegenTimings) row(t.stage, t.milliseconds);
    // The codegen total also holds the LLVM verifier and the IR kept as text.
    const double codegenMs = compiled.lowerMs + compiled.llvmOptimizeMs + compiled.ptxEmitMs;
    row("codegen (with verification)", codegenMs);
    total += codegenMs;
  }
  if (needsCudaToolkit(request.stage)) {
    row("ptxas", ptxasMs);
    total += ptxasMs;
  }
  row("total", total);
  std::fputs(table.c_str(), stderr);
}

// One kernel's result: text for the text stages, ELF bytes for cubin.
struct KernelOutput {
  std::string name;
  std::string text;
  std::string cubin;
};

int compileOne(const InputKernel& input, const codegen::TargetInfo& target, int maxPtx,
               const CompileRequest& request, KernelOutput& output) {
  output.name = input.kernel->name();
  if (!request.runsPipeline()) {
    output.text = ir::printKernel(*input.kernel);
    return kExitSuccess;
  }
  CompileOptions options;
  options.target = target.name;
  options.driverMaxPtx = maxPtx;
  options.stopAfter = request.runsCodegen() ? "ptx" : "tir-opt";
  options.keepLlvmIr = request.stage == "llvm" || request.stage == "llvm-opt";
  options.pipeline.printAfterAll = request.printAfterAll;
  options.pipeline.printAfter = request.printAfter;
  options.pipeline.dump = [](const std::string& dump) { std::fputs(dump.c_str(), stderr); };
  CompiledKernel compiled;
  if (int status = compileInputKernel(input, options, compiled); status != kExitSuccess) return status;

  double ptxasMs = 0;
  if (needsCudaToolkit(request.stage)) {
    auto start = std::chrono::steady_clock::now();
    auto assembled = assemblePtx(request.ptxas, compiled.ptx, target.name, false);
    ptxasMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!assembled) return reportPtxasRejection(compiled, options, target.name, assembled.diagnostic());
    output.cubin = std::move(assembled->cubin);
  }
  if (request.timePasses) printPassTimings(compiled, request, ptxasMs);

  if (request.stage == "tir") output.text = std::move(compiled.tir);
  if (request.stage == "tir-opt") output.text = std::move(compiled.tirOptimized);
  if (request.stage == "llvm") output.text = std::move(compiled.llvmIr);
  if (request.stage == "llvm-opt") output.text = std::move(compiled.llvmIrOptimized);
  if (request.stage == "ptx") output.text = std::move(compiled.ptx);
  if (request.stage == "sass") {
    auto sass = disassembleCubin(request.disassembler, output.cubin);
    if (!sass) {
      reportError(sass.diagnostic());
      return kExitInternalError;
    }
    output.text = std::move(*sass);
  }
  return kExitSuccess;
}

bool writeBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  if (out && out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())) && out.flush()) return true;
  reportError(support::Diagnostic{support::Location{path, 0, 0}, "cannot write the output file"});
  return false;
}

// Text stages: standard output or -o FILE; several kernels each under a header
// comment line in the stage's comment syntax.
int writeText(const std::vector<KernelOutput>& outputs, const CompileRequest& request, const ParsedArguments& args) {
  std::string commentStart = request.stage == "llvm" || request.stage == "llvm-opt" ? ";" : "//";
  std::string text;
  for (const KernelOutput& output : outputs) {
    if (outputs.size() > 1) {
      if (!text.empty()) text += text.back() == '\n' ? "\n" : "\n\n";
      // The blank line keeps a .tir parser from taking the header for the kernel's
      // documentation comment, so the text stays a module that reads back as it was.
      text += commentStart + " ---- " + output.name + " ----\n\n";
    }
    text += output.text;
  }
  if (!args.has("-o")) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kExitSuccess;
  }
  return writeBytes(args.value("-o"), text) ? kExitSuccess : kExitUserError;
}

// cubin: one file per kernel. One kernel goes to -o FILE (or into -o DIR when that
// is a directory), else to ./<kernel>.cubin; several go into the -o directory
// (created if needed, default: the current directory) as <kernel>.cubin.
int writeCubins(const std::vector<KernelOutput>& outputs, const ParsedArguments& args) {
  std::string target = args.value("-o");
  std::error_code ec;
  bool intoDirectory = outputs.size() > 1 || (!target.empty() && fs::is_directory(target, ec));
  if (intoDirectory && !target.empty()) {
    if (fs::exists(target, ec) && !fs::is_directory(target, ec)) {
      reportUsageError("compile", "-o " + target + " is a file, but " + std::to_string(outputs.size()) +
                                      " kernels need a directory (or give --variant=NAME for one kernel)");
      return kExitUserError;
    }
    if (!fs::create_directories(target, ec) && ec) {
      reportError(
          support::Diagnostic{support::Location{target, 0, 0}, "cannot create the output directory: " + ec.message()});
      return kExitUserError;
    }
  }
  for (const KernelOutput& output : outputs) {
    std::string path = output.name + ".cubin";
    if (intoDirectory) path = ((target.empty() ? fs::path(".") : fs::path(target)) / path).string();
    else if (!target.empty()) path = target;
    if (!writeBytes(path, output.cubin)) return kExitUserError;
    std::printf("wrote %s (%zu bytes)\n", path.c_str(), output.cubin.size());
  }
  return kExitSuccess;
}

// --list-passes: the whole pipeline, in order, with what each step does.
int listPasses() {
  std::string text;
  for (const PipelineStep& step : compilePipeline()) {
    char line[96];
    std::snprintf(line, sizeof line, "  %-40s ", step.name.c_str());
    text += std::string(step.codegen ? "codegen " : "tile-IR ") + line + step.description + "\n";
  }
  std::fputs(text.c_str(), stdout);
  return kExitSuccess;
}

int runCompile(const ParsedArguments& args) {
  if (args.has("--list-passes")) return listPasses();
  auto path = singleInput(args, "compile", "input (a spec .yaml or a .tir file)");
  if (!path) {
    reportError(path.diagnostic());
    return kExitUserError;
  }
  CompileRequest request;
  if (int status = parseRequest(args, request); status != kExitSuccess) return status;
  KernelInput input;
  if (int status = loadKernelInput(*path, args, "compile", input); status != kExitSuccess) return status;
  auto target = chooseTarget(args, input, "compile");
  if (!target) {
    reportError(target.diagnostic());
    return kExitUserError;
  }
  // The PTX must be one that this ptxas can assemble.
  int maxPtx = request.ptxas.empty() ? 0 : ptxasMaxPtxVersion(request.ptxas);
  std::vector<KernelOutput> outputs;
  for (const InputKernel& kernel : input.kernels) {
    KernelOutput output;
    if (int status = compileOne(kernel, *target, maxPtx, request, output); status != kExitSuccess) return status;
    outputs.push_back(std::move(output));
  }
  return request.stage == "cubin" ? writeCubins(outputs, args) : writeText(outputs, request, args);
}

}  // namespace

Command compileCommand() {
  return Command{
      "compile",
      "Compile a spec's variants (or a .tir file's kernels) and print any stage: tile IR to SASS.",
      "attnjit compile <spec.yaml|kernel.tir> [--emit=STAGE] [--variant=NAME] [--arch=sm_XX] [-o FILE]\n"
      "                [--print-after-all] [--print-after=PASS] [--time-passes]\n"
      "attnjit compile --list-passes",
      "A spec (.yaml/.yml or any non-.tir file) is expanded into its variants, each built by its\n"
      "kernel builder and verified. A .tir file is parsed and verified.\n"
      "\n"
      "stages (--emit):\n"
      "  tir       the tile IR as built or parsed (default)\n"
      "  tir-opt   the tile IR after the pass pipeline, with the layouts it assigned\n"
      "  llvm      the LLVM IR as lowered from the tile IR\n"
      "  llvm-opt  the LLVM IR after the LLVM pipeline (ATTNJIT_LLVM_PIPELINE: fast, the\n"
      "            default, or o3)\n"
      "  ptx       the PTX from LLVM's NVPTX backend\n"
      "  cubin     the PTX assembled by ptxas (needs the CUDA toolkit on the PATH); binary, so\n"
      "            never printed: one kernel is written to -o FILE (default ./<kernel>.cubin),\n"
      "            several to <kernel>.cubin files in the -o directory (default: the current one)\n"
      "  sass      the cubin disassembled by nvdisasm (or cuobjdump --dump-sass)\n"
      "Text stages of several kernels are printed one after the other, each under a header\n"
      "line '// ---- <kernel> ----' ('; ---- <kernel> ----' for LLVM IR).\n"
      "\n"
      "target (--arch): --arch when given, else the spec's 'target', else the GPU of device 0\n"
      "(its 'a' variant where there is one: compute capability 9.0 gives sm_90a), else sm_90a.\n"
      "Targets: sm_80 sm_86 sm_89 sm_90 sm_90a sm_100a sm_120. The PTX ISA version is the newest\n"
      "LLVM emits, for cubin and sass at most the newest the ptxas at hand accepts.\n"
      "\n"
      "The pipeline is the tile-IR passes, then codegen's stages (--list-passes prints them in\n"
      "order). Inspection output goes to stderr: --print-after-all and --print-after=PASS print\n"
      "the result of a step ('// -----// IR after PASS //----- //'): the tile IR after a pass, the\n"
      "shared-memory plan after a planning stage, the LLVM IR after the others, the PTX after\n"
      "emit-ptx. --time-passes prints each step's time, the codegen total (and ptxas) and the\n"
      "total, per kernel.\n"
      "\n"
      "A kernel the target cannot run (an op or type its backend lacks) is an error, exit 2.\n",
      {
          {"--emit", "STAGE", false, "stage to print: tir, tir-opt, llvm, llvm-opt, ptx, cubin or sass"},
          {"--variant", "NAME", false, "only this variant (spec) or kernel (.tir), by name"},
          {"--arch", "sm_XX", false, "target GPU architecture (default: see above)"},
          {"-o", "FILE", false, "write to FILE instead of standard output (cubin: FILE or directory)"},
          {"--print-after-all", "", false, "print the result of every pass and codegen stage to stderr"},
          {"--print-after", "PASS", false, "print the result of the pass or codegen stage PASS to stderr"},
          {"--list-passes", "", false, "print the passes and codegen stages in order and exit"},
          {"--time-passes", "", false, "print pass and codegen timings to stderr"},
          {"--help", "", false, "show this help"},
      },
      runCompile,
  };
}

}  // namespace attnjit::compiler::cli
