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

// Converts a (signed) integer to a float kind with a single rounding (round to
// nearest even; fp8 saturates), exact even beyond 2^53 where a detour through
// double would round twice.
double intToFloatKind(int64_t x, ScalarKind kind);

// Rounds an f32 value to tf32 (10 explicit mantissa bits, f32 exponent range) to
// nearest, ties away from zero, as PTX cvt.rna.tf32.f32 does before a tensor-core
// mma. Infinities and NaN pass through.
float roundToTf32(float x);

// Converts a float to an integer kind: truncation toward zero, saturating at the
// kind's range, NaN → 0. i1 gives x != 0.
int64_t floatToInt(double x, ScalarKind kind);
// Wraps an integer to `kind`'s width, sign-extending (i1 → 0/1).
int64_t wrapInt(int64_t x, ScalarKind kind);

}  // namespace attnjit::ir
