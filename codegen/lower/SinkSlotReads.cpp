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
// Reads never leave their block, so they stay inside the iteration and after the
// wait and barrier that made the slot's bytes visible.
#include "codegen/lower/SinkSlotReads.h"

#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/Metadata.h>

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

// Moves `inst` down to just before its first user, or the first instruction it may
// not pass. Users outside the block (or phis) keep it where it is.
bool sinkToFirstUse(llvm::Instruction& inst, bool readsSlot) {
  std::unordered_set<const llvm::Instruction*> users;
  for (const llvm::User* user : inst.users()) {
    const auto* userInst = llvm::dyn_cast<llvm::Instruction>(user);
    if (!userInst || userInst->getParent() != inst.getParent() || llvm::isa<llvm::PHINode>(userInst)) return false;
    users.insert(userInst);
  }
  if (users.empty()) return false;
  llvm::Instruction* stop = inst.getNextNode();
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
