// Row and column broadcasts for the kernel builders: the tile IR keeps
// broadcasting explicit (expand_dims, then broadcast).
#pragma once

#include <cstdint>
#include <string>

#include "ir/Builder.h"

namespace attnjit::compiler {

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

}  // namespace attnjit::compiler
