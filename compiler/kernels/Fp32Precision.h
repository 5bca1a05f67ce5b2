// How kernels with f32 q/k/v take the f32 operands of their dots.
#pragma once

#include <optional>
#include <string_view>

namespace attnjit::compiler {

// Tf32 (vLLM's: Triton's tl.dot multiplies f32 operands as tf32 on NVIDIA
// GPUs) rounds each operand to tf32 (10 mantissa bits, ties away from zero,
// cvt.rna) and multiplies on the tensor cores (mma m16n8k8, sm_80+); Ieee
// keeps the operands exact (f32 FMAs). Both accumulate in f32.
enum class Fp32Precision { Tf32, Ieee };

inline std::optional<Fp32Precision> parseFp32Precision(std::string_view text) {
  if (text == "tf32") return Fp32Precision::Tf32;
  if (text == "ieee") return Fp32Precision::Ieee;
  return std::nullopt;
}

}  // namespace attnjit::compiler
