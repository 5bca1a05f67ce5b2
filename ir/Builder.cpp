#include "ir/Builder.h"

#include "ir/Verifier.h"

namespace attnjit::ir {

namespace {
Type i32Type() { return Type::scalar(ScalarKind::I32); }
}  // namespace

Builder::Builder(Kernel& kernel) : kernel_(kernel) { insertion_.push_back(&kernel.body()); }

void Builder::record(support::Status s) {
  if (status_.isOk() && !s.isOk()) status_ = std::move(s);
}

Operation* Builder::create(Opcode opcode, const std::vector<Value*>& operands, const std::vector<Type>& resultTypes,
                           Attributes attrs, const std::vector<std::string>& resultNames) {
  auto op = std::make_unique<Operation>(opcode, loc_);
  for (Value* v : operands) {
    ATTNJIT_CHECK(v != nullptr, std::string("null operand given to ") + opcodeName(opcode));
    op->addOperand(v);
  }
  for (size_t i = 0; i < resultTypes.size(); ++i)
    op->addResult(resultTypes[i], i < resultNames.size() ? resultNames[i] : std::string());
  op->attrs() = std::move(attrs);
  Operation* created = current().append(std::move(op));
  // Region ops are verified when their regions are complete (endFor / endIf).
  if (opcode != Opcode::For && opcode != Opcode::If) record(verifyOperation(*created, kernel_));
  return created;
}

Value* Builder::programId(int axis, std::string name) {
  Attributes a;
  a.set("axis", int64_t{axis});
  return create(Opcode::ProgramId, {}, {i32Type()}, std::move(a), {std::move(name)})->result();
}

Value* Builder::numPrograms(int axis, std::string name) {
  Attributes a;
  a.set("axis", int64_t{axis});
  return create(Opcode::NumPrograms, {}, {i32Type()}, std::move(a), {std::move(name)})->result();
}

Value* Builder::constInt(int64_t v, const Type& type, std::string name) {
  Attributes a;
  a.set("value", v);
  return create(Opcode::Constant, {}, {type}, std::move(a), {std::move(name)})->result();
}

Value* Builder::constFloat(double v, const Type& type, std::string name) {
  Attributes a;
  a.set("value", v);
  return create(Opcode::Constant, {}, {type}, std::move(a), {std::move(name)})->result();
}

Value* Builder::constexprValue(const std::string& constexprName, ScalarKind kind, std::string name) {
  Attributes a;
  a.set("name", constexprName);
  return create(Opcode::Constexpr, {}, {Type::scalar(kind)}, std::move(a), {std::move(name)})->result();
}

Value* Builder::arange(int64_t start, int64_t end, std::string name) {
  Attributes a;
  a.set("start", start);
  a.set("end", end);
  Type t = Type::tile({end - start > 0 ? end - start : 1}, i32Type());
  return create(Opcode::Arange, {}, {t}, std::move(a), {std::move(name)})->result();
}

Value* Builder::splat(Value* scalar, std::vector<int64_t> shape, std::string name) {
  Type t = Type::tile(std::move(shape), scalar->type().elementType());
  return create(Opcode::Splat, {scalar}, {t}, {}, {std::move(name)})->result();
}

Value* Builder::broadcast(Value* tile, std::vector<int64_t> shape, std::string name) {
  Type t = tile->type().withShape(std::move(shape));
  return create(Opcode::Broadcast, {tile}, {t}, {}, {std::move(name)})->result();
}

Value* Builder::expandDims(Value* tile, int axis, std::string name) {
  std::vector<int64_t> shape = tile->type().shape();
  if (axis >= 0 && axis <= static_cast<int>(shape.size())) shape.insert(shape.begin() + axis, 1);
  Attributes a;
  a.set("axis", int64_t{axis});
  Type t = tile->type().withShape(std::move(shape));
  return create(Opcode::ExpandDims, {tile}, {t}, std::move(a), {std::move(name)})->result();
}

Value* Builder::reshape(Value* tile, std::vector<int64_t> shape, std::string name) {
  Type t = tile->type().withShape(std::move(shape));
  return create(Opcode::Reshape, {tile}, {t}, {}, {std::move(name)})->result();
}

Value* Builder::transpose(Value* tile, std::vector<int64_t> perm, std::string name) {
  const auto& in = tile->type().shape();
  std::vector<int64_t> shape;
  for (int64_t p : perm) shape.push_back(p >= 0 && p < static_cast<int64_t>(in.size()) ? in[p] : 1);
  Attributes a;
  a.set("perm", std::move(perm));
  Type t = tile->type().withShape(std::move(shape));
  return create(Opcode::Transpose, {tile}, {t}, std::move(a), {std::move(name)})->result();
}

Value* Builder::convertLayout(Value* tile, LayoutRef layout, std::string name) {
  Type t = tile->type().withLayout(std::move(layout));
  return create(Opcode::ConvertLayout, {tile}, {t}, {}, {std::move(name)})->result();
}

Value* Builder::binary(Opcode op, Value* a, Value* b, std::string name) {
  return create(op, {a, b}, {a->type()}, {}, {std::move(name)})->result();
}

Value* Builder::divApprox(Value* a, Value* b, std::string name) {
  Attributes attrs;
  attrs.set("approx", int64_t{1});
  return create(Opcode::Div, {a, b}, {a->type()}, std::move(attrs), {std::move(name)})->result();
}

Value* Builder::mulSkipOnes(Value* a, Value* b, std::string name) {
  Attributes attrs;
  attrs.set("skip_ones", int64_t{1});
  return create(Opcode::Mul, {a, b}, {a->type()}, std::move(attrs), {std::move(name)})->result();
}

Value* Builder::unary(Opcode op, Value* a, std::string name) {
  return create(op, {a}, {a->type()}, {}, {std::move(name)})->result();
}

Value* Builder::cmp(CmpPredicate pred, Value* a, Value* b, std::string name) {
  Attributes at;
  at.set("pred", std::string(cmpPredicateName(pred)));
  Type t = a->type().withElement(Type::scalar(ScalarKind::I1));
  return create(Opcode::Cmp, {a, b}, {t}, std::move(at), {std::move(name)})->result();
}

Value* Builder::select(Value* cond, Value* a, Value* b, std::string name) {
  return create(Opcode::Select, {cond, a, b}, {a->type()}, {}, {std::move(name)})->result();
}

Value* Builder::cast(Value* v, ScalarKind to, std::string name) {
  return create(Opcode::Cast, {v}, {v->type().withScalarKind(to)}, {}, {std::move(name)})->result();
}

Value* Builder::bitcast(Value* v, ScalarKind to, std::string name) {
  // Pointers keep their address space and change their pointee.
  const Type& type = v->type();
  const Type result = type.hasPointerElements() ? type.withElement(Type::pointer(to, type.addressSpace()))
                                                : type.withScalarKind(to);
  return create(Opcode::Bitcast, {v}, {result}, {}, {std::move(name)})->result();
}

Value* Builder::unpackNibbles(Value* bytes, Value* zeroPoints, bool high, int flip, ScalarKind to, std::string name) {
  Attributes at;
  at.set("high", int64_t{high ? 1 : 0});
  if (flip != 0) at.set("flip", int64_t{flip});
  return create(Opcode::UnpackNibbles, {bytes, zeroPoints}, {bytes->type().withScalarKind(to)}, std::move(at),
                {std::move(name)})
      ->result();
}

Value* Builder::addPtr(Value* ptr, Value* offset, std::string name) {
  return create(Opcode::AddPtr, {ptr, offset}, {ptr->type()}, {}, {std::move(name)})->result();
}

Value* Builder::load(Value* ptr, Value* mask, Value* other, std::string name) {
  std::vector<Value*> ops = {ptr};
  if (mask) ops.push_back(mask);
  if (other) ops.push_back(other);
  return create(Opcode::Load, ops, {ptr->type().pointeeType()}, {}, {std::move(name)})->result();
}

Value* Builder::loadTensor(const LoadTensorOperands& tensor, int64_t rows, int64_t columns, std::string name) {
  const Type element = tensor.base ? tensor.base->type().pointeeType() : Type::scalar(ScalarKind::I32);
  return create(Opcode::LoadTensor, tensor.flatten(), {Type::tile({rows, columns}, element)}, tensor.attributes(),
                {std::move(name)})
      ->result();
}

void Builder::store(Value* ptr, Value* value, Value* mask) {
  std::vector<Value*> ops = {ptr, value};
  if (mask) ops.push_back(mask);
  create(Opcode::Store, ops, {}, {});
}

Value* Builder::dot(Value* a, Value* b, Value* acc, bool tf32, std::string name) {
  Attributes at;
  at.set("acc", std::string("f32"));
  if (tf32) at.set("input_precision", std::string("tf32"));
  return create(Opcode::Dot, {a, b, acc}, {acc->type()}, std::move(at), {std::move(name)})->result();
}

Value* Builder::dot(Value* a, Value* b, Value* acc, DotOptions options, std::string name) {
  Attributes at;
  at.set("acc", std::string("f32"));
  if (options.tf32) at.set("input_precision", std::string("tf32"));
  if (options.k > 0) at.set("k_extent", options.k);
  if (options.n > 0) at.set("n_extent", options.n);
  return create(Opcode::Dot, {a, b, acc}, {acc->type()}, std::move(at), {std::move(name)})->result();
}

Value* Builder::reduce(Opcode op, Value* tile, int axis, std::string name) {
  std::vector<int64_t> shape = tile->type().shape();
  if (axis >= 0 && axis < static_cast<int>(shape.size())) shape.erase(shape.begin() + axis);
  Attributes at;
  at.set("axis", int64_t{axis});
  Type t = tile->type().withShape(std::move(shape));
  return create(op, {tile}, {t}, std::move(at), {std::move(name)})->result();
}

Builder::ForLoop Builder::beginFor(Value* lo, Value* hi, Value* step, const std::vector<Value*>& inits,
                                   std::string ivName, const std::vector<std::string>& iterNames) {
  std::vector<Value*> operands = {lo, hi, step};
  std::vector<Type> types;
  for (Value* v : inits) {
    operands.push_back(v);
    types.push_back(v->type());
  }
  Operation* op = create(Opcode::For, operands, types, {});
  Block* body = op->addRegion();
  ForLoop loop;
  loop.inductionVar = body->addArgument(lo->type(), std::move(ivName));
  for (size_t i = 0; i < inits.size(); ++i)
    loop.iterArgs.push_back(body->addArgument(types[i], i < iterNames.size() ? iterNames[i] : std::string()));
  openOps_.push_back(op);
  insertion_.push_back(body);
  return loop;
}

std::vector<Value*> Builder::endFor(const std::vector<Value*>& yielded, const std::vector<std::string>& resultNames) {
  ATTNJIT_CHECK(!openOps_.empty() && openOps_.back()->opcode() == Opcode::For, "endFor without beginFor");
  create(Opcode::Yield, yielded, {}, {});
  Operation* op = openOps_.back();
  openOps_.pop_back();
  insertion_.pop_back();
  record(verifyOperation(*op, kernel_));
  std::vector<Value*> results;
  for (size_t i = 0; i < op->numResults(); ++i) {
    if (i < resultNames.size()) op->result(i)->setName(resultNames[i]);
    results.push_back(op->result(i));
  }
  return results;
}

void Builder::beginIf(Value* cond, std::vector<Type> resultTypes) {
  Operation* op = create(Opcode::If, {cond}, resultTypes, {});
  op->addRegion();
  op->addRegion();
  openOps_.push_back(op);
  insertion_.push_back(op->region(0));
}

void Builder::beginElse(const std::vector<Value*>& thenValues) {
  ATTNJIT_CHECK(!openOps_.empty() && openOps_.back()->opcode() == Opcode::If, "beginElse without beginIf");
  ATTNJIT_CHECK(insertion_.back() == openOps_.back()->region(0), "beginElse twice");
  create(Opcode::Yield, thenValues, {}, {});
  insertion_.back() = openOps_.back()->region(1);
}

std::vector<Value*> Builder::endIf(const std::vector<Value*>& elseValues, const std::vector<std::string>& resultNames) {
  ATTNJIT_CHECK(!openOps_.empty() && openOps_.back()->opcode() == Opcode::If, "endIf without beginIf");
  Operation* op = openOps_.back();
  if (insertion_.back() == op->region(0)) beginElse({});  // no else: then yields nothing
  create(Opcode::Yield, elseValues, {}, {});
  openOps_.pop_back();
  insertion_.pop_back();
  record(verifyOperation(*op, kernel_));
  std::vector<Value*> results;
  for (size_t i = 0; i < op->numResults(); ++i) {
    if (i < resultNames.size()) op->result(i)->setName(resultNames[i]);
    results.push_back(op->result(i));
  }
  return results;
}

support::Status Builder::finish() {
  ATTNJIT_CHECK(openOps_.empty(), "Builder::finish with an open for/if");
  create(Opcode::Return, {}, {}, {});
  record(verifyKernel(kernel_));
  return status_;
}

}  // namespace attnjit::ir
