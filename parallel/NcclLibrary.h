// NCCL, loaded at run time with dlopen("libnccl.so.2") like the CUDA driver
// (runtime/Driver.cpp), so that building attnjit needs no NCCL and a process
// without it gets a clear error instead of a failed link. The few declarations
// below are NCCL's stable C ABI (nccl.h, 2.x): an opaque communicator, a
// 128-byte unique id, int result codes and the byte data type.
#pragma once

#include <cstddef>

#include "support/Diagnostics.h"

namespace attnjit::parallel::nccl {

using Result = int;         // ncclResult_t; 0 = ncclSuccess
using Comm = struct ncclComm*;  // ncclComm_t
inline constexpr int kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
struct UniqueId {
  char internal[kUniqueIdBytes];
};  // ncclUniqueId, passed by value
inline constexpr int kUint8 = 1;  // ncclUint8: collectives here move raw bytes

struct Api {
  Result (*getUniqueId)(UniqueId*) = nullptr;
  Result (*commInitRank)(Comm*, int numRanks, UniqueId id, int rank) = nullptr;
  Result (*commDestroy)(Comm) = nullptr;
  Result (*allGather)(const void* send, void* receive, std::size_t sendCount, int dataType, Comm,
                      void* stream) = nullptr;
  Result (*groupStart)() = nullptr;
  Result (*groupEnd)() = nullptr;
  const char* (*getErrorString)(Result) = nullptr;
  const char* (*getLastError)(Comm) = nullptr;  // may be null (older NCCL)
};

// The process's NCCL, loaded once (thread-safe); the error says what is missing.
support::Expected<const Api*> api();

// "ncclAllGather: unhandled cuda error (last error: ...)" for a failed call.
support::Status check(Result result, const char* call, Comm comm = nullptr);

}  // namespace attnjit::parallel::nccl
