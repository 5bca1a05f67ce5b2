#include "runtime/TensorMap.h"

#include "runtime/DriverInternal.h"

namespace attnjit::runtime {

using namespace cuda;

namespace {

constexpr std::size_t kMaxRank = 5;
constexpr std::uint64_t kMaxDim = std::uint64_t{1} << 32;
constexpr std::uint64_t kStrideLimit = std::uint64_t{1} << 40;
constexpr std::uint32_t kMaxBox = 256;
constexpr int kAddressAlignment = 16;
constexpr int kStrideMultiple = 16;

const char* elementName(TensorMapElement element) {
  switch (element) {
    case TensorMapElement::U8: return "u8";
    case TensorMapElement::U16: return "u16";
    case TensorMapElement::U32: return "u32";
    case TensorMapElement::F16: return "f16";
    case TensorMapElement::BF16: return "bf16";
    case TensorMapElement::F32: return "f32";
  }
  return "?";
}

CUtensorMapDataType driverElement(TensorMapElement element) {
  switch (element) {
    case TensorMapElement::U8: return CU_TENSOR_MAP_DATA_TYPE_UINT8;
    case TensorMapElement::U16: return CU_TENSOR_MAP_DATA_TYPE_UINT16;
    case TensorMapElement::U32: return CU_TENSOR_MAP_DATA_TYPE_UINT32;
    case TensorMapElement::F16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case TensorMapElement::BF16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case TensorMapElement::F32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  }
  return CU_TENSOR_MAP_DATA_TYPE_UINT8;
}

CUtensorMapSwizzle driverSwizzle(TensorMapSwizzle swizzle) {
  switch (swizzle) {
    case TensorMapSwizzle::None: return CU_TENSOR_MAP_SWIZZLE_NONE;
    case TensorMapSwizzle::Bytes32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case TensorMapSwizzle::Bytes64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case TensorMapSwizzle::Bytes128: return CU_TENSOR_MAP_SWIZZLE_128B;
  }
  return CU_TENSOR_MAP_SWIZZLE_NONE;
}

template <typename T>
std::string list(const std::vector<T>& values) {
  std::string text = "[";
  for (std::size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
  return text + "]";
}

support::Status invalid(const TensorMapShape& shape, const std::string& why) {
  return runtimeError("tensor map " + shape.str() + ": " + why);
}

}  // namespace

int tensorMapElementBytes(TensorMapElement element) {
  switch (element) {
    case TensorMapElement::U8: return 1;
    case TensorMapElement::U16:
    case TensorMapElement::F16:
    case TensorMapElement::BF16: return 2;
    case TensorMapElement::U32:
    case TensorMapElement::F32: return 4;
  }
  return 1;
}

int tensorMapSwizzleBytes(TensorMapSwizzle swizzle) {
  switch (swizzle) {
    case TensorMapSwizzle::None: return 0;
    case TensorMapSwizzle::Bytes32: return 32;
    case TensorMapSwizzle::Bytes64: return 64;
    case TensorMapSwizzle::Bytes128: return 128;
  }
  return 0;
}

std::string TensorMapShape::str() const {
  std::string text = std::string(elementName(element)) + " " + list(dims) + " strides " + list(strides) + " box " +
                     list(box) + " swizzle ";
  const int span = tensorMapSwizzleBytes(swizzle);
  return text + (span == 0 ? std::string("none") : std::to_string(span) + "B");
}

support::Status validateTensorMap(const TensorMapShape& shape) {
  const std::size_t rank = shape.dims.size();
  if (rank < 1 || rank > kMaxRank)
    return invalid(shape, "has " + std::to_string(rank) + " dimensions; TMA takes 1 to 5");
  if (shape.box.size() != rank)
    return invalid(shape, "gives " + std::to_string(shape.box.size()) + " box sizes for " + std::to_string(rank) +
                              " dimensions");
  if (shape.strides.size() != rank - 1)
    return invalid(shape, "gives " + std::to_string(shape.strides.size()) + " strides; " + std::to_string(rank) +
                              " dimensions take " + std::to_string(rank - 1) +
                              " (dimension 0 is contiguous)");
  if (shape.address == 0) return invalid(shape, "the address is null");
  if (shape.address % kAddressAlignment != 0)
    return invalid(shape, "the address " + std::to_string(shape.address) + " is not 16-byte aligned");
  for (std::size_t i = 0; i < rank; ++i) {
    if (shape.dims[i] < 1 || shape.dims[i] > kMaxDim)
      return invalid(shape, "dimension " + std::to_string(i) + " has " + std::to_string(shape.dims[i]) +
                                " elements; TMA takes 1 to 2^32");
    if (shape.box[i] < 1 || shape.box[i] > kMaxBox)
      return invalid(shape, "the box is " + std::to_string(shape.box[i]) + " elements along dimension " +
                                std::to_string(i) + "; TMA takes 1 to 256");
  }
  for (std::size_t i = 0; i + 1 < rank; ++i) {
    if (shape.strides[i] % kStrideMultiple != 0 || shape.strides[i] >= kStrideLimit)
      return invalid(shape, "dimension " + std::to_string(i + 1) + "'s stride (" + std::to_string(shape.strides[i]) +
                                " bytes) must be a multiple of 16 below 2^40");
  }
  const std::uint64_t innerBytes = std::uint64_t{shape.box[0]} * tensorMapElementBytes(shape.element);
  if (innerBytes % 16 != 0)
    return invalid(shape, "the box's rows are " + std::to_string(innerBytes) +
                              " bytes; TMA copies multiples of 16");
  const int span = tensorMapSwizzleBytes(shape.swizzle);
  if (span != 0 && innerBytes > static_cast<std::uint64_t>(span))
    return invalid(shape, "the box's rows are " + std::to_string(innerBytes) + " bytes, wider than the " +
                              std::to_string(span) + "-byte swizzle: split dimension 0 into boxes of at most " +
                              std::to_string(span / tensorMapElementBytes(shape.element)) + " elements");
  return support::Status::ok();
}

support::Expected<TensorMap> encodeTensorMap(const TensorMapShape& shape) {
  if (support::Status valid = validateTensorMap(shape); !valid.isOk()) return valid;
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const DriverApi& api = **apiOr;
  if (api.cuTensorMapEncodeTiled == nullptr)
    return runtimeError("tensor maps need cuTensorMapEncodeTiled, which this driver does not have");
  const cuuint32_t rank = static_cast<cuuint32_t>(shape.dims.size());
  std::array<cuuint64_t, kMaxRank> dims{};
  std::array<cuuint64_t, kMaxRank> strides{};
  std::array<cuuint32_t, kMaxRank> box{};
  std::array<cuuint32_t, kMaxRank> elementStrides{};
  for (std::size_t i = 0; i < rank; ++i) {
    dims[i] = shape.dims[i];
    box[i] = shape.box[i];
    elementStrides[i] = 1;
    if (i + 1 < rank) strides[i] = shape.strides[i];
  }
  CUtensorMap encoded{};
  CUresult result = api.cuTensorMapEncodeTiled(
      &encoded, driverElement(shape.element), rank, reinterpret_cast<void*>(shape.address), dims.data(),
      strides.data(), box.data(), elementStrides.data(), CU_TENSOR_MAP_INTERLEAVE_NONE, driverSwizzle(shape.swizzle),
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) return cudaCallError(api, result, "cuTensorMapEncodeTiled for " + shape.str());
  TensorMap map;
  static_assert(sizeof(map.opaque) == sizeof(encoded.opaque));
  for (std::size_t i = 0; i < map.opaque.size(); ++i) map.opaque[i] = encoded.opaque[i];
  return map;
}

}  // namespace attnjit::runtime
