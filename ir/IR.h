// The in-memory tile IR: SSA values, operations with attributes and regions,
// blocks, kernels and modules. Ownership is strictly hierarchical: a Module owns
// Kernels, a Kernel owns its body Block, a Block owns its arguments and
// Operations, an Operation owns its results and region Blocks. Values are
// referenced by raw pointer; they live as long as their owner.
//
// The ops themselves, with their exact semantics, are documented in Ops.def.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "support/Diagnostics.h"
#include "ir/Types.h"

namespace attnjit::ir {

enum class Opcode : uint16_t {
#define ATTNJIT_OP(Enum, spelling, Family) Enum,
#include "ir/Ops.def"
};
constexpr int kNumOpcodes = 0
#define ATTNJIT_OP(Enum, spelling, Family) +1
#include "ir/Ops.def"
    ;

const char* opcodeName(Opcode op);
bool parseOpcodeName(std::string_view name, Opcode& out);

// Comparison predicates of `cmp`.
enum class CmpPredicate : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };
const char* cmpPredicateName(CmpPredicate p);
bool parseCmpPredicate(std::string_view name, CmpPredicate& out);

// An attribute value: integer, float, identifier/string, integer list, or type.
// Printed as 3, 1.5 (a float always shows '.', 'e', inf or nan), lt / "name",
// [1, 0], and a type after a colon-free position is printed as the type text.
using AttrValue = std::variant<int64_t, double, std::string, std::vector<int64_t>, Type>;

// Ordered (insertion order is kept: printing is canonical because builders and the
// parser insert in a fixed order).
class Attributes {
 public:
  void set(std::string key, AttrValue value);
  const AttrValue* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed getters for attributes the verifier has checked.
  int64_t getInt(std::string_view key) const;
  double getFloat(std::string_view key) const;  // accepts an integer too
  const std::string& getString(std::string_view key) const;
  const std::vector<int64_t>& getInts(std::string_view key) const;
  const Type& getType(std::string_view key) const;
  const std::vector<std::pair<std::string, AttrValue>>& entries() const { return entries_; }
  bool empty() const { return entries_.empty(); }
  bool operator==(const Attributes& o) const;

 private:
  std::vector<std::pair<std::string, AttrValue>> entries_;
};
std::string attrValueStr(const AttrValue& v);

class Operation;
class Block;

// An SSA value: the result of an operation, or an argument of a block (kernel
// parameter, loop induction variable, loop-carried value).
class Value {
 public:
  Value(Type type, std::string name) : type_(std::move(type)), name_(std::move(name)) {}

  const Type& type() const { return type_; }
  void setType(Type t) { type_ = std::move(t); }
  // Name hint used by the printer ("q", "acc"); may be empty. Printed names are
  // made unique per kernel by the printer.
  const std::string& name() const { return name_; }
  void setName(std::string n) { name_ = std::move(n); }

  // Exactly one of these is set.
  Operation* definingOp() const { return definingOp_; }
  Block* ownerBlock() const { return ownerBlock_; }
  unsigned index() const { return index_; }  // result or argument number

 private:
  friend class Operation;
  friend class Block;
  Type type_;
  std::string name_;
  Operation* definingOp_ = nullptr;
  Block* ownerBlock_ = nullptr;
  unsigned index_ = 0;
};

class Block {
 public:
  Block() = default;
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;

  Value* addArgument(Type type, std::string name = {});
  // Removes argument i (which must be unused); later arguments are renumbered.
  void removeArgument(size_t i);
  const std::vector<std::unique_ptr<Value>>& arguments() const { return args_; }
  Value* argument(size_t i) const { return args_.at(i).get(); }
  size_t numArguments() const { return args_.size(); }

  // Appends op (taking ownership) and returns it.
  Operation* append(std::unique_ptr<Operation> op);
  Operation* insert(size_t position, std::unique_ptr<Operation> op);
  std::unique_ptr<Operation> remove(size_t position);
  const std::vector<std::unique_ptr<Operation>>& operations() const { return ops_; }
  size_t size() const { return ops_.size(); }
  bool empty() const { return ops_.empty(); }
  Operation* back() const { return ops_.empty() ? nullptr : ops_.back().get(); }

  // The op owning this block as a region (nullptr for a kernel body).
  Operation* parentOp() const { return parentOp_; }

 private:
  friend class Operation;
  std::vector<std::unique_ptr<Value>> args_;
  std::vector<std::unique_ptr<Operation>> ops_;
  Operation* parentOp_ = nullptr;
};

class Operation {
 public:
  Operation(Opcode opcode, support::Location loc) : opcode_(opcode), loc_(std::move(loc)) {}
  Operation(const Operation&) = delete;
  Operation& operator=(const Operation&) = delete;

  Opcode opcode() const { return opcode_; }
  const char* name() const { return opcodeName(opcode_); }
  const support::Location& location() const { return loc_; }
  void setLocation(support::Location l) { loc_ = std::move(l); }

  const std::vector<Value*>& operands() const { return operands_; }
  Value* operand(size_t i) const { return operands_.at(i); }
  size_t numOperands() const { return operands_.size(); }
  void addOperand(Value* v) { operands_.push_back(v); }
  void setOperand(size_t i, Value* v) { operands_.at(i) = v; }
  void removeOperand(size_t i);

  Value* addResult(Type type, std::string name = {});
  // Removes result i (which must be unused); later results are renumbered.
  void removeResult(size_t i);
  const std::vector<std::unique_ptr<Value>>& results() const { return results_; }
  Value* result(size_t i = 0) const { return results_.at(i).get(); }
  size_t numResults() const { return results_.size(); }

  Attributes& attrs() { return attrs_; }
  const Attributes& attrs() const { return attrs_; }

  // Regions: `for` has one (the body), `if` has two (then, else).
  Block* addRegion();
  const std::vector<std::unique_ptr<Block>>& regions() const { return regions_; }
  Block* region(size_t i) const { return regions_.at(i).get(); }
  size_t numRegions() const { return regions_.size(); }

  Block* parentBlock() const { return parent_; }

 private:
  friend class Block;
  Opcode opcode_;
  support::Location loc_;
  std::vector<Value*> operands_;
  std::vector<std::unique_ptr<Value>> results_;
  Attributes attrs_;
  std::vector<std::unique_ptr<Block>> regions_;
  Block* parent_ = nullptr;
};

// Whether a dot rounds its f32 operands to tf32 (input_precision = tf32,
// ir/Ops.def) rather than multiplying them exactly.
bool dotTakesTf32(const Operation& dot);

// A named compile-time constant of a kernel (BLOCK_M = 16, HEAD_SIZE = 128, ...).
struct Constexpr {
  std::string name;
  std::variant<int64_t, double> value;
  bool operator==(const Constexpr& o) const { return name == o.name && value == o.value; }
};

// A kernel: parameters are the body block's arguments (pointers, integers,
// floats), each with optional attributes (e.g. {align = 16}); kernel attributes
// carry launch facts and switches such as num_warps (ir/KernelAttributes.def).
class Kernel {
 public:
  explicit Kernel(std::string name, support::Location loc = {});

  const std::string& name() const { return name_; }
  const support::Location& location() const { return loc_; }
  Block& body() { return *body_; }
  const Block& body() const { return *body_; }

  Value* addParameter(Type type, std::string name, Attributes attrs = {});
  size_t numParameters() const { return body_->numArguments(); }
  Value* parameter(size_t i) const { return body_->argument(i); }
  const Attributes& parameterAttrs(size_t i) const { return paramAttrs_.at(i); }

  std::vector<Constexpr>& constexprs() { return constexprs_; }
  const std::vector<Constexpr>& constexprs() const { return constexprs_; }
  const Constexpr* findConstexpr(std::string_view name) const;

  Attributes& attrs() { return attrs_; }
  const Attributes& attrs() const { return attrs_; }
  // Documentation lines ("// ..." comment lines directly above `kernel` in the
  // text form, without the "// " prefix); printed back, so they round-trip.
  std::vector<std::string>& docLines() { return docLines_; }
  const std::vector<std::string>& docLines() const { return docLines_; }

 private:
  std::string name_;
  support::Location loc_;
  std::unique_ptr<Block> body_;
  std::vector<Attributes> paramAttrs_;
  std::vector<Constexpr> constexprs_;
  Attributes attrs_;
  std::vector<std::string> docLines_;
};

class Module {
 public:
  Kernel* addKernel(std::unique_ptr<Kernel> k);
  const std::vector<std::unique_ptr<Kernel>>& kernels() const { return kernels_; }
  Kernel* findKernel(std::string_view name) const;

 private:
  std::vector<std::unique_ptr<Kernel>> kernels_;
};

// Walks every operation in a block, nested regions included, in order (pre-order).
template <typename F>
void walk(const Block& block, F&& f) {
  for (const auto& op : block.operations()) {
    f(*op);
    for (const auto& r : op->regions()) walk(*r, f);
  }
}

}  // namespace attnjit::ir
