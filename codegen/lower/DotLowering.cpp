// dot: tensor cores (wgmma on sm_90a where codegen/lower/WarpgroupMma.cpp
// applies, else mma.sync m16n8k16 for f16/bf16 operands, or two m16n8k8 for
// f32 operands as tf32; f32 accumulators) when the result has an #mma layout,
// else FMAs in f32. Fragments are gathered from the operands' registers by
// coordinate (ir/LinearLayout.h), so the operand layouts' register order is
// free.
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <algorithm>
#include <map>
#include <utility>

#include "codegen/lower/DotFragments.h"
#include "codegen/lower/LoweringContext.h"
#include "codegen/lower/WarpgroupMma.h"

namespace attnjit::codegen {

using namespace ir;

namespace {

const Layout& layoutOf(const Operation& op, size_t operand) { return *op.operand(operand)->type().layout(); }

// Operand `operand`'s registers in the mma's own numbering (ir::mmaNumbering).
LinearLayout mmaView(const Operation& op, size_t operand, const LinearLayout& layout) {
  auto view = mmaNumbering(layoutOf(op, operand), layout);
  ATTNJIT_CHECK(view.isOk(), "codegen: mma operand layout");
  return *view;
}

// PTX cvt.rna.tf32.f32 semantics: keep 10 mantissa bits, round half away from zero.
llvm::Value* roundToTf32(llvm::IRBuilder<>& b, llvm::Value* f) {
  llvm::Value* bits = b.CreateBitCast(f, b.getInt32Ty());
  llvm::Value* rounded = b.CreateAnd(b.CreateAdd(bits, b.getInt32(0x1000)), b.getInt32(0xffffe000u));
  return b.CreateBitCast(rounded, b.getFloatTy());
}

void lowerMma(LoweringContext& ctx, const Operation& op, const Lowered& a, const Lowered& bOp, const Lowered& acc,
              const Layout& mma) {
  llvm::IRBuilder<>& b = ctx.b;
  ScalarKind kind = op.operand(0)->type().scalarKind();
  bool isBf16 = kind == ScalarKind::BF16;
  bool isTf32 = kind == ScalarKind::F32;
  const auto& shapeA = a.layout->shape;
  int64_t m = shapeA[0], k = shapeA[1], n = bOp.layout->shape[1];
  int64_t wm = mma.warpsPerCta[0], wn = mma.warpsPerCta[1];
  auto warpColumns = mmaWarpColumns(mma);
  ATTNJIT_CHECK(warpColumns.isOk(), "codegen: mma layout");
  int64_t mTiles = std::max<int64_t>(1, m / (16 * wm));
  // The first columns of the n-tiles warp 0 holds; warp w's are `columns` · w
  // further along (interleaved in 8-column steps, or column blocks).
  std::vector<int64_t> nTileColumns;
  for (int64_t rep = 0; rep * *warpColumns * wn < n; ++rep)
    for (int64_t j = 0; j < *warpColumns / 8; ++j)
      if (int64_t col = rep * *warpColumns * wn + 8 * j; col < n) nTileColumns.push_back(col);
  // k-steps of 16 up to k_extent (rounded up); n-tiles from n_extent on are
  // skipped (for every warp: warp w's columns start at or after warp 0's).
  // Thread-major operands (ir/Types.h) are gathered in the mma's own numbering;
  // their k (or n) coordinates are renumbered, so the zeros past an extent are
  // no longer the last k-steps (n-tiles): all of them are computed.
  const bool kRenumbered = layoutOf(op, 0).threadMajor, nRenumbered = layoutOf(op, 2).threadMajor;
  const int64_t kTiles = ((kRenumbered ? k : dotExtent(op, "k_extent", k)) + 15) / 16;
  const int64_t nExtent = nRenumbered ? n : dotExtent(op, "n_extent", n);
  auto aIndex = registerIndex(mmaView(op, 0, *a.layout)), bIndex = registerIndex(mmaView(op, 1, *bOp.layout)),
       cIndex = registerIndex(mmaView(op, 2, *acc.layout));
  auto reg = [&](const std::map<Coord, size_t>& index, const Lowered& v, int64_t row, int64_t col) -> llvm::Value* {
    auto it = index.find(Coord{row, col, 0});
    ATTNJIT_CHECK(it != index.end(), "codegen: mma fragment element not held by the thread");
    return v.regs[it->second];
  };
  auto* halfPair = llvm::FixedVectorType::get(isBf16 ? b.getBFloatTy() : b.getHalfTy(), 2);
  // Each fragment register is packed once per dot, not once per mma that reads
  // it (P's fragments feed all 16 n-tiles of P·V), and a pair that is already
  // one register (the two halves of an ldmatrix result) is passed as it is. The
  // optimized IR is the same either way (EarlyCSE and InstCombine did this);
  // emitting less of it spares the LLVM pipeline a third of prefill's input.
  std::map<std::pair<llvm::Value*, llvm::Value*>, llvm::Value*> packed;
  auto asOperand = [&](llvm::Value* pair) -> llvm::Value* {
    if (!isBf16) return pair;
    if (auto* cast = llvm::dyn_cast<llvm::BitCastInst>(pair); cast && cast->getSrcTy()->isIntegerTy(32))
      return cast->getOperand(0);
    return b.CreateBitCast(pair, b.getInt32Ty());
  };
  auto pack = [&](llvm::Value* lo, llvm::Value* hi) -> llvm::Value* {
    llvm::Value*& slot = packed[{lo, hi}];
    if (slot) return slot;
    auto* first = llvm::dyn_cast<llvm::ExtractElementInst>(lo);
    auto* second = llvm::dyn_cast<llvm::ExtractElementInst>(hi);
    if (first && second && first->getVectorOperand() == second->getVectorOperand() &&
        first->getVectorOperand()->getType() == halfPair) {
      auto* firstIndex = llvm::dyn_cast<llvm::ConstantInt>(first->getIndexOperand());
      auto* secondIndex = llvm::dyn_cast<llvm::ConstantInt>(second->getIndexOperand());
      if (firstIndex && secondIndex && firstIndex->isZero() && secondIndex->isOne())
        return slot = asOperand(first->getVectorOperand());
    }
    llvm::Value* v = llvm::PoisonValue::get(halfPair);
    v = b.CreateInsertElement(v, lo, uint64_t{0});
    v = b.CreateInsertElement(v, hi, uint64_t{1});
    return slot = asOperand(v);
  };
  auto id = isBf16 ? llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_bf16 : llvm::Intrinsic::nvvm_mma_m16n8k16_row_col_f32_f32;
  if (isTf32) id = llvm::Intrinsic::nvvm_mma_m16n8k8_row_col_tf32;
  llvm::Function* mmaFn = llvm::Intrinsic::getOrInsertDeclaration(&ctx.module, id);
  // tf32 operands: each f32 register rounded once (cvt.rna.tf32.f32), not once
  // per mma that reads it.
  std::map<llvm::Value*, llvm::Value*> rounded;
  auto asTf32 = [&](llvm::Value* f) -> llvm::Value* {
    llvm::Value*& slot = rounded[f];
    if (!slot) slot = b.CreateIntrinsic(b.getInt32Ty(), llvm::Intrinsic::nvvm_f2tf32_rna, {f});
    return slot;
  };
  Lowered out = acc;
  // k outermost, m innermost: each B fragment (a K or V tile read from shared
  // memory) feeds the warp's m-tiles back to back and is then dead, and the A
  // fragments held at a time are one k-step's. With m outermost, a warp of two
  // m-tiles kept every B fragment of the dot live until its second m-tile (64
  // registers for 32 keys × 128 dims). Each accumulator's mma chain is also
  // interleaved with mTiles · nTiles independent mma instead of running back
  // to back.
  for (int64_t kj = 0; kj < kTiles; ++kj) {
    int64_t kk = kj * 16;
    for (int64_t col : nTileColumns) {
      if (col >= nExtent) break;
      for (int64_t mi = 0; mi < mTiles; ++mi) {
        int64_t row = mi * 16 * wm;
        size_t c[4] = {cIndex.at({row, col, 0}), cIndex.at({row, col + 1, 0}), cIndex.at({row + 8, col, 0}),
                       cIndex.at({row + 8, col + 1, 0})};
        if (isTf32) {
          // The fragments are the m16n8k16 ones (kWidth 2: thread t of a quad
          // holds k = 2t, 2t+1, 2t+8, 2t+9 of the step) read as two k8 steps
          // over a permutation of k, the same for A and B: the first takes
          // k = 2t and 2t+8 as its columns t and t+4, the second 2t+1 and
          // 2t+9. A sum over k does not depend on its order.
          for (int64_t half = 0; half < 2; ++half) {
            llvm::Value* args[10] = {asTf32(reg(aIndex, a, row, kk + half)),
                                     asTf32(reg(aIndex, a, row + 8, kk + half)),
                                     asTf32(reg(aIndex, a, row, kk + 8 + half)),
                                     asTf32(reg(aIndex, a, row + 8, kk + 8 + half)),
                                     asTf32(reg(bIndex, bOp, kk + half, col)),
                                     asTf32(reg(bIndex, bOp, kk + 8 + half, col))};
            for (int i = 0; i < 4; ++i) args[6 + i] = out.regs[c[i]];
            llvm::Value* d = b.CreateCall(mmaFn, args);
            for (unsigned i = 0; i < 4; ++i) out.regs[c[i]] = b.CreateExtractValue(d, i);
          }
          continue;
        }
        llvm::Value* args[10];
        args[0] = pack(reg(aIndex, a, row, kk), reg(aIndex, a, row, kk + 1));
        args[1] = pack(reg(aIndex, a, row + 8, kk), reg(aIndex, a, row + 8, kk + 1));
        args[2] = pack(reg(aIndex, a, row, kk + 8), reg(aIndex, a, row, kk + 9));
        args[3] = pack(reg(aIndex, a, row + 8, kk + 8), reg(aIndex, a, row + 8, kk + 9));
        args[4] = pack(reg(bIndex, bOp, kk, col), reg(bIndex, bOp, kk + 1, col));
        args[5] = pack(reg(bIndex, bOp, kk + 8, col), reg(bIndex, bOp, kk + 9, col));
        for (int i = 0; i < 4; ++i) args[6 + i] = out.regs[c[i]];
        llvm::Value* d = b.CreateCall(mmaFn, args);
        for (unsigned i = 0; i < 4; ++i) out.regs[c[i]] = b.CreateExtractValue(d, i);
      }
    }
  }
  ctx.set(op.result(), std::move(out));
}

void lowerFmaDot(LoweringContext& ctx, const Operation& op, const Lowered& a, const Lowered& bOp, const Lowered& acc) {
  llvm::IRBuilder<>& b = ctx.b;
  const bool tf32 = dotTakesTf32(op);
  ScalarKind kind = op.operand(0)->type().scalarKind();
  const int64_t k = dotExtent(op, "k_extent", a.layout->shape[1]);
  const int64_t nExtent = dotExtent(op, "n_extent", bOp.layout->shape[1]);
  auto aIndex = registerIndex(*a.layout), bIndex = registerIndex(*bOp.layout);
  auto toF32 = [&](llvm::Value* v) -> llvm::Value* {
    llvm::Value* f = v;
    if (kind == ScalarKind::F8E4M3 || kind == ScalarKind::F8E5M2) f = castElement(ctx, op, v, kind, ScalarKind::F32);
    else if (!v->getType()->isFloatTy()) f = b.CreateFPExt(v, b.getFloatTy());
    return tf32 ? roundToTf32(b, f) : f;
  };
  // Each operand element is converted once, not once per use.
  std::vector<llvm::Value*> aF, bF;
  for (llvm::Value* v : a.regs) aF.push_back(toF32(v));
  for (llvm::Value* v : bOp.regs) bF.push_back(toF32(v));
  Lowered out = acc;
  for (int64_t r = 0; r < acc.layout->numRegisters(); ++r) {
    Coord c = acc.layout->registerCoord(static_cast<uint64_t>(r));
    // Lanes and warps only add to a register's coordinates (their bases are
    // disjoint bits): past n_extent in every thread.
    if (c[1] >= nExtent) continue;
    llvm::Value* sum = out.regs[static_cast<size_t>(r)];
    for (int64_t kk = 0; kk < k; ++kk) {
      auto ia = aIndex.find(Coord{c[0], kk, 0});
      auto ib = bIndex.find(Coord{kk, c[1], 0});
      ATTNJIT_CHECK(ia != aIndex.end() && ib != bIndex.end(), "codegen: FMA dot operand not held by the thread");
      sum = b.CreateIntrinsic(b.getFloatTy(), llvm::Intrinsic::fma, {aF[ia->second], bF[ib->second], sum});
    }
    out.regs[static_cast<size_t>(r)] = sum;
  }
  ctx.set(op.result(), std::move(out));
}

}  // namespace

void lowerDot(LoweringContext& ctx, const Operation& op) {
  const Lowered& a = ctx.get(op.operand(0));
  const Lowered& bOp = ctx.get(op.operand(1));
  const Lowered& acc = ctx.get(op.operand(2));
  const LayoutRef& layout = op.result()->type().layout();
  if (layout && layout->kind == LayoutKind::Mma) {
    ScalarKind kind = op.operand(0)->type().scalarKind();
    const bool tf32 = kind == ScalarKind::F32 && dotTakesTf32(op);
    if ((kind != ScalarKind::F16 && kind != ScalarKind::BF16 && !tf32) || !ctx.target.hasMmaSync) {
      ctx.unsupported(op, std::string("mma with ") + scalarName(kind) + " operands");
      ctx.set(op.result(), acc);
      return;
    }
    if (lowerWarpgroupDot(ctx, op)) return;
    lowerMma(ctx, op, a, bOp, acc, *layout);
    return;
  }
  lowerFmaDot(ctx, op, a, bOp, acc);
}

}  // namespace attnjit::codegen
