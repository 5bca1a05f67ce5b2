// The tile IR verifier: valid kernels pass; each malformed op, kernel or module is
// rejected with a located message that names the op and the offending types.
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "ir/Builder.h"
#include "ir/Verifier.h"

namespace support = attnjit::support;

using namespace attnjit::ir;

namespace {

Type scalar(ScalarKind k) { return Type::scalar(k); }
Type ptr(ScalarKind k) { return Type::pointer(k); }
Type tile(std::vector<int64_t> shape, ScalarKind k) { return Type::tile(std::move(shape), Type::scalar(k)); }

constexpr ScalarKind kI1 = ScalarKind::I1;
constexpr ScalarKind kI4 = ScalarKind::I4;
constexpr ScalarKind kI8 = ScalarKind::I8;
constexpr ScalarKind kI16 = ScalarKind::I16;
constexpr ScalarKind kI32 = ScalarKind::I32;
constexpr ScalarKind kI64 = ScalarKind::I64;
constexpr ScalarKind kF16 = ScalarKind::F16;
constexpr ScalarKind kBF16 = ScalarKind::BF16;
constexpr ScalarKind kF32 = ScalarKind::F32;

// The message of a failed status without its location, or "<ok>".
std::string errorOf(const support::Status& s) { return s.isOk() ? "<ok>" : s.diagnostic().message; }

Attributes attrs(std::vector<std::pair<std::string, AttrValue>> entries) {
  Attributes a;
  for (auto& [k, v] : entries) a.set(k, std::move(v));
  return a;
}

LayoutRef blockedLayout() {
  auto l = std::make_shared<Layout>();
  l->kind = LayoutKind::Blocked;
  l->sizePerThread = {1};
  l->threadsPerWarp = {32};
  l->warpsPerCta = {4};
  l->order = {0};
  return l;
}

// A kernel k(x: ptr<global, f32>, n: i32) under construction.
struct Fixture {
  Kernel kernel{"k"};
  Builder b{kernel};
  Value* x = kernel.addParameter(ptr(kF32), "x");
  Value* n = kernel.addParameter(scalar(kI32), "n");

  Value* f32Tile(std::vector<int64_t> shape, double v = 1.0) { return b.constFloat(v, tile(std::move(shape), kF32)); }
  std::string error() const { return errorOf(b.status()); }
};

}  // namespace

// ---------------------------------------------------------------------------
// Valid IR

TEST_CASE("verifier accepts a kernel using every op family", "[verifier]") {
  Kernel kernel("attention_like");
  kernel.attrs().set("num_warps", int64_t{8});
  kernel.constexprs().push_back({"BLOCK", int64_t{16}});
  kernel.constexprs().push_back({"SCALE", 0.125});
  Value* q = kernel.addParameter(ptr(kF16), "q", attrs({{"align", int64_t{16}}}));
  Value* out = kernel.addParameter(ptr(kF32), "out");
  Value* n = kernel.addParameter(scalar(kI32), "n");
  Value* eps = kernel.addParameter(scalar(kF32), "eps");
  Builder b(kernel);

  Value* pid = b.programId(0, "pid");
  Value* block = b.constexprValue("BLOCK", kI32, "block");
  Value* scale = b.constexprValue("SCALE", kF32, "scale");
  Value* rows = b.add(b.splat(b.mul(pid, block), {16}), b.arange(0, 16), "rows");
  Value* inBounds = b.cmp(CmpPredicate::Lt, rows, b.splat(n, {16}), "in_bounds");
  Value* qPtrs = b.addPtr(b.splat(q, {16}), rows);
  Value* qRow = b.load(qPtrs, inBounds, b.constFloat(0.0, tile({16}, kF16)), "q_row");
  Value* qOnlyMasked = b.load(qPtrs, inBounds);  // mask without other
  Value* qCol = b.expandDims(qRow, 1);
  Value* a = b.broadcast(qCol, {16, 16}, "a");
  Value* bT = b.transpose(a, {1, 0}, "b");
  Value* s = b.dot(a, bT, b.constFloat(0.0, tile({16, 16}, kF32)), false, "s");
  Value* s32 = b.dot(b.cast(a, kF32), b.cast(bT, kF32), s, /*tf32=*/true);
  Value* rowMax = b.reduce(Opcode::ReduceMax, s32, 1, "row_max");
  Value* total = b.reduce(Opcode::ReduceSum, rowMax, 0, "total");  // rank 1 -> scalar
  Value* flat = b.reshape(s, {256});
  Value* laidOut = b.convertLayout(rowMax, blockedLayout());
  (void)flat;
  (void)laidOut;

  auto loop = b.beginFor(b.i32(0), n, b.i32(1), {rowMax, total}, "j", {"m", "t"});
  Value* scaled = b.mul(loop.iterArgs[0], b.splat(scale, {16}));
  Value* positive = b.cmp(CmpPredicate::Gt, scaled, b.constFloat(0.0, tile({16}, kF32)));
  Value* picked = b.select(positive, b.unary(Opcode::Exp2, scaled), b.unary(Opcode::Neg, scaled));
  Value* t = b.add(loop.iterArgs[1], eps);
  std::vector<Value*> loopOut = b.endFor({picked, t}, {"m_final", "t_final"});

  b.beginIf(b.cmp(CmpPredicate::Gt, n, b.i32(0)), {tile({16}, kF32)});
  Value* thenValue = b.unary(Opcode::Sqrt, loopOut[0]);
  b.beginElse({thenValue});
  std::vector<Value*> chosen = b.endIf({loopOut[0]});

  Value* bits = b.bitcast(b.cast(chosen[0], kF16), kI16);
  Value* both = b.andOp(inBounds, b.cmp(CmpPredicate::Ne, bits, b.constInt(0, tile({16}, kI16))));
  Value* outPtrs = b.addPtr(b.splat(out, {16}), rows);
  b.store(outPtrs, b.select(both, chosen[0], b.cast(qOnlyMasked, kF32)), both);
  b.store(out, loopOut[1]);

  REQUIRE(errorOf(b.finish()) == "<ok>");
  CHECK(errorOf(verifyKernel(kernel)) == "<ok>");
}

TEST_CASE("verifier accepts edge cases that are valid", "[verifier]") {
  Fixture f;
  Builder& b = f.b;
  // Integers may be written signed or unsigned; floats take integer literals.
  b.constInt(255, scalar(kI8));
  b.constInt(-128, scalar(kI8));
  b.constInt(1, scalar(kI1));
  b.constInt(2, tile({4}, kF32));
  // f16 accumulation with f16 operands.
  Value* h = b.constFloat(1.0, tile({16, 16}, kF16));
  b.create(Opcode::Dot, {h, h, h}, {tile({16, 16}, kF16)}, attrs({{"acc", std::string("f16")}}));
  // input_precision = ieee is allowed on f32 operands.
  Value* s = f.f32Tile({16, 16});
  b.create(Opcode::Dot, {s, s, s}, {s->type()},
           attrs({{"acc", std::string("f32")}, {"input_precision", std::string("ieee")}}));
  // Bitwise ops on i1, a broadcast that keeps an extent, a 3-D tile.
  Value* m = b.constInt(1, tile({4, 1}, kI1));
  b.binary(Opcode::Xor, m, m);
  b.broadcast(m, {4, 8});
  b.expandDims(b.broadcast(m, {4, 8}), 0);
  // Elementwise operands that agree on their layout.
  Value* laidOut = b.convertLayout(f.f32Tile({16}), blockedLayout());
  b.cmp(CmpPredicate::Le, b.add(laidOut, laidOut), laidOut);
  // An i64 loop without iter_args, a pointer carried through a loop.
  auto loop = b.beginFor(b.i64(0), b.i64(8), b.i64(2), {f.x});
  std::vector<Value*> res = b.endFor({b.addPtr(loop.iterArgs[0], b.cast(loop.inductionVar, kI32))});
  b.load(res[0]);
  // An if without results and without else.
  b.beginIf(b.cmp(CmpPredicate::Eq, f.n, b.i32(3)));
  b.store(f.x, b.f32(1.0));
  b.endIf();
  REQUIRE(errorOf(b.finish()) == "<ok>");
}

// ---------------------------------------------------------------------------
// Operation shape and attributes

TEST_CASE("verifier rejects bad attributes and operand counts", "[verifier]") {
  Fixture f;
  Builder& b = f.b;
  const Type i32 = scalar(kI32);

  SECTION("grid axis out of range") {
    b.programId(3);
    CHECK(f.error() == "'program_id': grid axis must be 0, 1 or 2, got 3");
  }
  SECTION("grid query with a non-i32 result") {
    b.create(Opcode::NumPrograms, {}, {scalar(kI64)}, attrs({{"axis", int64_t{0}}}));
    CHECK(f.error() == "'num_programs': result type i64 should be i32 (grid indices are i32)");
  }
  SECTION("missing required attribute") {
    b.create(Opcode::ProgramId, {}, {i32});
    CHECK(f.error() == "'program_id': missing attribute 'axis'");
  }
  SECTION("attribute of the wrong kind") {
    b.create(Opcode::ProgramId, {}, {i32}, attrs({{"axis", 1.5}}));
    CHECK(f.error() == "'program_id': attribute 'axis' must be an integer, got a float (1.5)");
  }
  SECTION("unknown attribute is named") {
    b.create(Opcode::ProgramId, {}, {i32}, attrs({{"axis", int64_t{0}}, {"foo", int64_t{1}}}));
    CHECK(f.error() == "'program_id': unknown attribute 'foo' (it takes axis)");
  }
  SECTION("attribute on an op that takes none") {
    Value* one = b.i32(1);
    b.create(Opcode::Add, {one, one}, {i32}, attrs({{"fast", int64_t{1}}}));
    CHECK(f.error() == "'add': unknown attribute 'fast' (it takes none)");
  }
  SECTION("mul's skip_ones is a 0/1 flag on floats") {
    Value* x = b.f32(2.0);
    Value* ok = b.mulSkipOnes(x, b.f32(1.0));
    CHECK(ok->definingOp()->attrs().getInt("skip_ones") == 1);
    CHECK(f.error() == "<ok>");
  }
  SECTION("skip_ones on integers") {
    Value* one = b.i32(1);
    b.mulSkipOnes(one, one);
    CHECK(f.error() == "'mul': attribute 'skip_ones' needs float operands, got i32");
  }
  SECTION("skip_ones other than 0 or 1") {
    Value* x = b.f32(2.0);
    b.create(Opcode::Mul, {x, x}, {scalar(kF32)}, attrs({{"skip_ones", int64_t{2}}}));
    CHECK(f.error() == "'mul': attribute 'skip_ones' must be 0 or 1, got 2");
  }
  SECTION("skip_ones on an op other than mul") {
    Value* x = b.f32(2.0);
    b.create(Opcode::Add, {x, x}, {scalar(kF32)}, attrs({{"skip_ones", int64_t{1}}}));
    CHECK(f.error() == "'add': unknown attribute 'skip_ones' (it takes none)");
  }
  SECTION("wrong operand count") {
    Value* one = b.i32(1);
    b.create(Opcode::Add, {one, one, one}, {i32});
    CHECK(f.error() == "'add': expected 2 operands, got 3");
  }
  SECTION("wrong result count") {
    Value* one = b.i32(1);
    b.create(Opcode::Add, {one, one}, {i32, i32});
    CHECK(f.error() == "'add': expected 1 result, got 2");
  }
  SECTION("load takes 1 to 3 operands") {
    Value* mask = b.constInt(1, scalar(kI1));
    b.create(Opcode::Load, {f.x, mask, b.f32(0.0), b.f32(0.0)}, {scalar(kF32)});
    CHECK(f.error() == "'load': expected 1 to 3 operands, got 4");
  }
  SECTION("region on an op other than for/if") {
    Value* one = b.i32(1);
    Operation* add = b.create(Opcode::Add, {one, one}, {i32});
    add->addRegion();
    CHECK(errorOf(verifyOperation(*add, f.kernel)) == "'add': has 1 region(s); only 'for' and 'if' have regions");
  }
  SECTION("null operand built by hand") {
    Operation op(Opcode::Add, {});
    op.addOperand(f.n);
    op.addOperand(nullptr);
    op.addResult(i32);
    CHECK(errorOf(verifyOperation(op, f.kernel)) == "'add': operand 1 is null");
  }
  SECTION("tile extents must be positive") {
    b.constFloat(0.0, tile({0}, kF32));
    CHECK(f.error() ==
          "'constant': result 0 has invalid type tile<0xf32>: tile extents must be positive, got shape [0]");
  }
  SECTION("tile rank at most 3") {
    b.constFloat(0.0, tile({2, 2, 2, 2}, kF32));
    CHECK(f.error() == "'constant': result 0 has invalid type tile<2x2x2x2xf32>: a tile has rank 1 to 3, not 4");
  }
}

// ---------------------------------------------------------------------------
// Constants and tile creation

TEST_CASE("verifier rejects bad constants and tile creation", "[verifier]") {
  Fixture f;
  Builder& b = f.b;
  f.kernel.constexprs().push_back({"SCALE", 0.125});

  SECTION("float value for an integer type") {
    b.constFloat(1.5, scalar(kI32));
    CHECK(f.error() == "'constant': float value 1.5 for integer type i32");
  }
  SECTION("integer value out of range") {
    b.constInt(300, scalar(kI8));
    CHECK(f.error() == "'constant': value 300 does not fit in i8");
  }
  SECTION("i1 constant other than 0 or 1") {
    b.constInt(2, tile({4}, kI1));
    CHECK(f.error() == "'constant': value 2 does not fit in i1");
  }
  SECTION("pointer constant") {
    b.constInt(0, ptr(kF32));
    CHECK(f.error() == "'constant': result type ptr<global, f32> is not a scalar or a tile of scalars");
  }
  SECTION("undeclared constexpr") {
    b.constexprValue("BLOCK_N", kI32);
    CHECK(f.error() == "'constexpr': 'BLOCK_N' is not a constexpr of kernel 'k'");
  }
  SECTION("float constexpr as an integer") {
    b.constexprValue("SCALE", kI32);
    CHECK(f.error() == "'constexpr': 'SCALE' is a float (0.125) and cannot produce integer type i32");
  }
  SECTION("constexpr of i1") {
    b.constexprValue("SCALE", kI1);
    CHECK(f.error() ==
          "'constexpr': result type i1 must be a numeric scalar (an integer other than i1, or a float)");
  }
  SECTION("empty arange") {
    b.arange(8, 8);
    CHECK(f.error() == "'arange': start (8) must be less than end (8)");
  }
  SECTION("arange result of the wrong length") {
    b.create(Opcode::Arange, {}, {tile({8}, kI32)}, attrs({{"start", int64_t{0}}, {"end", int64_t{16}}}));
    CHECK(f.error() == "'arange': result type tile<8xi32> should be tile<16xi32> ([0, 16) as i32)");
  }
  SECTION("splat of a tile") {
    b.splat(b.arange(0, 16), {4, 16});
    CHECK(f.error() == "'splat': operand must be a scalar or a pointer, got tile<16xi32>");
  }
  SECTION("splat changing the element type") {
    b.create(Opcode::Splat, {f.n}, {tile({16}, kI64)});
    CHECK(f.error() == "'splat': result element type i64 differs from the operand type i32");
  }
  SECTION("broadcast of a dimension that is not 1") {
    b.broadcast(f.f32Tile({16, 2}), {16, 4});
    CHECK(f.error() ==
          "'broadcast': cannot broadcast tile<16x2xf32> to tile<16x4xf32>: dimension 1 has extent 2, not 1 or 4");
  }
  SECTION("broadcast changing the rank") {
    b.broadcast(f.f32Tile({16}), {4, 16});
    CHECK(f.error() ==
          "'broadcast': result type tile<4x16xf32> must be a tile of the operand's rank and element (tile<16xf32>)");
  }
  SECTION("expand_dims axis out of range") {
    b.expandDims(f.f32Tile({16}), 2);
    CHECK(f.error() == "'expand_dims': axis 2 is out of range [0, 1] for tile<16xf32>");
  }
  SECTION("expand_dims with a wrong result shape") {
    b.create(Opcode::ExpandDims, {f.f32Tile({16})}, {tile({16, 1}, kF32)}, attrs({{"axis", int64_t{0}}}));
    CHECK(f.error() ==
          "'expand_dims': result type tile<16x1xf32> should be tile<1x16xf32> (extent 1 inserted at axis 0)");
  }
  SECTION("reshape changing the element count") {
    b.reshape(f.f32Tile({16, 16}), {16, 8});
    CHECK(f.error() ==
          "'reshape': cannot reshape tile<16x16xf32> (256 elements) to tile<16x8xf32> (128 elements)");
  }
  SECTION("transpose with a non-permutation") {
    b.transpose(f.f32Tile({16, 8}), {0, 0});
    CHECK(f.error() == "'transpose': perm [0,0] is not a permutation of the 2 dimensions of tile<16x8xf32>");
  }
  SECTION("transpose with a wrong result shape") {
    b.create(Opcode::Transpose, {f.f32Tile({16, 8})}, {tile({16, 8}, kF32)},
             attrs({{"perm", std::vector<int64_t>{1, 0}}}));
    CHECK(f.error() ==
          "'transpose': result type tile<16x8xf32> should be tile<8x16xf32> (dimension i is operand dimension "
          "perm[i])");
  }
  SECTION("convert_layout changing the shape") {
    b.create(Opcode::ConvertLayout, {f.f32Tile({16})}, {Type::tile({8}, scalar(kF32), blockedLayout())});
    CHECK(f.error() ==
          "'convert_layout': result type tile<8xf32, #blocked<spt=[1], tpw=[32], wpc=[4], order=[0]>> should be "
          "tile<16xf32> (only the layout may change)");
  }
}

// ---------------------------------------------------------------------------
// Elementwise ops

TEST_CASE("verifier rejects ill-typed elementwise ops", "[verifier]") {
  Fixture f;
  Builder& b = f.b;
  Value* v = f.f32Tile({16});
  Value* ints = b.arange(0, 16, "ints");
  Value* mask = b.cmp(CmpPredicate::Lt, ints, ints);

  SECTION("operand types differ") {
    b.add(v, b.constFloat(1.0, tile({16}, kF16)));
    CHECK(f.error() ==
          "'add': operand types differ: tile<16xf32> vs tile<16xf16> (elementwise operands have one type; use "
          "splat, broadcast, cast or convert_layout)");
  }
  SECTION("operand layouts differ") {
    Value* laidOut = b.convertLayout(v, blockedLayout());
    b.sub(v, laidOut);
    CHECK_THAT(f.error(), Catch::StartsWith("'sub': operand types differ: tile<16xf32> vs tile<16xf32, #blocked<"));
  }
  SECTION("arithmetic on pointers") {
    b.add(f.x, f.x);
    CHECK(f.error() == "'add': operands of type ptr<global, f32> are pointers; pointer arithmetic is 'addptr'");
  }
  SECTION("bitwise op on floats") {
    b.andOp(v, v);
    CHECK(f.error() == "'and': requires integer operands, got tile<16xf32>");
  }
  SECTION("shift on floats") {
    b.binary(Opcode::Shl, b.f32(1.0), b.f32(2.0));
    CHECK(f.error() == "'shl': requires integer operands, got f32");
  }
  SECTION("arithmetic on i1") {
    b.add(mask, mask);
    CHECK(f.error() == "'add': not defined on i1 operands (tile<16xi1>); only and, or, xor are");
  }
  SECTION("shift on i1") {
    b.binary(Opcode::Shr, mask, mask);
    CHECK(f.error() == "'shr': not defined on i1 operands (tile<16xi1>); only and, or, xor are");
  }
  SECTION("binary result type differs") {
    b.create(Opcode::Mul, {v, v}, {tile({16}, kF16)});
    CHECK(f.error() == "'mul': result type tile<16xf16> should be tile<16xf32> (the operand type)");
  }
  SECTION("float-only unary op on integers") {
    b.unary(Opcode::Exp2, ints);
    CHECK(f.error() == "'exp2': requires float operands, got tile<16xi32>");
  }
  SECTION("neg on i1") {
    b.unary(Opcode::Neg, b.constInt(1, scalar(kI1)));
    CHECK(f.error() == "'neg': requires numeric operands, got i1");
  }
  SECTION("abs on a pointer") {
    b.unary(Opcode::Abs, f.x);
    CHECK(f.error() == "'abs': requires numeric operands, got ptr<global, f32>");
  }
  SECTION("unknown predicate") {
    b.create(Opcode::Cmp, {v, v}, {tile({16}, kI1)}, attrs({{"pred", std::string("lessthan")}}));
    CHECK(f.error() == "'cmp': unknown predicate 'lessthan' (expected eq, ne, lt, le, gt or ge)");
  }
  SECTION("cmp result that is not i1") {
    b.create(Opcode::Cmp, {v, v}, {v->type()}, attrs({{"pred", std::string("lt")}}));
    CHECK(f.error() == "'cmp': result type tile<16xf32> should be tile<16xi1> (i1 of the operands' shape)");
  }
  SECTION("cmp of pointers") {
    b.cmp(CmpPredicate::Eq, f.x, f.x);
    CHECK(f.error() == "'cmp': cannot compare pointers (ptr<global, f32>)");
  }
  SECTION("select with a scalar condition and tile operands") {
    b.select(b.constInt(1, scalar(kI1)), v, v);
    CHECK(f.error() ==
          "'select': condition i1 is a scalar but the operands are tiles (tile<16xf32>); splat it to their shape");
  }
  SECTION("select with a non-i1 condition") {
    b.select(ints, v, v);
    CHECK(f.error() == "'select': condition must be i1, got tile<16xi32>");
  }
  SECTION("select with a condition of another shape") {
    b.select(b.constInt(1, tile({8}, kI1)), v, v);
    CHECK(f.error() == "'select': condition type tile<8xi1> should be tile<16xi1> (i1 of the operands' shape)");
  }
  SECTION("cast of a pointer") {
    b.cast(f.x, kI64);
    CHECK(f.error() == "'cast': cannot cast pointers (ptr<global, f32> to i64)");
  }
  SECTION("cast changing the shape") {
    b.create(Opcode::Cast, {v}, {tile({8}, kF16)});
    CHECK(f.error() == "'cast': result type tile<8xf16> should be tile<16xf16> (the operand's shape and layout)");
  }
  SECTION("bitcast between different widths") {
    b.bitcast(v, kF16);
    CHECK(f.error() ==
          "'bitcast': element widths differ: tile<16xf32> has 32-bit elements, tile<16xf16> 16-bit ones");
  }
  SECTION("bitcast of i1") {
    b.bitcast(mask, kI8);
    CHECK(f.error() == "'bitcast': i1 has no bit representation to reinterpret (tile<16xi1> to tile<16xi8>); use cast");
  }
  SECTION("bitcast of pointers to another pointee keeps their address space") {
    Value* bytes = f.kernel.addParameter(ptr(kI8), "bytes");
    Value* floats = b.bitcast(b.splat(bytes, {16}), kF32);
    CHECK(b.status().isOk());
    CHECK(floats->type() == Type::tile({16}, Type::pointer(kF32)));
  }
  SECTION("bitcast between a pointer and a value") {
    b.create(Opcode::Bitcast, {f.x}, {scalar(ScalarKind::I64)});
    CHECK(f.error() == "'bitcast': cannot bitcast between pointers and values (ptr<global, f32> to i64)");
  }
  SECTION("bitcast of a pointer into another address space") {
    b.create(Opcode::Bitcast, {f.x}, {Type::pointer(kF32, AddressSpace::Shared)});
    CHECK(f.error() ==
          "'bitcast': cannot bitcast pointers to another address space (ptr<global, f32> to ptr<shared, f32>)");
  }
  SECTION("bitcast of an i4 pointer") {
    Value* packed = f.kernel.addParameter(ptr(kI4), "packed");
    b.bitcast(packed, kI8);
    CHECK(f.error() ==
          "'bitcast': i4 pointers address nibbles and cannot be reinterpreted (ptr<global, i4> to ptr<global, i8>)");
  }
  SECTION("unpack_nibbles of bytes with their zero points") {
    Value* bytes = b.constInt(0x5A, tile({16}, kI8));
    CHECK(b.unpackNibbles(bytes, ints, true, 8, ScalarKind::BF16)->type() == tile({16}, ScalarKind::BF16));
    CHECK(b.status().isOk());
  }
  SECTION("unpack_nibbles of i32 values") {
    b.unpackNibbles(ints, ints, false, 0, kF16);
    CHECK(f.error() == "'unpack_nibbles': bytes must be i8, got tile<16xi32>");
  }
  SECTION("unpack_nibbles with f32 zero points") {
    b.unpackNibbles(b.constInt(1, tile({16}, kI8)), v, false, 0, kF16);
    CHECK(f.error() ==
          "'unpack_nibbles': zero points have type tile<16xf32>, expected tile<16xi32> (i32 of the bytes' shape)");
  }
  SECTION("unpack_nibbles to an integer") {
    b.unpackNibbles(b.constInt(1, tile({16}, kI8)), ints, false, 0, ScalarKind::I32);
    CHECK(f.error() == "'unpack_nibbles': result must be f16, bf16 or f32, got tile<16xi32>");
  }
  SECTION("unpack_nibbles with a nibble index or flip out of range") {
    Value* bytes = b.constInt(1, tile({16}, kI8));
    SECTION("high") {
      b.create(Opcode::UnpackNibbles, {bytes, ints}, {tile({16}, kF16)}, attrs({{"high", int64_t{2}}}));
      CHECK(f.error() == "'unpack_nibbles': high must be 0 (bits 0-3) or 1 (bits 4-7), got 2");
    }
    SECTION("flip") {
      b.unpackNibbles(bytes, ints, false, 16, kF16);
      CHECK(f.error() == "'unpack_nibbles': flip must be in [0, 15] (it XORs a nibble), got 16");
    }
    SECTION("missing high") {
      b.create(Opcode::UnpackNibbles, {bytes, ints}, {tile({16}, kF16)});
      CHECK_THAT(f.error(), Catch::Contains("'unpack_nibbles'") && Catch::Contains("high"));
    }
  }
}

// ---------------------------------------------------------------------------
// Memory ops

TEST_CASE("verifier rejects ill-typed memory ops", "[verifier]") {
  Fixture f;
  Builder& b = f.b;
  Value* offsets = b.arange(0, 16, "offsets");
  Value* ptrs = b.addPtr(b.splat(f.x, {16}), offsets, "ptrs");
  Value* mask = b.cmp(CmpPredicate::Lt, offsets, b.splat(f.n, {16}));

  SECTION("float offset") {
    b.addPtr(ptrs, f.f32Tile({16}));
    CHECK(f.error() == "'addptr': offset must be an integer other than i1, got tile<16xf32>");
  }
  SECTION("offset shape differs from the pointer's") {
    b.addPtr(f.x, offsets);
    CHECK(f.error() ==
          "'addptr': offset type tile<16xi32> does not match the shape of pointer ptr<global, f32> (expected i32)");
  }
  SECTION("addptr on a non-pointer") {
    b.addPtr(f.n, f.n);
    CHECK(f.error() == "'addptr': operand 0 ('n') must be a pointer or a tile of pointers, got i32");
  }
  SECTION("load from a non-pointer") {
    b.create(Opcode::Load, {offsets}, {offsets->type()});
    CHECK(f.error() == "'load': operand 0 ('offsets') must be a pointer or a tile of pointers, got tile<16xi32>");
  }
  SECTION("load result that is not the pointee type") {
    b.create(Opcode::Load, {f.x}, {scalar(kF16)});
    CHECK(f.error() == "'load': result type f16 should be f32 (the pointee type of ptr<global, f32>)");
  }
  SECTION("load mask of another shape") {
    b.load(ptrs, b.constInt(1, tile({8}, kI1)));
    CHECK(f.error() == "'load': mask type tile<8xi1> should be tile<16xi1> (i1 of the pointer's shape)");
  }
  SECTION("load 'other' of another type") {
    b.load(ptrs, mask, b.constFloat(0.0, tile({16}, kF16)));
    CHECK(f.error() ==
          "'load': 'other' (the value of masked-off elements) has type tile<16xf16> but the loaded value is "
          "tile<16xf32>");
  }
  SECTION("store of i4 elements") {
    Value* packed = f.kernel.addParameter(ptr(kI4), "packed");
    b.store(packed, b.constInt(1, scalar(kI4)));
    CHECK(f.error() == "'store': unsupported: store of i4 elements; pack pairs into i8");
  }
  SECTION("store of a value of another type") {
    b.store(ptrs, b.constFloat(0.0, tile({16}, kF16)), mask);
    CHECK(f.error() ==
          "'store': value type tile<16xf16> should be tile<16xf32> (the pointee type of tile<16xptr<global, f32>>)");
  }
  SECTION("store mask of another shape") {
    b.store(ptrs, f.f32Tile({16}), b.constInt(1, scalar(kI1)));
    CHECK(f.error() == "'store': mask type i1 should be tile<16xi1> (i1 of the pointer's shape)");
  }
  SECTION("store with a result") {
    b.create(Opcode::Store, {f.x, b.f32(1.0)}, {scalar(kF32)});
    CHECK(f.error() == "'store': expected 0 results, got 1");
  }
}

// ---------------------------------------------------------------------------
// Tensor ops

TEST_CASE("verifier rejects ill-typed dot and reductions", "[verifier]") {
  Fixture f;
  Builder& b = f.b;
  auto half = [&](std::vector<int64_t> shape) { return b.constFloat(1.0, tile(std::move(shape), kF16)); };
  Value* acc = f.f32Tile({16, 16}, 0.0);

  SECTION("K disagrees") {
    b.dot(half({16, 64}), half({32, 16}), acc);
    CHECK(f.error() == "'dot': operand shapes [16,64] and [32,16] do not agree on K (64 vs 32)");
  }
  SECTION("accumulator shape is not [M,N]") {
    b.dot(half({16, 32}), half({32, 16}), f.f32Tile({16, 32}));
    CHECK(f.error() == "'dot': accumulator shape [16,32] should be [M,N] = [16,16]");
  }
  SECTION("operand element types differ") {
    b.dot(half({16, 16}), b.constFloat(1.0, tile({16, 16}, kBF16)), acc);
    CHECK(f.error() == "'dot': operand element types differ: tile<16x16xf16> vs tile<16x16xbf16>");
  }
  SECTION("integer operands") {
    Value* i = b.constInt(1, tile({16, 16}, kI8));
    b.dot(i, i, acc);
    CHECK(f.error() == "'dot': operand element type i8 is not one of f16, bf16, f32, f8e4m3, f8e5m2");
  }
  SECTION("rank-1 operand") {
    b.dot(half({16}), half({16, 16}), acc);
    CHECK(f.error() == "'dot': operand a must be a rank-2 tile of numbers, got tile<16xf16>");
  }
  SECTION("tf32 precision on f16 operands") {
    b.dot(half({16, 16}), half({16, 16}), acc, /*tf32=*/true);
    CHECK(f.error() == "'dot': input_precision applies only to f32 operands, got f16");
  }
  SECTION("unknown input precision") {
    b.create(Opcode::Dot, {acc, acc, acc}, {acc->type()},
             attrs({{"acc", std::string("f32")}, {"input_precision", std::string("fast")}}));
    CHECK(f.error() == "'dot': attribute 'input_precision' must be ieee or tf32, got fast");
  }
  SECTION("k_extent past K and n_extent below 1") {
    b.dot(half({16, 32}), half({32, 8}), f.f32Tile({16, 8}), Builder::DotOptions{33, 0});
    CHECK(f.error() == "'dot': attribute 'k_extent' must be in [1, K = 32], got 33");
  }
  SECTION("n_extent below 1") {
    Value* h = half({16, 16});
    b.create(Opcode::Dot, {h, h, acc}, {acc->type()}, attrs({{"acc", std::string("f32")}, {"n_extent", int64_t{0}}}));
    CHECK(f.error() == "'dot': attribute 'n_extent' must be in [1, N = 16], got 0");
  }
  SECTION("k_extent that is not an integer") {
    Value* h = half({16, 16});
    b.create(Opcode::Dot, {h, h, acc}, {acc->type()},
             attrs({{"acc", std::string("f32")}, {"k_extent", std::string("80")}}));
    CHECK(f.error().find("'k_extent'") != std::string::npos);
  }
  SECTION("f16 accumulation with bf16 operands") {
    Value* bf = b.constFloat(1.0, tile({16, 16}, kBF16));
    Value* acc16 = half({16, 16});
    b.create(Opcode::Dot, {bf, bf, acc16}, {acc16->type()}, attrs({{"acc", std::string("f16")}}));
    CHECK(f.error() == "'dot': acc = f16 requires f16 operands, got bf16");
  }
  SECTION("accumulator operand disagrees with the acc attribute") {
    b.dot(half({16, 16}), half({16, 16}), half({16, 16}));
    CHECK(f.error() == "'dot': accumulator type tile<16x16xf16> does not match acc = f32");
  }
  SECTION("missing acc attribute") {
    b.create(Opcode::Dot, {acc, acc, acc}, {acc->type()});
    CHECK(f.error() == "'dot': missing attribute 'acc'");
  }
  SECTION("thread_major on one operand only, or on the accumulator alone") {
    auto mma = std::make_shared<Layout>();
    mma->kind = LayoutKind::Mma;
    mma->version = 2;
    mma->warpsPerCta = {1, 4};
    mma->instrShape = {16, 8};
    auto operand = [&](int64_t idx, LayoutRef parent, bool threadMajor) {
      auto l = std::make_shared<Layout>();
      l->kind = LayoutKind::DotOperand;
      l->opIdx = idx;
      l->kWidth = 2;
      l->threadMajor = threadMajor;
      l->parent = std::move(parent);
      return l;
    };
    auto typed = [&](std::vector<int64_t> shape, ScalarKind k, LayoutRef l) {
      return Type::tile(std::move(shape), Type::scalar(k), std::move(l));
    };
    Value* a = b.constFloat(1.0, typed({16, 32}, kF16, operand(0, mma, false)));
    Value* bMajor = b.constFloat(1.0, typed({32, 32}, kF16, operand(1, mma, true)));
    Value* acc32 = b.constFloat(0.0, typed({16, 32}, kF32, mma));
    b.dot(a, bMajor, acc32);
    CHECK(f.error() == "'dot': operands a and b must both be thread_major or neither (their k coordinates are "
                       "renumbered alike)");
    Fixture g;
    auto mmaMajor = std::make_shared<Layout>(*mma);
    mmaMajor->threadMajor = 1;
    Value* a2 = g.b.constFloat(1.0, typed({16, 32}, kF16, operand(0, mma, false)));
    Value* b2 = g.b.constFloat(1.0, typed({32, 32}, kF16, operand(1, mma, false)));
    g.b.dot(a2, b2, g.b.constFloat(0.0, typed({16, 32}, kF32, mmaMajor)));
    CHECK(g.error() == "'dot': a thread_major accumulator needs operand b of that layout's dot_op (their n "
                       "coordinates are renumbered alike)");
  }
  SECTION("dot result that is not the accumulator type") {
    Value* h = half({16, 16});
    b.create(Opcode::Dot, {h, h, acc}, {tile({16, 16}, kF16)}, attrs({{"acc", std::string("f32")}}));
    CHECK(f.error() == "'dot': result type tile<16x16xf16> should be tile<16x16xf32> (the accumulator type)");
  }
  SECTION("reduction axis out of range") {
    b.reduce(Opcode::ReduceSum, f.f32Tile({16, 8}), 2);
    CHECK(f.error() == "'reduce_sum': axis 2 is out of range [0, 2) for tile<16x8xf32>");
  }
  SECTION("reduction result keeps the axis") {
    b.create(Opcode::ReduceMax, {f.f32Tile({16, 8})}, {tile({8}, kF32)}, attrs({{"axis", int64_t{1}}}));
    CHECK(f.error() == "'reduce_max': result type tile<8xf32> should be tile<16xf32> (the operand without axis 1)");
  }
  SECTION("reduction of i1") {
    b.reduce(Opcode::ReduceMin, b.constInt(1, tile({16}, kI1)), 0);
    CHECK(f.error() == "'reduce_min': requires integer or float elements (not i1 or pointers), got tile<16xi1>");
  }
  SECTION("reduction of a scalar") {
    b.create(Opcode::ReduceMax, {b.f32(1.0)}, {scalar(kF32)}, attrs({{"axis", int64_t{0}}}));
    CHECK(f.error() == "'reduce_max': operand 0 must be a tile, got f32");
  }
}

// ---------------------------------------------------------------------------
// Control flow

TEST_CASE("verifier rejects malformed for and if", "[verifier]") {
  Fixture f;
  Builder& b = f.b;
  Value* init = f.f32Tile({16});

  SECTION("loop bounds of different types") {
    b.beginFor(b.i32(0), b.i64(8), b.i32(1), {});
    b.endFor({});
    CHECK(f.error() == "'for': lo, hi and step must have one integer type (i32 or i64), got i32, i64, i32");
  }
  SECTION("float loop bounds") {
    b.beginFor(b.f32(0), b.f32(8), b.f32(1), {});
    b.endFor({});
    CHECK(f.error() == "'for': lo, hi and step must have one integer type (i32 or i64), got f32, f32, f32");
  }
  SECTION("yield of another type than the loop result") {
    b.beginFor(b.i32(0), f.n, b.i32(1), {init});
    b.endFor({b.constFloat(0.0, tile({16}, kF16))});
    CHECK(f.error() ==
          "'yield': value 0 has type tile<16xf16> but result 0 of the enclosing 'for' has type tile<16xf32>");
  }
  SECTION("yield of too few values") {
    b.beginFor(b.i32(0), f.n, b.i32(1), {init});
    b.endFor({});
    CHECK(f.error() == "'yield': yields 0 values but the enclosing 'for' has 1 result (tile<16xf32>)");
  }
  SECTION("induction variable of another type than lo") {
    auto loop = b.beginFor(b.i32(0), f.n, b.i32(1), {});
    loop.inductionVar->setType(scalar(kI64));
    b.endFor({});
    CHECK(f.error() == "'for': induction variable has type i64 but lo has type i32");
  }
  SECTION("loop-carried argument of another type than its init") {
    auto loop = b.beginFor(b.i32(0), f.n, b.i32(1), {init});
    loop.iterArgs[0]->setType(tile({16}, kF16));
    b.endFor({init});
    CHECK(f.error() == "'for': body argument 1 has type tile<16xf16> but its initial value has type tile<16xf32>");
  }
  SECTION("loop result of another type than its init") {
    Operation* loop = b.create(Opcode::For, {b.i32(0), f.n, b.i32(1), init}, {tile({16}, kF16)});
    Block* body = loop->addRegion();
    body->addArgument(scalar(kI32));
    body->addArgument(init->type());
    CHECK(errorOf(verifyOperation(*loop, f.kernel)) ==
          "'for': result 0 has type tile<16xf16> but its initial value has type tile<16xf32>");
  }
  SECTION("loop body without yield") {
    auto loop = b.beginFor(b.i32(0), f.n, b.i32(1), {});
    b.add(loop.inductionVar, loop.inductionVar);
    std::vector<Value*> none = b.endFor({});
    (void)none;
    Operation* forOp = f.kernel.body().back();
    Block& body = *forOp->region(0);
    body.remove(body.size() - 1);  // drop the yield
    CHECK(errorOf(verifyOperation(*forOp, f.kernel)) == "'for': body must end with 'yield', but ends with 'add'");
    body.remove(0);
    CHECK(errorOf(verifyOperation(*forOp, f.kernel)) == "'for': body is empty; it must end with 'yield'");
  }
  SECTION("if condition that is a tile") {
    b.beginIf(b.constInt(1, tile({16}, kI1)));
    b.endIf();
    CHECK(f.error() == "'if': condition must be a scalar i1, got tile<16xi1>");
  }
  SECTION("then region yields another type") {
    b.beginIf(b.cmp(CmpPredicate::Gt, f.n, b.i32(0)), {scalar(kF32)});
    b.beginElse({b.i32(1)});
    b.endIf({b.f32(1.0)});
    CHECK(f.error() == "'yield': value 0 has type i32 but result 0 of the enclosing 'if' has type f32");
  }
  SECTION("then region yields too many values") {
    b.beginIf(b.cmp(CmpPredicate::Gt, f.n, b.i32(0)), {scalar(kF32)});
    b.beginElse({b.f32(1.0), b.f32(2.0)});
    b.endIf({b.f32(1.0)});
    CHECK(f.error() == "'yield': yields 2 values (f32, f32) but the enclosing 'if' has 1 result (f32)");
  }
  SECTION("if with results but no else") {
    b.beginIf(b.cmp(CmpPredicate::Gt, f.n, b.i32(0)), {scalar(kF32)});
    b.endIf({b.f32(1.0)});
    CHECK(f.error() == "'yield': yields 0 values but the enclosing 'if' has 1 result (f32)");
  }
  SECTION("if region with arguments") {
    Operation* op = b.create(Opcode::If, {b.constInt(1, scalar(kI1))}, {});
    op->addRegion()->addArgument(scalar(kI32));
    op->addRegion();
    CHECK(errorOf(verifyOperation(*op, f.kernel)) == "'if': then region must have no arguments, got 1");
  }
}

TEST_CASE("verifier checks terminator placement", "[verifier]") {
  Fixture f;
  Builder& b = f.b;

  SECTION("yield in the kernel body") {
    b.create(Opcode::Yield, {}, {});
    CHECK(f.error() == "'yield': must terminate the region of a 'for' or 'if'");
  }
  SECTION("return inside a loop") {
    b.beginFor(b.i32(0), f.n, b.i32(1), {});
    b.create(Opcode::Return, {}, {});
    CHECK(f.error() == "'return': allowed only at the end of the kernel body (a region ends with 'yield')");
  }
  SECTION("op after return") {
    REQUIRE(errorOf(b.finish()) == "<ok>");
    b.i32(7);
    CHECK(errorOf(verifyKernel(f.kernel)) == "'return': must be the last op of its block, but 'constant' follows it");
  }
  SECTION("loop body with an op after its yield") {
    b.beginFor(b.i32(0), f.n, b.i32(1), {});
    b.endFor({});
    REQUIRE(errorOf(b.finish()) == "<ok>");
    Operation* forOp = f.kernel.body().operations().at(2).get();
    REQUIRE(forOp->opcode() == Opcode::For);
    auto stray = std::make_unique<Operation>(Opcode::Constant, support::Location{});
    stray->addResult(scalar(kI32));
    stray->attrs().set("value", int64_t{1});
    forOp->region(0)->append(std::move(stray));
    CHECK(errorOf(verifyKernel(f.kernel)) == "'for': body must end with 'yield', but ends with 'constant'");
  }
  SECTION("body without return") {
    b.store(f.x, b.f32(1.0));
    CHECK(errorOf(verifyKernel(f.kernel)) == "kernel 'k': body must end with 'return', but ends with 'store'");
    Kernel empty("empty");
    CHECK(errorOf(verifyKernel(empty)) == "kernel 'empty': body must end with 'return'");
  }
}

TEST_CASE("verifier checks dominance", "[verifier]") {
  Fixture f;
  Builder& b = f.b;

  SECTION("value defined in a loop body used after the loop") {
    auto loop = b.beginFor(b.i32(0), f.n, b.i32(1), {});
    Value* t = b.add(loop.inductionVar, loop.inductionVar, "t");
    b.endFor({});
    b.add(t, t);
    CHECK(errorOf(b.finish()) ==
          "'add': operand 0 ('t') of type i32 is defined inside a 'for' region and is not visible here (pass it "
          "out with 'yield')");
  }
  SECTION("induction variable used after the loop") {
    auto loop = b.beginFor(b.i32(0), f.n, b.i32(1), {});
    b.endFor({});
    b.add(f.n, loop.inductionVar);
    CHECK(errorOf(b.finish()) ==
          "'add': operand 1 ('iv') of type i32 is defined inside a 'for' region and is not visible here (pass it "
          "out with 'yield')");
  }
  SECTION("value of the then region used in the else region") {
    b.beginIf(b.cmp(CmpPredicate::Gt, f.n, b.i32(0)), {scalar(kI32)});
    Value* fromThen = b.i32(1);
    fromThen->setName("from_then");
    b.beginElse({fromThen});
    b.endIf({fromThen});
    CHECK(errorOf(b.finish()) ==
          "'yield': operand 0 ('from_then') of type i32 is defined inside an 'if' region and is not visible here "
          "(pass it out with 'yield')");
  }
  SECTION("use before definition") {
    Value* x = b.constInt(1, scalar(kI32), "x");
    b.add(x, x, "y");
    Block& body = f.kernel.body();
    body.insert(0, body.remove(1));  // y = add x, x now precedes x
    CHECK(errorOf(b.finish()) == "'add': operand 0 ('x') of type i32 is used before its definition");
  }
  SECTION("loop using its own result") {
    Value* zero = b.i32(0);
    auto loop = b.beginFor(zero, f.n, b.i32(1), {zero});
    (void)loop;
    std::vector<Value*> result = b.endFor({zero}, {"r"});
    f.kernel.body().back()->region(0)->back()->setOperand(0, result[0]);
    CHECK(errorOf(b.finish()) == "'yield': operand 0 ('r') of type i32 is used before its definition");
  }
  SECTION("value of another kernel") {
    Kernel other("other");
    Value* foreign = other.addParameter(scalar(kI32), "foreign");
    b.add(f.n, foreign);
    CHECK(errorOf(b.finish()) == "'add': operand 1 ('foreign') of type i32 is not defined in kernel 'k'");
  }
  SECTION("values of a loop body remain visible inside nested regions") {
    auto loop = b.beginFor(b.i32(0), f.n, b.i32(1), {});
    Value* inLoop = b.add(loop.inductionVar, f.n);
    b.beginIf(b.cmp(CmpPredicate::Gt, inLoop, b.i32(0)));
    b.add(inLoop, loop.inductionVar);
    b.endIf();
    b.endFor({});
    CHECK(errorOf(b.finish()) == "<ok>");
  }
}

// ---------------------------------------------------------------------------
// Kernels and modules

TEST_CASE("verifier checks kernel signatures and attributes", "[verifier]") {
  Kernel kernel("k", support::Location{"model.tir", 4, 1});
  Builder b(kernel);

  SECTION("tile parameter") {
    kernel.addParameter(tile({16}, kF32), "x");
    CHECK(errorOf(b.finish()) ==
          "kernel 'k': parameter 0 ('x') has type tile<16xf32>; parameters are pointers or i32, i64, f32, f64 "
          "scalars");
  }
  SECTION("i1 parameter") {
    kernel.addParameter(scalar(kI32), "n");
    kernel.addParameter(scalar(kI1), "flag");
    CHECK(errorOf(b.finish()) ==
          "kernel 'k': parameter 1 ('flag') has type i1; parameters are pointers or i32, i64, f32, f64 scalars");
  }
  SECTION("alignment that is not a power of two") {
    kernel.addParameter(ptr(kF32), "x", attrs({{"align", int64_t{12}}}));
    CHECK(errorOf(b.finish()) ==
          "kernel 'k': parameter 0 ('x'): align must be a power of two on a pointer, got 12 on ptr<global, f32>");
  }
  SECTION("duplicate constexpr") {
    kernel.constexprs().push_back({"BLOCK", int64_t{16}});
    kernel.constexprs().push_back({"BLOCK", int64_t{32}});
    CHECK(errorOf(b.finish()) == "kernel 'k': constexpr 'BLOCK' is declared more than once");
  }
  SECTION("num_warps not a power of two") {
    kernel.attrs().set("num_warps", int64_t{3});
    CHECK(errorOf(b.finish()) == "kernel 'k': num_warps must be a power of two in 1..32, got 3");
  }
  SECTION("num_warps too large") {
    kernel.attrs().set("num_warps", int64_t{64});
    CHECK(errorOf(b.finish()) == "kernel 'k': num_warps must be a power of two in 1..32, got 64");
  }
  SECTION("kernel errors are located at the kernel") {
    kernel.attrs().set("num_warps", std::string("four"));
    CHECK(b.finish().message() ==
          "model.tir:4:1: error: kernel 'k': num_warps must be a power of two in 1..32, got four");
  }
}

TEST_CASE("verifier checks modules", "[verifier]") {
  Module module;
  auto addKernel = [&](const std::string& name, int line) {
    Kernel* k = module.addKernel(std::make_unique<Kernel>(name, support::Location{"m.tir", line, 1}));
    Builder b(*k);
    b.store(k->addParameter(ptr(kF32), "out"), b.f32(1.0));
    REQUIRE(errorOf(b.finish()) == "<ok>");
    return k;
  };
  addKernel("first", 1);
  addKernel("second", 5);
  CHECK(errorOf(verifyModule(module)) == "<ok>");

  SECTION("duplicate kernel names") {
    addKernel("first", 9);
    support::Status s = verifyModule(module);
    CHECK(s.message() == "m.tir:9:1: error: kernel 'first' is defined more than once");
  }
  SECTION("an invalid kernel fails the module") {
    Kernel* bad = addKernel("third", 12);
    bad->attrs().set("num_warps", int64_t{0});
    CHECK(errorOf(verifyModule(module)) == "kernel 'third': num_warps must be a power of two in 1..32, got 0");
  }
}

// ---------------------------------------------------------------------------
// Locations and the Builder's first error

TEST_CASE("builder keeps the first verifier error, located at its op", "[verifier]") {
  Fixture f;
  Builder& b = f.b;
  b.setLocation(support::Location{"attn.tir", 7, 3});
  b.programId(5);
  b.setLocation(support::Location{"attn.tir", 8, 3});
  b.add(f.x, f.x);  // a second, later error
  CHECK(b.status().message() == "attn.tir:7:3: error: 'program_id': grid axis must be 0, 1 or 2, got 5");
  // finish() reports the recorded error even though the kernel check itself would
  // stop at the first bad op as well.
  CHECK(b.finish().message() == "attn.tir:7:3: error: 'program_id': grid axis must be 0, 1 or 2, got 5");
  CHECK(verifyKernel(f.kernel).message() == "attn.tir:7:3: error: 'program_id': grid axis must be 0, 1 or 2, got 5");
}
