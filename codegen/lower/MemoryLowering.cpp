// Pointer arithmetic, loads and stores. Registers that are consecutive in memory
// (axis analysis: contiguous pointers, aligned, mask constant over the group) move
// as one vector access of up to 16 bytes. Masked accesses use predicated PTX
// (nothing is read or written where the mask is false; masked-off loads yield
// the `other` value); unmasked ones are plain LLVM vector loads and stores.
#include "codegen/lower/InlinePtx.h"
#include "codegen/lower/LoweringContext.h"

namespace attnjit::codegen {

using namespace ir;

// How many consecutive registers one access moves: the leading register bits
// must step 1, 2, 4... along one dimension, and the axis facts must prove the
// pointers contiguous and aligned and the mask (and fallback) constant there.
int accessVectorWidth(LoweringContext& ctx, const Operation& op, const LinearLayout& l, int bytes, const Value* mask,
                      const Value* other) {
  if (l.reg.empty()) return 1;
  int dim = -1;
  for (int d = 0; d < l.rank(); ++d)
    if (l.reg[0][d] == 1) dim = d;
  if (dim < 0) return 1;
  int64_t width = 1;
  for (size_t i = 0; i < l.reg.size(); ++i) {
    Coord expected{0, 0, 0};
    expected[dim] = int64_t{1} << i;
    if (l.reg[i] != expected) break;
    width *= 2;
  }
  const AxisFacts& p = ctx.axis->facts(op.operand(0));
  width = std::min({width, p.contiguity[dim], std::max<int64_t>(1, p.divisibility[dim] / bytes),
                    int64_t{16} / bytes});
  if (mask) width = std::min(width, ctx.axis->facts(mask).constancy[dim]);
  if (other) width = std::min(width, ctx.axis->facts(other).constancy[dim]);
  return static_cast<int>(std::max<int64_t>(1, width));
}

namespace {

const char* spaceName(const Type& pointerType) {
  return pointerType.addressSpace() == AddressSpace::Global ? "global" : "shared";
}

// accessVectorWidth for a lowered pointer (a scalar pointer moves one element).
int vectorWidth(LoweringContext& ctx, const Operation& op, const Lowered& ptr, int bytes, const Value* mask,
                const Value* other) {
  if (!ptr.isTile()) return 1;
  return accessVectorWidth(ctx, op, *ptr.layout, bytes, mask, other);
}

// Register value ↔ memory representation (i1 is a byte in memory).
llvm::Value* toMemory(LoweringContext& ctx, llvm::Value* v, ScalarKind k) {
  return k == ScalarKind::I1 ? ctx.b.CreateZExt(v, ctx.b.getInt8Ty()) : v;
}
llvm::Value* fromMemory(LoweringContext& ctx, llvm::Value* v, ScalarKind k) {
  return k == ScalarKind::I1 ? ctx.b.CreateICmpNE(v, ctx.b.getInt8(0)) : v;
}

// The PTX registers a predicated access of `totalBytes` moves: up to four 32-bit
// words, or one 16-bit register (which also carries a byte).
struct Words {
  int count;
  llvm::Type* type;
  const char* constraint;
  std::string ptxType;  // with the vector prefix
};

Words wordsFor(llvm::IRBuilder<>& b, int totalBytes, bool isLoad) {
  if (totalBytes >= 4) {
    int n = totalBytes / 4;
    return {n, b.getInt32Ty(), "r", (n > 1 ? "v" + std::to_string(n) + "." : std::string()) + "b32"};
  }
  if (totalBytes == 2) return {1, b.getInt16Ty(), "h", "b16"};
  return {1, b.getInt16Ty(), "h", isLoad ? "u8" : "b8"};
}

// Packs `values` (memory type) into `words` registers, and back.
std::vector<llvm::Value*> pack(LoweringContext& ctx, const std::vector<llvm::Value*>& values, llvm::Type* memType,
                               const Words& w) {
  llvm::IRBuilder<>& b = ctx.b;
  if (values.size() == 1 && memType->getPrimitiveSizeInBits() <= 16) {
    llvm::Value* v = values[0];
    if (!v->getType()->isIntegerTy()) v = b.CreateBitCast(v, b.getIntNTy(v->getType()->getPrimitiveSizeInBits()));
    return {b.CreateZExtOrTrunc(v, w.type)};
  }
  llvm::Value* vec = llvm::PoisonValue::get(llvm::FixedVectorType::get(memType, static_cast<unsigned>(values.size())));
  for (size_t i = 0; i < values.size(); ++i) vec = b.CreateInsertElement(vec, values[i], static_cast<uint64_t>(i));
  llvm::Value* asWords = b.CreateBitCast(vec, llvm::FixedVectorType::get(w.type, static_cast<unsigned>(w.count)));
  std::vector<llvm::Value*> out;
  for (int i = 0; i < w.count; ++i) out.push_back(b.CreateExtractElement(asWords, static_cast<uint64_t>(i)));
  return out;
}

std::vector<llvm::Value*> unpack(LoweringContext& ctx, const std::vector<llvm::Value*>& words, llvm::Type* memType,
                                 int count, const Words& w) {
  llvm::IRBuilder<>& b = ctx.b;
  if (count == 1 && memType->getPrimitiveSizeInBits() <= 16) {
    unsigned bits = static_cast<unsigned>(memType->getPrimitiveSizeInBits());
    llvm::Value* v = b.CreateTrunc(words[0], b.getIntNTy(bits));
    return {memType->isIntegerTy() ? v : b.CreateBitCast(v, memType)};
  }
  llvm::Value* vec = llvm::PoisonValue::get(llvm::FixedVectorType::get(w.type, static_cast<unsigned>(w.count)));
  for (int i = 0; i < w.count; ++i) vec = b.CreateInsertElement(vec, words[i], static_cast<uint64_t>(i));
  llvm::Value* asElems = b.CreateBitCast(vec, llvm::FixedVectorType::get(memType, static_cast<unsigned>(count)));
  std::vector<llvm::Value*> out;
  for (int i = 0; i < count; ++i) out.push_back(b.CreateExtractElement(asElems, static_cast<uint64_t>(i)));
  return out;
}

std::string operandList(int first, int count) {
  std::string s = count > 1 ? "{" : "";
  for (int i = 0; i < count; ++i) s += (i ? ", $" : "$") + std::to_string(first + i);
  return s + (count > 1 ? "}" : "");
}

}  // namespace

void lowerAddPtr(LoweringContext& ctx, const Operation& op) {
  ScalarKind pointee = op.operand(0)->type().scalarKind();
  if (pointee == ScalarKind::I4) ctx.unsupported(op, "on i4 pointers (nibble addressing is not in codegen yet)");
  const Lowered& ptr = ctx.get(op.operand(0));
  const Lowered& offset = ctx.get(op.operand(1));
  llvm::Type* elem = ctx.memoryType(pointee);
  Lowered out;
  out.layout = ptr.layout;
  for (size_t r = 0; r < ptr.regs.size(); ++r) {
    llvm::Value* index = ctx.b.CreateSExt(offset.regs[r], ctx.b.getInt64Ty());
    out.regs.push_back(ctx.b.CreateGEP(elem, ptr.regs[r], index));
  }
  ctx.set(op.result(), std::move(out));
}

void lowerLoad(LoweringContext& ctx, const Operation& op) {
  if (lowerAsyncLoad(ctx, op)) return;
  const Type& ptrType = op.operand(0)->type();
  ScalarKind k = ptrType.scalarKind();
  if (k == ScalarKind::I4) ctx.unsupported(op, "of i4 elements (load bytes as i8 and unpack)");
  const Lowered& ptr = ctx.get(op.operand(0));
  const Value* maskValue = op.numOperands() > 1 ? op.operand(1) : nullptr;
  const Value* otherValue = op.numOperands() > 2 ? op.operand(2) : nullptr;
  const Lowered* mask = maskValue ? &ctx.get(maskValue) : nullptr;
  const Lowered* other = otherValue ? &ctx.get(otherValue) : nullptr;
  llvm::IRBuilder<>& b = ctx.b;
  int bytes = storageBytes(k);
  llvm::Type* memType = ctx.memoryType(k);
  int vec = vectorWidth(ctx, op, ptr, bytes, maskValue, otherValue);
  // Registers whose pointers are provably equal share one load
  // (equalValueRegisterBits): a row of block numbers, 16 keys to a block, where
  // each thread holds keys t, t + 8, ..., takes half the loads. The shared load
  // runs where any of the group's masks is set; each register then takes the
  // loaded value where its own mask is set and its fallback elsewhere.
  uint64_t repeatedBits = 0;
  if (vec == 1 && ptr.isTile()) repeatedBits = equalValueRegisterBits(*ptr.layout, {&ctx.axis->facts(op.operand(0))});
  std::vector<llvm::Value*> groupMasks;
  if (repeatedBits != 0 && mask) {
    groupMasks.assign(mask->regs.size(), nullptr);
    for (size_t r = 0; r < mask->regs.size(); ++r) {
      const size_t leader = r & ~static_cast<size_t>(repeatedBits);
      groupMasks[leader] = groupMasks[leader] ? b.CreateOr(groupMasks[leader], mask->regs[r]) : mask->regs[r];
    }
  }
  Words w = wordsFor(b, vec * bytes, true);
  std::string text = "@$" + std::to_string(w.count + 1) + " ld." + spaceName(ptrType) + "." + w.ptxType + " " +
                     operandList(0, w.count) + ", [$" + std::to_string(w.count) + "];";
  Lowered out;
  out.layout = ptr.layout;
  out.regs.resize(ptr.regs.size());
  for (size_t r = 0; r < ptr.regs.size(); r += static_cast<size_t>(vec)) {
    if ((r & static_cast<size_t>(repeatedBits)) != 0) continue;  // read by its group's leader
    std::vector<llvm::Value*> elems;
    if (!mask) {
      if (vec == 1) {
        elems.push_back(b.CreateAlignedLoad(memType, ptr.regs[r], llvm::Align(bytes)));
      } else {
        auto* vt = llvm::FixedVectorType::get(memType, static_cast<unsigned>(vec));
        llvm::Value* v = b.CreateAlignedLoad(vt, ptr.regs[r], llvm::Align(static_cast<uint64_t>(vec * bytes)));
        for (int i = 0; i < vec; ++i) elems.push_back(b.CreateExtractElement(v, static_cast<uint64_t>(i)));
      }
    } else {
      std::vector<llvm::Value*> fallback;
      for (int i = 0; i < vec; ++i)
        fallback.push_back(other ? toMemory(ctx, other->regs[r + static_cast<size_t>(i)], k)
                                 : llvm::Constant::getNullValue(memType));
      std::vector<llvm::Value*> fallbackWords = pack(ctx, fallback, memType, w);
      InlinePtx asmLoad(b, text);
      for (int i = 0; i < w.count; ++i) asmLoad.output(w.constraint, w.type);
      asmLoad.input("l", ptr.regs[r]).input("b", groupMasks.empty() ? mask->regs[r] : groupMasks[r]);
      for (int i = 0; i < w.count; ++i) asmLoad.input(std::to_string(i), fallbackWords[static_cast<size_t>(i)]);
      elems = unpack(ctx, asmLoad.emitAll(), memType, vec, w);
    }
    for (int i = 0; i < vec; ++i) out.regs[r + static_cast<size_t>(i)] = fromMemory(ctx, elems[static_cast<size_t>(i)], k);
  }
  if (repeatedBits != 0) {
    // Leaders first (above), then every register of a group from its leader's load.
    std::vector<llvm::Value*> loaded = out.regs;
    for (size_t r = 0; r < out.regs.size(); ++r) {
      llvm::Value* value = loaded[r & ~static_cast<size_t>(repeatedBits)];
      if (mask) {
        llvm::Value* fallback = other ? other->regs[r] : llvm::Constant::getNullValue(value->getType());
        value = b.CreateSelect(mask->regs[r], value, fallback);
      }
      out.regs[r] = value;
    }
  }
  ctx.set(op.result(), std::move(out));
}

void lowerStore(LoweringContext& ctx, const Operation& op) {
  const Type& ptrType = op.operand(0)->type();
  ScalarKind k = ptrType.scalarKind();
  if (k == ScalarKind::I4) ctx.unsupported(op, "of i4 elements");
  const Lowered& ptr = ctx.get(op.operand(0));
  const Lowered& value = ctx.get(op.operand(1));
  const Value* maskValue = op.numOperands() > 2 ? op.operand(2) : nullptr;
  const Lowered* mask = maskValue ? &ctx.get(maskValue) : nullptr;
  llvm::IRBuilder<>& b = ctx.b;
  int bytes = storageBytes(k);
  llvm::Type* memType = ctx.memoryType(k);
  int vec = vectorWidth(ctx, op, ptr, bytes, maskValue, nullptr);
  Words w = wordsFor(b, vec * bytes, false);
  std::string text = "@$" + std::to_string(w.count + 1) + " st." + spaceName(ptrType) + "." + w.ptxType + " [$0], " +
                     operandList(1, w.count) + ";";
  for (size_t r = 0; r < ptr.regs.size(); r += static_cast<size_t>(vec)) {
    std::vector<llvm::Value*> elems;
    for (int i = 0; i < vec; ++i) elems.push_back(toMemory(ctx, value.regs[r + static_cast<size_t>(i)], k));
    if (!mask) {
      if (vec == 1) {
        b.CreateAlignedStore(elems[0], ptr.regs[r], llvm::Align(bytes));
      } else {
        llvm::Value* v = llvm::PoisonValue::get(llvm::FixedVectorType::get(memType, static_cast<unsigned>(vec)));
        for (int i = 0; i < vec; ++i) v = b.CreateInsertElement(v, elems[static_cast<size_t>(i)], static_cast<uint64_t>(i));
        b.CreateAlignedStore(v, ptr.regs[r], llvm::Align(static_cast<uint64_t>(vec * bytes)));
      }
      continue;
    }
    InlinePtx asmStore(b, text);
    asmStore.input("l", ptr.regs[r]);
    for (llvm::Value* word : pack(ctx, elems, memType, w)) asmStore.input(w.constraint, word);
    asmStore.input("b", mask->regs[r]).sideEffects().emitAll();
  }
}

// A load_tensor the passes kept (compiler/passes/ExpandTensorLoads.cpp) is a
// TMA slot of the compute warps; the producer warps issue its boxes
// (TensorCopies.cpp). planAsyncCopies reported any other.
void lowerLoadTensor(LoweringContext& ctx, const Operation& op) {
  if (lowerAsyncLoad(ctx, op)) return;
  ctx.unsupported(op, "outside a slot filled by TMA");
}

}  // namespace attnjit::codegen
