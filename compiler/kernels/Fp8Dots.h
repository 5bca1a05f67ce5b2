// The data type in which a per-tensor fp8 KV cache meets q in the dots.
#pragma once

#include <optional>
#include <string_view>

#include "compiler/kernels/KvCacheFormat.h"
#include "ir/Types.h"

namespace attnjit::compiler {

// Dtype casts each fp8 K/V element into the kernel's data type (vLLM's
// numerics: Triton casts the loaded fp8 tile to q's dtype). F16 casts it into
// f16 instead and rounds q and P to f16: every e4m3 and e5m2 value is exact in
// f16, the cast is one cvt.rn.f16x2.e4m3x2 per pair where bf16 takes that and
// three more (through f32), and f16 keeps 3 more mantissa bits of q and P than
// bf16. The price is f16's range: a q element beyond ±65504 becomes infinite.
// Only bf16 kernels differ (f16 ones already compute in f16). Per-tensor fp8
// caches take both dots in f16; the int8 and fp8 per-token-head formats take
// only Q·K in f16 (their bytes convert in two instructions a pair instead of
// four or five) and keep P·V in the data type: they multiply P by each key's
// value scale, which can fall below f16's normal range.
enum class Fp8DotDtype { Dtype, F16 };

inline std::optional<Fp8DotDtype> parseFp8DotDtype(std::string_view text) {
  if (text == "dtype") return Fp8DotDtype::Dtype;
  if (text == "f16") return Fp8DotDtype::F16;
  return std::nullopt;
}

inline bool perTensorFp8(KvCacheFormat format) {
  return format == KvCacheFormat::Fp8E4M3 || format == KvCacheFormat::Fp8E5M2;
}

// The caches whose Q·K may run in f16 (fp8_dot_dtype f16).
inline bool f16QueryKeyDots(KvCacheFormat format) {
  return perTensorFp8(format) || format == KvCacheFormat::Int8PerTokenHead ||
         format == KvCacheFormat::Fp8PerTokenHead;
}

// The operand type of a kernel's dots (of both, as MLA uses it, or of P·V):
// f16 where the choice changes anything.
inline ir::ScalarKind fp8DotOperandKind(Fp8DotDtype choice, KvCacheFormat format, ir::ScalarKind dtype) {
  return choice == Fp8DotDtype::F16 && perTensorFp8(format) && dtype == ir::ScalarKind::BF16 ? ir::ScalarKind::F16
                                                                                             : dtype;
}

// The operand type of Q·K (q and K).
inline ir::ScalarKind fp8QueryKeyDotKind(Fp8DotDtype choice, KvCacheFormat format, ir::ScalarKind dtype) {
  return choice == Fp8DotDtype::F16 && f16QueryKeyDots(format) && dtype == ir::ScalarKind::BF16 ? ir::ScalarKind::F16
                                                                                                : dtype;
}

}  // namespace attnjit::compiler
