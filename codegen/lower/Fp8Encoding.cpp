#include "codegen/lower/Fp8Encoding.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/LLVMContext.h>

#include "codegen/Codegen.h"
#include "support/Diagnostics.h"

namespace attnjit::codegen {

// With a = |x|'s f32 bits:
//   normal results (|x| ≥ the format's smallest normal, 2^(1 - bias)): the f32
//   exponent and the top mantissa bits, shifted down to the format's fields,
//   are the encoding once rebiased; adding (half an fp8 ulp − 1) plus the kept
//   bits' lowest bit before the shift rounds to nearest even, a carry moving
//   into the next binade as it should. Anything that lands beyond the largest
//   finite encoding (including infinity's exponent) saturates to it.
//   subnormal results: |x|·2^k (k = bias − 1 + mantissa bits) is the encoding
//   as an integer in [0, 2^mantissa bits]: |x|·2^k + 2^23 rounds it to nearest
//   even in f32 (ulp 1) and its low bits read it; 2^mantissa bits, reached by
//   rounding up, is exactly the smallest normal's encoding. Both steps are
//   exact f32 operations (a power-of-two scale of a value below 2^mantissa
//   bits; f32 subnormal inputs, flushed or not, encode as zero either way).
//   NaN: 0x7F, without the sign (the canonical NaN the cvt writes).
llvm::Value* emitSoftwareFp8Encoding(llvm::IRBuilderBase& b, llvm::Value* value, ir::ScalarKind kind) {
  ATTNJIT_CHECK(kind == ir::ScalarKind::F8E4M3 || kind == ir::ScalarKind::F8E5M2,
                "emitSoftwareFp8Encoding: not an fp8 kind");
  const bool e4m3 = kind == ir::ScalarKind::F8E4M3;
  const uint32_t mantissaBits = e4m3 ? 3 : 2;
  const uint32_t bias = e4m3 ? 7 : 15;
  const uint32_t maxFinite = e4m3 ? 0x7E : 0x7B;
  const uint32_t droppedBits = 23 - mantissaBits;
  const uint32_t smallestNormalBits = (127 - bias + 1) << 23;
  const uint32_t rebias = (127 - bias) << mantissaBits;

  llvm::Value* bits = b.CreateBitCast(value, b.getInt32Ty());
  llvm::Value* magnitude = b.CreateAnd(bits, b.getInt32(0x7FFFFFFFu));
  llvm::Value* sign = b.CreateTrunc(b.CreateLShr(bits, 24), b.getInt8Ty());
  sign = b.CreateAnd(sign, b.getInt8(static_cast<uint8_t>(0x80)));

  llvm::Value* keptLowestBit = b.CreateAnd(b.CreateLShr(magnitude, droppedBits), b.getInt32(1));
  llvm::Value* roundingAddend = b.CreateAdd(b.getInt32((1u << (droppedBits - 1)) - 1), keptLowestBit);
  llvm::Value* normal = b.CreateSub(b.CreateLShr(b.CreateAdd(magnitude, roundingAddend), droppedBits),
                                    b.getInt32(rebias));
  // (A compare and select, not llvm.umin: the constant folder folds these without a module.)
  normal = b.CreateSelect(b.CreateICmpULT(normal, b.getInt32(maxFinite)), normal, b.getInt32(maxFinite));

  llvm::Value* absolute = b.CreateBitCast(magnitude, b.getFloatTy());
  const double subnormalScale = static_cast<double>(1u << (bias - 1 + mantissaBits));
  llvm::Value* shifted = b.CreateFAdd(b.CreateFMul(absolute, llvm::ConstantFP::get(b.getFloatTy(), subnormalScale)),
                                      llvm::ConstantFP::get(b.getFloatTy(), 8388608.0));
  llvm::Value* subnormal = b.CreateSub(b.CreateBitCast(shifted, b.getInt32Ty()), b.getInt32(0x4B000000u));

  llvm::Value* isNormal = b.CreateICmpUGE(magnitude, b.getInt32(smallestNormalBits));
  llvm::Value* encoded = b.CreateTrunc(b.CreateSelect(isNormal, normal, subnormal), b.getInt8Ty());
  encoded = b.CreateOr(encoded, sign);
  llvm::Value* isNan = b.CreateICmpUGT(magnitude, b.getInt32(0x7F800000u));
  return b.CreateSelect(isNan, b.getInt8(0x7F), encoded);
}

std::vector<uint8_t> softwareFp8Encodings(std::span<const float> values, ir::ScalarKind kind) {
  // Constants live as long as their context: one per call.
  llvm::LLVMContext context;
  llvm::IRBuilder<> b(context);
  std::vector<uint8_t> encodings;
  encodings.reserve(values.size());
  for (float value : values) {
    llvm::Value* encoded = emitSoftwareFp8Encoding(b, llvm::ConstantFP::get(b.getFloatTy(), value), kind);
    auto* folded = llvm::dyn_cast<llvm::ConstantInt>(encoded);
    ATTNJIT_CHECK(folded != nullptr, "softwareFp8Encodings: the encoding did not fold to a constant");
    encodings.push_back(static_cast<uint8_t>(folded->getZExtValue()));
  }
  return encodings;
}

}  // namespace attnjit::codegen
