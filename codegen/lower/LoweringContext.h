// State shared by the op lowerings: the LLVM function being built, the mapping
// from tile-IR values to per-thread LLVM values, thread indices and the shared
// scratch buffer. Internal to codegen/.
//
// A tile value lowers to the registers one thread holds, in the order of its
// linear layout's register index (ir/LinearLayout.h); a scalar lowers to one LLVM
// value (scalars are uniform across the CTA: they derive from program ids,
// parameters, constants and scalar loads).
#pragma once

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>

#include <algorithm>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "codegen/Target.h"
#include "ir/AxisInfo.h"
#include "ir/IR.h"
#include "ir/KernelAttributes.h"
#include "ir/LinearLayout.h"

namespace attnjit::codegen {

struct Lowered {
  std::vector<llvm::Value*> regs;          // one per register (a scalar: exactly one)
  std::optional<ir::LinearLayout> layout;  // tiles only
  // A tile loaded with cp.async (codegen/lower/AsyncCopy.h): its elements are in
  // shared-memory buffer `asyncBuffer`, regs holds one i32, the buffer slot.
  int asyncBuffer = -1;
  // A 2D transpose of the tile in the slot (or, for a descriptor operand, in
  // the shared conversion's buffer).
  bool transposedView = false;
  // A tile that wgmma reads through a matrix descriptor
  // (codegen/lower/WarpgroupMma.h): a cp.async slot (regs holds only the slot
  // index) or, with sharedConversion ≥ 0, that shared conversion group's buffer
  // (no registers).
  bool warpgroupOperand = false;
  int sharedConversion = -1;
  // A warp-specialized kernel's cp.async slot whose full barrier nobody waited
  // for yet: the wgmma group that reads it waits first (so a tile converted
  // early, V at the loop's top, may still land while Q·Kᵀ and the softmax run).
  bool awaitsSlot = false;
  // A loop-invariant mma operand kept in shared memory (codegen/lower/SharedOperands.h):
  // regs is empty, each use reads operand `sharedOperand` of the plan.
  int sharedOperand = -1;
  bool isTile() const { return layout.has_value(); }
  bool isAsync() const { return asyncBuffer >= 0; }
  bool isSharedOperand() const { return sharedOperand >= 0; }
};

struct AsyncCopyPlan;
struct WarpSpecializationPlan;
struct SharedOperandPlan;
struct SharedConversionPlan;

class LoweringContext {
 public:
  LoweringContext(llvm::LLVMContext& context, llvm::Module& module, const ir::Kernel& kernel,
                  const TargetInfo& target);
  ~LoweringContext();

  llvm::LLVMContext& llvm;
  llvm::Module& module;
  llvm::IRBuilder<> b;
  const ir::Kernel& kernel;
  const TargetInfo& target;
  int numWarps;
  llvm::Function* function = nullptr;
  llvm::Value* threadId = nullptr;  // tid.x
  llvm::Value* laneId = nullptr;
  llvm::Value* warpId = nullptr;
  // Contiguity / divisibility / constancy facts of the kernel's values.
  std::unique_ptr<ir::AxisInfo> axis;
  // Bytes of dynamic shared memory the kernel needs: the cp.async buffers and the
  // shared operands' buffers (asyncBufferBytes), then the scratch area (the max
  // over all scratch uses).
  int64_t sharedBytes = 0;
  int64_t asyncBufferBytes = 0;
  // Bytes at the start of dynamic shared memory that precede everything the
  // offsets above count from (sharedStart): the producer warps' mbarriers,
  // padded to the alignment of what follows. Dynamic shared memory is the only
  // shared memory a kernel has: ptxas ignores the alignment of an extern
  // shared array and places it right after any static one at 16 bytes, which
  // would shift a 128-byte-swizzled wgmma operand off the 1024-byte grid the
  // hardware swizzles on (the copies and ldmatrix, which swizzle relative to
  // the tile, would not notice). Set once planning is done, before lowering.
  int64_t sharedPrefixBytes = 0;
  bool allowAsyncCopy = true;  // false: every load takes the register path
  bool allowSharedOperands = true;  // false: loop-invariant operands stay in registers
  bool allowWarpSpecialization = true;  // false: warp_specialize is ignored
  // load_tensor tiles copied by TMA (codegen/lower/TensorCopies.cpp): each op's
  // tensor map, the maps' recipes (runtime/TensorMap.h text) and the LLVM
  // argument of the first (they follow the kernel's parameters).
  std::unordered_map<const ir::Operation*, int> tensorMapOf;
  std::vector<std::string> tensorMapRecipes;
  unsigned firstTensorMapArgument = 0;
  // A buffer is read by wgmma: dynamic shared memory is 1024-byte aligned.
  bool warpgroupOperands = false;
  // Which loads become cp.async copies (planAsyncCopies); null where none do.
  std::unique_ptr<AsyncCopyPlan> async;
  // Producer warps for the cp.async copies (planWarpSpecialization); null where
  // the kernel is not warp-specialized. `role` says which warps' code is being
  // lowered: the body is lowered once for each role.
  std::unique_ptr<WarpSpecializationPlan> warpSpecialization;
  enum class Role { All, Producer, Consumer };
  Role role = Role::All;
  // Threads of the launch: the compute warps', plus the producers' when warp-specialized.
  int numThreads() const;
  // Which conversions keep their operand in shared memory (planSharedOperands);
  // null where none do. Their buffers follow the cp.async ones, inside asyncBufferBytes.
  std::unique_ptr<SharedOperandPlan> sharedOperands;
  // Tiles converted into several layouts from one shared-memory store
  // (planSharedConversions); null where none are. Their buffers follow the
  // shared operands', inside asyncBufferBytes.
  std::unique_ptr<SharedConversionPlan> sharedConversions;

  // The first unsupported construct met; lowering continues but the result is discarded.
  support::Status status;
  void unsupported(const ir::Operation& op, const std::string& what);

  // ---- values ----
  const Lowered& get(const ir::Value* v) const;
  // Null where `v` is not lowered yet (a wgmma group's chained accumulators).
  const Lowered* find(const ir::Value* v) const {
    auto it = values_.find(v);
    return it == values_.end() ? nullptr : &it->second;
  }
  llvm::Value* scalar(const ir::Value* v) const { return get(v).regs.at(0); }
  void set(const ir::Value* v, Lowered lowered) { values_[v] = std::move(lowered); }
  using ValueMap = std::unordered_map<const ir::Value*, Lowered>;
  ValueMap values() const { return values_; }
  // The thread a lowering computes for: its indices, the thread terms of the
  // coordinates derived from them, and the values lowered for it. A producer
  // thread of a warp-specialized kernel lowers its copies once for each compute
  // thread it stands in for, each in a view of its own (swapThread exchanges
  // the context's with `view`).
  struct ThreadView {
    llvm::Value* threadId = nullptr;
    llvm::Value* laneId = nullptr;
    llvm::Value* warpId = nullptr;
    std::unordered_map<std::string, llvm::Value*> coordinates;
    ValueMap values;
  };
  void swapThread(ThreadView& view) {
    std::swap(threadId, view.threadId);
    std::swap(laneId, view.laneId);
    std::swap(warpId, view.warpId);
    std::swap(laneWarpCoord_, view.coordinates);
    std::swap(values_, view.values);
  }
  // The linear layout of a tile type (its layout must be set).
  ir::LinearLayout linearLayout(const ir::Type& tileType, const ir::Operation& where);

  // ---- types ----
  // Register type of an element: i1, i8 (also fp8 bits and i4), i16, i32, i64,
  // half, bfloat, float, double, or ptr addrspace(1|3).
  llvm::Type* elementType(const ir::Type& t);
  // Type of an element as stored in memory (i1 → i8).
  llvm::Type* memoryType(ir::ScalarKind k);

  // ---- thread geometry ----
  // This thread's coordinate along `dim` for register `reg` of `layout` (i32).
  llvm::Value* coordinate(const ir::LinearLayout& layout, int64_t reg, int dim);

  // ---- shared memory ----
  // Base of the dynamic shared-memory scratch (addrspace 3; after the cp.async
  // buffers), of the whole dynamic shared memory, and a CTA barrier.
  llvm::Value* sharedBase();
  llvm::Value* sharedStart();
  // The first byte of dynamic shared memory, before sharedPrefixBytes.
  llvm::Value* dynamicSharedStart();
  // A barrier over the threads that run this code: the whole CTA, or the compute
  // warps of a warp-specialized kernel (named barrier 1; the producer warps
  // never reach one).
  void barrier();
  void reserveShared(int64_t bytes) {
    int64_t& reserved = buffersReleased ? releasedScratchBytes : sharedBytes;
    reserved = std::max(reserved, bytes);
  }
  // After the kernel's last top-level loop, when nothing below it reads a
  // buffer of its own (cp.async slots drained, shared operands and shared
  // conversions unused), the scratch area starts at the beginning of dynamic
  // shared memory instead of after the buffers: an epilogue's conversions (the
  // output tile) then overlap the slots instead of adding to the total.
  bool buffersReleased = false;
  int64_t releasedScratchBytes = 0;
  // Dynamic shared memory the kernel needs.
  int64_t totalSharedBytes() const {
    return sharedPrefixBytes + std::max(asyncBufferBytes + sharedBytes, releasedScratchBytes);
  }

  // ---- helpers ----
  llvm::Value* i32(int64_t v) { return b.getInt32(static_cast<uint32_t>(v)); }

  // Values yielded by the region just lowered (set by lowerYield).
  std::vector<Lowered> yielded;
  // Ops already lowered out of order (a wgmma group lowers the ops between its
  // dots before its asm block): lowerBlock skips them.
  std::unordered_set<const ir::Operation*> loweredAhead;
  // wgmma results still in flight (codegen/lower/WarpgroupMma.cpp): the
  // accumulators of a group's deferred chains, waited for right before the op
  // keyed here, their first reader. Each entry: the values and, per value, the
  // registers the MMAs write.
  // `commit` numbers the commit group the MMAs went out in (the size of
  // warpgroupCommitBlocks after it): the wait lets the groups committed since
  // stay in flight.
  struct PendingWarpgroupResult {
    const ir::Value* value = nullptr;
    std::vector<size_t> regs;
    size_t commit = 0;
  };
  std::unordered_map<const ir::Operation*, std::vector<PendingWarpgroupResult>> warpgroupWaits;
  // The block of each wgmma commit group emitted so far, in lowering order. A
  // deferred wait counts the groups committed since its own as still in
  // flight only where all of them lie in its block (straight-line code, each
  // one issued whenever the wait runs); else it waits for every group.
  std::vector<const ir::Block*> warpgroupCommitBlocks;
  // Builder positioned at the end of the entry block, for values every block may
  // use (thread-geometry terms).
  llvm::IRBuilder<>* entryBuilder = nullptr;

 private:
  ValueMap values_;
  std::unordered_map<std::string, llvm::Value*> laneWarpCoord_;  // per (layout, dim, block)
  llvm::GlobalVariable* shared_ = nullptr;
};

// Whether an op's `attrs` set `name` to a nonzero integer: how an op asks for a
// form of its own (div's approx). Kernel switches go through
// ir/KernelAttributes.h instead.
inline bool attributeIsOn(const ir::Attributes& attrs, const char* name) {
  const ir::AttrValue* value = attrs.find(name);
  return value && std::holds_alternative<int64_t>(*value) && std::get<int64_t>(*value) != 0;
}

// The ops that use each value, in nested regions too (for the buffer plans).
using UseMap = std::unordered_map<const ir::Value*, std::vector<const ir::Operation*>>;
void collectUses(const ir::Block& block, UseMap& uses);

// How many consecutive registers of a load or store with layout `layout` move as
// one vector access (axis facts of the pointer, mask and fallback; at most 16 bytes).
int accessVectorWidth(LoweringContext& ctx, const ir::Operation& op, const ir::LinearLayout& layout, int bytes,
                      const ir::Value* mask, const ir::Value* other);

// cp.async (codegen/lower/AsyncCopy.cpp). lowerAsyncLoad lowers a planned load and
// returns true (false: not planned, lower it normally); lowerAsyncConvert reads
// an async tile into layout `to`; finishAsyncLoop drains a loop's copies at its exit.
bool lowerAsyncLoad(LoweringContext& ctx, const ir::Operation& op);
std::vector<llvm::Value*> lowerAsyncConvert(LoweringContext& ctx, const ir::Operation& op, const Lowered& in,
                                            const ir::LinearLayout& to);
void finishAsyncLoop(LoweringContext& ctx, const ir::Operation& loop);
// At the top of a loop body: records the slot each of its buffers holds this iteration.
void beginAsyncLoop(LoweringContext& ctx, const ir::Operation& loop);
// Before `op` (not a convert_layout, for or yield): reads every async tile operand
// into registers in its load layout.
void materializeAsyncTiles(LoweringContext& ctx, const ir::Operation& op);

// One lowering function per op family (ir/Ops.def); a family without one fails
// to link.
#define ATTNJIT_OP(Enum, spelling, Family) void lower##Family(LoweringContext& ctx, const ir::Operation& op);
#include "ir/Ops.def"

// Lowers every op of a block in order (used by the kernel body and regions),
// skipping those lowered ahead.
void lowerBlock(LoweringContext& ctx, const ir::Block& block);
// Lowers the kernel's body as lowerBlock does, releasing the buffers' shared
// memory to the scratch area once nothing below reads them
// (LoweringContext::buffersReleased).
void lowerKernelBody(LoweringContext& ctx, const ir::Block& block);
// Lowers one op as lowerBlock does (async tiles and shared operands read first).
void lowerOperation(LoweringContext& ctx, const ir::Operation& op);

// fp8 (e4m3 or e5m2) → f16/bf16 for two byte registers at once, as `cast` lowers
// tiles: the two results.
std::pair<llvm::Value*, llvm::Value*> castFp8Pair(LoweringContext& ctx, llvm::Value* lo, llvm::Value* hi,
                                                  ir::ScalarKind from, ir::ScalarKind to);

// Converts a scalar LLVM value between element kinds with the IR's cast
// semantics (ir/Ops.def, `cast`).
llvm::Value* castElement(LoweringContext& ctx, const ir::Operation& op, llvm::Value* v, ir::ScalarKind from,
                         ir::ScalarKind to);

// Moves `regs` held in layout `from` into layout `to` through shared memory (any
// two distributed layouts; for a reshape `to` may have another shape with the
// same element count: elements are matched in row-major order).
std::vector<llvm::Value*> convertThroughShared(LoweringContext& ctx, const std::vector<llvm::Value*>& regs,
                                               const ir::LinearLayout& from, const ir::LinearLayout& to,
                                               llvm::Type* elementType);

// The same for same-shape 2D tiles through a swizzled tile with vector stores and
// ldmatrix (operand fragments) or vector loads; nullopt where it does not apply
// (other ranks, i1 elements, rows shorter than 16 bytes).
std::optional<std::vector<llvm::Value*>> convertThroughSwizzledShared(LoweringContext& ctx,
                                                                     const std::vector<llvm::Value*>& regs,
                                                                     const ir::LinearLayout& from,
                                                                     const ir::LinearLayout& to,
                                                                     llvm::Type* elementType);

}  // namespace attnjit::codegen
