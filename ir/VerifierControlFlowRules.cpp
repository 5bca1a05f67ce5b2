// Verifier rules of the structured control flow: for, if and the terminators.
// Placement that needs the whole kernel (nothing after a terminator, the body
// ending in return) is checked by verifyKernel.
#include "ir/VerifierRules.h"

namespace attnjit::ir {

support::Status verifyFor(const Operation& op, const Kernel&) {
  if (op.numOperands() < 3)
    return opError(op, "expected lo, hi, step and the initial values (at least 3 operands), got " +
                           std::to_string(op.numOperands()));
  ATTNJIT_VERIFY(checkRegionCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  const Type& lo = op.operand(0)->type();
  const Type& hi = op.operand(1)->type();
  const Type& step = op.operand(2)->type();
  const bool loopInteger = lo.isScalar() && (lo.scalarKind() == ScalarKind::I32 || lo.scalarKind() == ScalarKind::I64);
  if (!loopInteger || hi != lo || step != lo)
    return opError(op, "lo, hi and step must have one integer type (i32 or i64), got " + lo.str() + ", " + hi.str() +
                           ", " + step.str());

  // The loop runs while iv < hi, adding step: a constant step of 0 or less
  // would never end (a step computed at run time is the program's business).
  if (const Operation* stepDef = op.operand(2)->definingOp(); stepDef && stepDef->opcode() == Opcode::Constant)
    if (const auto* value = std::get_if<int64_t>(stepDef->attrs().find("value")); value && *value <= 0)
      return opError(op, "step must be positive, got the constant " + std::to_string(*value));

  const size_t numInits = op.numOperands() - 3;
  if (op.numResults() != numInits)
    return opError(op, "has " + std::to_string(numInits) + " initial values but " + std::to_string(op.numResults()) +
                           " results");
  for (size_t i = 0; i < numInits; ++i) {
    const Type& init = op.operand(3 + i)->type();
    if (op.result(i)->type() != init)
      return opError(op, "result " + std::to_string(i) + " has type " + op.result(i)->type().str() +
                             " but its initial value has type " + init.str());
  }

  const Block& body = *op.region(0);
  if (body.numArguments() != 1 + numInits)
    return opError(op, "body must have " + std::to_string(1 + numInits) +
                           " arguments (the induction variable, then one per initial value), got " +
                           std::to_string(body.numArguments()));
  if (body.argument(0)->type() != lo)
    return opError(op, "induction variable has type " + body.argument(0)->type().str() + " but lo has type " +
                           lo.str());
  for (size_t i = 0; i < numInits; ++i) {
    const Type& arg = body.argument(1 + i)->type();
    const Type& init = op.operand(3 + i)->type();
    if (arg != init)
      return opError(op, "body argument " + std::to_string(1 + i) + " has type " + arg.str() +
                             " but its initial value has type " + init.str());
  }
  return checkRegionEndsWithYield(op, 0, "body");
}

support::Status verifyIf(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 1));
  ATTNJIT_VERIFY(checkRegionCount(op, 2));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  const Type& cond = op.operand(0)->type();
  if (cond != Type::scalar(ScalarKind::I1)) return opError(op, "condition must be a scalar i1, got " + cond.str());
  static const char* const kRegionNames[] = {"then region", "else region"};
  for (size_t r = 0; r < 2; ++r) {
    if (op.region(r)->numArguments() != 0)
      return opError(op, std::string(kRegionNames[r]) + " must have no arguments, got " +
                             std::to_string(op.region(r)->numArguments()));
    ATTNJIT_VERIFY(checkRegionEndsWithYield(op, r, kRegionNames[r]));
  }
  return support::Status::ok();
}

support::Status verifyYield(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkResultCount(op, 0));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  const Block* block = op.parentBlock();
  const Operation* parent = block ? block->parentOp() : nullptr;
  if (!parent || (parent->opcode() != Opcode::For && parent->opcode() != Opcode::If))
    return opError(op, "must terminate the region of a 'for' or 'if'");
  return checkYieldMatchesParent(op, *parent);
}

support::Status verifyReturn(const Operation& op, const Kernel& kernel) {
  ATTNJIT_VERIFY(checkOperandCount(op, 0));
  ATTNJIT_VERIFY(checkResultCount(op, 0));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  if (op.parentBlock() != &kernel.body())
    return opError(op, "allowed only at the end of the kernel body (a region ends with 'yield')");
  return support::Status::ok();
}

}  // namespace attnjit::ir
