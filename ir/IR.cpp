#include "ir/IR.h"

#include <charconv>
#include <cmath>

namespace attnjit::ir {

namespace {
constexpr const char* kOpNames[] = {
#define ATTNJIT_OP(Enum, spelling, Family) spelling,
#include "ir/Ops.def"
};
constexpr const char* kPredNames[] = {"eq", "ne", "lt", "le", "gt", "ge"};
}  // namespace

const char* opcodeName(Opcode op) { return kOpNames[static_cast<int>(op)]; }

bool parseOpcodeName(std::string_view name, Opcode& out) {
  for (int i = 0; i < kNumOpcodes; ++i)
    if (name == kOpNames[i]) {
      out = static_cast<Opcode>(i);
      return true;
    }
  return false;
}

const char* cmpPredicateName(CmpPredicate p) { return kPredNames[static_cast<int>(p)]; }

bool parseCmpPredicate(std::string_view name, CmpPredicate& out) {
  for (int i = 0; i < 6; ++i)
    if (name == kPredNames[i]) {
      out = static_cast<CmpPredicate>(i);
      return true;
    }
  return false;
}

// ---- Attributes ----

void Attributes::set(std::string key, AttrValue value) {
  for (auto& [k, v] : entries_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  entries_.emplace_back(std::move(key), std::move(value));
}

const AttrValue* Attributes::find(std::string_view key) const {
  for (const auto& [k, v] : entries_)
    if (k == key) return &v;
  return nullptr;
}

int64_t Attributes::getInt(std::string_view key) const {
  const AttrValue* v = find(key);
  ATTNJIT_CHECK(v && std::holds_alternative<int64_t>(*v), "missing integer attribute " + std::string(key));
  return std::get<int64_t>(*v);
}

double Attributes::getFloat(std::string_view key) const {
  const AttrValue* v = find(key);
  ATTNJIT_CHECK(v, "missing float attribute " + std::string(key));
  if (auto* i = std::get_if<int64_t>(v)) return static_cast<double>(*i);
  ATTNJIT_CHECK(std::holds_alternative<double>(*v), "attribute is not a number: " + std::string(key));
  return std::get<double>(*v);
}

const std::string& Attributes::getString(std::string_view key) const {
  const AttrValue* v = find(key);
  ATTNJIT_CHECK(v && std::holds_alternative<std::string>(*v), "missing string attribute " + std::string(key));
  return std::get<std::string>(*v);
}

const std::vector<int64_t>& Attributes::getInts(std::string_view key) const {
  const AttrValue* v = find(key);
  ATTNJIT_CHECK(v && std::holds_alternative<std::vector<int64_t>>(*v), "missing list attribute " + std::string(key));
  return std::get<std::vector<int64_t>>(*v);
}

const Type& Attributes::getType(std::string_view key) const {
  const AttrValue* v = find(key);
  ATTNJIT_CHECK(v && std::holds_alternative<Type>(*v), "missing type attribute " + std::string(key));
  return std::get<Type>(*v);
}

bool Attributes::operator==(const Attributes& o) const { return entries_ == o.entries_; }

std::string attrValueStr(const AttrValue& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (auto* d = std::get_if<double>(&v)) {
    if (std::isnan(*d)) return "nan";
    if (std::isinf(*d)) return *d > 0 ? "inf" : "-inf";
    char buf[64];
    auto r = std::to_chars(buf, buf + sizeof buf, *d);  // shortest text that round-trips
    std::string s(buf, r.ptr);
    if (s.find_first_of(".e") == std::string::npos) s += ".0";
    return s;
  }
  if (auto* s = std::get_if<std::string>(&v)) {
    // Identifiers print bare, anything else quoted.
    bool ident = !s->empty() && (std::isalpha(static_cast<unsigned char>((*s)[0])) || (*s)[0] == '_');
    for (char c : *s) ident = ident && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (ident && *s != "inf" && *s != "nan") return *s;
    std::string q = "\"";
    for (char c : *s) {
      if (c == '"' || c == '\\') q += '\\';
      q += c;
    }
    return q + "\"";
  }
  if (auto* l = std::get_if<std::vector<int64_t>>(&v)) {
    std::string s = "[";
    for (size_t i = 0; i < l->size(); ++i) s += (i ? ", " : "") + std::to_string((*l)[i]);
    return s + "]";
  }
  return std::get<Type>(v).str();
}

// ---- Blocks and operations ----

Value* Block::addArgument(Type type, std::string name) {
  auto v = std::make_unique<Value>(std::move(type), std::move(name));
  v->ownerBlock_ = this;
  v->index_ = static_cast<unsigned>(args_.size());
  args_.push_back(std::move(v));
  return args_.back().get();
}

void Block::removeArgument(size_t i) {
  ATTNJIT_CHECK(i < args_.size(), "Block::removeArgument out of range");
  args_.erase(args_.begin() + static_cast<std::ptrdiff_t>(i));
  for (size_t k = i; k < args_.size(); ++k) args_[k]->index_ = static_cast<unsigned>(k);
}

Operation* Block::append(std::unique_ptr<Operation> op) { return insert(ops_.size(), std::move(op)); }

Operation* Block::insert(size_t position, std::unique_ptr<Operation> op) {
  ATTNJIT_CHECK(position <= ops_.size(), "Block::insert out of range");
  op->parent_ = this;
  auto it = ops_.insert(ops_.begin() + static_cast<std::ptrdiff_t>(position), std::move(op));
  return it->get();
}

std::unique_ptr<Operation> Block::remove(size_t position) {
  ATTNJIT_CHECK(position < ops_.size(), "Block::remove out of range");
  auto op = std::move(ops_[position]);
  ops_.erase(ops_.begin() + static_cast<std::ptrdiff_t>(position));
  op->parent_ = nullptr;
  return op;
}

Value* Operation::addResult(Type type, std::string name) {
  auto v = std::make_unique<Value>(std::move(type), std::move(name));
  v->definingOp_ = this;
  v->index_ = static_cast<unsigned>(results_.size());
  results_.push_back(std::move(v));
  return results_.back().get();
}

void Operation::removeOperand(size_t i) {
  ATTNJIT_CHECK(i < operands_.size(), "Operation::removeOperand out of range");
  operands_.erase(operands_.begin() + static_cast<std::ptrdiff_t>(i));
}

void Operation::removeResult(size_t i) {
  ATTNJIT_CHECK(i < results_.size(), "Operation::removeResult out of range");
  results_.erase(results_.begin() + static_cast<std::ptrdiff_t>(i));
  for (size_t k = i; k < results_.size(); ++k) results_[k]->index_ = static_cast<unsigned>(k);
}

Block* Operation::addRegion() {
  regions_.push_back(std::make_unique<Block>());
  regions_.back()->parentOp_ = this;
  return regions_.back().get();
}

// ---- Kernels and modules ----

Kernel::Kernel(std::string name, support::Location loc)
    : name_(std::move(name)), loc_(std::move(loc)), body_(std::make_unique<Block>()) {}

Value* Kernel::addParameter(Type type, std::string name, Attributes attrs) {
  paramAttrs_.push_back(std::move(attrs));
  return body_->addArgument(std::move(type), std::move(name));
}

const Constexpr* Kernel::findConstexpr(std::string_view name) const {
  for (const auto& c : constexprs_)
    if (c.name == name) return &c;
  return nullptr;
}

Kernel* Module::addKernel(std::unique_ptr<Kernel> k) {
  kernels_.push_back(std::move(k));
  return kernels_.back().get();
}

Kernel* Module::findKernel(std::string_view name) const {
  for (const auto& k : kernels_)
    if (k->name() == name) return k.get();
  return nullptr;
}

bool dotTakesTf32(const Operation& dot) {
  const AttrValue* precision = dot.attrs().find("input_precision");
  const auto* name = precision ? std::get_if<std::string>(precision) : nullptr;
  return name && *name == "tf32";
}

}  // namespace attnjit::ir
