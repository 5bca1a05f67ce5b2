// Device memory for tests, benchmarks and examples: one cuMemAlloc'd block, freed on
// destruction. Engines embedding attnjit bring their own buffers and pass raw addresses.
// Copies and fills are synchronous: each waits for the device to finish it before
// returning, so a kernel launched afterwards on any stream (non-blocking ones
// included) sees the bytes. All calls use the current context.
#pragma once

#include <cstddef>
#include <cstdint>

#include "runtime/Driver.h"

namespace attnjit::runtime {

class DeviceBuffer {
 public:
  // In the calling thread's current context; device 0's primary context is made current
  // first when none is (as the CUDA runtime and Bundle::launch do).
  static support::Expected<DeviceBuffer> allocate(std::size_t bytes);

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  // The device address (a CUdeviceptr), as a kernel parameter expects it.
  std::uint64_t address() const { return address_; }
  // Points at the address, for a kernel-parameter array (params[i] = buffer.kernelArgument()).
  void* kernelArgument() { return &address_; }
  std::size_t size() const { return size_; }

  // Each checks that [offset, offset + bytes) lies inside the buffer.
  support::Status copyFromHost(const void* source, std::size_t bytes, std::size_t offset = 0);
  support::Status copyToHost(void* destination, std::size_t bytes, std::size_t offset = 0) const;
  support::Status copyFrom(const DeviceBuffer& source, std::size_t bytes);
  support::Status fill(std::uint8_t value);

 private:
  DeviceBuffer(std::uint64_t address, std::size_t size) : address_(address), size_(size) {}
  support::Status checkRange(std::size_t offset, std::size_t bytes, const char* what) const;
  void release();

  std::uint64_t address_ = 0;
  std::size_t size_ = 0;
};

}  // namespace attnjit::runtime
