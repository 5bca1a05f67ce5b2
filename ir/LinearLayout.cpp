#include "ir/LinearLayout.h"

#include <algorithm>
#include <limits>
#include <map>

namespace attnjit::ir {

bool isPowerOfTwo(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

int log2Exact(int64_t x) {
  ATTNJIT_CHECK(isPowerOfTwo(x), "log2Exact of a non-power of two");
  int n = 0;
  while ((int64_t{1} << n) < x) ++n;
  return n;
}

namespace {

bool isZero(const Coord& c) { return c[0] == 0 && c[1] == 0 && c[2] == 0; }

Coord unit(int dim, int64_t value) {
  Coord c{0, 0, 0};
  c[dim] = value;
  return c;
}

std::string coordList(const std::vector<Coord>& bases, int rank) {
  std::string s = "[";
  for (size_t i = 0; i < bases.size(); ++i) {
    s += i ? ", [" : "[";
    for (int d = 0; d < rank; ++d) s += (d ? "," : "") + std::to_string(bases[i][d]);
    s += "]";
  }
  return s + "]";
}

// Zeroes basis components that fall outside the shape (those hardware bits then
// repeat elements), and drops register bases that became zero.
void fitToShape(LinearLayout& ll) {
  auto clip = [&](Coord& c) {
    for (int d = 0; d < ll.rank(); ++d)
      if (c[d] >= ll.shape[d]) c[d] = 0;
  };
  for (auto& c : ll.lane) clip(c);
  for (auto& c : ll.warp) clip(c);
  std::vector<Coord> regs;
  for (auto c : ll.reg) {
    clip(c);
    if (!isZero(c)) regs.push_back(c);
  }
  ll.reg = std::move(regs);
}

// Register bases repeating a CTA tile of extent `tile` (per dim) until it covers
// the shape, dims visited in `order`.
void addRepetitions(LinearLayout& ll, const std::vector<int64_t>& tile, const std::vector<int64_t>& order) {
  for (int64_t d : order)
    for (int64_t step = tile[d]; step < ll.shape[d]; step *= 2) ll.reg.push_back(unit(static_cast<int>(d), step));
}

support::Status checkPow2List(const std::vector<int64_t>& v, size_t rank, const char* what, const Layout& enc) {
  if (v.size() != rank)
    return support::Status::error({}, std::string("layout ") + enc.str() + ": '" + what + "' has " +
                                          std::to_string(v.size()) + " entries for a rank-" + std::to_string(rank) +
                                          " tile");
  for (int64_t x : v)
    if (!isPowerOfTwo(x))
      return support::Status::error(
          {}, std::string("layout ") + enc.str() + ": '" + what + "' entries must be powers of two");
  return support::Status::ok();
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

support::Expected<LinearLayout> blockedLayout(const Layout& enc, const std::vector<int64_t>& shape, int numWarps) {
  size_t rank = shape.size();
  for (auto [list, name] : {std::pair{&enc.sizePerThread, "spt"}, std::pair{&enc.threadsPerWarp, "tpw"},
                            std::pair{&enc.warpsPerCta, "wpc"}})
    if (support::Status s = checkPow2List(*list, rank, name, enc); !s) return s;
  if (enc.order.size() != rank)
    return support::Diagnostic{{}, "layout " + enc.str() + ": 'order' must list every dimension"};
  std::vector<bool> seen(rank, false);
  for (int64_t d : enc.order) {
    if (d < 0 || d >= static_cast<int64_t>(rank) || seen[d])
      return support::Diagnostic{{}, "layout " + enc.str() + ": 'order' must be a permutation of the dimensions"};
    seen[d] = true;
  }
  if (product(enc.threadsPerWarp) != 32)
    return support::Diagnostic{{}, "layout " + enc.str() + ": 'tpw' must multiply to 32 lanes"};
  if (product(enc.warpsPerCta) != numWarps)
    return support::Diagnostic{
        {}, "layout " + enc.str() + ": 'wpc' must multiply to num_warps (" + std::to_string(numWarps) + ")"};

  LinearLayout ll;
  ll.shape = shape;
  for (int64_t d : enc.order)
    for (int64_t s = 1; s < enc.sizePerThread[d]; s *= 2) ll.reg.push_back(unit(static_cast<int>(d), s));
  for (int64_t d : enc.order)
    for (int64_t s = 1; s < enc.threadsPerWarp[d]; s *= 2)
      ll.lane.push_back(unit(static_cast<int>(d), enc.sizePerThread[d] * s));
  for (int64_t d : enc.order)
    for (int64_t s = 1; s < enc.warpsPerCta[d]; s *= 2)
      ll.warp.push_back(unit(static_cast<int>(d), enc.sizePerThread[d] * enc.threadsPerWarp[d] * s));
  std::vector<int64_t> tile(rank);
  for (size_t d = 0; d < rank; ++d) tile[d] = enc.sizePerThread[d] * enc.threadsPerWarp[d] * enc.warpsPerCta[d];
  addRepetitions(ll, tile, enc.order);
  fitToShape(ll);
  return ll;
}

}  // namespace

support::Expected<int64_t> mmaWarpColumns(const Layout& enc) {
  if (enc.instrShape.empty()) return int64_t{8};
  if (enc.instrShape.size() != 2 || enc.instrShape[0] != 16 || enc.instrShape[1] < 8 ||
      !isPowerOfTwo(enc.instrShape[1]))
    return support::Diagnostic{{}, "layout " + enc.str() +
                                       ": 'instr' must be [16, n] with n a power of two of at least 8 (the columns "
                                       "each warp owns in a row of warps)"};
  return enc.instrShape[1];
}

namespace {

// mma.sync m16n8k16 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"),
// with g = lane / 4 (group) and t = lane % 4 (thread in group):
//   accumulator c0..c3: row g (+8 for c2, c3), column 2t + (0|1)
//   operand A a0..a7:   row g (+8 for a2,a3,a6,a7), column 2t + (0|1) (+8 for a4..a7)
//   operand B b0..b3:   row (k) 2t + (0|1) (+8 for b2, b3), column (n) g
support::Expected<LinearLayout> mmaLayout(const Layout& enc, const std::vector<int64_t>& shape, int numWarps) {
  if (shape.size() != 2) return support::Diagnostic{{}, "layout " + enc.str() + " needs a rank-2 tile"};
  if (enc.version != 2)
    return support::Diagnostic{{},
                               "layout " + enc.str() + ": only mma version 2 (mma.sync) has a distributed form so far"};
  if (support::Status s = checkPow2List(enc.warpsPerCta, 2, "wpc", enc); !s) return s;
  if (product(enc.warpsPerCta) != numWarps)
    return support::Diagnostic{
        {}, "layout " + enc.str() + ": 'wpc' must multiply to num_warps (" + std::to_string(numWarps) + ")"};
  auto columns = mmaWarpColumns(enc);
  if (!columns) return columns.status();
  int64_t wm = enc.warpsPerCta[0], wn = enc.warpsPerCta[1];
  LinearLayout ll;
  ll.shape = shape;
  ll.lane = {{0, 2, 0}, {0, 4, 0}, {1, 0, 0}, {2, 0, 0}, {4, 0, 0}};
  for (int64_t s = 1; s < wm; s *= 2) ll.warp.push_back({16 * s, 0, 0});
  for (int64_t s = 1; s < wn; s *= 2) ll.warp.push_back({0, *columns * s, 0});
  ll.reg = {{0, 1, 0}, {8, 0, 0}};
  for (int64_t s = 8; s < *columns; s *= 2) ll.reg.push_back({0, s, 0});
  addRepetitions(ll, {16 * wm, *columns * wn}, {1, 0});
  fitToShape(ll);
  return ll;
}

support::Expected<LinearLayout> dotOperandLayout(const Layout& enc, const std::vector<int64_t>& shape, int numWarps) {
  if (shape.size() != 2) return support::Diagnostic{{}, "layout " + enc.str() + " needs a rank-2 tile"};
  if (enc.parent && enc.parent->kind == LayoutKind::Blocked) {
    // FMA path: each thread holds the whole K extent of the rows (A) or columns
    // (B) of the result elements it computes.
    if (enc.opIdx != 0 && enc.opIdx != 1)
      return support::Diagnostic{{}, "layout " + enc.str() + ": idx must be 0 or 1"};
    int keep = enc.opIdx == 0 ? 0 : 1;  // the result dimension this operand shares
    std::vector<int64_t> parentShape = {1, 1};
    parentShape[keep] = shape[keep];
    auto parent = toLinearLayout(*enc.parent, parentShape, numWarps);
    if (!parent) return parent.status();
    LinearLayout ll = *parent;
    ll.shape = shape;
    int kDim = 1 - keep;
    for (int64_t s = 1; s < shape[kDim]; s *= 2) ll.reg.push_back(unit(kDim, s));
    return ll;
  }
  if (!enc.parent || enc.parent->kind != LayoutKind::Mma)
    return support::Diagnostic{{}, "layout " + enc.str() + ": the parent of a dot operand must be #mma or #blocked"};
  const Layout& mma = *enc.parent;
  if (mma.version != 2 || mma.warpsPerCta.size() != 2)
    return support::Diagnostic{{}, "layout " + enc.str() + ": only mma version 2 operands are supported"};
  if (product(mma.warpsPerCta) != numWarps)
    return support::Diagnostic{{}, "layout " + enc.str() + ": parent 'wpc' must multiply to num_warps"};
  auto columns = mmaWarpColumns(mma);
  if (!columns) return columns.status();
  int64_t wm = mma.warpsPerCta[0], wn = mma.warpsPerCta[1];
  LinearLayout ll;
  ll.shape = shape;
  if (enc.opIdx == 0) {  // A: [M, K]; warps along N hold the same rows
    ll.reg = {{0, 1, 0}, {8, 0, 0}, {0, 8, 0}};
    ll.lane = {{0, 2, 0}, {0, 4, 0}, {1, 0, 0}, {2, 0, 0}, {4, 0, 0}};
    for (int64_t s = 1; s < wm; s *= 2) ll.warp.push_back({16 * s, 0, 0});
    for (int64_t s = 1; s < wn; s *= 2) ll.warp.push_back({0, 0, 0});
    addRepetitions(ll, {16 * wm, 16}, {1, 0});
  } else if (enc.opIdx == 1) {  // B: [K, N]; warps along M hold the same columns
    ll.reg = {{1, 0, 0}, {8, 0, 0}};
    for (int64_t s = 8; s < *columns; s *= 2) ll.reg.push_back({0, s, 0});
    ll.lane = {{2, 0, 0}, {4, 0, 0}, {0, 1, 0}, {0, 2, 0}, {0, 4, 0}};
    for (int64_t s = 1; s < wm; s *= 2) ll.warp.push_back({0, 0, 0});
    for (int64_t s = 1; s < wn; s *= 2) ll.warp.push_back({0, *columns * s, 0});
    addRepetitions(ll, {16, *columns * wn}, {0, 1});
  } else {
    return support::Diagnostic{{}, "layout " + enc.str() + ": idx must be 0 (A) or 1 (B)"};
  }
  fitToShape(ll);
  return ll;
}

// ---- thread_major (ir/Types.h) ----

// A coordinate value with its bits moved: bit i to bit perm[i].
int64_t moveBits(int64_t value, const std::vector<int>& perm) {
  int64_t out = 0;
  for (size_t i = 0; i < perm.size(); ++i)
    if (value >> i & 1) out |= int64_t{1} << perm[i];
  return out;
}

// The renumbering thread_major applies to coordinate `dim` of tiles whose mma
// operand `owner` (the B operand's standard layout) holds that coordinate: bit i
// moves to bit perm[i]; the bits owner's registers hold take the lowest places
// (in their order of significance), then its lanes', then its warps'. For K of
// m16n8k16 (registers hold k bits 0, 3, 4..., lanes bits 1-2) a thread then
// holds 32 consecutive k of 128; for N of P·V's B operand with four warps along
// N (lanes hold n bits 0-2, warps bits 3-4, registers 5-6), 4 consecutive n.
std::vector<int> threadMajorBits(const LinearLayout& owner, int dim) {
  const int bits = log2Exact(owner.shape[static_cast<size_t>(dim)]);
  std::vector<int> perm(static_cast<size_t>(bits), -1);
  int next = 0;
  for (const std::vector<Coord>* bases : {&owner.reg, &owner.lane, &owner.warp}) {
    std::vector<int> held;
    for (const Coord& c : *bases)
      if (isPowerOfTwo(c[dim])) held.push_back(log2Exact(c[dim]));
    std::sort(held.begin(), held.end());
    for (int bit : held)
      if (bit < bits && perm[static_cast<size_t>(bit)] < 0) perm[static_cast<size_t>(bit)] = next++;
  }
  for (int& p : perm)
    if (p < 0) p = next++;
  return perm;
}

void renumber(LinearLayout& ll, int dim, const std::vector<int>& perm) {
  for (std::vector<Coord>* bases : {&ll.reg, &ll.lane, &ll.warp})
    for (Coord& c : *bases) c[dim] = moveBits(c[dim], perm);
}

struct Renumbering {
  int dim;
  std::vector<int> perm;
};

LayoutRef withoutThreadMajor(const Layout& encoding) {
  auto copy = std::make_shared<Layout>(encoding);
  copy->threadMajor = 0;
  if (copy->parent && copy->parent->threadMajor) copy->parent = withoutThreadMajor(*copy->parent);
  return copy;
}

// The renumberings thread_major asks of a layout of `encoding` and `shape`
// (none for other layouts, or an error naming the layout).
support::Expected<std::vector<Renumbering>> threadMajorRenumberings(const Layout& encoding,
                                                                    const std::vector<int64_t>& shape, int numWarps) {
  std::vector<Renumbering> out;
  const bool mma = encoding.kind == LayoutKind::Mma;
  const bool operand = encoding.kind == LayoutKind::DotOperand;
  const bool renumbersN = (mma && encoding.threadMajor) ||
                          (operand && encoding.opIdx == 1 && encoding.parent && encoding.parent->threadMajor);
  const bool renumbersK = operand && encoding.threadMajor;
  if (!renumbersN && !renumbersK) return out;
  const Layout& mmaEncoding = mma ? encoding : *encoding.parent;
  if (mmaEncoding.kind != LayoutKind::Mma || mmaEncoding.version != 2 || shape.size() != 2)
    return support::Diagnostic{
        {}, "layout " + encoding.str() + ": thread_major applies to mma version 2 layouts and their operands"};
  if (auto columns = mmaWarpColumns(mmaEncoding); !columns || *columns != 8)
    return support::Diagnostic{{}, "layout " + encoding.str() + ": thread_major needs instr = [16, 8]"};
  Layout b;
  b.kind = LayoutKind::DotOperand;
  b.opIdx = 1;
  b.kWidth = 2;
  b.parent = withoutThreadMajor(mmaEncoding);
  const int64_t wn = mmaEncoding.warpsPerCta.size() == 2 ? mmaEncoding.warpsPerCta[1] : 1;
  if (renumbersN) {
    auto owner = toLinearLayout(b, {16, shape[1]}, numWarps);
    if (!owner) return owner.status();
    out.push_back({1, threadMajorBits(*owner, 1)});
  }
  if (renumbersK) {
    const int kDim = encoding.opIdx == 0 ? 1 : 0;
    auto owner = toLinearLayout(b, {shape[static_cast<size_t>(kDim)], 8 * wn}, numWarps);
    if (!owner) return owner.status();
    out.push_back({kDim, threadMajorBits(*owner, 0)});
  }
  return out;
}

}  // namespace

support::Expected<LinearLayout> mmaNumbering(const Layout& encoding, const LinearLayout& layout) {
  auto renumberings = threadMajorRenumberings(encoding, layout.shape, layout.numWarps());
  if (!renumberings) return renumberings.status();
  LinearLayout out = layout;
  for (const Renumbering& r : *renumberings) {
    std::vector<int> inverse(r.perm.size());
    for (size_t i = 0; i < r.perm.size(); ++i) inverse[static_cast<size_t>(r.perm[i])] = static_cast<int>(i);
    renumber(out, r.dim, inverse);
  }
  return out;
}

Coord LinearLayout::apply(uint64_t r, uint64_t l, uint64_t w) const {
  Coord c{0, 0, 0};
  auto acc = [&](const std::vector<Coord>& bases, uint64_t bits) {
    for (size_t i = 0; i < bases.size(); ++i)
      if (bits >> i & 1)
        for (int d = 0; d < 3; ++d) c[d] ^= bases[i][d];
  };
  acc(reg, r);
  acc(lane, l);
  acc(warp, w);
  return c;
}

bool LinearLayout::coversShape() const {
  int64_t total = 1;
  for (int64_t s : shape) total *= s;
  if (total > (int64_t{1} << 24)) return false;
  std::vector<bool> seen(static_cast<size_t>(total), false);
  for (uint64_t w = 0; w < (uint64_t{1} << warp.size()); ++w)
    for (uint64_t l = 0; l < (uint64_t{1} << lane.size()); ++l)
      for (uint64_t r = 0; r < static_cast<uint64_t>(numRegisters()); ++r) {
        Coord c = apply(r, l, w);
        int64_t idx = 0;
        for (int d = 0; d < rank(); ++d) {
          if (c[d] >= shape[d]) return false;
          idx = idx * shape[d] + c[d];
        }
        seen[static_cast<size_t>(idx)] = true;
      }
  for (bool b : seen)
    if (!b) return false;
  return true;
}

bool LinearLayout::sameThreadMapping(const LinearLayout& o) const {
  return shape == o.shape && lane == o.lane && warp == o.warp;
}

bool LinearLayout::operator==(const LinearLayout& o) const {
  return shape == o.shape && reg == o.reg && lane == o.lane && warp == o.warp;
}

std::string LinearLayout::str() const {
  std::string s = "#linear<shape=[";
  for (int d = 0; d < rank(); ++d) s += (d ? "," : "") + std::to_string(shape[d]);
  return s + "], reg=" + coordList(reg, rank()) + ", lane=" + coordList(lane, rank()) +
         ", warp=" + coordList(warp, rank()) + ">";
}

LinearLayout LinearLayout::sliced(int dim) const {
  auto drop = [dim](Coord c) {
    for (int d = dim; d < 2; ++d) c[d] = c[d + 1];
    c[2] = 0;
    return c;
  };
  LinearLayout out;
  out.shape = shape;
  out.shape.erase(out.shape.begin() + dim);
  for (const auto& c : lane) out.lane.push_back(drop(c));
  for (const auto& c : warp) out.warp.push_back(drop(c));
  for (const auto& c : reg)
    if (Coord d = drop(c); !isZero(d)) out.reg.push_back(d);
  return out;
}

LinearLayout LinearLayout::expanded(int dim) const {
  auto insert = [dim](Coord c) {
    for (int d = 2; d > dim; --d) c[d] = c[d - 1];
    c[dim] = 0;
    return c;
  };
  LinearLayout out;
  out.shape = shape;
  out.shape.insert(out.shape.begin() + dim, 1);
  for (const auto& c : reg) out.reg.push_back(insert(c));
  for (const auto& c : lane) out.lane.push_back(insert(c));
  for (const auto& c : warp) out.warp.push_back(insert(c));
  return out;
}

LinearLayout LinearLayout::transposed(const std::vector<int64_t>& perm) const {
  auto permute = [&](const Coord& c) {
    Coord o{0, 0, 0};
    for (size_t i = 0; i < perm.size(); ++i) o[i] = c[perm[i]];
    return o;
  };
  LinearLayout out;
  for (int64_t p : perm) out.shape.push_back(shape[p]);
  for (const auto& c : reg) out.reg.push_back(permute(c));
  for (const auto& c : lane) out.lane.push_back(permute(c));
  for (const auto& c : warp) out.warp.push_back(permute(c));
  return out;
}

std::vector<int64_t> LinearLayout::registerSourceMap(const LinearLayout& source,
                                                     const std::vector<int>& broadcastDims) const {
  auto project = [&](Coord c) {
    for (int d : broadcastDims) c[d] = 0;
    return c;
  };
  if (lane.size() != source.lane.size() || warp.size() != source.warp.size()) return {};
  for (size_t i = 0; i < lane.size(); ++i)
    if (project(lane[i]) != source.lane[i]) return {};
  for (size_t i = 0; i < warp.size(); ++i)
    if (project(warp[i]) != source.warp[i]) return {};
  std::map<Coord, int64_t> sourceRegs;
  for (int64_t r = 0; r < source.numRegisters(); ++r) sourceRegs.emplace(source.registerCoord(r), r);
  std::vector<int64_t> map;
  for (int64_t r = 0; r < numRegisters(); ++r) {
    auto it = sourceRegs.find(project(registerCoord(r)));
    if (it == sourceRegs.end()) return {};
    map.push_back(it->second);
  }
  return map;
}

support::Expected<LinearLayout> toLinearLayout(const Layout& encoding, const std::vector<int64_t>& shape,
                                               int numWarps) {
  if (shape.empty() || shape.size() > 3)
    return support::Diagnostic{{}, "a distributed layout needs a tile of rank 1..3"};
  for (int64_t s : shape)
    if (!isPowerOfTwo(s))
      return support::Diagnostic{{}, "codegen needs power-of-two tile extents; got " + std::to_string(s) +
                                " (pad the tile and mask the extra elements)"};
  if (!isPowerOfTwo(numWarps) || numWarps > 32)
    return support::Diagnostic{{}, "num_warps must be a power of two up to 32"};
  auto renumberings = threadMajorRenumberings(encoding, shape, numWarps);
  if (!renumberings) return renumberings.status();
  if (!renumberings->empty()) {
    auto standard = toLinearLayout(*withoutThreadMajor(encoding), shape, numWarps);
    if (!standard) return standard.status();
    LinearLayout ll = *standard;
    for (const Renumbering& r : *renumberings) {
      renumber(ll, r.dim, r.perm);
      // Registers along the renumbered coordinate first, by value: a thread's
      // consecutive elements are then consecutive registers (vector accesses,
      // and the pairs packed conversions and mma operands take).
      auto rank = [&](const Coord& c) {
        return c[r.dim] != 0 && c[1 - r.dim] == 0 ? c[r.dim] : std::numeric_limits<int64_t>::max();
      };
      std::stable_sort(ll.reg.begin(), ll.reg.end(), [&](const Coord& x, const Coord& y) { return rank(x) < rank(y); });
    }
    return ll;
  }
  switch (encoding.kind) {
    case LayoutKind::Blocked:
      return blockedLayout(encoding, shape, numWarps);
    case LayoutKind::Mma:
      return mmaLayout(encoding, shape, numWarps);
    case LayoutKind::DotOperand:
      return dotOperandLayout(encoding, shape, numWarps);
    case LayoutKind::Slice: {
      if (!encoding.parent) return support::Diagnostic{{}, "layout " + encoding.str() + " has no parent"};
      if (encoding.dim < 0 || encoding.dim > static_cast<int64_t>(shape.size()))
        return support::Diagnostic{{}, "layout " + encoding.str() + ": dim out of range"};
      std::vector<int64_t> parentShape = shape;
      parentShape.insert(parentShape.begin() + encoding.dim, 1);
      auto parent = toLinearLayout(*encoding.parent, parentShape, numWarps);
      if (!parent) return parent.status();
      return parent->sliced(static_cast<int>(encoding.dim));
    }
    case LayoutKind::Shared:
      return support::Diagnostic{{}, "layout " + encoding.str() + " describes shared memory, not registers"};
  }
  return support::Diagnostic{{}, "unknown layout kind"};
}

}  // namespace attnjit::ir
