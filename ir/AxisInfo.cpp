#include "ir/AxisInfo.h"

#include <algorithm>
#include <numeric>

namespace attnjit::ir {

namespace {

int64_t gcd(int64_t a, int64_t b) { return std::gcd(a, b); }

size_t rankOf(const Type& t) { return t.isTile() ? t.shape().size() : 1; }

bool isIntegerConstant(const Operation& op, int64_t& value) {
  if (op.opcode() != Opcode::Constant) return false;
  const AttrValue* v = op.attrs().find("value");
  if (!v || !std::holds_alternative<int64_t>(*v)) return false;
  value = std::get<int64_t>(*v);
  return true;
}

// The constant a value is (a splat of), if it is one: a constant, or a
// constexpr whose integer value the kernel binds (BLOCK_SIZE, TILE_SIZE, ...).
bool constantValue(const Kernel& kernel, const Value* v, int64_t& value) {
  const Operation* def = v->definingOp();
  if (!def) return false;
  if (isIntegerConstant(*def, value)) return true;
  if (def->opcode() == Opcode::Constexpr) {
    const Constexpr* ce = kernel.findConstexpr(def->attrs().getString("name"));
    if (!ce || !std::holds_alternative<int64_t>(ce->value)) return false;
    value = std::get<int64_t>(ce->value);
    return true;
  }
  if (def->opcode() == Opcode::Splat || def->opcode() == Opcode::Broadcast)
    return constantValue(kernel, def->operand(0), value);
  return false;
}

}  // namespace

int64_t AxisInfo::powerOfTwoDivisor(int64_t x) {
  if (x == 0) return kMaxDivisibility;
  int64_t d = x & -x;
  return std::min(d < 0 ? -d : d, kMaxDivisibility);
}

AxisInfo::AxisInfo(const Kernel& kernel) : kernel_(kernel) {
  for (size_t i = 0; i < kernel.numParameters(); ++i) {
    const Value* p = kernel.parameter(i);
    AxisFacts f = unknown(p->type());
    // {align = N} on a pointer, {divisibility = N} on an integer: the caller
    // guarantees it (the runtime checks it at launch).
    for (const char* key : {"align", "divisibility"})
      if (const AttrValue* a = kernel.parameterAttrs(i).find(key); a && std::holds_alternative<int64_t>(*a))
        f.divisibility[0] = std::max<int64_t>(1, powerOfTwoDivisor(std::get<int64_t>(*a)));
    facts_[p] = f;
  }
  analyzeBlock(kernel.body());
}

const AxisFacts& AxisInfo::facts(const Value* v) const {
  static const AxisFacts kScalarUnknown{{1}, {1}, {1}};
  auto it = facts_.find(v);
  return it == facts_.end() ? kScalarUnknown : it->second;
}

AxisFacts AxisInfo::unknown(const Type& t) const {
  size_t r = rankOf(t);
  return AxisFacts{std::vector<int64_t>(r, 1), std::vector<int64_t>(r, 1), std::vector<int64_t>(r, 1)};
}

void AxisInfo::analyzeBlock(const Block& block) {
  for (const auto& arg : block.arguments())
    if (!facts_.count(arg.get())) facts_[arg.get()] = unknown(arg->type());
  for (const auto& op : block.operations()) {
    // Loop induction variables step by `step` from `lo`.
    if (op->opcode() == Opcode::For) {
      const Value* iv = op->region(0)->argument(0);
      int64_t div = std::min(facts(op->operand(0)).divisibility[0], facts(op->operand(2)).divisibility[0]);
      facts_[iv] = AxisFacts{{1}, {div}, {1}};
    }
    for (const auto& region : op->regions()) analyzeBlock(*region);
    analyzeOp(*op);
  }
}

void AxisInfo::analyzeOp(const Operation& op) {
  if (op.numResults() == 0) return;
  const Type& t = op.result()->type();
  AxisFacts out = unknown(t);
  size_t r = rankOf(t);
  const std::vector<int64_t> shape = t.isTile() ? t.shape() : std::vector<int64_t>{1};
  auto in = [&](size_t i) -> const AxisFacts& { return facts(op.operand(i)); };
  int64_t c = 0;
  switch (op.opcode()) {
    case Opcode::Constant:
      out.constancy = shape;  // a constant tile holds one value (float or integer)
      if (isIntegerConstant(op, c)) out.divisibility.assign(r, powerOfTwoDivisor(c));
      break;
    case Opcode::Constexpr:
    case Opcode::ProgramId:
    case Opcode::NumPrograms:
      if (const Constexpr* ce = op.opcode() == Opcode::Constexpr ? kernel_.findConstexpr(op.attrs().getString("name"))
                                                                 : nullptr;
          ce && std::holds_alternative<int64_t>(ce->value))
        out.divisibility[0] = powerOfTwoDivisor(std::get<int64_t>(ce->value));
      break;
    case Opcode::Arange:
      out.contiguity = shape;
      out.divisibility[0] = powerOfTwoDivisor(op.attrs().getInt("start"));
      break;
    case Opcode::Splat:
      out.divisibility.assign(r, in(0).divisibility[0]);
      out.constancy = shape;
      break;
    case Opcode::Broadcast: {
      const auto& inShape = op.operand(0)->type().shape();
      out = in(0);
      for (size_t d = 0; d < r; ++d)
        if (inShape[d] == 1 && shape[d] > 1) {
          out.contiguity[d] = 1;
          out.constancy[d] = shape[d];
        }
      break;
    }
    case Opcode::ExpandDims: {
      out = in(0);
      auto axis = static_cast<size_t>(op.attrs().getInt("axis"));
      // The new unit dimension: each "run" is one element, so its divisibility
      // must hold for every element. Along a dimension of runs longer than one
      // only their first elements are that divisible (0, 1, 2, ...: 1).
      int64_t div = AxisInfo::kMaxDivisibility;
      for (size_t d = 0; d < out.divisibility.size(); ++d)
        div = std::min(div, out.contiguity[d] > 1 ? int64_t{1} : out.divisibility[d]);
      out.contiguity.insert(out.contiguity.begin() + static_cast<std::ptrdiff_t>(axis), 1);
      out.divisibility.insert(out.divisibility.begin() + static_cast<std::ptrdiff_t>(axis), div);
      out.constancy.insert(out.constancy.begin() + static_cast<std::ptrdiff_t>(axis), 1);
      break;
    }
    case Opcode::Transpose: {
      const auto& perm = op.attrs().getInts("perm");
      for (size_t d = 0; d < r; ++d) {
        out.contiguity[d] = in(0).contiguity[perm[d]];
        out.divisibility[d] = in(0).divisibility[perm[d]];
        out.constancy[d] = in(0).constancy[perm[d]];
      }
      break;
    }
    case Opcode::ConvertLayout:
      out = in(0);
      break;
    case Opcode::Bitcast: {
      // A pointer keeps its byte address (divisibility counts bytes); runs of
      // consecutive elements survive only when the pointee keeps its size. A
      // run that does not survive leaves each of its elements (start + k·size)
      // only the old element size's divisibility.
      if (!t.hasPointerElements()) break;
      out = in(0);
      const int64_t fromBytes = storageBits(op.operand(0)->type().scalarKind()) / 8;
      if (storageBits(t.scalarKind()) == fromBytes * 8) break;
      for (size_t d = 0; d < r; ++d) {
        if (out.contiguity[d] > 1) out.divisibility[d] = std::min(out.divisibility[d], std::max<int64_t>(1, fromBytes));
        out.contiguity[d] = 1;
      }
      break;
    }
    case Opcode::Cast:
      if (isInteger(t.scalarKind()) && isInteger(op.operand(0)->type().scalarKind()) &&
          valueBits(t.scalarKind()) >= valueBits(op.operand(0)->type().scalarKind()))
        out = in(0);
      break;
    case Opcode::Add:
    case Opcode::Sub:
      if (!isInteger(t.scalarKind())) break;
      for (size_t d = 0; d < r; ++d) {
        const AxisFacts &a = in(0), &b = in(1);
        out.contiguity[d] = std::max(gcd(a.contiguity[d], b.constancy[d]),
                                     op.opcode() == Opcode::Add ? gcd(b.contiguity[d], a.constancy[d]) : 1);
        out.divisibility[d] = std::min(a.divisibility[d], b.divisibility[d]);
        out.constancy[d] = gcd(a.constancy[d], b.constancy[d]);
      }
      break;
    case Opcode::Mul:
      if (!isInteger(t.scalarKind())) break;
      for (size_t d = 0; d < r; ++d) {
        const AxisFacts &a = in(0), &b = in(1);
        int64_t one = 0;
        const bool timesOne = constantValue(kernel_, op.operand(1), one) && one == 1;
        const bool oneTimes = constantValue(kernel_, op.operand(0), one) && one == 1;
        if (timesOne) out.contiguity[d] = a.contiguity[d];
        else if (oneTimes) out.contiguity[d] = b.contiguity[d];
        // A run's divisibility holds for its first element only ([2^n, 2^n + 1,
        // ...]); scaled, every element starts a run of its own, so such an
        // operand contributes 1 unless the product keeps its runs.
        const int64_t aDiv = a.contiguity[d] > 1 && !timesOne ? 1 : a.divisibility[d];
        const int64_t bDiv = b.contiguity[d] > 1 && !oneTimes ? 1 : b.divisibility[d];
        out.divisibility[d] = std::min(aDiv * bDiv, kMaxDivisibility);
        out.constancy[d] = gcd(a.constancy[d], b.constancy[d]);
      }
      break;
    case Opcode::Div:
      if (!isInteger(t.scalarKind()) || !constantValue(kernel_, op.operand(1), c) || c <= 0 || (c & (c - 1))) break;
      for (size_t d = 0; d < r; ++d) {
        const AxisFacts& a = in(0);
        // A run of c consecutive values starting at a multiple of c divides to one value.
        int64_t run = std::min({a.contiguity[d], a.divisibility[d], c});
        out.constancy[d] = std::max(a.constancy[d], run == c ? c : int64_t{1});
        // A run longer than c divides into several values (start / c, start / c
        // + 1, ...): only the first keeps the start's divisibility.
        out.divisibility[d] = a.contiguity[d] > c ? 1 : std::max<int64_t>(1, a.divisibility[d] / c);
      }
      break;
    case Opcode::Rem:
      if (!isInteger(t.scalarKind()) || !constantValue(kernel_, op.operand(1), c) || c <= 0 || (c & (c - 1))) break;
      for (size_t d = 0; d < r; ++d) {
        const AxisFacts& a = in(0);
        out.contiguity[d] = gcd(a.contiguity[d], c);
        out.divisibility[d] = gcd(a.divisibility[d], c);
        out.constancy[d] = a.constancy[d];
      }
      break;
    case Opcode::AddPtr: {
      int64_t bytes = storageBytes(t.scalarKind());
      for (size_t d = 0; d < r; ++d) {
        const AxisFacts &p = in(0), &o = in(1);
        out.contiguity[d] = gcd(p.constancy[d], o.contiguity[d]);
        out.divisibility[d] = std::min(p.divisibility[d], std::min(o.divisibility[d] * bytes, kMaxDivisibility));
        out.constancy[d] = gcd(p.constancy[d], o.constancy[d]);
      }
      break;
    }
    case Opcode::Cmp: {
      const std::string& pred = op.attrs().getString("pred");
      for (size_t d = 0; d < r; ++d) {
        const AxisFacts &a = in(0), &b = in(1);
        out.constancy[d] = gcd(a.constancy[d], b.constancy[d]);
        // x < n and x >= n stay constant over a run of x that starts at a multiple
        // of the run length when n is a multiple of it too.
        if ((pred == "lt" || pred == "ge") && b.constancy[d] == shape[d]) {
          int64_t run = std::min({a.contiguity[d], a.divisibility[d], b.divisibility[d]});
          out.constancy[d] = std::max(out.constancy[d], run);
        }
      }
      break;
    }
    case Opcode::And:
    case Opcode::Or:
    case Opcode::Select:
      for (size_t d = 0; d < r; ++d) {
        int64_t k = in(0).constancy[d];
        for (size_t i = 1; i < op.numOperands(); ++i) k = gcd(k, in(i).constancy[d]);
        out.constancy[d] = k;
        if (op.opcode() != Opcode::Select) out.divisibility[d] = std::min(in(0).divisibility[d], in(1).divisibility[d]);
      }
      break;
    default:
      break;
  }
  facts_[op.result()] = std::move(out);
  for (size_t i = 1; i < op.numResults(); ++i) facts_[op.result(i)] = unknown(op.result(i)->type());
}

uint64_t equalValueRegisterBits(const LinearLayout& layout, const std::vector<const AxisFacts*>& facts) {
  uint64_t bits = 0;
  for (int d = 0; d < layout.rank(); ++d) {
    // The largest power of two that every tile's constancy along d is a multiple of.
    int64_t chunk = AxisInfo::kMaxDivisibility;
    for (const AxisFacts* f : facts) chunk = std::min(chunk, AxisInfo::powerOfTwoDivisor(f->constancy[static_cast<size_t>(d)]));
    if (chunk <= 1) continue;
    int64_t inside = 0;  // the largest offset along d the bases below a chunk can add
    auto add = [&](const Coord& c) {
      if (c[static_cast<size_t>(d)] % chunk != 0) inside += c[static_cast<size_t>(d)];
    };
    for (const Coord& c : layout.reg) add(c);
    for (const Coord& c : layout.lane) add(c);
    for (const Coord& c : layout.warp) add(c);
    if (inside >= chunk) continue;
    for (size_t i = 0; i < layout.reg.size(); ++i) {
      const Coord& c = layout.reg[i];
      bool onlyAlongD = true;
      for (int o = 0; o < layout.rank(); ++o)
        if (o != d && c[static_cast<size_t>(o)] != 0) onlyAlongD = false;
      if (onlyAlongD && c[static_cast<size_t>(d)] % chunk != 0) bits |= uint64_t{1} << i;
    }
  }
  return bits;
}

}  // namespace attnjit::ir
