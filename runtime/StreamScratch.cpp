#include "runtime/StreamScratch.h"

#include <map>
#include <mutex>
#include <string>

#include "runtime/DriverInternal.h"

namespace attnjit::runtime {

using namespace cuda;

namespace {

// The pool of `device`, created on first use; an error (kept, so later calls
// fail fast) when the device has no memory pools.
support::Expected<CUmemoryPool> poolOf(const DriverApi& api, CUdevice device) {
  static std::mutex mutex;
  static std::map<CUdevice, support::Expected<CUmemoryPool>> pools;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto found = pools.find(device); found != pools.end()) return found->second;
  auto create = [&]() -> support::Expected<CUmemoryPool> {
    int supported = 0;
    CUresult result = api.cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, device);
    if (result != CUDA_SUCCESS) return cudaCallError(api, result, "asking whether the device has memory pools");
    if (supported == 0)
      return runtimeError("device " + std::to_string(device) +
                          " has no stream-ordered allocator (CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED is 0)");
    CUmemPoolProps props{};
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location = {CU_MEM_LOCATION_TYPE_DEVICE, device};
    CUmemoryPool pool = nullptr;
    result = api.cuMemPoolCreate(&pool, &props);
    if (result != CUDA_SUCCESS) return cudaCallError(api, result, "creating the scratch memory pool (cuMemPoolCreate)");
    cuuint64_t threshold = kStreamScratchRetainedBytes;
    result = api.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
    if (result != CUDA_SUCCESS)
      return cudaCallError(api, result, "setting the scratch pool's release threshold (cuMemPoolSetAttribute)");
    return pool;
  };
  return pools.emplace(device, create()).first->second;
}

}  // namespace

support::Expected<std::uint64_t> allocateStreamScratch(std::size_t bytes, StreamHandle stream) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const DriverApi& api = **apiOr;
  if (bytes == 0) return runtimeError("cannot allocate 0 bytes of scratch");
  if (auto context = currentOrPrimaryContext(); !context) return context.status();
  CUdevice device = 0;
  if (CUresult result = api.cuCtxGetDevice(&device); result != CUDA_SUCCESS)
    return cudaCallError(api, result, "cuCtxGetDevice");
  auto pool = poolOf(api, device);
  if (!pool) return pool.status();
  CUdeviceptr address = 0;
  if (CUresult result = api.cuMemAllocFromPoolAsync(&address, bytes, *pool, static_cast<CUstream>(stream));
      result != CUDA_SUCCESS)
    return cudaCallError(api, result,
                         "allocating " + std::to_string(bytes) + " bytes of scratch (cuMemAllocFromPoolAsync)");
  return std::uint64_t{address};
}

support::Status releaseStreamScratch(std::uint64_t address, StreamHandle stream) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  if (CUresult result = (*apiOr)->cuMemFreeAsync(address, static_cast<CUstream>(stream)); result != CUDA_SUCCESS)
    return cudaCallError(**apiOr, result, "freeing scratch (cuMemFreeAsync)");
  return support::Status::ok();
}

}  // namespace attnjit::runtime
