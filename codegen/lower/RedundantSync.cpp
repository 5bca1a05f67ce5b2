// Barriers and cp.async waits that repeat what an earlier one in the block did,
// or that order nothing.
//
// The lowering inserts synchronization locally: each conversion through shared
// memory and each read of a cp.async slot brings its own wait and barrier, and
// the first copy of an iteration its own protecting barrier. Put together in one
// loop body they repeat each other: a 64-key prefill tile waited for all copies
// (V's wait) and passed a barrier, then waited again for K and passed a second
// barrier, then a third before issuing the next copies, with nothing touching
// shared memory in between. MLA's fp8 latent chunks each waited for their copies,
// read the slot, stored the cast chunk and published it: three barriers per
// chunk where the five chunks need one wait, one barrier before the reads and one
// after the stores. With eight warps every barrier is a point where the warps
// that are ahead (on the exponentials) stop for those still in mma.
//
// Every barrier the lowering emits orders shared-memory accesses, nothing else
// (the tile IR has no barrier of its own; global memory is never communicated
// between threads of a CTA). So, within one basic block:
// - A wait may cover the later waits of the block that it reaches with no commit
//   and no tensor-core instruction in between: it then waits a little earlier for
//   copies that are needed a few conversions later (waiting longer is always
//   correct). Across a tensor-core instruction the later tile's copies may still
//   be landing while the earlier tile's products run, so the waits stay apart.
// - `cp.async.wait_group N` is a no-op when a wait for M <= N groups ran earlier
//   in the block with no commit since: at most M groups are still pending.
// - Between two kept barriers, a barrier B is redundant when no access before it
//   (since the previous kept barrier of the block) conflicts with an access after
//   it (up to the next barrier of the block): two accesses conflict when they may
//   touch the same region of shared memory and one of them writes. Accesses the
//   lowering tagged with a region (tagSharedAccesses: a cp.async buffer's slots,
//   a shared conversion's buffer) touch only that region; any other access may
//   touch every region. A wait completes this thread's copies, so it conflicts
//   with later accesses that may read cp.async slots, never with earlier ones
//   (the copies it completes were issued after the barrier that protected their
//   slots from earlier readers). When nothing touches shared memory before B since
//   the previous barrier, B is redundant whatever follows it.
// Only straight-line code within one block is reasoned about; the first barrier
// of a block (whose accesses before it come from other blocks) and a barrier that
// the block's end follows before another barrier are kept unless the first rule's
// "nothing before it" holds.
#include "codegen/lower/RedundantSync.h"

#include <llvm/IR/InlineAsm.h>
#include <llvm/IR/Instructions.h>
#include <llvm/IR/IntrinsicInst.h>
#include <llvm/IR/IntrinsicsNVPTX.h>
#include <llvm/IR/MDBuilder.h>
#include <llvm/IR/Metadata.h>

#include <algorithm>
#include <optional>
#include <vector>

namespace attnjit::codegen {

namespace {

constexpr unsigned kGlobalAddressSpace = 1;
constexpr unsigned kConstAddressSpace = 4;
constexpr unsigned kLocalAddressSpace = 5;
constexpr unsigned kParamAddressSpace = 101;
// Regions are alias scopes of one domain: LLVM's passes keep `!alias.scope` when
// they rewrite or merge memory instructions (a custom kind would be dropped), and
// without `!noalias` on any instruction the scopes let them assume nothing.
constexpr const char* kRegionDomain = "attnjit.shared";

// A region's scope name: "slots B E" or "buffer B E" (bytes [B, E)).
std::string regionName(const SharedRegion& region) {
  return std::string(region.slots ? "slots " : "buffer ") + std::to_string(region.begin) + " " +
         std::to_string(region.end);
}

std::optional<SharedRegion> parseRegion(llvm::StringRef name) {
  SharedRegion region;
  if (name.consume_front("slots "))
    region.slots = true;
  else if (!name.consume_front("buffer "))
    return std::nullopt;
  auto [begin, end] = name.split(' ');
  if (begin.getAsInteger(10, region.begin) || end.getAsInteger(10, region.end) || region.begin >= region.end)
    return std::nullopt;
  return region;
}

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

// Whether an access writes (conservatively: every call but a matrix load).
bool writes(const llvm::Instruction& inst) {
  if (llvm::isa<llvm::LoadInst>(inst)) return false;
  if (const auto* call = llvm::dyn_cast<llvm::CallBase>(&inst)) {
    const llvm::Intrinsic::ID id = call->getIntrinsicID();
    if (id != llvm::Intrinsic::not_intrinsic && llvm::Intrinsic::getBaseName(id).starts_with("llvm.nvvm.ldmatrix."))
      return false;
  }
  return true;
}

bool isTensorCoreInstruction(const llvm::Instruction& inst) {
  const auto* call = llvm::dyn_cast<llvm::CallBase>(&inst);
  if (!call) return false;
  if (const auto* ptx = llvm::dyn_cast<llvm::InlineAsm>(call->getCalledOperand()))
    return ptx->getAsmString().find("mma") != std::string::npos;
  const llvm::Intrinsic::ID id = call->getIntrinsicID();
  if (id == llvm::Intrinsic::not_intrinsic) return false;
  const llvm::StringRef name = llvm::Intrinsic::getBaseName(id);
  return name.starts_with("llvm.nvvm.mma.") || name.starts_with("llvm.nvvm.wmma.") ||
         name.starts_with("llvm.nvvm.wgmma.");
}

// A CTA barrier, or a warp-specialized kernel's named barrier over its compute
// warps (the only threads that touch shared memory outside the copies). The
// barrier over the whole CTA there (producers included, a count given) is
// never one: removing it would leave the producers waiting.
bool isBarrier(const llvm::Instruction& inst) {
  const auto* call = llvm::dyn_cast<llvm::CallBase>(&inst);
  if (!call) return false;
  const auto* id = llvm::dyn_cast<llvm::ConstantInt>(call->getArgOperand(0));
  if (call->getIntrinsicID() == llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_all) return id && id->isZero();
  return call->getIntrinsicID() == llvm::Intrinsic::nvvm_barrier_cta_sync_aligned_count && id &&
         id->getZExtValue() == static_cast<uint64_t>(kComputeWarpsBarrier);
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

// Lets each wait_group cover the later waits it reaches with no commit and no
// tensor-core instruction in between (scanning backwards: the smallest count
// ahead).
int strengthenWaits(llvm::BasicBlock& block) {
  int strengthened = 0;
  std::optional<uint64_t> ahead;
  for (llvm::Instruction& inst : llvm::reverse(block)) {
    if (isCommit(inst) || isTensorCoreInstruction(inst)) {
      ahead.reset();
      continue;
    }
    std::optional<uint64_t> n = waitGroups(inst);
    if (!n) continue;
    if (ahead && *ahead < *n) {
      auto& call = llvm::cast<llvm::CallBase>(inst);
      call.setArgOperand(0, llvm::ConstantInt::get(call.getArgOperand(0)->getType(), *ahead));
      ++strengthened;
      continue;
    }
    ahead = n;
  }
  return strengthened;
}

// Drops waits that an earlier wait of the block implies.
int removeRepeatedWaits(llvm::BasicBlock& block, std::vector<llvm::Instruction*>& dead) {
  int removed = 0;
  std::optional<uint64_t> waitedTo;  // fewest pending groups a wait left since the last commit
  for (llvm::Instruction& inst : block) {
    if (auto n = waitGroups(inst)) {
      if (waitedTo && *waitedTo <= *n) {
        dead.push_back(&inst);
        ++removed;
      } else {
        waitedTo = n;
      }
    } else if (isCommit(inst)) {
      waitedTo.reset();
    }
  }
  return removed;
}

// The regions of `inst`'s scopes (several where LLVM merged accesses); nullopt
// when it has none or one outside the domain.
std::optional<std::vector<SharedRegion>> taggedRegions(const llvm::Instruction& inst) {
  const llvm::MDNode* scopes = inst.getMetadata(llvm::LLVMContext::MD_alias_scope);
  if (!scopes || scopes->getNumOperands() == 0) return std::nullopt;
  std::vector<SharedRegion> regions;
  for (const llvm::MDOperand& operand : scopes->operands()) {
    const auto* scope = llvm::dyn_cast<llvm::MDNode>(operand);
    if (!scope || scope->getNumOperands() < 2) return std::nullopt;
    const auto* name = llvm::dyn_cast<llvm::MDString>(scope->getOperand(0));
    const auto* domain = llvm::dyn_cast<llvm::MDNode>(scope->getOperand(1));
    const auto* domainName =
        domain && domain->getNumOperands() > 0 ? llvm::dyn_cast<llvm::MDString>(domain->getOperand(0)) : nullptr;
    if (!name || !domainName || domainName->getString() != kRegionDomain) return std::nullopt;
    std::optional<SharedRegion> region = parseRegion(name->getString());
    if (!region) return std::nullopt;
    regions.push_back(*region);
  }
  return regions;
}

bool overlap(const SharedRegion& a, const SharedRegion& b) { return a.begin < b.end && b.begin < a.end; }

bool overlapAny(const std::vector<SharedRegion>& a, const std::vector<SharedRegion>& b) {
  for (const SharedRegion& x : a)
    for (const SharedRegion& y : b)
      if (overlap(x, y)) return true;
  return false;
}

// What the accesses between two barriers may touch.
struct Window {
  bool anyRead = false;   // an untagged read: may read any byte
  bool anyWrite = false;  // an untagged write
  bool waits = false;     // completes this thread's cp.async copies
  std::vector<SharedRegion> reads, written;

  bool accesses() const { return anyRead || anyWrite || !reads.empty() || !written.empty(); }
  bool touchesSlots() const {
    if (anyRead || anyWrite) return true;
    for (const auto* regions : {&reads, &written})
      for (const SharedRegion& region : *regions)
        if (region.slots) return true;
    return false;
  }
  bool empty() const { return !accesses() && !waits; }

  void add(const llvm::Instruction& inst) {
    const bool write = writes(inst);
    std::optional<std::vector<SharedRegion>> regions = taggedRegions(inst);
    if (!regions) {
      (write ? anyWrite : anyRead) = true;
      return;
    }
    for (const SharedRegion& region : *regions) insert(write ? written : reads, region);
  }

  void merge(const Window& later) {
    anyRead |= later.anyRead;
    anyWrite |= later.anyWrite;
    waits |= later.waits;
    for (const SharedRegion& region : later.reads) insert(reads, region);
    for (const SharedRegion& region : later.written) insert(written, region);
  }

  // A loop body's hundreds of stores and loads touch a few regions: each once.
  static void insert(std::vector<SharedRegion>& into, const SharedRegion& region) {
    const bool known = std::any_of(into.begin(), into.end(), [&](const SharedRegion& r) {
      return r.begin == region.begin && r.end == region.end && r.slots == region.slots;
    });
    if (!known) into.push_back(region);
  }
};

// Whether an access of `earlier` and one of `later` may touch the same bytes with
// at least one of them writing (a wait: see the file comment).
bool conflict(const Window& earlier, const Window& later) {
  if (earlier.waits && later.touchesSlots()) return true;
  if ((earlier.anyWrite && later.accesses()) || (later.anyWrite && earlier.accesses())) return true;
  if (earlier.anyRead && (later.anyWrite || !later.written.empty())) return true;
  if (later.anyRead && (earlier.anyWrite || !earlier.written.empty())) return true;
  return overlapAny(earlier.written, later.reads) || overlapAny(earlier.written, later.written) ||
         overlapAny(earlier.reads, later.written);
}

int removeBarriers(llvm::BasicBlock& block, std::vector<llvm::Instruction*>& dead) {
  // The block cut at its barriers: the window before the first barrier, then each
  // barrier with the window that follows it.
  std::vector<llvm::Instruction*> barriers;
  std::vector<Window> windows(1);
  for (llvm::Instruction& inst : block) {
    if (isBarrier(inst)) {
      barriers.push_back(&inst);
      windows.emplace_back();
    } else if (waitGroups(inst)) {
      windows.back().waits = true;
    } else if (!isCommit(inst) && mayTouchShared(inst)) {  // a commit only groups the copies before it
      windows.back().add(inst);
    }
  }
  int removed = 0;
  std::optional<Window> since;  // since the last kept barrier; unknown before the block's first
  for (size_t i = 0; i < barriers.size(); ++i) {
    const Window& after = windows[i + 1];
    const bool endsAtBarrier = i + 1 < barriers.size();
    const bool redundant = since && (since->empty() || (endsAtBarrier && !conflict(*since, after)));
    if (redundant) {
      dead.push_back(barriers[i]);
      ++removed;
      since->merge(after);
    } else {
      since = after;
    }
  }
  return removed;
}

}  // namespace

RedundantSyncCounts removeRedundantSync(llvm::Function& function) {
  RedundantSyncCounts counts;
  for (llvm::BasicBlock& block : function) {
    counts.strengthenedWaits += strengthenWaits(block);
    std::vector<llvm::Instruction*> dead;
    counts.waits += removeRepeatedWaits(block, dead);
    for (llvm::Instruction* inst : dead) inst->eraseFromParent();
    dead.clear();
    counts.barriers += removeBarriers(block, dead);
    for (llvm::Instruction* inst : dead) inst->eraseFromParent();
  }
  return counts;
}

void tagSharedAccesses(const AppendedInstructions& appended, const SharedRegion& region, SharedAccess access) {
  llvm::MDNode* tag = nullptr;
  appended.forEach([&](llvm::Instruction& inst) {
    if (!mayTouchShared(inst) || isBarrier(inst) || waitGroups(inst) || isCommit(inst)) return;
    // An access other than the one declared stays untagged (touching every region).
    if (writes(inst) != (access == SharedAccess::Write)) return;
    if (!tag) {
      llvm::MDBuilder metadata(inst.getContext());
      llvm::MDNode* scope = metadata.createAliasScope(regionName(region), metadata.createAliasScopeDomain(kRegionDomain));
      tag = llvm::MDNode::get(inst.getContext(), {scope});
    }
    inst.setMetadata(llvm::LLVMContext::MD_alias_scope, tag);
  });
}

}  // namespace attnjit::codegen
