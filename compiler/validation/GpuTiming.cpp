#include "compiler/validation/GpuTiming.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/DeviceBuffer.h"
#include "runtime/Stream.h"

namespace attnjit::validation {

support::Status timeMedian(int iterations, const std::function<support::Status()>& launch, double* medianMs) {
  auto start = runtime::Event::create();
  if (!start) return start.status();
  auto stop = runtime::Event::create();
  if (!stop) return stop.status();
  std::vector<double> times;
  for (int i = 0; i < iterations; ++i) {
    if (support::Status s = start->record(nullptr); !s) return s;
    if (support::Status s = launch(); !s) return s;
    if (support::Status s = stop->record(nullptr); !s) return s;
    auto ms = runtime::Event::elapsedMilliseconds(*start, *stop);
    if (!ms) return ms.status();
    times.push_back(*ms);
  }
  std::sort(times.begin(), times.end());
  *medianMs = times[times.size() / 2];
  return support::Status::ok();
}

double copyCeilingGbPerSecond(double minimumBytes, int iterations) {
  const size_t copyBytes = static_cast<size_t>(minimumBytes / 2) & ~size_t{255};
  if (copyBytes == 0) return 0;
  auto source = runtime::DeviceBuffer::allocate(copyBytes);
  auto destination = runtime::DeviceBuffer::allocate(copyBytes);
  if (!source || !destination) return 0;
  double copyMs = 0;
  if (support::Status s = timeMedian(iterations, [&] { return destination->copyFrom(*source, copyBytes); }, &copyMs);
      !s || copyMs <= 0)
    return 0;
  return 2.0 * static_cast<double>(copyBytes) / (copyMs * 1e6);
}

}  // namespace attnjit::validation
