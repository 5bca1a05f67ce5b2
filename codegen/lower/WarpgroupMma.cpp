// dot with wgmma.mma_async (Hopper's warpgroup MMA, sm_90a).
//
// A warpgroup (four consecutive warps) computes a 64 × N × 16 product per
// instruction, reading B — and A, when it is not in registers — from shared
// memory through 64-bit matrix descriptors, and accumulating in registers laid
// out exactly as mma.sync m16n8's accumulators of warps stacked along M: warp
// w of the group holds rows 16w..16w+15, lane 4g+t rows g and g+8 of columns
// 8j+2t and 8j+2t+1 for every 8-column chunk j. So an #mma accumulator whose
// warps all lie along M needs no new layout: its m-tile i of 16·warpsM rows is
// one wgmma per warpgroup, and a register-held A operand (P in P·V) has the
// mma.sync A fragment already.
//
// Operands in shared memory:
// - B is a cp.async slot (codegen/lower/AsyncCopy.cpp) whose tile is stored in
//   128-byte column blocks (SwizzledTile::useColumnBlocks): block j holds bytes
//   [128j, 128j + 128) of every row, rows 128 bytes apart, 16-byte chunks XORed
//   with row % 8 — the hardware's 128-byte swizzle. K in Q·Kᵀ has its
//   contraction (head dims) along the rows: "K-major", one instruction's 16
//   elements lie inside a block, the stride between 8-row groups is 1024 bytes.
//   V in P·V has it across rows: "MN-major" (transposed B), 16 rows per
//   instruction, 8-row groups 1024 bytes apart and column blocks rows·128 bytes
//   apart.
// - A is a loop-invariant operand kept in shared memory (Q with
//   shared_invariant_operands, codegen/lower/SharedOperands.cpp) when its
//   buffer got column blocks, else the registers it already has.
//
// Ordering: the slot's copies complete (cp.async.wait_group), each thread
// fences its generic-proxy writes against the async proxy wgmma reads through
// (fence.proxy.async.shared::cta), then a barrier; the Q buffer is fenced the
// same way after its store. One inline-PTX block per dot issues wgmma.fence,
// every instruction of the dot, commit and wait_group 0: its accumulators are
// its outputs, so nothing reads them before the wait and nothing the dot reads
// is written between the fence and the MMAs. The dot is synchronous (no
// overlap with the softmax of the same warpgroup; other CTAs on the SM provide
// it).
#include "codegen/lower/WarpgroupMma.h"

#include <llvm/IR/IntrinsicsNVPTX.h>

#include "codegen/lower/AsyncCopy.h"
#include "codegen/lower/DotFragments.h"
#include "codegen/lower/InlinePtx.h"
#include "codegen/lower/SharedOperands.h"

namespace attnjit::codegen {

using namespace ir;

namespace {

bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// A 64-bit wgmma matrix descriptor: start address (bits 0-13, in 16-byte
// units), leading-dimension byte offset (16-29), stride-dimension byte offset
// (32-45), base offset 0 (the buffers are 1024-byte aligned), swizzle mode 1
// = 128 bytes (62-63). Offsets of later k-steps are added to the start field.
llvm::Value* descriptor(LoweringContext& ctx, llvm::Value* address, int64_t leadingBytes, int64_t strideBytes) {
  llvm::IRBuilder<>& b = ctx.b;
  llvm::Value* start = b.CreateZExt(b.CreatePtrToInt(address, b.getInt32Ty()), b.getInt64Ty());
  start = b.CreateLShr(b.CreateAnd(start, b.getInt64(0x3FFFF)), b.getInt64(4));
  const uint64_t fixed = (static_cast<uint64_t>(leadingBytes >> 4) << 16) |
                         (static_cast<uint64_t>(strideBytes >> 4) << 32) | (uint64_t{1} << 62);
  return b.CreateOr(start, b.getInt64(fixed));
}

// Where the k-step at element `kk` of a column-blocked operand starts, in bytes
// from the tile's start, and the descriptor strides.
struct OperandGeometry {
  bool kMajor = true;        // the contraction runs along the tile's rows
  int64_t rows = 0;          // of the stored tile
  int64_t elemBytes = 2;
  int64_t leadingBytes = 16; // unused for K-major swizzled operands
  int64_t strideBytes = 1024;

  int64_t kStepOffset(int64_t kk) const {
    if (!kMajor) return kk * 128;  // 16 rows of 128 bytes per k-step
    const int64_t blockElements = 128 / elemBytes;
    return (kk / blockElements) * rows * 128 + (kk % blockElements) * elemBytes;
  }
};

OperandGeometry geometryOf(const SwizzledTile& tile, int64_t rows, bool kMajor) {
  OperandGeometry g;
  g.kMajor = kMajor;
  g.rows = rows;
  g.elemBytes = tile.elemBytes;
  if (!kMajor) g.leadingBytes = rows * 128;  // next 128-byte column block along N
  return g;
}

llvm::Value* packPair(llvm::IRBuilder<>& b, llvm::Value* lo, llvm::Value* hi) {
  auto* pair = llvm::FixedVectorType::get(lo->getType(), 2);
  llvm::Value* v = llvm::PoisonValue::get(pair);
  v = b.CreateInsertElement(v, lo, uint64_t{0});
  v = b.CreateInsertElement(v, hi, uint64_t{1});
  return b.CreateBitCast(v, b.getInt32Ty());
}

bool isZero(llvm::Value* v) {
  auto* c = llvm::dyn_cast<llvm::ConstantFP>(v);
  return c && c->isZero() && !c->isNegative();
}

}  // namespace

std::optional<WarpgroupDotShape> warpgroupDotShape(const LoweringContext& ctx, const Operation& dot) {
  if (dot.opcode() != Opcode::Dot || !ctx.target.hasWgmma) return std::nullopt;
  if (!kernelFlag(ctx.kernel, KernelAttribute::WarpgroupMma)) return std::nullopt;
  const Type& result = dot.result()->type();
  const LayoutRef& layout = result.layout();
  if (!result.isTile() || result.rank() != 2 || !layout || layout->kind != LayoutKind::Mma) return std::nullopt;
  if (layout->threadMajor || layout->warpsPerCta.size() != 2 || layout->warpsPerCta[1] != 1) return std::nullopt;
  const int64_t warpsM = layout->warpsPerCta[0];
  if (warpsM % 4 != 0 || warpsM != ctx.numWarps) return std::nullopt;
  for (size_t i = 0; i < 2; ++i) {
    const Type& operand = dot.operand(i)->type();
    if (operand.scalarKind() != ScalarKind::BF16 && operand.scalarKind() != ScalarKind::F16) return std::nullopt;
    if (operand.scalarKind() != dot.operand(0)->type().scalarKind()) return std::nullopt;
    if (!operand.layout() || operand.layout()->threadMajor) return std::nullopt;
  }
  WarpgroupDotShape shape;
  shape.m = result.shape()[0];
  shape.n = result.shape()[1];
  shape.k = dot.operand(0)->type().shape()[1];
  shape.warpsM = warpsM;
  if (shape.m % (16 * warpsM) != 0 || shape.k % 16 != 0 || shape.n % 8 != 0 || shape.n > 256) return std::nullopt;
  return shape;
}

bool feedsOnlyWarpgroupDots(const LoweringContext& ctx, const Operation& convert,
                            const std::vector<const Operation*>& uses, size_t index) {
  if (convert.opcode() != Opcode::ConvertLayout || uses.empty()) return false;
  for (const Operation* use : uses) {
    if (use->opcode() != Opcode::Dot || use->operand(index) != convert.result()) return false;
    if (use->operand(1 - index) == convert.result() || use->operand(2) == convert.result()) return false;
    if (!warpgroupDotShape(ctx, *use)) return false;
  }
  return true;
}

void alignForWarpgroupOperand(LoweringContext& ctx) {
  ctx.asyncBufferBytes =
      (ctx.asyncBufferBytes + kWarpgroupOperandAlign - 1) / kWarpgroupOperandAlign * kWarpgroupOperandAlign;
  ctx.warpgroupOperands = true;
}

void fenceForAsyncProxy(LoweringContext& ctx) {
  ctx.b.CreateIntrinsic(ctx.b.getVoidTy(), llvm::Intrinsic::nvvm_fence_proxy_async_shared_cta,
                        llvm::ArrayRef<llvm::Value*>{});
}

bool descriptorCompatible(const SwizzledTile& tile, int64_t rows) {
  const int64_t rowBytes = tile.rowElements * tile.elemBytes;
  return tile.elemBytes == 2 && rowBytes % 128 == 0 && isPowerOfTwo(rowBytes) && isPowerOfTwo(rows) && rows >= 8;
}

bool lowerWarpgroupDot(LoweringContext& ctx, const Operation& op) {
  const Lowered& a = ctx.get(op.operand(0));
  const Lowered& bOp = ctx.get(op.operand(1));
  const Lowered& acc = ctx.get(op.operand(2));
  if (!bOp.warpgroupOperand) return false;
  std::optional<WarpgroupDotShape> shape = warpgroupDotShape(ctx, op);
  ATTNJIT_CHECK(shape.has_value(), "codegen: a descriptor operand feeds a dot that cannot use wgmma");
  llvm::IRBuilder<>& b = ctx.b;
  const bool isBf16 = op.operand(0)->type().scalarKind() == ScalarKind::BF16;
  const int64_t kTiles = (dotExtent(op, "k_extent", shape->k) + 15) / 16;
  const int64_t nInstr = (dotExtent(op, "n_extent", shape->n) + 7) / 8 * 8;
  const int64_t mTiles = shape->m / (16 * shape->warpsM);
  const int64_t warpgroupRows = 64;

  // B: the slot, K-major when the contraction runs along its stored rows.
  const SwizzledTile& bTile = asyncBufferTile(ctx, bOp);
  const LinearLayout& slotLayout = asyncBufferLayout(ctx, bOp);
  const int kDimInSlot = bOp.asyncTransposed ? 1 : 0;
  const int64_t bRows = slotLayout.shape[static_cast<size_t>(1 - bTile.contigDim)];
  const OperandGeometry bGeometry = geometryOf(bTile, bRows, kDimInSlot == bTile.contigDim);
  llvm::Value* bDescriptor =
      descriptor(ctx, asyncSlotAddress(ctx, bOp), bGeometry.leadingBytes, bGeometry.strideBytes);

  // A: a column-blocked shared operand (K-major, rows = M), else registers.
  const bool aShared = a.isSharedOperand() && sharedOperandTile(ctx, a).blockRows > 0;
  llvm::Value* aDescriptor = nullptr;
  OperandGeometry aGeometry;
  std::map<Coord, size_t> aIndex;
  if (aShared) {
    const SwizzledTile& aTile = sharedOperandTile(ctx, a);
    ATTNJIT_CHECK(aTile.contigDim == 1, "codegen: wgmma A operand must be K-major");
    aGeometry = geometryOf(aTile, shape->m, true);
    llvm::Value* address = sharedOperandAddress(ctx, a);
    if (shape->warpsM > 4) {  // warpgroup g owns rows [64g, 64g + 64) of each m-tile
      llvm::Value* group = b.CreateLShr(ctx.warpId, ctx.i32(2));
      address = b.CreateInBoundsGEP(b.getInt8Ty(), address, b.CreateMul(group, ctx.i32(warpgroupRows * 128)));
    }
    aDescriptor = descriptor(ctx, address, aGeometry.leadingBytes, aGeometry.strideBytes);
  } else {
    ATTNJIT_CHECK(!a.isSharedOperand() && !a.isAsync(), "codegen: wgmma A operand not in registers");
    aIndex = registerIndex(*a.layout);
  }

  const bool accumulate = !std::all_of(acc.regs.begin(), acc.regs.end(), isZero);
  auto cIndex = registerIndex(*acc.layout);
  // Outputs: per m-tile, the instruction's N/2 accumulators in fragment order.
  std::vector<size_t> outputRegs;
  for (int64_t mi = 0; mi < mTiles; ++mi) {
    const int64_t row = mi * 16 * shape->warpsM;
    for (int64_t i = 0; i < nInstr / 2; ++i) {
      const int64_t r = row + 8 * ((i >> 1) & 1), c = 8 * (i >> 2) + (i & 1);
      auto it = cIndex.find(Coord{r, c, 0});
      ATTNJIT_CHECK(it != cIndex.end(), "codegen: wgmma accumulator element not held by the thread");
      outputRegs.push_back(it->second);
    }
  }
  const size_t numOutputs = outputRegs.size();
  const std::string type = isBf16 ? "bf16" : "f16";
  std::string text = "{\n.reg .pred wgmma_first, wgmma_more;\n.reg .b64 wgmma_a, wgmma_b;\n";
  InlinePtx ptx(b, "");
  for (size_t i = 0; i < numOutputs; ++i) ptx.output("f", b.getFloatTy());
  size_t next = numOutputs;
  if (accumulate)
    for (size_t i = 0; i < numOutputs; ++i, ++next) ptx.input(std::to_string(i), acc.regs[outputRegs[i]]);
  const size_t scaleOperand = next++;
  ptx.input("r", ctx.i32(accumulate ? 1 : 0));
  const size_t bOperand = next++;
  ptx.input("l", bDescriptor);
  size_t aOperand = 0;
  if (aShared) {
    aOperand = next++;
    ptx.input("l", aDescriptor);
  }
  text += "setp.ne.b32 wgmma_first, $" + std::to_string(scaleOperand) + ", 0;\n";
  text += "setp.eq.b32 wgmma_more, $" + std::to_string(scaleOperand) + ", $" + std::to_string(scaleOperand) + ";\n";
  text += "wgmma.fence.sync.aligned;\n";
  auto reg = [&](int64_t row, int64_t col) -> llvm::Value* {
    auto it = aIndex.find(Coord{row, col, 0});
    ATTNJIT_CHECK(it != aIndex.end(), "codegen: wgmma A fragment element not held by the thread");
    return a.regs[it->second];
  };
  for (int64_t kj = 0; kj < kTiles; ++kj) {
    const int64_t kk = kj * 16;
    text += "add.s64 wgmma_b, $" + std::to_string(bOperand) + ", " + std::to_string(bGeometry.kStepOffset(kk) >> 4) +
            ";\n";
    for (int64_t mi = 0; mi < mTiles; ++mi) {
      std::string outputs;
      for (int64_t i = 0; i < nInstr / 2; ++i)
        outputs += (i ? ", $" : "$") + std::to_string(static_cast<size_t>(mi * (nInstr / 2) + i));
      std::string aText;
      if (aShared) {
        const int64_t offset = mi * 16 * shape->warpsM * 128 + aGeometry.kStepOffset(kk);
        text += "add.s64 wgmma_a, $" + std::to_string(aOperand) + ", " + std::to_string(offset >> 4) + ";\n";
        aText = "wgmma_a";
      } else {
        const int64_t row = mi * 16 * shape->warpsM;
        llvm::Value* fragment[4] = {packPair(b, reg(row, kk), reg(row, kk + 1)),
                                    packPair(b, reg(row + 8, kk), reg(row + 8, kk + 1)),
                                    packPair(b, reg(row, kk + 8), reg(row, kk + 9)),
                                    packPair(b, reg(row + 8, kk + 8), reg(row + 8, kk + 9))};
        aText = "{";
        for (int i = 0; i < 4; ++i) {
          aText += (i ? ", $" : "$") + std::to_string(next++);
          ptx.input("r", fragment[i]);
        }
        aText += "}";
      }
      const std::string scale = kj == 0 ? "wgmma_first" : "wgmma_more";
      const std::string transB = bGeometry.kMajor ? "0" : "1";
      text += "wgmma.mma_async.sync.aligned.m64n" + std::to_string(nInstr) + "k16.f32." + type + "." + type + " {" +
              outputs + "}, " + aText + ", wgmma_b, " + scale + ", 1, 1, " + (aShared ? "0, " : "") + transB + ";\n";
    }
  }
  text += "wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n}";
  std::vector<llvm::Value*> results = ptx.withText(std::move(text)).sideEffects().emitAll();
  Lowered out = acc;
  for (size_t i = 0; i < numOutputs; ++i) out.regs[outputRegs[i]] = results[i];
  ctx.set(op.result(), std::move(out));
  return true;
}

}  // namespace attnjit::codegen
