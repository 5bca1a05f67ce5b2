#include "compiler/GpuLaunchSupport.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Stream.h"

namespace attnjit::compiler {

PackedParameter packParameter(const ir::Type& type, const std::variant<int64_t, double>& value) {
  PackedParameter p;
  const double asDouble = std::holds_alternative<double>(value) ? std::get<double>(value)
                                                                : static_cast<double>(std::get<int64_t>(value));
  const int64_t asInt = std::holds_alternative<int64_t>(value) ? std::get<int64_t>(value)
                                                               : static_cast<int64_t>(std::get<double>(value));
  switch (type.scalarKind()) {
    case ir::ScalarKind::F32: {
      const float f = static_cast<float>(asDouble);
      std::memcpy(p.bytes, &f, sizeof f);
      break;
    }
    case ir::ScalarKind::F64: std::memcpy(p.bytes, &asDouble, sizeof asDouble); break;
    case ir::ScalarKind::I64: std::memcpy(p.bytes, &asInt, sizeof asInt); break;
    default: {
      const int32_t i = static_cast<int32_t>(asInt);
      std::memcpy(p.bytes, &i, sizeof i);
      break;
    }
  }
  return p;
}

ir::Status timeMedian(int iterations, const std::function<ir::Status()>& launch, double* medianMs) {
  auto start = runtime::Event::create();
  if (!start) return start.status();
  auto stop = runtime::Event::create();
  if (!stop) return stop.status();
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    if (ir::Status s = start->record(nullptr); !s) return s;
    if (ir::Status s = launch(); !s) return s;
    if (ir::Status s = stop->record(nullptr); !s) return s;
    auto ms = runtime::Event::elapsedMilliseconds(*start, *stop);
    if (!ms) return ms.status();
    times.push_back(*ms);
  }
  std::sort(times.begin(), times.end());
  *medianMs = times[times.size() / 2];
  return ir::Status::ok();
}

double copyCeilingGbPerSecond(double minimumBytes, int iterations) {
  const size_t copyBytes = static_cast<size_t>(minimumBytes / 2) & ~size_t{255};
  if (copyBytes == 0) return 0;
  auto source = runtime::DeviceBuffer::allocate(copyBytes);
  auto destination = runtime::DeviceBuffer::allocate(copyBytes);
  if (!source || !destination) return 0;
  double copyMs = 0;
  if (ir::Status s = timeMedian(iterations, [&] { return destination->copyFrom(*source, copyBytes); }, &copyMs);
      !s || copyMs <= 0)
    return 0;
  return 2.0 * static_cast<double>(copyBytes) / (copyMs * 1e6);
}

}  // namespace attnjit::compiler
