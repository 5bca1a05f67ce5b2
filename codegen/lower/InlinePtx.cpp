#include "codegen/lower/InlinePtx.h"

#include <llvm/IR/InlineAsm.h>

namespace attnjit::codegen {

InlinePtx& InlinePtx::output(const std::string& constraint, llvm::Type* type) {
  outputConstraints_.push_back("=" + constraint);
  outputTypes_.push_back(type);
  return *this;
}

InlinePtx& InlinePtx::input(const std::string& constraint, llvm::Value* value) {
  inputConstraints_.push_back(constraint);
  inputs_.push_back(value);
  return *this;
}

InlinePtx& InlinePtx::withText(std::string text) {
  text_ = std::move(text);
  return *this;
}

InlinePtx& InlinePtx::sideEffects() {
  sideEffects_ = true;
  return *this;
}

std::vector<llvm::Value*> InlinePtx::emitAll() {
  std::string constraints;
  auto append = [&](const std::string& c) { constraints += (constraints.empty() ? "" : ",") + c; };
  for (const auto& c : outputConstraints_) append(c);
  for (const auto& c : inputConstraints_) append(c);
  if (sideEffects_) append("~{memory}");
  std::vector<llvm::Type*> argTypes;
  for (llvm::Value* v : inputs_) argTypes.push_back(v->getType());
  llvm::Type* ret = b_.getVoidTy();
  if (outputTypes_.size() == 1) ret = outputTypes_[0];
  if (outputTypes_.size() > 1) ret = llvm::StructType::get(b_.getContext(), outputTypes_);
  auto* fnType = llvm::FunctionType::get(ret, argTypes, false);
  llvm::InlineAsm* asmValue = llvm::InlineAsm::get(fnType, text_, constraints, sideEffects_ || outputTypes_.empty());
  llvm::Value* call = b_.CreateCall(fnType, asmValue, inputs_);
  std::vector<llvm::Value*> outputs;
  if (outputTypes_.size() == 1) outputs.push_back(call);
  for (unsigned i = 0; outputTypes_.size() > 1 && i < outputTypes_.size(); ++i)
    outputs.push_back(b_.CreateExtractValue(call, i));
  return outputs;
}

llvm::Value* InlinePtx::emit() {
  std::vector<llvm::Value*> outputs = emitAll();
  return outputs.empty() ? nullptr : outputs[0];
}

}  // namespace attnjit::codegen
