// The verifier's entry points: per-op dispatch over the op table, and the
// kernel-level checks (parameters, constexprs, launch attributes, dominance and
// terminator placement). The per-family rules live in Verifier*Rules.cpp.
#include "ir/Verifier.h"

#include <cctype>
#include <set>
#include <string>
#include <unordered_set>

#include "ir/KernelAttributes.h"
#include "ir/VerifierRules.h"

namespace attnjit::ir {

namespace {

support::Status dispatchFamilyRule(const Operation& op, const Kernel& kernel) {
  switch (op.opcode()) {
#define ATTNJIT_OP(Enum, spelling, Family) \
  case Opcode::Enum:                       \
    return verify##Family(op, kernel);
#include "ir/Ops.def"
  }
  ATTNJIT_CHECK(false, "opcode outside the op table");
  return support::Status::ok();
}

bool isTerminator(const Operation& op) { return op.opcode() == Opcode::Yield || op.opcode() == Opcode::Return; }

support::Status kernelError(const Kernel& kernel, const std::string& message) {
  return support::Status::error(kernel.location(), "kernel '" + kernel.name() + "': " + message);
}

std::string parameterStr(const Kernel& kernel, size_t index) {
  std::string s = "parameter " + std::to_string(index);
  const std::string& name = kernel.parameter(index)->name();
  if (!name.empty()) s += " ('" + name + "')";
  return s;
}

bool isPowerOfTwo(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

// Scalars a launch can pass by value, and pointers.
bool isParameterType(const Type& t) {
  if (t.isPointer()) return true;
  if (!t.isScalar()) return false;
  const ScalarKind k = t.scalarKind();
  return k == ScalarKind::I32 || k == ScalarKind::I64 || k == ScalarKind::F32 || k == ScalarKind::F64;
}

// Kernel names become PTX entry names and file names (dumps, bundles): a
// C-style identifier of at most 256 characters.
bool isKernelName(const std::string& name) {
  if (name.empty() || name.size() > 256 || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  return true;
}

support::Status verifySignature(const Kernel& kernel) {
  if (kernel.name().empty()) return support::Status::error(kernel.location(), "kernel without a name");
  if (!isKernelName(kernel.name()))
    return support::Status::error(kernel.location(),
                                  "kernel name '" + kernel.name().substr(0, 64) + (kernel.name().size() > 64 ? "..." : "") +
                                      "' is not an identifier (letters, digits and '_', not starting with a digit, "
                                      "at most 256 characters): it names the PTX entry point");
  for (size_t i = 0; i < kernel.numParameters(); ++i) {
    const Type& t = kernel.parameter(i)->type();
    if (!isParameterType(t))
      return kernelError(kernel, parameterStr(kernel, i) + " has type " + t.str() +
                                     "; parameters are pointers or i32, i64, f32, f64 scalars");
    if (const AttrValue* align = kernel.parameterAttrs(i).find("align")) {
      const auto* value = std::get_if<int64_t>(align);
      if (!t.isPointer() || !value || !isPowerOfTwo(*value))
        return kernelError(kernel, parameterStr(kernel, i) + ": align must be a power of two on a pointer, got " +
                                       attrValueStr(*align) + " on " + t.str());
    }
  }
  std::set<std::string> constexprNames;
  for (const Constexpr& c : kernel.constexprs()) {
    if (c.name.empty()) return kernelError(kernel, "constexpr without a name");
    if (!constexprNames.insert(c.name).second)
      return kernelError(kernel, "constexpr '" + c.name + "' is declared more than once");
  }
  return verifyKernelAttributes(kernel);
}

// Walks the kernel in program order, keeping the set of values visible at each
// point: the arguments of the current block and of every enclosing block, and the
// results of the ops before the current one in those blocks. Values defined inside
// a region stop being visible when the region ends.
class StructureChecker {
 public:
  explicit StructureChecker(const Kernel& kernel) : kernel_(kernel) {}

  support::Status checkBlock(const Block& block) {
    for (const auto& arg : block.arguments()) visible_.insert(arg.get());
    const auto& ops = block.operations();
    for (size_t i = 0; i < ops.size(); ++i) {
      const Operation& op = *ops[i];
      ATTNJIT_VERIFY(verifyOperation(op, kernel_));
      for (size_t j = 0; j < op.numOperands(); ++j)
        if (!visible_.count(op.operand(j))) return notVisibleError(op, j, block);
      if (isTerminator(op) && i + 1 < ops.size())
        return opError(op, std::string("must be the last op of its block, but '") + ops[i + 1]->name() +
                               "' follows it");
      for (const auto& region : op.regions()) ATTNJIT_VERIFY(checkBlock(*region));
      for (const auto& result : op.results()) visible_.insert(result.get());
    }
    for (const auto& arg : block.arguments()) visible_.erase(arg.get());
    for (const auto& op : ops)
      for (const auto& result : op->results()) visible_.erase(result.get());
    return support::Status::ok();
  }

 private:
  // Explains why operand `index` of op (in `useBlock`) is not visible there.
  support::Status notVisibleError(const Operation& op, size_t index, const Block& useBlock) const {
    const Value& value = *op.operand(index);
    const std::string what = operandStr(op, index) + " of type " + value.type().str();
    const Block* defBlock = value.definingOp() ? value.definingOp()->parentBlock() : value.ownerBlock();
    if (outermostBlock(defBlock) != &kernel_.body())
      return opError(op, what + " is not defined in kernel '" + kernel_.name() + "'");
    if (value.definingOp() && encloses(defBlock, &useBlock))
      return opError(op, what + " is used before its definition");
    const Operation* regionOwner = defBlock->parentOp();
    const std::string article = regionOwner->opcode() == Opcode::If ? "an" : "a";
    return opError(op, what + " is defined inside " + article + " '" + regionOwner->name() +
                           "' region and is not visible here (pass it out with 'yield')");
  }

  // The block at the top of `block`'s chain of enclosing regions (a kernel body),
  // or null for a detached op.
  static const Block* outermostBlock(const Block* block) {
    while (block && block->parentOp()) block = block->parentOp()->parentBlock();
    return block;
  }

  // `outer` is `inner` or one of the blocks enclosing it.
  static bool encloses(const Block* outer, const Block* inner) {
    for (const Block* b = inner; b; b = b->parentOp() ? b->parentOp()->parentBlock() : nullptr)
      if (b == outer) return true;
    return false;
  }

  const Kernel& kernel_;
  std::unordered_set<const Value*> visible_;
};

}  // namespace

support::Status verifyOperation(const Operation& op, const Kernel& kernel) {
  ATTNJIT_VERIFY(checkOperandsPresent(op));
  for (size_t i = 0; i < op.numOperands(); ++i)
    if (std::string defect = typeDefect(op.operand(i)->type()); !defect.empty())
      return opError(op, operandStr(op, i) + " has invalid type " + op.operand(i)->type().str() + ": " + defect);
  for (size_t i = 0; i < op.numResults(); ++i)
    if (std::string defect = typeDefect(op.result(i)->type()); !defect.empty())
      return opError(op, "result " + std::to_string(i) + " has invalid type " + op.result(i)->type().str() + ": " +
                             defect);
  if (op.opcode() != Opcode::For && op.opcode() != Opcode::If && op.numRegions() != 0)
    return opError(op, "has " + std::to_string(op.numRegions()) + " region(s); only 'for' and 'if' have regions");
  return dispatchFamilyRule(op, kernel);
}

// Every tile's share per thread (kMaxTileElementsPerThread), once num_warps is
// known to be valid.
support::Status checkTilesPerThread(const Kernel& kernel) {
  const int64_t threads = 32 * kernelAttribute(kernel, KernelAttribute::NumWarps);
  support::Status status = support::Status::ok();
  walk(kernel.body(), [&](const Operation& op) {
    for (const auto& result : op.results()) {
      const Type& t = result->type();
      if (!status || !t.isTile()) continue;
      int64_t elements = 1;
      for (int64_t extent : t.shape()) elements *= extent;  // bounded by typeDefect
      if (elements > kMaxTileElementsPerThread * threads)
        status = opError(op, "result " + t.str() + " has " + std::to_string(elements) + " elements, more than " +
                                 std::to_string(kMaxTileElementsPerThread) + " per thread for the kernel's " +
                                 std::to_string(threads) + " threads (num_warps " + std::to_string(threads / 32) + ")");
    }
  });
  return status;
}

support::Status verifyKernel(const Kernel& kernel) {
  ATTNJIT_VERIFY(verifySignature(kernel));
  ATTNJIT_VERIFY(StructureChecker(kernel).checkBlock(kernel.body()));
  ATTNJIT_VERIFY(checkTilesPerThread(kernel));
  const Operation* last = kernel.body().back();
  if (!last || last->opcode() != Opcode::Return)
    return kernelError(kernel, std::string("body must end with 'return'") +
                                   (last ? std::string(", but ends with '") + last->name() + "'" : std::string()));
  return support::Status::ok();
}

support::Status verifyModule(const Module& module) {
  std::set<std::string> names;
  for (const auto& kernel : module.kernels()) {
    if (!names.insert(kernel->name()).second)
      return support::Status::error(kernel->location(), "kernel '" + kernel->name() + "' is defined more than once");
    ATTNJIT_VERIFY(verifyKernel(*kernel));
  }
  return support::Status::ok();
}

}  // namespace attnjit::ir
