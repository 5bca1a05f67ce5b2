// The op-level APIs' memo of loaded kernels: kernel name and the calling thread's
// current context → the kernel loaded there, with what a launch needs. The JIT
// behind it (compiler/driver/Jit.h) would re-run the tile-IR passes (milliseconds) to
// make its cache key; this keeps an op's steady-state cost at one lookup. Kernels
// compile for device 0's target, read without switching the caller's context.
#pragma once

#include <memory>
#include <string>

#include "compiler/driver/Jit.h"

namespace attnjit::ops {

struct ReadyKernel {
  std::shared_ptr<const runtime::LoadedKernel> loaded;
  int numThreads = 0;
  int sharedBytes = 0;
};

// `name` must identify what `build` makes (a kernel name does: it spells every
// option). Thread-safe; the first call for a name and context compiles or loads.
support::Expected<ReadyKernel> readyKernel(const std::string& name, const compiler::KernelFactory& build);

}  // namespace attnjit::ops
