// What the kernel builders' config validation shares: power-of-two arithmetic
// for tile shapes, the config errors (no location: the spec loader blames the
// field the message names), and the q/o data types every family accepts.
#pragma once

#include <bit>
#include <charconv>
#include <cstdlib>
#include <string>
#include <system_error>

#include "support/Diagnostics.h"
#include "ir/Types.h"

namespace attnjit::compiler {

// Head counts the attention kernels accept: KV heads are the grid's y extent and
// one program packs a KV head's query heads into the rows of one query tile
// (BLOCK_M = next_pow2 of them, at most 256).
inline constexpr int kMaxAttentionHeads = 1024;
inline constexpr int kMaxQueriesPerKvHead = 256;
// Head sizes (QK and V) the attention, cache and merge kernels accept: up to
// DeepSeek MLA's 576-wide latent rows read as plain attention (512 + 64), with room
// for wider experiments. Heads over 256 take 16- or 32-key tiles (shared memory).
inline constexpr int kMaxHeadSize = 1024;
// "<field> (<value>) must be between 1 and kMaxHeadSize": every head-size check's message.
inline std::string headSizeOutOfRange(const std::string& field, int value) {
  return field + " (" + std::to_string(value) + ") must be between 1 and " + std::to_string(kMaxHeadSize);
}
// Bidirectional (mm_prefix_range) ranges per sequence an attention kernel takes:
// each is tested against every key of every tile, unrolled.
inline constexpr int kMaxMmPrefixRanges = 32;

inline int nextPowerOfTwo(int x) { return x <= 1 ? 1 : static_cast<int>(std::bit_ceil(static_cast<unsigned>(x))); }
inline bool isPowerOfTwo(int x) { return x > 0 && (x & (x - 1)) == 0; }
inline support::Status configError(const std::string& message) {
  return support::Status::error(support::Location{}, message);
}
// "<field> (<value>) must be a power of two between <low> and <high>" unless it is one.
inline support::Status checkPowerOfTwo(const std::string& field, int value, int low, int high) {
  if (isPowerOfTwo(value) && value >= low && value <= high) return support::Status::ok();
  return configError(field + " (" + std::to_string(value) + ") must be a power of two between " +
                     std::to_string(low) + " and " + std::to_string(high));
}

// A number in a message or a shape's text, as short as reads back exactly (30,
// 2.5, 0.25, -1, nan).
inline std::string numberText(double value) {
  char text[64];
  auto [end, ec] = std::to_chars(text, text + sizeof text, value);
  return ec == std::errc() ? std::string(text, end) : std::to_string(value);
}

// num_stages of a pipelined KV loop: 1 (off), 2 (the next tile in flight), or
// 3-4 slots that producer warps (warp_specialize) fill further ahead.
inline support::Status checkNumStages(int numStages, bool warpSpecialize) {
  if (numStages < 1 || numStages > 4)
    return configError("num_stages (" + std::to_string(numStages) +
                       ") must be 1 (no pipelining), 2 (next KV tile loaded during this one's compute), or 3-4 "
                       "with warp_specialize (producer warps up to num_stages - 1 tiles ahead)");
  if (numStages > 2 && !warpSpecialize)
    return configError("num_stages (" + std::to_string(numStages) +
                       ") above 2 needs warp_specialize: true (without producer warps only the next tile is in "
                       "flight)");
  return support::Status::ok();
}

// q/o/output element types every family accepts: f32, f16 and bf16.
inline support::Status checkIoDtype(ir::ScalarKind dtype) {
  if (dtype == ir::ScalarKind::F32 || dtype == ir::ScalarKind::F16 || dtype == ir::ScalarKind::BF16)
    return support::Status::ok();
  return configError(std::string("dtype (") + ir::scalarName(dtype) + ") is not supported; use f32, f16 or bf16");
}

}  // namespace attnjit::compiler
