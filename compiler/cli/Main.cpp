// attnjit: the command-line driver. Dispatches to the subcommands of the table
// below; global options are --help and --version.
#include <cstdio>
#include <algorithm>
#include <exception>
#include <string>
#include <vector>

#include "support/NameSuggestion.h"
#include "compiler/cli/Command.h"

#ifndef ATTNJIT_VERSION
#define ATTNJIT_VERSION "unknown"
#endif

namespace attnjit::compiler::cli {
namespace {

const std::vector<Command>& commandTable() {
  static const std::vector<Command> table = {listCommand(), compileCommand(), inspectCommand(), runCommand(),
                                             benchCommand(), planCommand(), tuneCommand(), warmupCommand(), aotCommand()};
  return table;
}

std::string mainHelp() {
  std::string text =
      "attnjit: a JIT compiler for GPU attention kernels\n"
      "\n"
      "usage: attnjit <command> [arguments] [options]\n"
      "       attnjit <command> --help\n"
      "       attnjit --version\n"
      "\n"
      "commands:\n";
  for (const Command& c : commandTable()) {
    text += "  " + c.name + std::string(10 - std::min<size_t>(c.name.size(), 9), ' ') + c.summary + "\n";
  }
  text +=
      "\n"
      "Errors are printed as 'file:line:col: error: message'.\n"
      "exit status: 0 success, 1 a numerical check failed, 2 bad arguments or input, 3 internal error\n";
  return text;
}

std::string commandHelp(const Command& c) {
  std::string text = "usage: " + c.usage + "\n\n" + c.summary + "\n";
  if (!c.description.empty()) text += "\n" + c.description;
  if (!c.options.empty()) text += "\n" + formatOptionsHelp(c.options);
  return text;
}

int dispatch(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fputs(mainHelp().c_str(), stderr);
    return kExitUserError;
  }
  const std::string& first = args[0];
  if (first == "--help" || first == "-h") {
    std::fputs(mainHelp().c_str(), stdout);
    return kExitSuccess;
  }
  if (first == "--version") {
    std::printf("attnjit %s\n", ATTNJIT_VERSION);
    return kExitSuccess;
  }
  std::vector<std::string> names;
  for (const Command& c : commandTable()) names.push_back(c.name);
  if (first == "help") {
    if (args.size() == 1) {
      std::fputs(mainHelp().c_str(), stdout);
      return kExitSuccess;
    }
    for (const Command& c : commandTable()) {
      if (c.name == args[1]) {
        std::fputs(commandHelp(c).c_str(), stdout);
        return kExitSuccess;
      }
    }
    reportUsageError("help", "unknown command '" + args[1] + "' (commands: " + support::joinNames(names) + ")");
    return kExitUserError;
  }
  for (const Command& c : commandTable()) {
    if (c.name != first) continue;
    std::vector<std::string> rest(args.begin() + 1, args.end());
    // --help wins over everything else on the line, even unknown options.
    for (const std::string& a : rest) {
      if (a == "--") break;
      if (a == "--help" || a == "-h") {
        std::fputs(commandHelp(c).c_str(), stdout);
        return kExitSuccess;
      }
    }
    auto parsed = parseArguments(rest, c.options, c.name);
    if (!parsed) {
      reportError(parsed.diagnostic());
      return kExitUserError;
    }
    return c.run(*parsed);
  }
  std::string message = first.rfind("-", 0) == 0 ? "unknown option '" + first + "'" : "unknown command '" + first + "'";
  if (std::string s = support::closestName(first, names); !s.empty()) message += "; did you mean '" + s + "'?";
  reportError(support::Diagnostic{support::Location{"attnjit", 0, 0},
                                  message + " (commands: " + support::joinNames(names) + ")"});
  return kExitUserError;
}

}  // namespace
}  // namespace attnjit::compiler::cli

int main(int argc, char** argv) {
  try {
    return attnjit::compiler::cli::dispatch(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    // Every user error is a Diagnostic; an exception reaching here is a bug.
    std::fprintf(stderr, "attnjit: internal error: %s\n", e.what());
    return attnjit::compiler::cli::kExitInternalError;
  }
}
