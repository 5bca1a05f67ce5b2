// TMA tensor maps: the 128-byte descriptors that `cp.async.bulk.tensor` reads
// to copy a box of a global tensor into shared memory, encoded on the host by
// the driver (cuTensorMapEncodeTiled; the tensor memory accelerator exists
// from sm_90). A kernel takes one as a `.param .align 64 .b8 [128]` argument.
//
// validateTensorMap checks the limits the driver documents before it is
// called, so a shape it would refuse gets a message naming the dimension and
// the rule, not CUDA_ERROR_INVALID_VALUE.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "support/Diagnostics.h"

namespace attnjit::runtime {

// An encoded map, as a kernel parameter receives it (params[i] = &map).
struct alignas(64) TensorMap {
  std::array<std::uint64_t, 16> opaque{};
};
static_assert(sizeof(TensorMap) == 128);

// Element types a map can move; quantized caches (fp8, int8) travel as U8.
enum class TensorMapElement { U8, U16, U32, F16, BF16, F32 };
int tensorMapElementBytes(TensorMapElement element);

// How the copy permutes 16-byte chunks within each span of 32, 64 or 128
// bytes of a box's rows in shared memory: chunk c of row r of a 128-byte
// swizzle lands at chunk c xor (r mod 8) (the layout wgmma's descriptors
// read), on absolute shared addresses, so the destination is 1024-byte
// aligned.
enum class TensorMapSwizzle { None, Bytes32, Bytes64, Bytes128 };
int tensorMapSwizzleBytes(TensorMapSwizzle swizzle);  // 0 for None

// A tiled view of global memory: `dims` and `box` innermost first (1 to 5
// dimensions), `strides` the bytes between consecutive indices of dimensions
// 1 to rank - 1 (dimension 0 is contiguous). Every copy moves one box; parts
// of a box outside `dims` read as zeros.
struct TensorMapShape {
  TensorMapElement element = TensorMapElement::BF16;
  std::uint64_t address = 0;  // the device address of element 0
  std::vector<std::uint64_t> dims;
  std::vector<std::uint64_t> strides;
  std::vector<std::uint32_t> box;
  TensorMapSwizzle swizzle = TensorMapSwizzle::Bytes128;

  // "bf16 [128, 8, 16, 2, 1000] strides [256, 2048, 32768, 65536] box [64, 1, 16, 1, 1] swizzle 128B"
  std::string str() const;
};

// Ok where the driver's documented limits hold: rank 1 to 5; a non-null,
// 16-byte-aligned address; dimensions of 1 to 2^32 elements; strides that are
// multiples of 16 below 2^40; box sizes of 1 to 256 whose innermost one spans
// a multiple of 16 bytes and, with a swizzle, no more than its span.
support::Status validateTensorMap(const TensorMapShape& shape);

// How a kernel makes a tensor-map parameter from its other arguments at
// launch: code generation copies load_tensor tiles with TMA and records one
// recipe per map (kernel metadata "tensor_maps", tensorMapRecipesText), and
// Function::launch encodes the maps from the launch's arguments and passes
// them after them, so launchers never see the maps.
struct TensorMapRecipe {
  // A value of the launch: argument `parameter` (4 or 8 bytes wide, a
  // pointer, i64 or i32), or `constant` where parameter is -1.
  struct Source {
    int parameter = -1;
    int bytes = 8;
    std::int64_t constant = 0;
  };
  TensorMapElement element = TensorMapElement::BF16;
  Source address;
  std::vector<Source> dims;     // elements, innermost first
  std::vector<Source> strides;  // elements between indices of dimensions 1 .. rank - 1
  std::vector<std::uint32_t> box;
  TensorMapSwizzle swizzle = TensorMapSwizzle::Bytes128;

  // "bf16 address=p2:8 dims=c128,c8,p9:4,c2,c2147483647 strides=p15:8,p14:8,p13:8,p12:8 box=64,1,16,1,1
  // swizzle=128" (one line: parseTensorMapRecipe's input).
  std::string str() const;
};

// The maps a kernel takes after its `first` ordinary parameters, in order.
struct TensorMapParameters {
  int first = 0;
  std::vector<TensorMapRecipe> maps;
};

// Text for kernel metadata: "first=N" then one recipe a line; parse errors
// name the line (a damaged cache entry is a miss, never a launch).
std::string tensorMapRecipesText(const TensorMapParameters& parameters);
support::Expected<TensorMapRecipe> parseTensorMapRecipe(std::string_view line);
support::Expected<TensorMapParameters> parseTensorMapRecipes(std::string_view text);

// The shape `recipe` gives for a launch whose params[i] points at argument i
// (strides and extents read in elements, scaled to bytes).
TensorMapShape tensorMapShapeFor(const TensorMapRecipe& recipe, void* const* params);

// validateTensorMap, then the driver's encoding. Needs a driver (not a
// context or a GPU: the map is host data until a launch passes it).
support::Expected<TensorMap> encodeTensorMap(const TensorMapShape& shape);

}  // namespace attnjit::runtime
