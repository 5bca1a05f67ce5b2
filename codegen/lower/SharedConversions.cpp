// Several layout conversions of one register tile through one shared-memory
// store: see SharedConversions.h.
//
// Which conversions qualify: convert_layout ops in one block whose inputs are a
// 2D tile held in registers or that tile through chains of 2D transposes (not a
// cp.async slot, which its readers read already, nor a shared operand), two or
// more of them, each a real data movement (not a renumbering of registers), and
// every destination readable from one swizzled tile of the source (the same
// contiguous dimension, as a cp.async slot's readers must). Writes of the buffer:
// the first conversion in block order, after a barrier (the previous round of a
// loop may still read it) and before one; reads are tagged for sinkSlotReads,
// which may move them down to their uses: nothing writes the buffer between the
// store and the end of the block.
//
// On a wgmma target, a conversion whose every use is a dot that can take wgmma,
// reading it as B, reads nothing: the buffer is stored in 128-byte column blocks
// (as a cp.async slot wgmma reads is), and the dots read it through matrix
// descriptors. Then one such conversion is enough for a buffer (a register tile
// that wgmma reads must go through shared memory anyway).
#include "codegen/lower/SharedConversions.h"

#include <map>

#include "codegen/lower/AsyncCopy.h"
#include "codegen/lower/SharedOperands.h"
#include "codegen/lower/SwizzledShared.h"
#include "codegen/lower/WarpgroupMma.h"

namespace attnjit::codegen {

using namespace ir;

namespace {

constexpr int64_t kBufferAlign = 128;

bool isTranspose2d(const Operation& op) {
  if (op.opcode() != Opcode::Transpose || op.result()->type().rank() != 2) return false;
  const auto& perm = op.attrs().getInts("perm");
  return perm == std::vector<int64_t>{1, 0};
}

// The tile a conversion's input views: through 2D transposes back to their source.
std::pair<const Value*, bool> viewedTile(const Value* value) {
  bool transposed = false;
  while (const Operation* def = value->definingOp()) {
    if (!isTranspose2d(*def)) break;
    value = def->operand(0);
    transposed = !transposed;
  }
  return {value, transposed};
}

bool planned(const LoweringContext& ctx, const Operation& convert, const Value* source) {
  if (ctx.sharedOperands && ctx.sharedOperands->converts.count(&convert)) return true;
  if (ctx.async && ctx.async->descriptorConverts.count(&convert)) return true;  // wgmma reads a cp.async slot
  const Operation* def = source->definingOp();
  if (!def) return true;  // a block argument: a loop-carried tile (a cp.async slot or registers across iterations)
  return ctx.async && ctx.async->loads.count(def);
}

struct Candidate {
  std::vector<std::pair<const Operation*, bool>> converts;  // in block order, with transposed
};

void collect(const LoweringContext& ctx, const Block& block, std::map<const Value*, Candidate>& found,
             std::vector<const Value*>& order) {
  for (const auto& op : block.operations()) {
    for (const auto& region : op->regions()) collect(ctx, *region, found, order);
    if (op->opcode() != Opcode::ConvertLayout) continue;
    auto [source, transposed] = viewedTile(op->operand(0));
    if (planned(ctx, *op, source)) continue;
    Candidate& candidate = found[source];
    if (candidate.converts.empty()) order.push_back(source);
    candidate.converts.emplace_back(op.get(), transposed);
  }
}

// `descriptors` receives the conversions wgmma reads through descriptors.
std::optional<SharedConversionGroup> planGroup(LoweringContext& ctx, const Value* source, const Candidate& candidate,
                                               const UseMap& uses, std::vector<const Operation*>& descriptors) {
  const Type& type = source->type();
  if (!type.isTile() || type.rank() != 2 || !type.layout() || type.hasPointerElements()) return std::nullopt;
  if (type.scalarKind() == ScalarKind::I1) return std::nullopt;
  const Block* block = candidate.converts.front().first->parentBlock();
  const int64_t elemBytes = storageBytes(type.scalarKind());
  const Operation& first = *candidate.converts.front().first;
  LinearLayout layout = ctx.linearLayout(type, first);
  std::optional<SwizzledTile> tile = swizzledTileFor(layout, layout, elemBytes);
  if (!tile) return std::nullopt;
  for (const auto& [convert, transposed] : candidate.converts) {
    if (convert->parentBlock() != block) return std::nullopt;
    LinearLayout to = ctx.linearLayout(convert->result()->type(), *convert);
    if (transposed) to = to.transposed({1, 0});
    if (!to.registerSourceMap(layout, {}).empty()) return std::nullopt;  // a renumbering: no trip through memory
    std::optional<SwizzledTile> readerTile = swizzledTileFor(layout, to, elemBytes);
    if (!readerTile || readerTile->contigDim != tile->contigDim) return std::nullopt;
    auto found = uses.find(convert->result());
    if (found != uses.end() &&
        feedsOnlyWarpgroupDots(ctx, *convert, found->second, 1, storedKMajor(*tile, transposed)))
      descriptors.push_back(convert);
  }
  const int64_t rows = layout.shape[static_cast<size_t>(1 - tile->contigDim)];
  if (!descriptors.empty() && !descriptorCompatible(*tile, rows)) descriptors.clear();
  if (descriptors.empty() && candidate.converts.size() < 2) return std::nullopt;
  SharedConversionGroup group{source, &first, *tile, std::move(layout)};
  if (!descriptors.empty()) {
    group.tile.useColumnBlocks(rows);
    group.warpgroupOperand = true;
  }
  return group;
}

SharedRegion bufferRegion(const SharedConversionGroup& group) {
  return {group.offset, group.offset + group.tile.bytes(group.layout)};
}

llvm::Value* bufferBase(LoweringContext& ctx, const SharedConversionGroup& group) {
  return ctx.b.CreateConstInBoundsGEP1_64(ctx.b.getInt8Ty(), ctx.sharedStart(), static_cast<uint64_t>(group.offset));
}

}  // namespace

void planSharedConversions(LoweringContext& ctx) {
  if (!ctx.allowSharedOperands) return;
  std::map<const Value*, Candidate> found;
  std::vector<const Value*> order;
  collect(ctx, ctx.kernel.body(), found, order);
  UseMap uses;
  collectUses(ctx.kernel.body(), uses);
  auto plan = std::make_unique<SharedConversionPlan>();
  for (const Value* source : order) {
    std::vector<const Operation*> descriptors;
    std::optional<SharedConversionGroup> group = planGroup(ctx, source, found[source], uses, descriptors);
    if (!group) continue;
    if (group->warpgroupOperand)
      alignForWarpgroupOperand(ctx);
    else
      ctx.asyncBufferBytes = (ctx.asyncBufferBytes + kBufferAlign - 1) / kBufferAlign * kBufferAlign;
    group->offset = ctx.asyncBufferBytes;
    ctx.asyncBufferBytes += group->tile.bytes(group->layout);
    const int id = static_cast<int>(plan->groups.size());
    for (const auto& [convert, transposed] : found[source].converts) {
      const bool descriptor = std::find(descriptors.begin(), descriptors.end(), convert) != descriptors.end();
      plan->converts[convert] = {id, transposed, descriptor};
    }
    plan->groups.push_back(std::move(*group));
  }
  if (!plan->groups.empty()) ctx.sharedConversions = std::move(plan);
}

std::string describeSharedConversionPlan(const LoweringContext& ctx) {
  if (!ctx.sharedConversions) return "no shared conversions\n";
  std::string text;
  for (const SharedConversionGroup& group : ctx.sharedConversions->groups) {
    int readers = 0;
    for (const auto& [convert, read] : ctx.sharedConversions->converts)
      readers += &ctx.sharedConversions->groups[static_cast<size_t>(read.group)] == &group;
    text += "%" + group.source->name() + ": " + group.source->type().str() + " at byte " +
            std::to_string(group.offset) + ", " + std::to_string(readers) + " conversions" +
            (group.warpgroupOperand ? ", 128-byte column blocks read by wgmma" : "") + "\n";
  }
  return text;
}

bool lowerSharedConversion(LoweringContext& ctx, const Operation& op) {
  if (!ctx.sharedConversions) return false;
  auto found = ctx.sharedConversions->converts.find(&op);
  if (found == ctx.sharedConversions->converts.end()) return false;
  const SharedConversionGroup& group = ctx.sharedConversions->groups[static_cast<size_t>(found->second.group)];
  llvm::Type* elementType = ctx.elementType(group.source->type().elementType());
  llvm::Value* base = bufferBase(ctx, group);
  if (&op == group.firstConvert) {
    const Lowered& source = ctx.get(group.source);
    ATTNJIT_CHECK(!source.isAsync() && source.layout && *source.layout == group.layout,
                  "codegen: shared conversion source");
    ctx.barrier();  // the previous round of a loop may still read the buffer
    storeSwizzledTileToRegion(ctx, source.regs, group.layout, group.tile, elementType, base,
                              bufferRegion(group));
    if (group.warpgroupOperand) fenceForAsyncProxy(ctx);  // wgmma reads it through the async proxy
    ctx.barrier();
  }
  const LinearLayout to = ctx.linearLayout(op.result()->type(), op);
  if (found->second.descriptor) {
    Lowered out;
    out.layout = to;
    out.warpgroupOperand = true;
    out.sharedConversion = found->second.group;
    out.transposedView = found->second.transposed;
    ctx.set(op.result(), std::move(out));
    return true;
  }
  const LinearLayout read = found->second.transposed ? to.transposed({1, 0}) : to;
  ctx.set(op.result(), Lowered{readSwizzledTileToSink(ctx, read, group.tile, elementType, base,
                                                      bufferRegion(group)),
                               to});
  return true;
}

bool isSharedConversionDescriptor(const LoweringContext& ctx, const Operation& convert) {
  if (!ctx.sharedConversions) return false;
  auto found = ctx.sharedConversions->converts.find(&convert);
  return found != ctx.sharedConversions->converts.end() && found->second.descriptor;
}

const SharedConversionGroup& sharedConversionGroup(const LoweringContext& ctx, const Lowered& value) {
  return ctx.sharedConversions->groups.at(static_cast<size_t>(value.sharedConversion));
}

llvm::Value* sharedConversionAddress(LoweringContext& ctx, const Lowered& value) {
  return bufferBase(ctx, sharedConversionGroup(ctx, value));
}

}  // namespace attnjit::codegen
