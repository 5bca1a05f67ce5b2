// The one place inline PTX is written: for instructions NVVM has no intrinsic for
// (tanh.approx, predicated vector loads and stores with fallback values,
// wgmma.mma_async). Operands are numbered outputs first, then inputs, in call order;
// constraints follow LLVM's NVPTX inline asm: "b" pred, "h" 16-bit, "r" 32-bit,
// "l" 64-bit, "f" f32, "d" f64; a tied input uses its output's number ("0").
#pragma once

#include <llvm/IR/IRBuilder.h>

#include <string>
#include <vector>

namespace attnjit::codegen {

class InlinePtx {
 public:
  InlinePtx(llvm::IRBuilder<>& b, std::string text) : b_(b), text_(std::move(text)) {}
  InlinePtx& output(const std::string& constraint, llvm::Type* type);
  InlinePtx& input(const std::string& constraint, llvm::Value* value);
  // Replaces the text (for text written after its operands were numbered).
  InlinePtx& withText(std::string text);
  // Marks the asm as touching memory (stores).
  InlinePtx& sideEffects();
  // Emits the call; returns the outputs (none, one, or several in order).
  std::vector<llvm::Value*> emitAll();
  // Emits the call; returns its single output (or the call for no output).
  llvm::Value* emit();

 private:
  llvm::IRBuilder<>& b_;
  std::string text_;
  std::vector<std::string> outputConstraints_;
  std::vector<llvm::Type*> outputTypes_;
  std::vector<std::string> inputConstraints_;
  std::vector<llvm::Value*> inputs_;
  bool sideEffects_ = false;
};

}  // namespace attnjit::codegen
