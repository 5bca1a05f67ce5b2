// Reading a user's input file (a spec, a .tir kernel) with errors a user can act on:
// a missing file, a directory, an unreadable or oversized file each get a message
// located at the file name.
#pragma once

#include <cstdint>
#include <string>

#include "support/Diagnostics.h"

namespace attnjit::support {

// The whole file, or an error. `what` names the kind of input in messages ("spec").
Expected<std::string> readInputFile(const std::string& path, uintmax_t maxBytes, const std::string& what);

}  // namespace attnjit::support
