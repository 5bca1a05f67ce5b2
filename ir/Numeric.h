// Exact scalar conversions shared by the interpreter, the reference code and the
// tests: rounding to f16, bf16 and fp8 (round to nearest even), and their bit
// encodings. These are the semantics the generated GPU code implements.
#pragma once

#include <cstdint>

#include "ir/Types.h"

namespace attnjit::ir {

// Rounds x to the nearest value representable in `kind` (a float kind), ties to
// even. fp8 saturates to its largest finite value (satfinite); f16 and bf16
// overflow to infinity; NaN stays NaN. For F64 returns x, for F32 (float)x.
double roundToFloatKind(double x, ScalarKind kind);

// Bit encodings (f16: 16 bits, bf16: 16 bits, fp8: 8 bits), rounding as above.
uint32_t encodeFloat(double x, ScalarKind kind);
double decodeFloat(uint32_t bits, ScalarKind kind);

// Converts a float to an integer kind: truncation toward zero, saturating at the
// kind's range, NaN → 0. i1 gives x != 0.
int64_t floatToInt(double x, ScalarKind kind);
// Wraps an integer to `kind`'s width, sign-extending (i1 → 0/1).
int64_t wrapInt(int64_t x, ScalarKind kind);

}  // namespace attnjit::ir
