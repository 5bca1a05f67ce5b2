#include <cstdio>

#include "compiler/validation/AttentionProblem.h"
#include "support/NameSuggestion.h"
#include "compiler/cli/Command.h"

namespace attnjit::compiler::cli {

void reportError(const support::Diagnostic& d) {
  std::string text = d.loc.file.empty() ? "attnjit: error: " + d.message : d.str();
  std::fprintf(stderr, "%s\n", text.c_str());
}

void reportUsageError(const std::string& command, const std::string& message) {
  reportError(support::Diagnostic{support::Location{"attnjit " + command, 0, 0}, message});
}

support::Expected<std::string> singleInput(const ParsedArguments& args, const std::string& command,
                                      const std::string& what) {
  support::Location at{"attnjit " + command, 0, 0};
  if (args.positionals.empty())
    return support::Diagnostic{at, "missing the " + what + " (see 'attnjit " + command + " --help')"};
  if (args.positionals.size() > 1) {
    return support::Diagnostic{at, "expected one " + what + ", got " + std::to_string(args.positionals.size()) +
                                  " arguments ('" + args.positionals[1] + "' is extra)"};
  }
  return args.positionals[0];
}

static bool endsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

support::Expected<Spec> loadSpecForCommand(const std::string& path, const std::string& command) {
  if (endsWith(path, ".tir")) {
    return support::Diagnostic{support::Location{path, 0, 0}, "'attnjit " + command +
                                                        "' takes a spec (.yaml); for .tir files use 'attnjit compile'"};
  }
  return loadSpecFile(path);
}

support::Expected<std::vector<const Variant*>> selectVariants(const Spec& spec, const ParsedArguments& args,
                                                         const std::string& command) {
  std::vector<const Variant*> selected;
  if (!args.has("--variant")) {
    for (const Variant& v : spec.variants) selected.push_back(&v);
    return selected;
  }
  std::string wanted = args.value("--variant");
  std::vector<std::string> names;
  for (const Variant& v : spec.variants) {
    if (v.name == wanted) selected.push_back(&v);
    names.push_back(v.name);
  }
  if (!selected.empty()) return selected;
  std::string message = "no variant named '" + support::excerpt(wanted) + "' in " + spec.path;
  if (std::string s = support::closestName(wanted, names); !s.empty()) message += "; did you mean '" + s + "'?";
  return support::Diagnostic{support::Location{"attnjit " + command, 0, 0},
                        message + " (see 'attnjit list " + spec.path + "')"};
}

support::Expected<BatchShape> shapeFromArguments(const Spec& spec, const ParsedArguments& args,
                                               const std::string& command) {
  const support::Location at{"attnjit " + command, 0, 0};
  BatchShape shape = spec.shape;
  for (const std::string& assignment : args.values("--shape"))
    if (support::Status s = shape.set(assignment); !s)
      return support::Diagnostic{at, "--shape " + support::excerpt(assignment) + ": " + s.diagnostic().message};
  if (support::Status s = shape.validate(); !s)
    return support::Diagnostic{at, "the batch (" + support::excerpt(shape.str()) + "): " + s.diagnostic().message};
  return shape;
}

support::Status requireUnifiedAttention(const std::vector<const Variant*>& variants, const std::string& what) {
  for (const Variant* variant : variants)
    if (variant->family != Family::UnifiedAttention)
      return support::Status::error(variant->location, what + ": variant '" + variant->name + "' is of family '" +
                                                           familyName(variant->family) + "'; " + what +
                                                           " takes unified_attention (ops::pagedAttention)");
  return support::Status::ok();
}

}  // namespace attnjit::compiler::cli
