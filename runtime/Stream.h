// Streams and events (timing) as small RAII wrappers. Kernels may also be launched on any
// stream the embedding engine owns: StreamHandle is just its CUstream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/Driver.h"

namespace attnjit::runtime {

// Waits for all work queued on `stream` (null = the default stream).
support::Status synchronizeStream(StreamHandle stream);

// Whether `stream` (null = the default stream) is capturing a CUDA graph
// (cuStreamIsCapturing; an invalidated capture counts as capturing): work that
// must synchronize or measure has to wait for a call outside the capture.
support::Expected<bool> streamIsCapturing(StreamHandle stream);

// Queues a copy of `bytes` bytes from `source` to `destination` on `stream`
// (cuMemcpyAsync): each side is device memory or host memory (pinned host memory
// for a copy that overlaps other work and for CUDA-graph capture; pageable memory
// makes the driver stage the copy and return once the host side is read).
support::Status copyAsync(std::uint64_t destination, std::uint64_t source, std::size_t bytes, StreamHandle stream);

// One copy of a batch: `bytes` bytes from `source` to `destination`.
struct CopyRange {
  std::uint64_t destination = 0, source = 0;
  std::size_t bytes = 0;
};

// Whether `address` lies in memory CUDA allocated or registered (device,
// managed, pinned host): not pageable host memory, which a batch of copies
// could read after the call returns.
bool isCudaMemory(std::uint64_t address);

// The ordinal of the device whose memory `address` is, -1 for any other memory
// (host, pinned or pageable, and managed memory).
int deviceMemoryOrdinal(std::uint64_t address);

// The device of the calling thread's current context (-1: none current).
int currentContextDevice();

// Queues `copies` on `stream`, which may run them in any order among
// themselves (so none may read or write bytes another one writes) and whose
// sources are CUDA memory (isCudaMemory: a batch reads its sources in stream
// order, after the call may have returned): one cuMemcpyBatchAsync where the driver has it (CUDA 12.8+) and the stream is
// not capturing a graph, one cuMemcpyAsync per copy otherwise. The batch API
// refuses the legacy default stream (null): there the batch runs on a
// non-blocking stream of the runtime's own (one per context, kept for the
// process), after the caller's earlier work and before its later work
// (two events).
support::Status copyBatchAsync(const std::vector<CopyRange>& copies, StreamHandle stream);

// A non-blocking stream (does not synchronize with the default stream).
class Stream {
 public:
  static support::Expected<Stream> create();

  Stream() = default;
  Stream(Stream&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  StreamHandle handle() const { return handle_; }
  support::Status synchronize() const { return synchronizeStream(handle_); }

 private:
  explicit Stream(StreamHandle handle) : handle_(handle) {}
  void release();
  StreamHandle handle_ = nullptr;
};

// A timing event.
class Event {
 public:
  static support::Expected<Event> create();

  Event() = default;
  Event(Event&& other) noexcept : handle_(other.handle_) { other.handle_ = nullptr; }
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  support::Status record(StreamHandle stream) const;
  support::Status synchronize() const;

  // Milliseconds between two recorded events; waits for `end` to complete.
  static support::Expected<float> elapsedMilliseconds(const Event& start, const Event& end);

 private:
  explicit Event(void* handle) : handle_(handle) {}
  void release();
  void* handle_ = nullptr;
};

}  // namespace attnjit::runtime
