// Timing for the GPU runners (AttentionGpu.cpp, ProblemGpu.cpp, MlaDecodeGpu.cpp):
// median kernel time from CUDA events, and the copy bandwidth the results are
// compared with.
#pragma once

#include <cstdint>
#include <functional>
#include <variant>

#include "support/Diagnostics.h"
#include "ir/Types.h"

namespace attnjit::validation {

// Runs `launch` `iterations` times on the default stream, each bracketed by CUDA
// events, and stores the median elapsed time in *medianMs.
support::Status timeMedian(int iterations, const std::function<support::Status()>& launch, double* medianMs);

// The copy ceiling for a kernel that must move `minimumBytes`: a device-to-device
// copy of half as many bytes (each read once and written once), timed as
// timeMedian does over `iterations` copies; bytes read + written per second in
// GB/s, or 0 when the buffers cannot be allocated or the timing fails.
double copyCeilingGbPerSecond(double minimumBytes, int iterations);

}  // namespace attnjit::validation
