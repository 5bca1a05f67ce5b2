// cp.async for software-pipelined tile loads: the K/V tiles of the attention
// loops go from global memory straight into swizzled shared-memory buffers,
// instead of through registers and a store.
//
// The pipelining pass (compiler/passes/Pipelining.cpp) leaves loops of this shape:
//
//   %t0 = load %p0, %m0, %zero                 // prologue: tile lo
//   for ... iter_args(%t = %t0) {
//     %n = load %p1, %m1, %zero                // top of the body: tile iv + step
//     ... %x = convert_layout %t ...           // the current tile, into an operand layout
//     yield ..., %n
//   }
//
// Without cp.async, %n is held in registers for a whole iteration and then
// stored into a shared tile by the convert. Here, when the loads' vector accesses
// are 16, 8 or 4 bytes along the tile's contiguous dimension and the carried tile
// is read only at the body's top level, the loads become cp.async copies into the swizzled tile placement a
// conversion uses, in one of the slots of a buffer of their own (two, used in
// turn each iteration; num_stages of them where that is more, for producer
// warps that run ahead: WarpSpecialization.cpp). Converts read the slot directly (ldmatrix for
// operands); any other reader (e.g. the unpacking of a quantized tile) first
// reads the tile back into its load layout, once per iteration, so the prefetched
// tile still lives in shared memory rather than registers while it is in flight.
// Masked-off chunks copy 0 bytes and the hardware zero-fills them, which is the
// loads' `other` (required 0).
//
// Synchronization: every copy is committed as its own group. A convert waits
// until the group of its tile is complete (cp.async.wait_group with the number of
// groups committed after it, counted at compile time: the later loads of the
// previous round plus those of this iteration so far) and then a barrier makes
// all threads' copies visible. Before the first copy of an iteration a barrier
// makes sure every thread finished reading the slot about to be overwritten (it
// held the tile of the previous iteration). A loop's exit waits for all copies.
//
// The kernel attribute async_copy = 0 turns this off (the register path stays);
// targets without cp.async (none in the table, all are sm_80+) never use it, and
// a kernel whose buffers would not fit the target's shared memory next to its
// scratch area is lowered again without them (generatePtx).
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "codegen/lower/AsyncCopy.h"
#include "codegen/lower/InlinePtx.h"
#include "codegen/lower/RedundantSync.h"
#include "codegen/lower/SwizzledShared.h"
#include "codegen/lower/TensorCopies.h"
#include "codegen/lower/WarpSpecialization.h"
#include "codegen/lower/WarpgroupMma.h"

namespace attnjit::codegen {

using namespace ir;

namespace {

using Uses = UseMap;

bool isZeroConstant(const Value* v) {
  const Operation* def = v ? v->definingOp() : nullptr;
  if (!def) return false;
  if (def->opcode() == Opcode::Splat) return isZeroConstant(def->operand(0));
  if (def->opcode() != Opcode::Constant) return false;
  const AttrValue* value = def->attrs().find("value");
  if (!value) return false;
  if (const auto* i = std::get_if<int64_t>(value)) return *i == 0;
  if (const auto* d = std::get_if<double>(value)) return *d == 0.0 && !std::signbit(*d);
  return false;
}

// The bytes one cp.async moves for a masked tile load from global memory with a
// zero fallback: its vector width (16 bytes, or 8 or 4 where the rows are only
// that aligned, e.g. per-token-head rows of D + 4 bytes), which must run along the
// tile's contiguous dimension; 0 where cp.async cannot do the load.
int copyBytes(LoweringContext& ctx, const Operation& load, const LinearLayout& layout, const SwizzledTile& tile) {
  if (load.opcode() != Opcode::Load || load.numOperands() != 3 || !load.result()->type().isTile()) return 0;
  const Type& ptrType = load.operand(0)->type();
  if (ptrType.addressSpace() != AddressSpace::Global) return 0;
  // i1 (a byte in memory, i1 in registers) and i4 (nibbles) need their own loads.
  if (ptrType.scalarKind() == ScalarKind::I1 || ptrType.scalarKind() == ScalarKind::I4) return 0;
  if (!isZeroConstant(load.operand(2))) return 0;
  const int bytes = storageBytes(ptrType.scalarKind());
  if (bytes != tile.elemBytes) return 0;
  const int width = accessVectorWidth(ctx, load, layout, bytes, load.operand(1), load.operand(2));
  const int copy = width * bytes;
  if (copy != 4 && copy != 8 && copy != 16) return 0;
  // The access's leading registers must be the tile's contiguous dimension, in
  // aligned runs of at least one copy.
  if (layout.reg.empty() || layout.reg[0][tile.contigDim] != 1) return 0;
  if (swizzleVectorWidth(layout, tile) * bytes < copy) return 0;
  return copy;
}

// The buffer for iter_arg `index` of `loop`, when that tile qualifies.
std::optional<AsyncBuffer> planCarriedTile(LoweringContext& ctx, const Operation& loop, size_t index,
                                           const Uses& uses, bool mayCastOnCopy = true) {
  const Block& body = *loop.region(0);
  const Value* carried = body.argument(1 + index);
  const Value* init = loop.operand(3 + index);
  const Operation* yield = body.back();
  if (!yield || yield->opcode() != Opcode::Yield || index >= yield->numOperands()) return std::nullopt;
  const Value* next = yield->operand(index);
  const Operation* prologueLoad = init->definingOp();
  const Operation* bodyLoad = next->definingOp();
  if (!prologueLoad || !bodyLoad || bodyLoad->parentBlock() != &body) return std::nullopt;
  if (prologueLoad->parentBlock() != loop.parentBlock()) return std::nullopt;
  const Type& type = carried->type();
  if (!type.isTile() || type.rank() != 2 || !type.layout()) return std::nullopt;
  if (prologueLoad->result()->type() != type || bodyLoad->result()->type() != type) return std::nullopt;
  auto usesOf = [&](const Value* v) -> const std::vector<const Operation*>& {
    static const std::vector<const Operation*> none;
    auto it = uses.find(v);
    return it == uses.end() ? none : it->second;
  };
  // The loads feed only the loop; the loop's result for this tile is dead.
  if (usesOf(init).size() != 1 || usesOf(next).size() != 1) return std::nullopt;
  if (!usesOf(loop.result(index)).empty()) return std::nullopt;
  // The carried tile is read only at the body's top level (the waits are counted
  // along the body's straight line): by layout conversions, which read the slot
  // directly, and by any other op, before which the tile is read back into its
  // load layout once per iteration (materializeAsyncTiles).
  const std::vector<const Operation*>& readers = usesOf(carried);
  if (readers.empty()) return std::nullopt;
  LinearLayout layout = ctx.linearLayout(type, loop);
  // Cast on copy: an fp8 tile whose one reader, a cast to f16/bf16 in the same
  // layout, feeds only wgmma operands, in a kernel whose producer warps can
  // convert it (the slot then holds the cast's tile: `value` is what is read).
  const Operation* castOnCopy = nullptr;
  if (mayCastOnCopy && readers.size() == 1 && readers[0]->opcode() == Opcode::Cast &&
      readers[0]->parentBlock() == &body &&
      (type.scalarKind() == ScalarKind::F8E4M3 || type.scalarKind() == ScalarKind::F8E5M2) &&
      (readers[0]->result()->type().scalarKind() == ScalarKind::F16 ||
       readers[0]->result()->type().scalarKind() == ScalarKind::BF16) &&
      ctx.allowWarpSpecialization && ctx.target.hasWgmma &&
      kernelFlag(ctx.kernel, KernelAttribute::WarpSpecialize) &&
      ctx.linearLayout(readers[0]->result()->type(), *readers[0]) == layout)
    castOnCopy = readers[0];
  const Value* value = castOnCopy ? castOnCopy->result() : carried;
  const int64_t elemBytes = storageBytes(value->type().scalarKind());
  std::optional<SwizzledTile> tile = swizzledTileFor(layout, layout, elemBytes);
  if (!tile) return std::nullopt;
  // A 2D transpose of the tile is a view of the same slot (its readers read the
  // slot with the coordinates swapped back).
  std::vector<const Operation*> descriptorConverts;
  bool onlyDescriptors = true;
  std::function<bool(const Value*, bool)> readable = [&](const Value* v, bool transposed) {
    for (const Operation* reader : usesOf(v)) {
      if (reader->parentBlock() != &body || reader->opcode() == Opcode::Yield) return false;
      if (reader->opcode() == Opcode::Transpose) {
        if (!readable(reader->result(), !transposed)) return false;
        continue;
      }
      if (reader->opcode() != Opcode::ConvertLayout) {
        onlyDescriptors = false;
        continue;
      }
      if (feedsOnlyWarpgroupDots(ctx, *reader, usesOf(reader->result()), 1, storedKMajor(*tile, transposed)))
        descriptorConverts.push_back(reader);
      else
        onlyDescriptors = false;
      LinearLayout to = ctx.linearLayout(reader->result()->type(), *reader);
      if (transposed) to = to.transposed({1, 0});
      std::optional<SwizzledTile> readerTile = swizzledTileFor(layout, to, elemBytes);
      if (!readerTile || readerTile->contigDim != tile->contigDim) return false;
    }
    return true;
  };
  if (!readable(value, false)) return std::nullopt;
  // wgmma reads the slot itself when it is stored in column blocks.
  const int64_t rows = layout.shape[static_cast<size_t>(1 - tile->contigDim)];
  const bool warpgroupOperand = !descriptorConverts.empty() && descriptorCompatible(*tile, rows);
  // A load_tensor tile: TMA boxes fill the slot, by producer warps only, and
  // only where wgmma alone reads it in the column blocks the boxes land in.
  const bool tensorCopy = prologueLoad->opcode() == Opcode::LoadTensor;
  if (tensorCopy != (bodyLoad->opcode() == Opcode::LoadTensor)) return std::nullopt;
  int copy = 0;
  if (tensorCopy) {
    if (!onlyDescriptors || !warpgroupOperand || tile->contigDim != 1 || castOnCopy || !ctx.allowWarpSpecialization ||
        !ctx.target.hasWgmma || !kernelFlag(ctx.kernel, KernelAttribute::WarpSpecialize))
      return std::nullopt;
  } else if (castOnCopy) {
    // Every reader is a wgmma operand (nothing reads the slot into registers),
    // and each thread's 16-byte run of fp8 bytes becomes two 16-byte runs of the
    // cast's tile (the slot's swizzle moves 16-byte chunks whole).
    std::optional<SwizzledTile> byteTile = swizzledTileFor(layout, layout, 1);
    if (!onlyDescriptors || !warpgroupOperand || !byteTile) castOnCopy = nullptr;
    if (castOnCopy && (copyBytes(ctx, *prologueLoad, layout, *byteTile) != 16 ||
                       copyBytes(ctx, *bodyLoad, layout, *byteTile) != 16 || swizzleVectorWidth(layout, *tile) < 8))
      castOnCopy = nullptr;
    // Otherwise the tile is planned as the bytes it is (the cast reads the slot).
    if (!castOnCopy) return planCarriedTile(ctx, loop, index, uses, /*mayCastOnCopy=*/false);
    copy = 16;
  } else {
    copy = copyBytes(ctx, *prologueLoad, layout, *tile);
    if (copy == 0 || copyBytes(ctx, *bodyLoad, layout, *tile) != copy) return std::nullopt;
  }
  if (warpgroupOperand) tile->useColumnBlocks(rows);
  AsyncBuffer buffer{*tile, layout};
  buffer.tensorCopy = tensorCopy;
  buffer.warpgroupOperand = warpgroupOperand;
  if (warpgroupOperand) buffer.descriptorConverts = std::move(descriptorConverts);
  buffer.castOnCopy = castOnCopy;
  buffer.copyBytes = copy;
  buffer.slotBytes = tile->bytes(layout);
  buffer.slots = static_cast<int>(std::max<int64_t>(2, kernelAttribute(ctx.kernel, KernelAttribute::NumStages)));
  buffer.loop = &loop;
  buffer.carried = carried;
  buffer.prologueLoad = prologueLoad;
  buffer.bodyLoad = bodyLoad;
  return buffer;
}

// Sibling ops of a block run one after the other, so the buffers planned for one
// (its loop's, or those of loops nested in it) share the bytes of the others': a
// kernel that splits its KV loop in two (unmasked tiles, then masked ones) needs
// one loop's buffers, not two. The hand-over is safe because a loop's exit waits
// for all its copies and the next loop's first copies come after a barrier
// (lowerAsyncLoad), so no thread still reads the slots they overwrite.
void planBlock(LoweringContext& ctx, const Block& block, const Uses& uses, AsyncCopyPlan& plan) {
  const int64_t siblingsStart = ctx.asyncBufferBytes;
  int64_t siblingsEnd = siblingsStart;
  for (const auto& op : block.operations()) {
    ctx.asyncBufferBytes = siblingsStart;
    for (const auto& region : op->regions()) planBlock(ctx, *region, uses, plan);
    siblingsEnd = std::max(siblingsEnd, ctx.asyncBufferBytes);
    if (op->opcode() != Opcode::For) continue;
    std::vector<AsyncBuffer> found;
    for (size_t i = 0; i + 3 < op->numOperands(); ++i)
      if (auto buffer = planCarriedTile(ctx, *op, i, uses)) found.push_back(std::move(*buffer));
    // Groups committed after each buffer's in the previous round: later in the
    // body (iterations ≥ 1) and later in the prologue (iteration 0); the smaller.
    for (AsyncBuffer& buffer : found) {
      int laterInBody = 0, laterInPrologue = 0;
      for (const AsyncBuffer& other : found) {
        if (positionOf(*other.bodyLoad) > positionOf(*buffer.bodyLoad)) ++laterInBody;
        if (positionOf(*other.prologueLoad) > positionOf(*buffer.prologueLoad)) ++laterInPrologue;
      }
      buffer.committedAfter = std::min(laterInBody, laterInPrologue);
    }
    for (AsyncBuffer& buffer : found) {
      if (buffer.warpgroupOperand) {
        alignForWarpgroupOperand(ctx);
        for (const Operation* convert : buffer.descriptorConverts) plan.descriptorConverts.insert(convert);
      }
      buffer.offset = ctx.asyncBufferBytes;
      ctx.asyncBufferBytes += buffer.slots * buffer.slotBytes;
      const int id = static_cast<int>(plan.buffers.size());
      plan.loads[buffer.prologueLoad] = id;
      plan.loads[buffer.bodyLoad] = id;
      plan.buffers.push_back(std::move(buffer));
    }
    siblingsEnd = std::max(siblingsEnd, ctx.asyncBufferBytes);
  }
  ctx.asyncBufferBytes = siblingsEnd;
}

// Every slot of a buffer, for removeRedundantSync (the buffers of sibling loops
// share bytes: regions are byte ranges, not buffers).
SharedRegion slotsRegion(const AsyncBuffer& buffer) {
  return {buffer.offset, buffer.offset + buffer.slots * buffer.slotBytes, /*slots=*/true};
}

llvm::Value* slotBase(LoweringContext& ctx, const AsyncBuffer& buffer, llvm::Value* slot) {
  llvm::IRBuilder<>& b = ctx.b;
  llvm::Value* bytes = b.CreateAdd(ctx.i32(buffer.offset), b.CreateMul(slot, ctx.i32(buffer.slotBytes)));
  return b.CreateInBoundsGEP(b.getInt8Ty(), ctx.sharedStart(), bytes);
}

// The slot `op` reads when it is the cast of a cast-on-copy buffer (the slot
// holds its result); null for any other op.
const Lowered* castOnCopySlot(const LoweringContext& ctx, const Operation& op) {
  if (!ctx.async || op.opcode() != Opcode::Cast) return nullptr;
  const Lowered* in = ctx.find(op.operand(0));
  if (!in || !in->isAsync()) return nullptr;
  return ctx.async->buffers[static_cast<size_t>(in->asyncBuffer)].castOnCopy == &op ? in : nullptr;
}

// A producer thread's part of a cast-on-copy tile: each 16-byte run of fp8
// bytes is loaded into registers (a predicated load: zeros where masked off,
// the load's `other`; no branch, so the runs' loads can all be in flight),
// cast pairwise as `cast` does, and stored as two 16-byte runs of the cast's
// tile at their swizzled places in the slot.
void storeCastTile(LoweringContext& ctx, const AsyncBuffer& buffer, const Lowered& ptr, const Lowered& mask,
                   llvm::Value* base, ScalarKind from) {
  llvm::IRBuilder<>& b = ctx.b;
  const ScalarKind to = buffer.castOnCopy->result()->type().scalarKind();
  llvm::Type* halfTy = to == ScalarKind::F16 ? b.getHalfTy() : b.getBFloatTy();
  auto* wordsTy = llvm::FixedVectorType::get(b.getInt32Ty(), 4);
  auto* bytesTy = llvm::FixedVectorType::get(b.getInt8Ty(), 16);
  auto* halvesTy = llvm::FixedVectorType::get(halfTy, 8);
  SwizzledOffsets offsets(ctx, buffer.layout, buffer.tile);
  for (int64_t r = 0; r < buffer.layout.numRegisters(); r += 16) {
    InlinePtx load(b, "@$5 ld.global.v4.b32 {$0, $1, $2, $3}, [$4];");
    for (int i = 0; i < 4; ++i) load.output("r", b.getInt32Ty());
    load.input("l", ptr.regs[static_cast<size_t>(r)]).input("b", mask.regs[static_cast<size_t>(r)]);
    for (int i = 0; i < 4; ++i) load.input(std::to_string(i), b.getInt32(0));
    llvm::Value* words = llvm::PoisonValue::get(wordsTy);
    const std::vector<llvm::Value*> loaded = load.emitAll();
    for (unsigned i = 0; i < 4; ++i) words = b.CreateInsertElement(words, loaded[i], uint64_t{i});
    llvm::Value* bytes = b.CreateBitCast(words, bytesTy);
    for (int half = 0; half < 2; ++half) {
      llvm::Value* halves = llvm::PoisonValue::get(halvesTy);
      for (unsigned i = 0; i < 8; i += 2) {
        const unsigned byte = static_cast<unsigned>(8 * half) + i;
        auto [lo, hi] = castFp8Pair(ctx, b.CreateExtractElement(bytes, uint64_t{byte}),
                                    b.CreateExtractElement(bytes, uint64_t{byte + 1}), from, to);
        halves = b.CreateInsertElement(b.CreateInsertElement(halves, lo, uint64_t{i}), hi, uint64_t{i + 1});
      }
      b.CreateAlignedStore(halves, offsets.address(base, halfTy, r + 8 * half), llvm::Align(16));
    }
  }
}

}  // namespace

size_t positionOf(const Operation& op) {
  const auto& ops = op.parentBlock()->operations();
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].get() == &op) return i;
  return ops.size();
}

bool lowerCastOnCopyView(LoweringContext& ctx, const Operation& op) {
  const Lowered* in = castOnCopySlot(ctx, op);
  if (!in) return false;
  Lowered view = *in;
  view.layout = ctx.linearLayout(op.result()->type(), op);
  ctx.set(op.result(), std::move(view));
  return true;
}

llvm::Value* nextSlot(llvm::IRBuilder<>& b, llvm::Value* slot, int slots) {
  if (slots == 2) return b.CreateXor(slot, b.getInt32(1));
  llvm::Value* next = b.CreateAdd(slot, b.getInt32(1));
  return b.CreateSelect(b.CreateICmpEQ(next, b.getInt32(static_cast<uint32_t>(slots))), b.getInt32(0), next);
}

void planAsyncCopies(LoweringContext& ctx) {
  const bool planned = ir::kernelFlag(ctx.kernel, ir::KernelAttribute::AsyncCopy) && ctx.target.hasCpAsync &&
                       ctx.allowAsyncCopy;
  if (planned) {
    Uses uses;
    collectUses(ctx.kernel.body(), uses);
    auto plan = std::make_unique<AsyncCopyPlan>();
    planBlock(ctx, ctx.kernel.body(), uses, *plan);
    if (!plan->buffers.empty()) ctx.async = std::move(plan);
  }
  // A load_tensor the passes kept has no lowering but TMA into a slot.
  walk(ctx.kernel.body(), [&](const Operation& op) {
    if (op.opcode() == Opcode::LoadTensor && (!ctx.async || !ctx.async->loads.count(&op)))
      ctx.unsupported(op, std::string("copied by TMA: ") +
                              (planned ? "its tile is not a pipelined slot that only warpgroup MMAs read as B"
                                       : "the slots were given up (shared memory, or no cp.async)"));
  });
}

std::string describeAsyncCopyPlan(const LoweringContext& ctx) {
  if (!ctx.async) {
    const char* why = !ir::kernelFlag(ctx.kernel, ir::KernelAttribute::AsyncCopy) ? "kernel attribute async_copy = 0"
                      : !ctx.target.hasCpAsync                                      ? "the target has no cp.async"
                      : !ctx.allowAsyncCopy ? "shared memory is too small for the slots (fit-shared-memory)"
                                            : "no pipelined tile load qualifies";
    return std::string("no cp.async buffers: ") + why + "\n";
  }
  std::string text;
  for (const AsyncBuffer& buffer : ctx.async->buffers) {
    text += "%" + buffer.carried->name() + ": " + buffer.carried->type().str() + ", " +
            std::to_string(buffer.slots) + " slots of " +
            std::to_string(buffer.slotBytes) + " B at byte " + std::to_string(buffer.offset) + ", " +
            (buffer.tensorCopy ? std::string("TMA boxes") : std::to_string(buffer.copyBytes) + "-byte copies") +
            ", " + std::to_string(buffer.tile.maxPhase) +
            " swizzle phases" + (buffer.warpgroupOperand ? ", 128-byte column blocks read by wgmma" : "") +
            (buffer.castOnCopy ? ", cast to " + buffer.castOnCopy->result()->type().str() + " by the producer warps"
                               : "") +
            (buffer.tensorCopy ? ", issued by one producer thread" : "") +
            "\n";
  }
  text += "cp.async buffers: " + std::to_string(ctx.asyncBufferBytes) + " B\n";
  return text;
}

bool lowerAsyncLoad(LoweringContext& ctx, const Operation& op) {
  if (!ctx.async) return false;
  auto found = ctx.async->loads.find(&op);
  if (found == ctx.async->loads.end()) return false;
  const int id = found->second;
  const AsyncBuffer& buffer = ctx.async->buffers[static_cast<size_t>(id)];
  llvm::IRBuilder<>& b = ctx.b;
  // Warp-specialized (WarpSpecialization.cpp): the producer warps copy (their
  // caller waits for the slot and signals it full); the compute warps only name
  // the slot.
  const bool specialized = ctx.warpSpecialization != nullptr;
  const bool producer = ctx.role == LoweringContext::Role::Producer;
  llvm::Value* slot;
  if (&op == buffer.prologueLoad) {
    // When the loop runs more than once (inside another loop), its last reads may
    // still be under way in other warps.
    if (!specialized) ctx.barrier();
    slot = specialized ? prologueSlot(ctx, buffer) : ctx.i32(0);
  } else if (producer) {
    slot = producerFill(ctx, buffer, op).slot;
  } else if (specialized) {
    slot = nextSlot(b, ctx.async->currentSlot.at(id), buffer.slots);
  } else {
    int& committed = ctx.async->bodyCommits[buffer.loop];
    // The first copy of an iteration overwrites slots last read in the previous one.
    if (committed == 0) ctx.barrier();
    slot = nextSlot(b, ctx.async->currentSlot.at(id), buffer.slots);
  }
  auto result = [&] {
    Lowered out;
    out.regs = {slot};
    out.layout = buffer.layout;
    out.asyncBuffer = id;
    ctx.set(op.result(), std::move(out));
  };
  if (specialized && !producer) {
    result();
    return true;
  }
  const Lowered& ptr = ctx.get(op.operand(0));
  const Lowered& mask = ctx.get(op.operand(1));
  const LinearLayout& layout = buffer.layout;
  const SwizzledTile& tile = buffer.tile;
  llvm::Value* base = slotBase(ctx, buffer, slot);
  if (buffer.castOnCopy) {
    ATTNJIT_CHECK(producer, "codegen: a cast-on-copy tile outside the producer warps");
    storeCastTile(ctx, buffer, ptr, mask, base, op.result()->type().scalarKind());
    result();
    return true;
  }
  llvm::Type* elementType = ctx.elementType(op.result()->type().elementType());
  // 16-byte copies bypass L1 (.cg); 4 and 8 bytes exist only as .ca.
  const llvm::Intrinsic::ID copy = buffer.copyBytes == 16  ? llvm::Intrinsic::nvvm_cp_async_cg_shared_global_16_s
                                   : buffer.copyBytes == 8 ? llvm::Intrinsic::nvvm_cp_async_ca_shared_global_8_s
                                                           : llvm::Intrinsic::nvvm_cp_async_ca_shared_global_4_s;
  const int64_t copyElements = buffer.copyBytes / tile.elemBytes;
  SwizzledOffsets offsets(ctx, layout, tile);
  AppendedInstructions copies(b);
  for (int64_t r = 0; r < layout.numRegisters(); r += copyElements) {
    llvm::Value* destination = offsets.address(base, elementType, r);
    // Masked off: copy nothing, and the hardware fills the bytes with zeros.
    llvm::Value* sourceBytes = b.CreateSelect(mask.regs[static_cast<size_t>(r)], ctx.i32(buffer.copyBytes), ctx.i32(0));
    b.CreateIntrinsic(b.getVoidTy(), copy, {destination, ptr.regs[static_cast<size_t>(r)], sourceBytes});
  }
  tagSharedAccesses(copies, slotsRegion(buffer), SharedAccess::Write);
  // The producer's caller arrives on the slot's full barrier (lowerProducerCopies).
  if (!specialized) {
    b.CreateIntrinsic(b.getVoidTy(), llvm::Intrinsic::nvvm_cp_async_commit_group, llvm::ArrayRef<llvm::Value*>{});
    if (&op == buffer.bodyLoad) ++ctx.async->bodyCommits[buffer.loop];
  }
  result();
  return true;
}

namespace {

// Waits until this thread's copies of `buffer`'s current tile are complete: the
// groups committed after them are counted at compile time.
void waitForOwnCopies(LoweringContext& ctx, const AsyncBuffer& buffer) {
  const int pending = buffer.committedAfter + ctx.async->bodyCommits[buffer.loop];
  ctx.b.CreateIntrinsic(ctx.b.getVoidTy(), llvm::Intrinsic::nvvm_cp_async_wait_group, {ctx.i32(pending)});
}

// Waits for the copies of the tile in `in`'s slot (and every thread's, through the
// barrier), then reads it into layout `to`.
// Compute warps of a warp-specialized kernel: waits until the producer filled
// the slot `in` names (the fill of the current iteration).
void waitForSlot(LoweringContext& ctx, const Lowered& in) {
  const AsyncBuffer& buffer = ctx.async->buffers[static_cast<size_t>(in.asyncBuffer)];
  waitSlotFull(ctx, in.asyncBuffer, in.regs.at(0), ctx.warpSpecialization->iteration.at(buffer.loop));
}

std::vector<llvm::Value*> readAsyncTile(LoweringContext& ctx, const Lowered& in, const LinearLayout& to,
                                        llvm::Type* elementType) {
  const AsyncBuffer& buffer = ctx.async->buffers[static_cast<size_t>(in.asyncBuffer)];
  if (ctx.warpSpecialization) {
    waitForSlot(ctx, in);
  } else {
    waitForOwnCopies(ctx, buffer);
    ctx.barrier();
  }
  const LinearLayout read = in.transposedView ? to.transposed({1, 0}) : to;
  return readSwizzledTileToSink(ctx, read, buffer.tile, elementType, slotBase(ctx, buffer, in.regs[0]),
                                slotsRegion(buffer));
}

}  // namespace

std::optional<Lowered> lowerAsyncDescriptorConvert(LoweringContext& ctx, const Operation& op, const Lowered& in,
                                                   const LinearLayout& to) {
  if (!ctx.async || !ctx.async->descriptorConverts.count(&op)) return std::nullopt;
  const AsyncBuffer& buffer = ctx.async->buffers[static_cast<size_t>(in.asyncBuffer)];
  ATTNJIT_CHECK(buffer.warpgroupOperand, "codegen: descriptor convert of a buffer without column blocks");
  Lowered out = in;
  out.layout = to;
  out.warpgroupOperand = true;
  if (ctx.warpSpecialization) {
    out.awaitsSlot = true;  // waited for by the wgmma group that reads it
  } else {
    waitForOwnCopies(ctx, buffer);
    fenceForAsyncProxy(ctx);  // cp.async writes through the generic proxy, wgmma reads through the async one
    ctx.barrier();
  }
  return out;
}

void waitForSlotsBeforeWarpgroupRead(LoweringContext& ctx, const ir::Block* block,
                                     const std::vector<const Lowered*>& values) {
  std::vector<AsyncCopyPlan::SlotWait>& waits = ctx.async->slotWaits;
  bool copiedSlotWaited = false;
  for (const Lowered* value : values) {
    ATTNJIT_CHECK(value->awaitsSlot && value->isAsync(), "codegen: a slot wait for a value without one");
    llvm::Value* slot = value->regs.at(0);
    const bool waited = std::any_of(waits.begin(), waits.end(), [&](const AsyncCopyPlan::SlotWait& wait) {
      return wait.block == block && wait.buffer == value->asyncBuffer && wait.slot == slot;
    });
    if (waited) continue;
    waitForSlot(ctx, *value);
    waits.push_back({block, value->asyncBuffer, slot});
    const AsyncBuffer& buffer = ctx.async->buffers[static_cast<size_t>(value->asyncBuffer)];
    if (!buffer.castOnCopy && !buffer.tensorCopy) copiedSlotWaited = true;
  }
  // The producers' cp.async copies wrote through the generic proxy; one fence
  // after the last wait orders every slot waited for before it.
  if (copiedSlotWaited) fenceForAsyncProxy(ctx);
}

void forgetSlotWaits(LoweringContext& ctx, const ir::Block& block) {
  if (!ctx.async) return;
  std::erase_if(ctx.async->slotWaits, [&](const AsyncCopyPlan::SlotWait& wait) { return wait.block == &block; });
}

const SwizzledTile& asyncBufferTile(const LoweringContext& ctx, const Lowered& value) {
  return ctx.async->buffers.at(static_cast<size_t>(value.asyncBuffer)).tile;
}

const LinearLayout& asyncBufferLayout(const LoweringContext& ctx, const Lowered& value) {
  return ctx.async->buffers.at(static_cast<size_t>(value.asyncBuffer)).layout;
}

llvm::Value* asyncSlotAddress(LoweringContext& ctx, const Lowered& value) {
  return slotBase(ctx, ctx.async->buffers.at(static_cast<size_t>(value.asyncBuffer)), value.regs.at(0));
}

std::vector<llvm::Value*> lowerAsyncConvert(LoweringContext& ctx, const Operation& op, const Lowered& in,
                                            const LinearLayout& to) {
  return readAsyncTile(ctx, in, to, ctx.elementType(op.operand(0)->type().elementType()));
}

void materializeAsyncTiles(LoweringContext& ctx, const Operation& op) {
  if (!ctx.async) return;
  if (castOnCopySlot(ctx, op)) return;  // a view of the slot holding its result
  switch (op.opcode()) {
    case Opcode::ConvertLayout:  // reads the slot itself
    case Opcode::Transpose:      // a view of the slot
    case Opcode::For:            // takes the prologue's tile as it is
    case Opcode::Yield:          // passes the next tile's slot
      return;
    default:
      break;
  }
  for (const Value* operand : op.operands()) {
    // Not lowered: a copy's address or mask that only the producer warps compute.
    const Lowered* lowered = ctx.find(operand);
    if (!lowered || !lowered->isAsync() || lowered->warpgroupOperand) continue;
    const Lowered& in = *lowered;
    const LinearLayout layout = *in.layout;
    std::vector<llvm::Value*> regs = readAsyncTile(ctx, in, layout, ctx.elementType(operand->type().elementType()));
    ctx.set(operand, Lowered{std::move(regs), layout});
  }
}

void beginAsyncLoop(LoweringContext& ctx, const Operation& loop) {
  if (!ctx.async) return;
  for (size_t id = 0; id < ctx.async->buffers.size(); ++id) {
    const AsyncBuffer& buffer = ctx.async->buffers[id];
    if (buffer.loop == &loop) ctx.async->currentSlot[static_cast<int>(id)] = ctx.get(buffer.carried).regs.at(0);
  }
  if (ctx.warpSpecialization) recordIteration(ctx, loop);
}

void finishAsyncLoop(LoweringContext& ctx, const Operation& loop) {
  if (!ctx.async) return;
  const bool hasBuffers = std::any_of(ctx.async->buffers.begin(), ctx.async->buffers.end(),
                                      [&](const AsyncBuffer& buffer) { return buffer.loop == &loop; });
  if (hasBuffers && ctx.warpSpecialization) {
    finishSpecializedLoop(ctx, loop);
  }
  else if (hasBuffers)
    ctx.b.CreateIntrinsic(ctx.b.getVoidTy(), llvm::Intrinsic::nvvm_cp_async_wait_all, llvm::ArrayRef<llvm::Value*>{});
}

}  // namespace attnjit::codegen
