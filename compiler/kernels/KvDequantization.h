// Reading a quantized paged KV cache inside attention kernels: cache tiles in
// the format's encoding become tiles in the data type, and the per-token-head
// formats' inline row scales are read for the scores and for P (vLLM applies
// them there rather than to K and V). The formats are KvCacheFormat.h's.
#pragma once

#include <string>
#include <vector>

#include "compiler/kernels/KvCacheFormat.h"
#include "ir/Builder.h"

namespace attnjit::compiler {

// A loaded cache tile (the format's pointer element type) as tiles of `dtype`:
// one tile, or for int4 two, the even and the odd head-dimension columns (each
// byte holds elements 2i and 2i + 1). Quantized values convert exactly (int8,
// int4 and fp8 are exact in f16, bf16 and f32); fp8 and int8 are plain casts,
// which codegen converts two registers at a time; int4 is `unpack_nibbles`
// (packed the same way). Auto returns `raw` itself.
// `zeroPoints` (int4 only; i32, raw's shape, the low four bits used): vLLM's
// asymmetric int4, whose nibbles are unsigned, [0, 15], and stand for nibble -
// zero point (exact small integers, like the symmetric format's). Null: the
// symmetric two's-complement nibbles.
std::vector<ir::Value*> dequantizedGroups(ir::Builder& b, KvCacheFormat format, ir::ScalarKind dtype, ir::Value* raw,
                                          const std::string& name, ir::Value* zeroPoints = nullptr);

// vLLM's asymmetric int4 scale: the f32 whose low four mantissa bits hold the
// row's zero point. Returns {scale with those bits cleared, zero point as i32}.
struct ScaleAndZeroPoint {
  ir::Value* scale;
  ir::Value* zeroPoint;
};
ScaleAndZeroPoint splitScaleAndZeroPoint(ir::Builder& b, ir::Value* packedScale, const std::string& name);

// The inline f32 scale of each key's row, for a [N] tile of keys: the row starts
// at rowBase + slotOffset[j] (bytes), its scale at kvCacheScaleByteOffset(format,
// rowHeadSize) after that (rowHeadSize: Dqk for K rows, Dv for V rows). Masked-off
// keys read 0. `strideDivisibility` is what the cache strides are promised to be
// multiples of: 4 or more lets each scale be one aligned f32 load.
ir::Value* loadRowScales(ir::Builder& b, KvCacheFormat format, int strideDivisibility, ir::Value* rowBase,
                         ir::Value* slotOffset, ir::Value* tileMask, int rowHeadSize, const std::string& name);

}  // namespace attnjit::compiler
