// The attnjit subcommands. Each command is one entry in the table (Main.cpp):
// its name, help text, options, and the function that runs it. Adding a command
// is one new Command*.cpp file and one line in the table.
#pragma once

#include <string>
#include <vector>

#include "compiler/spec/Spec.h"
#include "compiler/cli/Arguments.h"
#include "support/Diagnostics.h"

namespace attnjit::compiler::cli {

// Exit statuses, shared by every command and documented in `attnjit --help`.
enum ExitCode : int {
  kExitSuccess = 0,
  kExitCheckFailed = 1,    // a numerical check failed
  kExitUserError = 2,      // bad arguments or bad input files
  kExitInternalError = 3,  // a compiler bug (a builder produced invalid IR, ...)
};

struct Command {
  std::string name;
  std::string summary;      // one line, for `attnjit --help`
  std::string usage;        // "attnjit list <spec.yaml>"
  std::string description;  // paragraphs shown by `attnjit <name> --help`
  std::vector<OptionSpec> options;
  int (*run)(const ParsedArguments& args);
};

Command listCommand();
Command compileCommand();
Command runCommand();
Command inspectCommand();
Command benchCommand();
Command aotCommand();
Command planCommand();
Command warmupCommand();
Command tuneCommand();

// Prints `d` to stderr as "file:line:col: error: message".
void reportError(const support::Diagnostic& d);
// Prints "attnjit <command>: error: message" to stderr.
void reportUsageError(const std::string& command, const std::string& message);

// The single input file of a command, or a usage error.
support::Expected<std::string> singleInput(const ParsedArguments& args, const std::string& command,
                                      const std::string& what);
// Loads a spec, refusing .tir files with a hint. Errors are reported by the caller.
support::Expected<Spec> loadSpecForCommand(const std::string& path, const std::string& command);
// The variants a command works on: all, or the one --variant names.
support::Expected<std::vector<const Variant*>> selectVariants(const Spec& spec, const ParsedArguments& args,
                                                         const std::string& command);
// The spec's batch with the --shape assignments applied, validated.
support::Expected<BatchShape> shapeFromArguments(const Spec& spec, const ParsedArguments& args,
                                               const std::string& command);
// An error at the first variant that is not of family unified_attention, for
// `what` (e.g. "bench --op") that works through the paged-attention op.
support::Status requireUnifiedAttention(const std::vector<const Variant*>& variants, const std::string& what);

}  // namespace attnjit::compiler::cli
