// Pieces shared by the GPU harnesses (AttentionGpu.cpp, ProblemGpu.cpp,
// MlaDecodeGpu.cpp): kernel parameters packed at their exact width, median kernel
// time from CUDA events, and the copy bandwidth the results are compared with.
#pragma once

#include <cstdint>
#include <functional>
#include <variant>

#include "ir/Diagnostics.h"
#include "ir/Types.h"

namespace attnjit::compiler {

// A kernel parameter's value, stored in the exact width its type needs.
struct PackedParameter {
  alignas(8) unsigned char bytes[8] = {};
};

// `value` converted to `type` (f32, f64, i64; every other scalar as i32).
PackedParameter packParameter(const ir::Type& type, const std::variant<int64_t, double>& value);

// Runs `launch` `iterations` times on the default stream, each bracketed by CUDA
// events, and stores the median elapsed time in *medianMs.
ir::Status timeMedian(int iterations, const std::function<ir::Status()>& launch, double* medianMs);

// The copy ceiling for a kernel that must move `minimumBytes`: a device-to-device
// copy of half as many bytes (each read once and written once), timed as
// timeMedian does over `iterations` copies; bytes read + written per second in
// GB/s, or 0 when the buffers cannot be allocated or the timing fails.
double copyCeilingGbPerSecond(double minimumBytes, int iterations);

}  // namespace attnjit::compiler
