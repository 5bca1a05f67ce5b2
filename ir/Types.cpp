#include "ir/Types.h"

#include "support/Diagnostics.h"

namespace attnjit::ir {

namespace {
struct ScalarInfo {
  ScalarKind kind;
  const char* name;
  int storageBits;
  int valueBits;
  bool isFloat;
};
constexpr ScalarInfo kScalars[] = {
    {ScalarKind::I1, "i1", 8, 1, false},          {ScalarKind::I4, "i4", 4, 4, false},
    {ScalarKind::I8, "i8", 8, 8, false},          {ScalarKind::I16, "i16", 16, 16, false},
    {ScalarKind::I32, "i32", 32, 32, false},      {ScalarKind::I64, "i64", 64, 64, false},
    {ScalarKind::F16, "f16", 16, 16, true},       {ScalarKind::BF16, "bf16", 16, 16, true},
    {ScalarKind::F32, "f32", 32, 32, true},       {ScalarKind::F64, "f64", 64, 64, true},
    {ScalarKind::F8E4M3, "f8e4m3", 8, 8, true},   {ScalarKind::F8E5M2, "f8e5m2", 8, 8, true},
};
const ScalarInfo& info(ScalarKind k) { return kScalars[static_cast<int>(k)]; }

std::string intList(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}
}  // namespace

bool isFloat(ScalarKind k) { return info(k).isFloat; }
bool isInteger(ScalarKind k) { return !info(k).isFloat; }
int storageBits(ScalarKind k) { return info(k).storageBits; }
int valueBits(ScalarKind k) { return info(k).valueBits; }
int storageBytes(ScalarKind k) { return (info(k).storageBits + 7) / 8; }
const char* scalarName(ScalarKind k) { return info(k).name; }
bool parseScalarName(const std::string& name, ScalarKind& out) {
  for (const auto& s : kScalars)
    if (name == s.name) {
      out = s.kind;
      return true;
    }
  return false;
}

const char* addressSpaceName(AddressSpace s) { return s == AddressSpace::Global ? "global" : "shared"; }

bool Layout::operator==(const Layout& o) const {
  if (kind != o.kind || sizePerThread != o.sizePerThread || threadsPerWarp != o.threadsPerWarp ||
      warpsPerCta != o.warpsPerCta || order != o.order || instrShape != o.instrShape || version != o.version ||
      opIdx != o.opIdx || kWidth != o.kWidth || dim != o.dim || vec != o.vec || perPhase != o.perPhase ||
      maxPhase != o.maxPhase || threadMajor != o.threadMajor)
    return false;
  if (!parent || !o.parent) return parent == o.parent;
  return *parent == *o.parent;
}

std::string Layout::str() const {
  switch (kind) {
    case LayoutKind::Blocked:
      return "#blocked<spt=" + intList(sizePerThread) + ", tpw=" + intList(threadsPerWarp) +
             ", wpc=" + intList(warpsPerCta) + ", order=" + intList(order) + ">";
    case LayoutKind::Mma:
      return "#mma<version=" + std::to_string(version) + ", wpc=" + intList(warpsPerCta) +
             ", instr=" + intList(instrShape) + (threadMajor ? ", thread_major=1" : "") + ">";
    case LayoutKind::DotOperand:
      return "#dot_op<idx=" + std::to_string(opIdx) + ", k_width=" + std::to_string(kWidth) +
             (threadMajor ? ", thread_major=1" : "") + ", parent=" + (parent ? parent->str() : "?") + ">";
    case LayoutKind::Slice:
      return "#slice<dim=" + std::to_string(dim) + ", parent=" + (parent ? parent->str() : "?") + ">";
    case LayoutKind::Shared:
      return "#shared<vec=" + std::to_string(vec) + ", per_phase=" + std::to_string(perPhase) +
             ", max_phase=" + std::to_string(maxPhase) + ", order=" + intList(order) + ">";
  }
  return "#?";
}

Type Type::scalar(ScalarKind k) {
  Type t;
  t.kind_ = Kind::Scalar;
  t.scalar_ = k;
  return t;
}

Type Type::pointer(ScalarKind pointee, AddressSpace space) {
  Type t;
  t.kind_ = Kind::Pointer;
  t.scalar_ = pointee;
  t.space_ = space;
  return t;
}

Type Type::tile(std::vector<int64_t> shape, const Type& element, LayoutRef layout) {
  ATTNJIT_CHECK(!element.isTile(), "tile element must be a scalar or pointer");
  Type t;
  t.kind_ = Kind::Tile;
  t.scalar_ = element.scalar_;
  t.space_ = element.space_;
  t.elemIsPointer_ = element.isPointer();
  t.shape_ = std::move(shape);
  t.layout_ = std::move(layout);
  return t;
}

Type Type::elementType() const {
  if (!isTile()) return *this;
  return elemIsPointer_ ? pointer(scalar_, space_) : scalar(scalar_);
}

Type Type::pointeeType() const {
  Type t = scalar(scalar_);
  if (isTile()) return tile(shape_, t, layout_);
  return t;
}

int64_t Type::numElements() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

Type Type::withShape(std::vector<int64_t> shape) const {
  if (shape.empty()) return elementType();
  return tile(std::move(shape), elementType(), nullptr);
}

Type Type::withElement(const Type& element) const {
  if (!isTile()) return element;
  return tile(shape_, element, layout_);
}

Type Type::withScalarKind(ScalarKind k) const { return withElement(scalar(k)); }

Type Type::withLayout(LayoutRef layout) const {
  Type t = *this;
  t.layout_ = std::move(layout);
  return t;
}

bool Type::sameShapeAndElement(const Type& o) const {
  // space_ is Global for every type without pointers, so comparing it is exact.
  return kind_ == o.kind_ && scalar_ == o.scalar_ && elemIsPointer_ == o.elemIsPointer_ && space_ == o.space_ &&
         shape_ == o.shape_;
}

bool Type::operator==(const Type& o) const {
  if (!sameShapeAndElement(o)) return false;
  if (!layout_ || !o.layout_) return layout_ == o.layout_;
  return *layout_ == *o.layout_;
}

std::string Type::str() const {
  switch (kind_) {
    case Kind::Scalar:
      return scalarName(scalar_);
    case Kind::Pointer:
      return std::string("ptr<") + addressSpaceName(space_) + ", " + scalarName(scalar_) + ">";
    case Kind::Tile: {
      std::string s = "tile<";
      for (int64_t d : shape_) s += std::to_string(d) + "x";
      s += elementType().str();
      if (layout_) s += ", " + layout_->str();
      return s + ">";
    }
  }
  return "?";
}

}  // namespace attnjit::ir
