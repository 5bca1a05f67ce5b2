// Barriers and cp.async waits that repeat what an earlier one in the block did.
//
// The lowering inserts synchronization locally: each conversion through shared
// memory and each read of a cp.async slot brings its own wait and barrier, and
// the first copy of an iteration its own protecting barrier. Put together in one
// loop body they repeat each other: a 64-key prefill tile waited for all copies
// (V's wait) and passed a barrier, then waited again for K and passed a second
// barrier, then a third before issuing the next copies, with nothing touching
// shared memory in between. With eight warps every barrier is a point where the
// warps that are ahead (on the exponentials) stop for those still in mma.
//
// Every barrier the lowering emits orders shared-memory accesses, nothing else
// (the tile IR has no barrier of its own; global memory is never communicated
// between threads of a CTA). So, within one basic block:
// - `cp.async.wait_group N` is a no-op when a wait for M <= N groups ran earlier
//   in the block with no commit since: at most M groups are still pending.
// - A barrier B2 is redundant when an earlier barrier B1 of the block is followed
//   by no shared-memory access (load, store, ldmatrix, cp.async copy, atomic,
//   unknown call) and no wait that completes copies: every shared access any
//   thread makes before B2 it made before B1, so B1 already ordered it against
//   everything after B2.
// Only straight-line code within one block is reasoned about; a barrier at the
// top of a block is never removed.
#include "codegen/lower/RedundantSync.h"

#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <optional>
#include <vector>

namespace attnjit::codegen {

namespace {

constexpr unsigned kGlobalAddressSpace = 1;
constexpr unsigned kConstAddressSpace = 4;
constexpr unsigned kLocalAddressSpace = 5;
constexpr unsigned kParamAddressSpace = 101;

bool outsideShared(unsigned addressSpace) {
  return addressSpace == kGlobalAddressSpace || addressSpace == kConstAddressSpace ||
         addressSpace == kLocalAddressSpace || addressSpace == kParamAddressSpace;
}

// Whether `inst` may read or write shared memory (conservatively: anything not
// known to stay out of it).
bool mayTouchShared(const llvm::Instruction& inst) {
  if (!inst.mayReadOrWriteMemory()) return false;
  if (const auto* load = llvm::dyn_cast<llvm::LoadInst>(&inst)) return !outsideShared(load->getPointerAddressSpace());
  if (const auto* store = llvm::dyn_cast<llvm::StoreInst>(&inst)) return !outsideShared(store->getPointerAddressSpace());
  const auto* call = llvm::dyn_cast<llvm::CallBase>(&inst);
  if (!call) return true;
  if (const auto* ptx = llvm::dyn_cast<llvm::InlineAsm>(call->getCalledOperand())) {
    // The predicated global loads and stores of MemoryLowering name their space.
    const llvm::StringRef text = ptx->getAsmString();
    const bool global = text.contains("ld.global") || text.contains("st.global");
    return !global || text.contains("shared");
  }
  const llvm::Intrinsic::ID id = call->getIntrinsicID();
  // A proxy fence orders the thread's own earlier writes for the async proxy
  // (wgmma); it accesses nothing itself.
  if (id == llvm::Intrinsic::nvvm_fence_proxy_async_shared_cta) return false;
  // Warp shuffles exchange registers; LLVM models them as touching memory only to
  // keep them in place.
  return id == llvm::Intrinsic::not_intrinsic || !llvm::Intrinsic::getBaseName(id).starts_with("llvm.nvvm.shfl.sync.");
}

bool isBarrier(const llvm::Instruction& inst) {
  const auto* call = llvm::dyn_cast<llvm::CallBase>(&inst);
  return call && call->getIntrinsicID() == llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_all &&
         llvm::isa<llvm::ConstantInt>(call->getArgOperand(0)) &&
         llvm::cast<llvm::ConstantInt>(call->getArgOperand(0))->isZero();
}

// The N of `cp.async.wait_group N` (0 for wait_all); nullopt for anything else.
std::optional<uint64_t> waitGroups(const llvm::Instruction& inst) {
  const auto* call = llvm::dyn_cast<llvm::CallBase>(&inst);
  if (!call) return std::nullopt;
  switch (call->getIntrinsicID()) {
    case llvm::Intrinsic::nvvm_cp_async_wait_all:
      return 0;
    case llvm::Intrinsic::nvvm_cp_async_wait_group:
      if (const auto* n = llvm::dyn_cast<llvm::ConstantInt>(call->getArgOperand(0))) return n->getZExtValue();
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

bool isCommit(const llvm::Instruction& inst) {
  const auto* call = llvm::dyn_cast<llvm::CallBase>(&inst);
  return call && call->getIntrinsicID() == llvm::Intrinsic::nvvm_cp_async_commit_group;
}

}  // namespace

RedundantSyncCounts removeRedundantSync(llvm::Function& function) {
  RedundantSyncCounts counts;
  std::vector<llvm::Instruction*> dead;
  for (llvm::BasicBlock& block : function) {
    bool barrierStillHolds = false;        // a barrier ran, and no shared access or completing wait since
    std::optional<uint64_t> waitedTo;      // fewest pending groups a wait left since the last commit
    for (llvm::Instruction& inst : block) {
      if (auto n = waitGroups(inst)) {
        if (waitedTo && *waitedTo <= *n) {
          dead.push_back(&inst);
          ++counts.waits;
          continue;
        }
        waitedTo = n;
        barrierStillHolds = false;  // copies completed here reach other threads only through a barrier
        continue;
      }
      if (isCommit(inst)) {
        waitedTo.reset();
        continue;
      }
      if (isBarrier(inst)) {
        if (barrierStillHolds) {
          dead.push_back(&inst);
          ++counts.barriers;
        }
        barrierStillHolds = true;
        continue;
      }
      if (mayTouchShared(inst)) barrierStillHolds = false;
    }
  }
  for (llvm::Instruction* inst : dead) inst->eraseFromParent();
  return counts;
}

}  // namespace attnjit::codegen
