// Layout assignment: decides how every tile value is distributed over threads.
//
// 1. Anchors decide: loads and stores take a coalesced #blocked layout (16-byte
//    vectors along the contiguous last dimension; a store keeps its value's
//    blocked layout when that already allows vectors as wide as the pointers'
//    alignment does, see storeLayout); dot results take #mma (tensor
//    cores, f16/bf16 operands on sm_80+) or #blocked (FMA path), their operands
//    #dot_op of that parent; reductions give #slice of their operand's layout.
// 2. Every other computed value follows its operands (elementwise ops take the
//    layout of their first operand that has one); loop-carried values take the
//    layout of what the loop yields; a value nothing decides gets a default
//    coalesced #blocked layout.
// 3. "Cheap" values — constants, arange, splat, broadcast, expand_dims and
//    elementwise ops on those, and any integer, mask or pointer arithmetic — are
//    not converted between layouts: they are recomputed in every layout a
//    consumer needs (cloned next to the original), which costs a few integer ops
//    instead of a trip through shared memory; only their computed leaves are
//    converted. A row loaded through such pointers (a tile's block numbers) is
//    loaded again in the consumer's layout when each thread needs few of its
//    elements, and converted otherwise (worthReloading).
// 4. Where a computed value's layout differs from what its consumer needs, a
//    convert_layout is inserted right after the value's definition.
#include <algorithm>
#include <bit>
#include <functional>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "compiler/passes/IrRewriting.h"
#include "compiler/passes/Passes.h"
#include "ir/AxisInfo.h"
#include "ir/KernelAttributes.h"
#include "ir/LinearLayout.h"

namespace attnjit::compiler {

using namespace ir;

namespace {

LayoutRef blocked(std::vector<int64_t> spt, std::vector<int64_t> tpw, std::vector<int64_t> wpc,
                  std::vector<int64_t> order) {
  auto l = std::make_shared<Layout>();
  l->kind = LayoutKind::Blocked;
  l->sizePerThread = std::move(spt);
  l->threadsPerWarp = std::move(tpw);
  l->warpsPerCta = std::move(wpc);
  l->order = std::move(order);
  return l;
}

// Coalesced blocked layout: each thread holds up to a 16-byte vector along the
// contiguous dimension (`contiguousDim`, at most `contiguity` elements), lanes
// fill that dimension first, then the others from the last; warps go to the
// slowest dimensions.
LayoutRef coalescedLayout(const std::vector<int64_t>& shape, int elemBytes, int numWarps, int contiguousDim = -1,
                          int64_t contiguity = 1 << 30) {
  size_t rank = shape.size();
  if (contiguousDim < 0) contiguousDim = static_cast<int>(rank) - 1;
  std::vector<int64_t> spt(rank, 1), tpw(rank, 1), wpc(rank, 1), order;
  order.push_back(contiguousDim);
  for (size_t i = rank; i-- > 0;)
    if (static_cast<int>(i) != contiguousDim) order.push_back(static_cast<int64_t>(i));
  size_t last = static_cast<size_t>(contiguousDim);
  spt[last] = std::max<int64_t>(1, std::min<int64_t>({16 / elemBytes, shape[last], contiguity}));
  int64_t lanes = 32;
  for (int64_t d : order) {
    int64_t t = std::min(lanes, std::max<int64_t>(1, shape[d] / spt[d]));
    tpw[d] = t;
    lanes /= t;
  }
  tpw[order.back()] *= lanes;
  int64_t warps = numWarps;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    int64_t d = *it;
    int64_t w = std::min(warps, std::max<int64_t>(1, shape[d] / (spt[d] * tpw[d])));
    wpc[d] = w;
    warps /= w;
  }
  wpc[order.back()] *= warps;
  return blocked(spt, tpw, wpc, order);
}

LayoutRef sliceOf(int64_t dim, LayoutRef parent) {
  auto l = std::make_shared<Layout>();
  l->kind = LayoutKind::Slice;
  l->dim = dim;
  l->parent = std::move(parent);
  return l;
}

// Warps along M first (up to one per 16 rows), the rest along N; each warp
// owns `warpColumns` contiguous columns before the next along N takes over.
LayoutRef mmaLayout(int64_t m, int numWarps, bool threadMajor = false, int64_t warpColumns = 8) {
  auto l = std::make_shared<Layout>();
  l->kind = LayoutKind::Mma;
  l->threadMajor = threadMajor ? 1 : 0;
  l->version = 2;
  int64_t wm = std::min<int64_t>(numWarps, std::max<int64_t>(1, m / 16));
  l->warpsPerCta = {wm, numWarps / wm};
  l->instrShape = {16, warpColumns};
  return l;
}

LayoutRef dotOperand(int64_t idx, LayoutRef parent, int kWidth, bool threadMajor = false) {
  auto l = std::make_shared<Layout>();
  l->kind = LayoutKind::DotOperand;
  l->threadMajor = threadMajor ? 1 : 0;
  l->opIdx = idx;
  l->kWidth = kWidth;
  l->parent = std::move(parent);
  return l;
}

// A blocked layout with its dimensions permuted (result dim i = input dim perm[i]).
LayoutRef permuteBlocked(const LayoutRef& in, const std::vector<int64_t>& perm) {
  if (!in || in->kind != LayoutKind::Blocked) return nullptr;
  std::vector<int64_t> spt, tpw, wpc, order, inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    spt.push_back(in->sizePerThread[perm[i]]);
    tpw.push_back(in->threadsPerWarp[perm[i]]);
    wpc.push_back(in->warpsPerCta[perm[i]]);
    inverse[perm[i]] = static_cast<int64_t>(i);
  }
  for (int64_t d : in->order) order.push_back(inverse[d]);
  return blocked(spt, tpw, wpc, order);
}

// The layout of reshape(in) from `from` to `to` when the reshape splits the
// operand's contiguous last dimension into [extent / k, k] with k dividing the
// elements each thread holds along it: every element stays in its thread and
// register (codegen then moves no data). nullptr for any other reshape.
LayoutRef splitContiguousDim(const LayoutRef& in, const std::vector<int64_t>& from, const std::vector<int64_t>& to) {
  if (!in || in->kind != LayoutKind::Blocked || from.empty() || to.size() != from.size() + 1) return nullptr;
  const size_t last = from.size() - 1;
  if (in->order.empty() || in->order[0] != static_cast<int64_t>(last)) return nullptr;
  for (size_t i = 0; i < last; ++i)
    if (from[i] != to[i]) return nullptr;
  const int64_t k = to[last + 1];
  if (k < 1 || to[last] * k != from[last] || in->sizePerThread[last] % k != 0) return nullptr;
  std::vector<int64_t> spt = in->sizePerThread, tpw = in->threadsPerWarp, wpc = in->warpsPerCta;
  spt[last] /= k;
  spt.push_back(k);
  tpw.push_back(1);
  wpc.push_back(1);
  std::vector<int64_t> order{static_cast<int64_t>(last + 1)};
  order.insert(order.end(), in->order.begin(), in->order.end());
  return blocked(spt, tpw, wpc, order);
}

// The blocked layout `l` amounts to: itself, or a slice of a blocked parent
// along a dimension neither its lanes nor its warps spread (the result of a
// reduction inside each thread's registers). nullptr otherwise.
LayoutRef asBlocked(const LayoutRef& l) {
  if (!l) return nullptr;
  if (l->kind == LayoutKind::Blocked) return l;
  if (l->kind != LayoutKind::Slice || !l->parent || l->parent->kind != LayoutKind::Blocked) return nullptr;
  const Layout& p = *l->parent;
  const size_t sliced = static_cast<size_t>(l->dim);
  if (sliced >= p.sizePerThread.size() || p.threadsPerWarp[sliced] != 1 || p.warpsPerCta[sliced] != 1) return nullptr;
  std::vector<int64_t> spt, tpw, wpc, order;
  for (size_t d = 0; d < p.sizePerThread.size(); ++d) {
    if (d == sliced) continue;
    spt.push_back(p.sizePerThread[d]);
    tpw.push_back(p.threadsPerWarp[d]);
    wpc.push_back(p.warpsPerCta[d]);
  }
  for (int64_t d : p.order)
    if (d != l->dim) order.push_back(d > l->dim ? d - 1 : d);
  return blocked(spt, tpw, wpc, order);
}

std::vector<int64_t> inversePermutation(const std::vector<int64_t>& perm) {
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return inv;
}

bool sameLayout(const LayoutRef& a, const LayoutRef& b) {
  if (!a || !b) return a == b;
  return *a == *b;
}


// What the loop yields for `carried`, one of its body's iter_args; null for
// any other value.
const Value* yieldedFor(const Value* carried) {
  if (carried->definingOp()) return nullptr;
  const Operation* loop = carried->ownerBlock()->parentOp();
  if (!loop || loop->opcode() != Opcode::For || carried->index() == 0) return nullptr;
  const size_t iter = carried->index() - 1;
  const Operation* yield = loop->region(0)->back();
  return yield && yield->opcode() == Opcode::Yield && iter < yield->numOperands() ? yield->operand(iter) : nullptr;
}

bool isElementwise(Opcode op) {
  switch (op) {
    case Opcode::Add: case Opcode::Sub: case Opcode::Mul: case Opcode::Div: case Opcode::Rem:
    case Opcode::Min: case Opcode::Max: case Opcode::And: case Opcode::Or: case Opcode::Xor:
    case Opcode::Shl: case Opcode::Shr: case Opcode::Neg: case Opcode::Abs: case Opcode::Exp2:
    case Opcode::Log2: case Opcode::Exp: case Opcode::Log: case Opcode::Sqrt: case Opcode::Rsqrt:
    case Opcode::Tanh: case Opcode::Cmp: case Opcode::Select: case Opcode::Cast: case Opcode::Bitcast:
    case Opcode::UnpackNibbles: case Opcode::AddPtr:
      return true;
    default:
      return false;
  }
}

class LayoutAssigner {
 public:
  LayoutAssigner(Kernel& kernel, const PassOptions& options) : kernel_(kernel), options_(options), axis_(kernel) {}

  support::Status run() {
    classifyCheap(kernel_.body());
    if (kernelFlag(kernel_, KernelAttribute::ThreadMajorOperands)) findByteOperands(kernel_.body());
    apply(kernel_.body());
    return status_;
  }

 private:
  // ---- phase 1: which values are cheap, and what layout the others get ----

  void classifyCheap(const Block& block) {
    for (const auto& op : block.operations()) {
      for (const auto& region : op->regions()) {
        // Loop-carried 2D tiles are data too (the pipeliner carries the next
        // tile's loads this way).
        for (const auto& argument : region->arguments())
          if (argument->type().isTile() && argument->type().rank() >= 2) loadedData_.insert(argument.get());
        classifyCheap(*region);
      }
      if (op->numResults() != 1 || !op->result()->type().isTile()) continue;
      Opcode code = op->opcode();
      if (code == Opcode::Load && op->result()->type().rank() >= 2) loadedData_.insert(op->result());
      if (code == Opcode::Load && isReloadableRow(*op)) {
        cheap_.insert(op->result());
        continue;
      }
      // What is computed from loaded data is data, through any op (a reshape of
      // quantized values into pairs included).
      bool fromLoadedData = false;
      for (Value* v : op->operands())
        if (loadedData_.count(v)) fromLoadedData = true;
      if (fromLoadedData) loadedData_.insert(op->result());
      bool candidate = code == Opcode::Constant || code == Opcode::Arange || code == Opcode::Splat ||
                       code == Opcode::Broadcast || code == Opcode::ExpandDims || isElementwise(code);
      if (!candidate) continue;
      // Integer, mask and pointer arithmetic is address computation: recomputing
      // it in the consumer's layout (converting only its small non-cheap leaves,
      // such as a row of block numbers) beats converting the result tile.
      // Integers computed from loaded 2D tiles are data, not addresses (a
      // quantized KV tile being unpacked): they stay in the load's layout so the
      // conversion happens once, on the unpacked 16-bit operand (ldmatrix),
      // instead of on raw bytes read back one by one.
      const Type& t = op->result()->type();
      bool addressMath = (t.hasPointerElements() || isInteger(t.scalarKind())) && !fromLoadedData;
      bool allCheap = true;
      for (Value* v : op->operands())
        if (v->type().isTile() && !cheap_.count(v)) allCheap = false;
      // Broadcasting is a register renumbering in whatever layout the consumer
      // wants once its (smaller) operand is in the matching slice: converting that
      // operand beats converting the broadcast tile, so it is always recomputed.
      bool broadcasting = code == Opcode::Broadcast || code == Opcode::ExpandDims;
      if (allCheap || addressMath || broadcasting) cheap_.insert(op->result());
    }
  }

  // ---- B operands converted from 1-byte tiles (quantized K and V) ----
  //
  // A dot whose B operand is a cast of a loaded fp8 or int8 tile (or the
  // unpack_nibbles of an int4 one: two dots read each raw tile) would convert
  // the cast's 16-bit result into the operand layout through shared memory (a
  // store, two barriers, ldmatrix): for a decode kernel that round trip, on top
  // of reading the raw tile, kept the memory pipes busy while DRAM idled. When
  // the raw tile's contiguous dimension is the dot's k (K in Q·Kᵀ) or n (V in
  // P·V), the operands instead take thread_major layouts (ir/Types.h): each
  // thread's elements along that dimension are contiguous, so the raw tile is
  // read straight into the operand layout with vector loads (16 bytes along k,
  // 4 along n with four warps), and the cast happens in registers after it.
  // The kernel attribute thread_major_operands = 0 turns this off.
  enum class ByteOperand { None, AlongK, AlongN };

  void findByteOperands(const Block& block) {
    std::unordered_map<const Value*, int> useCount = countUses(kernel_);
    std::function<void(const Block&)> visit = [&](const Block& b) {
      for (const auto& op : b.operations()) {
        for (const auto& region : op->regions()) visit(*region);
        if (op->opcode() != Opcode::Dot || !useMma(*op)) continue;
        // Only where the warps split the dot's columns (decode tiles): with
        // warps along M each one needs the whole B tile, and reading it into
        // its own operand layout would convert every byte once per warp (8
        // times for prefill's 8 warps of 16 rows), where the conversion
        // through shared memory converts it once per CTA.
        if (mmaLayout(op->result()->type().shape()[0], options_.numWarps)->warpsPerCta[0] != 1) continue;
        const Value* operand = op->operand(1);
        const Operation* cast = operand->definingOp();
        if (!cast || (cast->opcode() != Opcode::Cast && cast->opcode() != Opcode::UnpackNibbles) ||
            useCount[operand] != 1)
          continue;
        const ScalarKind kind = cast->operand(0)->type().scalarKind();
        if (kind != ScalarKind::F8E4M3 && kind != ScalarKind::F8E5M2 && kind != ScalarKind::I8) continue;
        // Through reinterpretations of the bytes (fp8 per-token-head caches are
        // loaded as i8), which then happen in the operand layout too.
        std::vector<const Operation*> chain = {cast};
        const Value* raw = cast->operand(0);
        while (raw->definingOp() && raw->definingOp()->opcode() == Opcode::Bitcast && useCount[raw] == 1) {
          chain.push_back(raw->definingOp());
          raw = raw->definingOp()->operand(0);
        }
        if (!raw->type().isTile() || raw->type().rank() != 2 || storageBytes(raw->type().scalarKind()) != 1) continue;
        if (!loadedData_.count(raw) || cheap_.count(raw)) continue;
        LayoutRef rawLayout = infer(raw);
        if (!rawLayout || rawLayout->kind != LayoutKind::Blocked || rawLayout->order.empty()) continue;
        const ByteOperand along = rawLayout->order[0] == 0 ? ByteOperand::AlongK : ByteOperand::AlongN;
        // Nibbles along n (V's int4 bytes in P·V) read in 16-byte vectors stay
        // with the conversion through shared memory: thread-major, a thread's
        // run along n is half of int8's (2 bytes at D = 128), read and paired
        // one key at a time, where the blocked read unpacks pairs from whole
        // words (B=64 ctx 4096: 0.184 ms against 0.209). Rows copied 4 bytes at
        // a time (inline scales) have no such reads to lose and go thread-major
        // (0.231 against 0.247 ms; docs/perf-log.md, 2026-12-04).
        if (cast->opcode() == Opcode::UnpackNibbles && along == ByteOperand::AlongN &&
            readsSixteenBytes(raw, rawLayout))
          continue;
        byteOperands_[op.get()] = along;
        for (const Operation* link : chain) byteOperandCasts_[link] = op.get();
        if (along == ByteOperand::AlongN || readsSixteenBytes(raw, rawLayout)) lateReaders_.insert(chain.back());
      }
    };
    visit(block);
  }

  // Whether the tile `raw` (a load, or a loop-carried tile a load yields) is
  // loaded in 16-byte vectors along `layout`'s contiguous dimension.
  bool readsSixteenBytes(const Value* raw, const LayoutRef& layout) const {
    const Value* loaded = raw->definingOp() ? raw : yieldedFor(raw);
    const Operation* load = loaded ? loaded->definingOp() : nullptr;
    if (!load || load->opcode() != Opcode::Load) return false;
    const AxisFacts& f = axis_.facts(load->operand(0));
    const size_t d = static_cast<size_t>(layout->order[0]);
    const int64_t bytes = storageBytes(raw->type().scalarKind());
    return d < f.contiguity.size() && f.contiguity[d] * bytes >= 16 && f.divisibility[d] >= 16;
  }

  ByteOperand byteOperandOf(const Operation& dot) const {
    auto found = byteOperands_.find(&dot);
    return found == byteOperands_.end() ? ByteOperand::None : found->second;
  }

  // The operand layout dot `dot` with result layout `result` needs at index i.
  LayoutRef dotOperandLayout(const Operation& dot, size_t i, const LayoutRef& result) {
    if (i == 2) return result;
    int kWidth = result->kind == LayoutKind::Mma ? 2 : 1;
    return dotOperand(static_cast<int64_t>(i), result, kWidth, byteOperandOf(dot) == ByteOperand::AlongK);
  }

  // A row (rank-1 tile) loaded through cheap pointers under a cheap mask, such
  // as a tile's block numbers, may be loaded again in a layout a consumer needs
  // (see worthReloading): the lanes that want the same element read one
  // L1-cached address, where a conversion goes through shared memory between
  // two barriers (a 128-row prefill tile paid four barriers per iteration to
  // hand its block numbers to the K and the V copies).
  bool isReloadableRow(const Operation& load) const {
    if (load.result()->type().rank() != 1) return false;
    for (Value* v : load.operands())
      if (v->type().isTile() && !cheap_.count(v)) return false;
    return true;
  }

  // Coalesced layout for a load or store through the pointer tile `pointers`:
  // its most contiguous dimension (axis analysis) is the fast one.
  // Each thread's run along it is one access as wide as the alignment allows,
  // the lanes as for 16-byte runs: a run of 16 bytes at 4-byte alignment (a
  // per-token-head cache row) is four separate 4-byte accesses, and the 8 lanes
  // of a row would issue each at a 16-byte stride, one warp instruction
  // touching ~18 sectors of four rows for 128 bytes. With 4-byte runs the same
  // 8 lanes cover 32 contiguous bytes per instruction (8 sectors) and each
  // thread repeats along the row, keeping its rows (and their addresses) as
  // before. Below 4 bytes of alignment (pointers without an `align` promise)
  // the runs stay 16 bytes.
  LayoutRef accessLayout(const Value* pointers) const {
    const Type& t = pointers->type();
    const AxisFacts& f = axis_.facts(pointers);
    int dim = t.rank() - 1;
    for (int d = t.rank() - 1; d >= 0; --d)
      if (f.contiguity[static_cast<size_t>(d)] > f.contiguity[static_cast<size_t>(dim)]) dim = d;
    const int64_t bytes = storageBytes(t.scalarKind());
    LayoutRef layout = coalescedLayout(t.shape(), static_cast<int>(bytes), options_.numWarps, dim,
                                       f.contiguity[static_cast<size_t>(dim)]);
    const int64_t alignedBytes = f.divisibility[static_cast<size_t>(dim)];
    const int64_t access = alignedBytes / bytes;
    if (alignedBytes < 4 || alignedBytes % bytes != 0 || access >= layout->sizePerThread[static_cast<size_t>(dim)])
      return layout;
    std::vector<int64_t> spt = layout->sizePerThread;
    spt[static_cast<size_t>(dim)] = access;
    return blocked(spt, layout->threadsPerWarp, layout->warpsPerCta, layout->order);
  }

  // The layout a store takes: its value's own (blocked, or a slice that amounts
  // to one) when that already gives each thread runs, along the pointers'
  // contiguous dimension, of whole vectors as wide as the pointers allow; else
  // the coalesced access layout. A per-token-head cache row is only 4-byte
  // aligned: the 16 bytes per thread of the access layout buy no wider store,
  // only a conversion through shared memory (two barriers) from the 8 bytes per
  // thread the row was loaded with.
  LayoutRef storeLayout(const Operation& store) {
    const Value* pointers = store.operand(0);
    LayoutRef access = accessLayout(pointers);
    const Value* value = store.operand(1);
    if (cheap_.count(value)) return access;
    LayoutRef own = decided(value);
    LayoutRef ownBlocked = asBlocked(own);
    if (!ownBlocked) return access;
    const int64_t dim = access->order[0];
    if (ownBlocked->order[0] != dim) return access;
    const AxisFacts& f = axis_.facts(pointers);
    const size_t d = static_cast<size_t>(dim);
    const int64_t bytes = storageBytes(pointers->type().scalarKind());
    const int64_t widest = std::max<int64_t>(
        1, std::min<int64_t>({16 / bytes, f.contiguity[d], f.divisibility[d] / bytes, access->sizePerThread[d]}));
    return ownBlocked->sizePerThread[d] % widest == 0 ? own : access;
  }

  LayoutRef defaultLayout(const Type& t) const {
    return coalescedLayout(t.shape(), storageBytes(t.scalarKind()), options_.numWarps);
  }

  bool useMma(const Operation& dot) const {
    const Type& a = dot.operand(0)->type();
    const Type& out = dot.result()->type();
    ScalarKind k = a.scalarKind();
    // f32 operands with input_precision = tf32 take mma m16n8k8 (two per k16
    // step of the same fragments, codegen/lower/DotLowering.cpp).
    const bool tf32 = k == ScalarKind::F32 && ir::dotTakesTf32(dot);
    return options_.hasMmaSync && (k == ScalarKind::F16 || k == ScalarKind::BF16 || tf32) && out.shape()[0] >= 16 &&
           out.shape()[1] >= 8 && a.shape()[1] >= 16;
  }

  // The columns each warp of `dot`'s accumulator owns. 8 (mma.sync's
  // interleaving) unless the dot can run as wgmma with whole warpgroups along M
  // and the rest along N (MLA's 64 heads on 8 warps): then each warpgroup owns
  // one contiguous block of n / warpsN columns, which a wgmma descriptor can
  // address (codegen/lower/WarpgroupMma.cpp).
  int64_t warpgroupColumns(const Operation& dot) const {
    if (!options_.hasWgmma || !kernelFlag(kernel_, KernelAttribute::WarpgroupMma)) return 8;
    const ScalarKind k = dot.operand(0)->type().scalarKind();
    if (k != ScalarKind::F16 && k != ScalarKind::BF16) return 8;
    const std::vector<int64_t>& shape = dot.result()->type().shape();
    LayoutRef plain = mmaLayout(shape[0], options_.numWarps);
    const int64_t wm = plain->warpsPerCta[0], wn = plain->warpsPerCta[1];
    if (wm % 4 != 0 || wn == 1 || shape[1] % wn != 0) return 8;
    const int64_t columns = shape[1] / wn;
    return ir::isPowerOfTwo(columns) && columns >= 8 && columns <= 256 ? columns : 8;
  }

  // The layout a non-cheap value would get; nullptr = undecided (cheap, or
  // depends only on a loop-carried value still being inferred).
  LayoutRef infer(const Value* v) {
    if (!v->type().isTile() || cheap_.count(v)) return nullptr;
    if (auto it = inferred_.find(v); it != inferred_.end()) return it->second;
    LayoutRef l;
    if (Operation* def = v->definingOp()) {
      l = inferResult(*def, v->index());
    } else if (Operation* loop = v->ownerBlock()->parentOp(); loop && loop->opcode() == Opcode::For) {
      if (inProgress_.count(v)) return nullptr;
      inProgress_.insert(v);
      size_t iter = v->index() - 1;
      const Value* yielded = yieldedFor(v);
      if (yielded) l = infer(yielded);
      if (!l) l = infer(loop->operand(3 + iter));
      // A reloadable row carried to the next iteration (a pipelined row of
      // per-token scales) keeps its load's coalesced layout.
      if (!l && yielded && yielded->definingOp() && yielded->definingOp()->opcode() == Opcode::Load)
        l = accessLayout(yielded->definingOp()->operand(0));
      inProgress_.erase(v);
    }
    if (l) inferred_[v] = l;
    return l;
  }

  LayoutRef inferResult(const Operation& op, unsigned index) {
    const Type& t = op.result(index)->type();
    switch (op.opcode()) {
      case Opcode::Load:
        return accessLayout(op.operand(0));
      case Opcode::LoadTensor:
        // Rows of contiguous columns (what a TMA box lands as, and what
        // transposes of it keep as a view).
        return defaultLayout(t);
      case Opcode::Dot:
        if (!useMma(op)) return defaultLayout(t);
        if (byteOperandOf(op) == ByteOperand::AlongN) return mmaLayout(t.shape()[0], options_.numWarps, true);
        return mmaLayout(t.shape()[0], options_.numWarps, false, warpgroupColumns(op));
      case Opcode::Cast:
      case Opcode::Bitcast:
      case Opcode::UnpackNibbles:
        // The cast of a quantized B operand happens in the operand's layout.
        if (auto found = byteOperandCasts_.find(&op); found != byteOperandCasts_.end())
          return dotOperandLayout(*found->second, 1, decided(found->second->result()));
        if (LayoutRef l = infer(op.operand(0))) return l;
        return nullptr;
      case Opcode::ReduceMax:
      case Opcode::ReduceMin:
      case Opcode::ReduceSum: {
        LayoutRef in = infer(op.operand(0));
        if (!in) in = defaultLayout(op.operand(0)->type());
        return sliceOf(op.attrs().getInt("axis"), in);
      }
      case Opcode::ClusterReduceMax:
      case Opcode::ClusterReduceSum:
        return infer(op.operand(0));
      case Opcode::ExpandDims: {
        LayoutRef in = infer(op.operand(0));
        if (in && in->kind == LayoutKind::Slice && in->dim == op.attrs().getInt("axis")) return in->parent;
        return defaultLayout(t);
      }
      case Opcode::Broadcast:
        return infer(op.operand(0));
      case Opcode::Transpose: {
        LayoutRef permuted = permuteBlocked(infer(op.operand(0)), op.attrs().getInts("perm"));
        return permuted ? permuted : defaultLayout(t);
      }
      case Opcode::ConvertLayout:
        return t.layout() ? t.layout() : defaultLayout(t);
      case Opcode::Reshape:
        if (LayoutRef split = splitContiguousDim(infer(op.operand(0)), op.operand(0)->type().shape(), t.shape()))
          return split;
        return nullptr;
      case Opcode::For: {
        return infer(op.region(0)->argument(index + 1));
      }
      case Opcode::If: {
        for (const auto& region : op.regions()) {
          const Operation* yield = region->back();
          if (yield && yield->opcode() == Opcode::Yield && index < yield->numOperands())
            if (LayoutRef l = infer(yield->operand(index))) return l;
        }
        return nullptr;
      }
      default:
        if (isElementwise(op.opcode()))
          for (Value* v : op.operands())
            if (LayoutRef l = infer(v)) return l;
        return nullptr;
    }
  }

  LayoutRef decided(const Value* v) {
    LayoutRef l = infer(v);
    return l ? l : defaultLayout(v->type());
  }

  // ---- phase 2: rewrite types, recompute cheap values, insert conversions ----

  // What layout operand i of `op` must have when op's (first) result has layout
  // `result`; nullptr = no requirement (scalar operand, or take it as it is).
  LayoutRef requiredOperandLayout(const Operation& op, size_t i, const LayoutRef& result) {
    const Value* operand = op.operand(i);
    if (!operand->type().isTile()) return nullptr;
    switch (op.opcode()) {
      case Opcode::Dot:
        return dotOperandLayout(op, i, result);
      case Opcode::ReduceMax:
      case Opcode::ReduceMin:
      case Opcode::ReduceSum:
        if (result) return result->parent;
        return decided(operand);
      case Opcode::ExpandDims:
        return sliceOf(op.attrs().getInt("axis"), result);
      case Opcode::Broadcast:
      case Opcode::Load:
      case Opcode::ClusterReduceMax:
      case Opcode::ClusterReduceSum:
        return result;
      case Opcode::Transpose: {
        LayoutRef back = permuteBlocked(result, inversePermutation(op.attrs().getInts("perm")));
        return back ? back : decided(operand);
      }
      case Opcode::ConvertLayout:
      case Opcode::Reshape:
        return decided(operand);
      case Opcode::LoadTensor:
        // A kept load_tensor's gathered coordinates (a tile's block numbers):
        // every thread holds all of them, so the one thread that issues the
        // TMA boxes has each block number at hand (reloaded in this layout,
        // being a row of the block table).
        if (op.attrs().has("gather") && static_cast<int>(i) == 2 * static_cast<int>(op.attrs().getInt("rank")) +
                                                                   static_cast<int>(op.attrs().getInt("gather")))
          return blocked({operand->type().shape()[0]}, {32}, {options_.numWarps}, {0});
        return decided(operand);
      default:
        if (isElementwise(op.opcode())) return result;
        return decided(operand);
    }
  }

  void setLayout(Value* v, const LayoutRef& l) { v->setType(v->type().withLayout(l)); }

  void apply(Block& block) {
    std::vector<Operation*> ops;
    for (const auto& op : block.operations()) ops.push_back(op.get());
    for (Operation* op : ops) {
      if (op->numResults() == 1 && cheap_.count(op->result())) continue;  // recomputed where used
      switch (op->opcode()) {
        case Opcode::For:
          applyFor(*op);
          continue;
        case Opcode::If:
          applyIf(*op);
          continue;
        case Opcode::Yield:
        case Opcode::Return:
          continue;  // handled by the parent
        default:
          break;
      }
      LayoutRef result;
      if (op->numResults() == 1 && op->result()->type().isTile()) {
        result = decided(op->result());
        setLayout(op->result(), result);
      }
      if (op->opcode() == Opcode::Store && op->operand(0)->type().isTile()) {
        // Decided before any operand is rewritten (the rewritten pointers are new
        // values the axis analysis has not seen).
        LayoutRef access = storeLayout(*op);
        for (size_t i = 0; i < op->numOperands(); ++i) require(*op, i, access);
        continue;
      }
      for (size_t i = 0; i < op->numOperands(); ++i) require(*op, i, requiredOperandLayout(*op, i, result));
    }
  }

  void applyFor(Operation& loop) {
    Block& body = *loop.region(0);
    std::vector<LayoutRef> layouts;
    for (size_t i = 0; i < loop.numResults(); ++i) {
      LayoutRef l = loop.result(i)->type().isTile() ? decided(body.argument(i + 1)) : nullptr;
      layouts.push_back(l);
      if (l) {
        setLayout(loop.result(i), l);
        setLayout(body.argument(i + 1), l);
      }
    }
    for (size_t i = 0; i < layouts.size(); ++i) require(loop, 3 + i, layouts[i]);
    apply(body);
    Operation* yield = body.back();
    for (size_t i = 0; i < layouts.size(); ++i) require(*yield, i, layouts[i]);
  }

  void applyIf(Operation& op) {
    std::vector<LayoutRef> layouts;
    for (size_t i = 0; i < op.numResults(); ++i) {
      LayoutRef l = op.result(i)->type().isTile() ? decided(op.result(i)) : nullptr;
      layouts.push_back(l);
      if (l) setLayout(op.result(i), l);
    }
    for (const auto& region : op.regions()) {
      apply(*region);
      Operation* yield = region->back();
      for (size_t i = 0; i < layouts.size(); ++i) require(*yield, i, layouts[i]);
    }
  }

  void require(Operation& op, size_t i, const LayoutRef& layout) {
    Value* v = op.operand(i);
    if (!layout || !v->type().isTile()) return;
    if (cheap_.count(v)) {
      op.setOperand(i, materialize(v, layout));
      return;
    }
    if (sameLayout(v->type().layout(), layout)) return;
    // A quantized tile read into its operand layout is read where it is
    // converted (next to its dot), not at the top of the loop body: its
    // registers then live only as long as the dot needs them (fewer registers,
    // faster fp8 decode). The exception is K (along k) in rows copied only 4
    // bytes at a time (per-token-head: D + 4 bytes): read late, its wait comes
    // after the next tile's 64 four-byte copies per thread, which slows those
    // kernels down, so there only V is read late (measured: docs/perf-log.md,
    // 2026-11-30).
    const Operation* readBefore = lateReaders_.count(&op) ? &op : nullptr;
    op.setOperand(i, convert(v, layout, readBefore));
  }

  static std::string cacheKey(const Value* v, const LayoutRef& l) {
    return std::to_string(reinterpret_cast<uintptr_t>(v)) + l->str();
  }

  // Whether a reloadable row is loaded again in `layout` rather than converted
  // to it: when each thread issues at most kMaxReloadsPerThread loads for it
  // (registers whose pointers are provably equal share one load, see
  // equalValueRegisterBits). The loads grow with the elements per thread, the
  // conversion's two barriers do not: for the block numbers of the K and V
  // copies, up to 4 loads per thread beat converting (prefill's 32-key tiles;
  // decode's 64-key tiles, 8 keys per thread in pairs of one block) and 8 or
  // more lose, so 128-key tiles convert (measured: docs/perf-log.md, 2026-11-30).
  // With producer warps on the target (warp_specialize, wgmma) every row is
  // loaded again: the producers issue those loads off the compute warps' path,
  // and a conversion among the copies' addresses would keep them unspecialized.
  static constexpr int64_t kMaxReloadsPerThread = 4;
  bool worthReloading(const Value* row, const LayoutRef& layout) const {
    if (options_.hasWgmma && kernelFlag(kernel_, KernelAttribute::WarpSpecialize)) return true;
    auto linear = toLinearLayout(*layout, row->type().shape(), options_.numWarps);
    if (!linear.isOk()) return false;
    const AxisFacts& pointers = axis_.facts(row->definingOp()->operand(0));
    const int64_t loads = linear->numRegisters() >> std::popcount(equalValueRegisterBits(*linear, {&pointers}));
    return loads <= kMaxReloadsPerThread;
  }

  // A reloadable row that some consumer converts instead: the original load, in
  // its coalesced layout (given once).
  Value* loadedOnce(Value* row) {
    if (!keptLoads_.insert(row).second) return row;
    Operation* load = row->definingOp();
    LayoutRef access = accessLayout(load->operand(0));
    setLayout(row, access);
    for (size_t i = 0; i < load->numOperands(); ++i)
      if (load->operand(i)->type().isTile()) load->setOperand(i, materialize(load->operand(i), access));
    return row;
  }

  // The cheap value `v` recomputed in `layout`, right after its original (a
  // computed leaf of a cheap expression is converted instead).
  Value* materialize(Value* v, const LayoutRef& layout) {
    if (!cheap_.count(v)) return sameLayout(v->type().layout(), layout) ? v : convert(v, layout);
    std::string key = cacheKey(v, layout);
    if (auto it = materialized_.find(key); it != materialized_.end()) return it->second;
    Operation* def = v->definingOp();
    if (def->opcode() == Opcode::Load && !worthReloading(v, layout)) {
      Value* loaded = loadedOnce(v);
      Value* result = sameLayout(loaded->type().layout(), layout) ? loaded : convert(loaded, layout);
      materialized_[key] = result;
      return result;
    }
    auto clone = cloneWithoutRegions(*def, {v->type().withLayout(layout)});
    for (size_t i = 0; i < clone->numOperands(); ++i) {
      Value* operand = clone->operand(i);
      if (!operand->type().isTile()) continue;
      LayoutRef need = requiredOperandLayout(*clone, i, layout);
      clone->setOperand(i, materialize(operand, need));
    }
    Block* block = def->parentBlock();
    Value* result = block->insert(indexInBlock(*def) + 1, std::move(clone))->result();
    materialized_[key] = result;
    return result;
  }

  // A convert_layout of the computed value `v`, right after its definition.
  // A block argument's conversion goes to the top of its block, or just before
  // `before` when that op lies in the same block.
  Value* convert(Value* v, const LayoutRef& layout, const Operation* before = nullptr) {
    std::string key = cacheKey(v, layout);
    if (auto it = converted_.find(key); it != converted_.end()) return it->second;
    auto op = std::make_unique<Operation>(Opcode::ConvertLayout, support::Location{});
    op->addOperand(v);
    op->addResult(v->type().withLayout(layout), v->name().empty() ? std::string() : v->name() + "_cvt");
    Value* result;
    if (Operation* def = v->definingOp()) {
      op->setLocation(def->location());
      result = def->parentBlock()->insert(indexInBlock(*def) + 1, std::move(op))->result();
    } else if (before && before->parentBlock() == v->ownerBlock()) {
      op->setLocation(before->location());
      result = v->ownerBlock()->insert(indexInBlock(*before), std::move(op))->result();
    } else {
      result = v->ownerBlock()->insert(0, std::move(op))->result();
    }
    converted_[key] = result;
    return result;
  }

  Kernel& kernel_;
  PassOptions options_;
  AxisInfo axis_;
  support::Status status_;
  std::unordered_set<const Value*> cheap_;
  std::unordered_set<const Value*> keptLoads_;  // reloadable rows converted for some consumer
  std::unordered_set<const Value*> loadedData_;  // loaded 2D tiles and what is computed from them
  std::unordered_map<const Operation*, ByteOperand> byteOperands_;      // dot → how its B operand is read
  std::unordered_map<const Operation*, const Operation*> byteOperandCasts_;  // cast (bitcast) → the dot it feeds
  std::unordered_set<const Operation*> lateReaders_;  // ops reading a raw tile that is read next to them
  std::unordered_map<const Value*, LayoutRef> inferred_;
  std::unordered_set<const Value*> inProgress_;
  std::map<std::string, Value*> materialized_;
  std::map<std::string, Value*> converted_;
};

}  // namespace

support::Status assignLayouts(Kernel& kernel, const PassOptions& options) {
  LayoutAssigner assigner(kernel, options);
  if (support::Status s = assigner.run(); !s) return s;
  // The originals of recomputed values are now unused.
  return eliminateDeadCode(kernel, options);
}

}  // namespace attnjit::compiler
