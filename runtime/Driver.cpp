#include "runtime/Driver.h"

#include <dlfcn.h>

#include <array>
#include <map>
#include <mutex>
#include <type_traits>

#include "runtime/DriverInternal.h"

namespace attnjit::runtime {
namespace {

using namespace cuda;

struct LoadedDriver {
  support::Status status;
  DriverApi api{};
};

const char* const kDisabledSuffix = "; GPU features are disabled";

// Resolves one entry point with the ABI of kTargetCudaVersion.
template <typename Fn>
support::Status resolve(PfnGetProcAddress getProcAddress, const char* name, Fn& slot) {
  void* pointer = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult result = getProcAddress(name, &pointer, kTargetCudaVersion, CU_GET_PROC_ADDRESS_DEFAULT, &found);
  if (result != CUDA_SUCCESS || found != CU_GET_PROC_ADDRESS_SUCCESS || pointer == nullptr) {
    const char* why = found == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT ? "version not sufficient"
                                                                          : "symbol not found";
    return runtimeError(std::string("CUDA driver is unusable: entry point ") + name + " for CUDA " +
                        std::to_string(kTargetCudaVersion / 1000) + ".0 could not be resolved (" + why +
                        ", CUresult " + std::to_string(result) + ")" + kDisabledSuffix);
  }
  slot = reinterpret_cast<Fn>(pointer);
  return support::Status::ok();
}

LoadedDriver loadDriver(const char* libraryName) {
  LoadedDriver loaded;
  dlerror();
  void* library = dlopen(libraryName, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* reason = dlerror();
    loaded.status = runtimeError(std::string("CUDA driver not available: ") + libraryName +
                                 " could not be loaded (" + (reason ? reason : "unknown reason") + ")" +
                                 kDisabledSuffix);
    return loaded;
  }
  auto getProcAddress = reinterpret_cast<PfnGetProcAddress>(dlsym(library, "cuGetProcAddress_v2"));
  if (getProcAddress == nullptr) {
    dlclose(library);
    loaded.status = runtimeError(std::string("CUDA driver too old: ") + libraryName +
                                 " has no cuGetProcAddress_v2 (a CUDA 12.0 or newer driver is required)" +
                                 kDisabledSuffix);
    return loaded;
  }
  DriverApi& api = loaded.api;
  // The library stays loaded for the life of the process once any entry point is resolved:
  // function pointers into it may be held anywhere.
#define ATTNJIT_RESOLVE(name)                                                        \
  if (support::Status s = resolve(getProcAddress, #name, api.name); !s.isOk()) {              \
    loaded.status = s;                                                               \
    return loaded;                                                                   \
  }
  ATTNJIT_RESOLVE(cuInit)
  ATTNJIT_RESOLVE(cuDriverGetVersion)
  ATTNJIT_RESOLVE(cuGetErrorName)
  ATTNJIT_RESOLVE(cuGetErrorString)
  ATTNJIT_RESOLVE(cuDeviceGetCount)
  ATTNJIT_RESOLVE(cuDeviceGet)
  ATTNJIT_RESOLVE(cuDeviceGetName)
  ATTNJIT_RESOLVE(cuDeviceGetAttribute)
  ATTNJIT_RESOLVE(cuDevicePrimaryCtxRetain)
  ATTNJIT_RESOLVE(cuDevicePrimaryCtxRelease)
  ATTNJIT_RESOLVE(cuCtxSetCurrent)
  ATTNJIT_RESOLVE(cuCtxGetCurrent)
  ATTNJIT_RESOLVE(cuCtxGetDevice)
  ATTNJIT_RESOLVE(cuCtxSynchronize)
  ATTNJIT_RESOLVE(cuLinkCreate)
  ATTNJIT_RESOLVE(cuLinkAddData)
  ATTNJIT_RESOLVE(cuLinkComplete)
  ATTNJIT_RESOLVE(cuLinkDestroy)
  ATTNJIT_RESOLVE(cuModuleLoadData)
  ATTNJIT_RESOLVE(cuModuleUnload)
  ATTNJIT_RESOLVE(cuModuleGetFunction)
  ATTNJIT_RESOLVE(cuFuncGetAttribute)
  ATTNJIT_RESOLVE(cuFuncSetAttribute)
  ATTNJIT_RESOLVE(cuOccupancyMaxActiveBlocksPerMultiprocessor)
  ATTNJIT_RESOLVE(cuLaunchKernel)
  ATTNJIT_RESOLVE(cuMemAlloc)
  ATTNJIT_RESOLVE(cuMemFree)
  ATTNJIT_RESOLVE(cuMemcpyHtoD)
  ATTNJIT_RESOLVE(cuMemcpyDtoH)
  ATTNJIT_RESOLVE(cuMemcpyDtoD)
  ATTNJIT_RESOLVE(cuMemsetD8)
  ATTNJIT_RESOLVE(cuMemcpyAsync)
  ATTNJIT_RESOLVE(cuStreamCreate)
  ATTNJIT_RESOLVE(cuStreamDestroy)
  ATTNJIT_RESOLVE(cuStreamSynchronize)
  ATTNJIT_RESOLVE(cuStreamIsCapturing)
  ATTNJIT_RESOLVE(cuStreamGetCtx)
  ATTNJIT_RESOLVE(cuEventCreate)
  ATTNJIT_RESOLVE(cuEventDestroy)
  ATTNJIT_RESOLVE(cuEventRecord)
  ATTNJIT_RESOLVE(cuEventSynchronize)
  ATTNJIT_RESOLVE(cuStreamWaitEvent)
  ATTNJIT_RESOLVE(cuPointerGetAttribute)
  ATTNJIT_RESOLVE(cuEventElapsedTime)
  ATTNJIT_RESOLVE(cuMemPoolCreate)
  ATTNJIT_RESOLVE(cuMemPoolSetAttribute)
  ATTNJIT_RESOLVE(cuMemAllocFromPoolAsync)
  ATTNJIT_RESOLVE(cuMemFreeAsync)
#undef ATTNJIT_RESOLVE
  // Optional entry points: a driver without them leaves the slot null.
  auto resolveOptional = [&](const char* name, int version, auto& slot) {
    void* pointer = nullptr;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (getProcAddress(name, &pointer, version, CU_GET_PROC_ADDRESS_DEFAULT, &found) == CUDA_SUCCESS &&
        found == CU_GET_PROC_ADDRESS_SUCCESS && pointer != nullptr)
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(pointer);
  };
  resolveOptional("cuMemcpyBatchAsync", 13000, api.cuMemcpyBatchAsync13);
  if (api.cuMemcpyBatchAsync13 == nullptr) resolveOptional("cuMemcpyBatchAsync", 12080, api.cuMemcpyBatchAsync12);
  resolveOptional("cuTensorMapEncodeTiled", 12000, api.cuTensorMapEncodeTiled);
  resolveOptional("cuLaunchKernelEx", 11060, api.cuLaunchKernelEx);

  CUresult result = api.cuInit(0);
  if (result != CUDA_SUCCESS) {
    loaded.status = runtimeError("CUDA driver failed to initialize: cuInit returned " +
                                 describeCudaResult(api, result) + kDisabledSuffix);
  }
  return loaded;
}

const LoadedDriver& processDriver() {
  static std::once_flag once;
  static LoadedDriver driver;
  std::call_once(once, [] { driver = loadDriver("libcuda.so.1"); });
  return driver;
}

// Newest first: {driver version, PTX ISA}. See maxPtxIsaForDriverVersion in Driver.h.
constexpr std::array<std::pair<int, PtxIsaVersion>, 20> kPtxIsaByDriver = {{
    {13000, {9, 0}}, {12090, {8, 8}}, {12080, {8, 7}}, {12070, {8, 6}}, {12060, {8, 5}}, {12050, {8, 5}},
    {12040, {8, 4}}, {12030, {8, 3}}, {12020, {8, 2}}, {12010, {8, 1}}, {12000, {8, 0}}, {11080, {7, 8}},
    {11070, {7, 7}}, {11060, {7, 6}}, {11050, {7, 5}}, {11040, {7, 4}}, {11030, {7, 3}}, {11020, {7, 2}},
    {11010, {7, 1}}, {11000, {7, 0}},
}};

// Device attributes are fixed for the life of the process; reading them is a handful of calls.
support::Expected<int> readAttribute(const DriverApi& api, CUdevice device, CUdevice_attribute attribute,
                            const char* name) {
  int value = 0;
  CUresult result = api.cuDeviceGetAttribute(&value, attribute, device);
  if (result != CUDA_SUCCESS) return cudaCallError(api, result, std::string("cuDeviceGetAttribute(") + name + ")");
  return value;
}

}  // namespace

support::Status runtimeError(std::string message) {
  return support::Status::error(support::Location{"attnjit-runtime", 0, 0}, std::move(message));
}

std::string describeCudaResult(const DriverApi& api, CUresult result) {
  const char* name = nullptr;
  const char* description = nullptr;
  if (api.cuGetErrorName == nullptr || api.cuGetErrorName(result, &name) != CUDA_SUCCESS || name == nullptr) {
    return "CUresult " + std::to_string(result);
  }
  std::string text = name;
  if (api.cuGetErrorString != nullptr && api.cuGetErrorString(result, &description) == CUDA_SUCCESS &&
      description != nullptr) {
    text += std::string(" (") + description + ")";
  }
  return text;
}

support::Status cudaCallError(const DriverApi& api, CUresult result, std::string_view what) {
  return runtimeError(std::string(what) + " failed: " + describeCudaResult(api, result));
}

support::Expected<const DriverApi*> driverApi() {
  const LoadedDriver& driver = processDriver();
  if (!driver.status.isOk()) return driver.status;
  return &driver.api;
}

support::Status probeDriverLibrary(const char* libraryName) { return loadDriver(libraryName).status; }

std::optional<PtxIsaVersion> maxPtxIsaForDriverVersion(int version) {
  for (const auto& [minimumDriver, ptx] : kPtxIsaByDriver) {
    if (version >= minimumDriver) return ptx;
  }
  return std::nullopt;
}

support::Status driverStatus() { return processDriver().status; }

bool driverAvailable() { return processDriver().status.isOk(); }

support::Expected<int> driverVersion() {
  auto api = driverApi();
  if (!api) return api.status();
  int version = 0;
  CUresult result = (*api)->cuDriverGetVersion(&version);
  if (result != CUDA_SUCCESS) return cudaCallError(**api, result, "cuDriverGetVersion");
  return version;
}

support::Expected<PtxIsaVersion> driverMaxPtxIsa() {
  auto version = driverVersion();
  if (!version) return version.status();
  auto ptx = maxPtxIsaForDriverVersion(*version);
  if (!ptx) {
    return runtimeError("CUDA driver " + std::to_string(*version / 1000) + "." +
                        std::to_string(*version % 1000 / 10) +
                        " is too old: attnjit needs a CUDA 11.0 or newer driver (PTX ISA 7.0 for sm_80)");
  }
  return *ptx;
}

support::Expected<int> deviceCount() {
  auto api = driverApi();
  if (!api) return api.status();
  int count = 0;
  CUresult result = (*api)->cuDeviceGetCount(&count);
  if (result != CUDA_SUCCESS) return cudaCallError(**api, result, "cuDeviceGetCount");
  return count;
}

support::Expected<DeviceInfo> deviceInfo(int ordinal) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const DriverApi& api = **apiOr;
  CUdevice device = 0;
  CUresult result = api.cuDeviceGet(&device, ordinal);
  if (result != CUDA_SUCCESS) return cudaCallError(api, result, "cuDeviceGet(" + std::to_string(ordinal) + ")");

  DeviceInfo info;
  info.ordinal = ordinal;
  std::array<char, 256> name{};
  result = api.cuDeviceGetName(name.data(), static_cast<int>(name.size()), device);
  if (result != CUDA_SUCCESS) return cudaCallError(api, result, "cuDeviceGetName");
  info.name = name.data();

  struct Query {
    CUdevice_attribute attribute;
    const char* name;
    int* field;
  };
  const Query queries[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "COMPUTE_CAPABILITY_MAJOR", &info.computeCapabilityMajor},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "COMPUTE_CAPABILITY_MINOR", &info.computeCapabilityMinor},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "MULTIPROCESSOR_COUNT", &info.multiprocessorCount},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK", &info.maxThreadsPerBlock},
      {CU_DEVICE_ATTRIBUTE_WARP_SIZE, "WARP_SIZE", &info.warpSize},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, "MAX_SHARED_MEMORY_PER_BLOCK", &info.maxSharedMemoryPerBlock},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
       &info.maxSharedMemoryPerBlockOptin},
      {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2_CACHE_SIZE", &info.l2CacheBytes},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
       &info.maxSharedMemoryPerMultiprocessor},
      {CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, "RESERVED_SHARED_MEMORY_PER_BLOCK",
       &info.reservedSharedMemoryPerBlock},
  };
  for (const Query& query : queries) {
    auto value = readAttribute(api, device, query.attribute, query.name);
    if (!value) return value.status();
    *query.field = *value;
  }
  return info;
}

namespace {

// Retains the device's primary context once per process (never released, like
// the CUDA runtime does), without making it current.
support::Expected<CUcontext> retainPrimaryContext(const DriverApi& api, int ordinal) {
  static std::mutex mutex;
  static std::map<int, CUcontext> retained;
  CUcontext context = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = retained.find(ordinal);
    if (it != retained.end()) {
      context = it->second;
    } else {
      CUdevice device = 0;
      CUresult result = api.cuDeviceGet(&device, ordinal);
      if (result != CUDA_SUCCESS) return cudaCallError(api, result, "cuDeviceGet(" + std::to_string(ordinal) + ")");
      result = api.cuDevicePrimaryCtxRetain(&context, device);
      if (result != CUDA_SUCCESS) return cudaCallError(api, result, "cuDevicePrimaryCtxRetain");
      retained.emplace(ordinal, context);
    }
  }
  return context;
}

}  // namespace

support::Expected<ContextHandle> activatePrimaryContext(int ordinal) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const DriverApi& api = **apiOr;
  auto retained = retainPrimaryContext(api, ordinal);
  if (!retained) return retained.status();
  CUcontext context = *retained;
  CUresult result = api.cuCtxSetCurrent(context);
  if (result != CUDA_SUCCESS) return cudaCallError(api, result, "cuCtxSetCurrent");
  return static_cast<ContextHandle>(context);
}

support::Expected<ContextHandle> currentOrPrimaryContext() {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  CUcontext context = nullptr;
  CUresult result = (*apiOr)->cuCtxGetCurrent(&context);
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuCtxGetCurrent");
  if (context != nullptr) return static_cast<ContextHandle>(context);
  return activatePrimaryContext(0);
}

support::Status makeContextCurrent(ContextHandle context) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  CUresult result = (*apiOr)->cuCtxSetCurrent(static_cast<CUcontext>(context));
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuCtxSetCurrent");
  return support::Status::ok();
}

support::Expected<ContextHandle> streamContext(StreamHandle stream, int defaultOrdinal) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const DriverApi& api = **apiOr;
  // CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) name the current
  // context's default streams, as null does.
  const auto handle = reinterpret_cast<uintptr_t>(stream);
  if (handle <= 2) {
    CUcontext current = nullptr;
    if (CUresult result = api.cuCtxGetCurrent(&current); result != CUDA_SUCCESS)
      return cudaCallError(api, result, "cuCtxGetCurrent");
    if (current != nullptr) return static_cast<ContextHandle>(current);
    auto primary = retainPrimaryContext(api, defaultOrdinal);
    if (!primary) return primary.status();
    return static_cast<ContextHandle>(*primary);
  }
  CUcontext context = nullptr;
  if (CUresult result = api.cuStreamGetCtx(static_cast<CUstream>(stream), &context); result != CUDA_SUCCESS)
    return cudaCallError(api, result, "cuStreamGetCtx (is the stream a live CUDA stream?)");
  return static_cast<ContextHandle>(context);
}

support::Expected<ScopedContext> ScopedContext::enter(ContextHandle context) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const DriverApi& api = **apiOr;
  CUcontext previous = nullptr;
  if (CUresult result = api.cuCtxGetCurrent(&previous); result != CUDA_SUCCESS)
    return cudaCallError(api, result, "cuCtxGetCurrent");
  if (previous == static_cast<CUcontext>(context)) return ScopedContext(previous, false);
  if (CUresult result = api.cuCtxSetCurrent(static_cast<CUcontext>(context)); result != CUDA_SUCCESS)
    return cudaCallError(api, result, "cuCtxSetCurrent");
  return ScopedContext(previous, true);
}

ScopedContext::ScopedContext(ScopedContext&& other) noexcept
    : previous_(other.previous_), switched_(other.switched_) {
  other.switched_ = false;
}

ScopedContext::~ScopedContext() {
  if (!switched_) return;
  // Restoring a context that was current a moment ago cannot fail short of a
  // driver teardown, and there is no caller to tell in a destructor.
  if (auto apiOr = driverApi()) (void)(*apiOr)->cuCtxSetCurrent(static_cast<CUcontext>(previous_));
}

support::Status synchronizeContext() {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  CUresult result = (*apiOr)->cuCtxSynchronize();
  if (result != CUDA_SUCCESS) return cudaCallError(**apiOr, result, "cuCtxSynchronize");
  return support::Status::ok();
}

}  // namespace attnjit::runtime
