// Pieces shared by the GPU harnesses (AttentionGpu.cpp, ProblemGpu.cpp): kernel
// parameters packed at their exact width, and median kernel time from CUDA events.
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

}  // namespace attnjit::compiler
