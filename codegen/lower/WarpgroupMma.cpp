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
// - B is a cp.async slot (codegen/lower/AsyncCopy.cpp), or the buffer of a
//   shared conversion (codegen/lower/SharedConversions.cpp: a tile computed in
//   registers, such as an fp8 tile cast to bf16), whose tile is stored in
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
// Warps along N (MLA's 64 heads on 8 warps: 4 along M × 2 along N) need the
// accumulator's column blocks (#mma instr [16, n / warpsN]): warpgroup j along
// N then owns columns [j·n/warpsN, (j+1)·n/warpsN), and its B descriptor starts
// there.
//
// Ordering: the slot's copies complete (cp.async.wait_group), each thread
// fences its generic-proxy writes against the async proxy wgmma reads through
// (fence.proxy.async.shared::cta), then a barrier; the Q buffer is fenced the
// same way after its store. One inline-PTX block per group of dots (consecutive
// wgmma dots with nothing between them that reads their results: a chain
// accumulating into one tile, or independent dots) issues wgmma.fence, every
// instruction of the group, commit and wait_group 0: the accumulators are its
// outputs, so nothing reads them before the wait and nothing the dots read is
// written between the fence and the MMAs. The ops between the group's dots are
// lowered before the block. A group is synchronous (no overlap with the softmax
// of the same warpgroup; the other warpgroups and CTAs on the SM provide it),
// but for its deferred chains, read later than the rest (P·V of the previous
// tile next to this tile's Q·Kᵀ, unified attention's overlap_softmax): they
// commit last, the block waits for all groups but theirs, and their wait
// comes right before their first reader (waitForWarpgroupResults).
#include "codegen/lower/WarpgroupMma.h"

#include <llvm/IR/IntrinsicsNVPTX.h>

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "codegen/lower/AsyncCopy.h"
#include "codegen/lower/DotFragments.h"
#include "codegen/lower/InlinePtx.h"
#include "codegen/lower/SharedConversions.h"
#include "codegen/lower/SharedOperands.h"
#include "codegen/lower/WarpSpecialization.h"

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
  if (layout->threadMajor || layout->warpsPerCta.size() != 2) return std::nullopt;
  const int64_t warpsM = layout->warpsPerCta[0], warpsN = layout->warpsPerCta[1];
  if (warpsM % 4 != 0 || warpsM * warpsN != ctx.numWarps) return std::nullopt;
  auto warpColumns = mmaWarpColumns(*layout);
  if (!warpColumns) return std::nullopt;
  if (warpsN > 1 && *warpColumns * warpsN != result.shape()[1]) return std::nullopt;
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
  shape.warpsN = warpsN;
  shape.groupN = shape.n / warpsN;
  if (shape.m % (16 * warpsM) != 0 || shape.k % 16 != 0 || shape.groupN % 8 != 0 || shape.groupN > 256)
    return std::nullopt;
  return shape;
}

bool feedsOnlyWarpgroupDots(const LoweringContext& ctx, const Operation& convert,
                            const std::vector<const Operation*>& uses, size_t index, bool kMajor) {
  if (convert.opcode() != Opcode::ConvertLayout || uses.empty()) return false;
  for (const Operation* use : uses) {
    if (use->opcode() != Opcode::Dot || use->operand(index) != convert.result()) return false;
    if (use->operand(1 - index) == convert.result() || use->operand(2) == convert.result()) return false;
    std::optional<WarpgroupDotShape> shape = warpgroupDotShape(ctx, *use);
    if (!shape) return false;
    // An MN-major B split along N: each warpgroup's descriptor starts at a
    // column block (128 bytes of every row).
    const int64_t elemBytes = storageBytes(use->operand(index)->type().scalarKind());
    if (index == 1 && !kMajor && shape->warpsN > 1 && shape->groupN * elemBytes % 128 != 0) return false;
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

namespace {

// Ops a wgmma group may lower ahead of its asm block: no regions, no memory
// access the group's MMAs could observe (conversions use their own scratch).
bool liftable(const Operation& op) {
  switch (op.opcode()) {
    case Opcode::Load:
    case Opcode::Store:
    case Opcode::Dot:
    case Opcode::ReduceMax:
    case Opcode::ReduceMin:
    case Opcode::ReduceSum:
    case Opcode::For:
    case Opcode::If:
    case Opcode::Yield:
    case Opcode::Return:
      return false;
    default:
      return op.regions().empty();
  }
}

bool readsDescriptor(const LoweringContext& ctx, const Operation& dot) {
  const Operation* convert = dot.operand(1)->definingOp();
  if (!convert) return false;
  if (ctx.async && ctx.async->descriptorConverts.count(convert)) return true;
  return isSharedConversionDescriptor(ctx, *convert);
}

// Where a descriptor operand's tile is stored: a cp.async slot or a shared
// conversion's buffer. `rows` counts the stored tile's rows (not its
// contiguous dimension).
struct StoredOperand {
  const SwizzledTile* tile = nullptr;
  int64_t rows = 0;
  llvm::Value* address = nullptr;
};

StoredOperand storedOperand(LoweringContext& ctx, const Lowered& value) {
  if (value.isAsync()) {
    const SwizzledTile& tile = asyncBufferTile(ctx, value);
    const LinearLayout& layout = asyncBufferLayout(ctx, value);
    return {&tile, layout.shape[static_cast<size_t>(1 - tile.contigDim)], asyncSlotAddress(ctx, value)};
  }
  ATTNJIT_CHECK(value.sharedConversion >= 0, "codegen: a descriptor operand without a buffer");
  const SharedConversionGroup& group = sharedConversionGroup(ctx, value);
  return {&group.tile, group.layout.shape[static_cast<size_t>(1 - group.tile.contigDim)],
          sharedConversionAddress(ctx, value)};
}

// The dots lowered in one asm block with `first` (first among them), and the
// ops between them, which are lowered before it. A group grows over the dots
// that follow in the same block while nothing between reads its results: a dot
// whose accumulator is the only use of a group dot's result continues that
// dot's chain (Q·Kᵀ summed over MLA's latent chunks), others start their own
// (P·V of each chunk). One fence, commit and wait then serve the whole group:
// its MMAs run back to back instead of each dot waiting for its own.
std::vector<const Operation*> warpgroupGroup(const LoweringContext& ctx, const Operation& first,
                                             std::vector<const Operation*>& ahead) {
  std::vector<const Operation*> dots{&first};
  const Block* block = first.parentBlock();
  if (!block) return dots;
  UseMap uses;
  collectUses(*block, uses);
  std::unordered_set<const Value*> results{first.result()};
  std::vector<const Operation*> pending;
  const auto& ops = block->operations();
  auto it = std::find_if(ops.begin(), ops.end(), [&](const auto& op) { return op.get() == &first; });
  if (it == ops.end()) return dots;
  for (++it; it != ops.end(); ++it) {
    const Operation& op = **it;
    const bool readsGroup = std::any_of(op.operands().begin(), op.operands().end(),
                                        [&](const Value* v) { return results.count(v) > 0; });
    if (op.opcode() == Opcode::Dot && readsDescriptor(ctx, op) && warpgroupDotShape(ctx, op)) {
      if (results.count(op.operand(0)) || results.count(op.operand(1))) break;
      if (results.count(op.operand(2)) && uses[op.operand(2)].size() != 1) break;
      ahead.insert(ahead.end(), pending.begin(), pending.end());
      pending.clear();
      dots.push_back(&op);
      results.insert(op.result());
      continue;
    }
    if (readsGroup || !liftable(op)) break;
    pending.push_back(&op);
  }
  return dots;
}

// One dot of a group, ready to print.
struct PlannedDot {
  const Operation* op = nullptr;
  WarpgroupDotShape shape;
  size_t chain = 0;
  bool chainHead = false;
  int64_t kTiles = 0, nInstr = 0, mTiles = 0;
  OperandGeometry bGeometry, aGeometry;
  llvm::Value* bDescriptor = nullptr;
  llvm::Value* aDescriptor = nullptr;  // null: A from registers
  std::map<Coord, size_t> aIndex;
  const Lowered* a = nullptr;
};

// A chain of dots accumulating into the same registers.
struct AccumulatorChain {
  const Operation* last = nullptr;
  Lowered init;
  bool accumulate = false;            // the initial accumulator is not all zeros
  std::vector<size_t> outputRegs;     // its registers, in the instruction's fragment order
  size_t firstOutput = 0;             // asm operand of outputRegs[0]
  bool deferred = false;              // its wait comes at its first reader (waitForWarpgroupResults)
};

// Whether `op`, or an op nested in its regions, reads `value`.
bool readsValue(const Operation& op, const Value* value) {
  if (std::find(op.operands().begin(), op.operands().end(), value) != op.operands().end()) return true;
  for (const auto& region : op.regions())
    for (const auto& inner : region->operations())
      if (readsValue(*inner, value)) return true;
  return false;
}

// The position in its block of the first op after `last` that reads `value`,
// and that op (null: none reads it there).
std::pair<size_t, const Operation*> firstReaderAfter(const Operation& last, const Value* value) {
  const Block* block = last.parentBlock();
  if (!block) return {0, nullptr};
  const auto& ops = block->operations();
  size_t i = 0;
  while (i < ops.size() && ops[i].get() != &last) ++i;
  for (++i; i < ops.size(); ++i)
    if (readsValue(*ops[i], value)) return {i, ops[i].get()};
  return {0, nullptr};
}

}  // namespace

bool lowerWarpgroupDot(LoweringContext& ctx, const Operation& op) {
  if (!ctx.get(op.operand(1)).warpgroupOperand) return false;
  std::vector<const Operation*> ahead;
  const std::vector<const Operation*> dots = warpgroupGroup(ctx, op, ahead);
  for (const Operation* lifted : ahead) {
    lowerOperation(ctx, *lifted);
    ctx.loweredAhead.insert(lifted);
  }
  for (size_t i = 1; i < dots.size(); ++i) ctx.loweredAhead.insert(dots[i]);
  // Each later dot's shared operands read as lowerBlock would before it.
  std::vector<std::unique_ptr<SharedOperandReads>> reads;
  for (size_t i = 1; i < dots.size(); ++i) reads.push_back(std::make_unique<SharedOperandReads>(ctx, *dots[i]));

  // Softmax turns: the second group of the loop body hands the turn over
  // before it waits for its slots (the softmax before it is done).
  handSoftmaxTurnBeforeGroup(ctx, op);
  // Warp-specialized: the slots the group reads must be full.
  std::vector<const Lowered*> awaited;
  for (const Operation* dot : dots)
    if (const Lowered& bOp = ctx.get(dot->operand(1)); bOp.awaitsSlot) awaited.push_back(&bOp);
  if (!awaited.empty()) waitForSlotsBeforeWarpgroupRead(ctx, op.parentBlock(), awaited);
  llvm::IRBuilder<>& b = ctx.b;
  const int64_t warpgroupRows = 64;
  llvm::Value* warpgroup = b.CreateLShr(ctx.warpId, ctx.i32(2));
  std::vector<PlannedDot> planned;
  std::vector<AccumulatorChain> chains;
  std::unordered_map<const Value*, size_t> chainOf;  // a group dot's result → its chain
  for (const Operation* dot : dots) {
    PlannedDot d;
    d.op = dot;
    std::optional<WarpgroupDotShape> shape = warpgroupDotShape(ctx, *dot);
    ATTNJIT_CHECK(shape.has_value(), "codegen: a descriptor operand feeds a dot that cannot use wgmma");
    d.shape = *shape;
    const Lowered& bOp = ctx.get(dot->operand(1));
    ATTNJIT_CHECK(bOp.warpgroupOperand, "codegen: a grouped wgmma dot's B operand is not its slot");
    d.kTiles = (dotExtent(*dot, "k_extent", shape->k) + 15) / 16;
    // Split along N, every warpgroup issues its whole block (n_extent, a padded
    // head size, then only saves the zeros' MMAs of the last block).
    d.nInstr = shape->warpsN > 1 ? shape->groupN : (dotExtent(*dot, "n_extent", shape->n) + 7) / 8 * 8;
    d.mTiles = shape->m / (16 * shape->warpsM);
    // The warp bits of the #mma layout: along M first, then along N.
    const int64_t groupsM = shape->warpsM / 4;
    llvm::Value* groupM = groupsM > 1 ? b.CreateAnd(warpgroup, ctx.i32(groupsM - 1)) : nullptr;
    llvm::Value* groupN = shape->warpsN > 1 ? b.CreateUDiv(warpgroup, ctx.i32(groupsM)) : nullptr;

    // B: its stored tile, K-major when the contraction runs along its rows.
    const StoredOperand stored = storedOperand(ctx, bOp);
    const int64_t bRows = stored.rows;
    d.bGeometry = geometryOf(*stored.tile, bRows, storedKMajor(*stored.tile, bOp.transposedView));
    llvm::Value* bAddress = stored.address;
    if (groupN) {
      // Warpgroup g's columns start at row g·groupN of a K-major tile (rows 128
      // bytes apart in each block), or at its column block of an MN-major one.
      const int64_t groupBytes = d.bGeometry.kMajor ? shape->groupN * 128
                                                    : shape->groupN * d.bGeometry.elemBytes / 128 * bRows * 128;
      bAddress = b.CreateInBoundsGEP(b.getInt8Ty(), bAddress, b.CreateMul(groupN, ctx.i32(groupBytes)));
    }
    d.bDescriptor = descriptor(ctx, bAddress, d.bGeometry.leadingBytes, d.bGeometry.strideBytes);

    // A: a column-blocked shared operand (K-major, rows = M), else registers.
    const Lowered& a = ctx.get(dot->operand(0));
    d.a = &a;
    if (a.isSharedOperand() && sharedOperandTile(ctx, a).blockRows > 0) {
      const SwizzledTile& aTile = sharedOperandTile(ctx, a);
      ATTNJIT_CHECK(aTile.contigDim == 1, "codegen: wgmma A operand must be K-major");
      d.aGeometry = geometryOf(aTile, shape->m, true);
      llvm::Value* address = sharedOperandAddress(ctx, a);
      if (groupM)  // warpgroup g along M owns rows [64g, 64g + 64) of each m-tile
        address = b.CreateInBoundsGEP(b.getInt8Ty(), address, b.CreateMul(groupM, ctx.i32(warpgroupRows * 128)));
      d.aDescriptor = descriptor(ctx, address, d.aGeometry.leadingBytes, d.aGeometry.strideBytes);
    } else {
      ATTNJIT_CHECK(!a.isSharedOperand() && !a.isAsync(), "codegen: wgmma A operand not in registers");
      d.aIndex = registerIndex(*a.layout);
    }

    if (auto found = chainOf.find(dot->operand(2)); found != chainOf.end()) {
      d.chain = found->second;
    } else {
      d.chain = chains.size();
      d.chainHead = true;
      AccumulatorChain chain;
      chain.init = ctx.get(dot->operand(2));
      chain.accumulate = !std::all_of(chain.init.regs.begin(), chain.init.regs.end(), isZero);
      auto cIndex = registerIndex(*chain.init.layout);
      for (int64_t mi = 0; mi < d.mTiles; ++mi) {
        const int64_t row = mi * 16 * shape->warpsM;
        for (int64_t i = 0; i < d.nInstr / 2; ++i) {
          const int64_t r = row + 8 * ((i >> 1) & 1), c = 8 * (i >> 2) + (i & 1);
          auto it = cIndex.find(Coord{r, c, 0});
          ATTNJIT_CHECK(it != cIndex.end(), "codegen: wgmma accumulator element not held by the thread");
          chain.outputRegs.push_back(it->second);
        }
      }
      chains.push_back(std::move(chain));
    }
    chains[d.chain].last = dot;
    chainOf[dot->result()] = d.chain;
    planned.push_back(std::move(d));
  }

  // Deferred chains: those first read later than the group's earliest-read
  // chain (P·V of the previous tile issued with this tile's Q·Kᵀ, whose
  // accumulator waits through the softmax), and any chain with work (an op
  // that cannot be lowered ahead) between the group and its first reader:
  // the next tile's Q·Kᵀ that prefetch_scores carries into the next
  // iteration, read by the loop's yield. Each first reader's chains are a
  // commit group of their own, committed in the order of their readers after
  // the group's other chains; the block waits for those others only, and the
  // wait for a deferred commit group comes right before its first reader,
  // letting the groups committed after it stay in flight. Between the two,
  // PTX forbids any access to their registers: they flow from this block
  // into the wait's block and nowhere else (ptxas serializes the MMAs
  // otherwise).
  std::vector<const Operation*> readers(chains.size(), nullptr);
  size_t earliest = SIZE_MAX;
  std::vector<size_t> readerAt(chains.size(), SIZE_MAX);
  for (size_t c = 0; c < chains.size(); ++c) {
    auto [at, reader] = firstReaderAfter(*dots.back(), chains[c].last->result());
    readers[c] = reader;
    if (reader) readerAt[c] = at;
    earliest = std::min(earliest, readerAt[c]);
  }
  const auto& blockOps = op.parentBlock()->operations();
  const size_t lastDotAt = static_cast<size_t>(
      std::find_if(blockOps.begin(), blockOps.end(), [&](const auto& o) { return o.get() == dots.back(); }) -
      blockOps.begin());
  auto workBefore = [&](size_t c) {
    for (size_t i = lastDotAt + 1; i < readerAt[c]; ++i)
      if (!liftable(*blockOps[i])) return true;
    return false;
  };
  size_t deferredChains = 0;
  for (size_t c = 0; c < chains.size(); ++c)
    if (readers[c] && (readerAt[c] > earliest || workBefore(c))) {
      chains[c].deferred = true;
      ++deferredChains;
    }
  const bool allDeferred = deferredChains == chains.size();
  // Issue order: the chains waited for here, then the deferred ones by reader.
  std::stable_sort(planned.begin(), planned.end(), [&](const PlannedDot& x, const PlannedDot& y) {
    auto key = [&](const PlannedDot& d) { return chains[d.chain].deferred ? readerAt[d.chain] : 0; };
    return key(x) < key(y);
  });

  // Operands: every chain's outputs, the tied initial accumulators, a zero for
  // the predicates, then per dot its descriptors and A fragments.
  InlinePtx ptx(b, "");
  size_t next = 0;
  for (AccumulatorChain& chain : chains) {
    chain.firstOutput = next;
    for (size_t i = 0; i < chain.outputRegs.size(); ++i, ++next) ptx.output("f", b.getFloatTy());
  }
  for (const AccumulatorChain& chain : chains)
    if (chain.accumulate)
      for (size_t i = 0; i < chain.outputRegs.size(); ++i, ++next)
        ptx.input(std::to_string(chain.firstOutput + i), chain.init.regs[chain.outputRegs[i]]);
  const size_t zeroOperand = next++;
  ptx.input("r", ctx.i32(0));
  std::string text = "{\n.reg .pred wgmma_zero, wgmma_one;\n.reg .b64 wgmma_a, wgmma_b;\n";
  text += "setp.ne.b32 wgmma_zero, $" + std::to_string(zeroOperand) + ", 0;\n";
  text += "setp.eq.b32 wgmma_one, $" + std::to_string(zeroOperand) + ", 0;\n";
  // Ping-pong: this warpgroup's turn to issue, handed on once the MMAs are issued.
  const std::optional<TurnBarriers> turn = warpgroupTurn(ctx);
  if (turn) {
    text += ".reg .pred wgmma_first;\nsetp.eq.u32 wgmma_first, $" + std::to_string(next++) + ", 0;\n";
    ptx.input("r", turn->warpgroup);
    text += "@wgmma_first " + turn->wait[0] + "\n@!wgmma_first " + turn->wait[1] + "\n";
  }
  text += "wgmma.fence.sync.aligned;\n";
  // Commit groups in issue order; chainCommit: the one each chain went out in.
  size_t commits = 0;
  std::vector<size_t> chainCommit(chains.size(), 0);
  std::optional<size_t> openReader;  // the first reader of the dots issued since the last commit
  for (const PlannedDot& d : planned) {
    const AccumulatorChain& chain = chains[d.chain];
    const size_t reader = chain.deferred ? readerAt[d.chain] : 0;
    if (openReader && *openReader != reader) {
      text += "wgmma.commit_group.sync.aligned;\n";
      ++commits;
    }
    openReader = reader;
    chainCommit[d.chain] = commits;
    const bool isBf16 = d.op->operand(0)->type().scalarKind() == ScalarKind::BF16;
    const std::string type = isBf16 ? "bf16" : "f16";
    const size_t bOperand = next++;
    ptx.input("l", d.bDescriptor);
    size_t aOperand = 0;
    if (d.aDescriptor) {
      aOperand = next++;
      ptx.input("l", d.aDescriptor);
    }
    auto reg = [&](int64_t row, int64_t col) -> llvm::Value* {
      auto it = d.aIndex.find(Coord{row, col, 0});
      ATTNJIT_CHECK(it != d.aIndex.end(), "codegen: wgmma A fragment element not held by the thread");
      return d.a->regs[it->second];
    };
    for (int64_t kj = 0; kj < d.kTiles; ++kj) {
      const int64_t kk = kj * 16;
      text += "add.s64 wgmma_b, $" + std::to_string(bOperand) + ", " +
              std::to_string(d.bGeometry.kStepOffset(kk) >> 4) + ";\n";
      for (int64_t mi = 0; mi < d.mTiles; ++mi) {
        std::string outputs;
        for (int64_t i = 0; i < d.nInstr / 2; ++i)
          outputs += (i ? ", $" : "$") + std::to_string(chain.firstOutput + static_cast<size_t>(mi * (d.nInstr / 2) + i));
        std::string aText;
        if (d.aDescriptor) {
          const int64_t offset = mi * 16 * d.shape.warpsM * 128 + d.aGeometry.kStepOffset(kk);
          text += "add.s64 wgmma_a, $" + std::to_string(aOperand) + ", " + std::to_string(offset >> 4) + ";\n";
          aText = "wgmma_a";
        } else {
          const int64_t row = mi * 16 * d.shape.warpsM;
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
        // The chain's first k-step overwrites a zero accumulator; the rest add.
        const std::string scale = d.chainHead && kj == 0 && !chain.accumulate ? "wgmma_zero" : "wgmma_one";
        const std::string transB = d.bGeometry.kMajor ? "0" : "1";
        text += "wgmma.mma_async.sync.aligned.m64n" + std::to_string(d.nInstr) + "k16.f32." + type + "." + type +
                " {" + outputs + "}, " + aText + ", wgmma_b, " + scale + ", 1, 1, " + (d.aDescriptor ? "0, " : "") +
                transB + ";\n";
      }
    }
  }
  text += "wgmma.commit_group.sync.aligned;\n";
  ++commits;
  if (turn) text += "@wgmma_first " + turn->handOver[0] + "\n@!wgmma_first " + turn->handOver[1] + "\n";
  // The chains waited for here went out first; the deferred commit groups stay
  // in flight (nothing to wait for when every chain is deferred).
  const size_t deferredCommits = allDeferred ? commits : commits - 1;
  if (!allDeferred) text += "wgmma.wait_group.sync.aligned " + std::to_string(deferredCommits) + ";\n";
  text += "}";
  std::vector<llvm::Value*> results = ptx.withText(std::move(text)).sideEffects().emitAll();
  // The slots only the completed MMAs read go back to the producer warps now.
  std::vector<const Operation*> completed;
  for (const PlannedDot& d : planned)
    if (!chains[d.chain].deferred) completed.push_back(d.op);
  releaseSlotsReadBy(ctx, completed);
  // Softmax turns: after the body's first group (Q·Kᵀ, complete here) this
  // warpgroup waits for its turn to run the softmax.
  if (!deferredChains) takeSoftmaxTurnAfterGroup(ctx, op);
  for (size_t c = 0; c < chains.size(); ++c) {
    const AccumulatorChain& chain = chains[c];
    Lowered out = chain.init;
    for (size_t i = 0; i < chain.outputRegs.size(); ++i) out.regs[chain.outputRegs[i]] = results[chain.firstOutput + i];
    ctx.set(chain.last->result(), std::move(out));
    if (chain.deferred)
      ctx.warpgroupWaits[readers[c]].push_back(
          {chain.last->result(), chain.outputRegs, ctx.warpgroupCommitBlocks.size() + chainCommit[c] + 1});
  }
  ctx.warpgroupCommitBlocks.insert(ctx.warpgroupCommitBlocks.end(), commits, op.parentBlock());
  return true;
}

void waitForWarpgroupResults(LoweringContext& ctx, const Operation& op) {
  auto due = ctx.warpgroupWaits.find(&op);
  if (due == ctx.warpgroupWaits.end()) return;
  const std::vector<LoweringContext::PendingWarpgroupResult> pending = std::move(due->second);
  ctx.warpgroupWaits.erase(due);
  // The commit groups after the latest one awaited here may stay in flight,
  // where each of them is certain to have been issued (LoweringContext::
  // warpgroupCommitBlocks).
  size_t latest = 0;
  for (const auto& result : pending) latest = std::max(latest, result.commit);
  const std::vector<const Block*>& commits = ctx.warpgroupCommitBlocks;
  ATTNJIT_CHECK(latest >= 1 && latest <= commits.size(), "codegen: a wgmma wait before its commit");
  const bool straightLine = std::all_of(commits.begin() + static_cast<std::ptrdiff_t>(latest), commits.end(),
                                        [&](const Block* block) { return block == op.parentBlock(); });
  const size_t stayInFlight = straightLine ? commits.size() - latest : 0;
  const std::string wait = "wgmma.wait_group.sync.aligned " + std::to_string(stayInFlight) + ";\n";
  // The registers pass through the wait as tied operands: what reads them
  // afterwards reads the wait's outputs, which exist only once the MMAs are done.
  //
  // The wait starts a basic block of its own. ptxas schedules
  // `WARPGROUP.DEPBAR` like any instruction of its block and hoists it to let
  // what follows it (the accumulators' rescale, P's conversion) interleave with
  // the softmax: in a single block it waits for the deferred MMAs right after
  // the row maximum's first shuffle, before any exponential, which undoes the
  // overlap (ptxas 13.0, sm_90a). A branch ptxas cannot fold ends the block:
  // on the CTA index, uniform across the warp as `.aligned` needs, to a second
  // copy of the same wait, so both paths do the same thing.
  InlinePtx ptx(ctx.b,
                "{\n"
                ".reg .pred wgmma_alt;\n"
                ".reg .b32 wgmma_cta;\n"
                "mov.u32 wgmma_cta, %ctaid.x;\n"
                "setp.eq.u32 wgmma_alt, wgmma_cta, 2147483646;\n"
                "@wgmma_alt bra.uni wgmma_wait_alt_${:uid};\n" +
                    wait + "bra.uni wgmma_wait_done_${:uid};\n"
                "wgmma_wait_alt_${:uid}:\n" +
                    wait + "wgmma_wait_done_${:uid}:\n"
                "}");
  for (const auto& result : pending)
    for (size_t i = 0; i < result.regs.size(); ++i) ptx.output("f", ctx.b.getFloatTy());
  size_t operand = 0;
  for (const auto& result : pending) {
    const Lowered& inFlight = ctx.get(result.value);
    for (size_t reg : result.regs) ptx.input(std::to_string(operand++), inFlight.regs[reg]);
  }
  std::vector<llvm::Value*> done = ptx.sideEffects().emitAll();
  operand = 0;
  for (const auto& result : pending) {
    Lowered out = ctx.get(result.value);
    for (size_t reg : result.regs) out.regs[reg] = done[operand++];
    ctx.set(result.value, std::move(out));
  }
}

}  // namespace attnjit::codegen
