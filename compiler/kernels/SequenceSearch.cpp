#include "compiler/kernels/SequenceSearch.h"

namespace attnjit::compiler {

using ir::CmpPredicate;
using ir::Type;
using ir::Value;

Value* searchSequence(ir::Builder& b, const SequenceSearch& search,
                      const std::function<Value*(Value* mid, Value* searching)>& startAt,
                      const std::string& resultName) {
  const Type& shape = search.target->type();
  Value* two = b.constInt(2, shape, "two");
  Value* loStart = search.zero;
  Value* one = search.one;
  Value* hiStart = search.numSeqs;
  if (shape.isTile()) {
    loStart = b.constInt(0, shape, "lo_start");
    one = b.constInt(1, shape, "one_shaped");
    hiStart = b.splat(search.numSeqs, shape.shape(), "hi_start");
  }
  auto loop = b.beginFor(search.zero, search.steps, search.one, {loStart, hiStart}, "search_step", {"lo", "hi"});
  Value* lo = loop.iterArgs[0];
  Value* hi = loop.iterArgs[1];
  Value* searching = b.cmp(CmpPredicate::Lt, lo, hi, "searching");
  Value* mid = b.div(b.add(lo, hi), two, "mid");
  Value* midStart = startAt(mid, searching);
  Value* midNotAfter = b.cmp(CmpPredicate::Le, midStart, search.target, "mid_not_after");
  Value* goRight = b.andOp(searching, midNotAfter, "go_right");
  Value* goLeft = b.andOp(searching, b.cmp(CmpPredicate::Gt, midStart, search.target, "mid_after"), "go_left");
  Value* newLo = b.select(goRight, b.add(mid, one), lo, "lo_next");
  Value* newHi = b.select(goLeft, mid, hi, "hi_next");
  std::vector<Value*> bounds = b.endFor({newLo, newHi}, {"lo_final", "hi_final"});
  return b.sub(bounds[0], one, resultName);
}

}  // namespace attnjit::compiler
