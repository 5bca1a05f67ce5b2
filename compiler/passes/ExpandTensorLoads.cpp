// expand-tensor-loads: a load_tensor (ir/Ops.def) becomes the masked load its
// definition states — a tile of pointers base + x0 + Σ xk · stride k and a
// mask of the rows and columns whose indices lie inside the tensor (and the
// row range) — so the passes after it and code generation see only the loads
// they know (pipelining, cp.async copies, producer warps). The index arithmetic
// is in i64: a paged cache's block stride times a block number passes 2^31.
//
// Kept as it is, for code generation to copy with the tensor memory
// accelerator (codegen/lower/WarpSpecialization.cpp), is a load_tensor that a
// TMA box copy can do exactly, in a kernel that asks for it (kernel attribute
// tma with warp_specialize and a pipeline, on a target with TMA): directly in
// a loop body; read only by warpgroup MMAs as their B operand (through 2D
// transposes), so that the slot is never read into registers; f16 or bf16
// rows of 64, 128 or 256 elements (whole 128-byte swizzle spans); 8 to 256
// rows per gathered entry, R a power of two; no row range (a box copies whole
// rows: the rows a range leaves out would have to be zeroed in the slot); and
// a base, extents and strides that the host can evaluate from the launch's
// arguments (kernel parameters, constants, constexprs), since the tensor map
// is encoded there.
#include <string>
#include <unordered_map>
#include <vector>

#include "compiler/passes/IrRewriting.h"
#include "compiler/passes/Passes.h"
#include "ir/KernelAttributes.h"
#include "ir/LinearLayout.h"
#include "ir/LoadTensor.h"

namespace attnjit::compiler {

using namespace ir;

namespace {

const Type kI32 = Type::scalar(ScalarKind::I32);
const Type kI64 = Type::scalar(ScalarKind::I64);

// Creates ops in front of a fixed position of a block, in order.
class Emitter {
 public:
  Emitter(Block& block, size_t position, support::Location loc, std::string prefix)
      : block_(block), position_(position), loc_(std::move(loc)), prefix_(std::move(prefix)) {}

  Value* make(Opcode opcode, const std::vector<Value*>& operands, const Type& type, Attributes attrs,
              const std::string& name) {
    auto op = std::make_unique<Operation>(opcode, loc_);
    for (Value* operand : operands) op->addOperand(operand);
    op->addResult(type, prefix_ + name);
    op->attrs() = std::move(attrs);
    return block_.insert(position_++, std::move(op))->result();
  }
  Value* constant(int64_t value, const Type& type, const std::string& name) {
    Attributes attrs;
    attrs.set("value", value);
    return make(Opcode::Constant, {}, type, std::move(attrs), name);
  }
  Value* binary(Opcode opcode, Value* a, Value* b, const std::string& name) {
    return make(opcode, {a, b}, a->type(), {}, name);
  }
  Value* cmp(CmpPredicate pred, Value* a, Value* b, const std::string& name) {
    Attributes attrs;
    attrs.set("pred", std::string(cmpPredicateName(pred)));
    return make(Opcode::Cmp, {a, b}, a->type().withScalarKind(ScalarKind::I1), std::move(attrs), name);
  }
  Value* toI64(Value* v, const std::string& name) {
    if (v->type().scalarKind() == ScalarKind::I64) return v;
    return make(Opcode::Cast, {v}, v->type().withScalarKind(ScalarKind::I64), {}, name);
  }
  Value* splat(Value* scalar, std::vector<int64_t> shape, const std::string& name) {
    return make(Opcode::Splat, {scalar}, Type::tile(std::move(shape), scalar->type()), {}, name);
  }
  Value* arange(int64_t end, const std::string& name) {
    Attributes attrs;
    attrs.set("start", int64_t{0});
    attrs.set("end", end);
    return make(Opcode::Arange, {}, Type::tile({end}, kI32), std::move(attrs), name);
  }
  // A rank-1 tile as the column (axis 1 = false) or row (axis 0) of an R × C tile.
  Value* spread(Value* tile, bool alongRows, int64_t R, int64_t C, const std::string& name) {
    Attributes attrs;
    attrs.set("axis", int64_t{alongRows ? 1 : 0});
    const std::vector<int64_t> expanded = alongRows ? std::vector<int64_t>{R, 1} : std::vector<int64_t>{1, C};
    Value* e = make(Opcode::ExpandDims, {tile}, Type::tile(expanded, tile->type().elementType()), std::move(attrs),
                    name + "_2d");
    return make(Opcode::Broadcast, {e}, Type::tile({R, C}, tile->type().elementType()), {}, name);
  }
  // lo <= x < hi, elementwise (x and hi of one type).
  Value* within(Value* x, Value* hi, const std::string& name) {
    Value* zero = x->type().isTile() ? splat(constant(0, kI64, name + "_zero"), x->type().shape(), name + "_zeros")
                                     : constant(0, kI64, name + "_zero");
    return binary(Opcode::And, cmp(CmpPredicate::Ge, x, zero, name + "_from"), cmp(CmpPredicate::Lt, x, hi, name + "_to"),
                  name);
  }

 private:
  Block& block_;
  size_t position_;
  support::Location loc_;
  std::string prefix_;
};

void expand(Operation& op) {
  const LoadTensorOperands t = loadTensorOperands(op);
  const int n = t.rank();
  Value* result = op.result();
  const Type type = result->type();
  const int64_t R = type.shape()[0], C = type.shape()[1];
  Block& block = *op.parentBlock();
  Emitter e(block, indexInBlock(op), op.location(), result->name().empty() ? "tensor" : result->name());

  // Columns: x0 = coord0 + j.
  Value* columns = e.toI64(e.arange(C, "_columns_i32"), "_columns");
  Value* x0 = e.binary(Opcode::Add, columns, e.splat(e.toI64(t.coords[0], "_coord0"), {C}, "_coord0s"), "_x0");
  Value* columnInside = e.within(x0, e.splat(e.toI64(t.dims[0], "_dim0"), {C}, "_dim0s"), "_column_inside");

  // Rows: the rows' dimension, the gathered one, then the scalar ones.
  const int64_t G = t.gatherDim >= 0 ? t.coords[static_cast<size_t>(t.gatherDim)]->type().shape()[0] : 1;
  const int64_t rowsPerEntry = R / G;
  Value* rows = e.arange(R, "_rows_i32");
  Value* inEntry = G > 1 ? e.binary(Opcode::Rem, rows, e.splat(e.constant(rowsPerEntry, kI32, "_per_entry"), {R},
                                                              "_per_entries"),
                                    "_row_in_entry")
                         : rows;
  const size_t a = static_cast<size_t>(t.rowsDim);
  Value* xa = e.binary(Opcode::Add, e.toI64(inEntry, "_row_in_entry_i64"),
                       e.splat(e.toI64(t.coords[a], "_coord_rows"), {R}, "_coord_rows_s"), "_x_rows");
  Value* rowInside = e.within(xa, e.splat(e.toI64(t.dims[a], "_dim_rows"), {R}, "_dim_rows_s"), "_row_inside");
  Value* rowOffset = e.binary(Opcode::Mul, xa, e.splat(e.toI64(t.strides[a - 1], "_stride_rows"), {R}, "_stride_rows_s"),
                              "_row_offset");
  if (t.gatherDim >= 0) {
    const size_t g = static_cast<size_t>(t.gatherDim);
    Value* entries = t.coords[g];
    if (G < R) {
      Attributes expandAttrs;
      expandAttrs.set("axis", int64_t{1});
      Value* column = e.make(Opcode::ExpandDims, {entries}, Type::tile({G, 1}, kI32), std::move(expandAttrs),
                             "_entries_2d");
      Value* repeated = e.make(Opcode::Broadcast, {column}, Type::tile({G, rowsPerEntry}, kI32), {}, "_entries_rep");
      entries = e.make(Opcode::Reshape, {repeated}, Type::tile({R}, kI32), {}, "_entries");
    }
    Value* xg = e.toI64(entries, "_x_gather");
    rowInside = e.binary(Opcode::And, rowInside,
                         e.within(xg, e.splat(e.toI64(t.dims[g], "_dim_gather"), {R}, "_dim_gather_s"), "_gather_inside"),
                         "_row_inside_gathered");
    rowOffset = e.binary(Opcode::Add, rowOffset,
                         e.binary(Opcode::Mul, xg, e.splat(e.toI64(t.strides[g - 1], "_stride_gather"), {R},
                                                           "_stride_gather_s"),
                                  "_gather_offset"),
                         "_row_offset_gathered");
  }
  Value* fixedOffset = nullptr;
  Value* fixedInside = nullptr;
  for (int k = 1; k < n; ++k) {
    if (k == t.rowsDim || k == t.gatherDim) continue;
    const std::string dim = "_d" + std::to_string(k);
    Value* xk = e.toI64(t.coords[static_cast<size_t>(k)], dim + "_x");
    Value* inside = e.within(xk, e.toI64(t.dims[static_cast<size_t>(k)], dim + "_extent"), dim + "_inside");
    Value* offset = e.binary(Opcode::Mul, xk, e.toI64(t.strides[static_cast<size_t>(k - 1)], dim + "_stride"),
                             dim + "_offset");
    fixedInside = fixedInside ? e.binary(Opcode::And, fixedInside, inside, dim + "_inside_all") : inside;
    fixedOffset = fixedOffset ? e.binary(Opcode::Add, fixedOffset, offset, dim + "_offset_all") : offset;
  }
  if (fixedOffset) {
    rowOffset = e.binary(Opcode::Add, rowOffset, e.splat(fixedOffset, {R}, "_fixed_offsets"), "_row_offset_all");
    rowInside = e.binary(Opcode::And, rowInside, e.splat(fixedInside, {R}, "_fixed_inside"), "_row_inside_all");
  }
  if (t.rowBegin) {
    Value* rowsRead = e.binary(Opcode::And, e.cmp(CmpPredicate::Ge, rows, e.splat(t.rowBegin, {R}, "_row_begins"), "_from"),
                               e.cmp(CmpPredicate::Lt, rows, e.splat(t.rowEnd, {R}, "_row_ends"), "_to"), "_row_read");
    rowInside = e.binary(Opcode::And, rowInside, rowsRead, "_row_inside_read");
  }

  Value* offsets = e.binary(Opcode::Add, e.spread(rowOffset, true, R, C, "_row_offsets"),
                            e.spread(x0, false, R, C, "_column_offsets"), "_offsets");
  Value* mask = e.binary(Opcode::And, e.spread(rowInside, true, R, C, "_row_mask"),
                         e.spread(columnInside, false, R, C, "_column_mask"), "_mask");
  Value* pointers = e.make(Opcode::AddPtr, {e.splat(t.base, {R, C}, "_bases"), offsets},
                           Type::tile({R, C}, t.base->type()), {}, "_pointers");
  Attributes zeroAttrs;
  zeroAttrs.set("value", int64_t{0});
  Value* zeros = e.make(Opcode::Constant, {}, Type::tile({R, C}, type.elementType()), std::move(zeroAttrs), "_zeros");
  Value* loaded = e.make(Opcode::Load, {pointers, mask, zeros}, Type::tile({R, C}, type.elementType()), {}, "");
  loaded->setName(result->name());
  replaceAllUses(block, result, loaded);
}

bool readOnlyAsWarpgroupB(const Value* v, const std::unordered_map<const Value*, std::vector<const Operation*>>& uses) {
  auto found = uses.find(v);
  if (found == uses.end()) return false;
  for (const Operation* user : found->second) {
    if (user->opcode() == Opcode::Transpose && user->result()->type().rank() == 2) {
      if (!readOnlyAsWarpgroupB(user->result(), uses)) return false;
    } else if (user->opcode() != Opcode::Dot || user->operand(1) != v || user->operand(0) == v) {
      return false;
    }
  }
  return true;
}

bool keptForTma(const Operation& op, const Kernel& kernel, const PassOptions& options,
                const std::unordered_map<const Value*, std::vector<const Operation*>>& uses) {
  if (!options.hasWgmma || !options.allowTensorMemoryAccelerator ||
      !kernelFlag(kernel, KernelAttribute::TensorMemoryAccelerator) ||
      kernelAttribute(kernel, KernelAttribute::WarpSpecialize) == 0 ||
      kernelAttribute(kernel, KernelAttribute::NumStages) < 2 || !kernelFlag(kernel, KernelAttribute::AsyncCopy) ||
      !kernelFlag(kernel, KernelAttribute::WarpgroupMma))
    return false;
  const LoadTensorOperands t = loadTensorOperands(op);
  if (t.rowBegin) return false;
  const Operation* loop = op.parentBlock()->parentOp();
  if (!loop || loop->opcode() != Opcode::For) return false;
  const Type& type = op.result()->type();
  const ScalarKind element = type.scalarKind();
  if (element != ScalarKind::F16 && element != ScalarKind::BF16) return false;
  const int64_t R = type.shape()[0], C = type.shape()[1];
  if (C != 64 && C != 128 && C != 256) return false;
  const int64_t G = t.gatherDim >= 0 ? t.coords[static_cast<size_t>(t.gatherDim)]->type().shape()[0] : 1;
  const int64_t rowsPerEntry = R / G;
  if (!isPowerOfTwo(R) || R < 8 || rowsPerEntry % 8 != 0 || rowsPerEntry > 256) return false;
  if (!hostValue(kernel, t.base)) return false;
  for (const Value* v : t.dims)
    if (!hostValue(kernel, v)) return false;
  for (const Value* v : t.strides)
    if (!hostValue(kernel, v)) return false;
  return readOnlyAsWarpgroupB(op.result(), uses);
}

void collectValueUses(const Block& block, std::unordered_map<const Value*, std::vector<const Operation*>>& uses) {
  for (const auto& op : block.operations()) {
    for (const Value* operand : op->operands()) uses[operand].push_back(op.get());
    for (const auto& region : op->regions()) collectValueUses(*region, uses);
  }
}

void expandIn(Block& block, const Kernel& kernel, const PassOptions& options,
              const std::unordered_map<const Value*, std::vector<const Operation*>>& uses) {
  for (size_t i = 0; i < block.size(); ++i) {
    Operation& op = *block.operations()[i];
    for (const auto& region : op.regions()) expandIn(*region, kernel, options, uses);
    if (op.opcode() != Opcode::LoadTensor || keptForTma(op, kernel, options, uses)) continue;
    const size_t before = block.size();
    expand(op);
    i += block.size() - before;  // past the new ops, onto the expanded op
    block.remove(i);
    --i;
  }
}

}  // namespace

support::Status expandTensorLoads(Kernel& kernel, const PassOptions& options) {
  std::unordered_map<const Value*, std::vector<const Operation*>> uses;
  collectValueUses(kernel.body(), uses);
  expandIn(kernel.body(), kernel, options, uses);
  return support::Status::ok();
}

}  // namespace attnjit::compiler
