#include "runtime/Stream.h"

#include <map>
#include <mutex>

#include "runtime/DriverInternal.h"

namespace attnjit::runtime {

using namespace cuda;

support::Status synchronizeStream(StreamHandle stream) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  CUresult result = (*apiOr)->cuStreamSynchronize(static_cast<CUstream>(stream));
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuStreamSynchronize");
  return support::Status::ok();
}

support::Expected<bool> streamIsCapturing(StreamHandle stream) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult result = (*apiOr)->cuStreamIsCapturing(static_cast<CUstream>(stream), &status);
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuStreamIsCapturing");
  return status != CU_STREAM_CAPTURE_STATUS_NONE;
}

support::Status copyAsync(std::uint64_t destination, std::uint64_t source, std::size_t bytes, StreamHandle stream) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  CUresult result = (*apiOr)->cuMemcpyAsync(destination, source, bytes, static_cast<CUstream>(stream));
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuMemcpyAsync");
  return support::Status::ok();
}

bool isCudaMemory(std::uint64_t address) {
  auto apiOr = driverApi();
  if (!apiOr) return false;
  unsigned memoryType = 0;
  return (*apiOr)->cuPointerGetAttribute(&memoryType, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address) == CUDA_SUCCESS;
}

int deviceMemoryOrdinal(std::uint64_t address) {
  auto apiOr = driverApi();
  if (!apiOr) return -1;
  unsigned memoryType = 0;
  int ordinal = -1;
  if ((*apiOr)->cuPointerGetAttribute(&memoryType, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, address) != CUDA_SUCCESS ||
      memoryType != CU_MEMORYTYPE_DEVICE ||
      (*apiOr)->cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, address) != CUDA_SUCCESS)
    return -1;
  return ordinal;
}

int currentContextDevice() {
  auto apiOr = driverApi();
  if (!apiOr) return -1;
  CUdevice device = -1;
  return (*apiOr)->cuCtxGetDevice(&device) == CUDA_SUCCESS ? device : -1;
}

namespace {

// What a batch on the legacy default stream runs through, per context: the
// batch API refuses that stream, so the batch goes to a stream of the
// runtime's own, ordered after the caller's work by one event and before its
// later work by another. The mutex keeps one call's record-wait sequence whole.
struct LegacyStreamDetour {
  CUstream stream = nullptr;
  CUevent callerReached = nullptr, batchDone = nullptr;
};

std::mutex& detourMutex() {
  static std::mutex mutex;
  return mutex;
}

support::Expected<LegacyStreamDetour*> detourForCurrentContext(const DriverApi& api) {
  static std::map<CUcontext, LegacyStreamDetour> detours;  // live as long as the process
  CUcontext context = nullptr;
  if (CUresult r = api.cuCtxGetCurrent(&context); r != CUDA_SUCCESS) return cudaCallError(api, r, "cuCtxGetCurrent");
  LegacyStreamDetour& detour = detours[context];
  if (detour.batchDone != nullptr) return &detour;
  // Made whole or not at all: a failed call leaves nothing half made behind.
  LegacyStreamDetour made;
  CUresult r = api.cuStreamCreate(&made.stream, CU_STREAM_NON_BLOCKING);
  if (r == CUDA_SUCCESS) r = api.cuEventCreate(&made.callerReached, CU_EVENT_DISABLE_TIMING);
  if (r == CUDA_SUCCESS) r = api.cuEventCreate(&made.batchDone, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) {
    if (made.callerReached != nullptr) api.cuEventDestroy(made.callerReached);
    if (made.stream != nullptr) api.cuStreamDestroy(made.stream);
    return cudaCallError(api, r, "creating the batch copies' stream and events");
  }
  detour = made;
  return &detour;
}

support::Status issueBatch(const DriverApi& api, const std::vector<CopyRange>& copies, CUstream stream) {
  std::vector<CUdeviceptr> destinations, sources;
  std::vector<std::size_t> sizes;
  destinations.reserve(copies.size());
  sources.reserve(copies.size());
  sizes.reserve(copies.size());
  for (const CopyRange& copy : copies) {
    destinations.push_back(copy.destination);
    sources.push_back(copy.source);
    sizes.push_back(copy.bytes);
  }
  // One attribute set for every copy: sources read in stream order.
  CUmemcpyAttributes attributes{};
  attributes.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  std::size_t firstCopy = 0;
  CUresult result = CUDA_SUCCESS;
  if (api.cuMemcpyBatchAsync13 != nullptr) {
    result = api.cuMemcpyBatchAsync13(destinations.data(), sources.data(), sizes.data(), copies.size(), &attributes,
                                      &firstCopy, 1, stream);
  } else {
    std::size_t failed = 0;
    result = api.cuMemcpyBatchAsync12(destinations.data(), sources.data(), sizes.data(), copies.size(), &attributes,
                                      &firstCopy, 1, &failed, stream);
  }
  if (result != CUDA_SUCCESS) return cudaCallError(api, result, "cuMemcpyBatchAsync");
  return support::Status::ok();
}

}  // namespace

support::Status copyBatchAsync(const std::vector<CopyRange>& copies, StreamHandle stream) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const DriverApi& api = **apiOr;
  bool batched = copies.size() > 1 && (api.cuMemcpyBatchAsync13 != nullptr || api.cuMemcpyBatchAsync12 != nullptr);
  if (batched) {
    auto capturing = streamIsCapturing(stream);
    if (!capturing) return capturing.status();
    batched = !*capturing;
  }
  if (!batched) {
    for (const CopyRange& copy : copies)
      if (support::Status s = copyAsync(copy.destination, copy.source, copy.bytes, stream); !s) return s;
    return support::Status::ok();
  }
  if (stream != nullptr) return issueBatch(api, copies, static_cast<CUstream>(stream));
  std::lock_guard<std::mutex> lock(detourMutex());
  auto detour = detourForCurrentContext(api);
  if (!detour) return detour.status();
  const LegacyStreamDetour& d = **detour;
  if (CUresult r = api.cuEventRecord(d.callerReached, nullptr); r != CUDA_SUCCESS)
    return cudaCallError(api, r, "cuEventRecord");
  if (CUresult r = api.cuStreamWaitEvent(d.stream, d.callerReached, 0); r != CUDA_SUCCESS)
    return cudaCallError(api, r, "cuStreamWaitEvent");
  if (support::Status s = issueBatch(api, copies, d.stream); !s) return s;
  if (CUresult r = api.cuEventRecord(d.batchDone, d.stream); r != CUDA_SUCCESS)
    return cudaCallError(api, r, "cuEventRecord");
  if (CUresult r = api.cuStreamWaitEvent(nullptr, d.batchDone, 0); r != CUDA_SUCCESS)
    return cudaCallError(api, r, "cuStreamWaitEvent");
  return support::Status::ok();
}

support::Expected<Stream> Stream::create() {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  CUstream stream = nullptr;
  CUresult result = (*apiOr)->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuStreamCreate");
  return Stream(stream);
}

Stream& Stream::operator=(Stream&& other) noexcept {
  if (this != &other) {
    release();
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

Stream::~Stream() { release(); }

void Stream::release() {
  if (handle_ == nullptr) return;
  if (auto apiOr = driverApi()) (*apiOr)->cuStreamDestroy(static_cast<CUstream>(handle_));
  handle_ = nullptr;
}

support::Expected<Event> Event::create() {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  CUevent event = nullptr;
  CUresult result = (*apiOr)->cuEventCreate(&event, CU_EVENT_DEFAULT);
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuEventCreate");
  return Event(event);
}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    release();
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

Event::~Event() { release(); }

void Event::release() {
  if (handle_ == nullptr) return;
  if (auto apiOr = driverApi()) (*apiOr)->cuEventDestroy(static_cast<CUevent>(handle_));
  handle_ = nullptr;
}

support::Status Event::record(StreamHandle stream) const {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  if (handle_ == nullptr) return runtimeError("recording an event that was not created");
  CUresult result = (*apiOr)->cuEventRecord(static_cast<CUevent>(handle_), static_cast<CUstream>(stream));
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuEventRecord");
  return support::Status::ok();
}

support::Status Event::synchronize() const {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  if (handle_ == nullptr) return runtimeError("waiting on an event that was not created");
  CUresult result = (*apiOr)->cuEventSynchronize(static_cast<CUevent>(handle_));
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuEventSynchronize");
  return support::Status::ok();
}

support::Expected<float> Event::elapsedMilliseconds(const Event& start, const Event& end) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  if (start.handle_ == nullptr || end.handle_ == nullptr)
    return runtimeError("timing with an event that was not created");
  if (support::Status s = end.synchronize(); !s) return s;
  float milliseconds = 0;
  CUresult result = (*apiOr)->cuEventElapsedTime(&milliseconds, static_cast<CUevent>(start.handle_),
                                                 static_cast<CUevent>(end.handle_));
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuEventElapsedTime");
  return milliseconds;
}

}  // namespace attnjit::runtime
