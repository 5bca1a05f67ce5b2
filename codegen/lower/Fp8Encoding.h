// f32 → fp8 for targets without the fp8 cvt (before sm_89), in integer and f32
// arithmetic every target runs, bit for bit what PTX cvt.rn.satfinite.e4m3x2.f32
// (.e5m2x2) gives: round to nearest even, finite values beyond the format and
// infinities saturated to ±max finite (e4m3 ±448, e5m2 ±57344), NaN → 0x7F.
// Internal to codegen/.
#pragma once

#include <llvm/IR/IRBuilder.h>

#include "ir/Types.h"

namespace attnjit::codegen {

// The i8 encoding of f32 value `value` in fp8 kind `kind` (F8E4M3 or F8E5M2).
llvm::Value* emitSoftwareFp8Encoding(llvm::IRBuilderBase& b, llvm::Value* value, ir::ScalarKind kind);

}  // namespace attnjit::codegen
