// Software pipelining of tile loads in `for` loops (two stages): the loads of
// iteration i + 1 are issued at the top of iteration i and carried into the next
// iteration as loop-carried values, so their memory latency overlaps the compute
// of tile i instead of stalling it. Iteration 0's loads move in front of the loop.
//
//   for %iv = lo to hi step s iter_args(...) {          %t0 = load(slice(lo), mask ∧ lo < hi)
//     %t = load(slice(%iv), mask)                  ⇒    for %iv ... iter_args(..., %t = %t0) {
//     ... uses %t ...                                     %n = load(slice(%iv + s), mask ∧ %iv + s < hi)
//   }                                                     ... uses %t ...; yield ..., %n }
//
// A load is pipelined when it is a masked tile load directly in the loop body
// whose address and mask depend only on the induction variable, values defined
// outside the loop and other side-effect-free ops of the body (the block-table
// lookup of paged attention is such a slice and is cloned with it). The extra
// `lo < hi` / `iv + s < hi` term keeps the clones from touching memory the
// original loop would not have read. Requested per kernel with the attribute
// num_stages (Triton's knob): 1 or absent leaves the kernel alone; 2 pipelines.
//
// With the attribute prefetch_indices = 1, the pipelined loads that other
// pipelined loads' addresses or masks depend on (index loads: the block numbers
// of a paged KV tile) run one more iteration ahead: iteration i loads the
// indices of tile i + 2 (guarded by iv + 2s < hi) and carries them, and tile i +
// 1's copies at the top of iteration i address through the carried indices
// instead of waiting for a load issued just before them. The prologue loads
// tile lo's indices and data and tile lo + s's indices (guarded by lo + s < hi).
// The carried indices are a loop-carried value, so layout assignment converts
// them into each layout the copies use rather than loading them again in that
// layout (what it does for a few loads per thread: 64-key decode and prefill
// tiles), hence off by default: the unified-attention builder asks for it where
// the block numbers are converted anyway (128-key decode tiles).
#include <algorithm>
#include <set>
#include <unordered_map>

#include "compiler/passes/IrRewriting.h"
#include "compiler/passes/Passes.h"
#include "ir/KernelAttributes.h"
#include "ir/LoadTensor.h"

namespace attnjit::compiler {

using namespace ir;

namespace {

bool isMaskedTileLoad(const Operation& op) {
  return op.opcode() == Opcode::Load && op.numOperands() == 3 && op.result()->type().isTile();
}

// A load_tensor reads only inside the tensor its operands describe, so a clone
// for the iteration after the last needs no guard to stay in bounds; one with
// a row range gets its range emptied there all the same (cloneSlice).
bool isPipelinedLoad(const Operation& op) { return isMaskedTileLoad(op) || op.opcode() == Opcode::LoadTensor; }

class LoopPipeliner {
 public:
  LoopPipeliner(Operation& loop, bool prefetchIndices)
      : loop_(loop), body_(*loop.region(0)), prefetchIndices_(prefetchIndices) {}

  // Rewrites the loop when it has loads to pipeline; false when it has none.
  bool run() {
    collectSliceCandidates();
    std::vector<Operation*> loads;
    for (const auto& op : body_.operations())
      if (isPipelinedLoad(*op) && movable_.count(op.get())) loads.push_back(op.get());
    if (loads.empty()) return false;
    // The ops to clone: the loads and everything in the body they depend on, in
    // body order.
    std::set<const Operation*> needed;
    for (Operation* load : loads) addSlice(*load, needed);
    std::vector<Operation*> slice;
    for (const auto& op : body_.operations())
      if (needed.count(op.get())) slice.push_back(op.get());

    Value* lo = loop_.operand(0);
    Value* hi = loop_.operand(1);
    Value* step = loop_.operand(2);
    Value* iv = body_.argument(0);
    Block& parent = *loop_.parentBlock();

    // Index loads (a tile's block numbers) run one iteration further ahead.
    std::vector<Operation*> indexLoads = prefetchIndices_ ? findIndexLoads(loads, slice) : std::vector<Operation*>{};
    std::vector<Operation*> indexSlice;
    if (!indexLoads.empty()) {
      std::set<const Operation*> indexNeeded;
      for (Operation* load : indexLoads) addSlice(*load, indexNeeded);
      for (Operation* op : slice)
        if (indexNeeded.count(op)) indexSlice.push_back(op);
    }

    // Clones `ops` for the iteration whose induction variable is `at`, at
    // `where`, the clones of `opLoads` guarded by at < hi; `map` holds values
    // already at hand (carried index rows).
    auto cloneFor = [&](Inserter& where, Value* at, const std::string& stage, const std::vector<Operation*>& ops,
                        const std::vector<Operation*>& opLoads, std::unordered_map<const Value*, Value*> map) {
      Value* runs = where.cmp(CmpPredicate::Lt, at, hi, "pipeline_" + stage + "_runs");
      map[iv] = at;
      return cloneSlice(ops, opLoads, map, where, runs, "_" + stage);
    };

    // Prologue: iteration lo's loads; then iteration lo + step's index loads.
    Inserter prologue{parent, indexInBlock(loop_)};
    std::vector<Value*> firstLoads = cloneFor(prologue, lo, "first", slice, loads, {});
    std::vector<Value*> secondIndices;
    if (!indexLoads.empty())
      secondIndices = cloneFor(prologue, prologue.binary(Opcode::Add, lo, step, "pipeline_second_iv"), "second",
                               indexSlice, indexLoads, {});

    // Index values for iteration iv + step, loaded one iteration earlier.
    std::vector<Value*> aheadIndices;
    for (Operation* load : indexLoads) {
      Value* original = load->result();
      loop_.addOperand(secondIndices[aheadIndices.size()]);
      aheadIndices.push_back(body_.addArgument(original->type(), original->name() + "_ahead"));
      loop_.addResult(original->type(), original->name() + "_ahead_last");
    }

    // Top of the body: iteration iv + step's loads, their index loads replaced
    // by the carried values; then iteration iv + 2 · step's index loads.
    Inserter top{body_, 0};
    Value* nextIv = top.binary(Opcode::Add, iv, step, "pipeline_next_iv");
    std::unordered_map<const Value*, Value*> aheadFor;
    for (size_t i = 0; i < indexLoads.size(); ++i) aheadFor[indexLoads[i]->result()] = aheadIndices[i];
    std::vector<Value*> nextLoads = cloneFor(top, nextIv, "next", slice, loads, std::move(aheadFor));
    std::vector<Value*> afterNextIndices;
    if (!indexLoads.empty())
      afterNextIndices = cloneFor(top, top.binary(Opcode::Add, nextIv, step, "pipeline_after_next_iv"), "after_next",
                                  indexSlice, indexLoads, {});

    // Carry the loaded tiles: new iter args replace the loads' uses in the body;
    // the yield passes the next iteration's tiles.
    Operation* yield = body_.back();
    for (Value* afterNext : afterNextIndices) yield->addOperand(afterNext);
    for (size_t i = 0; i < loads.size(); ++i) {
      Value* original = loads[i]->result();
      loop_.addOperand(firstLoads[i]);
      Value* carried = body_.addArgument(original->type(), original->name());
      replaceAllUses(body_, original, carried);
      yield->addOperand(nextLoads[i]);
      loop_.addResult(original->type(), original->name() + "_last");
    }
    // The original loads (and the slice ops only they used) are dead now; the
    // dead-code pass that follows removes them.
    return true;
  }

 private:
  // Appends new ops at a fixed position of a block, in order.
  struct Inserter {
    Block& block;
    size_t position;
    Value* add(std::unique_ptr<Operation> op) {
      Value* result = op->numResults() ? op->result() : nullptr;
      block.insert(position++, std::move(op));
      return result;
    }
    Value* cmp(CmpPredicate pred, Value* a, Value* b, std::string name) {
      auto op = std::make_unique<Operation>(Opcode::Cmp, support::Location{});
      op->addOperand(a);
      op->addOperand(b);
      op->attrs().set("pred", std::string(cmpPredicateName(pred)));
      op->addResult(a->type().withElement(Type::scalar(ScalarKind::I1)), std::move(name));
      return add(std::move(op));
    }
    Value* binary(Opcode opcode, Value* a, Value* b, std::string name) {
      auto op = std::make_unique<Operation>(opcode, support::Location{});
      op->addOperand(a);
      op->addOperand(b);
      op->addResult(a->type(), std::move(name));
      return add(std::move(op));
    }
    Value* splat(Value* scalar, const std::vector<int64_t>& shape, std::string name) {
      auto op = std::make_unique<Operation>(Opcode::Splat, support::Location{});
      op->addOperand(scalar);
      op->addResult(Type::tile(shape, scalar->type().elementType()), std::move(name));
      return add(std::move(op));
    }
  };

  // Marks the body ops that can be recomputed for another iteration: no regions,
  // no side effects, and operands that are the induction variable, values from
  // outside the loop or results of other such ops.
  void collectSliceCandidates() {
    // A store in the loop could feed a later iteration's loads through memory;
    // loading early would then read stale data.
    bool stores = false;
    walk(body_, [&](const Operation& op) { stores = stores || op.opcode() == Opcode::Store; });
    if (stores) return;
    std::set<const Value*> bodyArgs;
    for (const auto& arg : body_.arguments()) bodyArgs.insert(arg.get());
    const Value* iv = body_.argument(0);
    for (const auto& op : body_.operations()) {
      if (op->numRegions() > 0 || hasSideEffects(*op) || op->opcode() == Opcode::Yield) continue;
      // An unmasked load cannot be guarded: for the iteration after the last it
      // could read out of bounds.
      if (op->opcode() == Opcode::Load && !isMaskedTileLoad(*op)) continue;
      bool ok = true;
      for (Value* v : op->operands()) {
        if (v == iv) continue;
        if (bodyArgs.count(v)) { ok = false; break; }  // a loop-carried value
        Operation* def = v->definingOp();
        if (def && def->parentBlock() == &body_ && !movable_.count(def)) { ok = false; break; }
        if (!def && v->ownerBlock() == &body_) { ok = false; break; }
      }
      if (ok) {
        movable_.insert(op.get());
        for (const auto& r : op->results()) producer_[r.get()] = op.get();
      }
    }
  }

  // The pipelined loads whose results the address or mask of another pipelined
  // load depends on (through the slice): a paged KV tile's block numbers. Loaded
  // for the next iteration at the top of the body, their latency would sit
  // between the top and the next tile's copies, which need them at once; loaded
  // two iterations ahead, they arrive while a whole tile is computed.
  std::vector<Operation*> findIndexLoads(const std::vector<Operation*>& loads, const std::vector<Operation*>& slice) {
    std::set<const Operation*> feedsLoads;
    for (Operation* load : loads)
      for (size_t i = 0; i < (load->opcode() == Opcode::LoadTensor ? load->numOperands() : 2); ++i)
        if (auto it = producer_.find(load->operand(i)); it != producer_.end()) addSlice(*it->second, feedsLoads);
    std::vector<Operation*> index;
    for (Operation* op : slice)
      if (feedsLoads.count(op) && std::find(loads.begin(), loads.end(), op) != loads.end()) index.push_back(op);
    return index;
  }

  void addSlice(const Operation& op, std::set<const Operation*>& needed) {
    if (!needed.insert(&op).second) return;
    for (Value* v : op.operands())
      if (auto it = producer_.find(v); it != producer_.end()) addSlice(*it->second, needed);
  }

  // Clones `slice` with `map` (seeded with the induction variable's stand-in) at
  // `where`; the clones of `loads` get their masks ANDed with splat(`runs`).
  // Returns the cloned loads' results, in the order of `loads`.
  std::vector<Value*> cloneSlice(const std::vector<Operation*>& slice, const std::vector<Operation*>& loads,
                                 std::unordered_map<const Value*, Value*>& map, Inserter& where, Value* runs,
                                 const std::string& suffix) {
    auto mapped = [&](Value* v) {
      auto it = map.find(v);
      return it == map.end() ? v : it->second;
    };
    std::unordered_map<const Operation*, Value*> loadClones;
    for (Operation* op : slice) {
      // Already given (an index load's carried value): nothing to clone.
      if (op->numResults() == 1 && map.count(op->result())) {
        loadClones[op] = map.at(op->result());
        continue;
      }
      std::vector<Type> types;
      for (const auto& r : op->results()) types.push_back(r->type());
      std::unique_ptr<Operation> clone = cloneWithoutRegions(*op, types);
      for (size_t i = 0; i < clone->numOperands(); ++i) clone->setOperand(i, mapped(clone->operand(i)));
      for (size_t i = 0; i < clone->numResults(); ++i) clone->result(i)->setName(op->result(i)->name() + suffix);
      bool isPipelined = std::find(loads.begin(), loads.end(), op) != loads.end();
      if (isPipelined && op->opcode() == Opcode::LoadTensor) {
        const LoadTensorOperands tensor = loadTensorOperands(*clone);
        if (tensor.rowEnd) {
          const size_t end = loadTensorOperandCount(tensor.rank(), false) + 1;
          auto select = std::make_unique<Operation>(Opcode::Select, support::Location{});
          select->addOperand(runs);
          select->addOperand(tensor.rowEnd);
          select->addOperand(tensor.rowBegin);
          select->addResult(tensor.rowEnd->type(), op->result()->name() + suffix + "_row_end");
          clone->setOperand(end, where.add(std::move(select)));
        }
      } else if (isPipelined) {
        Value* mask = clone->operand(1);
        Value* guard = where.splat(runs, mask->type().shape(), op->result()->name() + suffix + "_runs");
        clone->setOperand(1, where.binary(Opcode::And, mask, guard, op->result()->name() + suffix + "_mask"));
      }
      Operation* placed = clone.get();
      where.add(std::move(clone));
      for (size_t i = 0; i < placed->numResults(); ++i) map[op->result(i)] = placed->result(i);
      if (isPipelined) loadClones[op] = placed->result();
    }
    std::vector<Value*> out;
    for (Operation* load : loads) out.push_back(loadClones.at(load));
    return out;
  }

  Operation& loop_;
  Block& body_;
  bool prefetchIndices_;
  std::set<const Operation*> movable_;
  std::unordered_map<const Value*, Operation*> producer_;
};

// Innermost loops first, so a nest pipelines its inner loop.
void collectLoops(Block& block, std::vector<Operation*>& loops) {
  for (const auto& op : block.operations()) {
    for (const auto& region : op->regions()) collectLoops(*region, loops);
    if (op->opcode() == Opcode::For) loops.push_back(op.get());
  }
}

}  // namespace

support::Status pipelineLoads(Kernel& kernel, const PassOptions&) {
  const int64_t stages = kernelAttribute(kernel, KernelAttribute::NumStages);
  // prefetch_indices = 1 loads index tiles (block numbers) two iterations
  // ahead; 0, for the next iteration like the data they address.
  const bool prefetchIndices = kernelFlag(kernel, KernelAttribute::PrefetchIndices);
  if (stages == 1) return support::Status::ok();
  // More stages keep the same loop: the next tile's loads issued before this
  // tile's compute. Codegen gives their cp.async buffers that many slots, which
  // producer warps fill further ahead (codegen/lower/WarpSpecialization.cpp).
  if (stages > 4)
    return support::Status::error(kernel.location(),
                                  "kernel @" + kernel.name() + ": num_stages = " + std::to_string(stages) +
                                      " is unsupported; the pipeliner implements 1 (off) to 4 (the next "
                                      "tile's loads in flight during this tile's compute, in up to 4 slots)");
  std::vector<Operation*> loops;
  collectLoops(kernel.body(), loops);
  for (Operation* loop : loops) LoopPipeliner(*loop, prefetchIndices).run();
  return support::Status::ok();
}

}  // namespace attnjit::compiler
