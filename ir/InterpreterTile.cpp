// Grid queries, constants and the ops that create or rearrange tiles (splat,
// broadcast, expand_dims, reshape, transpose, convert_layout) plus reductions.
// Tiles are row-major; layouts do not change values.
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "ir/InterpreterProgram.h"
#include "ir/Numeric.h"

namespace attnjit::ir {

namespace {

// Fills `out` with `count` copies of a number given as an attribute or a
// constexpr, converted to the element type.
support::Status fillConstant(ProgramContext& ctx, const CompiledOp& op, const std::variant<int64_t, double>& number,
                    RuntimeValue& out) {
  const Type& type = op.op->result(0)->type();
  const ScalarKind kind = type.scalarKind();
  const auto count = static_cast<size_t>(type.numElements());
  const int64_t* integer = std::get_if<int64_t>(&number);
  switch (elementClass(type)) {
    case ElementClass::Float:
      out.floats.assign(count,
                        integer ? intToFloatKind(*integer, kind) : roundToFloatKind(std::get<double>(number), kind));
      return support::Status::ok();
    case ElementClass::Int:
      out.ints.assign(count, integer ? wrapInt(*integer, kind) : floatToInt(std::get<double>(number), kind));
      return support::Status::ok();
    case ElementClass::Pointer:
      break;
  }
  return ctx.error(op, "cannot make a pointer constant");
}

}  // namespace

support::Status interpretGridQuery(ProgramContext& ctx, const CompiledOp& op) {
  const int64_t axis = op.op->attrs().getInt("axis");
  if (axis < 0 || axis > 2) return ctx.error(op, "axis " + std::to_string(axis) + " is not 0, 1 or 2");
  const LaunchGrid grid = ctx.grid();
  const int64_t extents[] = {grid.x, grid.y, grid.z};
  const int64_t value = op.op->opcode() == Opcode::ProgramId ? ctx.programId(static_cast<int>(axis)) : extents[axis];
  ctx.result(op).ints.assign(1, value);
  return support::Status::ok();
}

support::Status interpretConstant(ProgramContext& ctx, const CompiledOp& op) {
  const AttrValue* value = op.op->attrs().find("value");
  if (const auto* integer = value ? std::get_if<int64_t>(value) : nullptr)
    return fillConstant(ctx, op, *integer, ctx.result(op));
  if (const auto* real = value ? std::get_if<double>(value) : nullptr)
    return fillConstant(ctx, op, *real, ctx.result(op));
  return ctx.error(op, "needs a numeric 'value' attribute");
}

support::Status interpretConstexpr(ProgramContext& ctx, const CompiledOp& op) {
  const std::string& name = op.op->attrs().getString("name");
  const Constexpr* constant = ctx.kernel().findConstexpr(name);
  if (!constant) return ctx.error(op, "kernel '" + ctx.kernel().name() + "' has no constexpr '" + name + "'");
  return fillConstant(ctx, op, constant->value, ctx.result(op));
}

support::Status interpretArange(ProgramContext& ctx, const CompiledOp& op) {
  const int64_t start = op.op->attrs().getInt("start");
  const int64_t end = op.op->attrs().getInt("end");
  const IntWrapper wrap(op.op->result(0)->type().scalarKind());
  auto& out = ctx.result(op).ints;
  out.clear();
  for (int64_t v = start; v < end; ++v) out.push_back(wrap(v));
  return support::Status::ok();
}

support::Status interpretSplat(ProgramContext& ctx, const CompiledOp& op) {
  const Type& type = op.op->result(0)->type();
  const auto count = static_cast<size_t>(type.numElements());
  const RuntimeValue& in = ctx.operand(op, 0);
  RuntimeValue& out = ctx.result(op);
  switch (elementClass(type)) {
    case ElementClass::Float:
      out.floats.assign(count, in.floats.at(0));
      break;
    case ElementClass::Int:
      out.ints.assign(count, in.ints.at(0));
      break;
    case ElementClass::Pointer:
      out.addresses.assign(count, in.addresses.at(0));
      break;
  }
  return support::Status::ok();
}

namespace {

// A rank-3 view: output extents and, per output dimension, the stride (in input
// elements) to step through the input. Lower ranks are padded with leading 1s.
struct StridedView {
  std::array<int64_t, 3> extents{1, 1, 1};
  std::array<int64_t, 3> inputStrides{0, 0, 0};
};

std::array<int64_t, 3> rowMajorStrides(const std::vector<int64_t>& shape) {
  std::array<int64_t, 3> strides{0, 0, 0};
  int64_t stride = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

template <typename T>
void gather(const std::vector<T>& in, const StridedView& view, std::vector<T>& out) {
  out.resize(static_cast<size_t>(view.extents[0] * view.extents[1] * view.extents[2]));
  size_t next = 0;
  for (int64_t i = 0; i < view.extents[0]; ++i)
    for (int64_t j = 0; j < view.extents[1]; ++j)
      for (int64_t k = 0; k < view.extents[2]; ++k)
        out[next++] = in[i * view.inputStrides[0] + j * view.inputStrides[1] + k * view.inputStrides[2]];
}

void gatherValue(const RuntimeValue& in, const StridedView& view, RuntimeValue& out, ElementClass cls) {
  switch (cls) {
    case ElementClass::Float:
      gather(in.floats, view, out.floats);
      break;
    case ElementClass::Int:
      gather(in.ints, view, out.ints);
      break;
    case ElementClass::Pointer:
      gather(in.addresses, view, out.addresses);
      break;
  }
}

}  // namespace

support::Status interpretBroadcast(ProgramContext& ctx, const CompiledOp& op) {
  const Type& inType = op.op->operand(0)->type();
  const Type& outType = op.op->result(0)->type();
  const auto& inShape = inType.shape();
  const auto& outShape = outType.shape();
  if (inShape.size() != outShape.size() || outShape.size() > 3)
    return ctx.error(op, "cannot broadcast " + inType.str() + " to " + outType.str());
  const std::array<int64_t, 3> strides = rowMajorStrides(inShape);
  StridedView view;
  const size_t pad = 3 - outShape.size();
  for (size_t d = 0; d < outShape.size(); ++d) {
    view.extents[pad + d] = outShape[d];
    view.inputStrides[pad + d] = inShape[d] == 1 ? 0 : strides[d];
  }
  gatherValue(ctx.operand(op, 0), view, ctx.result(op), elementClass(outType));
  return support::Status::ok();
}

support::Status interpretTranspose(ProgramContext& ctx, const CompiledOp& op) {
  const Type& inType = op.op->operand(0)->type();
  const auto& perm = op.op->attrs().getInts("perm");
  const auto& outShape = op.op->result(0)->type().shape();
  if (perm.size() != inType.shape().size() || outShape.size() != perm.size() || perm.size() > 3)
    return ctx.error(op, "permutation does not match the operand's rank");
  const std::array<int64_t, 3> strides = rowMajorStrides(inType.shape());
  StridedView view;
  const size_t pad = 3 - outShape.size();
  for (size_t d = 0; d < outShape.size(); ++d) {
    if (perm[d] < 0 || perm[d] >= static_cast<int64_t>(perm.size())) return ctx.error(op, "invalid permutation");
    view.extents[pad + d] = outShape[d];
    view.inputStrides[pad + d] = strides[perm[d]];
  }
  gatherValue(ctx.operand(op, 0), view, ctx.result(op), elementClass(inType));
  return support::Status::ok();
}

// expand_dims, reshape and convert_layout keep the row-major element sequence.
support::Status interpretExpandDims(ProgramContext& ctx, const CompiledOp& op) {
  copyElements(ctx.operand(op, 0), ctx.result(op), elementClass(op.op->result(0)->type()));
  return support::Status::ok();
}

support::Status interpretReshape(ProgramContext& ctx, const CompiledOp& op) {
  copyElements(ctx.operand(op, 0), ctx.result(op), elementClass(op.op->result(0)->type()));
  return support::Status::ok();
}

support::Status interpretConvertLayout(ProgramContext& ctx, const CompiledOp& op) {
  copyElements(ctx.operand(op, 0), ctx.result(op), elementClass(op.op->result(0)->type()));
  return support::Status::ok();
}

namespace {

// The operand viewed as [outer, length, inner] around the reduced axis.
struct ReductionShape {
  int64_t outer = 1, length = 1, inner = 1;
};

template <typename Accumulator, typename T, typename Combine, typename Finish>
void reduceAlong(const std::vector<T>& in, const ReductionShape& s, std::vector<T>& out, Combine combine,
                 Finish finish) {
  out.resize(static_cast<size_t>(s.outer * s.inner));
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      const T* column = in.data() + o * s.length * s.inner + i;
      Accumulator acc = static_cast<Accumulator>(column[0]);
      for (int64_t k = 1; k < s.length; ++k) acc = combine(acc, static_cast<Accumulator>(column[k * s.inner]));
      out[o * s.inner + i] = finish(acc);
    }
}

}  // namespace

// Sums run sequentially along the axis, in float for f32/f16/bf16/fp8 (rounded to
// the element kind at the end) and in double for f64; integers wrap.
support::Status interpretReduce(ProgramContext& ctx, const CompiledOp& op) {
  const Type& inType = op.op->operand(0)->type();
  const ScalarKind kind = inType.scalarKind();
  const int64_t axis = op.op->attrs().getInt("axis");
  const auto& shape = inType.shape();
  if (axis < 0 || axis >= static_cast<int64_t>(shape.size()))
    return ctx.error(op, "axis " + std::to_string(axis) + " is out of range for " + inType.str());
  ReductionShape s;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) s.outer *= shape[d];
    if (d == axis) s.length = shape[d];
    if (d > axis) s.inner *= shape[d];
  }
  const Opcode code = op.op->opcode();
  const RuntimeValue& in = ctx.operand(op, 0);
  RuntimeValue& out = ctx.result(op);
  switch (elementClass(inType)) {
    case ElementClass::Float: {
      const auto round = [kind](auto v) { return roundToFloatKind(v, kind); };
      if (kind == ScalarKind::F64) {
        if (code == Opcode::ReduceSum) reduceAlong<double>(in.floats, s, out.floats, std::plus<>(), round);
        if (code == Opcode::ReduceMax) reduceAlong<double>(in.floats, s, out.floats, maxPropagatingNaN<double>, round);
        if (code == Opcode::ReduceMin) reduceAlong<double>(in.floats, s, out.floats, minPropagatingNaN<double>, round);
      } else {
        if (code == Opcode::ReduceSum) reduceAlong<float>(in.floats, s, out.floats, std::plus<>(), round);
        if (code == Opcode::ReduceMax) reduceAlong<float>(in.floats, s, out.floats, maxPropagatingNaN<float>, round);
        if (code == Opcode::ReduceMin) reduceAlong<float>(in.floats, s, out.floats, minPropagatingNaN<float>, round);
      }
      return support::Status::ok();
    }
    case ElementClass::Int: {
      const IntWrapper wrap(kind);
      const auto sum = [](int64_t a, int64_t b) {
        return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
      };
      const auto max = [kind](int64_t a, int64_t b) { return signedValue(a, kind) < signedValue(b, kind) ? b : a; };
      const auto min = [kind](int64_t a, int64_t b) { return signedValue(b, kind) < signedValue(a, kind) ? b : a; };
      if (code == Opcode::ReduceSum) reduceAlong<int64_t>(in.ints, s, out.ints, sum, wrap);
      if (code == Opcode::ReduceMax) reduceAlong<int64_t>(in.ints, s, out.ints, max, wrap);
      if (code == Opcode::ReduceMin) reduceAlong<int64_t>(in.ints, s, out.ints, min, wrap);
      return support::Status::ok();
    }
    case ElementClass::Pointer:
      break;
  }
  return ctx.error(op, "cannot reduce pointers");
}

}  // namespace attnjit::ir
