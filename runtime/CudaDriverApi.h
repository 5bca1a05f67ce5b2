// The slice of the CUDA driver API that attnjit uses, declared here so the project builds
// without CUDA headers. PRIVATE to runtime/: nothing outside runtime/*.cpp includes it.
//
// Every value below is copied from cuda.h of CUDA 13.0 (and unchanged since CUDA 12.0).
// Every function-pointer type is the ABI that cuGetProcAddress returns when asked for
// kTargetCudaVersion = 12000: the names in comments are the matching cudaTypedefs.h typedefs.
// That choice matters: for example the 13.0 ABI of cuCtxSynchronize takes a context and the
// 12.0 one takes none, so a pointer resolved for one version must be called with its signature.
// Targeting 12.0 makes the same binary work with every 12.x and 13.x driver.
#pragma once

#include <cstddef>
#include <cstdint>

namespace attnjit::runtime::cuda {

// The CUDA version whose entry-point ABIs we request from cuGetProcAddress.
inline constexpr int kTargetCudaVersion = 12000;

using CUresult = int;
inline constexpr CUresult CUDA_SUCCESS = 0;
inline constexpr CUresult CUDA_ERROR_INVALID_VALUE = 1;
inline constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
inline constexpr CUresult CUDA_ERROR_NOT_INITIALIZED = 3;
inline constexpr CUresult CUDA_ERROR_NO_DEVICE = 100;
inline constexpr CUresult CUDA_ERROR_INVALID_DEVICE = 101;
inline constexpr CUresult CUDA_ERROR_INVALID_IMAGE = 200;
inline constexpr CUresult CUDA_ERROR_INVALID_CONTEXT = 201;
inline constexpr CUresult CUDA_ERROR_NO_BINARY_FOR_GPU = 209;
inline constexpr CUresult CUDA_ERROR_INVALID_PTX = 218;
inline constexpr CUresult CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222;
inline constexpr CUresult CUDA_ERROR_NOT_FOUND = 500;
inline constexpr CUresult CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701;

using CUdevice = int;                    // CUdevice_v1
using CUdeviceptr = unsigned long long;  // CUdeviceptr_v2 (64-bit hosts)
using cuuint64_t = std::uint64_t;
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
struct CUlinkState_st;
struct CUmemPoolHandle_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;
using CUlinkState = CUlinkState_st*;
using CUmemoryPool = CUmemPoolHandle_st*;

// CUdevice_attribute (only the ones we read).
enum CUdevice_attribute : int {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK = 111,
  CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115,
};

// CUfunction_attribute.
enum CUfunction_attribute : int {
  CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2,
  CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
  CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
  CU_FUNC_ATTRIBUTE_PTX_VERSION = 5,
  CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH = 11,
  CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT = 12,
  CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH = 13,
  CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14,
};

// CUjit_option (only the ones we pass).
enum CUjit_option : int {
  CU_JIT_MAX_REGISTERS = 0,
  CU_JIT_WALL_TIME = 2,
  CU_JIT_INFO_LOG_BUFFER = 3,
  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  CU_JIT_OPTIMIZATION_LEVEL = 7,
  CU_JIT_TARGET_FROM_CUCONTEXT = 8,
  CU_JIT_TARGET = 9,
  CU_JIT_GENERATE_LINE_INFO = 13,
  CU_JIT_LOG_VERBOSE = 12,
};

// CUjit_target is the SM number (80, 90, ...); arch-specific targets (sm_90a) add this base.
inline constexpr int CU_COMPUTE_ACCELERATED_TARGET_BASE = 0x10000;

// CUjitInputType.
enum CUjitInputType : int {
  CU_JIT_INPUT_CUBIN = 0,
  CU_JIT_INPUT_PTX = 1,
};

// CUdriverProcAddress_flags and CUdriverProcAddressQueryResult.
inline constexpr cuuint64_t CU_GET_PROC_ADDRESS_DEFAULT = 0;
enum CUdriverProcAddressQueryResult : int {
  CU_GET_PROC_ADDRESS_SUCCESS = 0,
  CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2,
};

// Stream-ordered allocation (CUmemPoolProps_v1 and the values we set in it).
inline constexpr int CU_MEM_ALLOCATION_TYPE_PINNED = 0x1;
inline constexpr int CU_MEM_LOCATION_TYPE_DEVICE = 0x1;
inline constexpr int CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4;  // value type cuuint64_t
struct CUmemLocation {
  int type;  // CUmemLocationType
  int id;    // the device ordinal for CU_MEM_LOCATION_TYPE_DEVICE
};
struct CUmemPoolProps {
  int allocType;    // CUmemAllocationType
  int handleTypes;  // CUmemAllocationHandleType: 0, no export
  CUmemLocation location;
  void* win32SecurityAttributes;
  std::size_t maxSize;  // 0: the system's default
  unsigned short usage;
  unsigned char reserved[54];
};
static_assert(sizeof(CUmemPoolProps) == 88, "CUmemPoolProps_v1 is 88 bytes in cuda.h");

// Batched copies (CUmemcpyAttributes_v1, CUDA 12.8 and later).
inline constexpr int CU_MEMCPY_SRC_ACCESS_ORDER_STREAM = 0x1;
struct CUmemcpyAttributes {
  int srcAccessOrder;  // CUmemcpySrcAccessOrder
  CUmemLocation srcLocHint;
  CUmemLocation dstLocHint;
  unsigned flags;  // CUmemcpyFlags
};
static_assert(sizeof(CUmemcpyAttributes) == 24, "CUmemcpyAttributes_v1 is 24 bytes in cuda.h");
// The two ABIs of cuMemcpyBatchAsync: CUDA 13.0's (PFN_cuMemcpyBatchAsync_v13000) and
// 12.8's, which reports the failing copy's index (PFN_cuMemcpyBatchAsync_v12080).
using PfnMemcpyBatchAsync13 = CUresult (*)(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes,
                                           std::size_t count, CUmemcpyAttributes* attrs, std::size_t* attrsIdxs,
                                           std::size_t numAttrs, CUstream stream);
using PfnMemcpyBatchAsync12 = CUresult (*)(CUdeviceptr* dsts, CUdeviceptr* srcs, std::size_t* sizes,
                                           std::size_t count, CUmemcpyAttributes* attrs, std::size_t* attrsIdxs,
                                           std::size_t numAttrs, std::size_t* failIdx, CUstream stream);

// Tensor maps (TMA descriptors, sm_90 and newer): 128 opaque bytes, 64-byte aligned.
using cuuint32_t = std::uint32_t;
struct alignas(64) CUtensorMap {
  cuuint64_t opaque[16];
};
enum CUtensorMapDataType : int {
  CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0,
  CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1,
  CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6,
  CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7,
  CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9,
};
enum CUtensorMapInterleave : int { CU_TENSOR_MAP_INTERLEAVE_NONE = 0 };
enum CUtensorMapSwizzle : int {
  CU_TENSOR_MAP_SWIZZLE_NONE = 0,
  CU_TENSOR_MAP_SWIZZLE_32B = 1,
  CU_TENSOR_MAP_SWIZZLE_64B = 2,
  CU_TENSOR_MAP_SWIZZLE_128B = 3,
};
enum CUtensorMapL2promotion : int { CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2 };
enum CUtensorMapFloatOOBfill : int { CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0 };
// PFN_cuTensorMapEncodeTiled_v12000.
using PfnTensorMapEncodeTiled = CUresult (*)(CUtensorMap* tensorMap, CUtensorMapDataType dataType,
                                             cuuint32_t rank, void* globalAddress, const cuuint64_t* globalDim,
                                             const cuuint64_t* globalStrides, const cuuint32_t* boxDim,
                                             const cuuint32_t* elementStrides, CUtensorMapInterleave interleave,
                                             CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
                                             CUtensorMapFloatOOBfill oobFill);

// cuLaunchKernelEx's configuration (CUlaunchConfig, CUlaunchAttribute), only
// the attribute attnjit sets: CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
// whose value is an int (programmaticStreamSerializationAllowed) at the start of
// the 64-byte value union.
enum CUlaunchAttributeID : int { CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6 };
struct CUlaunchAttribute {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  union {
    char bytes[64];
    int programmaticStreamSerializationAllowed;
  } value;
};
static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute is 72 bytes in cuda.h");
struct CUlaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned numAttrs;
};
static_assert(sizeof(CUlaunchConfig) == 56, "CUlaunchConfig is 56 bytes in cuda.h");
// PFN_cuLaunchKernelEx_v11060.
using PfnLaunchKernelEx = CUresult (*)(const CUlaunchConfig* config, CUfunction function, void** params,
                                       void** extra);

inline constexpr unsigned CU_STREAM_NON_BLOCKING = 0x1;
enum CUstreamCaptureStatus : int {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2,
};
inline constexpr unsigned CU_EVENT_DEFAULT = 0x0;
inline constexpr unsigned CU_EVENT_DISABLE_TIMING = 0x2;
inline constexpr int CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2;  // CUpointer_attribute, value: unsigned CUmemorytype
inline constexpr int CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;  // value: int
inline constexpr unsigned CU_MEMORYTYPE_DEVICE = 2;

// The driver's entry points with the 12.0 ABI (cudaTypedefs.h name in the comment).
// PFN_cuGetProcAddress_v12000: the one symbol we take from dlsym ("cuGetProcAddress_v2").
using PfnGetProcAddress = CUresult (*)(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags,
                                       CUdriverProcAddressQueryResult* symbolStatus);

struct DriverApi {
  CUresult (*cuInit)(unsigned flags);                                                // v2000
  CUresult (*cuDriverGetVersion)(int* version);                                      // v2020
  CUresult (*cuGetErrorName)(CUresult error, const char** str);                      // v6000
  CUresult (*cuGetErrorString)(CUresult error, const char** str);                    // v6000
  CUresult (*cuDeviceGetCount)(int* count);                                          // v2000
  CUresult (*cuDeviceGet)(CUdevice* device, int ordinal);                            // v2000
  CUresult (*cuDeviceGetName)(char* name, int length, CUdevice device);              // v2000
  CUresult (*cuDeviceGetAttribute)(int* value, CUdevice_attribute attr, CUdevice device);  // v2000
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext* context, CUdevice device);         // v7000
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice device);                            // v11000
  CUresult (*cuCtxSetCurrent)(CUcontext context);                                    // v4000
  CUresult (*cuCtxGetCurrent)(CUcontext* context);                                   // v4000
  CUresult (*cuCtxGetDevice)(CUdevice* device);                                      // v2000
  CUresult (*cuCtxSynchronize)();                                                    // v2000
  CUresult (*cuLinkCreate)(unsigned numOptions, CUjit_option* options, void** values,
                           CUlinkState* state);                                      // v6050
  CUresult (*cuLinkAddData)(CUlinkState state, CUjitInputType type, void* data, std::size_t size,
                            const char* name, unsigned numOptions, CUjit_option* options,
                            void** values);                                          // v6050
  CUresult (*cuLinkComplete)(CUlinkState state, void** cubin, std::size_t* size);    // v5050
  CUresult (*cuLinkDestroy)(CUlinkState state);                                      // v5050
  CUresult (*cuModuleLoadData)(CUmodule* module, const void* image);                 // v2000
  CUresult (*cuModuleUnload)(CUmodule module);                                       // v2000
  CUresult (*cuModuleGetFunction)(CUfunction* function, CUmodule module, const char* name);  // v2000
  CUresult (*cuFuncGetAttribute)(int* value, CUfunction_attribute attr, CUfunction function);  // v2020
  CUresult (*cuFuncSetAttribute)(CUfunction function, CUfunction_attribute attr, int value);   // v9000
  CUresult (*cuOccupancyMaxActiveBlocksPerMultiprocessor)(int* blocks, CUfunction function, int blockSize,
                                                          std::size_t dynamicSharedBytes);  // v6050
  CUresult (*cuLaunchKernel)(CUfunction function, unsigned gridX, unsigned gridY, unsigned gridZ,
                             unsigned blockX, unsigned blockY, unsigned blockZ, unsigned sharedBytes,
                             CUstream stream, void** params, void** extra);          // v4000
  CUresult (*cuMemAlloc)(CUdeviceptr* pointer, std::size_t bytes);                   // v3020
  CUresult (*cuMemFree)(CUdeviceptr pointer);                                        // v3020
  CUresult (*cuMemcpyHtoD)(CUdeviceptr dst, const void* src, std::size_t bytes);     // v3020
  CUresult (*cuMemcpyDtoH)(void* dst, CUdeviceptr src, std::size_t bytes);           // v3020
  CUresult (*cuMemcpyDtoD)(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes);     // v3020
  CUresult (*cuMemsetD8)(CUdeviceptr dst, unsigned char value, std::size_t count);   // v3020
  // Unified addressing: host or device on either side, the kind inferred from the pointers.
  CUresult (*cuMemcpyAsync)(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream stream);  // v4000
  CUresult (*cuStreamCreate)(CUstream* stream, unsigned flags);                      // v2000
  CUresult (*cuStreamDestroy)(CUstream stream);                                      // v4000
  CUresult (*cuStreamSynchronize)(CUstream stream);                                  // v2000
  CUresult (*cuStreamIsCapturing)(CUstream stream, CUstreamCaptureStatus* status);   // v10000
  CUresult (*cuStreamGetCtx)(CUstream stream, CUcontext* context);                   // v9020
  CUresult (*cuEventCreate)(CUevent* event, unsigned flags);                         // v2000
  CUresult (*cuEventDestroy)(CUevent event);                                         // v4000
  CUresult (*cuEventRecord)(CUevent event, CUstream stream);                         // v2000
  CUresult (*cuEventSynchronize)(CUevent event);                                     // v2000
  CUresult (*cuStreamWaitEvent)(CUstream stream, CUevent event, unsigned flags);     // v3020
  CUresult (*cuPointerGetAttribute)(void* data, int attribute, CUdeviceptr pointer);  // v4000
  CUresult (*cuEventElapsedTime)(float* milliseconds, CUevent start, CUevent end);   // v2000
  CUresult (*cuMemPoolCreate)(CUmemoryPool* pool, const CUmemPoolProps* props);     // v11020
  CUresult (*cuMemPoolSetAttribute)(CUmemoryPool pool, int attribute, void* value);  // v11020
  CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr* pointer, std::size_t bytes, CUmemoryPool pool,
                                      CUstream stream);                             // v11020
  CUresult (*cuMemFreeAsync)(CUdeviceptr pointer, CUstream stream);                 // v11020
  // Optional (null where the driver lacks them), resolved with their own ABIs.
  PfnMemcpyBatchAsync13 cuMemcpyBatchAsync13;  // v13000
  PfnMemcpyBatchAsync12 cuMemcpyBatchAsync12;  // v12080, used only without the 13.0 one
  PfnTensorMapEncodeTiled cuTensorMapEncodeTiled;  // v12000
  PfnLaunchKernelEx cuLaunchKernelEx;              // v11060
};

}  // namespace attnjit::runtime::cuda
