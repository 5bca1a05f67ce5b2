#include "runtime/TensorMap.h"

#include <charconv>
#include <cstring>
#include <optional>

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

namespace {

std::string sourceText(const TensorMapRecipe::Source& source) {
  if (source.parameter < 0) return "c" + std::to_string(source.constant);
  return "p" + std::to_string(source.parameter) + ":" + std::to_string(source.bytes);
}

template <typename T, typename F>
std::string joined(const std::vector<T>& values, F&& text) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) out += (i ? "," : "") + text(values[i]);
  return out;
}

bool parseInteger(std::string_view text, std::int64_t& out) {
  const char* end = text.data() + text.size();
  auto [stop, error] = std::from_chars(text.data(), end, out);
  return !text.empty() && error == std::errc() && stop == end;
}

bool parseSource(std::string_view text, TensorMapRecipe::Source& out) {
  if (text.size() < 2) return false;
  if (text[0] == 'c') {
    out.parameter = -1;
    return parseInteger(text.substr(1), out.constant);
  }
  const std::size_t colon = text.find(':');
  std::int64_t parameter = 0, bytes = 0;
  if (text[0] != 'p' || colon == std::string_view::npos || !parseInteger(text.substr(1, colon - 1), parameter) ||
      !parseInteger(text.substr(colon + 1), bytes) || parameter < 0 || parameter > 4096 || (bytes != 4 && bytes != 8))
    return false;
  out.parameter = static_cast<int>(parameter);
  out.bytes = static_cast<int>(bytes);
  return true;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

std::int64_t readSource(const TensorMapRecipe::Source& source, void* const* params) {
  if (source.parameter < 0) return source.constant;
  const void* value = params[source.parameter];
  if (source.bytes == 4) {
    std::int32_t v = 0;
    std::memcpy(&v, value, sizeof v);
    return v;
  }
  std::int64_t v = 0;
  std::memcpy(&v, value, sizeof v);
  return v;
}

}  // namespace

std::string TensorMapRecipe::str() const {
  return std::string(elementName(element)) + " address=" + sourceText(address) + " dims=" + joined(dims, sourceText) +
         " strides=" + joined(strides, sourceText) +
         " box=" + joined(box, [](std::uint32_t b) { return std::to_string(b); }) +
         " swizzle=" + std::to_string(tensorMapSwizzleBytes(swizzle));
}

support::Expected<TensorMapRecipe> parseTensorMapRecipe(std::string_view line) {
  auto bad = [&](const std::string& why) {
    return runtimeError("tensor map recipe '" + std::string(line) + "': " + why);
  };
  const std::vector<std::string_view> fields = split(line, ' ');
  if (fields.size() != 6) return bad("expected an element type and five fields");
  TensorMapRecipe recipe;
  bool known = false;
  for (TensorMapElement e : {TensorMapElement::U8, TensorMapElement::U16, TensorMapElement::U32,
                             TensorMapElement::F16, TensorMapElement::BF16, TensorMapElement::F32})
    if (fields[0] == elementName(e)) {
      recipe.element = e;
      known = true;
    }
  if (!known) return bad("unknown element type");
  auto field = [&](std::size_t i, std::string_view key) -> std::optional<std::string_view> {
    if (fields[i].substr(0, key.size()) != key) return std::nullopt;
    return fields[i].substr(key.size());
  };
  auto address = field(1, "address=");
  if (!address || !parseSource(*address, recipe.address) || recipe.address.parameter < 0)
    return bad("the address must be a pointer parameter");
  auto dims = field(2, "dims=");
  auto strides = field(3, "strides=");
  auto box = field(4, "box=");
  auto swizzle = field(5, "swizzle=");
  if (!dims || !strides || !box || !swizzle) return bad("fields out of order");
  for (std::string_view part : split(*dims, ',')) {
    TensorMapRecipe::Source source;
    if (!parseSource(part, source)) return bad("bad extent '" + std::string(part) + "'");
    recipe.dims.push_back(source);
  }
  for (std::string_view part : strides->empty() ? std::vector<std::string_view>{} : split(*strides, ',')) {
    TensorMapRecipe::Source source;
    if (!parseSource(part, source)) return bad("bad stride '" + std::string(part) + "'");
    recipe.strides.push_back(source);
  }
  for (std::string_view part : split(*box, ',')) {
    std::int64_t size = 0;
    if (!parseInteger(part, size) || size < 1 || size > 256) return bad("bad box size '" + std::string(part) + "'");
    recipe.box.push_back(static_cast<std::uint32_t>(size));
  }
  const std::size_t rank = recipe.dims.size();
  if (rank < 1 || rank > kMaxRank || recipe.strides.size() != rank - 1 || recipe.box.size() != rank)
    return bad("extents, strides and box sizes do not agree on a rank of 1 to 5");
  std::int64_t span = 0;
  if (!parseInteger(*swizzle, span)) return bad("bad swizzle");
  switch (span) {
    case 0: recipe.swizzle = TensorMapSwizzle::None; break;
    case 32: recipe.swizzle = TensorMapSwizzle::Bytes32; break;
    case 64: recipe.swizzle = TensorMapSwizzle::Bytes64; break;
    case 128: recipe.swizzle = TensorMapSwizzle::Bytes128; break;
    default: return bad("the swizzle is 0, 32, 64 or 128 bytes");
  }
  return recipe;
}

std::string tensorMapRecipesText(const TensorMapParameters& parameters) {
  std::string text = "first=" + std::to_string(parameters.first);
  for (const TensorMapRecipe& recipe : parameters.maps) text += "\n" + recipe.str();
  return text;
}

support::Expected<TensorMapParameters> parseTensorMapRecipes(std::string_view text) {
  const std::vector<std::string_view> lines = split(text, '\n');
  TensorMapParameters parameters;
  std::int64_t first = 0;
  if (lines[0].substr(0, 6) != "first=" || !parseInteger(lines[0].substr(6), first) || first < 0 || first > 4096)
    return runtimeError("tensor map recipes: the first line must be first=N, got '" + std::string(lines[0]) + "'");
  parameters.first = static_cast<int>(first);
  for (std::size_t i = 1; i < lines.size(); ++i) {
    auto recipe = parseTensorMapRecipe(lines[i]);
    if (!recipe) return recipe.status();
    for (const TensorMapRecipe::Source* source : {&recipe->address})
      if (source->parameter >= parameters.first)
        return runtimeError("tensor map recipes: parameter " + std::to_string(source->parameter) +
                            " is not one of the " + std::to_string(first) + " ordinary parameters");
    for (const auto& list : {recipe->dims, recipe->strides})
      for (const TensorMapRecipe::Source& source : list)
        if (source.parameter >= parameters.first)
          return runtimeError("tensor map recipes: parameter " + std::to_string(source.parameter) +
                              " is not one of the " + std::to_string(first) + " ordinary parameters");
    parameters.maps.push_back(std::move(*recipe));
  }
  return parameters;
}

TensorMapShape tensorMapShapeFor(const TensorMapRecipe& recipe, void* const* params) {
  TensorMapShape shape;
  shape.element = recipe.element;
  shape.address = static_cast<std::uint64_t>(readSource(recipe.address, params));
  const std::uint64_t elementBytes = static_cast<std::uint64_t>(tensorMapElementBytes(recipe.element));
  for (const auto& dim : recipe.dims) shape.dims.push_back(static_cast<std::uint64_t>(readSource(dim, params)));
  for (const auto& stride : recipe.strides)
    shape.strides.push_back(static_cast<std::uint64_t>(readSource(stride, params)) * elementBytes);
  shape.box = recipe.box;
  shape.swizzle = recipe.swizzle;
  return shape;
}

}  // namespace attnjit::runtime
