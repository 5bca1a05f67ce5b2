#include "compiler/cli/Arguments.h"

#include <algorithm>

#include "support/NameSuggestion.h"

namespace attnjit::compiler::cli {
namespace {

support::Diagnostic usageError(const std::string& command, const std::string& message) {
  return support::Diagnostic{support::Location{"attnjit " + command, 0, 0}, message};
}

}  // namespace

std::string ParsedArguments::value(const std::string& option, const std::string& fallback) const {
  auto it = values_.find(option);
  return it == values_.end() || it->second.empty() ? fallback : it->second.back();
}

std::vector<std::string> ParsedArguments::values(const std::string& option) const {
  auto it = values_.find(option);
  return it == values_.end() ? std::vector<std::string>{} : it->second;
}

support::Expected<ParsedArguments> parseArguments(const std::vector<std::string>& args,
                                             const std::vector<OptionSpec>& options, const std::string& command) {
  ParsedArguments parsed;
  bool optionsEnded = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (optionsEnded || arg.size() < 2 || arg[0] != '-') {
      parsed.positionals.push_back(arg);
      continue;
    }
    if (arg == "--") {
      optionsEnded = true;
      continue;
    }
    size_t equals = arg.find('=');
    std::string name = arg.substr(0, equals);
    auto spec = std::find_if(options.begin(), options.end(), [&](const OptionSpec& o) { return o.name == name; });
    if (spec == options.end()) {
      std::vector<std::string> known;
      for (const OptionSpec& o : options) known.push_back(o.name);
      std::string message = "unknown option '" + support::excerpt(name) + "'";
      if (std::string s = support::closestName(name, known); !s.empty()) message += "; did you mean '" + s + "'?";
      return usageError(command, message + " (see 'attnjit " + command + " --help')");
    }
    if (parsed.has(name) && !spec->repeatable) return usageError(command, "option '" + name + "' is given twice");
    if (!spec->takesValue()) {
      if (equals != std::string::npos) return usageError(command, "option '" + name + "' takes no value");
      parsed.add(name, "");
      continue;
    }
    if (equals != std::string::npos) {
      parsed.add(name, arg.substr(equals + 1));
    } else if (i + 1 < args.size()) {
      parsed.add(name, args[++i]);
    } else {
      return usageError(command, "option '" + name + "' needs a value (" + name + " " + spec->valueName + ")");
    }
  }
  return parsed;
}

std::string formatOptionsHelp(const std::vector<OptionSpec>& options) {
  std::vector<std::string> heads;
  size_t width = 0;
  for (const OptionSpec& o : options) {
    std::string head = o.name;
    if (o.takesValue()) head += (o.name.rfind("--", 0) == 0 ? "=" : " ") + o.valueName;
    width = std::max(width, head.size());
    heads.push_back(head);
  }
  std::string text = "options:\n";
  for (size_t i = 0; i < options.size(); ++i) {
    text += "  " + heads[i] + std::string(width - heads[i].size() + 2, ' ') + options[i].help + "\n";
  }
  return text;
}

}  // namespace attnjit::compiler::cli
