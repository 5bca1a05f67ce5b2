// Op-level support for bounds-checked kernels (compiler/kernels/BoundsCheck.h):
// the ATTNJIT_CHECK_BOUNDS switch and the launch of a checked kernel with its
// violation record.
//
// Checked mode is for debugging, not for serving: the first checked call in a
// context allocates a small device record buffer (kept for the process), and
// every checked call zeroes it, launches, synchronizes the caller's stream and
// reads the record back. It therefore cannot be captured in a CUDA graph, and
// checked calls are serialized process-wide (they share the record buffers).
#pragma once

#include <cstdint>
#include <functional>

#include "compiler/kernels/BoundsCheck.h"
#include "support/Diagnostics.h"
#include "runtime/Driver.h"

namespace attnjit::ops {

// True when the environment variable ATTNJIT_CHECK_BOUNDS is "1" (read once per
// process): every op call then runs the checked kernel variant.
bool boundsCheckFromEnvironment();

// Runs `launch(record)` (which launches the checked kernels on `stream`, passing
// `record` as their bounds_record) with the current context's record buffer
// zeroed, waits for `stream`, and returns the recorded violation as an error
// (describeBoundsViolation's message), or ok.
support::Status runBoundsChecked(const compiler::BoundsCheckContext& context, runtime::StreamHandle stream,
                            const std::function<support::Status(uint64_t record)>& launch);

}  // namespace attnjit::ops
