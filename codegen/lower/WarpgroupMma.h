// Warpgroup MMA (wgmma.mma_async, sm_90a) for the tile IR's `dot`: the file
// comment of WarpgroupMma.cpp says when a dot takes it and how its operands are
// laid out. Internal to codegen/.
#pragma once

#include <optional>
#include <vector>

#include "codegen/lower/LoweringContext.h"
#include "codegen/lower/SwizzledShared.h"

namespace attnjit::codegen {

// wgmma reads shared-memory operands in the hardware's 128-byte swizzle, which
// it applies to absolute addresses and which repeats every 1024 bytes: buffers
// it reads start at multiples of this (and so does dynamic shared memory).
inline constexpr int64_t kWarpgroupOperandAlign = 1024;

// The geometry of a dot that can lower to wgmma, judged on the IR alone.
struct WarpgroupDotShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t warpsM = 0;  // a multiple of 4: warpgroups stacked along M
  int64_t warpsN = 1;  // warpgroups side by side along N
  int64_t groupN = 0;  // the contiguous columns each warpgroup owns: n / warpsN
};

// Whether `dot` can lower to wgmma: the target has it, the kernel attribute
// warpgroup_mma is on, 16-bit operands, an #mma accumulator whose warps along M
// form whole warpgroups (each owning 64-row slices) and, with warps along N
// too, whose column blocks (instr = [16, n / warpsN]) give each warpgroup one
// contiguous block; 16 ≤ k a multiple of 16, 8 ≤ n / warpsN ≤ 256 a multiple
// of 8, no thread-major renumbering.
std::optional<WarpgroupDotShape> warpgroupDotShape(const LoweringContext& ctx, const ir::Operation& dot);

// Whether every use of convert_layout `convert` (`uses`, its result's users) is
// such a dot reading it as operand `index` (0: A, 1: B). `kMajor`: the operand's
// contraction runs along the stored tile's rows; a B operand stored the other
// way (MN-major) can be split between warpgroups along N only at 128-byte
// column blocks.
bool feedsOnlyWarpgroupDots(const LoweringContext& ctx, const ir::Operation& convert,
                            const std::vector<const ir::Operation*>& uses, size_t index, bool kMajor = true);

// Whether a B operand read from a stored tile (through a 2D transpose when
// `transposed`) is K-major: its contraction, the operand's dim 0, runs along
// the stored tile's rows.
inline bool storedKMajor(const SwizzledTile& stored, bool transposed) {
  return (transposed ? 1 : 0) == stored.contigDim;
}

// Before planning a buffer wgmma reads: rounds the buffer offset
// (ctx.asyncBufferBytes) up to kWarpgroupOperandAlign and marks the kernel's
// dynamic shared memory to be aligned as much.
void alignForWarpgroupOperand(LoweringContext& ctx);

// fence.proxy.async.shared::cta: orders the thread's generic-proxy writes to
// shared memory (stores, cp.async) before wgmma's async-proxy reads; each
// writer fences before the barrier that publishes its writes.
void fenceForAsyncProxy(LoweringContext& ctx);

// Whether a swizzled tile of `rows` rows can be stored in column blocks that a
// matrix descriptor describes: 16-bit elements, rows of a power-of-two multiple
// of 128 bytes, a power-of-two row count of at least 8.
bool descriptorCompatible(const SwizzledTile& tile, int64_t rows);

// Lowers `dot` with wgmma when its B operand is a descriptor operand (a
// cp.async slot or a shared conversion's buffer planned for it:
// Lowered::warpgroupOperand) and returns true;
// false otherwise (the caller lowers it with mma.sync).
bool lowerWarpgroupDot(LoweringContext& ctx, const ir::Operation& dot);

// Before lowering `op`: waits for the wgmma results still in flight whose first
// reader it is (a group's deferred chains, LoweringContext::warpgroupWaits).
void waitForWarpgroupResults(LoweringContext& ctx, const ir::Operation& op);

}  // namespace attnjit::codegen
