// Reads of cp.async slots, moved next to their uses.
//
// A layout conversion of a pipelined K or V tile reads the whole tile from its
// shared-memory slot where the tile IR converts it: at the top of the loop body,
// before the dot that consumes it. Every warp then holds the whole operand at
// once: for 64 keys × 128 dims of bf16 that is 128 registers for K and 128 for V,
// all read before the first mma. With 128-row prefill tiles that is 255 registers
// and spills; ptxas does not move shared-memory reads that far down on its own.
// Moved to just before the mma that first uses it, each ldmatrix result lives for
// a few instructions.
//
// Why the move is safe: a slot is written only by cp.async copies, and within one
// iteration of the loop body only the other slot is written (the copies of the
// next tile); the copies that overwrite this slot come in the next iteration,
// after a barrier. So a read may move down within its basic block past anything
// that writes no memory, past warp shuffles, barriers, cp.async copies, commits
// and waits, and past stores to shared memory (the scratch area, which lies
// after the cp.async buffers). Anything else that may write memory (an unknown
// call, inline PTX with side effects, a store through another address space, an
// atomic) stops it there.
// Reads leave their block only for the join of a side branch that every path
// from it reaches without passing a loop header (the rescale a mul {skip_ones}
// branches around), with nothing in the side blocks that they may not pass; so
// they stay inside the iteration and after the wait and barrier that made the
// slot's bytes visible.
#include "codegen/lower/SinkSlotReads.h"

#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/CFG.h>
#include <llvm/IR/Metadata.h>

#include <algorithm>
#include <unordered_set>
#include <vector>

namespace attnjit::codegen {

namespace {

constexpr const char* kSlotReadMetadata = "attnjit.slot.read";
constexpr unsigned kSharedAddressSpace = 3;

bool isSlotRead(const llvm::Instruction& inst) { return inst.getMetadata(kSlotReadMetadata) != nullptr; }

// An instruction that only takes one value apart (the registers of an ldmatrix,
// the lanes of a vector load), with constants for any other operand.
bool isProjection(const llvm::Instruction& inst) {
  if (!llvm::isa<llvm::ExtractValueInst, llvm::ExtractElementInst, llvm::BitCastInst, llvm::ShuffleVectorInst>(inst))
    return false;
  for (unsigned i = 1; i < inst.getNumOperands(); ++i)
    if (!llvm::isa<llvm::Constant>(inst.getOperand(i))) return false;
  return true;
}

// Whether a slot read may not move past `inst` (see the file comment).
bool stopsSlotRead(const llvm::Instruction& inst) {
  if (!inst.mayWriteToMemory()) return false;
  if (const auto* store = llvm::dyn_cast<llvm::StoreInst>(&inst))
    return store->isVolatile() || store->getPointerAddressSpace() != kSharedAddressSpace;
  const auto* call = llvm::dyn_cast<llvm::CallBase>(&inst);
  if (!call) return true;
  if (const auto* ptx = llvm::dyn_cast<llvm::InlineAsm>(call->getCalledOperand())) return ptx->hasSideEffects();
  const llvm::Intrinsic::ID id = call->getIntrinsicID();
  // Warp shuffles exchange registers; LLVM models them as touching memory only to
  // keep them in place.
  if (id != llvm::Intrinsic::not_intrinsic && llvm::Intrinsic::getBaseName(id).starts_with("llvm.nvvm.shfl.sync."))
    return false;
  switch (id) {
    case llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_all:
    case llvm::Intrinsic::nvvm_cp_async_ca_shared_global_4_s:
    case llvm::Intrinsic::nvvm_cp_async_ca_shared_global_8_s:
    case llvm::Intrinsic::nvvm_cp_async_cg_shared_global_16_s:
    case llvm::Intrinsic::nvvm_cp_async_commit_group:
    case llvm::Intrinsic::nvvm_cp_async_wait_group:
    case llvm::Intrinsic::nvvm_cp_async_wait_all:
      return false;
    default:
      return true;
  }
}

// Whether anything in [from, end of its block) stops a slot read.
bool stopsBefore(const llvm::Instruction* from, bool readsSlot) {
  for (; readsSlot && from; from = from->getNextNode())
    if (stopsSlotRead(*from)) return true;
  return false;
}

// The block where control surely continues after `block` within the same pass
// through the code: its only successor if `block` is that block's only
// predecessor, or the join of a side branch (a mul {skip_ones} lowers to one:
// `block` branches to the join or to blocks that go only there). Null for
// anything else (loops, joins with other predecessors), or where a side block
// holds an instruction a slot read may not pass.
llvm::BasicBlock* joinAfter(llvm::BasicBlock* block, bool readsSlot) {
  const auto* branch = llvm::dyn_cast<llvm::BranchInst>(block->getTerminator());
  if (!branch) return nullptr;
  if (branch->isUnconditional()) {
    llvm::BasicBlock* next = branch->getSuccessor(0);
    return next->getSinglePredecessor() == block ? next : nullptr;
  }
  // A side block: reached only from `block`, it goes only to the join.
  auto sideJoin = [&](llvm::BasicBlock* side) -> llvm::BasicBlock* {
    if (side->getSinglePredecessor() != block || stopsBefore(&side->front(), readsSlot)) return nullptr;
    const auto* out = llvm::dyn_cast<llvm::BranchInst>(side->getTerminator());
    return out && out->isUnconditional() ? out->getSuccessor(0) : nullptr;
  };
  llvm::BasicBlock* a = branch->getSuccessor(0);
  llvm::BasicBlock* c = branch->getSuccessor(1);
  llvm::BasicBlock* afterA = sideJoin(a);
  llvm::BasicBlock* afterC = sideJoin(c);
  llvm::BasicBlock* join = nullptr;
  std::vector<llvm::BasicBlock*> expected;
  if (afterA == c) {  // block -> a -> c, block -> c
    join = c;
    expected = {block, a};
  } else if (afterC == a) {
    join = a;
    expected = {block, c};
  } else if (afterA && afterA == afterC) {  // a diamond
    join = afterA;
    expected = {a, c};
  }
  if (!join) return nullptr;
  std::vector<llvm::BasicBlock*> predecessors(llvm::pred_begin(join), llvm::pred_end(join));
  std::sort(predecessors.begin(), predecessors.end());
  std::sort(expected.begin(), expected.end());
  return predecessors == expected ? join : nullptr;
}

// Moves `inst` down to just before its first user, or the first instruction it may
// not pass. Users all in one later block joined within the same pass (see
// joinAfter) take it there; users in several blocks (or phis) keep it where it is.
bool sinkToFirstUse(llvm::Instruction& inst, bool readsSlot) {
  std::unordered_set<const llvm::Instruction*> users;
  const llvm::BasicBlock* userBlock = nullptr;
  for (const llvm::User* user : inst.users()) {
    const auto* userInst = llvm::dyn_cast<llvm::Instruction>(user);
    if (!userInst || llvm::isa<llvm::PHINode>(userInst)) return false;
    if (userBlock && userInst->getParent() != userBlock) return false;
    userBlock = userInst->getParent();
    users.insert(userInst);
  }
  if (users.empty()) return false;
  llvm::Instruction* stop = inst.getNextNode();
  if (userBlock != inst.getParent()) {
    if (stopsBefore(stop, readsSlot)) return false;
    llvm::BasicBlock* block = inst.getParent();
    while (block != userBlock) {
      block = joinAfter(block, readsSlot);
      if (!block) return false;
      if (block != userBlock && stopsBefore(&*block->getFirstInsertionPt(), readsSlot)) return false;
    }
    stop = &*block->getFirstInsertionPt();
  }
  while (stop && !users.count(stop) && !stop->isTerminator() && !(readsSlot && stopsSlotRead(*stop)))
    stop = stop->getNextNode();
  if (!stop || stop == inst.getNextNode()) return false;
  inst.moveBefore(stop->getIterator());
  return true;
}

}  // namespace

void tagSlotRead(llvm::Instruction& read) {
  read.setMetadata(kSlotReadMetadata, llvm::MDNode::get(read.getContext(), {}));
}

int sinkSlotReads(llvm::Function& function) {
  int moved = 0;
  for (llvm::BasicBlock& block : function) {
    // The reads and their projections, in program order (a projection follows the
    // value it takes apart).
    std::vector<llvm::Instruction*> movable;
    std::unordered_set<const llvm::Value*> parts;
    for (llvm::Instruction& inst : block) {
      if (!isSlotRead(inst) && !(isProjection(inst) && parts.count(inst.getOperand(0)))) continue;
      movable.push_back(&inst);
      parts.insert(&inst);
    }
    // Last first: a read's projections have moved to their own uses before the
    // read looks for its first one.
    for (auto it = movable.rbegin(); it != movable.rend(); ++it) {
      const bool read = isSlotRead(**it);
      if (sinkToFirstUse(**it, read) && read) ++moved;
    }
  }
  return moved;
}

int eraseUnusedMatrixLoads(llvm::Function& function) {
  std::vector<llvm::CallInst*> dead;
  for (llvm::BasicBlock& block : function)
    for (llvm::Instruction& inst : block) {
      auto* call = llvm::dyn_cast<llvm::CallInst>(&inst);
      const llvm::Function* callee = call ? call->getCalledFunction() : nullptr;
      if (!callee || !callee->getName().starts_with("llvm.nvvm.ldmatrix.")) continue;
      bool unused = true;
      for (const llvm::User* user : call->users())
        unused = unused && llvm::isa<llvm::ExtractValueInst>(user) && user->use_empty();
      if (unused) dead.push_back(call);
    }
  for (llvm::CallInst* call : dead) {
    std::vector<llvm::Instruction*> parts;
    for (llvm::User* user : call->users()) parts.push_back(llvm::cast<llvm::Instruction>(user));
    for (llvm::Instruction* part : parts) part->eraseFromParent();
    call->eraseFromParent();
  }
  return static_cast<int>(dead.size());
}

}  // namespace attnjit::codegen
