// Loop-invariant mma operands read from shared memory at every use.
//
// A dot operand defined before a loop (the Q tile of attention) is converted
// into its operand layout once, and its fragments then stay in registers for
// the whole loop: for 32 query rows per warp and head size 128 that is 64
// registers per thread, next to 128 for the output accumulator and 64 for a
// 64-key score tile. With kernel attribute shared_invariant_operands = 1 such a
// conversion instead stores the tile into a shared-memory buffer of its own
// (swizzled, as any conversion's tile) and leaves no registers; each dot that
// reads it re-reads its fragments with ldmatrix right there, inside the loop.
// The reads are tagged as slot reads, so sinkSlotReads moves each ldmatrix down
// to the mma that uses it, as it does for the cp.async K/V tiles: the operand
// then costs a few registers at a time, and the loop a few shared-memory reads
// per mma (FlashAttention-2 reads Q from shared memory the same way).
//
// Which conversions qualify: into a DotOperand layout of 16-bit elements (so
// that ldmatrix reads it), 2D, with a swizzled tile (swizzledTileFor), whose
// every use is a dot nested in a loop inside the conversion's block. Nothing
// writes the buffer after the conversion, so moving the reads within a block is
// always safe.
#include "codegen/lower/SharedOperands.h"

#include <algorithm>

#include "codegen/lower/WarpgroupMma.h"

namespace attnjit::codegen {

using namespace ir;

namespace {

// Whether `use` lies in the body of a loop that is itself in `block` or below.
bool inLoopBelow(const Operation& use, const Block& block) {
  for (const Block* b = use.parentBlock(); b && b != &block;) {
    const Operation* owner = b->parentOp();
    if (!owner) return false;
    if (owner->opcode() == Opcode::For) {
      for (const Block* up = owner->parentBlock(); up; up = up->parentOp() ? up->parentOp()->parentBlock() : nullptr)
        if (up == &block) return true;
      return false;
    }
    b = owner->parentBlock();
  }
  return false;
}

std::optional<SharedOperand> planConvert(LoweringContext& ctx, const Operation& op,
                                         const std::vector<const Operation*>& uses) {
  const Type& to = op.result()->type();
  if (!to.isTile() || to.rank() != 2 || !to.layout() || to.layout()->kind != LayoutKind::DotOperand)
    return std::nullopt;
  if (storageBytes(to.scalarKind()) != 2 || to.hasPointerElements()) return std::nullopt;
  if (!op.operand(0)->type().layout()) return std::nullopt;
  if (uses.empty()) return std::nullopt;
  for (const Operation* use : uses)
    if (use->opcode() != Opcode::Dot || use->operand(2) == op.result() || !inLoopBelow(*use, *op.parentBlock()))
      return std::nullopt;
  LinearLayout from = ctx.linearLayout(op.operand(0)->type(), op);
  LinearLayout operand = ctx.linearLayout(to, op);
  std::optional<SwizzledTile> tile = swizzledTileFor(from, operand, 2);
  if (!tile) return std::nullopt;
  SharedOperand planned{*tile, std::move(from), std::move(operand)};
  // An A operand that every use reads through wgmma: K-major column blocks.
  const int64_t rows = to.shape()[0];
  if (tile->contigDim == 1 && feedsOnlyWarpgroupDots(ctx, op, uses, 0) && descriptorCompatible(*tile, rows)) {
    planned.tile.useColumnBlocks(rows);
    planned.warpgroupOperand = true;
  }
  return planned;
}

void planBlock(LoweringContext& ctx, const Block& block, const UseMap& uses, SharedOperandPlan& plan) {
  for (const auto& op : block.operations()) {
    for (const auto& region : op->regions()) planBlock(ctx, *region, uses, plan);
    if (op->opcode() != Opcode::ConvertLayout) continue;
    auto found = uses.find(op->result());
    if (found == uses.end()) continue;
    std::optional<SharedOperand> operand = planConvert(ctx, *op, found->second);
    if (!operand) continue;
    if (operand->warpgroupOperand) alignForWarpgroupOperand(ctx);
    operand->offset = ctx.asyncBufferBytes;
    ctx.asyncBufferBytes += operand->tile.bytes(operand->from);
    plan.converts[op.get()] = static_cast<int>(plan.operands.size());
    plan.operands.push_back(std::move(*operand));
  }
}

SharedRegion bufferRegion(const SharedOperand& operand) {
  return {operand.offset, operand.offset + operand.tile.bytes(operand.from)};
}

llvm::Value* bufferBase(LoweringContext& ctx, const SharedOperand& operand) {
  return ctx.b.CreateConstInBoundsGEP1_64(ctx.b.getInt8Ty(), ctx.sharedStart(), static_cast<uint64_t>(operand.offset));
}

}  // namespace

void planSharedOperands(LoweringContext& ctx) {
  if (!ir::kernelFlag(ctx.kernel, ir::KernelAttribute::SharedInvariantOperands)) return;
  if (!ctx.allowSharedOperands || !ctx.target.hasMmaSync) return;
  UseMap uses;
  collectUses(ctx.kernel.body(), uses);
  auto plan = std::make_unique<SharedOperandPlan>();
  planBlock(ctx, ctx.kernel.body(), uses, *plan);
  if (!plan->operands.empty()) ctx.sharedOperands = std::move(plan);
}

std::string describeSharedOperandPlan(const LoweringContext& ctx) {
  if (!ctx.sharedOperands) {
    const char* why = !ir::kernelFlag(ctx.kernel, ir::KernelAttribute::SharedInvariantOperands)
                          ? "kernel attribute shared_invariant_operands = 0"
                      : !ctx.target.hasMmaSync ? "the target has no mma.sync"
                      : !ctx.allowSharedOperands ? "shared memory is too small for them (fit-shared-memory)"
                                                 : "no loop-invariant mma operand qualifies";
    return std::string("no shared operands: ") + why + "\n";
  }
  std::vector<const Operation*> convertOf(ctx.sharedOperands->operands.size(), nullptr);
  for (const auto& [convert, index] : ctx.sharedOperands->converts) convertOf[static_cast<size_t>(index)] = convert;
  std::string text;
  for (size_t i = 0; i < convertOf.size(); ++i) {
    const Value* value = convertOf[i]->result();
    text += "%" + value->name() + ": " + value->type().str() + " at byte " +
            std::to_string(ctx.sharedOperands->operands[i].offset) + "\n";
  }
  return text;
}

bool lowerSharedOperandConvert(LoweringContext& ctx, const Operation& op) {
  if (!ctx.sharedOperands) return false;
  auto found = ctx.sharedOperands->converts.find(&op);
  if (found == ctx.sharedOperands->converts.end()) return false;
  const SharedOperand& operand = ctx.sharedOperands->operands[static_cast<size_t>(found->second)];
  const Lowered& in = ctx.get(op.operand(0));
  ATTNJIT_CHECK(!in.isAsync() && *in.layout == operand.from, "codegen: shared operand source");
  llvm::Type* elementType = ctx.elementType(op.operand(0)->type().elementType());
  // A conversion inside an outer loop overwrites what the previous round's dots
  // may still read in other warps.
  ctx.barrier();
  storeSwizzledTileToRegion(ctx, in.regs, operand.from, operand.tile, elementType, bufferBase(ctx, operand),
                            bufferRegion(operand));
  if (operand.warpgroupOperand) fenceForAsyncProxy(ctx);  // wgmma reads it through the async proxy
  ctx.barrier();
  Lowered out;
  out.layout = operand.to;
  out.sharedOperand = found->second;
  ctx.set(op.result(), std::move(out));
  return true;
}

const SwizzledTile& sharedOperandTile(const LoweringContext& ctx, const Lowered& value) {
  return ctx.sharedOperands->operands.at(static_cast<size_t>(value.sharedOperand)).tile;
}

llvm::Value* sharedOperandAddress(LoweringContext& ctx, const Lowered& value) {
  return bufferBase(ctx, ctx.sharedOperands->operands.at(static_cast<size_t>(value.sharedOperand)));
}

SharedOperandReads::SharedOperandReads(LoweringContext& ctx, const Operation& op) : ctx_(ctx) {
  if (!ctx.sharedOperands) return;
  // A dot lowered with wgmma reads a column-blocked A operand through its descriptor.
  const bool warpgroupDot = op.opcode() == Opcode::Dot && ctx.get(op.operand(1)).warpgroupOperand;
  for (const Value* value : op.operands()) {
    const Lowered* lowered = ctx.find(value);
    if (!lowered || !lowered->isSharedOperand()) continue;
    const Lowered& in = *lowered;
    if (warpgroupDot && value == op.operand(0) && sharedOperandTile(ctx, in).blockRows > 0) continue;
    if (std::any_of(saved_.begin(), saved_.end(), [&](const auto& s) { return s.first == value; })) continue;
    const SharedOperand& operand = ctx.sharedOperands->operands[static_cast<size_t>(in.sharedOperand)];
    // Tagged for sinkSlotReads, which moves each read next to its mma.
    std::vector<llvm::Value*> regs = readSwizzledTileToSink(
        ctx, operand.to, operand.tile, ctx.elementType(value->type().elementType()), bufferBase(ctx, operand),
        bufferRegion(operand));
    saved_.emplace_back(value, in);
    ctx.set(value, Lowered{std::move(regs), operand.to});
  }
}

SharedOperandReads::~SharedOperandReads() {
  for (auto& [value, lowered] : saved_) ctx_.set(value, std::move(lowered));
}

}  // namespace attnjit::codegen
