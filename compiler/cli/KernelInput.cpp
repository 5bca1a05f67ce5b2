#include "compiler/cli/KernelInput.h"

#include <cstdio>
#include <filesystem>

#include "support/InputFile.h"
#include "support/NameSuggestion.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "ir/Parser.h"
#include "ir/Verifier.h"
#include "runtime/Driver.h"

namespace attnjit::compiler::cli {
namespace {

constexpr uintmax_t kMaxTirBytes = 16u << 20;
constexpr const char* kDefaultTarget = "sm_90a";

bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int loadSpecKernels(const ParsedArguments& args, const std::string& command, KernelInput& input) {
  auto spec = loadSpecFile(input.path);
  if (!spec) {
    reportError(spec.diagnostic());
    return kExitUserError;
  }
  auto selected = selectVariants(*spec, args, command);
  if (!selected) {
    reportError(selected.diagnostic());
    return kExitUserError;
  }
  input.specTarget = spec->target;
  input.module = std::make_unique<ir::Module>();
  for (const Variant* variant : *selected) {
    auto kernel = buildVariantKernel(*variant);
    if (!kernel) {
      reportError(support::Diagnostic{variant->location, "cannot build variant '" + variant->name +
                                                        "': " + kernel.diagnostic().message});
      return kExitInternalError;
    }
    // The spec already validated the configuration, so invalid IR is a builder bug.
    if (support::Status verified = ir::verifyKernel(**kernel); !verified) {
      std::fprintf(stderr, "attnjit: internal error: the kernel builder produced invalid IR for '%s':\n",
                   variant->name.c_str());
      reportError(verified.diagnostic());
      return kExitInternalError;
    }
    input.kernels.push_back({input.module->addKernel(std::move(*kernel)), variant->location});
  }
  return kExitSuccess;
}

int loadTirKernels(const ParsedArguments& args, const std::string& command, KernelInput& input) {
  auto source = support::readInputFile(input.path, kMaxTirBytes, ".tir");
  if (!source) {
    reportError(source.diagnostic());
    return kExitUserError;
  }
  auto module = ir::parseModule(*source, input.path);
  if (!module) {
    reportError(module.diagnostic());
    return kExitUserError;
  }
  input.module = std::move(*module);
  std::string wanted = args.value("--variant");
  std::vector<std::string> names;
  for (const auto& kernel : input.module->kernels()) {
    names.push_back(kernel->name());
    if (!args.has("--variant") || kernel->name() == wanted) {
      support::Location origin =
          kernel->location().file.empty() ? support::Location{input.path, 0, 0} : kernel->location();
      input.kernels.push_back({kernel.get(), origin});
    }
  }
  if (!input.kernels.empty() || !args.has("--variant")) return kExitSuccess;
  std::string message = "no kernel named '" + wanted + "' in " + input.path;
  if (std::string s = support::closestName(wanted, names); !s.empty()) message += "; did you mean '" + s + "'?";
  reportUsageError(command, message + " (kernels: " + support::joinNames(names) + ")");
  return kExitUserError;
}

// The target table's entry for the chip of device 0, if there is a driver, a device,
// and an entry for its compute capability.
std::string localGpuTarget() {
  if (!runtime::driverAvailable()) return "";
  auto device = runtime::deviceInfo(0);
  if (!device) return "";
  std::string match;
  for (const codegen::TargetInfo& t : codegen::allTargets()) {
    if (t.computeCapability != device->smVersion()) continue;
    // Code for the chip at hand may use its arch-specific features.
    if (match.empty() || t.archSpecific) match = t.name;
  }
  return match;
}

}  // namespace

int loadKernelInput(const std::string& path, const ParsedArguments& args, const std::string& command,
                    KernelInput& input) {
  input.path = path;
  return endsWith(path, ".tir") ? loadTirKernels(args, command, input) : loadSpecKernels(args, command, input);
}

support::Expected<codegen::TargetInfo> chooseTarget(const ParsedArguments& args, const KernelInput& input,
                                               const std::string& command) {
  std::string name = args.value("--arch");
  if (args.has("--arch") && name.empty()) {
    std::string known;
    for (const auto& t : codegen::allTargets()) known += (known.empty() ? "" : ", ") + t.name;
    return support::Diagnostic{support::Location{"attnjit " + command, 0, 0},
                               "--arch= needs a target name (one of " + known + ")"};
  }
  if (name.empty()) name = input.specTarget;
  if (name.empty()) name = localGpuTarget();
  if (name.empty()) name = kDefaultTarget;
  auto target = codegen::lookupTarget(name);
  if (!target) {
    std::string where = args.has("--arch") ? "--arch=" + name : input.path + ": target";
    return support::Diagnostic{support::Location{"attnjit " + command, 0, 0},
                               where + ": " + target.diagnostic().message};
  }
  return target;
}

int reportPtxasRejection(const CompiledKernel& compiled, const CompileOptions& options, const std::string& target,
                         const support::Diagnostic& ptxasError) {
  if (compiled.wasOverridden("ptx")) {
    const std::string path = (std::filesystem::path(overrideDirectory(options)) / (compiled.name + ".ptx")).string();
    reportError(support::Diagnostic{support::Location{path, 0, 0},
                                    "the override PTX of '" + compiled.name + "' does not assemble for " + target +
                                        ": " + ptxasError.message});
    return kExitUserError;
  }
  std::fprintf(stderr, "attnjit: internal error: ptxas rejected the PTX generated for '%s' (%s):\n",
               compiled.name.c_str(), target.c_str());
  reportError(ptxasError);
  return kExitInternalError;
}

int compileInputKernel(const InputKernel& input, const CompileOptions& options, CompiledKernel& compiled) {
  auto result = compileKernel(*input.kernel, options);
  if (result) {
    compiled = std::move(*result);
    // A stage taken from the override folder is the user's, not the compiler's: say so.
    for (const std::string& stage : compiled.overridden)
      std::fprintf(stderr, "attnjit: note: '%s': its %s comes from the override folder %s\n", compiled.name.c_str(),
                   stage == "tir" ? "tile IR" : stage == "ptx" ? "PTX" : stage.c_str(),
                   overrideDirectory(options).c_str());
    return kExitSuccess;
  }
  support::Diagnostic d = result.diagnostic();
  // The passes and codegen mark their own bugs this way (compiler/passes/Pipeline.cpp).
  bool internal = d.message.rfind("internal", 0) == 0;
  if (d.loc.file.empty()) d.loc = input.origin;
  d.message = "cannot compile kernel '" + input.kernel->name() + "' for " + options.target + ": " + d.message;
  if (internal) std::fprintf(stderr, "attnjit: internal error (a compiler bug):\n");
  reportError(d);
  return internal ? kExitInternalError : kExitUserError;
}

}  // namespace attnjit::compiler::cli
