// reduce_max / reduce_min / reduce_sum along one axis, in three steps: within a
// thread (registers that differ only along the axis), across lanes (butterfly
// shuffles over the lane bits that move along the axis), across warps (partials
// through shared memory, combined in warp order so the result is deterministic).
// The result's layout is the operand's layout sliced at the axis, so every thread
// ends up holding the reductions of the rows it held.
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <map>
#include <vector>

#include "codegen/lower/LoweringContext.h"

namespace attnjit::codegen {

using namespace ir;

namespace {

struct Combiner {
  Opcode op;
  bool isFloat;
  llvm::Value* operator()(llvm::IRBuilder<>& b, llvm::Value* x, llvm::Value* y) const {
    switch (op) {
      case Opcode::ReduceMax:
        return isFloat ? b.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, x, y)
                       : b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, y);
      case Opcode::ReduceMin:
        return isFloat ? b.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, x, y)
                       : b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, x, y);
      default:
        return isFloat ? b.CreateFAdd(x, y) : b.CreateAdd(x, y);
    }
  }
};

llvm::Value* shuffleXor(LoweringContext& ctx, llvm::Value* v, int laneMask) {
  llvm::IRBuilder<>& b = ctx.b;
  bool isF = v->getType()->isFloatTy();
  auto id = isF ? llvm::Intrinsic::nvvm_shfl_sync_bfly_f32 : llvm::Intrinsic::nvvm_shfl_sync_bfly_i32;
  return b.CreateIntrinsic(v->getType(), id, {b.getInt32(0xffffffffu), v, ctx.i32(laneMask), ctx.i32(0x1f)});
}

}  // namespace

void lowerReduce(LoweringContext& ctx, const Operation& op) {
  llvm::IRBuilder<>& b = ctx.b;
  const Lowered& in = ctx.get(op.operand(0));
  const LinearLayout& layout = *in.layout;
  int axis = static_cast<int>(op.attrs().getInt("axis"));
  ScalarKind kind = op.operand(0)->type().scalarKind();
  if (kind == ScalarKind::F64 || kind == ScalarKind::I64 || kind == ScalarKind::F8E4M3 ||
      kind == ScalarKind::F8E5M2 || kind == ScalarKind::I4) {
    ctx.unsupported(op, std::string("on ") + scalarName(kind) + " elements");
    ctx.set(op.result(), Lowered{{in.regs[0]}, std::nullopt});
    return;
  }
  bool isF = isFloat(kind);
  Combiner combine{op.opcode(), isF};
  // Work in f32 / i32; narrow types are widened and rounded once at the end.
  llvm::Type* workType = isF ? b.getFloatTy() : b.getInt32Ty();
  auto widen = [&](llvm::Value* v) -> llvm::Value* {
    if (v->getType() == workType) return v;
    return isF ? b.CreateFPExt(v, workType) : b.CreateSExt(v, workType);
  };
  llvm::Type* resultType = ctx.elementType(Type::scalar(kind));
  auto narrow = [&](llvm::Value* v) -> llvm::Value* {
    if (resultType == workType) return v;
    return isF ? b.CreateFPTrunc(v, resultType) : b.CreateTrunc(v, resultType);
  };

  // 1. Within the thread: one partial per coordinate with the axis zeroed,
  // combined as a balanced tree over the registers in order, so that the chain
  // of dependent instructions is log2 of their count, not the count (the
  // softmax's row maximum waits for it: 16 registers a row in a 64-key
  // warpgroup tile).
  std::map<Coord, std::vector<llvm::Value*>> operands;
  std::map<Coord, int64_t> representative;
  for (int64_t r = 0; r < layout.numRegisters(); ++r) {
    Coord key = layout.registerCoord(static_cast<uint64_t>(r));
    key[axis] = 0;
    auto [it, inserted] = operands.try_emplace(key);
    if (inserted) representative[key] = r;
    it->second.push_back(widen(in.regs[static_cast<size_t>(r)]));
  }
  std::map<Coord, llvm::Value*> partial;
  for (auto& [key, values] : operands) {
    while (values.size() > 1) {
      std::vector<llvm::Value*> next;
      for (size_t i = 0; i + 1 < values.size(); i += 2) next.push_back(combine(b, values[i], values[i + 1]));
      if (values.size() % 2) next.push_back(values.back());
      values = std::move(next);
    }
    partial.emplace(key, values[0]);
  }
  // 2. Across lanes.
  for (size_t i = 0; i < layout.lane.size(); ++i)
    if (layout.lane[i][axis] != 0)
      for (auto& [key, v] : partial) v = combine(b, v, shuffleXor(ctx, v, 1 << i));
  // 3. Across warps, through shared memory.
  std::vector<size_t> warpBits;
  for (size_t i = 0; i < layout.warp.size(); ++i)
    if (layout.warp[i][axis] != 0) warpBits.push_back(i);
  if (!warpBits.empty()) {
    int64_t slots = int64_t{1} << warpBits.size();
    std::vector<int64_t> outShape = layout.shape;
    outShape.erase(outShape.begin() + axis);
    int64_t outElements = 1;
    for (int64_t s : outShape) outElements *= s;
    ctx.reserveShared(outElements * slots * 4);
    llvm::Value* slot = ctx.i32(0);
    for (size_t j = 0; j < warpBits.size(); ++j) {
      llvm::Value* bit = b.CreateAnd(b.CreateLShr(ctx.warpId, static_cast<uint64_t>(warpBits[j])), 1);
      slot = b.CreateOr(slot, b.CreateShl(bit, static_cast<uint64_t>(j)));
    }
    auto elementIndex = [&](int64_t reg) {
      llvm::Value* index = ctx.i32(0);
      for (int d = 0; d < layout.rank(); ++d) {
        if (d == axis) continue;
        index = b.CreateAdd(b.CreateMul(index, ctx.i32(layout.shape[d])), ctx.coordinate(layout, reg, d));
      }
      return index;
    };
    llvm::Value* base = ctx.sharedBase();
    ctx.barrier();
    for (auto& [key, v] : partial) {
      llvm::Value* index = b.CreateAdd(b.CreateMul(elementIndex(representative[key]), ctx.i32(slots)), slot);
      b.CreateAlignedStore(v, b.CreateGEP(workType, base, index), llvm::Align(4));
    }
    ctx.barrier();
    for (auto& [key, v] : partial) {
      llvm::Value* first = b.CreateMul(elementIndex(representative[key]), ctx.i32(slots));
      llvm::Value* acc = nullptr;
      for (int64_t s = 0; s < slots; ++s) {
        llvm::Value* x =
            b.CreateAlignedLoad(workType, b.CreateGEP(workType, base, b.CreateAdd(first, ctx.i32(s))), llvm::Align(4));
        acc = acc ? combine(b, acc, x) : x;
      }
      v = acc;
    }
  }
  // 4. The result's registers.
  const Type& resultTypeIr = op.result()->type();
  if (!resultTypeIr.isTile()) {
    ctx.set(op.result(), Lowered{{narrow(partial.begin()->second)}, std::nullopt});
    return;
  }
  LinearLayout out = ctx.linearLayout(resultTypeIr, op);
  Lowered result{{}, out};
  for (int64_t r = 0; r < out.numRegisters(); ++r) {
    Coord c = out.expanded(axis).registerCoord(static_cast<uint64_t>(r));
    auto it = partial.find(c);
    if (it == partial.end()) {
      ctx.unsupported(op, "with a result layout that does not match its operand's (" + out.str() + ")");
      result.regs.push_back(llvm::UndefValue::get(resultType));
      continue;
    }
    result.regs.push_back(narrow(it->second));
  }
  ctx.set(op.result(), std::move(result));
}

}  // namespace attnjit::codegen
