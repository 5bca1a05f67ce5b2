// Linear layouts: the register/lane/warp → coordinate maps every lowering relies on.
#include <catch2/catch.hpp>

#include <map>
#include <memory>

#include "ir/AxisInfo.h"
#include "ir/Builder.h"
#include "ir/LinearLayout.h"

using namespace attnjit::ir;

namespace {
LayoutRef blocked(std::vector<int64_t> spt, std::vector<int64_t> tpw, std::vector<int64_t> wpc,
                  std::vector<int64_t> order) {
  auto l = std::make_shared<Layout>();
  l->kind = LayoutKind::Blocked;
  l->sizePerThread = spt;
  l->threadsPerWarp = tpw;
  l->warpsPerCta = wpc;
  l->order = order;
  return l;
}
LayoutRef mma(int64_t wm, int64_t wn) {
  auto l = std::make_shared<Layout>();
  l->kind = LayoutKind::Mma;
  l->version = 2;
  l->warpsPerCta = {wm, wn};
  l->instrShape = {16, 8};
  return l;
}
LayoutRef dotOp(int64_t idx, LayoutRef parent, bool threadMajor = false) {
  auto l = std::make_shared<Layout>();
  l->kind = LayoutKind::DotOperand;
  l->opIdx = idx;
  l->kWidth = 2;
  l->threadMajor = threadMajor;
  l->parent = parent;
  return l;
}
LayoutRef threadMajorMma(int64_t wm, int64_t wn) {
  auto l = std::make_shared<Layout>(*mma(wm, wn));
  l->threadMajor = 1;
  return l;
}

// The renumbering of coordinate `dim` a thread-major layout applies, read off
// the pairs (its coordinate, the mma's) of every element; fails the test if
// one mma coordinate maps to two.
std::map<int64_t, int64_t> renumbering(const Layout& encoding, const LinearLayout& layout, int dim) {
  auto view = mmaNumbering(encoding, layout);
  REQUIRE(view.isOk());
  std::map<int64_t, int64_t> map;
  for (uint64_t w = 0; w < uint64_t{1} << layout.warp.size(); ++w)
    for (uint64_t l = 0; l < 32; ++l)
      for (uint64_t r = 0; r < static_cast<uint64_t>(layout.numRegisters()); ++r) {
        const int64_t mmaCoord = view->apply(r, l, w)[dim];
        auto [it, inserted] = map.emplace(mmaCoord, layout.apply(r, l, w)[dim]);
        REQUIRE(it->second == layout.apply(r, l, w)[dim]);
      }
  return map;
}
}  // namespace

TEST_CASE("blocked layout maps threads to a coalesced tile", "[layout]") {
  auto ll = toLinearLayout(*blocked({1, 8}, {2, 16}, {4, 1}, {1, 0}), {16, 128}, 4);
  REQUIRE(ll.isOk());
  CHECK(ll->numRegisters() == 16);  // 2048 elements / 128 threads
  CHECK(ll->coversShape());
  // Registers 0..7 are 8 consecutive columns; lane 1 starts 8 columns further.
  for (uint64_t r = 0; r < 8; ++r) CHECK(ll->apply(r, 0, 0) == Coord{0, static_cast<int64_t>(r), 0});
  CHECK(ll->apply(0, 1, 0) == Coord{0, 8, 0});
  CHECK(ll->apply(0, 16, 0) == Coord{1, 0, 0});
  CHECK(ll->apply(0, 0, 1) == Coord{2, 0, 0});
  CHECK(ll->apply(8, 0, 0) == Coord{8, 0, 0});  // repetition along rows
}

TEST_CASE("mma accumulator layout matches the PTX m16n8k16 fragment", "[layout]") {
  auto ll = toLinearLayout(*mma(1, 1), {16, 8}, 1);
  REQUIRE(ll.isOk());
  CHECK(ll->coversShape());
  // c0..c3 of lane l: rows l/4 and l/4 + 8, columns 2*(l%4) + 0/1.
  for (uint64_t lane = 0; lane < 32; ++lane) {
    int64_t g = static_cast<int64_t>(lane / 4), t = static_cast<int64_t>(lane % 4);
    CHECK(ll->apply(0, lane, 0) == Coord{g, 2 * t, 0});
    CHECK(ll->apply(1, lane, 0) == Coord{g, 2 * t + 1, 0});
    CHECK(ll->apply(2, lane, 0) == Coord{g + 8, 2 * t, 0});
    CHECK(ll->apply(3, lane, 0) == Coord{g + 8, 2 * t + 1, 0});
  }
}

TEST_CASE("mma operand layouts match the PTX fragments and the accumulator reuse", "[layout]") {
  auto a = toLinearLayout(*dotOp(0, mma(4, 1)), {64, 32}, 4);
  auto b = toLinearLayout(*dotOp(1, mma(4, 1)), {32, 16}, 4);
  auto acc = toLinearLayout(*mma(4, 1), {64, 32}, 4);
  REQUIRE(a.isOk());
  REQUIRE(b.isOk());
  REQUIRE(acc.isOk());
  CHECK(a->coversShape());
  CHECK(b->coversShape());
  // A: a0,a1 row g cols 2t,2t+1; a2,a3 row g+8; a4..a7 columns + 8.
  for (uint64_t lane = 0; lane < 32; ++lane) {
    int64_t g = static_cast<int64_t>(lane / 4), t = static_cast<int64_t>(lane % 4);
    CHECK(a->apply(0, lane, 0) == Coord{g, 2 * t, 0});
    CHECK(a->apply(1, lane, 0) == Coord{g, 2 * t + 1, 0});
    CHECK(a->apply(2, lane, 0) == Coord{g + 8, 2 * t, 0});
    CHECK(a->apply(4, lane, 0) == Coord{g, 2 * t + 8, 0});
    // B: b0,b1 rows (k) 2t, 2t+1 of column g; b2,b3 rows + 8.
    CHECK(b->apply(0, lane, 0) == Coord{2 * t, g, 0});
    CHECK(b->apply(1, lane, 0) == Coord{2 * t + 1, g, 0});
    CHECK(b->apply(2, lane, 0) == Coord{2 * t + 8, g, 0});
  }
  CHECK(a->apply(0, 0, 1) == Coord{16, 0, 0});  // warps split rows
  // With warps only along M, the accumulator of a [64, 32] product is exactly the
  // A operand of the next product: P stays in registers (FlashAttention-2).
  CHECK(*acc == *a);
}

TEST_CASE("mma column blocks give each warp along N contiguous columns", "[layout]") {
  // instr [16, 64] on 4 x 2 warps over [64, 128]: warps 0-3 (one warpgroup)
  // own columns 0-63, warps 4-7 columns 64-127; inside a block the fragments
  // are mma.sync's m16n8 ones, eight 8-column tiles a thread holds in order.
  auto blocks = std::make_shared<Layout>(*mma(4, 2));
  blocks->instrShape = {16, 64};
  auto acc = toLinearLayout(*blocks, {64, 128}, 8);
  REQUIRE(acc.isOk());
  CHECK(acc->coversShape());
  CHECK(acc->numRegisters() == 64 * 128 / 256);
  for (uint64_t warp = 0; warp < 8; ++warp)
    for (uint64_t lane = 0; lane < 32; ++lane)
      for (uint64_t r = 0; r < static_cast<uint64_t>(acc->numRegisters()); ++r) {
        const Coord c = acc->apply(r, lane, warp);
        CHECK(c[0] / 16 == static_cast<int64_t>(warp % 4));
        CHECK(c[1] / 64 == static_cast<int64_t>(warp / 4));
      }
  CHECK(acc->apply(0, 0, 0) == Coord{0, 0, 0});
  CHECK(acc->apply(1, 1, 0) == Coord{0, 3, 0});
  CHECK(acc->apply(2, 0, 0) == Coord{8, 0, 0});
  CHECK(acc->apply(4, 0, 0) == Coord{0, 8, 0});
  // B holds the same columns per warp, A the same rows (all columns of k).
  auto b = toLinearLayout(*dotOp(1, blocks), {32, 128}, 8);
  auto a = toLinearLayout(*dotOp(0, blocks), {64, 32}, 8);
  REQUIRE(b.isOk());
  REQUIRE(a.isOk());
  for (uint64_t warp = 0; warp < 8; ++warp)
    for (uint64_t r = 0; r < static_cast<uint64_t>(b->numRegisters()); ++r)
      CHECK(b->apply(r, 0, warp)[1] / 64 == static_cast<int64_t>(warp / 4));
  CHECK(a->apply(0, 0, 4) == a->apply(0, 0, 0));
  // instr [16, 8] is the interleaved tiling, and malformed column counts are named.
  auto interleaved = toLinearLayout(*mma(4, 2), {64, 128}, 8);
  REQUIRE(interleaved.isOk());
  CHECK(interleaved->apply(0, 0, 4) == Coord{0, 8, 0});
  for (std::vector<int64_t> bad : {std::vector<int64_t>{16, 12}, {16, 4}, {8, 64}, {16}}) {
    auto l = std::make_shared<Layout>(*blocks);
    l->instrShape = bad;
    auto built = toLinearLayout(*l, {64, 128}, 8);
    REQUIRE_FALSE(built.isOk());
    CHECK(built.diagnostic().str().find("'instr'") != std::string::npos);
  }
  auto threadMajor = std::make_shared<Layout>(*blocks);
  threadMajor->threadMajor = 1;
  CHECK_FALSE(toLinearLayout(*threadMajor, {64, 128}, 8).isOk());
}

TEST_CASE("slices, expansion and broadcast register maps", "[layout]") {
  auto parentEnc = blocked({1, 8}, {2, 16}, {4, 1}, {1, 0});
  auto full = toLinearLayout(*parentEnc, {16, 128}, 4);
  REQUIRE(full.isOk());
  LinearLayout rows = full->sliced(1);  // what a row reduction produces
  CHECK(rows.shape == std::vector<int64_t>{16});
  // Lanes that differ only in the column now hold the same row.
  CHECK(rows.apply(0, 1, 0) == Coord{0, 0, 0});
  // expand_dims then broadcast back: every register finds its row's value.
  LinearLayout column = rows.expanded(1);
  auto map = full->registerSourceMap(column, {1});
  REQUIRE(map.size() == static_cast<size_t>(full->numRegisters()));
  for (int64_t r = 0; r < full->numRegisters(); ++r)
    CHECK(column.registerCoord(static_cast<uint64_t>(map[r]))[0] == full->registerCoord(static_cast<uint64_t>(r))[0]);
  // Transposition permutes coordinates.
  LinearLayout t = full->transposed({1, 0});
  CHECK(t.apply(1, 0, 0) == Coord{1, 0, 0});
  CHECK(t.shape == std::vector<int64_t>{128, 16});
}

TEST_CASE("layouts for tiles smaller than the CTA tile replicate instead of failing", "[layout]") {
  auto ll = toLinearLayout(*blocked({1, 8}, {2, 16}, {4, 1}, {1, 0}), {1, 8}, 4);
  REQUIRE(ll.isOk());
  CHECK(ll->coversShape());
  CHECK(ll->numRegisters() == 8);
  CHECK(ll->apply(0, 1, 1) == Coord{0, 0, 0});  // lanes and warps beyond the tile repeat it
}

TEST_CASE("invalid layouts are reported, not crashed on", "[layout]") {
  CHECK_FALSE(toLinearLayout(*blocked({1, 8}, {2, 8}, {4, 1}, {1, 0}), {16, 128}, 4).isOk());   // 16 lanes
  CHECK_FALSE(toLinearLayout(*blocked({1, 8}, {2, 16}, {2, 1}, {1, 0}), {16, 128}, 4).isOk());  // 2 warps
  CHECK_FALSE(toLinearLayout(*blocked({1, 8}, {2, 16}, {4, 1}, {1, 0}), {16, 80}, 4).isOk());   // not pow2
  auto shared = std::make_shared<Layout>();
  shared->kind = LayoutKind::Shared;
  CHECK_FALSE(toLinearLayout(*shared, {16, 16}, 4).isOk());
  CHECK_FALSE(toLinearLayout(*mma(2, 2), {16, 16, 2}, 4).isOk());
}

TEST_CASE("registers whose values a tile's constancy proves equal", "[layout][axis]") {
  // A 64-key row where each thread holds keys t, t + 8, t + 16, t + 32 (t in 0..7:
  // lane bit 4 and the two warp bits), as decode's K and V copies need it.
  LinearLayout row;
  row.shape = {64};
  row.reg = {{8, 0, 0}, {16, 0, 0}, {32, 0, 0}};
  row.lane = {{0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {0, 0, 0}, {1, 0, 0}};
  row.warp = {{2, 0, 0}, {4, 0, 0}};
  auto facts = [](int64_t constancy) { return AxisFacts{{1}, {1}, {constancy}}; };
  const AxisFacts one = facts(1), eight = facts(8), sixteen = facts(16), thirtyTwo = facts(32), all = facts(64);
  CHECK(equalValueRegisterBits(row, {&one}) == 0);
  CHECK(equalValueRegisterBits(row, {&eight}) == 0);        // t + 8 starts the next chunk of 8
  CHECK(equalValueRegisterBits(row, {&sixteen}) == 0b001);  // t and t + 8 share a block of 16
  CHECK(equalValueRegisterBits(row, {&thirtyTwo}) == 0b011);
  CHECK(equalValueRegisterBits(row, {&all}) == 0b111);
  CHECK(equalValueRegisterBits(row, {&sixteen, &eight}) == 0);  // every tile must repeat
  // Threads spread over a chunk: a register step inside it can cross into the next.
  LinearLayout spread = row;
  spread.warp = {{2, 0, 0}, {12, 0, 0}};
  CHECK(equalValueRegisterBits(spread, {&sixteen}) == 0);
}

TEST_CASE("a pointer bitcast keeps byte divisibility and drops runs when the pointee's size changes", "[axis]") {
  // Rows of 132 bytes (a per-token-head cache row) and, 128 bytes in, the
  // row's f32 scale: 4-byte aligned pointers, one per row.
  Kernel kernel("scales");
  Attributes aligned;
  aligned.set("align", int64_t{16});
  Value* base = kernel.addParameter(Type::pointer(ScalarKind::I8), "rows", aligned);
  Builder b(kernel);
  Value* rowStarts = b.mul(b.arange(0, 16), b.splat(b.i32(132), {16}));
  Value* bytes = b.addPtr(b.splat(base, {16, 4}),
                          b.add(b.broadcast(b.expandDims(rowStarts, 1), {16, 4}),
                                b.broadcast(b.expandDims(b.arange(0, 4), 0), {16, 4})));
  Value* asWords = b.bitcast(bytes, ScalarKind::I32);   // 4 consecutive bytes are not 4 consecutive words
  Value* sameSize = b.bitcast(bytes, ScalarKind::F8E4M3);  // the same size keeps the runs
  REQUIRE(b.finish().isOk());
  const AxisInfo axis(kernel);
  CHECK(axis.facts(bytes).contiguity == std::vector<int64_t>{1, 4});
  CHECK(axis.facts(asWords).contiguity == std::vector<int64_t>{1, 1});
  // Along the rows every element is a run of its own, so divisibility there
  // holds for each: byte j of a row is aligned to nothing (the new unit
  // dimension of expand_dims over a run 0, 1, 2, ... is 1, not the run
  // start's).
  CHECK(axis.facts(asWords).divisibility[0] == 1);
  CHECK(axis.facts(sameSize).contiguity == std::vector<int64_t>{1, 4});
  // Along the byte run (dim 1) only the run's start was 4-byte aligned: its
  // other bytes, as f32 pointers, are aligned to nothing.
  CHECK(axis.facts(bytes).divisibility[1] >= 4);
  CHECK(axis.facts(asWords).divisibility[1] == 1);
}

TEST_CASE("a run's divisibility belongs to its first element: scaled or divided, the others lose it", "[axis]") {
  Kernel kernel("runs");
  Builder b(kernel);
  Value* keys = b.arange(0, 128);                             // 0, 1, 2, ...: runs of 128 from 0
  Value* strided = b.mul(keys, b.splat(b.i32(132), {128}));  // 0, 132, 264, ...: every value a multiple of 4
  Value* kept = b.mul(keys, b.splat(b.i32(1), {128}));       // times one: the run stays
  Value* blocks = b.div(keys, b.splat(b.i32(16), {128}));    // 0 (x16), 1 (x16), ...: 1 is odd
  Value* firstBlock = b.div(b.arange(0, 16), b.splat(b.i32(16), {16}));  // one run of 16 -> one value, 0
  REQUIRE(b.finish().isOk());
  const AxisInfo axis(kernel);
  CHECK(axis.facts(strided).divisibility[0] == 4);
  CHECK(axis.facts(strided).contiguity[0] == 1);
  CHECK(axis.facts(kept).contiguity[0] == 128);
  CHECK(axis.facts(kept).divisibility[0] == axis.facts(keys).divisibility[0]);
  CHECK(axis.facts(blocks).divisibility[0] == 1);
  CHECK(axis.facts(blocks).constancy[0] == 16);
  CHECK(axis.facts(firstBlock).divisibility[0] > 1);
  CHECK(axis.facts(firstBlock).constancy[0] == 16);
}

TEST_CASE("thread-major operands: each thread's k (or n) run is contiguous, the mma sees its own fragments",
          "[layout]") {
  // K of Q·Kᵀ in decode: [128 head dims, 128 keys], four warps along the keys.
  auto kEnc = dotOp(1, mma(1, 4), true);
  auto k = toLinearLayout(*kEnc, {128, 128}, 4);
  REQUIRE(k.isOk());
  CHECK(k->coversShape());
  // Lane t (of g = lane / 4) holds head dims [32t, 32t + 32) of key g: the
  // first 32 registers run along them, one 16-byte vector per 16.
  for (uint64_t lane = 0; lane < 32; ++lane)
    for (uint64_t r = 0; r < 32; ++r)
      CHECK(k->apply(r, lane, 0) == Coord{static_cast<int64_t>(32 * (lane % 4) + r), static_cast<int64_t>(lane / 4), 0});
  // Undoing the renumbering gives the standard fragments (same elements per
  // thread), and A (the query tile) renumbers its k exactly as B does.
  auto standardB = toLinearLayout(*dotOp(1, mma(1, 4)), {128, 128}, 4);
  auto kView = mmaNumbering(*kEnc, *k);
  REQUIRE(kView.isOk());
  CHECK_FALSE(kView->registerSourceMap(*standardB, {}).empty());
  auto qEnc = dotOp(0, mma(1, 4), true);
  auto q = toLinearLayout(*qEnc, {16, 128}, 4);
  REQUIRE(q.isOk());
  CHECK(q->coversShape());
  CHECK(renumbering(*qEnc, *q, 1) == renumbering(*kEnc, *k, 0));
  CHECK(renumbering(*kEnc, *k, 0).size() == 128);

  // V of P·V: [128 keys, 128 head dims], the accumulator's columns renumbered:
  // each thread holds 4 consecutive head dims of each of its keys.
  auto vEnc = dotOp(1, threadMajorMma(1, 4));
  auto v = toLinearLayout(*vEnc, {128, 128}, 4);
  REQUIRE(v.isOk());
  CHECK(v->coversShape());
  for (uint64_t r = 0; r < 4; ++r) CHECK(v->apply(r, 0, 0) == Coord{0, static_cast<int64_t>(r), 0});
  CHECK(v->apply(0, 4, 0) == Coord{0, 4, 0});   // lane group 1: the next 4 dims
  CHECK(v->apply(0, 1, 0) == Coord{2, 0, 0});   // lane 1: keys 2, 3
  CHECK(v->apply(0, 0, 1) == Coord{0, 32, 0});  // warp 1: dims 32..63
  auto accEnc = threadMajorMma(1, 4);
  auto acc = toLinearLayout(*accEnc, {16, 128}, 4);
  REQUIRE(acc.isOk());
  CHECK(acc->coversShape());
  CHECK(renumbering(*accEnc, *acc, 1) == renumbering(*vEnc, *v, 1));
  // Its row slice is the standard one (only columns are renumbered).
  auto rowsMajor = acc->sliced(1);
  auto standardAcc = toLinearLayout(*mma(1, 4), {16, 128}, 4);
  REQUIRE(standardAcc.isOk());
  CHECK(rowsMajor == standardAcc->sliced(1));
  // P, the A operand of P·V, is not renumbered: its k are the score columns.
  auto p = toLinearLayout(*dotOp(0, threadMajorMma(1, 4)), {16, 128}, 4);
  auto standardP = toLinearLayout(*dotOp(0, mma(1, 4)), {16, 128}, 4);
  REQUIRE(p.isOk());
  REQUIRE(standardP.isOk());
  CHECK(*p == *standardP);

  // Prefill: warps along M, so a thread holds 16 consecutive head dims of V.
  auto vPrefill = toLinearLayout(*dotOp(1, threadMajorMma(4, 1)), {64, 128}, 4);
  REQUIRE(vPrefill.isOk());
  for (uint64_t r = 0; r < 16; ++r) CHECK(vPrefill->apply(r, 0, 0) == Coord{0, static_cast<int64_t>(r), 0});

  // thread_major only means something for mma.sync layouts.
  auto blockedParent = dotOp(1, blocked({1, 8}, {2, 16}, {4, 1}, {1, 0}), true);
  CHECK_FALSE(toLinearLayout(*blockedParent, {16, 128}, 4).isOk());
}
