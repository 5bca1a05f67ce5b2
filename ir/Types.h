// Types of the tile IR.
//
//   scalar   i1 i4 i8 i16 i32 i64 f16 bf16 f32 f64 f8e4m3 f8e5m2
//   pointer  ptr<global, T> | ptr<shared, T>        (T a scalar kind)
//   tile     tile<16x128xbf16>, tile<32xptr<global, f32>>, tile<16x128xf32, #blocked<...>>
//
// A tile has rank 1..3, a static shape, an element type (a scalar or a pointer)
// and, once layout assignment has run, a layout saying which thread holds which
// element. Types are small values compared structurally.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnjit::ir {

enum class ScalarKind : uint8_t {
  I1,      // boolean; the type of comparisons and masks
  I4,      // signed 4-bit integer, two per byte in memory (element 2k in the low nibble)
  I8,
  I16,
  I32,
  I64,
  F16,     // IEEE binary16
  BF16,    // bfloat16: f32 with the low 16 mantissa bits dropped (round to nearest even)
  F32,
  F64,
  F8E4M3,  // OCP fp8 e4m3fn: bias 7, no infinities, max finite 448, NaN = S.1111.111
  F8E5M2,  // OCP fp8 e5m2: bias 15, IEEE-like with infinities, max finite 57344
};

bool isFloat(ScalarKind k);
bool isInteger(ScalarKind k);  // includes i1
// Size in bits as stored in memory (i1 is stored as one byte: 8).
int storageBits(ScalarKind k);
// Bytes one element occupies when addressed alone (storage bits rounded up to a
// byte: i4 counts 1; two i4 share a byte only inside packed buffers).
int storageBytes(ScalarKind k);
// Width in bits of the value (i1 = 1, i4 = 4).
int valueBits(ScalarKind k);
const char* scalarName(ScalarKind k);
bool parseScalarName(const std::string& name, ScalarKind& out);

enum class AddressSpace : uint8_t { Global, Shared };
const char* addressSpaceName(AddressSpace s);

// How the elements of a tile are distributed (blocked, mma, dot operand, slice) or
// arranged in shared memory (shared). See docs/architecture.md, "Layouts".
enum class LayoutKind : uint8_t {
  // Each thread holds sizePerThread contiguous elements per dimension, threads of a
  // warp tile threadsPerWarp, warps tile warpsPerCta; `order` lists dimensions from
  // fastest to slowest varying. The shape is covered cyclically when larger.
  Blocked,
  // Accumulator of tensor-core mma (version 2: m16n8 fragments). warpsPerCta
  // tiles warps over the output; instrShape [16, n] gives each warp n
  // contiguous columns (8: interleaved, mma.sync's own; larger: column blocks,
  // ir/LinearLayout.h mmaWarpColumns).
  Mma,
  // Operand A (opIdx 0) or B (opIdx 1) of a dot whose result has layout `parent`;
  // kWidth = consecutive k-elements per thread (8 for 16-bit types with ldmatrix).
  DotOperand,
  // The layout `parent` with dimension `dim` removed (the result of a reduction).
  Slice,
  // Shared memory: `vec` elements swizzled together, `perPhase` rows per phase,
  // `maxPhase` phases; `order` as in Blocked.
  Shared,
};

struct Layout {
  LayoutKind kind = LayoutKind::Blocked;
  std::vector<int64_t> sizePerThread, threadsPerWarp, warpsPerCta, order, instrShape;
  int64_t version = 0, opIdx = 0, kWidth = 0, dim = 0, vec = 0, perPhase = 0, maxPhase = 0;
  // #dot_op and #mma (version 2) only, printed `thread_major = 1`: the contraction
  // coordinate of a dot operand (k), or the column coordinate of an accumulator
  // and of its B operand (n), is renumbered so that the bits each thread holds
  // in registers are the low ones: a thread's elements along it are contiguous,
  // and a 1-byte operand is read from shared memory in 16- or 4-byte vectors
  // instead of going through ldmatrix (ir/LinearLayout.cpp, threadMajor). The
  // mma instructions see the usual fragments: both operands of a dot renumber k
  // alike, and the accumulator and B renumber n alike, so the product is the
  // same up to that renumbering of the tile's elements.
  int64_t threadMajor = 0;
  std::shared_ptr<const Layout> parent;

  bool operator==(const Layout& other) const;
  // Text form, e.g. "#blocked<spt=[1,8], tpw=[4,8], wpc=[4,1], order=[1,0]>".
  std::string str() const;
};
using LayoutRef = std::shared_ptr<const Layout>;

class Type {
 public:
  enum class Kind : uint8_t { Scalar, Pointer, Tile };

  Type() = default;  // i32
  static Type scalar(ScalarKind k);
  static Type pointer(ScalarKind pointee, AddressSpace space = AddressSpace::Global);
  // element must be a scalar or a pointer type; shape has 1..3 positive extents.
  static Type tile(std::vector<int64_t> shape, const Type& element, LayoutRef layout = nullptr);

  Kind kind() const { return kind_; }
  bool isScalar() const { return kind_ == Kind::Scalar; }
  bool isPointer() const { return kind_ == Kind::Pointer; }
  bool isTile() const { return kind_ == Kind::Tile; }
  // True for a pointer or a tile of pointers.
  bool hasPointerElements() const { return kind_ == Kind::Pointer || (isTile() && elemIsPointer_); }
  bool isFloatLike() const { return !hasPointerElements() && isFloat(scalar_); }
  bool isIntLike() const { return !hasPointerElements() && isInteger(scalar_); }

  // For a scalar: itself. For a pointer: the pointee. For a tile: its element's
  // scalar (or its element pointer's pointee).
  ScalarKind scalarKind() const { return scalar_; }
  AddressSpace addressSpace() const { return space_; }
  // For a tile: its element type (scalar or pointer). Otherwise: the type itself.
  Type elementType() const;
  // For a pointer (or tile of pointers): the pointee scalar type (as a scalar, or a
  // tile of the same shape).
  Type pointeeType() const;

  const std::vector<int64_t>& shape() const { return shape_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numElements() const;
  const LayoutRef& layout() const { return layout_; }

  // The same kind of value with another shape / element / layout. withShape({})
  // turns a tile into its element type.
  Type withShape(std::vector<int64_t> shape) const;
  Type withElement(const Type& element) const;
  Type withScalarKind(ScalarKind k) const;
  Type withLayout(LayoutRef layout) const;

  bool operator==(const Type& other) const;
  bool operator!=(const Type& other) const { return !(*this == other); }
  // Equal ignoring layouts.
  bool sameShapeAndElement(const Type& other) const;
  std::string str() const;

 private:
  Kind kind_ = Kind::Scalar;
  ScalarKind scalar_ = ScalarKind::I32;
  AddressSpace space_ = AddressSpace::Global;
  bool elemIsPointer_ = false;
  std::vector<int64_t> shape_;
  LayoutRef layout_;
};

}  // namespace attnjit::ir
