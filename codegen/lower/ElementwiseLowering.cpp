// Elementwise ops: arithmetic, comparisons, select, casts. Applied register by
// register (a scalar is a single register). f16/bf16 arithmetic runs in f32 and
// rounds back, as ir/Ops.def specifies.
#include <llvm/IR/IntrinsicsNVPTX.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "codegen/lower/AsyncCopy.h"
#include "codegen/lower/Fp8Encoding.h"
#include "codegen/lower/InlinePtx.h"
#include "codegen/lower/LoweringContext.h"

namespace attnjit::codegen {

using namespace ir;

namespace {

bool isHalfLike(ScalarKind k) { return k == ScalarKind::F16 || k == ScalarKind::BF16; }
bool isFp8(ScalarKind k) { return k == ScalarKind::F8E4M3 || k == ScalarKind::F8E5M2; }

// Applies `f` to the registers of every operand, producing the result's registers.
template <typename F>
void mapRegisters(LoweringContext& ctx, const Operation& op, F&& f) {
  std::vector<const Lowered*> ins;
  for (Value* v : op.operands()) ins.push_back(&ctx.get(v));
  Lowered out;
  out.layout = ins[0]->layout;
  const Type& resultType = op.result()->type();
  if (resultType.isTile()) out.layout = ctx.linearLayout(resultType, op);
  size_t n = ins[0]->regs.size();
  for (const Lowered* in : ins)
    if (in->regs.size() != n) {
      ctx.unsupported(op, "with operands in different layouts (layout assignment should have converted them)");
      ctx.set(op.result(), *ins[0]);
      return;
    }
  std::vector<llvm::Value*> args(ins.size());
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < ins.size(); ++i) args[i] = ins[i]->regs[r];
    out.regs.push_back(f(args));
  }
  ctx.set(op.result(), std::move(out));
}

llvm::Value* toF32(LoweringContext& ctx, llvm::Value* v) { return ctx.b.CreateFPExt(v, ctx.b.getFloatTy()); }

// x / y in f32 without the subroutine ptxas calls for div.rn.f32 and
// rcp.rn.f32 (their slow path for extreme exponents). The driver's JIT
// compiles PTX for cuLink as relocatable code, where any call serializes every
// warpgroup MMA of the kernel (ptxas C7509: each HGMMA waited for before the
// next issues). rcp.approx, one Newton step on the reciprocal, then the
// quotient corrected by its exact residual: within 1 ulp of the correctly
// rounded quotient while quotient and divisor are normal. Where the refined
// quotient is not finite (a zero, infinite or NaN operand, overflow), x times
// the approximate reciprocal gives IEEE's inf, 0 or NaN.
llvm::Value* divideWithoutCall(LoweringContext& ctx, llvm::Value* x, llvm::Value* y) {
  llvm::IRBuilder<>& b = ctx.b;
  llvm::Type* f32 = b.getFloatTy();
  auto fma = [&](llvm::Value* p, llvm::Value* q, llvm::Value* r) {
    return b.CreateIntrinsic(f32, llvm::Intrinsic::fma, {p, q, r});
  };
  llvm::Value* one = llvm::ConstantFP::get(f32, 1.0);
  llvm::Value* negY = b.CreateFNeg(y);
  llvm::Value* r0 = b.CreateIntrinsic(f32, llvm::Intrinsic::nvvm_rcp_approx_ftz_f, {y});
  llvm::Value* r1 = fma(fma(negY, r0, one), r0, r0);
  llvm::Value* q0 = b.CreateFMul(x, r1);
  llvm::Value* q1 = fma(fma(negY, q0, x), r1, q0);
  llvm::Value* finite = b.CreateFCmpOLT(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, q0),
                                        llvm::ConstantFP::getInfinity(f32));
  return b.CreateSelect(finite, q1, b.CreateFMul(x, r0));
}

// At most this many distinct factors per thread are compared with 1.0 for
// mul {skip_ones}; a tile with more (not a broadcast row) is multiplied plainly.
constexpr size_t kMaxSkipOnesFactors = 16;

// mul {skip_ones = 1} (ir/Ops.def): where every factor this thread holds is
// exactly 1.0 the products are the first operand itself, so a branch skips the
// multiplies. The online softmax's rescale of its accumulator is such a product:
// with a rarely moving reference maximum its factor is almost always 1, and the
// 128 multiplies per thread and tile of a prefill accumulator are a fifth of the
// loop's non-mma instructions. Returns false (nothing emitted) where it does not apply.
bool lowerMulSkippingOnes(LoweringContext& ctx, const Operation& op, bool widen, llvm::Type* elementType) {
  const Lowered& x = ctx.get(op.operand(0));
  const Lowered& y = ctx.get(op.operand(1));
  if (!op.result()->type().isTile() || x.regs.size() != y.regs.size()) return false;
  std::vector<llvm::Value*> factors;
  for (llvm::Value* factor : y.regs) {
    if (std::find(factors.begin(), factors.end(), factor) != factors.end()) continue;
    if (factors.size() == kMaxSkipOnesFactors) return false;
    factors.push_back(factor);
  }
  llvm::IRBuilder<>& b = ctx.b;
  llvm::Value* allOnes = nullptr;
  for (llvm::Value* factor : factors) {
    llvm::Value* one = b.CreateFCmpOEQ(factor, llvm::ConstantFP::get(factor->getType(), 1.0));
    allOnes = allOnes ? b.CreateAnd(allOnes, one) : one;
  }
  llvm::BasicBlock* from = b.GetInsertBlock();
  llvm::BasicBlock* multiply = llvm::BasicBlock::Create(ctx.llvm, "rescale", ctx.function);
  llvm::BasicBlock* merge = llvm::BasicBlock::Create(ctx.llvm, "rescale.end", ctx.function);
  b.CreateCondBr(allOnes, merge, multiply);
  b.SetInsertPoint(multiply);
  std::vector<llvm::Value*> products;
  for (size_t r = 0; r < x.regs.size(); ++r) {
    llvm::Value* product = widen ? b.CreateFMul(toF32(ctx, x.regs[r]), toF32(ctx, y.regs[r]))
                                 : b.CreateFMul(x.regs[r], y.regs[r]);
    products.push_back(widen ? b.CreateFPTrunc(product, elementType) : product);
  }
  b.CreateBr(merge);
  b.SetInsertPoint(merge);
  Lowered out;
  out.layout = ctx.linearLayout(op.result()->type(), op);
  for (size_t r = 0; r < x.regs.size(); ++r) {
    llvm::PHINode* phi = b.CreatePHI(x.regs[r]->getType(), 2);
    phi->addIncoming(x.regs[r], from);
    phi->addIncoming(products[r], multiply);
    out.regs.push_back(phi);
  }
  ctx.set(op.result(), std::move(out));
  return true;
}

}  // namespace

void lowerBinary(LoweringContext& ctx, const Operation& op) {
  ScalarKind k = op.operand(0)->type().scalarKind();
  llvm::IRBuilder<>& b = ctx.b;
  if (isFp8(k) || k == ScalarKind::I4) {
    ctx.unsupported(op, std::string("arithmetic on ") + scalarName(k) + " (cast to f32 or i8 first)");
    mapRegisters(ctx, op, [](auto& a) { return a[0]; });
    return;
  }
  Opcode code = op.opcode();
  if (isFloat(k) && code == Opcode::Mul && attributeIsOn(op.attrs(), "skip_ones") &&
      lowerMulSkippingOnes(ctx, op, isHalfLike(k), ctx.elementType(Type::scalar(k))))
    return;
  if (isFloat(k)) {
    llvm::Type* ty = ctx.elementType(Type::scalar(k));
    bool widen = isHalfLike(k);
    const bool approx = attributeIsOn(op.attrs(), "approx");
    mapRegisters(ctx, op, [&](std::vector<llvm::Value*>& a) -> llvm::Value* {
      llvm::Value* x = widen ? toF32(ctx, a[0]) : a[0];
      llvm::Value* y = widen ? toF32(ctx, a[1]) : a[1];
      llvm::Value* r = nullptr;
      switch (code) {
        case Opcode::Add: r = b.CreateFAdd(x, y); break;
        case Opcode::Sub: r = b.CreateFSub(x, y); break;
        case Opcode::Mul: r = b.CreateFMul(x, y); break;
        case Opcode::Div:
          // {approx = 1} on f32: div.full.f32, 2 ulp (ir/Ops.def); else correctly
          // rounded, or within 1 ulp where warpgroup MMAs must not meet a call.
          if (x->getType()->isFloatTy() && approx)
            r = b.CreateIntrinsic(llvm::Intrinsic::nvvm_div_full, {x, y});
          else if (x->getType()->isFloatTy() && ctx.warpgroupOperands)
            r = divideWithoutCall(ctx, x, y);
          else
            r = b.CreateFDiv(x, y);
          break;
        case Opcode::Rem: r = b.CreateFRem(x, y); break;
        case Opcode::Min: r = b.CreateBinaryIntrinsic(llvm::Intrinsic::minimum, x, y); break;
        case Opcode::Max: r = b.CreateBinaryIntrinsic(llvm::Intrinsic::maximum, x, y); break;
        default:
          ctx.unsupported(op, "on floats");
          return a[0];
      }
      return widen ? b.CreateFPTrunc(r, ty) : r;
    });
    return;
  }
  unsigned bits = static_cast<unsigned>(valueBits(k));
  mapRegisters(ctx, op, [&](std::vector<llvm::Value*>& a) -> llvm::Value* {
    llvm::Value *x = a[0], *y = a[1];
    switch (code) {
      case Opcode::Add: return b.CreateAdd(x, y);
      case Opcode::Sub: return b.CreateSub(x, y);
      case Opcode::Mul: return b.CreateMul(x, y);
      case Opcode::Div: return b.CreateSDiv(x, y);
      case Opcode::Rem: return b.CreateSRem(x, y);
      case Opcode::Min: return b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, x, y);
      case Opcode::Max: return b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, x, y);
      case Opcode::And: return b.CreateAnd(x, y);
      case Opcode::Or: return b.CreateOr(x, y);
      case Opcode::Xor: return b.CreateXor(x, y);
      case Opcode::Shl: {
        // Amounts outside [0, bits) give 0 (LLVM's shl would be poison).
        llvm::Value* inRange = b.CreateICmpULT(y, llvm::ConstantInt::get(y->getType(), bits));
        return b.CreateSelect(inRange, b.CreateShl(x, y), llvm::ConstantInt::get(x->getType(), 0));
      }
      case Opcode::Shr: {
        llvm::Value* max = llvm::ConstantInt::get(y->getType(), bits - 1);
        llvm::Value* inRange = b.CreateICmpULT(y, llvm::ConstantInt::get(y->getType(), bits));
        llvm::Value* negative = b.CreateICmpSLT(y, llvm::ConstantInt::get(y->getType(), 0));
        llvm::Value* amount = b.CreateSelect(b.CreateAnd(inRange, b.CreateNot(negative)), y, max);
        return b.CreateAShr(x, amount);
      }
      default:
        return x;
    }
  });
}

void lowerUnary(LoweringContext& ctx, const Operation& op) {
  ScalarKind k = op.operand(0)->type().scalarKind();
  llvm::IRBuilder<>& b = ctx.b;
  Opcode code = op.opcode();
  if (isFp8(k) || k == ScalarKind::I4) {
    ctx.unsupported(op, std::string("on ") + scalarName(k) + " (cast first)");
    mapRegisters(ctx, op, [](auto& a) { return a[0]; });
    return;
  }
  if (!isFloat(k)) {
    mapRegisters(ctx, op, [&](std::vector<llvm::Value*>& a) -> llvm::Value* {
      if (code == Opcode::Neg) return b.CreateNeg(a[0]);
      return b.CreateBinaryIntrinsic(llvm::Intrinsic::abs, a[0], b.getFalse());
    });
    return;
  }
  if (k == ScalarKind::F64 && code != Opcode::Neg && code != Opcode::Abs && code != Opcode::Sqrt) {
    ctx.unsupported(op, "on f64 (only neg, abs and sqrt)");
    mapRegisters(ctx, op, [](auto& a) { return a[0]; });
    return;
  }
  llvm::Type* ty = ctx.elementType(Type::scalar(k));
  bool widen = isHalfLike(k);
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2 = 0.6931471805599453;
  mapRegisters(ctx, op, [&](std::vector<llvm::Value*>& a) -> llvm::Value* {
    llvm::Value* x = widen ? toF32(ctx, a[0]) : a[0];
    llvm::Type* fty = x->getType();
    llvm::Value* r = nullptr;
    switch (code) {
      case Opcode::Neg: r = b.CreateFNeg(x); break;
      case Opcode::Abs: r = b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x); break;
      // ex2.approx.ftz: one MUFU.EX2. Without .ftz (llvm.exp2), ptxas wraps each
      // in a range test, two multiplies and a select to produce subnormal
      // results: in the prefill loop that would be a fifth of the non-mma instructions.
      case Opcode::Exp2: r = b.CreateIntrinsic(fty, llvm::Intrinsic::nvvm_ex2_approx_ftz, {x}); break;
      // NVPTX has no lowering for llvm.log2 (LLVM aborts looking for a libcall):
      // lg2.approx.f32, like ex2.approx for exp2 (max error 2^-22 relative,
      // absolute near 1).
      case Opcode::Log2: r = b.CreateIntrinsic(fty, llvm::Intrinsic::nvvm_lg2_approx_f, {x}); break;
      case Opcode::Exp:
        r = b.CreateIntrinsic(fty, llvm::Intrinsic::nvvm_ex2_approx_ftz,
                              {b.CreateFMul(x, llvm::ConstantFP::get(fty, kLog2e))});
        break;
      case Opcode::Log:
        r = b.CreateFMul(b.CreateIntrinsic(fty, llvm::Intrinsic::nvvm_lg2_approx_f, {x}),
                         llvm::ConstantFP::get(fty, kLn2));
        break;
      // sqrt.approx.f32 (one MUFU.SQRT, max error 2^-23 relative), as the other
      // transcendentals and Triton's tl.sqrt: llvm.sqrt's sqrt.rn.f32 is a
      // refined reciprocal root with a called slow path, which in sqrt-ALiBi's
      // prefill loop (one per score) doubled ptxas' spills. f64 stays exact.
      case Opcode::Sqrt:
        r = fty->isFloatTy() ? b.CreateIntrinsic(fty, llvm::Intrinsic::nvvm_sqrt_approx_f, {x})
                             : b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
        break;
      case Opcode::Rsqrt:
        r = b.CreateIntrinsic(fty, llvm::Intrinsic::nvvm_rsqrt_approx_f, {x});
        break;
      case Opcode::Tanh:
        // NVVM has no tanh intrinsic: tanh.approx.f32 (sm_75+) through inline PTX.
        r = InlinePtx(ctx.b, "tanh.approx.f32 $0, $1;").output("f", fty).input("f", x).emit();
        break;
      default:
        r = x;
    }
    return widen ? b.CreateFPTrunc(r, ty) : r;
  });
}

void lowerCompare(LoweringContext& ctx, const Operation& op) {
  ScalarKind k = op.operand(0)->type().scalarKind();
  CmpPredicate pred{};
  parseCmpPredicate(op.attrs().getString("pred"), pred);
  llvm::IRBuilder<>& b = ctx.b;
  if (isFp8(k)) {
    ctx.unsupported(op, "on fp8 (cast to f32 first)");
    mapRegisters(ctx, op, [&](auto&) { return b.getFalse(); });
    return;
  }
  bool isF = isFloat(k) && !op.operand(0)->type().hasPointerElements();
  using P = llvm::CmpInst::Predicate;
  static constexpr P kFloat[] = {P::FCMP_OEQ, P::FCMP_UNE, P::FCMP_OLT, P::FCMP_OLE, P::FCMP_OGT, P::FCMP_OGE};
  static constexpr P kInt[] = {P::ICMP_EQ, P::ICMP_NE, P::ICMP_SLT, P::ICMP_SLE, P::ICMP_SGT, P::ICMP_SGE};
  P p = isF ? kFloat[static_cast<int>(pred)] : kInt[static_cast<int>(pred)];
  mapRegisters(ctx, op, [&](std::vector<llvm::Value*>& a) -> llvm::Value* {
    if (isF) return b.CreateFCmp(p, a[0], a[1]);
    return b.CreateICmp(p, a[0], a[1]);
  });
}

void lowerSelect(LoweringContext& ctx, const Operation& op) {
  mapRegisters(ctx, op, [&](std::vector<llvm::Value*>& a) { return ctx.b.CreateSelect(a[0], a[1], a[2]); });
}

llvm::Value* castElement(LoweringContext& ctx, const Operation& op, llvm::Value* v, ScalarKind from,
                         ScalarKind to) {
  llvm::IRBuilder<>& b = ctx.b;
  if (from == to) return v;
  llvm::Type* toTy = ctx.elementType(Type::scalar(to));
  if (from == ScalarKind::I4 || to == ScalarKind::I4) {
    // i4 lives sign-extended in an i8 register.
    if (to == ScalarKind::I4) {
      llvm::Value* asI8 = castElement(ctx, op, v, from, ScalarKind::I8);
      return b.CreateAShr(b.CreateShl(asI8, 4), 4);
    }
    return castElement(ctx, op, v, ScalarKind::I8, to);
  }
  if (isFp8(from) && !ctx.target.hasFp8Convert) {
    // Before sm_89 there is no fp8 cvt: decode through f16 bit patterns, exactly.
    // e5m2 is the top byte of an f16. e4m3 (bias 7) shifted into f16's fields
    // ((bits & 0x7F) << 7) reads as its value times 2^-8 (bias 15), subnormals
    // included; one exact f16 multiply by 2^8 restores it. (The e4m3 NaN pattern
    // S.1111.111 decodes as ±480 here; attnjit's caches never store NaN.)
    llvm::Value* bits16 = b.CreateZExt(v, b.getInt16Ty());
    llvm::Value* half = nullptr;
    if (from == ScalarKind::F8E5M2) {
      half = b.CreateBitCast(b.CreateShl(bits16, 8), b.getHalfTy());
    } else {
      llvm::Value* magnitude = b.CreateShl(b.CreateAnd(bits16, 0x7F), 7);
      llvm::Value* sign = b.CreateShl(b.CreateAnd(bits16, 0x80), 8);
      llvm::Value* scaled = b.CreateBitCast(b.CreateOr(magnitude, sign), b.getHalfTy());
      half = b.CreateFMul(scaled, llvm::ConstantFP::get(b.getHalfTy(), 256.0));
    }
    return castElement(ctx, op, half, ScalarKind::F16, to);
  }
  if (isFp8(to) && !ctx.target.hasFp8Convert) {
    // Before sm_89 there is no fp8 cvt: the same rounding in integer and f32
    // arithmetic (codegen/lower/Fp8Encoding.h).
    return emitSoftwareFp8Encoding(b, castElement(ctx, op, v, from, ScalarKind::F32), to);
  }
  if (isFp8(from) || isFp8(to)) {
    if (isFp8(from)) {
      // e4m3x2/e5m2x2 → f16x2: convert the value in the low byte.
      auto id = from == ScalarKind::F8E4M3 ? llvm::Intrinsic::nvvm_e4m3x2_to_f16x2_rn
                                           : llvm::Intrinsic::nvvm_e5m2x2_to_f16x2_rn;
      llvm::Value* pair = b.CreateIntrinsic(llvm::FixedVectorType::get(b.getHalfTy(), 2), id,
                                            {b.CreateZExt(v, b.getInt16Ty())});
      llvm::Value* half = b.CreateExtractElement(pair, uint64_t{0});
      return castElement(ctx, op, half, ScalarKind::F16, to);
    }
    // f32 → fp8 with satfinite (PTX cvt.rn.satfinite.e4m3x2.f32).
    llvm::Value* f = castElement(ctx, op, v, from, ScalarKind::F32);
    auto id = to == ScalarKind::F8E4M3 ? llvm::Intrinsic::nvvm_ff_to_e4m3x2_rn : llvm::Intrinsic::nvvm_ff_to_e5m2x2_rn;
    llvm::Value* pair = b.CreateIntrinsic(b.getInt16Ty(), id, {llvm::ConstantFP::get(b.getFloatTy(), 0.0), f});
    return b.CreateTrunc(pair, b.getInt8Ty());
  }
  bool fromF = isFloat(from), toF = isFloat(to);
  if (fromF && toF) {
    if (isHalfLike(from) && isHalfLike(to)) return b.CreateFPTrunc(b.CreateFPExt(v, b.getFloatTy()), toTy);
    if (storageBits(from) < storageBits(to)) return b.CreateFPExt(v, toTy);
    return b.CreateFPTrunc(v, toTy);
  }
  if (!fromF && toF) {
    if (from == ScalarKind::I1) return b.CreateUIToFP(v, toTy);
    if (isHalfLike(to)) return b.CreateFPTrunc(b.CreateSIToFP(v, b.getFloatTy()), toTy);
    return b.CreateSIToFP(v, toTy);
  }
  if (fromF && !toF) {
    if (to == ScalarKind::I1) return b.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
    llvm::Value* wide = isHalfLike(from) ? b.CreateFPExt(v, b.getFloatTy()) : v;
    if (!wide->getType()->isFloatTy()) return b.CreateIntrinsic(toTy, llvm::Intrinsic::fptosi_sat, {wide}, {}, "");
    // PTX's cvt.rzi.s32.f32 / .s64.f32 already truncate, saturate and turn NaN
    // into 0, the cast's semantics; llvm.fptosi.sat would add two clamps and a
    // NaN select per element around it. Narrower integers clamp the i32 result.
    if (to == ScalarKind::I64) return b.CreateIntrinsic(b.getInt64Ty(), llvm::Intrinsic::nvvm_f2ll_rz, {wide});
    llvm::Value* word = b.CreateIntrinsic(b.getInt32Ty(), llvm::Intrinsic::nvvm_f2i_rz, {wide});
    const unsigned bits = toTy->getIntegerBitWidth();
    if (bits >= 32) return word;
    word =
        b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, word,
                                b.getInt32(static_cast<uint32_t>(llvm::APInt::getSignedMinValue(bits).getSExtValue())));
    word =
        b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, word,
                                b.getInt32(static_cast<uint32_t>(llvm::APInt::getSignedMaxValue(bits).getSExtValue())));
    return b.CreateTrunc(word, toTy);
  }
  if (to == ScalarKind::I1) return b.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
  if (from == ScalarKind::I1) return b.CreateZExt(v, toTy);
  return b.CreateSExtOrTrunc(v, toTy);
}

namespace {

// The 32-bit word that holds the bytes of registers `lo` and `hi` side by side,
// and the position of `lo`'s byte in it (`hi`'s is the next). Registers taken
// from one loaded vector read the vector reinterpreted as words, with no byte
// extraction; others are assembled at positions 0 and 1.
std::pair<llvm::Value*, unsigned> bytePairWord(llvm::IRBuilder<>& b, llvm::Value* lo, llvm::Value* hi) {
  auto* first = llvm::dyn_cast<llvm::ExtractElementInst>(lo);
  auto* second = llvm::dyn_cast<llvm::ExtractElementInst>(hi);
  if (first && second && first->getVectorOperand() == second->getVectorOperand()) {
    auto* vectorTy = llvm::cast<llvm::FixedVectorType>(first->getVectorOperandType());
    auto* firstIndex = llvm::dyn_cast<llvm::ConstantInt>(first->getIndexOperand());
    auto* secondIndex = llvm::dyn_cast<llvm::ConstantInt>(second->getIndexOperand());
    const unsigned n = vectorTy->getNumElements();
    if (firstIndex && secondIndex && vectorTy->getElementType()->isIntegerTy(8) && n % 4 == 0) {
      const uint64_t i = firstIndex->getZExtValue();
      if (i % 2 == 0 && secondIndex->getZExtValue() == i + 1) {
        llvm::Value* words =
            b.CreateBitCast(first->getVectorOperand(), llvm::FixedVectorType::get(b.getInt32Ty(), n / 4));
        return {b.CreateExtractElement(words, i / 4), static_cast<unsigned>(i % 4)};
      }
    }
  }
  return {b.CreateOr(b.CreateZExt(lo, b.getInt32Ty()), b.CreateShl(b.CreateZExt(hi, b.getInt32Ty()), 8)), 0u};
}

// PTX prmt: result byte i is byte selector[i] of (b:a), 0-3 from `a`, 4-7 from `b`.
llvm::Value* permuteBytes(llvm::IRBuilder<>& b, llvm::Value* a, llvm::Value* bWord, const unsigned (&selector)[4]) {
  const uint32_t code = selector[0] | selector[1] << 4 | selector[2] << 8 | selector[3] << 12;
  return b.CreateIntrinsic(b.getInt32Ty(), llvm::Intrinsic::nvvm_prmt, {a, bWord, b.getInt32(code)});
}

}  // namespace

// fp8 → f16/bf16 for registers 2i and 2i+1 together: the two bytes form one
// 16-bit word and the result is one packed register, which mma operands and
// vector stores take as it is. Per element this is 2-3 instructions instead of
// 5-8 (a decode kernel converts every cache byte it reads, and the per-element
// form made fp8 decode issue-bound).
//   sm_89+: cvt.rn.f16x2.e4m3x2/e5m2x2; bf16 goes on through f32 (two exact
//           cvt.f32.f16, one cvt.rn.bf16x2.f32): NaN and inf survive.
//   older:  one prmt puts each byte in the high byte of its 16-bit lane; the
//           fp8 fields move into the 16-bit type's (the sign stays the top bit,
//           the magnitude shifts right until the mantissa tops the 16-bit one),
//           which reads as the value times 2^-k; one exact packed multiply by
//           2^k restores it. e4m3's NaN pattern decodes as ±480, as in castElement.
std::pair<llvm::Value*, llvm::Value*> castFp8Pair(LoweringContext& ctx, llvm::Value* lo, llvm::Value* hi,
                                                  ScalarKind from, ScalarKind to) {
  llvm::IRBuilder<>& b = ctx.b;
  const bool e5m2 = from == ScalarKind::F8E5M2;
  llvm::Type* halfTy = to == ScalarKind::F16 ? b.getHalfTy() : b.getBFloatTy();
  auto* pairTy = llvm::FixedVectorType::get(halfTy, 2);
  auto [word, position] = bytePairWord(b, lo, hi);
  llvm::Value* pair = nullptr;
  if (ctx.target.hasFp8Convert) {
    llvm::Value* bytes = b.CreateTrunc(position == 0 ? word : b.CreateLShr(word, 8 * position), b.getInt16Ty());
    auto id = e5m2 ? llvm::Intrinsic::nvvm_e5m2x2_to_f16x2_rn : llvm::Intrinsic::nvvm_e4m3x2_to_f16x2_rn;
    pair = b.CreateIntrinsic(llvm::FixedVectorType::get(b.getHalfTy(), 2), id, {bytes});
    if (to == ScalarKind::BF16)
      pair = b.CreateFPTrunc(b.CreateFPExt(pair, llvm::FixedVectorType::get(b.getFloatTy(), 2)), pairTy);
  } else {
    // Lanes [0, lo] and [0, hi]: selector 4 reads the zero word's byte 0.
    llvm::Value* y = permuteBytes(b, word, b.getInt32(0), {4, position, 4, position + 1});
    int shift = 0, scaleExponent = 0;
    if (to == ScalarKind::F16) {
      shift = e5m2 ? 0 : 1;
      scaleExponent = e5m2 ? 0 : 8;
    } else {
      shift = e5m2 ? 3 : 4;
      scaleExponent = e5m2 ? 112 : 120;
    }
    llvm::Value* bits = y;
    if (shift > 0) {
      const uint32_t magnitudeMask = (0x7F00u >> shift) * 0x10001u;
      bits = b.CreateOr(b.CreateAnd(y, b.getInt32(0x80008000u)),
                        b.CreateAnd(b.CreateLShr(y, static_cast<uint64_t>(shift)), b.getInt32(magnitudeMask)));
    }
    pair = b.CreateBitCast(bits, pairTy);
    if (scaleExponent > 0)
      pair = b.CreateFMul(pair, llvm::ConstantFP::get(pairTy, std::ldexp(1.0, scaleExponent)));
  }
  return {b.CreateExtractElement(pair, uint64_t{0}), b.CreateExtractElement(pair, uint64_t{1})};
}

namespace {

// int8 → f16/bf16 for registers 2i and 2i+1 together, through the magic-number
// trick (exact for every int8 value, any target): the byte with its top bit
// flipped is x + 128 in [0, 255]; placed in the mantissa of 1024 (f16) or 2^23
// (f32), one subtraction of 1024 + 128 (2^23 + 128) leaves x. f16 does both
// lanes in one packed word (prmt, xor, sub.f16x2); bf16 goes through two f32
// (prmt and sub each, one xor per four bytes) and one cvt.rn.bf16x2.f32. The
// per-element path (byte extraction, sign extension, cvt.rn.f32.s32, a cvt per
// element) took about twice the instructions.
std::pair<llvm::Value*, llvm::Value*> castInt8Pair(LoweringContext& ctx, llvm::Value* lo, llvm::Value* hi,
                                                   ScalarKind to) {
  llvm::IRBuilder<>& b = ctx.b;
  auto [word, position] = bytePairWord(b, lo, hi);
  llvm::Value* pair = nullptr;
  if (to == ScalarKind::F16) {
    auto* pairTy = llvm::FixedVectorType::get(b.getHalfTy(), 2);
    llvm::Value* lanes = permuteBytes(b, word, b.getInt32(0), {position, 4, position + 1, 4});
    // 0x6400 is 1024.0 in f16; its bits are clear in the byte, so xor sets them too.
    llvm::Value* biased = b.CreateBitCast(b.CreateXor(lanes, b.getInt32(0x64806480u)), pairTy);
    pair = b.CreateFSub(biased, llvm::ConstantFP::get(pairTy, 1024.0 + 128.0));
  } else {
    // One xor flips the sign bits of all four bytes (the two lanes of a word
    // share it after CSE); each prmt then sets the byte under 0x4B000000, the
    // bits of 2^23 + x + 128.
    llvm::Value* flipped = b.CreateXor(word, b.getInt32(0x80808080u));
    auto asFloat = [&](unsigned byte) {
      llvm::Value* bits = permuteBytes(b, flipped, b.getInt32(0x4B000000), {byte, 4, 5, 7});
      return b.CreateFSub(b.CreateBitCast(bits, b.getFloatTy()),
                          llvm::ConstantFP::get(b.getFloatTy(), 8388608.0 + 128.0));
    };
    // cvt.rn.bf16x2.f32 d, a, b puts a in the upper lane: lane 1, then lane 0.
    pair = b.CreateIntrinsic(llvm::FixedVectorType::get(b.getBFloatTy(), 2), llvm::Intrinsic::nvvm_ff2bf16x2_rn,
                             {asFloat(position + 1), asFloat(position)});
  }
  return {b.CreateExtractElement(pair, uint64_t{0}), b.CreateExtractElement(pair, uint64_t{1})};
}

}  // namespace

void lowerCast(LoweringContext& ctx, const Operation& op) {
  if (lowerCastOnCopyView(ctx, op)) return;  // the producer warps stored its result (AsyncCopy.h)
  ScalarKind from = op.operand(0)->type().scalarKind();
  ScalarKind to = op.result()->type().scalarKind();
  const Lowered& in = ctx.get(op.operand(0));
  const bool packedFp8 = isFp8(from) && isHalfLike(to), packedInt8 = from == ScalarKind::I8 && isHalfLike(to);
  if ((packedFp8 || packedInt8) && op.result()->type().isTile() && in.regs.size() % 2 == 0) {
    Lowered out{{}, ctx.linearLayout(op.result()->type(), op)};
    for (size_t r = 0; r < in.regs.size(); r += 2) {
      auto [lo, hi] = packedFp8 ? castFp8Pair(ctx, in.regs[r], in.regs[r + 1], from, to)
                                : castInt8Pair(ctx, in.regs[r], in.regs[r + 1], to);
      out.regs.push_back(lo);
      out.regs.push_back(hi);
    }
    ctx.set(op.result(), std::move(out));
    return;
  }
  mapRegisters(ctx, op, [&](std::vector<llvm::Value*>& a) { return castElement(ctx, op, a[0], from, to); });
}

// unpack_nibbles (ir/Ops.def) through magic numbers whose mantissa counts units
// in its lowest bits: 2^7 in bf16 (0x4300), 2^10 in f16 (0x6400), 2^23 in f32
// (0x4B000000). A nibble n OR'ed into them reads as magic + n, the zero point z
// the same way, and one subtraction leaves n - z exactly. For 16-bit results two
// registers share one word: a prmt puts their bytes into the two lanes, a shift
// brings the high nibbles down, one lop3 masks, flips and sets the magic, one
// fma.rn.{bf16x2,f16x2} (x·1 - (magic + z), exact; sm_80 has no packed bf16
// subtraction) subtracts — about 3 instructions per pair where the f32 path
// takes 8 (extraction, OR and subtraction per element, a cvt per pair).
void lowerUnpackNibbles(LoweringContext& ctx, const Operation& op) {
  llvm::IRBuilder<>& b = ctx.b;
  const ScalarKind to = op.result()->type().scalarKind();
  const uint64_t shift = op.attrs().getInt("high") != 0 ? 4 : 0;
  const uint32_t flip = op.attrs().has("flip") ? static_cast<uint32_t>(op.attrs().getInt("flip")) : 0u;
  const Lowered& bytes = ctx.get(op.operand(0));
  const Lowered& zeroPoints = ctx.get(op.operand(1));
  if (isHalfLike(to) && op.result()->type().isTile() && bytes.regs.size() % 2 == 0 &&
      zeroPoints.regs.size() == bytes.regs.size()) {
    const uint32_t magic = (to == ScalarKind::BF16 ? 0x4300u : 0x6400u) * 0x10001u;
    auto* pairTy = llvm::FixedVectorType::get(to == ScalarKind::BF16 ? b.getBFloatTy() : b.getHalfTy(), 2);
    auto nibble = [&](llvm::Value* z) { return b.CreateAnd(z, b.getInt32(0xF)); };
    Lowered out{{}, ctx.linearLayout(op.result()->type(), op)};
    for (size_t r = 0; r < bytes.regs.size(); r += 2) {
      auto [word, position] = bytePairWord(b, bytes.regs[r], bytes.regs[r + 1]);
      llvm::Value* lanes = permuteBytes(b, word, b.getInt32(0), {position, 4, position + 1, 4});
      if (shift != 0) lanes = b.CreateLShr(lanes, shift);
      llvm::Value* biased =
          b.CreateXor(b.CreateAnd(lanes, b.getInt32(0x000F000Fu)), b.getInt32(magic | flip * 0x10001u));
      llvm::Value* z0 = zeroPoints.regs[r];
      llvm::Value* z1 = zeroPoints.regs[r + 1];
      // A row's zero point is one register for all of its elements: one multiply.
      llvm::Value* zeroLanes = z0 == z1 ? b.CreateMul(nibble(z0), b.getInt32(0x10001u))
                                        : b.CreateOr(nibble(z0), b.CreateShl(nibble(z1), 16));
      llvm::Value* negatedOffset = b.CreateOr(zeroLanes, b.getInt32(magic | 0x80008000u));
      llvm::Value* pair = b.CreateIntrinsic(pairTy, llvm::Intrinsic::fma,
                                            {b.CreateBitCast(biased, pairTy), llvm::ConstantFP::get(pairTy, 1.0),
                                             b.CreateBitCast(negatedOffset, pairTy)});
      out.regs.push_back(b.CreateExtractElement(pair, uint64_t{0}));
      out.regs.push_back(b.CreateExtractElement(pair, uint64_t{1}));
    }
    ctx.set(op.result(), std::move(out));
    return;
  }
  llvm::Type* toTy = ctx.elementType(op.result()->type().elementType());
  mapRegisters(ctx, op, [&](std::vector<llvm::Value*>& a) -> llvm::Value* {
    llvm::Value* byte = b.CreateZExt(a[0], b.getInt32Ty());
    if (shift != 0) byte = b.CreateLShr(byte, shift);
    llvm::Value* biased = b.CreateXor(b.CreateAnd(byte, b.getInt32(0xF)), b.getInt32(0x4B000000u | flip));
    llvm::Value* offset = b.CreateOr(b.CreateAnd(a[1], b.getInt32(0xF)), b.getInt32(0x4B000000u));
    llvm::Value* value =
        b.CreateFSub(b.CreateBitCast(biased, b.getFloatTy()), b.CreateBitCast(offset, b.getFloatTy()));
    return to == ScalarKind::F32 ? value : b.CreateFPTrunc(value, toTy);
  });
}

void lowerBitcast(LoweringContext& ctx, const Operation& op) {
  llvm::Type* to = ctx.elementType(op.result()->type().elementType());
  mapRegisters(ctx, op, [&](std::vector<llvm::Value*>& a) { return ctx.b.CreateBitCast(a[0], to); });
}

}  // namespace attnjit::codegen
