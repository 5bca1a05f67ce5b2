// Command-line parsing for the attnjit subcommands: each command declares its
// options; anything else that starts with '-' is an error naming the option.
//
// Accepted spellings: --name=value, --name value, -o value, and flags (--name).
// "--" ends the options; everything after it is positional.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "support/Diagnostics.h"

namespace attnjit::compiler::cli {

struct OptionSpec {
  std::string name;        // "--variant" or "-o"
  std::string valueName;   // "NAME" for options that take a value; empty for flags
  bool repeatable = false; // may be given several times (values accumulate)
  std::string help;

  bool takesValue() const { return !valueName.empty(); }
};

class ParsedArguments {
 public:
  std::vector<std::string> positionals;

  bool has(const std::string& option) const { return values_.count(option) != 0; }
  // The value of a single-valued option, or `fallback` when it was not given.
  std::string value(const std::string& option, const std::string& fallback = "") const;
  // Every value of a repeatable option, in command-line order.
  std::vector<std::string> values(const std::string& option) const;

  void add(const std::string& option, std::string value) { values_[option].push_back(std::move(value)); }

 private:
  std::map<std::string, std::vector<std::string>> values_;
};

// `command` names the subcommand in messages ("compile").
support::Expected<ParsedArguments> parseArguments(const std::vector<std::string>& args,
                                             const std::vector<OptionSpec>& options, const std::string& command);

// The options part of a command's --help, one aligned line per option.
std::string formatOptionsHelp(const std::vector<OptionSpec>& options);

}  // namespace attnjit::compiler::cli
