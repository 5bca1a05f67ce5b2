// Ops that create or rearrange tiles: splat, arange, broadcast, expand_dims,
// transpose, reshape and convert_layout. With linear layouts most of them only
// renumber registers; data crosses threads only through shared memory
// (convertThroughShared), when the thread mappings differ.
#include "codegen/lower/AsyncCopy.h"
#include "codegen/lower/LoweringContext.h"
#include "codegen/lower/SharedConversions.h"
#include "codegen/lower/SharedOperands.h"

namespace attnjit::codegen {

using namespace ir;

namespace {

std::vector<llvm::Value*> pick(const std::vector<llvm::Value*>& regs, const std::vector<int64_t>& map) {
  std::vector<llvm::Value*> out;
  out.reserve(map.size());
  for (int64_t r : map) out.push_back(regs[static_cast<size_t>(r)]);
  return out;
}

// `layout` with the components along `dims` removed from every basis and its
// shape set to `shape` (the layout a broadcast's input needs).
LinearLayout projected(const LinearLayout& layout, const std::vector<int>& dims, const std::vector<int64_t>& shape) {
  auto zero = [&](Coord c) {
    for (int d : dims) c[d] = 0;
    return c;
  };
  LinearLayout out;
  out.shape = shape;
  for (const auto& c : layout.lane) out.lane.push_back(zero(c));
  for (const auto& c : layout.warp) out.warp.push_back(zero(c));
  for (const auto& c : layout.reg)
    if (Coord z = zero(c); z != Coord{0, 0, 0}) out.reg.push_back(z);
  return out;
}

// The registers of `in` (layout `from`) rearranged for layout `to` of the same
// shape: a renumbering when each thread already holds its elements, otherwise a
// trip through shared memory.
std::vector<llvm::Value*> rearrange(LoweringContext& ctx, const std::vector<llvm::Value*>& in, const LinearLayout& from,
                                    const LinearLayout& to, llvm::Type* elementType) {
  if (from == to) return in;
  std::vector<int64_t> map = to.registerSourceMap(from, {});
  if (!map.empty()) return pick(in, map);
  return convertThroughShared(ctx, in, from, to, elementType);
}

}  // namespace

std::vector<llvm::Value*> convertThroughShared(LoweringContext& ctx, const std::vector<llvm::Value*>& regs,
                                               const LinearLayout& from, const LinearLayout& to,
                                               llvm::Type* elementType) {
  if (auto swizzled = convertThroughSwizzledShared(ctx, regs, from, to, elementType)) return std::move(*swizzled);
  llvm::IRBuilder<>& b = ctx.b;
  bool isBool = elementType->isIntegerTy(1);
  llvm::Type* storeType = isBool ? b.getInt8Ty() : elementType;
  int bytes = static_cast<int>(ctx.module.getDataLayout().getTypeAllocSize(storeType));
  // Same shape: row-major with each row padded by 4 bytes, so threads walking a
  // column hit different banks. A reshape matches elements in plain row-major order.
  bool sameShape = from.shape == to.shape;
  int64_t pad = sameShape && from.rank() > 1 ? std::max(1, 4 / bytes) : 0;
  auto strides = [&](const LinearLayout& l) {
    std::vector<int64_t> s(static_cast<size_t>(l.rank()), 1);
    for (int d = l.rank() - 2; d >= 0; --d) s[d] = s[d + 1] * (l.shape[d + 1] + (d == l.rank() - 2 ? pad : 0));
    return s;
  };
  std::vector<int64_t> fromStrides = strides(from), toStrides = strides(to);
  ctx.reserveShared(fromStrides[0] * from.shape[0] * bytes);
  llvm::Value* base = ctx.sharedBase();
  auto address = [&](const LinearLayout& l, const std::vector<int64_t>& s, int64_t reg) {
    llvm::Value* index = ctx.i32(0);
    for (int d = 0; d < l.rank(); ++d)
      index = b.CreateAdd(index, b.CreateMul(ctx.coordinate(l, reg, d), ctx.i32(s[d])));
    return b.CreateGEP(storeType, base, index);
  };
  ctx.barrier();
  for (int64_t r = 0; r < from.numRegisters(); ++r) {
    llvm::Value* v = regs[static_cast<size_t>(r)];
    if (isBool) v = b.CreateZExt(v, storeType);
    b.CreateAlignedStore(v, address(from, fromStrides, r), llvm::Align(bytes));
  }
  ctx.barrier();
  std::vector<llvm::Value*> out;
  for (int64_t r = 0; r < to.numRegisters(); ++r) {
    llvm::Value* v = b.CreateAlignedLoad(storeType, address(to, toStrides, r), llvm::Align(bytes));
    out.push_back(isBool ? b.CreateICmpNE(v, b.getInt8(0)) : v);
  }
  return out;
}

void lowerSplat(LoweringContext& ctx, const Operation& op) {
  LinearLayout ll = ctx.linearLayout(op.result()->type(), op);
  llvm::Value* v = ctx.scalar(op.operand(0));
  ctx.set(op.result(), Lowered{std::vector<llvm::Value*>(static_cast<size_t>(ll.numRegisters()), v), ll});
}

void lowerArange(LoweringContext& ctx, const Operation& op) {
  LinearLayout ll = ctx.linearLayout(op.result()->type(), op);
  int64_t start = op.attrs().getInt("start");
  Lowered out{{}, ll};
  for (int64_t r = 0; r < ll.numRegisters(); ++r)
    out.regs.push_back(ctx.b.CreateAdd(ctx.coordinate(ll, r, 0), ctx.i32(start)));
  ctx.set(op.result(), std::move(out));
}

void lowerBroadcast(LoweringContext& ctx, const Operation& op) {
  const Lowered& in = ctx.get(op.operand(0));
  LinearLayout to = ctx.linearLayout(op.result()->type(), op);
  std::vector<int> dims;
  for (int d = 0; d < to.rank(); ++d)
    if (in.layout->shape[d] == 1 && to.shape[d] > 1) dims.push_back(d);
  LinearLayout source = projected(to, dims, in.layout->shape);
  std::vector<llvm::Value*> regs =
      rearrange(ctx, in.regs, *in.layout, source, ctx.elementType(op.operand(0)->type().elementType()));
  std::vector<int64_t> map = to.registerSourceMap(source, dims);
  ATTNJIT_CHECK(!map.empty(), "codegen: broadcast register map");
  ctx.set(op.result(), Lowered{pick(regs, map), to});
}

void lowerExpandDims(LoweringContext& ctx, const Operation& op) {
  const Lowered& in = ctx.get(op.operand(0));
  LinearLayout to = ctx.linearLayout(op.result()->type(), op);
  int axis = static_cast<int>(op.attrs().getInt("axis"));
  LinearLayout source = to.sliced(axis);
  std::vector<llvm::Value*> regs =
      rearrange(ctx, in.regs, *in.layout, source, ctx.elementType(op.operand(0)->type().elementType()));
  std::vector<int64_t> map = to.registerSourceMap(source.expanded(axis), {});
  ATTNJIT_CHECK(!map.empty(), "codegen: expand_dims register map");
  ctx.set(op.result(), Lowered{pick(regs, map), to});
}

void lowerTranspose(LoweringContext& ctx, const Operation& op) {
  const Lowered& in = ctx.get(op.operand(0));
  LinearLayout to = ctx.linearLayout(op.result()->type(), op);
  if (in.isAsync()) {  // a view of the cp.async slot (2D, planned by AsyncCopy.cpp)
    Lowered view = in;
    view.layout = to;
    view.transposedView = !in.transposedView;
    ctx.set(op.result(), std::move(view));
    return;
  }
  const auto& perm = op.attrs().getInts("perm");
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  LinearLayout source = to.transposed(inverse);
  std::vector<llvm::Value*> regs =
      rearrange(ctx, in.regs, *in.layout, source, ctx.elementType(op.operand(0)->type().elementType()));
  std::vector<int64_t> map = to.registerSourceMap(source.transposed(perm), {});
  ATTNJIT_CHECK(!map.empty(), "codegen: transpose register map");
  ctx.set(op.result(), Lowered{pick(regs, map), to});
}

namespace {

// `l`'s bases as coordinates of `shape` (same element count): row-major
// flattening maps each power-of-two coordinate onto its own bit field, so a
// basis flattens and unflattens exactly and XORs stay XORs.
LinearLayout reshapedBases(const LinearLayout& l, const std::vector<int64_t>& shape) {
  auto rename = [&](const Coord& c) {
    int64_t flat = 0;
    for (int d = 0; d < l.rank(); ++d) flat = flat * l.shape[static_cast<size_t>(d)] + c[static_cast<size_t>(d)];
    Coord out{0, 0, 0};
    for (size_t d = shape.size(); d-- > 0;) {
      out[d] = flat % shape[d];
      flat /= shape[d];
    }
    return out;
  };
  LinearLayout r;
  r.shape = shape;
  for (const Coord& c : l.reg) r.reg.push_back(rename(c));
  for (const Coord& c : l.lane) r.lane.push_back(rename(c));
  for (const Coord& c : l.warp) r.warp.push_back(rename(c));
  return r;
}

}  // namespace

void lowerReshape(LoweringContext& ctx, const Operation& op) {
  const Lowered& in = ctx.get(op.operand(0));
  LinearLayout to = ctx.linearLayout(op.result()->type(), op);
  // Where each thread already holds the result's elements (a split of the
  // contiguous dimension within its registers: layout assignment's
  // splitContiguousDim), the registers are only renumbered.
  const LinearLayout renamed = reshapedBases(*in.layout, to.shape);
  if (renamed.sameThreadMapping(to)) {
    std::vector<int64_t> map = to.registerSourceMap(renamed, {});
    if (!map.empty()) {
      ctx.set(op.result(), Lowered{pick(in.regs, map), to});
      return;
    }
  }
  llvm::Type* elem = ctx.elementType(op.operand(0)->type().elementType());
  ctx.set(op.result(), Lowered{convertThroughShared(ctx, in.regs, *in.layout, to, elem), to});
}

void lowerConvertLayout(LoweringContext& ctx, const Operation& op) {
  if (lowerSharedOperandConvert(ctx, op)) return;
  if (lowerSharedConversion(ctx, op)) return;
  const Lowered& in = ctx.get(op.operand(0));
  LinearLayout to = ctx.linearLayout(op.result()->type(), op);
  if (in.isAsync()) {
    if (std::optional<Lowered> descriptor = lowerAsyncDescriptorConvert(ctx, op, in, to)) {
      ctx.set(op.result(), std::move(*descriptor));
      return;
    }
    ctx.set(op.result(), Lowered{lowerAsyncConvert(ctx, op, in, to), to});
    return;
  }
  llvm::Type* elem = ctx.elementType(op.operand(0)->type().elementType());
  ctx.set(op.result(), Lowered{rearrange(ctx, in.regs, *in.layout, to, elem), to});
}

}  // namespace attnjit::codegen
