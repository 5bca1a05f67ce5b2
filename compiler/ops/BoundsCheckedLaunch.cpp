#include "compiler/ops/BoundsCheckedLaunch.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "runtime/DeviceBuffer.h"
#include "runtime/Stream.h"

namespace attnjit::ops {

using support::Status;

bool boundsCheckFromEnvironment() {
  static const bool enabled = [] {
    const char* value = std::getenv("ATTNJIT_CHECK_BOUNDS");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return enabled;
}

support::Status runBoundsChecked(const compiler::BoundsCheckContext& context, runtime::StreamHandle stream,
                        const std::function<support::Status(uint64_t record)>& launch) {
  // One record buffer per context, never freed (contexts of the primary device
  // live as long as the process); the lock serializes checked calls, which share it.
  static std::mutex mutex;
  // Never destroyed: freeing device memory during static destruction could
  // outlive the driver.
  static auto* records = new std::map<runtime::ContextHandle, runtime::DeviceBuffer>;
  std::lock_guard<std::mutex> lock(mutex);
  auto contextHandle = runtime::currentOrPrimaryContext();
  if (!contextHandle) return contextHandle.status();
  auto it = records->find(*contextHandle);
  if (it == records->end()) {
    auto buffer = runtime::DeviceBuffer::allocate(compiler::kBoundsRecordInts * sizeof(int32_t));
    if (!buffer) return buffer.status();
    it = records->emplace(*contextHandle, std::move(*buffer)).first;
  }
  runtime::DeviceBuffer& record = it->second;
  // The caller's stream may be non-blocking, so nothing orders it with the
  // zeroing (cuMemsetD8, on the default stream): wait for the stream's earlier
  // work, zero, and wait for the zeroing before launching.
  if (support::Status s = runtime::synchronizeStream(stream); !s) return s;
  if (support::Status s = record.fill(0); !s) return s;
  if (support::Status s = runtime::synchronizeContext(); !s) return s;
  if (support::Status s = launch(record.address()); !s) return s;
  if (support::Status s = runtime::synchronizeStream(stream); !s) return s;
  int32_t values[compiler::kBoundsRecordInts] = {};
  if (support::Status s = record.copyToHost(values, sizeof values); !s) return s;
  const std::string message = compiler::describeBoundsViolation(values, context);
  return message.empty() ? support::Status::ok() : support::Status::error({}, message);
}

}  // namespace attnjit::ops
