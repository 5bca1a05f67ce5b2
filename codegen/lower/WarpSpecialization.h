// Warp specialization of cp.async pipelines (kernel attribute warp_specialize):
// producer warps issue the copies, the compute warps only wait for full slots
// and hand them back. The file comment of WarpSpecialization.cpp explains the
// roles, the mbarrier protocol and when a kernel qualifies. Internal to codegen/.
#pragma once

#include <llvm/IR/GlobalVariable.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codegen/lower/LoweringContext.h"

namespace attnjit::codegen {

struct AsyncBuffer;

struct WarpSpecializationPlan {
  // At most one warpgroup of producers; each producer thread stands in for
  // standIns compute threads (thread p for p, p + 32·producerWarps, ...).
  int producerWarps = 0;
  int standIns = 1;
  // The producer's views of the compute threads it stands in for, while its
  // code is lowered (LoweringContext::ThreadView).
  std::vector<LoweringContext::ThreadView> views;
  // Registers a thread of each role asks for with setmaxnreg (0: none is
  // emitted, the launch's count already suffices), and the launch's count.
  int producerRegisters = 0, consumerRegisters = 0, entryRegisters = 0;
  // Kernel attribute producer_registers where it left the compute warps no
  // more than the launch's count (so no setmaxnreg): for the plan's text.
  int unusedProducerRegisters = 0;
  // The ops the producer warps lower: the slice of the kernel that computes the
  // copies' addresses and masks, the copies, and the control flow around them.
  std::unordered_set<const ir::Operation*> producerOps;
  // Of those, the for/if ops the producer runs with only its own ops inside
  // (their results are the compute warps'); the other for/if ops among
  // producerOps it lowers whole.
  std::unordered_set<const ir::Operation*> partialOps;
  // Of producerOps, those whose results only the producer uses (through other
  // such ops, into the copies): the compute warps do not lower them.
  std::unordered_set<const ir::Operation*> producerOnly;
  // Slots of every buffer (AsyncBuffer::slots, the same for all): the
  // producers run slots − 1 fills ahead.
  int slots = 2;
  // full[buffer][slot] at index 2·slots·buffer + slot, empty[buffer][slot] at
  // 2·slots·buffer + slots + slot, 8 bytes each at the start of dynamic
  // shared memory (LoweringContext::sharedPrefixBytes).
  int barrierCount = 0;
  int64_t barrierBytes() const { return int64_t{8} * barrierCount; }
  // Ping-pong (warp_specialize = 2): the pipelined loops in which the two
  // compute warpgroups take turns issuing their warpgroup MMAs, and while the
  // compute warps lower one of those loops, its depth.
  std::unordered_set<const ir::Operation*> turnLoops;
  int turnDepth = 0;
  // Softmax turns (warp_specialize = 3): in those loops the turn is held from
  // the completion of the body's first wgmma group (Q·Kᵀ) until the second
  // (P·V) starts, around the softmax, instead of around each group's issue;
  // turnGroups counts the groups at the top level of turnBody, the body of
  // the turn loop being lowered.
  bool softmaxTurns = false;
  int turnGroups = 0;
  const ir::Block* turnBody = nullptr;
  std::string noTurns;  // why there are none, when ping-pong was asked for
  // Buffers whose slot the compute warps hand back as soon as the wgmma group
  // reading it completed (FlashAttention-3 releases K after Q·Kᵀ): buffer →
  // the dots that read it, all in one group at the top level of the loop
  // body; and the buffers so released in the iteration being lowered.
  std::unordered_map<int, std::vector<const ir::Operation*>> earlyRelease;
  std::unordered_set<int> releasedEarly;
  // Pipelined loops inside another loop: they run more than once.
  std::unordered_set<const ir::Operation*> rerunLoops;
  // Slot rings: the buffers of sibling loops that share their bytes (the same
  // offset, slot size and slot count) share one set of barriers, ring
  // ringOfBuffer[buffer] (without rings, ring = buffer). With carriedFills
  // (a kernel with rerun loops whose every pair of overlapping buffers shares
  // a ring) fill numbers count on across loops and runs: each thread keeps the
  // fills done so far per ring in ringFills (private stack slots, promoted to
  // registers), a loop's fills are that count plus its own numbers, and a
  // loop's exit needs no whole-CTA barrier (the compute warps take the unread
  // fill and hand its slot back). Otherwise each run of a rerun loop numbers
  // its fills from 0 on barriers made new at the previous run's exit.
  std::vector<int> ringOfBuffer;
  int rings = 0;
  bool carriedFills = false;
  std::vector<llvm::Value*> ringFills;
  // The iteration index (0-based) of each pipelined loop, in the role being lowered.
  std::unordered_map<const ir::Operation*, llvm::Value*> iteration;
  // The producer's code needed a barrier or the shared scratch area: the
  // kernel is lowered again without warp specialization.
  bool failed = false;
};

// Decides whether the kernel's cp.async plan (ctx.async) runs with producer
// warps; sets ctx.warpSpecialization when it does. `why` receives the reason
// when it does not (for --print-after).
void planWarpSpecialization(LoweringContext& ctx, std::string& why);
std::string describeWarpSpecializationPlan(const LoweringContext& ctx, const std::string& why);

// Called at the start of the kernel body's lowering, after the entry block
// computed the thread indices: sets up the producer threads' views of the
// compute threads they copy for, initializes the mbarriers and branches into
// the two roles. Lowers the producer's code; returns with the builder in the
// compute warps' branch.
void lowerProducerRole(LoweringContext& ctx, const ir::Block& body);

// Hooks of the cp.async lowering (AsyncCopy.cpp) in a warp-specialized kernel.
// Records loop `loop`'s iteration index (0-based) for this role.
void recordIteration(LoweringContext& ctx, const ir::Operation& loop);
// Producer: the fill a planned load makes (its number in the loop: 0 the
// prologue's, i + 1 iteration i's) and its slot.
struct Fill {
  llvm::Value* number;
  llvm::Value* slot;
};
Fill producerFill(LoweringContext& ctx, const AsyncBuffer& buffer, const ir::Operation& load);
// The iterations of pipelined loop `loop`'s current run, max(0, ceil((hi -
// lo) / step)), from the role's own values of its bounds (at its exit).
llvm::Value* loopRunIterations(LoweringContext& ctx, const ir::Operation& loop);
// The fills of `buffer`'s ring before its loop's current run (0 without
// carried fills), and the slot its prologue fill goes to.
llvm::Value* fillsBeforeRun(LoweringContext& ctx, const AsyncBuffer& buffer);
llvm::Value* prologueSlot(LoweringContext& ctx, const AsyncBuffer& buffer);
// The protocol's arithmetic on i32 values for buffers of `slots` slots (with
// constant operands it folds to constants: test_codegen_warp_specialization
// runs the protocol on them). A loop's fills are numbered 0 (the prologue's)
// and i + 1 (iteration i's); iteration i of the compute warps reads fill i,
// from the slot the chain of the carried slot gives it (0, 1, .., slots − 1,
// 0, ...: nextSlot).
namespace slotprotocol {
llvm::Value* bodyFill(llvm::IRBuilder<>& b, llvm::Value* iteration);       // i + 1
llvm::Value* slotOf(llvm::IRBuilder<>& b, llvm::Value* fill, int slots);  // fill mod slots
// The parity the producer waits for on the slot's empty barrier before `fill`:
// the phase of the release of fill − slots, or for a slot's first fill the
// phase before a fresh barrier's first, which counts as complete.
llvm::Value* emptyWaitParity(llvm::IRBuilder<>& b, llvm::Value* fill, int slots);
// The parity the compute warps wait for on the slot's full barrier in `iteration`.
llvm::Value* fullWaitParity(llvm::IRBuilder<>& b, llvm::Value* iteration, int slots);
}  // namespace slotprotocol

// Compute warps: waits until the slot read in iteration `iteration` is full.
void waitSlotFull(LoweringContext& ctx, int buffer, llvm::Value* slot, llvm::Value* iteration);
// Compute warps, at the end of an iteration of `loop`: hands its slots back
// (those not handed back early).
void releaseSlots(LoweringContext& ctx, const ir::Operation& loop);
// Compute warps, after a wgmma group whose MMAs on `completed` have finished:
// hands back the slots only those dots read (WarpSpecializationPlan::earlyRelease).
void releaseSlotsReadBy(LoweringContext& ctx, const std::vector<const ir::Operation*>& completed);
// Ping-pong turns (WarpSpecializationPlan::turnLoops), compute warps only.
// Before a loop's first iteration: the second warpgroup hands the first turn
// to the first, and the wgmma groups lowered until endTurns (the loop's body)
// take turns; at its exit: the first warpgroup takes the turn the second
// handed over after its last group, so every named-barrier phase completes.
void beginTurns(LoweringContext& ctx, const ir::Operation& loop);
void endTurns(LoweringContext& ctx, const ir::Operation& loop);
// Inside a turn loop: the PTX with which warpgroup g (0 or 1) of a wgmma group
// waits for its turn (wait[g]) and hands it to the other after issuing
// (handOver[g]), and the calling thread's warpgroup; none outside, and none
// with softmax turns (below).
struct TurnBarriers {
  llvm::Value* warpgroup;
  std::string wait[2], handOver[2];
};
std::optional<TurnBarriers> warpgroupTurn(LoweringContext& ctx);
// Softmax turns, for the wgmma group that starts with `dot`, at the top level
// of a turn loop's body: before the body's second group waits for its slots,
// the turn goes to the other warpgroup (handSoftmaxTurnBeforeGroup); after the
// first group's MMAs completed, the warpgroup waits for its turn
// (takeSoftmaxTurnAfterGroup). Where the body has one group lowered as
// warpgroup MMAs (its other dots became mma.sync), finishTurnIteration hands
// the turn over at the body's end, so every iteration takes and hands over
// once or not at all. Nothing elsewhere.
void handSoftmaxTurnBeforeGroup(LoweringContext& ctx, const ir::Operation& dot);
void takeSoftmaxTurnAfterGroup(LoweringContext& ctx, const ir::Operation& dot);
void finishTurnIteration(LoweringContext& ctx, const ir::Operation& loop);
// Both roles at a pipelined loop's exit: every copy has landed and every read
// is done before anything reuses the slots (a barrier over the whole CTA).
void finishSpecializedLoop(LoweringContext& ctx, const ir::Operation& loop);

}  // namespace attnjit::codegen
