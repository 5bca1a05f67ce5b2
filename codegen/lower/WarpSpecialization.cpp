// Warp specialization of the cp.async pipelines (kernel attribute
// warp_specialize, targets with wgmma).
//
// In a pipelined loop (AsyncCopy.cpp) every warp computes the next tile's copy
// addresses (block-table loads included), issues the copies, and meets the
// other warps at CTA barriers: before the copies (the slot they overwrite was
// read last iteration) and after waiting for them (every thread's copies must
// have landed). On the H200 the 8-warp prefill kernels spend a third of their
// stalls at those barriers, with two warps per scheduler to hide them.
//
// Warp specialization is a lowering of the same tile IR, so the interpreter's
// semantics and every builder stay as they are:
//
// - The launch gets a warpgroup of producer warps after the compute warps
//   (fewer with fewer than four compute warps): producer thread p issues the
//   copies of compute threads p, p + 128, ... — its code lowers each copy once
//   for each of them, in a view with that thread's indices
//   (LoweringContext::ThreadView), so the per-thread copy plan is reused as
//   it is. Ops of scalars only (the sequence search, lengths, loop bounds)
//   are uniform, so they are lowered once and shared by the views.
// - The producer lowers a slice of the kernel: every planned cp.async load, the
//   side-effect-free ops its addresses and masks come from (block-table loads
//   included; for/if ops whose results they use are lowered whole), and the
//   for/if ops around them with only those ops inside. Scalars are uniform, so
//   both roles take the same path through the kernel.
// - Each buffer has S slots (2, or num_stages: AsyncBuffer::slots) and per
//   slot a `full` mbarrier (one arrival per producer thread, through
//   cp.async.mbarrier.arrive.noinc after its copies: it lands when they have)
//   and an `empty` one (one arrival per compute thread). Fill f of a loop (0:
//   the prologue's, i + 1: iteration i's) goes to slot f mod S after the
//   producer waited on empty with parity ((f / S) mod 2) xor 1: a fresh
//   barrier counts its phase before 0 as complete, so the first fill of each
//   slot does not wait, and the producers run up to S − 1 fills ahead.
//   Iteration i of the compute warps reads fill i from slot i mod S (the slot
//   chain they carry): it waits on full with parity (i / S) mod 2
//   right before the first wgmma group that reads the slot
//   (Lowered::awaitsSlot: V, converted at the loop's top, may land during
//   Q·Kᵀ and the softmax; a later group of the same block reads it without
//   waiting), then fences once for the async proxy (cp.async wrote through
//   the generic proxy; producers that cast on the way fence their own stores
//   before they arrive). It arrives on empty right after the wgmma
//   group whose MMAs alone read the slot completed (K's after Q·Kᵀ:
//   earlyRelease), or, where anything else reads it, once the iteration's
//   last tensor-core instruction has completed.
// - At a pipelined loop's exit the producer waits for its copies and both roles
//   meet at barrier 0 over the whole CTA: the slots may then be reused (by a
//   sibling loop's prologue, or the epilogue's scratch). Every other barrier of
//   the compute warps is named barrier 1 over their threads only.
// - With 256 + 128 threads the launch has 168 registers a thread; setmaxnreg
//   lowers the producers to 72 and raises the compute warps to 216, which
//   spends exactly the 384 × 168 registers the launch allocated: an increase
//   waits for registers that decreases released, so asking for more (64 /
//   224) hangs the compute warps. Without their address arithmetic the 8-warp
//   prefill and bf16 MLA compute warps fit there (they used 228 and 236 with
//   it), fp8 MLA's spill a few dozen bytes; producers copying for two threads
//   spill below 64, and those of 128-key tiles even at 72 (128 bytes, 208 at
//   64). ptxas still fits every single instruction into the
//   launch's count, so a warpgroup MMA whose accumulators and operands exceed
//   it keeps the kernel unspecialized (head size 256's m64n256: 128 + 32 of
//   168, fits).
//
// - Ping-pong (warp_specialize = 2): where two compute warpgroups own rows of
//   their own, each wgmma group in a pipelined loop waits for its
//   warpgroup's turn (named barrier 2 + g) and hands the turn over once issued
//   (beginTurns, warpgroupTurn, endTurns: docs/architecture.md has the
//   protocol), so one warpgroup's softmax runs under the other's MMAs.
//
// - A pipelined loop inside another loop (persistent programs' work items)
//   runs more than once. Where every two buffers that share bytes share them
//   exactly (sibling loops' K buffers, their V buffers), such buffers share a
//   ring of barriers and fill numbers count on across loops and runs
//   (WarpSpecializationPlan::carriedFills: a per-thread count per ring; every
//   fill waits for its slot's release; at a loop's exit the compute warps
//   take the unread fill and nobody meets at barrier 0). Otherwise each run
//   numbers its fills from 0 on barriers made new at the previous run's
//   exit: the producers wait for the unread fill, both roles pass barrier 0,
//   compute thread 0 invalidates and initializes the loop's barriers, and
//   barrier 0 publishes them (finishSpecializedLoop).
//
// A kernel qualifies when the target has wgmma, the cp.async plan has buffers,
// its warpgroup MMAs fit the launch's
// registers, the slice reads no loop-carried value
// of a loop it does not run whole and no cp.async tile, its ops are
// register-only (arithmetic, layout broadcasts, global loads), and the kernel
// returns only at its end. Elsewhere the attribute is ignored
// (--print-after=plan-warp-specialization says why).
#include "codegen/lower/WarpSpecialization.h"

#include <llvm/IR/IntrinsicsNVPTX.h>

#include <algorithm>
#include <functional>

#include "codegen/Codegen.h"
#include "codegen/lower/AsyncCopy.h"
#include "codegen/lower/InlinePtx.h"
#include "codegen/lower/TensorCopies.h"
#include "codegen/lower/WarpgroupMma.h"

namespace attnjit::codegen {

using namespace ir;

namespace {

constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kRegistersPerBlock = 65536;
// The fewest registers a producer thread copying for two compute threads gets
// (docs/perf-log.md, 2026-12-05: the 64-key prefill producers spill 540 bytes
// at 24, none at 64); it also gets whatever the compute warps' count leaves.
constexpr int kMinProducerRegisters = 64;
constexpr int kMaxSetMaxRegisters = 256;  // setmaxnreg's range is 24 to 256
constexpr int kWarpgroupWarps = 4;
constexpr int kMaxRegistersPerThread = 255;
// Registers besides a wgmma's accumulators that it needs at once (descriptors,
// predicates, an A fragment from registers).
constexpr int kInstructionRegisterMargin = 32;
// Ping-pong: warpgroup g of the compute warps waits for its turn on named
// barrier kFirstTurnBarrier + g (0 is the whole CTA's, 1 the compute warps').
constexpr int kFirstTurnBarrier = 2;
constexpr int kTurnWarpgroups = 2;

bool registerOnly(Opcode opcode) {
  switch (opcode) {
    case Opcode::ProgramId:
    case Opcode::NumPrograms:
    case Opcode::Constant:
    case Opcode::Constexpr:
    case Opcode::Arange:
    case Opcode::Splat:
    case Opcode::Broadcast:
    case Opcode::ExpandDims:
    case Opcode::Add:
    case Opcode::Sub:
    case Opcode::Mul:
    case Opcode::Div:
    case Opcode::Rem:
    case Opcode::Min:
    case Opcode::Max:
    case Opcode::And:
    case Opcode::Or:
    case Opcode::Xor:
    case Opcode::Shl:
    case Opcode::Shr:
    case Opcode::Neg:
    case Opcode::Abs:
    case Opcode::Cmp:
    case Opcode::Select:
    case Opcode::Cast:
    case Opcode::Bitcast:
    case Opcode::AddPtr:
    case Opcode::Load:
      return true;
    default:
      return false;
  }
}

// Builds WarpSpecializationPlan::producerOps (see the file comment).
class SliceBuilder {
 public:
  SliceBuilder(const AsyncCopyPlan& async, WarpSpecializationPlan& plan) : async_(async), plan_(plan) {}

  // Empty when the slice exists, else why not.
  std::string build() {
    for (const AsyncBuffer& buffer : async_.buffers) {
      for (const Operation* load : {buffer.prologueLoad, buffer.bodyLoad}) {
        plan_.producerOps.insert(load);
        for (const Value* operand : load->operands()) need(operand);
        enclose(*load);
      }
    }
    while (failure_.empty() && !work_.empty()) {
      const Value* value = work_.back();
      work_.pop_back();
      visit(value);
    }
    return failure_;
  }

 private:
  void need(const Value* value) {
    if (seen_.insert(value).second) work_.push_back(value);
  }

  // The for/if ops around `op` run in the producer too, with their bounds or conditions.
  void enclose(const Operation& op) {
    for (const Block* block = op.parentBlock(); block && block->parentOp();
         block = block->parentOp()->parentBlock()) {
      const Operation* parent = block->parentOp();
      if (whole_.count(parent)) return;
      if (!plan_.partialOps.insert(parent).second) continue;
      plan_.producerOps.insert(parent);
      if (parent->opcode() == Opcode::For) {
        for (size_t i = 0; i < 3; ++i) need(parent->operand(i));
      } else if (parent->opcode() == Opcode::If) {
        need(parent->operand(0));
      } else {
        fail(std::string("a pipelined load inside '") + parent->name() + "'");
      }
    }
  }

  // Every op of `op`'s regions runs in the producer too.
  void takeWhole(const Operation& op) {
    if (plan_.partialOps.count(&op)) return fail("the results of a loop or branch that holds a pipelined load");
    whole_.insert(&op);
    plan_.producerOps.insert(&op);
    for (const Value* operand : op.operands()) need(operand);
    enclose(op);
    std::function<void(const Block&)> takeBlock = [&](const Block& block) {
      for (const auto& inner : block.operations()) {
        const Opcode opcode = inner->opcode();
        if (async_.loads.count(inner.get())) return fail("a pipelined load inside a loop the producer runs whole");
        if (!registerOnly(opcode) && opcode != Opcode::For && opcode != Opcode::If && opcode != Opcode::Yield)
          return fail(std::string("'") + inner->name() + "' in a loop or branch the copies depend on");
        if (opcode == Opcode::Load && inner->operand(0)->type().addressSpace() != AddressSpace::Global)
          return fail("a shared-memory load in a loop or branch the copies depend on");
        whole_.insert(inner.get());
        plan_.producerOps.insert(inner.get());
        for (const Value* operand : inner->operands()) need(operand);
        for (const auto& region : inner->regions()) takeBlock(*region);
      }
    };
    for (const auto& region : op.regions()) takeBlock(*region);
  }

  void visit(const Value* value) {
    if (const Operation* def = value->definingOp()) {
      if (async_.loads.count(def)) return fail("copy addresses computed from a cp.async tile");
      if (!def->regions().empty()) {
        if (!whole_.count(def)) takeWhole(*def);
        return;
      }
      if (plan_.producerOps.count(def)) return;
      if (!registerOnly(def->opcode())) return fail(std::string("copy addresses computed by '") + def->name() + "'");
      // Global memory only: nothing orders the producer's reads with the
      // compute warps' shared-memory writes.
      if (def->opcode() == Opcode::Load && def->operand(0)->type().addressSpace() != AddressSpace::Global)
        return fail("copy addresses loaded from shared memory");
      plan_.producerOps.insert(def);
      for (const Value* operand : def->operands()) need(operand);
      enclose(*def);
      return;
    }
    const Operation* owner = value->ownerBlock()->parentOp();
    if (!owner || whole_.count(owner)) return;  // a kernel parameter, or run whole
    if (owner->opcode() == Opcode::For && value->index() == 0) return;  // an induction variable
    fail("copy addresses computed from a loop-carried value");
  }

  void fail(const std::string& why) {
    if (failure_.empty()) failure_ = why;
  }

  const AsyncCopyPlan& async_;
  WarpSpecializationPlan& plan_;
  std::unordered_set<const Operation*> whole_;
  std::unordered_set<const Value*> seen_;
  std::vector<const Value*> work_;
  std::string failure_;
};

// WarpSpecializationPlan::producerOnly: ops of the slice without regions whose
// every user is a planned load or another such op (to a fixed point).
void findProducerOnly(const LoweringContext& ctx, WarpSpecializationPlan& plan) {
  UseMap uses;
  collectUses(ctx.kernel.body(), uses);
  for (const Operation* op : plan.producerOps)
    if (op->regions().empty() && op->numResults() > 0 && !ctx.async->loads.count(op)) plan.producerOnly.insert(op);
  for (bool changed = true; changed;) {
    changed = false;
    for (auto it = plan.producerOnly.begin(); it != plan.producerOnly.end();) {
      bool onlyProducer = true;
      for (size_t r = 0; r < (*it)->numResults() && onlyProducer; ++r) {
        auto found = uses.find((*it)->result(r));
        if (found == uses.end()) continue;
        for (const Operation* user : found->second)
          if (!ctx.async->loads.count(user) && !plan.producerOnly.count(user)) onlyProducer = false;
      }
      if (onlyProducer) {
        ++it;
      } else {
        it = plan.producerOnly.erase(it);
        changed = true;
      }
    }
  }
}

// Calls visit(shape) for every dot in `block` (nested regions included) that
// runs as a warpgroup MMA.
void forEachWarpgroupDot(const LoweringContext& ctx, const Block& block,
                         const std::function<void(const WarpgroupDotShape&)>& visit) {
  for (const auto& op : block.operations()) {
    if (op->opcode() == Opcode::Dot)
      if (auto shape = warpgroupDotShape(ctx, *op)) visit(*shape);
    for (const auto& region : op->regions()) forEachWarpgroupDot(ctx, *region, visit);
  }
}

// Ping-pong: a pipelined loop takes turns when the kernel has two compute
// warpgroups and every warpgroup MMA in the loop splits its rows between them
// (each owns its rows' softmax: nothing else makes one wait for the other).
// Softmax turns also need the loop body to hold exactly two warpgroup MMAs at
// its top level (Q·Kᵀ, then P·V): the turn spans what lies between them.
void planTurns(const LoweringContext& ctx, WarpSpecializationPlan& plan) {
  if (ctx.numWarps != kTurnWarpgroups * kWarpgroupWarps) {
    plan.noTurns = std::to_string(ctx.numWarps) + " compute warps, not two warpgroups";
    return;
  }
  for (const AsyncBuffer& buffer : ctx.async->buffers) {
    if (plan.turnLoops.count(buffer.loop)) continue;
    int rowSplitDots = 0;
    std::string refusal;
    forEachWarpgroupDot(ctx, *buffer.loop->region(0), [&](const WarpgroupDotShape& shape) {
      if (shape.warpsN == 1)
        ++rowSplitDots;
      else if (refusal.empty())
        refusal = "a warpgroup MMA whose warpgroups split its columns (they share its rows' softmax)";
    });
    if (plan.softmaxTurns && rowSplitDots > 0 && refusal.empty()) {
      int topLevel = 0;
      for (const auto& op : buffer.loop->region(0)->operations())
        if (op->opcode() == Opcode::Dot && warpgroupDotShape(ctx, *op)) ++topLevel;
      if (topLevel != 2 || rowSplitDots != 2)
        refusal = "softmax turns need a loop body of two warpgroup MMAs, Q·Kᵀ then P·V (a loop has " +
                  std::to_string(rowSplitDots) + ", " + std::to_string(topLevel) + " at its top level)";
    }
    if (!refusal.empty()) {
      plan.noTurns = refusal;
      plan.turnLoops.clear();
      return;
    }
    if (rowSplitDots > 0) plan.turnLoops.insert(buffer.loop);
  }
  if (plan.turnLoops.empty()) plan.noTurns = "no warpgroup MMA in a pipelined loop";
}

// WarpSpecializationPlan::earlyRelease: a buffer whose tile only wgmma reads
// (every use of the carried tile is a descriptor convert, every use of those
// a dot at the top level of the loop body) can be handed back once those dots
// completed; the group lowering them releases it when they are all its own.
void planEarlyRelease(const LoweringContext& ctx, WarpSpecializationPlan& plan) {
  UseMap uses;
  collectUses(ctx.kernel.body(), uses);
  for (size_t id = 0; id < ctx.async->buffers.size(); ++id) {
    const AsyncBuffer& buffer = ctx.async->buffers[id];
    if (!buffer.warpgroupOperand) continue;
    std::vector<const Operation*> dots;
    bool onlyWgmma = true;
    // A cast-on-copy slot holds the cast's tile: its readers are the cast's.
    auto found = uses.find(buffer.castOnCopy ? buffer.castOnCopy->result() : buffer.carried);
    if (found == uses.end()) continue;
    for (const Operation* convert : found->second) {
      if (!ctx.async->descriptorConverts.count(convert)) {
        onlyWgmma = false;
        break;
      }
      auto readers = uses.find(convert->result());
      if (readers == uses.end()) continue;
      for (const Operation* dot : readers->second) {
        if (dot->opcode() != Opcode::Dot || dot->parentBlock() != buffer.loop->region(0)) onlyWgmma = false;
        dots.push_back(dot);
      }
    }
    if (onlyWgmma && !dots.empty()) plan.earlyRelease[static_cast<int>(id)] = std::move(dots);
  }
}

bool hasNestedReturn(const Block& block, bool nested) {
  for (const auto& op : block.operations()) {
    if (op->opcode() == Opcode::Return && nested) return true;
    for (const auto& region : op->regions())
      if (hasNestedReturn(*region, true)) return true;
  }
  return false;
}

llvm::Value* barrierAddress(LoweringContext& ctx, int index) {
  return ctx.b.CreateConstInBoundsGEP1_32(ctx.b.getInt64Ty(), ctx.dynamicSharedStart(), static_cast<unsigned>(index));
}

enum class SlotBarrier { Full, Empty };

// The full or empty barrier of slot `slot` (a runtime i32) of buffer `buffer`.
llvm::Value* barrierFor(LoweringContext& ctx, int buffer, SlotBarrier kind, llvm::Value* slot) {
  llvm::IRBuilder<>& b = ctx.b;
  WarpSpecializationPlan& plan = *ctx.warpSpecialization;
  const int ring = plan.ringOfBuffer.at(static_cast<size_t>(buffer));
  const int base = 2 * plan.slots * ring + (kind == SlotBarrier::Empty ? plan.slots : 0);
  llvm::Value* index = b.CreateAdd(ctx.i32(base), slot);
  return b.CreateInBoundsGEP(b.getInt64Ty(), ctx.dynamicSharedStart(), index);
}

// Spins until the phase of `barrier` with parity `parity` has completed.
void waitParity(LoweringContext& ctx, llvm::Value* barrier, llvm::Value* parity) {
  llvm::IRBuilder<>& b = ctx.b;
  llvm::BasicBlock* spin = llvm::BasicBlock::Create(ctx.llvm, "mbarrier.wait", ctx.function);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx.llvm, "mbarrier.done", ctx.function);
  b.CreateBr(spin);
  b.SetInsertPoint(spin);
  llvm::Value* complete = b.CreateIntrinsic(
      b.getInt1Ty(), llvm::Intrinsic::nvvm_mbarrier_try_wait_parity_scope_cta_space_cta, {barrier, parity});
  b.CreateCondBr(complete, done, spin);
  b.SetInsertPoint(done);
}

// A barrier over every thread of the CTA, producers included (never removed
// by remove-redundant-sync, which knows only the compute warps' barriers).
void wholeCtaBarrier(LoweringContext& ctx) {
  ctx.b.CreateIntrinsic(ctx.b.getVoidTy(), llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_count,
                        {ctx.i32(0), ctx.i32(ctx.numThreads())});
}

void setMaxRegisters(LoweringContext& ctx, int registers, bool increase) {
  if (registers == 0) return;
  ctx.b.CreateIntrinsic(ctx.b.getVoidTy(),
                        increase ? llvm::Intrinsic::nvvm_setmaxnreg_inc_sync_aligned_u32
                                 : llvm::Intrinsic::nvvm_setmaxnreg_dec_sync_aligned_u32,
                        {ctx.i32(registers)});
}

void lowerProducerBlock(LoweringContext& ctx, const Block& block);

// Runs `lower` once in the view of each compute thread the producer thread
// stands in for.
template <typename F>
void forEachStandIn(LoweringContext& ctx, F&& lower) {
  for (LoweringContext::ThreadView& view : ctx.warpSpecialization->views) {
    ctx.swapThread(view);
    lower();
    ctx.swapThread(view);
  }
}

// An op whose operands, results and nested ops are all scalars computes the
// same value in every stand-in's view (scalars are uniform: program ids,
// parameters, loads of one address), such as a program's sequence search.
bool sameForEveryStandIn(const Operation& op) {
  auto scalar = [](const auto& value) { return !value->type().isTile(); };
  if (!std::all_of(op.operands().begin(), op.operands().end(), scalar) ||
      !std::all_of(op.results().begin(), op.results().end(), scalar))
    return false;
  for (const auto& region : op.regions()) {
    if (!std::all_of(region->arguments().begin(), region->arguments().end(), scalar)) return false;
    for (const auto& nested : region->operations())
      if (!sameForEveryStandIn(*nested)) return false;
  }
  return true;
}

// Lowers `op` for every stand-in. One that computes the same value in each is
// lowered once, in the first view, and its results are shared: the producer's
// setup before its first copy (the sequence search, a dependent chain of
// loads) runs once instead of once per stand-in.
void lowerForStandIns(LoweringContext& ctx, const Operation& op) {
  std::vector<LoweringContext::ThreadView>& views = ctx.warpSpecialization->views;
  if (views.size() < 2 || !sameForEveryStandIn(op)) return forEachStandIn(ctx, [&] { lowerOperation(ctx, op); });
  ctx.swapThread(views.front());
  lowerOperation(ctx, op);
  ctx.swapThread(views.front());
  for (size_t view = 1; view < views.size(); ++view)
    for (const auto& result : op.results()) views[view].values[result.get()] = views.front().values.at(result.get());
}

// A uniform scalar, from the first view.
llvm::Value* uniformScalar(LoweringContext& ctx, const Value* value) {
  return ctx.warpSpecialization->views.front().values.at(value).regs.at(0);
}

// A for the producer runs with only its own ops inside: the induction
// variable, no loop-carried values.
void lowerProducerFor(LoweringContext& ctx, const Operation& op) {
  llvm::IRBuilder<>& b = ctx.b;
  WarpSpecializationPlan& plan = *ctx.warpSpecialization;
  llvm::Value* lo = uniformScalar(ctx, op.operand(0));
  llvm::Value* hi = uniformScalar(ctx, op.operand(1));
  llvm::Value* step = uniformScalar(ctx, op.operand(2));
  llvm::BasicBlock* pre = b.GetInsertBlock();
  llvm::BasicBlock* body = llvm::BasicBlock::Create(ctx.llvm, "producer.for.body", ctx.function);
  llvm::BasicBlock* exit = llvm::BasicBlock::Create(ctx.llvm, "producer.for.exit", ctx.function);
  b.CreateCondBr(b.CreateICmpSLT(lo, hi), body, exit);
  b.SetInsertPoint(body);
  const Block& region = *op.region(0);
  llvm::PHINode* iv = b.CreatePHI(lo->getType(), 2, region.argument(0)->name());
  iv->addIncoming(lo, pre);
  for (LoweringContext::ThreadView& view : plan.views) view.values[region.argument(0)] = Lowered{{iv}, std::nullopt};
  plan.iteration[&op] = b.CreateSDiv(b.CreateSub(iv, lo), step);
  lowerProducerBlock(ctx, region);
  llvm::Value* next = b.CreateAdd(iv, step);
  llvm::BasicBlock* latch = b.GetInsertBlock();
  b.CreateCondBr(b.CreateICmpSLT(next, hi), body, exit);
  iv->addIncoming(next, latch);
  b.SetInsertPoint(exit);
  finishAsyncLoop(ctx, op);
}

void lowerProducerIf(LoweringContext& ctx, const Operation& op) {
  llvm::IRBuilder<>& b = ctx.b;
  llvm::BasicBlock* thenBlock = llvm::BasicBlock::Create(ctx.llvm, "producer.if.then", ctx.function);
  llvm::BasicBlock* elseBlock = llvm::BasicBlock::Create(ctx.llvm, "producer.if.else", ctx.function);
  llvm::BasicBlock* merge = llvm::BasicBlock::Create(ctx.llvm, "producer.if.end", ctx.function);
  b.CreateCondBr(uniformScalar(ctx, op.operand(0)), thenBlock, elseBlock);
  llvm::BasicBlock* starts[2] = {thenBlock, elseBlock};
  for (int side = 0; side < 2; ++side) {
    b.SetInsertPoint(starts[side]);
    lowerProducerBlock(ctx, *op.region(side));
    b.CreateBr(merge);
  }
  b.SetInsertPoint(merge);
}

// Whether the fill of `load` waits for its slot's release. The first fill of
// each slot (the prologue's, iteration 0's) finds it empty: a fresh barrier
// counts the phase before its first as complete. With carried fills a
// prologue fill may go to a slot an earlier run's fill still occupies, so it
// waits like any other (its parity lets a slot's first use through).
bool waitsForEmptySlot(const LoweringContext& ctx, const AsyncBuffer& buffer, const Operation& load) {
  return &load == buffer.bodyLoad || ctx.warpSpecialization->carriedFills;
}

// The cast-on-copy loads of `load`'s loop that fill with it (all prologue
// loads, or all body loads), in the order the producer lowers them, with
// their buffers.
std::vector<std::pair<const Operation*, int>> castOnCopyGroup(const LoweringContext& ctx, const Operation& load,
                                                              const AsyncBuffer& buffer) {
  const bool body = &load == buffer.bodyLoad;
  std::vector<std::pair<const Operation*, int>> group;
  for (size_t id = 0; id < ctx.async->buffers.size(); ++id) {
    const AsyncBuffer& other = ctx.async->buffers[id];
    if (other.castOnCopy && other.loop == buffer.loop)
      group.emplace_back(body ? other.bodyLoad : other.prologueLoad, static_cast<int>(id));
  }
  std::sort(group.begin(), group.end(),
            [](const auto& a, const auto& b) { return positionOf(*a.first) < positionOf(*b.first); });
  return group;
}

// Cast-on-copy loads load into registers, so each waits for its bytes: the
// loads of one fill are lowered back to back, between one set of empty waits
// before the first and the fence and full arrivals after the last, so that
// nothing (no wait loop, no arrival) keeps their loads from being in flight
// together.
void lowerProducerCastCopies(LoweringContext& ctx, const Operation& load, int id) {
  llvm::IRBuilder<>& b = ctx.b;
  const AsyncBuffer& buffer = ctx.async->buffers[static_cast<size_t>(id)];
  const std::vector<std::pair<const Operation*, int>> group = castOnCopyGroup(ctx, load, buffer);
  if (waitsForEmptySlot(ctx, buffer, load) && group.front().first == &load) {
    for (const auto& [member, memberId] : group) {
      const AsyncBuffer& memberBuffer = ctx.async->buffers[static_cast<size_t>(memberId)];
      const Fill fill = producerFill(ctx, memberBuffer, *member);
      waitParity(ctx, barrierFor(ctx, memberId, SlotBarrier::Empty, fill.slot),
                 slotprotocol::emptyWaitParity(b, fill.number, ctx.warpSpecialization->slots));
    }
  }
  forEachStandIn(ctx, [&] { lowerOperation(ctx, load); });
  if (group.back().first != &load) return;
  // The slots were written by this thread's stores, which wgmma reads through
  // the async proxy; each arrival releases them to the compute warps' wait.
  fenceForAsyncProxy(ctx);
  for (const auto& [member, memberId] : group) {
    const Fill fill = producerFill(ctx, ctx.async->buffers[static_cast<size_t>(memberId)], *member);
    b.CreateIntrinsic(b.getInt64Ty(), llvm::Intrinsic::nvvm_mbarrier_arrive_shared,
                      {barrierFor(ctx, memberId, SlotBarrier::Full, fill.slot)});
  }
}

// A planned load: once its slot is empty, the copies of every compute thread
// the producer thread stands in for, then one arrival on the slot's full
// barrier, which lands when all of them have.
void lowerProducerCopies(LoweringContext& ctx, const Operation& load, int id) {
  llvm::IRBuilder<>& b = ctx.b;
  const AsyncBuffer& buffer = ctx.async->buffers[static_cast<size_t>(id)];
  if (buffer.castOnCopy) return lowerProducerCastCopies(ctx, load, id);
  const Fill fill = producerFill(ctx, buffer, load);
  if (buffer.tensorCopy) {
    if (waitsForEmptySlot(ctx, buffer, load))
      waitParity(ctx, barrierFor(ctx, id, SlotBarrier::Empty, fill.slot),
                 slotprotocol::emptyWaitParity(b, fill.number, ctx.warpSpecialization->slots));
    issueTensorCopies(ctx, load, id, fill.slot, barrierFor(ctx, id, SlotBarrier::Full, fill.slot));
    return;
  }
  if (waitsForEmptySlot(ctx, buffer, load)) {
    waitParity(ctx, barrierFor(ctx, id, SlotBarrier::Empty, fill.slot),
               slotprotocol::emptyWaitParity(b, fill.number, ctx.warpSpecialization->slots));
  }
  forEachStandIn(ctx, [&] { lowerOperation(ctx, load); });
  b.CreateIntrinsic(b.getVoidTy(), llvm::Intrinsic::nvvm_cp_async_mbarrier_arrive_noinc_shared,
                    {barrierFor(ctx, id, SlotBarrier::Full, fill.slot)});
}

void lowerProducerBlock(LoweringContext& ctx, const Block& block) {
  const WarpSpecializationPlan& plan = *ctx.warpSpecialization;
  for (const auto& op : block.operations()) {
    if (!plan.producerOps.count(op.get())) continue;
    if (plan.partialOps.count(op.get())) {
      if (op->opcode() == Opcode::For)
        lowerProducerFor(ctx, *op);
      else
        lowerProducerIf(ctx, *op);
    } else if (auto planned = ctx.async->loads.find(op.get()); planned != ctx.async->loads.end()) {
      lowerProducerCopies(ctx, *op, planned->second);
    } else {
      lowerForStandIns(ctx, *op);
    }
  }
}

}  // namespace

// WarpSpecializationPlan::ringOfBuffer and carriedFills: with rerun loops,
// buffers with the same bytes share a ring when every pair of overlapping
// buffers belongs to two loops and has the same bytes.
void planRings(const LoweringContext& ctx, WarpSpecializationPlan& plan) {
  const std::vector<AsyncBuffer>& buffers = ctx.async->buffers;
  plan.ringOfBuffer.assign(buffers.size(), 0);
  for (size_t id = 0; id < buffers.size(); ++id) plan.ringOfBuffer[id] = static_cast<int>(id);
  plan.rings = static_cast<int>(buffers.size());
  plan.carriedFills = false;
  if (plan.rerunLoops.empty()) return;
  auto bytes = [](const AsyncBuffer& buffer) { return buffer.slots * buffer.slotBytes; };
  std::vector<int> ring(buffers.size(), -1);
  int rings = 0;
  for (size_t a = 0; a < buffers.size(); ++a) {
    for (size_t b = 0; b < a; ++b) {
      const bool overlap = buffers[a].offset < buffers[b].offset + bytes(buffers[b]) &&
                           buffers[b].offset < buffers[a].offset + bytes(buffers[a]);
      if (!overlap) continue;
      if (buffers[a].offset != buffers[b].offset || buffers[a].slotBytes != buffers[b].slotBytes ||
          buffers[a].loop == buffers[b].loop)
        return;
      ring[a] = ring[b];
    }
    if (ring[a] < 0) ring[a] = rings++;
  }
  plan.ringOfBuffer = ring;
  plan.rings = rings;
  plan.carriedFills = true;
}

void planWarpSpecialization(LoweringContext& ctx, std::string& why) {
  why.clear();
  if (!kernelFlag(ctx.kernel, KernelAttribute::WarpSpecialize)) {
    why = "kernel attribute warp_specialize = 0";
    return;
  }
  if (!ctx.allowWarpSpecialization) {
    why = "the producer's code needs a barrier or shared scratch (lowered again without)";
    return;
  }
  if (!ctx.target.hasWgmma) {
    why = "the target has no wgmma/setmaxnreg (sm_90a only)";
    return;
  }
  if (!ctx.async) {
    why = "no cp.async buffers";
    return;
  }
  const int consumerThreads = ctx.numWarps * 32;
  const int producerWarps = std::min(ctx.numWarps, kWarpgroupWarps);
  const int producerThreads = producerWarps * 32;
  if (consumerThreads + producerThreads > kMaxThreadsPerBlock) {
    why = "the producer warps would exceed 1024 threads";
    return;
  }
  // A pipelined loop inside another loop runs more than once; each run starts
  // from freshly initialized slot barriers (finishSpecializedLoop).
  std::unordered_set<const Operation*> rerunLoops;
  for (const AsyncBuffer& buffer : ctx.async->buffers) {
    for (const Block* block = buffer.loop->parentBlock(); block && block->parentOp();
         block = block->parentOp()->parentBlock())
      if (block->parentOp()->opcode() == Opcode::For) rerunLoops.insert(buffer.loop);
  }
  if (hasNestedReturn(ctx.kernel.body(), false)) {
    why = "a return before the kernel's end";
    return;
  }
  // ptxas fits each instruction into the launch's register count, whatever
  // setmaxnreg raises it to: a warpgroup MMA's accumulators (n / 2 registers a
  // thread) plus its operands must fit the 65536 / threads registers.
  const int threads = consumerThreads + producerThreads;
  const int entryRegisters = std::min(kMaxRegistersPerThread, kRegistersPerBlock / threads / 8 * 8);
  int64_t widestDot = 0;
  forEachWarpgroupDot(ctx, ctx.kernel.body(),
                      [&](const WarpgroupDotShape& shape) { widestDot = std::max(widestDot, shape.groupN); });
  if (widestDot / 2 + kInstructionRegisterMargin > entryRegisters) {
    why = "a warpgroup MMA " + std::to_string(widestDot) + " columns wide needs more than the " +
          std::to_string(entryRegisters) + " registers a thread of " + std::to_string(threads) + " has at launch";
    return;
  }
  auto plan = std::make_unique<WarpSpecializationPlan>();
  if (std::string failure = SliceBuilder(*ctx.async, *plan).build(); !failure.empty()) {
    why = failure;
    return;
  }
  findProducerOnly(ctx, *plan);
  plan->rerunLoops = std::move(rerunLoops);
  plan->producerWarps = producerWarps;
  plan->standIns = ctx.numWarps / producerWarps;
  plan->entryRegisters = entryRegisters;
  // setmaxnreg moves registers inside the CTA's launch allocation: an
  // increase waits until decreases have released enough. The roles' counts
  // must sum to at most what the launch allocated, or the compute warps wait
  // forever (the register file's spare registers are not in the pool).
  const int launchRegisters = entryRegisters * threads;
  // Counts are multiples of 8. The compute warps' count, rounded down, leaves
  // the producers a few registers above their minimum (384 threads: 216 and
  // 72, where 128-key producers spill 128 bytes against 208 at 64). Kernel
  // attribute producer_registers sets the producers' count instead (the
  // 128-key prefill producers copy without spilling at 96).
  const int producerRequest = static_cast<int>(kernelAttribute(ctx.kernel, KernelAttribute::ProducerRegisters));
  const int producerFloor = producerRequest > 0 ? producerRequest : kMinProducerRegisters;
  const int consumerRegisters =
      std::min(kMaxSetMaxRegisters, (launchRegisters - producerThreads * producerFloor) / consumerThreads / 8 * 8);
  const int producerRegisters =
      std::min(entryRegisters, (launchRegisters - consumerThreads * consumerRegisters) / producerThreads / 8 * 8);
  // 256 threads or fewer have every register a thread can name already.
  const bool registersToMove = kRegistersPerBlock / threads < kMaxRegistersPerThread;
  if (registersToMove && consumerRegisters > plan->entryRegisters) {
    plan->producerRegisters = producerRegisters;
    plan->consumerRegisters = consumerRegisters;
    ATTNJIT_CHECK(producerRegisters >= producerFloor &&
                      producerThreads * producerRegisters + consumerThreads * consumerRegisters <= launchRegisters,
                  "codegen: setmaxnreg would ask for more registers than the launch allocated");
  } else if (registersToMove && producerRequest > 0) {
    plan->unusedProducerRegisters = producerRequest;
  }
  if (const int64_t mode = kernelAttribute(ctx.kernel, KernelAttribute::WarpSpecialize); mode >= 2) {
    plan->softmaxTurns = mode == 3;
    planTurns(ctx, *plan);
  }
  planEarlyRelease(ctx, *plan);
  plan->slots = ctx.async->buffers.front().slots;
  for (const AsyncBuffer& buffer : ctx.async->buffers)
    ATTNJIT_CHECK(buffer.slots == plan->slots, "codegen: cp.async buffers with different slot counts");
  planRings(ctx, *plan);
  plan->barrierCount = 2 * plan->slots * plan->rings;
  ctx.warpSpecialization = std::move(plan);
}

std::string describeWarpSpecializationPlan(const LoweringContext& ctx, const std::string& why) {
  if (!ctx.warpSpecialization) return "no producer warps: " + why + "\n";
  const WarpSpecializationPlan& plan = *ctx.warpSpecialization;
  std::string text = std::to_string(plan.producerWarps) + " producer warps after " + std::to_string(ctx.numWarps) +
                     " compute warps (a producer thread copies for " + std::to_string(plan.standIns) +
                     "), " + std::to_string(plan.producerOps.size()) + " ops in the producer (" +
                     std::to_string(plan.partialOps.size()) + " for/if with only the producer's ops), " +
                     std::to_string(plan.barrierBytes()) + " B of mbarriers";
  if (plan.consumerRegisters != 0)
    text += ", setmaxnreg " + std::to_string(plan.producerRegisters) + " / " +
            std::to_string(plan.consumerRegisters) + " (launch " + std::to_string(plan.entryRegisters) + ")";
  else if (plan.unusedProducerRegisters != 0)
    text += ", no setmaxnreg: producer_registers " + std::to_string(plan.unusedProducerRegisters) +
            " leaves the compute warps no more than the launch's " + std::to_string(plan.entryRegisters);
  if (plan.carriedFills)
    text += "; " + std::to_string(plan.rerunLoops.size()) + " loops run again, their fills carried on " +
            std::to_string(plan.rings) + " rings of slots";
  else if (!plan.rerunLoops.empty())
    text += "; " + std::to_string(plan.rerunLoops.size()) + " loops run again, barriers made new for each run";
  if (!plan.turnLoops.empty())
    text += std::string("; the two compute warpgroups take turns ") +
            (plan.softmaxTurns ? "running their softmax" : "issuing their MMAs") + " in " +
            std::to_string(plan.turnLoops.size()) + (plan.turnLoops.size() == 1 ? " loop" : " loops");
  else if (!plan.noTurns.empty())
    text += (plan.softmaxTurns ? "; no softmax turns: " : "; no ping-pong: ") + plan.noTurns;
  return text + "\n";
}

// Thread `tid` 0 initializes the slot barriers of `rings` (full: one arrival
// per producer thread, empty: one per compute thread), invalidating them first
// when they were in use (a pipelined loop's next run). The caller publishes
// them with a whole-CTA barrier.
void initSlotBarriers(LoweringContext& ctx, llvm::Value* tid, const std::vector<int>& rings, bool invalidate) {
  llvm::IRBuilder<>& b = ctx.b;
  const WarpSpecializationPlan& plan = *ctx.warpSpecialization;
  const int slots = plan.slots;
  llvm::BasicBlock* init = llvm::BasicBlock::Create(ctx.llvm, "mbarrier.init", ctx.function);
  llvm::BasicBlock* done = llvm::BasicBlock::Create(ctx.llvm, "mbarrier.init.done", ctx.function);
  b.CreateCondBr(b.CreateICmpEQ(tid, ctx.i32(0)), init, done);
  b.SetInsertPoint(init);
  for (int ring : rings)
    for (int index = 0; index < 2 * slots; ++index) {
      llvm::Value* address = barrierAddress(ctx, 2 * slots * ring + index);
      if (invalidate) b.CreateIntrinsic(b.getVoidTy(), llvm::Intrinsic::nvvm_mbarrier_inval_shared, {address});
      const int arrivals = (index < slots ? plan.producerWarps : ctx.numWarps) * 32;
      b.CreateIntrinsic(b.getVoidTy(), llvm::Intrinsic::nvvm_mbarrier_init_shared, {address, ctx.i32(arrivals)});
    }
  b.CreateBr(done);
  b.SetInsertPoint(done);
}

void lowerProducerRole(LoweringContext& ctx, const Block& body) {
  WarpSpecializationPlan& plan = *ctx.warpSpecialization;
  llvm::IRBuilder<>& b = ctx.b;
  llvm::IRBuilder<>& e = *ctx.entryBuilder;
  const int consumerThreads = ctx.numWarps * 32;
  const int producerThreads = plan.producerWarps * 32;
  llvm::Value* tid = ctx.threadId;
  llvm::Value* isProducer = e.CreateICmpUGE(tid, e.getInt32(static_cast<uint32_t>(consumerThreads)), "producer");
  // Producer thread p stands in for compute threads p, p + producerThreads, ...
  llvm::Value* producerIndex = e.CreateSub(tid, e.getInt32(static_cast<uint32_t>(consumerThreads)));
  plan.views.assign(static_cast<size_t>(plan.standIns), {});
  for (int k = 0; k < plan.standIns; ++k) {
    LoweringContext::ThreadView& view = plan.views[static_cast<size_t>(k)];
    view.threadId = e.CreateAdd(producerIndex, e.getInt32(static_cast<uint32_t>(k * producerThreads)));
    view.laneId = e.CreateAnd(view.threadId, 31);
    view.warpId = e.CreateLShr(view.threadId, 5);
    view.values = ctx.values();  // the parameters
  }

  // Thread 0 initializes the barriers; barrier 0 publishes them.
  std::vector<int> everyRing(static_cast<size_t>(plan.rings));
  for (int ring = 0; ring < plan.rings; ++ring) everyRing[static_cast<size_t>(ring)] = ring;
  initSlotBarriers(ctx, tid, everyRing, false);
  wholeCtaBarrier(ctx);
  // Carried fill counts start at 0 in every thread.
  plan.ringFills.clear();
  if (plan.carriedFills)
    for (int ring = 0; ring < plan.rings; ++ring) {
      llvm::AllocaInst* fills = e.CreateAlloca(e.getInt32Ty(), nullptr, "ring_fills");
      e.CreateStore(e.getInt32(0), fills);
      plan.ringFills.push_back(fills);
    }

  llvm::BasicBlock* producer = llvm::BasicBlock::Create(ctx.llvm, "producer", ctx.function);
  llvm::BasicBlock* consumer = llvm::BasicBlock::Create(ctx.llvm, "consumer", ctx.function);
  b.CreateCondBr(isProducer, producer, consumer);

  b.SetInsertPoint(producer);
  setMaxRegisters(ctx, plan.producerRegisters, false);
  ctx.role = LoweringContext::Role::Producer;
  lowerProducerBlock(ctx, body);
  if (!b.GetInsertBlock()->getTerminator()) {
    // With carried fills no loop exit waited for the producers' copies.
    if (plan.carriedFills)
      b.CreateIntrinsic(b.getVoidTy(), llvm::Intrinsic::nvvm_cp_async_wait_all, llvm::ArrayRef<llvm::Value*>{});
    b.CreateRetVoid();
  }
  plan.views.clear();
  plan.iteration.clear();

  b.SetInsertPoint(consumer);
  setMaxRegisters(ctx, plan.consumerRegisters, true);
  ctx.role = LoweringContext::Role::Consumer;
}

void recordIteration(LoweringContext& ctx, const Operation& loop) {
  if (!ctx.warpSpecialization) return;
  llvm::IRBuilder<>& b = ctx.b;
  llvm::Value* iv = ctx.scalar(loop.region(0)->argument(0));
  llvm::Value* lo = ctx.scalar(loop.operand(0));
  llvm::Value* step = ctx.scalar(loop.operand(2));
  ctx.warpSpecialization->iteration[&loop] = b.CreateSDiv(b.CreateSub(iv, lo), step);
}

namespace {

int bufferId(const LoweringContext& ctx, const AsyncBuffer& buffer) {
  return static_cast<int>(&buffer - ctx.async->buffers.data());
}

}  // namespace

llvm::Value* fillsBeforeRun(LoweringContext& ctx, const AsyncBuffer& buffer) {
  const WarpSpecializationPlan& plan = *ctx.warpSpecialization;
  if (!plan.carriedFills) return ctx.i32(0);
  const int ring = plan.ringOfBuffer.at(static_cast<size_t>(bufferId(ctx, buffer)));
  return ctx.b.CreateLoad(ctx.b.getInt32Ty(), plan.ringFills.at(static_cast<size_t>(ring)), "fills_before_run");
}

llvm::Value* prologueSlot(LoweringContext& ctx, const AsyncBuffer& buffer) {
  if (!ctx.warpSpecialization || !ctx.warpSpecialization->carriedFills) return ctx.i32(0);
  return slotprotocol::slotOf(ctx.b, fillsBeforeRun(ctx, buffer), buffer.slots);
}

// The fill number `number` within the loop's run, counted on from the ring's
// fills before the run when fills are carried.
llvm::Value* ringFill(LoweringContext& ctx, const AsyncBuffer& buffer, llvm::Value* number) {
  if (!ctx.warpSpecialization->carriedFills) return number;
  return ctx.b.CreateAdd(fillsBeforeRun(ctx, buffer), number, "ring_fill");
}

Fill producerFill(LoweringContext& ctx, const AsyncBuffer& buffer, const Operation& load) {
  if (&load == buffer.prologueLoad) {
    if (!ctx.warpSpecialization->carriedFills) return {ctx.i32(0), ctx.i32(0)};
    llvm::Value* number = fillsBeforeRun(ctx, buffer);
    return {number, slotprotocol::slotOf(ctx.b, number, buffer.slots)};
  }
  llvm::Value* number =
      ringFill(ctx, buffer, slotprotocol::bodyFill(ctx.b, ctx.warpSpecialization->iteration.at(buffer.loop)));
  return {number, slotprotocol::slotOf(ctx.b, number, buffer.slots)};
}

void waitSlotFull(LoweringContext& ctx, int buffer, llvm::Value* slot, llvm::Value* iteration) {
  // `iteration` counts within the loop's run; with carried fills the fill it
  // reads counts on from the ring's fills before the run.
  llvm::Value* fill = ringFill(ctx, ctx.async->buffers[static_cast<size_t>(buffer)], iteration);
  waitParity(ctx, barrierFor(ctx, buffer, SlotBarrier::Full, slot),
             slotprotocol::fullWaitParity(ctx.b, fill, ctx.warpSpecialization->slots));
}

namespace slotprotocol {

llvm::Value* bodyFill(llvm::IRBuilder<>& b, llvm::Value* iteration) { return b.CreateAdd(iteration, b.getInt32(1)); }

llvm::Value* slotOf(llvm::IRBuilder<>& b, llvm::Value* fill, int slots) {
  return b.CreateURem(fill, b.getInt32(static_cast<uint32_t>(slots)));
}

// The number of times the slot of `fill` was used before: fill / slots.
llvm::Value* useOfSlot(llvm::IRBuilder<>& b, llvm::Value* fill, int slots) {
  return b.CreateUDiv(fill, b.getInt32(static_cast<uint32_t>(slots)));
}

llvm::Value* emptyWaitParity(llvm::IRBuilder<>& b, llvm::Value* fill, int slots) {
  return b.CreateXor(b.CreateAnd(useOfSlot(b, fill, slots), 1), 1);
}

llvm::Value* fullWaitParity(llvm::IRBuilder<>& b, llvm::Value* iteration, int slots) {
  return b.CreateAnd(useOfSlot(b, iteration, slots), 1);
}

}  // namespace slotprotocol

SlotProtocolTable warpSpecializationSlotProtocol(int count, int slots) {
  llvm::LLVMContext context;  // the constants live as long as it
  llvm::IRBuilder<> b(context);
  auto folded = [](llvm::Value* value) {
    auto* constant = llvm::dyn_cast<llvm::ConstantInt>(value);
    ATTNJIT_CHECK(constant != nullptr, "warpSpecializationSlotProtocol: did not fold to a constant");
    return static_cast<int>(constant->getZExtValue());
  };
  SlotProtocolTable table;
  llvm::Value* carried = b.getInt32(0);
  for (int n = 0; n < count; ++n) {
    llvm::Value* value = b.getInt32(static_cast<uint32_t>(n));
    table.fillOfIteration.push_back(folded(slotprotocol::bodyFill(b, value)));
    table.slotOfFill.push_back(folded(slotprotocol::slotOf(b, value, slots)));
    table.emptyWaitParity.push_back(folded(slotprotocol::emptyWaitParity(b, value, slots)));
    table.fullWaitParity.push_back(folded(slotprotocol::fullWaitParity(b, value, slots)));
    table.slotOfIteration.push_back(folded(carried));
    carried = nextSlot(b, carried, slots);
  }
  return table;
}

namespace {

void arriveOnEmpty(LoweringContext& ctx, int id) {
  llvm::Value* slot = ctx.async->currentSlot.at(id);
  ctx.b.CreateIntrinsic(ctx.b.getInt64Ty(), llvm::Intrinsic::nvvm_mbarrier_arrive_shared,
                        {barrierFor(ctx, id, SlotBarrier::Empty, slot)});
}

}  // namespace

void releaseSlotsReadBy(LoweringContext& ctx, const std::vector<const Operation*>& completed) {
  if (!ctx.warpSpecialization || ctx.role != LoweringContext::Role::Consumer) return;
  WarpSpecializationPlan& plan = *ctx.warpSpecialization;
  for (const auto& [id, dots] : plan.earlyRelease) {
    if (plan.releasedEarly.count(id)) continue;
    const bool all = std::all_of(dots.begin(), dots.end(), [&](const Operation* dot) {
      return std::find(completed.begin(), completed.end(), dot) != completed.end();
    });
    if (!all) continue;
    arriveOnEmpty(ctx, id);
    plan.releasedEarly.insert(id);
  }
}

void releaseSlots(LoweringContext& ctx, const Operation& loop) {
  if (!ctx.warpSpecialization || ctx.role != LoweringContext::Role::Consumer) return;
  llvm::IRBuilder<>& b = ctx.b;
  bool any = false;
  for (size_t id = 0; id < ctx.async->buffers.size(); ++id) {
    const AsyncBuffer& buffer = ctx.async->buffers[id];
    if (buffer.loop != &loop) continue;
    if (ctx.warpSpecialization->releasedEarly.erase(static_cast<int>(id))) continue;
    if (!any && !ctx.warpgroupWaits.empty()) {
      // A tensor-core instruction still in flight may read a slot.
      InlinePtx(b, "wgmma.wait_group.sync.aligned 0;").sideEffects().emit();
    }
    any = true;
    arriveOnEmpty(ctx, static_cast<int>(id));
  }
}

namespace {

bool takesTurns(const LoweringContext& ctx, const Operation& loop) {
  return ctx.warpSpecialization && ctx.role == LoweringContext::Role::Consumer &&
         ctx.warpSpecialization->turnLoops.count(&loop);
}

llvm::Value* computeWarpgroup(LoweringContext& ctx) { return ctx.b.CreateLShr(ctx.warpId, ctx.i32(2)); }

// `instruction` ("bar.sync" or "bar.arrive") on warpgroup `warpgroup`'s turn
// barrier; both compute warpgroups take part in each of its phases (one waits,
// the other arrives).
std::string turnBarrier(const std::string& instruction, int warpgroup) {
  return instruction + " " + std::to_string(kFirstTurnBarrier + warpgroup) + ", " +
         std::to_string(kTurnWarpgroups * kWarpgroupWarps * 32) + ";";
}

// `instruction` on turn barrier `barrier` by the warps of `warpgroup` only
// (warp-uniform, so .aligned holds).
void turnBarrierIf(LoweringContext& ctx, int warpgroup, const std::string& instruction, int barrier) {
  InlinePtx(ctx.b, "{\n.reg .pred turn;\nsetp.eq.u32 turn, $0, " + std::to_string(warpgroup) + ";\n@turn " +
                       turnBarrier(instruction, barrier) + "\n}")
      .input("r", computeWarpgroup(ctx))
      .sideEffects()
      .emit();
}

}  // namespace

void beginTurns(LoweringContext& ctx, const Operation& loop) {
  if (!takesTurns(ctx, loop)) return;
  turnBarrierIf(ctx, 1, "bar.arrive", 0);
  ++ctx.warpSpecialization->turnDepth;
  ctx.warpSpecialization->turnGroups = 0;
  ctx.warpSpecialization->turnBody = loop.region(0);
}

void endTurns(LoweringContext& ctx, const Operation& loop) {
  if (!takesTurns(ctx, loop)) return;
  --ctx.warpSpecialization->turnDepth;
  ctx.warpSpecialization->turnBody = nullptr;
  turnBarrierIf(ctx, 0, "bar.sync", 0);
}

namespace {

// Warpgroup g waits for its turn on barrier 2 + g and hands it to the other
// on the other's: the same for turns around the MMA issue and the softmax.
TurnBarriers turnBarriers(LoweringContext& ctx) {
  TurnBarriers turn;
  turn.warpgroup = computeWarpgroup(ctx);
  for (int g = 0; g < kTurnWarpgroups; ++g) {
    turn.wait[g] = turnBarrier("bar.sync", g);
    turn.handOver[g] = turnBarrier("bar.arrive", 1 - g);
  }
  return turn;
}

// A group at the top level of the turn loop's body: one that runs once per
// iteration (a group inside a branch or an inner loop would make the turns
// uneven).
bool atSoftmaxTurnLevel(const LoweringContext& ctx, const Operation& dot) {
  return ctx.warpSpecialization && ctx.role == LoweringContext::Role::Consumer &&
         ctx.warpSpecialization->softmaxTurns && ctx.warpSpecialization->turnDepth > 0 &&
         dot.parentBlock() == ctx.warpSpecialization->turnBody;
}

// Each warpgroup waits for its turn (wait) or hands it over.
void softmaxTurnBarrier(LoweringContext& ctx, bool wait) {
  const TurnBarriers turn = turnBarriers(ctx);
  const std::string(&perWarpgroup)[2] = wait ? turn.wait : turn.handOver;
  InlinePtx(ctx.b, "{\n.reg .pred turn_first;\nsetp.eq.u32 turn_first, $0, 0;\n@turn_first " + perWarpgroup[0] +
                       "\n@!turn_first " + perWarpgroup[1] + "\n}")
      .input("r", turn.warpgroup)
      .sideEffects()
      .emit();
}

}  // namespace

void handSoftmaxTurnBeforeGroup(LoweringContext& ctx, const Operation& dot) {
  if (!atSoftmaxTurnLevel(ctx, dot) || ctx.warpSpecialization->turnGroups != 1) return;
  softmaxTurnBarrier(ctx, /*wait=*/false);
}

void takeSoftmaxTurnAfterGroup(LoweringContext& ctx, const Operation& dot) {
  if (!atSoftmaxTurnLevel(ctx, dot)) return;
  if (ctx.warpSpecialization->turnGroups++ == 0) softmaxTurnBarrier(ctx, /*wait=*/true);
}

void finishTurnIteration(LoweringContext& ctx, const Operation& loop) {
  if (!takesTurns(ctx, loop) || !ctx.warpSpecialization->softmaxTurns) return;
  if (ctx.warpSpecialization->turnGroups == 1) softmaxTurnBarrier(ctx, /*wait=*/false);
}

std::optional<TurnBarriers> warpgroupTurn(LoweringContext& ctx) {
  if (!ctx.warpSpecialization || ctx.role != LoweringContext::Role::Consumer ||
      ctx.warpSpecialization->turnDepth == 0 || ctx.warpSpecialization->softmaxTurns)
    return std::nullopt;
  return turnBarriers(ctx);
}

llvm::Value* loopRunIterations(LoweringContext& ctx, const Operation& loop) {
  llvm::IRBuilder<>& b = ctx.b;
  auto scalar = [&](const Value* value) {
    return ctx.role == LoweringContext::Role::Producer ? uniformScalar(ctx, value) : ctx.scalar(value);
  };
  llvm::Value* lo = scalar(loop.operand(0));
  llvm::Value* hi = scalar(loop.operand(1));
  llvm::Value* step = scalar(loop.operand(2));
  llvm::Value* span = b.CreateSub(hi, lo);
  llvm::Value* iterations = b.CreateSDiv(b.CreateAdd(span, b.CreateSub(step, ctx.i32(1))), step);
  return b.CreateSelect(b.CreateICmpSGT(span, ctx.i32(0)), iterations, ctx.i32(0));
}

namespace {

// At a pipelined loop's exit, the producers wait for the fill the compute
// warps never read (the prefetch past the last tile) of the loop's TMA
// buffers (TMA keeps writing its slot until it lands, and the slots are
// reused after the loop), or with everyBuffer of all its buffers (a loop
// that runs again re-initializes their barriers, so every arrival must have
// landed). Loops with carried fills do not come here: their compute warps
// take the unread fill.
void waitForUnreadFills(LoweringContext& ctx, const Operation& loop, bool everyBuffer) {
  for (size_t id = 0; id < ctx.async->buffers.size(); ++id) {
    const AsyncBuffer& buffer = ctx.async->buffers[id];
    if (buffer.loop != &loop || !(buffer.tensorCopy || everyBuffer)) continue;
    // The run's n iterations read fills 0 .. n - 1; fill n is the one left.
    llvm::Value* iterations = loopRunIterations(ctx, loop);
    waitSlotFull(ctx, static_cast<int>(id), slotprotocol::slotOf(ctx.b, iterations, buffer.slots), iterations);
  }
}

// Carried fills at a loop's exit: the run's n iterations read fills 0 .. n - 1
// of it and left fill n. The compute warps wait for it (its copies must land
// before a later fill of the slot starts) and hand its slot back as if they
// had read it; both roles count the run's n + 1 fills into the rings.
void carryFillsPastLoop(LoweringContext& ctx, const Operation& loop) {
  llvm::IRBuilder<>& b = ctx.b;
  WarpSpecializationPlan& plan = *ctx.warpSpecialization;
  llvm::Value* iterations = loopRunIterations(ctx, loop);
  for (size_t id = 0; id < ctx.async->buffers.size(); ++id) {
    const AsyncBuffer& buffer = ctx.async->buffers[id];
    if (buffer.loop != &loop) continue;
    llvm::Value* before = fillsBeforeRun(ctx, buffer);
    if (ctx.role == LoweringContext::Role::Consumer) {
      llvm::Value* unread = b.CreateAdd(before, iterations);
      llvm::Value* slot = slotprotocol::slotOf(b, unread, buffer.slots);
      waitParity(ctx, barrierFor(ctx, static_cast<int>(id), SlotBarrier::Full, slot),
                 slotprotocol::fullWaitParity(b, unread, plan.slots));
      b.CreateIntrinsic(b.getInt64Ty(), llvm::Intrinsic::nvvm_mbarrier_arrive_shared,
                        {barrierFor(ctx, static_cast<int>(id), SlotBarrier::Empty, slot)});
    }
    const int ring = plan.ringOfBuffer.at(id);
    b.CreateStore(b.CreateAdd(before, b.CreateAdd(iterations, ctx.i32(1))),
                  plan.ringFills.at(static_cast<size_t>(ring)));
  }
}

}  // namespace

void finishSpecializedLoop(LoweringContext& ctx, const Operation& loop) {
  if (ctx.warpSpecialization->carriedFills) return carryFillsPastLoop(ctx, loop);
  const bool rerun = ctx.warpSpecialization->rerunLoops.count(&loop) != 0;
  if (ctx.role == LoweringContext::Role::Producer) {
    // A loop that runs again re-initializes its barriers, so every arrival on
    // them must have landed: the unread fill's too.
    waitForUnreadFills(ctx, loop, rerun);
    ctx.b.CreateIntrinsic(ctx.b.getVoidTy(), llvm::Intrinsic::nvvm_cp_async_wait_all, llvm::ArrayRef<llvm::Value*>{});
  }
  wholeCtaBarrier(ctx);
  if (!rerun) return;
  // Nobody waits on or arrives at the loop's barriers any more: compute
  // thread 0 makes them new for the next run, with fill numbers from 0 again.
  if (ctx.role == LoweringContext::Role::Consumer) {
    std::vector<int> rings;
    for (size_t id = 0; id < ctx.async->buffers.size(); ++id)
      if (ctx.async->buffers[id].loop == &loop) rings.push_back(ctx.warpSpecialization->ringOfBuffer[id]);
    initSlotBarriers(ctx, ctx.threadId, rings, true);
  }
  wholeCtaBarrier(ctx);
}

}  // namespace attnjit::codegen
