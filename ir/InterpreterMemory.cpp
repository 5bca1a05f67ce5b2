// InterpreterMemory and the memory ops (addptr, load, store). Elements are
// stored as the GPU stores them: integers little-endian, i1 as one byte 0/1, i4 as
// nibbles (element e in byte e/2, the low nibble first), f16/bf16/fp8 as their bit
// encodings, f32/f64 as IEEE bits. Every access is bounds-checked; a masked-off
// lane touches nothing.
#include <bit>
#include <cstdio>
#include <string>

#include "ir/InterpreterProgram.h"
#include "ir/LoadTensor.h"
#include "ir/Numeric.h"

namespace attnjit::ir {

namespace {

constexpr int kRegionShift = 40;  // region i lives at (i + 1) << 40; a region holds < 1 TiB
constexpr uint64_t kOffsetMask = (uint64_t{1} << kRegionShift) - 1;

std::string hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

uint64_t InterpreterMemory::map(void* data, size_t bytes, std::string label) {
  ATTNJIT_CHECK(bytes <= kOffsetMask, "InterpreterMemory::map: buffer '" + label + "' is 1 TiB or larger");
  regions_.push_back(Region{static_cast<uint8_t*>(data), bytes, std::move(label)});
  return static_cast<uint64_t>(regions_.size()) << kRegionShift;
}

const InterpreterMemory::Region* InterpreterMemory::find(uint64_t address, size_t size) const {
  const uint64_t index = address >> kRegionShift;
  if (index == 0 || index > regions_.size()) return nullptr;
  const Region& region = regions_[index - 1];
  const uint64_t offset = address & kOffsetMask;
  if (offset > region.bytes || size > region.bytes - offset) return nullptr;
  return &region;
}

std::string InterpreterMemory::describe(uint64_t address) const {
  const uint64_t index = address >> kRegionShift;
  const uint64_t offset = address & kOffsetMask;
  auto named = [](const Region& r) { return "buffer '" + r.label + "' (" + std::to_string(r.bytes) + " bytes)"; };
  // An offset in the upper half of a region's address range is more likely a
  // negative offset from the next region than a huge one from this region.
  if (offset >= (uint64_t{1} << (kRegionShift - 1)) && index < regions_.size())
    return "address " + hex(address) + ", " + std::to_string((uint64_t{1} << kRegionShift) - offset) +
           " bytes before the start of " + named(regions_[index]);
  if (index == 0 || index > regions_.size()) return "address " + hex(address) + ", which is in no mapped buffer";
  const Region& region = regions_[index - 1];
  std::string text = "byte offset " + std::to_string(offset) + " of " + named(region);
  if (offset >= region.bytes) text += ", past its end";
  return text;
}

namespace {

// How elements of one kind sit in memory; built once per load/store op.
class ElementAccess {
 public:
  explicit ElementAccess(ScalarKind kind)
      : kind_(kind), bytes_(kind == ScalarKind::I4 ? 1 : storageBits(kind) / 8), wrap_(kind) {}

  // Where the element at `address` (a nibble address for i4) lives, or nullptr
  // when it is outside every mapped buffer.
  uint8_t* locate(const InterpreterMemory& memory, uint64_t address) const {
    const uint64_t byteAddress = kind_ == ScalarKind::I4 ? address >> 1 : address;
    const InterpreterMemory::Region* region = memory.find(byteAddress, static_cast<size_t>(bytes_));
    return region ? region->data + (byteAddress & kOffsetMask) : nullptr;
  }

  // The GPU requires every access to be aligned to its element's size (a power
  // of two), which addptr keeps and a pointer bitcast to a wider pointee may not.
  bool misaligned(uint64_t address) const {
    return kind_ != ScalarKind::I4 && (address & static_cast<uint64_t>(bytes_ - 1)) != 0;
  }

  int64_t readInt(const uint8_t* bytes, uint64_t address) const {
    switch (kind_) {
      case ScalarKind::I1:
        return bytes[0] != 0 ? 1 : 0;
      case ScalarKind::I4:
        return wrap_((address & 1) ? bytes[0] >> 4 : bytes[0] & 0xF);
      default:
        return wrap_(static_cast<int64_t>(readLittleEndian(bytes)));
    }
  }

  void writeInt(uint8_t* bytes, uint64_t address, int64_t value) const {
    switch (kind_) {
      case ScalarKind::I1:
        bytes[0] = value != 0 ? 1 : 0;
        return;
      case ScalarKind::I4: {
        const auto nibble = static_cast<uint8_t>(value & 0xF);
        bytes[0] = (address & 1) ? static_cast<uint8_t>((bytes[0] & 0x0F) | (nibble << 4))
                                 : static_cast<uint8_t>((bytes[0] & 0xF0) | nibble);
        return;
      }
      default:
        writeLittleEndian(bytes, static_cast<uint64_t>(value));
    }
  }

  double readFloat(const uint8_t* bytes) const {
    const uint64_t bits = readLittleEndian(bytes);
    if (kind_ == ScalarKind::F64) return std::bit_cast<double>(bits);
    return decodeFloat(static_cast<uint32_t>(bits), kind_);
  }

  void writeFloat(uint8_t* bytes, double value) const {
    writeLittleEndian(bytes, kind_ == ScalarKind::F64 ? std::bit_cast<uint64_t>(value) : encodeFloat(value, kind_));
  }

 private:
  uint64_t readLittleEndian(const uint8_t* bytes) const {
    uint64_t value = 0;
    for (int i = bytes_ - 1; i >= 0; --i) value = (value << 8) | bytes[i];
    return value;
  }
  void writeLittleEndian(uint8_t* bytes, uint64_t value) const {
    for (int i = 0; i < bytes_; ++i) bytes[i] = static_cast<uint8_t>(value >> (8 * i));
  }

  ScalarKind kind_;
  int bytes_;
  IntWrapper wrap_;
};

support::Status misalignedAccess(ProgramContext& ctx, const CompiledOp& op, size_t element, uint64_t address,
                                 ScalarKind kind) {
  return ctx.error(op, std::string("element ") + std::to_string(element) + " of " + scalarName(kind) +
                           " is misaligned (the GPU needs " + std::to_string(storageBits(kind) / 8) +
                           "-byte alignment): " + ctx.memory().describe(address));
}

support::Status outOfBounds(ProgramContext& ctx, const CompiledOp& op, size_t element, uint64_t address,
                            ScalarKind kind) {
  const uint64_t byteAddress = addressesNibbles(kind) ? address >> 1 : address;
  return ctx.error(op, std::string("element ") + std::to_string(element) + " of " + scalarName(kind) +
                           " is out of bounds: " + ctx.memory().describe(byteAddress));
}

bool laneActive(const std::vector<int64_t>* mask, size_t element) {
  return !mask || (*mask)[mask->size() == 1 ? 0 : element] != 0;
}

}  // namespace

support::Status interpretAddPtr(ProgramContext& ctx, const CompiledOp& op) {
  const ScalarKind pointee = op.op->result(0)->type().scalarKind();
  const uint64_t elementSize = addressesNibbles(pointee) ? 1 : static_cast<uint64_t>(storageBits(pointee) / 8);
  const auto& pointers = ctx.operand(op, 0).addresses;
  const auto& offsets = ctx.operand(op, 1).ints;
  ATTNJIT_CHECK(pointers.size() == offsets.size(), "addptr operands of different sizes");
  auto& out = ctx.result(op).addresses;
  out.resize(pointers.size());
  for (size_t i = 0; i < pointers.size(); ++i) out[i] = pointers[i] + static_cast<uint64_t>(offsets[i]) * elementSize;
  return support::Status::ok();
}

support::Status interpretLoad(ProgramContext& ctx, const CompiledOp& op) {
  const Type& type = op.op->result(0)->type();
  const ScalarKind kind = type.scalarKind();
  const bool isFloatLoad = elementClass(type) == ElementClass::Float;
  const auto& pointers = ctx.operand(op, 0).addresses;
  const std::vector<int64_t>* mask = op.operands.size() > 1 ? &ctx.operand(op, 1).ints : nullptr;
  const RuntimeValue* other = op.operands.size() > 2 ? &ctx.operand(op, 2) : nullptr;
  const size_t n = pointers.size();
  ATTNJIT_CHECK(!mask || mask->size() == n || mask->size() == 1, "load mask of a different size");
  RuntimeValue& out = ctx.result(op);
  if (isFloatLoad)
    out.floats.resize(n);
  else
    out.ints.resize(n);
  const ElementAccess access(kind);
  for (size_t e = 0; e < n; ++e) {
    if (!laneActive(mask, e)) {
      // Without `other` a masked-off lane is undefined on the GPU; here it is 0.
      if (isFloatLoad)
        out.floats[e] = other ? other->floats.at(other->floats.size() == 1 ? 0 : e) : 0.0;
      else
        out.ints[e] = other ? other->ints.at(other->ints.size() == 1 ? 0 : e) : 0;
      continue;
    }
    const uint8_t* bytes = access.locate(ctx.memory(), pointers[e]);
    if (!bytes) return outOfBounds(ctx, op, e, pointers[e], kind);
    if (access.misaligned(pointers[e])) return misalignedAccess(ctx, op, e, pointers[e], kind);
    if (isFloatLoad)
      out.floats[e] = access.readFloat(bytes);
    else
      out.ints[e] = access.readInt(bytes, pointers[e]);
  }
  return support::Status::ok();
}

support::Status interpretLoadTensor(ProgramContext& ctx, const CompiledOp& op) {
  const LoadTensorOperands roles = loadTensorOperands(*op.op);
  const int n = roles.rank();
  const Type& type = op.op->result()->type();
  const ScalarKind kind = type.scalarKind();
  const bool isFloatLoad = elementClass(type) == ElementClass::Float;
  const int64_t R = type.shape()[0], C = type.shape()[1];
  // Operand slots in the op's order: base, dims, strides, coords, row range.
  const uint64_t base = ctx.operand(op, 0).addresses.at(0);
  std::vector<int64_t> dims(static_cast<size_t>(n)), strides(static_cast<size_t>(n), 1), coords(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) dims[static_cast<size_t>(k)] = ctx.operand(op, static_cast<size_t>(1 + k)).ints.at(0);
  for (int k = 1; k < n; ++k)
    strides[static_cast<size_t>(k)] = ctx.operand(op, static_cast<size_t>(n + k)).ints.at(0);
  const std::vector<int64_t>* gathered = nullptr;
  for (int k = 0; k < n; ++k) {
    const RuntimeValue& coord = ctx.operand(op, static_cast<size_t>(2 * n + k));
    if (k == roles.gatherDim)
      gathered = &coord.ints;
    else
      coords[static_cast<size_t>(k)] = coord.ints.at(0);
  }
  int64_t rowBegin = 0, rowEnd = R;
  if (roles.rowBegin) {
    rowBegin = ctx.operand(op, loadTensorOperandCount(n, false)).ints.at(0);
    rowEnd = ctx.operand(op, loadTensorOperandCount(n, false) + 1).ints.at(0);
  }
  const int64_t rowsPerEntry = gathered ? R / static_cast<int64_t>(gathered->size()) : R;
  const uint64_t elementSize = static_cast<uint64_t>(storageBits(kind) / 8);
  const ElementAccess access(kind);

  RuntimeValue& out = ctx.result(op);
  const size_t count = static_cast<size_t>(R * C);
  if (isFloatLoad)
    out.floats.assign(count, 0.0);
  else
    out.ints.assign(count, 0);
  auto inside = [&](int k, int64_t x) { return x >= 0 && x < dims[static_cast<size_t>(k)]; };
  for (int64_t i = 0; i < R; ++i) {
    if (i < rowBegin || i >= rowEnd) continue;
    std::vector<int64_t> x = coords;
    x[static_cast<size_t>(roles.rowsDim)] += i % rowsPerEntry;
    if (gathered) x[static_cast<size_t>(roles.gatherDim)] = (*gathered)[static_cast<size_t>(i / rowsPerEntry)];
    bool rowInside = true;
    uint64_t rowOffset = 0;  // wraps like the GPU's 64-bit address arithmetic
    for (int k = 1; k < n; ++k) {
      rowInside = rowInside && inside(k, x[static_cast<size_t>(k)]);
      rowOffset += static_cast<uint64_t>(x[static_cast<size_t>(k)]) * static_cast<uint64_t>(strides[static_cast<size_t>(k)]);
    }
    if (!rowInside) continue;
    for (int64_t j = 0; j < C; ++j) {
      const int64_t x0 = coords[0] + j;
      if (!inside(0, x0)) continue;
      const size_t e = static_cast<size_t>(i * C + j);
      const uint64_t address = base + (rowOffset + static_cast<uint64_t>(x0)) * elementSize;
      const uint8_t* bytes = access.locate(ctx.memory(), address);
      if (!bytes) return outOfBounds(ctx, op, e, address, kind);
      if (access.misaligned(address)) return misalignedAccess(ctx, op, e, address, kind);
      if (isFloatLoad)
        out.floats[e] = access.readFloat(bytes);
      else
        out.ints[e] = access.readInt(bytes, address);
    }
  }
  return support::Status::ok();
}

support::Status interpretStore(ProgramContext& ctx, const CompiledOp& op) {
  const Type& type = op.op->operand(1)->type();
  const ScalarKind kind = type.scalarKind();
  const bool isFloatStore = elementClass(type) == ElementClass::Float;
  if (elementClass(type) == ElementClass::Pointer) return ctx.error(op, "cannot store pointers");
  const auto& pointers = ctx.operand(op, 0).addresses;
  const RuntimeValue& values = ctx.operand(op, 1);
  const std::vector<int64_t>* mask = op.operands.size() > 2 ? &ctx.operand(op, 2).ints : nullptr;
  const size_t n = pointers.size();
  ATTNJIT_CHECK((isFloatStore ? values.floats.size() : values.ints.size()) == n, "store value of a different size");
  ATTNJIT_CHECK(!mask || mask->size() == n || mask->size() == 1, "store mask of a different size");
  const ElementAccess access(kind);
  for (size_t e = 0; e < n; ++e) {
    if (!laneActive(mask, e)) continue;
    uint8_t* bytes = access.locate(ctx.memory(), pointers[e]);
    if (!bytes) return outOfBounds(ctx, op, e, pointers[e], kind);
    if (access.misaligned(pointers[e])) return misalignedAccess(ctx, op, e, pointers[e], kind);
    if (isFloatStore)
      access.writeFloat(bytes, values.floats[e]);
    else
      access.writeInt(bytes, pointers[e], values.ints[e]);
  }
  return support::Status::ok();
}

}  // namespace attnjit::ir
