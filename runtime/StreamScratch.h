// Scratch memory the runtime owns, for op calls that bring no workspace: a
// split-KV launch takes its partial results from here, so that an engine that
// passes no workspace still gets a plan that fills the GPU.
//
// Allocations are stream-ordered (cuMemAllocFromPoolAsync before the launches,
// cuMemFreeAsync after them, both on the call's stream): no host
// synchronization, and memory freed by one call is reused by the next without
// going back to the driver. Each device gets one memory pool, created on first
// use and kept for the life of the process; it holds on to up to
// kStreamScratchRetainedBytes of freed memory between synchronizations and
// returns the rest to the device.
//
// Inside a CUDA-graph capture the same calls become the graph's allocation and
// free nodes (the memory belongs to the graph, not to the pool), so a captured
// call stays valid for every replay.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/Driver.h"

namespace attnjit::runtime {

inline constexpr std::uint64_t kStreamScratchRetainedBytes = std::uint64_t{256} << 20;

// `bytes` of device memory usable by work queued on `stream` after this call, in
// the current context's device (device 0's primary context when none is
// current). An error when the driver has no stream-ordered allocator for the
// device or the device is out of memory; callers then plan without scratch.
support::Expected<std::uint64_t> allocateStreamScratch(std::size_t bytes, StreamHandle stream);

// Returns an allocation of allocateStreamScratch once the work queued on
// `stream` so far has finished with it.
support::Status releaseStreamScratch(std::uint64_t address, StreamHandle stream);

}  // namespace attnjit::runtime
