#include "runtime/DeviceBuffer.h"

#include <string>

#include "runtime/DriverInternal.h"

namespace attnjit::runtime {

using namespace cuda;

support::Expected<DeviceBuffer> DeviceBuffer::allocate(std::size_t bytes) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  if (bytes == 0) return runtimeError("cannot allocate a device buffer of 0 bytes");
  // As the CUDA runtime does on first use, and as Bundle::launch does: a thread with no
  // current context gets device 0's primary context, so buffers and launches meet there.
  if (auto context = currentOrPrimaryContext(); !context) return context.status();
  CUdeviceptr address = 0;
  CUresult result = (*apiOr)->cuMemAlloc(&address, bytes);
  if (result != CUDA_SUCCESS) {
    return cudaCallError(**apiOr, result,
                         "allocating " + std::to_string(bytes) + " bytes of device memory (cuMemAlloc)");
  }
  return DeviceBuffer(address, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : address_(other.address_), size_(other.size_) {
  other.address_ = 0;
  other.size_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    address_ = other.address_;
    size_ = other.size_;
    other.address_ = 0;
    other.size_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

void DeviceBuffer::release() {
  if (address_ == 0) return;
  if (auto apiOr = driverApi()) (*apiOr)->cuMemFree(address_);
  address_ = 0;
  size_ = 0;
}

support::Status DeviceBuffer::checkRange(std::size_t offset, std::size_t bytes, const char* what) const {
  if (offset > size_ || bytes > size_ - offset) {
    return runtimeError(std::string(what) + " of " + std::to_string(bytes) + " bytes at offset " +
                        std::to_string(offset) + " is outside the " + std::to_string(size_) +
                        "-byte device buffer");
  }
  return support::Status::ok();
}

namespace {

// The driver's "synchronous" memset and device-to-device copies, and host-to-
// device copies from pageable memory, may return before the device finished
// them; they run on the legacy default stream, which a kernel launched on a
// non-blocking stream does not wait for, so a kernel launched on such a stream
// right after fill() could have the fill's bytes land over its results.
// Waiting for that stream makes the calls complete before returning, as the
// header promises.
support::Status finishLegacyStream(const DriverApi& api, const char* after) {
  CUresult result = api.cuStreamSynchronize(nullptr);
  if (result != CUDA_SUCCESS) return cudaCallError(api, result, std::string("cuStreamSynchronize after ") + after);
  return support::Status::ok();
}

}  // namespace

support::Status DeviceBuffer::copyFromHost(const void* source, std::size_t bytes, std::size_t offset) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  if (support::Status s = checkRange(offset, bytes, "host-to-device copy"); !s) return s;
  CUresult result = (*apiOr)->cuMemcpyHtoD(address_ + offset, source, bytes);
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuMemcpyHtoD");
  return finishLegacyStream(**apiOr, "cuMemcpyHtoD");
}

support::Status DeviceBuffer::copyToHost(void* destination, std::size_t bytes, std::size_t offset) const {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  if (support::Status s = checkRange(offset, bytes, "device-to-host copy"); !s) return s;
  CUresult result = (*apiOr)->cuMemcpyDtoH(destination, address_ + offset, bytes);
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuMemcpyDtoH");
  return support::Status::ok();
}

support::Status DeviceBuffer::copyFrom(const DeviceBuffer& source, std::size_t bytes) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  if (support::Status s = checkRange(0, bytes, "device-to-device copy"); !s) return s;
  if (support::Status s = source.checkRange(0, bytes, "device-to-device copy"); !s) return s;
  CUresult result = (*apiOr)->cuMemcpyDtoD(address_, source.address_, bytes);
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuMemcpyDtoD");
  return finishLegacyStream(**apiOr, "cuMemcpyDtoD");
}

support::Status DeviceBuffer::fill(std::uint8_t value) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  if (address_ == 0) return support::Status::ok();
  CUresult result = (*apiOr)->cuMemsetD8(address_, value, size_);
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuMemsetD8");
  return finishLegacyStream(**apiOr, "cuMemsetD8");
}

}  // namespace attnjit::runtime
