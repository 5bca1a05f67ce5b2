// cp.async copies of pipelined tile loads (the file comment of AsyncCopy.cpp
// explains the plan and its synchronization). Internal to codegen/.
#pragma once

#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codegen/lower/LoweringContext.h"
#include "codegen/lower/SwizzledShared.h"

namespace attnjit::codegen {

// A loop-carried tile that lives in shared memory: slots of one swizzled tile,
// used in turn (two, or num_stages where that is more: producer warps run
// num_stages − 1 tiles ahead of the compute warps).
struct AsyncBuffer {
  SwizzledTile tile;
  ir::LinearLayout layout;  // of the loads
  int64_t offset = 0;   // bytes from the start of dynamic shared memory
  int64_t slotBytes = 0;
  int slots = 2;
  int copyBytes = 16;  // per cp.async: 16, or 8 / 4 for rows aligned only that far
  const ir::Operation* loop = nullptr;
  const ir::Value* carried = nullptr;  // the loop's block argument holding the tile
  const ir::Operation* prologueLoad = nullptr;
  const ir::Operation* bodyLoad = nullptr;
  // Groups the previous round (the prologue, or the previous iteration) commits
  // after this buffer's: a lower bound, so waits never stop early.
  int committedAfter = 0;
  // Read by wgmma through matrix descriptors (codegen/lower/WarpgroupMma.h):
  // the tile is stored in 128-byte column blocks, 1024-byte aligned.
  bool warpgroupOperand = false;
  std::vector<const ir::Operation*> descriptorConverts = {};  // the converts wgmma reads instead
  // The cast (fp8 → f16/bf16) the producer warps of a warp-specialized kernel
  // apply on the way: they load the fp8 bytes into registers, convert them and
  // store the result, so the slot holds the cast's tile (read by wgmma only)
  // and the compute warps convert nothing. Null for plain copies.
  const ir::Operation* castOnCopy = nullptr;
  // Filled by TMA: the loads are load_tensor tiles whose boxes one producer
  // thread copies (TensorCopies.cpp); the slot is written through the async
  // proxy and needs no fence before wgmma reads it.
  bool tensorCopy = false;
};

// Every async buffer of a kernel and which loads fill them.
struct AsyncCopyPlan {
  std::vector<AsyncBuffer> buffers;
  std::unordered_map<const ir::Operation*, int> loads;        // planned load → its buffer
  std::unordered_map<const ir::Operation*, int> bodyCommits;  // loop → groups committed so far in its body
  std::unordered_map<int, llvm::Value*> currentSlot;  // buffer → the slot phi of its loop's iteration
  // Converts of warpgroup-operand buffers into a wgmma B operand: lowered to a
  // wait and a proxy fence, their result naming the slot (Lowered::warpgroupOperand).
  std::unordered_set<const ir::Operation*> descriptorConverts;
  // Slots the compute warps of a warp-specialized kernel have waited for (and
  // fenced) before a wgmma group, by the block the group is in: a later group
  // of the same block reads them without waiting again, since every op of a
  // block runs after the ones before it and a slot is released only after the
  // iteration's last reader. Cleared when a block's lowering starts.
  struct SlotWait {
    const ir::Block* block;
    int buffer;
    llvm::Value* slot;
  };
  std::vector<SlotWait> slotWaits;
};

// The slot after `slot` of a buffer with `slots` slots (they are used in turn).
llvm::Value* nextSlot(llvm::IRBuilder<>& b, llvm::Value* slot, int slots);

// Chooses the loads that become cp.async copies and reserves their buffers at the
// start of dynamic shared memory (ctx.asyncBufferBytes); sets ctx.async when any do.
void planAsyncCopies(LoweringContext& ctx);

// The index of `op` in its parent block.
size_t positionOf(const ir::Operation& op);

// The cast of a castOnCopy buffer's tile: lowered as a view of the slot the
// producer warps stored its result in. False for any other op.
bool lowerCastOnCopyView(LoweringContext& ctx, const ir::Operation& op);

// A convert of a planned tile that wgmma reads from its slot: waits for the
// slot's copies, fences them for the async proxy, and returns the slot as a
// descriptor operand; nullopt for any other convert.
std::optional<Lowered> lowerAsyncDescriptorConvert(LoweringContext& ctx, const ir::Operation& op, const Lowered& in,
                                                   const ir::LinearLayout& to);

// Before a wgmma group in `block` reads `values` (Lowered::awaitsSlot): waits
// for each slot's full barrier unless an earlier group of the block did, then
// fences once for the async proxy where a waited slot was filled by cp.async
// (the producers' generic-proxy copies; a cast-on-copy slot was fenced by the
// producer threads that stored it, before they arrived).
void waitForSlotsBeforeWarpgroupRead(LoweringContext& ctx, const ir::Block* block,
                                     const std::vector<const Lowered*>& values);

// Forgets the slot waits recorded for `block` (its lowering starts again).
void forgetSlotWaits(LoweringContext& ctx, const ir::Block& block);

// For a descriptor operand (or any async tile): its buffer's swizzled tile, its
// load layout (the stored tile's shape) and the address of its current slot.
const SwizzledTile& asyncBufferTile(const LoweringContext& ctx, const Lowered& value);
const ir::LinearLayout& asyncBufferLayout(const LoweringContext& ctx, const Lowered& value);
llvm::Value* asyncSlotAddress(LoweringContext& ctx, const Lowered& value);

// The plan in words, one line per buffer (for --print-after=plan-async-copies).
std::string describeAsyncCopyPlan(const LoweringContext& ctx);

}  // namespace attnjit::codegen
