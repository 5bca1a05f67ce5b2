// dot: acc[M,N] + a[M,K] · b[K,N]. Each product is exact and is added to a
// running sum in k order in the accumulator's precision (f32; f16 for acc = f16),
// which is what a tensor-core accumulation computes up to summation order.
#include <cmath>
#include <string>
#include <vector>

#include "ir/InterpreterProgram.h"
#include "ir/Numeric.h"

namespace attnjit::ir {

namespace {

// True when the product of two values of the kind is exact in float: at most 12
// significant bits each (f16 has 11, bf16 8, fp8 4, tf32 11).
bool productExactInFloat(ScalarKind kind, bool tf32) {
  switch (kind) {
    case ScalarKind::F16:
    case ScalarKind::BF16:
    case ScalarKind::F8E4M3:
    case ScalarKind::F8E5M2:
      return true;
    case ScalarKind::F32:
      return tf32;
    default:
      return false;
  }
}

void toFloats(const std::vector<double>& in, bool tf32, std::vector<float>& out) {
  out.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const auto x = static_cast<float>(in[i]);
    out[i] = tf32 ? roundToTf32(x) : x;
  }
}

// Row-at-a-time so the innermost loop runs over n with independent sums (and
// vectorizes); each sum still receives its products in k order.
void floatDot(const std::vector<float>& a, const std::vector<float>& b, int64_t M, int64_t N, int64_t K,
              bool exactProducts, std::vector<float>& row, std::vector<double>& acc, ScalarKind accKind) {
  row.resize(static_cast<size_t>(N));
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) row[n] = static_cast<float>(acc[m * N + n]);
    for (int64_t k = 0; k < K; ++k) {
      const float aValue = a[m * K + k];
      const float* bRow = b.data() + k * N;
      if (exactProducts) {
        // An exact product makes a*b + s and fma(a, b, s) the same number.
        for (int64_t n = 0; n < N; ++n) row[n] += aValue * bRow[n];
      } else {
        for (int64_t n = 0; n < N; ++n) row[n] = std::fma(aValue, bRow[n], row[n]);
      }
      // A narrower accumulator (f16) rounds every partial sum.
      if (accKind != ScalarKind::F32)
        for (int64_t n = 0; n < N; ++n) row[n] = static_cast<float>(roundToFloatKind(row[n], accKind));
    }
    for (int64_t n = 0; n < N; ++n) acc[m * N + n] = row[n];
  }
}

}  // namespace

support::Status interpretDot(ProgramContext& ctx, const CompiledOp& op) {
  const Type& aType = op.op->operand(0)->type();
  const Type& bType = op.op->operand(1)->type();
  const Type& accType = op.op->operand(2)->type();
  if (aType.rank() != 2 || bType.rank() != 2 || accType.rank() != 2)
    return ctx.error(op, "operands must be rank-2 tiles");
  const int64_t M = aType.shape()[0], K = aType.shape()[1], N = bType.shape()[1];
  if (bType.shape()[0] != K || accType.shape()[0] != M || accType.shape()[1] != N)
    return ctx.error(op, "shapes " + aType.str() + " · " + bType.str() + " + " + accType.str() + " do not match");
  const RuntimeValue& a = ctx.operand(op, 0);
  const RuntimeValue& b = ctx.operand(op, 1);
  const RuntimeValue& accIn = ctx.operand(op, 2);
  RuntimeValue& out = ctx.result(op);
  const ScalarKind accKind = accType.scalarKind();

  const bool floatOperands = aType.isFloatLike() && bType.isFloatLike();
  if (floatOperands != accType.isFloatLike()) return ctx.error(op, "mixes float and integer operands");
  if (!floatOperands) {
    if (!aType.isIntLike() || !bType.isIntLike()) return ctx.error(op, "operands must be numbers");
    out.ints.resize(static_cast<size_t>(M * N));
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        uint64_t sum = static_cast<uint64_t>(accIn.ints[m * N + n]);
        for (int64_t k = 0; k < K; ++k)
          sum += static_cast<uint64_t>(a.ints[m * K + k]) * static_cast<uint64_t>(b.ints[k * N + n]);
        out.ints[m * N + n] = wrapInt(static_cast<int64_t>(sum), accKind);
      }
    return support::Status::ok();
  }

  // The extents' promises (products that code generation may skip are zero) are
  // checked, so that a kernel builder's wrong claim fails its interpreter tests.
  auto extentOf = [&](const char* name) -> int64_t {
    const AttrValue* v = op.op->attrs().find(name);
    const auto* extent = v ? std::get_if<int64_t>(v) : nullptr;
    return extent ? *extent : -1;
  };
  const int64_t kExtent = extentOf("k_extent"), nExtent = extentOf("n_extent");
  if (kExtent >= 0 || nExtent >= 0) {
    const int64_t firstSkippedK = kExtent >= 0 ? kExtent : K, firstSkippedN = nExtent >= 0 ? nExtent : N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k) {
        const double aValue = a.floats[m * K + k];
        // Every n past k_extent, else only the columns past n_extent.
        for (int64_t n = k >= firstSkippedK ? 0 : firstSkippedN; n < N; ++n)
          if (aValue * b.floats[k * N + n] != 0)
            return ctx.error(op, "k_extent / n_extent promise a zero product, but a[" + std::to_string(m) + ", " +
                                     std::to_string(k) + "]·b[" + std::to_string(k) + ", " + std::to_string(n) +
                                     "] is not 0");
      }
  }

  out.floats.assign(accIn.floats.begin(), accIn.floats.end());
  if (accKind == ScalarKind::F64) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t k = 0; k < K; ++k)
        for (int64_t n = 0; n < N; ++n)
          out.floats[m * N + n] = std::fma(a.floats[m * K + k], b.floats[k * N + n], out.floats[m * N + n]);
    return support::Status::ok();
  }
  const bool tf32 = dotTakesTf32(*op.op);
  const bool exactProducts =
      productExactInFloat(aType.scalarKind(), tf32) && productExactInFloat(bType.scalarKind(), tf32);
  // Scratch kept across calls: dots run in loops, and the buffers' sizes repeat.
  thread_local std::vector<float> aFloats, bFloats, row;
  toFloats(a.floats, tf32 && aType.scalarKind() == ScalarKind::F32, aFloats);
  toFloats(b.floats, tf32 && bType.scalarKind() == ScalarKind::F32, bFloats);
  floatDot(aFloats, bFloats, M, N, K, exactProducts, row, out.floats, accKind);
  return support::Status::ok();
}

}  // namespace attnjit::ir
