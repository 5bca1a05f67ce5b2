// attnjit compile: a spec's variants (or a .tir file) to the requested stage.
// Today the stages end at the tile IR; later stages (LLVM IR, PTX, cubin, SASS)
// arrive with codegen and get their --emit value here.
#include <cstdio>
#include <fstream>
#include <memory>

#include "compiler/InputFile.h"
#include "compiler/cli/Command.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"

namespace attnjit::compiler::cli {
namespace {

constexpr uintmax_t kMaxTirBytes = 16u << 20;

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The printed tile IR of every selected variant, built and verified.
int compileSpec(const std::string& path, const ParsedArguments& args, std::string& text) {
  auto spec = loadSpecFile(path);
  if (!spec) {
    reportError(spec.diagnostic());
    return kExitUserError;
  }
  auto selected = selectVariants(*spec, args, "compile");
  if (!selected) {
    reportError(selected.diagnostic());
    return kExitUserError;
  }
  ir::Module module;
  for (const Variant* variant : *selected) {
    auto kernel = buildUnifiedAttention(variant->attention);
    if (!kernel) {
      reportError(ir::Diagnostic{variant->location, "cannot build variant '" + variant->name +
                                                        "': " + kernel.diagnostic().message});
      return kExitInternalError;
    }
    // The spec already validated the configuration, so invalid IR is a builder bug.
    if (ir::Status verified = ir::verifyKernel(**kernel); !verified) {
      std::fprintf(stderr, "attnjit: internal error: the kernel builder produced invalid IR for '%s':\n",
                   variant->name.c_str());
      reportError(verified.diagnostic());
      return kExitInternalError;
    }
    module.addKernel(std::move(*kernel));
  }
  text = ir::printModule(module);
  return kExitSuccess;
}

// A .tir file parsed (and verified) and printed back, whole or one kernel.
int compileTir(const std::string& path, const ParsedArguments& args, std::string& text) {
  auto source = readInputFile(path, kMaxTirBytes, ".tir");
  if (!source) {
    reportError(source.diagnostic());
    return kExitUserError;
  }
  auto module = ir::parseModule(*source, path);
  if (!module) {
    reportError(module.diagnostic());
    return kExitUserError;
  }
  if (!args.has("--variant")) {
    text = ir::printModule(**module);
    return kExitSuccess;
  }
  std::string wanted = args.value("--variant");
  if (const ir::Kernel* kernel = (*module)->findKernel(wanted)) {
    text = ir::printKernel(*kernel);
    return kExitSuccess;
  }
  std::string names;
  for (const auto& k : (*module)->kernels()) names += (names.empty() ? "" : ", ") + k->name();
  reportUsageError("compile", "no kernel named '" + wanted + "' in " + path + " (kernels: " + names + ")");
  return kExitUserError;
}

int writeOutput(const std::string& text, const ParsedArguments& args) {
  if (!args.has("-o")) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return kExitSuccess;
  }
  std::string path = args.value("-o");
  std::ofstream out(path, std::ios::binary);
  if (!out || !out.write(text.data(), static_cast<std::streamsize>(text.size())) || !out.flush()) {
    reportError(ir::Diagnostic{ir::Location{path, 0, 0}, "cannot write the output file"});
    return kExitUserError;
  }
  return kExitSuccess;
}

int runCompile(const ParsedArguments& args) {
  auto path = singleInput(args, "compile", "input (a spec .yaml or a .tir file)");
  if (!path) {
    reportError(path.diagnostic());
    return kExitUserError;
  }
  std::string emit = args.value("--emit", "tir");
  if (emit == "llvm" || emit == "ptx" || emit == "cubin" || emit == "sass") {
    reportUsageError("compile", "--emit=" + emit + " is not available yet: codegen lands with the codegen issue");
    return kExitUserError;
  }
  if (emit != "tir" && emit != "tir-opt") {
    reportUsageError("compile", "unknown --emit value '" + emit + "' (expected tir, tir-opt, llvm, ptx, cubin or sass)");
    return kExitUserError;
  }
  // tir-opt: there are no optimization passes yet, so it prints the verified IR as is.
  std::string text;
  int status = endsWith(*path, ".tir") ? compileTir(*path, args, text) : compileSpec(*path, args, text);
  if (status != kExitSuccess) return status;
  return writeOutput(text, args);
}

}  // namespace

Command compileCommand() {
  return Command{
      "compile",
      "Print the tile IR of a spec's variants, or parse a .tir file and print it back.",
      "attnjit compile <spec.yaml|kernel.tir> [--emit=STAGE] [--variant=NAME] [-o FILE]",
      "A spec (.yaml/.yml or any non-.tir file) is expanded into its variants, each built by its\n"
      "kernel builder and verified. A .tir file is parsed and verified, then printed in canonical form.\n"
      "\n"
      "stages (--emit):\n"
      "  tir      the tile IR as built (default)\n"
      "  tir-opt  the tile IR after the optimization passes (tir-opt: no passes yet, same as tir)\n"
      "  llvm, ptx, cubin, sass  not available yet: they arrive with codegen\n",
      {
          {"--emit", "STAGE", false, "stage to print: tir (default) or tir-opt"},
          {"--variant", "NAME", false, "only this variant (spec) or kernel (.tir), by name"},
          {"-o", "FILE", false, "write to FILE instead of standard output"},
          {"--help", "", false, "show this help"},
      },
      runCompile,
  };
}

}  // namespace attnjit::compiler::cli
