// The op-level APIs' memo of loaded kernels: kernel name and the calling thread's
// current context → the kernel loaded there, with what a launch needs. The JIT
// behind it (compiler/driver/Jit.h) would re-run the tile-IR passes (milliseconds) to
// make its cache key; this keeps an op's steady-state cost at one lookup. Kernels
// compile for the target of that context's device.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compiler/driver/Jit.h"
#include "runtime/Module.h"

namespace attnjit::ops {

struct ReadyKernel {
  std::shared_ptr<const runtime::LoadedKernel> loaded;
  int numThreads = 0;
  int sharedBytes = 0;
  // CTAs of numThreads threads with sharedBytes of dynamic shared memory one SM
  // holds at once (registers and shared memory against the SM's limits).
  int residentCtasPerSm = 0;
  // The kernel waits for the kernel before it in the stream (its target has
  // grid dependency control), so it may be launched as a programmatic dependent
  // (runtime::LaunchConfig::overlapPriorGrid).
  bool overlapsPriorGrid = false;

  // A launch of this kernel over `grid` on `stream`: its threads, its dynamic
  // shared memory and, where it waits for its predecessor, the overlap with it.
  runtime::LaunchConfig launchConfig(runtime::Dim3 grid, runtime::StreamHandle stream) const {
    runtime::LaunchConfig launch;
    launch.grid = grid;
    launch.block = {static_cast<unsigned>(numThreads), 1, 1};
    launch.dynamicSharedBytes = static_cast<unsigned>(sharedBytes);
    launch.stream = stream;
    launch.overlapPriorGrid = overlapsPriorGrid;
    return launch;
  }
};

// `name` must identify what `build` makes (a kernel name does: it spells every
// option). Thread-safe; the first call for a name and context compiles or loads.
support::Expected<ReadyKernel> readyKernel(const std::string& name, const compiler::KernelFactory& build);

// A kernel a warm-up makes ready: its name and what builds it.
struct WarmupKernel {
  std::string name;
  compiler::KernelFactory build;
};

// readyKernel for each kernel on up to `threads` threads (0: every core), in
// the calling thread's current context (device 0's primary when none is): each
// kernel's outcome, by index (an error names the kernel).
std::vector<support::Status> readyEachKernel(const std::vector<WarmupKernel>& kernels, int threads);

// readyKernel for each kernel on up to `threads` threads (0: every core),
// in the calling thread's current context (device 0's primary when none is):
// what the ops' warm-up functions run. The number made ready, or the first
// error (by index) with the kernel's name.
support::Expected<int> readyKernels(const std::vector<WarmupKernel>& kernels, int threads);

}  // namespace attnjit::ops
