#include "ir/Printer.h"

#include <string_view>
#include <unordered_map>
#include <unordered_set>

namespace attnjit::ir {

namespace {

bool isValueNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

// Chooses the printed name of every value of one kernel: its hint when free, the
// hint with the first free suffix _1, _2, ... when taken, the next free decimal
// number when there is no hint. Names are assigned in text order, so a parsed
// kernel (whose names are unique) prints with exactly its own names.
class ValueNamer {
 public:
  const std::string& nameOf(const Value* v) {
    auto it = names_.find(v);
    if (it != names_.end()) return it->second;
    return names_.emplace(v, freshName(v->name())).first->second;
  }

 private:
  std::string freshName(const std::string& hint) {
    std::string base;
    for (char c : hint) base += isValueNameChar(c) ? c : '_';
    if (base.empty()) {
      while (used_.count(std::to_string(nextNumber_))) ++nextNumber_;
      base = std::to_string(nextNumber_++);
    } else if (used_.count(base)) {
      for (int suffix = 1;; ++suffix) {
        std::string candidate = base + "_" + std::to_string(suffix);
        if (!used_.count(candidate)) {
          base = std::move(candidate);
          break;
        }
      }
    }
    used_.insert(base);
    return base;
  }

  std::unordered_map<const Value*, std::string> names_;
  std::unordered_set<std::string> used_;
  int64_t nextNumber_ = 0;
};

class Printer {
 public:
  std::string kernel(const Kernel& k) {
    for (const std::string& line : k.docLines()) out_ += line.empty() ? "//\n" : "// " + line + "\n";
    out_ += "kernel @" + k.name() + "(";
    for (size_t i = 0; i < k.numParameters(); ++i) {
      if (i) out_ += ", ";
      out_ += value(k.parameter(i)) + ": " + k.parameter(i)->type().str();
      if (!k.parameterAttrs(i).empty()) out_ += " " + attrDict(k.parameterAttrs(i));
    }
    out_ += ")";
    if (!k.constexprs().empty()) {
      out_ += " constexprs {";
      for (size_t i = 0; i < k.constexprs().size(); ++i) {
        const Constexpr& c = k.constexprs()[i];
        if (i) out_ += ", ";
        out_ += c.name + " = ";
        if (auto* asInt = std::get_if<int64_t>(&c.value))
          out_ += attrValueStr(*asInt);
        else
          out_ += attrValueStr(std::get<double>(c.value));
      }
      out_ += "}";
    }
    if (!k.attrs().empty()) out_ += " attributes " + attrDict(k.attrs());
    out_ += " {\n";
    block(k.body(), 2);
    out_ += "}\n";
    return std::move(out_);
  }

  std::string operation(const Operation& op) {
    operation(op, 0);
    if (!out_.empty() && out_.back() == '\n') out_.pop_back();
    return std::move(out_);
  }

 private:
  std::string value(const Value* v) { return v ? "%" + namer_.nameOf(v) : std::string("%<null>"); }

  std::string valueList(const std::vector<Value*>& values, size_t from = 0) {
    std::string s;
    for (size_t i = from; i < values.size(); ++i) s += (i > from ? ", " : "") + value(values[i]);
    return s;
  }

  static std::string attrDict(const Attributes& attrs) {
    std::string s = "{";
    bool first = true;
    for (const auto& [key, v] : attrs.entries()) {
      s += (first ? "" : ", ") + key + " = " + attrValueStr(v);
      first = false;
    }
    return s + "}";
  }

  static std::string resultTypes(const Operation& op) {
    std::string s;
    for (size_t i = 0; i < op.numResults(); ++i) s += (i ? ", " : "") + op.result(i)->type().str();
    return s;
  }

  // "%a, %b = " (naming the results first: they come first in the text).
  void results(const Operation& op) {
    if (op.numResults() == 0) return;
    for (size_t i = 0; i < op.numResults(); ++i) out_ += (i ? ", " : "") + value(op.result(i));
    out_ += " = ";
  }

  void block(const Block& b, int indent) {
    for (const auto& op : b.operations()) operation(*op, indent);
  }

  void region(const Block& b, int indent) {
    out_ += "{\n";
    block(b, indent + 2);
    out_ += std::string(static_cast<size_t>(indent), ' ') + "}";
  }

  void operation(const Operation& op, int indent) {
    out_ += std::string(static_cast<size_t>(indent), ' ');
    if (op.opcode() == Opcode::For && isWellFormedFor(op))
      forOp(op, indent);
    else if (op.opcode() == Opcode::If && isWellFormedIf(op))
      ifOp(op, indent);
    else
      genericOp(op, indent);
    out_ += "\n";
  }

  static bool isWellFormedFor(const Operation& op) {
    return op.numOperands() >= 3 && op.numRegions() == 1 &&
           op.region(0)->numArguments() == op.numOperands() - 2 && op.numResults() == op.numOperands() - 3;
  }
  static bool isWellFormedIf(const Operation& op) { return op.numOperands() == 1 && op.numRegions() == 2; }

  void genericOp(const Operation& op, int indent) {
    results(op);
    out_ += op.name();
    if (op.numOperands()) out_ += " " + valueList(op.operands());
    if (!op.attrs().empty()) out_ += " " + attrDict(op.attrs());
    if (op.numResults()) out_ += " : " + resultTypes(op);
    // Regions of a malformed for/if (debug printing only; not parseable).
    for (const auto& r : op.regions()) {
      out_ += " ";
      region(*r, indent);
    }
  }

  void forOp(const Operation& op, int indent) {
    results(op);
    const Block& body = *op.region(0);
    // Separate statements: names are assigned in text order.
    out_ += "for " + value(body.argument(0));
    out_ += " = " + value(op.operand(0));
    out_ += " to " + value(op.operand(1));
    out_ += " step " + value(op.operand(2));
    if (op.numOperands() > 3) {
      out_ += " iter_args(";
      for (size_t i = 3; i < op.numOperands(); ++i) {
        if (i > 3) out_ += ", ";
        out_ += value(body.argument(i - 2));
        out_ += " = " + value(op.operand(i));
      }
      out_ += ")";
    }
    if (op.numResults()) out_ += " -> (" + resultTypes(op) + ")";
    if (!op.attrs().empty()) out_ += " attributes " + attrDict(op.attrs());
    out_ += " ";
    region(body, indent);
  }

  // The else region is omitted when it only yields nothing, which is what the
  // parser creates for an absent else.
  static bool isTrivialElse(const Block& b) {
    return b.size() == 1 && b.back()->opcode() == Opcode::Yield && b.back()->numOperands() == 0 &&
           b.back()->numResults() == 0 && b.back()->attrs().empty() && b.back()->numRegions() == 0;
  }

  void ifOp(const Operation& op, int indent) {
    results(op);
    out_ += "if " + value(op.operand(0));
    if (op.numResults()) out_ += " -> (" + resultTypes(op) + ")";
    if (!op.attrs().empty()) out_ += " attributes " + attrDict(op.attrs());
    out_ += " ";
    region(*op.region(0), indent);
    if (!isTrivialElse(*op.region(1))) {
      out_ += " else ";
      region(*op.region(1), indent);
    }
  }

  ValueNamer namer_;
  std::string out_;
};

}  // namespace

std::string printKernel(const Kernel& kernel) { return Printer().kernel(kernel); }

std::string printModule(const Module& module) {
  std::string out;
  for (const auto& k : module.kernels()) {
    if (!out.empty()) out += "\n";
    out += printKernel(*k);
  }
  return out;
}

std::string printOperation(const Operation& op) { return Printer().operation(op); }

}  // namespace attnjit::ir
