// The CUDA toolkit's command-line tools (ptxas, nvdisasm, cuobjdump), found on the
// PATH and run as child processes. attnjit links no CUDA library, so cubin and SASS
// output (and ptxas's register report) exist only where the toolkit is installed.
#pragma once

#include <string>
#include <vector>

#include "support/Diagnostics.h"

namespace attnjit::compiler::cli {

// The path of the executable `tool` in the first PATH directory holding one, or "".
std::string findOnPath(const std::string& tool);

// The newest PTX ISA (major*10+minor) the given ptxas accepts, from the CUDA release
// `ptxas --version` names; 0 when it cannot be told (then nothing is clamped).
int ptxasMaxPtxVersion(const std::string& ptxas);

struct AssembledKernel {
  std::string cubin;      // the ELF bytes
  std::string ptxasLog;   // ptxas's stderr (the -v report when asked for)
};

// `ptxas -arch=<arch> [-v] kernel.ptx -o kernel.cubin` in a scratch directory. A
// ptxas failure comes back as a diagnostic holding ptxas's own messages.
support::Expected<AssembledKernel> assemblePtx(const std::string& ptxas, const std::string& ptx,
                                               const std::string& arch, bool verbose);

// The SASS listing of a cubin: `nvdisasm -c` or `cuobjdump --dump-sass`, by the
// tool's file name.
support::Expected<std::string> disassembleCubin(const std::string& disassembler, const std::string& cubin);

// The resource report of `ptxas -v` for one entry function.
struct PtxasResources {
  bool found = false;  // false when the log holds no "Used N registers" line
  int registers = 0;
  int spillStoreBytes = 0;
  int spillLoadBytes = 0;
  int stackFrameBytes = 0;
};

// Parses the lines
//   "    128 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads"
//   "ptxas info    : Used 168 registers, used 1 barriers, 400 bytes cmem[0]"
// of a log that covers a single kernel.
PtxasResources parsePtxasResources(const std::string& log);

}  // namespace attnjit::compiler::cli
