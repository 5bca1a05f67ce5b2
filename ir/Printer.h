// Printer: the canonical text form (.tir). Parsing printed text and printing it
// again gives the same bytes (tests check this for every .tir file in the repo).
#pragma once

#include <string>

#include "ir/IR.h"

namespace attnjit::ir {

std::string printKernel(const Kernel& kernel);
std::string printModule(const Module& module);
// One op (with its regions), indented by `indent` spaces; value names as the
// kernel printer would choose them is not guaranteed (debug use).
std::string printOperation(const Operation& op);

}  // namespace attnjit::ir
