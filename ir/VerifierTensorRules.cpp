// Verifier rules of the tensor ops: dot, the reductions and the cluster all-reduces.
#include <tuple>

#include "ir/KernelAttributes.h"
#include "ir/VerifierRules.h"

namespace attnjit::ir {

namespace {
// Element kinds the tensor cores multiply.
bool isDotInputKind(ScalarKind k) {
  return k == ScalarKind::F16 || k == ScalarKind::BF16 || k == ScalarKind::F32 || k == ScalarKind::F8E4M3 ||
         k == ScalarKind::F8E5M2;
}

support::Status checkRank2Tile(const Operation& op, size_t index, const char* role) {
  const Type& t = op.operand(index)->type();
  if (t.isTile() && t.rank() == 2 && !t.hasPointerElements()) return support::Status::ok();
  return opError(op, std::string(role) + " must be a rank-2 tile of numbers, got " + t.str());
}
}  // namespace

support::Status verifyDot(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 3));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {"acc", "input_precision", "k_extent", "n_extent"}));
  ATTNJIT_VERIFY(checkRank2Tile(op, 0, "operand a"));
  ATTNJIT_VERIFY(checkRank2Tile(op, 1, "operand b"));
  ATTNJIT_VERIFY(checkRank2Tile(op, 2, "the accumulator"));
  const Type& a = op.operand(0)->type();
  const Type& b = op.operand(1)->type();
  const Type& acc = op.operand(2)->type();
  const ScalarKind input = a.scalarKind();
  if (b.scalarKind() != input)
    return opError(op, "operand element types differ: " + a.str() + " vs " + b.str());
  if (!isDotInputKind(input))
    return opError(op, "operand element type " + a.elementType().str() +
                           " is not one of f16, bf16, f32, f8e4m3, f8e5m2");
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  if (b.shape()[0] != k)
    return opError(op, "operand shapes " + shapeStr(a.shape()) + " and " + shapeStr(b.shape()) +
                           " do not agree on K (" + std::to_string(k) + " vs " + std::to_string(b.shape()[0]) + ")");
  if (acc.shape() != std::vector<int64_t>{m, n})
    return opError(op, "accumulator shape " + shapeStr(acc.shape()) + " should be [M,N] = " + shapeStr({m, n}));

  std::string accName;
  ATTNJIT_VERIFY(requireStringAttr(op, "acc", accName));
  if (accName != "f32" && accName != "f16")
    return opError(op, "attribute 'acc' must be f32 or f16, got " + accName);
  if (accName == "f16" && input != ScalarKind::F16)
    return opError(op, "acc = f16 requires f16 operands, got " + a.elementType().str());
  if (scalarName(acc.scalarKind()) != accName)
    return opError(op, "accumulator type " + acc.str() + " does not match acc = " + accName);

  std::string precision = "ieee";
  ATTNJIT_VERIFY(optionalStringAttr(op, "input_precision", precision));
  if (precision != "ieee" && precision != "tf32")
    return opError(op, "attribute 'input_precision' must be ieee or tf32, got " + precision);
  if (op.attrs().has("input_precision") && input != ScalarKind::F32)
    return opError(op, "input_precision applies only to f32 operands, got " + a.elementType().str());
  for (const auto& [name, limit, dim] : {std::tuple{"k_extent", k, "K"}, std::tuple{"n_extent", n, "N"}}) {
    if (!op.attrs().has(name)) continue;
    int64_t extent = 0;
    ATTNJIT_VERIFY(requireIntAttr(op, name, extent));
    if (extent < 1 || extent > limit)
      return opError(op, std::string("attribute '") + name + "' must be in [1, " + dim + " = " + std::to_string(limit) +
                             "], got " + std::to_string(extent));
  }

  // thread_major renumbers k on both operands alike, or n on the accumulator
  // and B alike (ir/Types.h); anything else pairs elements wrongly.
  const Layout* aLayout = a.layout().get();
  const Layout* bLayout = b.layout().get();
  const Layout* accLayout = acc.layout().get();
  auto threadMajor = [](const Layout* l) { return l && l->threadMajor != 0; };
  auto parentThreadMajor = [](const Layout* l) { return l && l->parent && l->parent->threadMajor != 0; };
  if (threadMajor(aLayout) != threadMajor(bLayout) && (threadMajor(aLayout) || threadMajor(bLayout)))
    return opError(op,
                   "operands a and b must both be thread_major or neither (their k coordinates are renumbered alike)");
  if ((threadMajor(accLayout) || parentThreadMajor(bLayout)) &&
      !(bLayout && accLayout && bLayout->parent && *bLayout->parent == *accLayout))
    return opError(op, "a thread_major accumulator needs operand b of that layout's dot_op (their n coordinates are "
                       "renumbered alike)");

  return checkResultType(op, acc, "the accumulator type");
}

support::Status verifyReduce(const Operation& op, const Kernel&) {
  ATTNJIT_VERIFY(checkOperandCount(op, 1));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {"axis"}));
  ATTNJIT_VERIFY(checkTileOperand(op, 0));
  const Type& in = op.operand(0)->type();
  if (!isNumeric(in)) return opError(op, "requires integer or float elements (not i1 or pointers), got " + in.str());
  int64_t axis = 0;
  ATTNJIT_VERIFY(requireIntAttr(op, "axis", axis));
  if (axis < 0 || axis >= in.rank())
    return opError(op, "axis " + std::to_string(axis) + " is out of range [0, " + std::to_string(in.rank()) +
                           ") for " + in.str());
  std::vector<int64_t> shape = in.shape();
  shape.erase(shape.begin() + axis);
  return checkResultShapeAndElement(op, in.withShape(shape), "the operand without axis " + std::to_string(axis));
}

support::Status verifyClusterReduce(const Operation& op, const Kernel& kernel) {
  ATTNJIT_VERIFY(checkOperandCount(op, 1));
  ATTNJIT_VERIFY(checkResultCount(op, 1));
  ATTNJIT_VERIFY(checkKnownAttributes(op, {}));
  ATTNJIT_VERIFY(checkTileOperand(op, 0));
  const Type& in = op.operand(0)->type();
  if (in.scalarKind() != ScalarKind::F32) return opError(op, "requires a tile of f32, got " + in.str());
  if (kernelAttribute(kernel, KernelAttribute::ClusterSize) < 2)
    return opError(op, "needs a kernel of thread-block clusters (kernel attribute cluster_size of 2 or more)");
  return checkResultType(op, in, "the operand's type");
}

}  // namespace attnjit::ir
