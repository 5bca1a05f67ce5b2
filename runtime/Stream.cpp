#include "runtime/Stream.h"

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
