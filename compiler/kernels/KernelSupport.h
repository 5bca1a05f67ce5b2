// Small helpers shared by the kernel builders: power-of-two arithmetic for tile
// shapes and the config-validation errors (no location: the spec loader blames
// the field the message names).
#pragma once

#include <bit>
#include <charconv>
#include <string>
#include <system_error>

#include "ir/Builder.h"
#include "ir/Diagnostics.h"
#include "ir/Types.h"

namespace attnjit::compiler {

inline int nextPowerOfTwo(int x) { return x <= 1 ? 1 : static_cast<int>(std::bit_ceil(static_cast<unsigned>(x))); }
inline bool isPowerOfTwo(int x) { return x > 0 && (x & (x - 1)) == 0; }
inline ir::Status configError(const std::string& message) { return ir::Status::error(ir::Location{}, message); }

// A number in a message or a shape's text, as short as reads back exactly (30,
// 2.5, 0.25, -1, nan).
inline std::string numberText(double value) {
  char text[64];
  auto [end, ec] = std::to_chars(text, text + sizeof text, value);
  return ec == std::errc() ? std::string(text, end) : std::to_string(value);
}

// A [n] vector as the columns of an [n, cols] tile (each row constant), or as
// the rows of a [rows, n] tile: the IR keeps broadcasting explicit.
inline ir::Value* broadcastAsColumn(ir::Builder& b, ir::Value* vec, int64_t cols, std::string name = {}) {
  const int64_t n = vec->type().shape()[0];
  return b.broadcast(b.expandDims(vec, 1), {n, cols}, std::move(name));
}
inline ir::Value* broadcastAsRow(ir::Builder& b, ir::Value* vec, int64_t rows, std::string name = {}) {
  const int64_t n = vec->type().shape()[0];
  return b.broadcast(b.expandDims(vec, 0), {rows, n}, std::move(name));
}

// q/o/output element types every family accepts: f32, f16 and bf16.
inline ir::Status checkIoDtype(ir::ScalarKind dtype) {
  if (dtype == ir::ScalarKind::F32 || dtype == ir::ScalarKind::F16 || dtype == ir::ScalarKind::BF16)
    return ir::Status::ok();
  return configError(std::string("dtype (") + ir::scalarName(dtype) + ") is not supported; use f32, f16 or bf16");
}

}  // namespace attnjit::compiler
