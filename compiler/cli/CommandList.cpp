// attnjit list: the variants a spec expands to.
#include <algorithm>
#include <cstdio>

#include "compiler/spec/VariantKernel.h"
#include "compiler/cli/Command.h"

namespace attnjit::compiler::cli {
namespace {

int runList(const ParsedArguments& args) {
  auto path = singleInput(args, "list", "spec file");
  if (!path) {
    reportError(path.diagnostic());
    return kExitUserError;
  }
  auto spec = loadSpecForCommand(*path, "list");
  if (!spec) {
    reportError(spec.diagnostic());
    return kExitUserError;
  }
  size_t width = 0;
  for (const Variant& v : spec->variants) width = std::max(width, v.name.size());
  for (const Variant& v : spec->variants) {
    std::printf("%-*s  %s\n", static_cast<int>(width), v.name.c_str(), formatVariantParams(v).c_str());
  }
  return kExitSuccess;
}

}  // namespace

Command listCommand() {
  return Command{
      "list",
      "List the variants a spec expands to, one line each: kernel name and parameters.",
      "attnjit list <spec.yaml>",
      "The variants are the cartesian product of the spec's parameter lists (see specs/README.md).\n",
      {{"--help", "", false, "show this help"}},
      runList,
  };
}

}  // namespace attnjit::compiler::cli
