// Recursive-descent parser for the .tir text form (grammar: docs/tir-syntax.md).
// Every parse function returns false after recording the first error; nothing
// after the first error is parsed. Region nesting and layout nesting are bounded
// so that hostile input cannot exhaust the stack.
#include "ir/Parser.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/Lexer.h"
#include "ir/Verifier.h"

namespace attnjit::ir {

namespace {

constexpr int kMaxRegionDepth = 64;
constexpr int kMaxLayoutDepth = 16;
constexpr int kMaxTileRank = 3;
// Tiles are register/shared-memory sized; the bound keeps element counts far from
// int64 overflow in every later computation.
constexpr int64_t kMaxTileElements = (int64_t{1} << 31) - 1;

// "//" comment lines directly above the `kernel` keyword, without "//" and one
// following space.
std::vector<std::string> docLinesAbove(std::string_view text, const Token& keyword) {
  std::vector<std::string> lines;
  if (!keyword.firstOnLine || static_cast<size_t>(keyword.col - 1) > keyword.offset) return lines;
  size_t lineStart = keyword.offset - static_cast<size_t>(keyword.col - 1);
  while (lineStart > 0) {
    size_t prevEnd = lineStart - 1;  // the '\n' ending the previous line
    size_t prevStart = prevEnd == 0 ? std::string_view::npos : text.find_last_of('\n', prevEnd - 1);
    prevStart = prevStart == std::string_view::npos ? 0 : prevStart + 1;
    std::string_view line = text.substr(prevStart, prevEnd - prevStart);
    while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t firstNonSpace = line.find_first_not_of(" \t");
    if (firstNonSpace == std::string_view::npos || line.substr(firstNonSpace, 2) != "//") break;
    std::string_view content = line.substr(firstNonSpace + 2);
    if (!content.empty() && content.front() == ' ') content.remove_prefix(1);
    lines.emplace_back(content);
    lineStart = prevStart;
  }
  return {lines.rbegin(), lines.rend()};
}

class Parser {
 public:
  Parser(std::string_view text, std::string fileName) : lexer_(text), file_(std::move(fileName)) { advance(); }

  support::Expected<std::unique_ptr<Module>> module() {
    auto result = std::make_unique<Module>();
    do {
      if (!parseKernel(*result)) return *error_;
    } while (tok_.kind != TokenKind::Eof);
    support::Status verified = verifyModule(*result);
    if (!verified) return verified;
    return result;
  }

  support::Expected<Type> standaloneType() {
    Type t;
    if (!parseType(t)) return *error_;
    if (tok_.kind != TokenKind::Eof) {
      fail(tok_, "unexpected " + describeToken(tok_) + " after type");
      return *error_;
    }
    return t;
  }

 private:
  // ---- tokens and errors ----

  void advance() { tok_ = lexer_.next(); }
  support::Location loc(const Token& t) const { return support::Location{file_, t.line, t.col}; }

  bool fail(const Token& at, std::string message) {
    if (!error_) error_ = support::Diagnostic{loc(at), at.kind == TokenKind::Error ? at.text : std::move(message)};
    return false;
  }
  bool is(TokenKind kind) const { return tok_.kind == kind; }
  bool isKeyword(std::string_view word) const { return tok_.kind == TokenKind::Identifier && tok_.text == word; }
  bool expect(TokenKind kind, const std::string& what) {
    if (!is(kind)) return fail(tok_, "expected " + what + ", got " + describeToken(tok_));
    advance();
    return true;
  }
  bool expectKeyword(std::string_view word, const std::string& context) {
    if (!isKeyword(word))
      return fail(tok_, "expected '" + std::string(word) + "' " + context + ", got " + describeToken(tok_));
    advance();
    return true;
  }

  bool parseInt(const Token& t, int64_t& out) {
    const char* begin = t.text.data();
    auto [ptr, ec] = std::from_chars(begin, begin + t.text.size(), out);
    if (ec == std::errc::result_out_of_range)
      return fail(t, "integer literal " + describeToken(t) + " does not fit in 64 bits");
    if (ec != std::errc() || ptr != begin + t.text.size())
      return fail(t, "invalid integer literal " + describeToken(t));
    return true;
  }

  bool parseFloat(const Token& t, double& out) {
    const char* begin = t.text.data();
    auto [ptr, ec] = std::from_chars(begin, begin + t.text.size(), out);
    if (ec == std::errc::result_out_of_range) {
      // Underflow to a subnormal or zero is fine; overflow is not.
      out = std::strtod(t.text.c_str(), nullptr);
      if (std::isinf(out)) return fail(t, "float literal " + describeToken(t) + " is out of range");
      return true;
    }
    if (ec != std::errc() || ptr != begin + t.text.size()) return fail(t, "invalid float literal " + describeToken(t));
    return true;
  }

  // A number literal as an attribute or constexpr value: 3, -3, 0.5, 1e-30, inf,
  // -inf, nan.
  bool parseNumber(std::variant<int64_t, double>& out, const std::string& what) {
    if (is(TokenKind::Integer)) {
      int64_t v = 0;
      if (!parseInt(tok_, v)) return false;
      out = v;
    } else if (is(TokenKind::Float)) {
      double v = 0;
      if (!parseFloat(tok_, v)) return false;
      out = v;
    } else if (isKeyword("inf") || isKeyword("nan")) {
      out = tok_.text == "inf" ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
    } else if (is(TokenKind::Minus)) {
      advance();
      if (!isKeyword("inf")) return fail(tok_, "expected 'inf' after '-', got " + describeToken(tok_));
      out = -std::numeric_limits<double>::infinity();
    } else {
      return fail(tok_, "expected " + what + ", got " + describeToken(tok_));
    }
    advance();
    return true;
  }

  // ---- types ----

  bool parseScalar(ScalarKind& out, const std::string& what) {
    if (!is(TokenKind::Identifier) || !parseScalarName(tok_.text, out))
      return fail(tok_, "expected " + what + ", got " + describeToken(tok_));
    advance();
    return true;
  }

  bool parseType(Type& out) {
    if (isKeyword("ptr")) return parsePointerType(out);
    if (isKeyword("tile")) return parseTileType(out);
    ScalarKind kind;
    if (!parseScalar(kind, "type")) return false;
    out = Type::scalar(kind);
    return true;
  }

  bool parsePointerType(Type& out) {
    advance();  // ptr
    if (!expect(TokenKind::Less, "'<' after 'ptr'")) return false;
    AddressSpace space;
    if (isKeyword("global"))
      space = AddressSpace::Global;
    else if (isKeyword("shared"))
      space = AddressSpace::Shared;
    else
      return fail(tok_, "expected address space 'global' or 'shared', got " + describeToken(tok_));
    advance();
    if (!expect(TokenKind::Comma, "',' after the address space")) return false;
    ScalarKind pointee;
    if (!parseScalar(pointee, "pointee scalar type")) return false;
    if (!expect(TokenKind::Greater, "'>' to close the pointer type")) return false;
    out = Type::pointer(pointee, space);
    return true;
  }

  // tile<16x128xbf16[, #layout]>: the shape is lexed by hand because extents, the
  // 'x' separators and the element type touch.
  bool parseTileType(Type& out) {
    advance();  // tile
    if (!expect(TokenKind::Less, "'<' after 'tile'")) return false;
    std::vector<int64_t> shape;
    int64_t elements = 1;
    while (is(TokenKind::Integer) || is(TokenKind::Float)) {
      if (is(TokenKind::Float)) return fail(tok_, "tile extent must be an integer, got " + describeToken(tok_));
      int64_t extent = 0;
      if (!parseInt(tok_, extent)) return false;
      if (extent <= 0) return fail(tok_, "tile extent must be positive, got " + tok_.text);
      if (static_cast<int>(shape.size()) == kMaxTileRank)
        return fail(tok_, "tile rank must be at most " + std::to_string(kMaxTileRank));
      if (extent > kMaxTileElements / elements)
        return fail(tok_, "tile has more than " + std::to_string(kMaxTileElements) + " elements");
      elements *= extent;
      shape.push_back(extent);
      size_t after = tok_.end();
      if (after >= lexer_.text().size() || lexer_.text()[after] != 'x') {
        Token at = tok_;
        at.offset = after;
        at.col += static_cast<int>(tok_.length);
        return fail(at, "expected 'x' after tile extent");
      }
      lexer_.seek(after + 1, tok_.line, tok_.col + static_cast<int>(tok_.length) + 1);
      advance();
    }
    if (shape.empty()) return fail(tok_, "expected tile extent, got " + describeToken(tok_));
    Type element;
    if (isKeyword("ptr")) {
      if (!parsePointerType(element)) return false;
    } else {
      ScalarKind kind;
      if (!parseScalar(kind, "tile element type")) return false;
      element = Type::scalar(kind);
    }
    LayoutRef layout;
    if (is(TokenKind::Comma)) {
      advance();
      if (!parseLayout(layout, 0)) return false;
    }
    if (!expect(TokenKind::Greater, "',' or '>' after the tile element type")) return false;
    out = Type::tile(std::move(shape), element, std::move(layout));
    return true;
  }

  // ---- layouts ----

  struct LayoutField {
    enum class Kind { Int, List, Layout } kind = Kind::Int;
    Token at;
    int64_t intValue = 0;
    std::vector<int64_t> list;
    LayoutRef layout;
  };

  bool parseIntList(std::vector<int64_t>& out) {
    if (!expect(TokenKind::LBracket, "'['")) return false;
    while (!is(TokenKind::RBracket)) {
      if (!is(TokenKind::Integer)) return fail(tok_, "expected integer in list, got " + describeToken(tok_));
      int64_t v = 0;
      if (!parseInt(tok_, v)) return false;
      out.push_back(v);
      advance();
      if (is(TokenKind::Comma)) {
        advance();
        if (is(TokenKind::RBracket)) return fail(tok_, "expected integer after ','");
      } else if (!is(TokenKind::RBracket)) {
        return fail(tok_, "expected ',' or ']' in integer list, got " + describeToken(tok_));
      }
    }
    advance();
    return true;
  }

  bool parseLayout(LayoutRef& out, int depth) {
    if (depth >= kMaxLayoutDepth) return fail(tok_, "layouts nested deeper than " + std::to_string(kMaxLayoutDepth));
    if (!is(TokenKind::LayoutName)) return fail(tok_, "expected layout, got " + describeToken(tok_));
    Token nameTok = tok_;
    struct Spec {
      const char* name;
      LayoutKind kind;
      std::vector<std::pair<const char*, LayoutField::Kind>> fields;
      const char* optional = nullptr;  // a field that may be left out (0 then)
    };
    using F = LayoutField::Kind;
    static const Spec kSpecs[] = {
        {"blocked", LayoutKind::Blocked, {{"spt", F::List}, {"tpw", F::List}, {"wpc", F::List}, {"order", F::List}}},
        {"mma",
         LayoutKind::Mma,
         {{"version", F::Int}, {"wpc", F::List}, {"instr", F::List}, {"thread_major", F::Int}},
         "thread_major"},
        {"dot_op",
         LayoutKind::DotOperand,
         {{"idx", F::Int}, {"k_width", F::Int}, {"thread_major", F::Int}, {"parent", F::Layout}},
         "thread_major"},
        {"slice", LayoutKind::Slice, {{"dim", F::Int}, {"parent", F::Layout}}},
        {"shared",
         LayoutKind::Shared,
         {{"vec", F::Int}, {"per_phase", F::Int}, {"max_phase", F::Int}, {"order", F::List}}},
    };
    const Spec* spec = nullptr;
    for (const Spec& s : kSpecs)
      if (nameTok.text == s.name) spec = &s;
    if (!spec)
      return fail(nameTok,
                  "unknown layout '#" + nameTok.text + "' (expected #blocked, #mma, #dot_op, #slice or #shared)");
    advance();
    if (!expect(TokenKind::Less, "'<' after '#" + nameTok.text + "'")) return false;

    std::unordered_map<std::string, LayoutField> fields;
    while (true) {
      if (!is(TokenKind::Identifier)) return fail(tok_, "expected layout field name, got " + describeToken(tok_));
      Token keyTok = tok_;
      const std::pair<const char*, F>* fieldSpec = nullptr;
      for (const auto& f : spec->fields)
        if (keyTok.text == f.first) fieldSpec = &f;
      if (!fieldSpec) return fail(keyTok, "unknown field '" + keyTok.text + "' in #" + nameTok.text + " layout");
      if (fields.count(keyTok.text)) return fail(keyTok, "duplicate field '" + keyTok.text + "' in layout");
      advance();
      if (!expect(TokenKind::Equal, "'=' after layout field name")) return false;
      LayoutField field;
      field.at = tok_;
      field.kind = fieldSpec->second;
      switch (field.kind) {
        case F::Int:
          if (!is(TokenKind::Integer))
            return fail(tok_, "expected integer for '" + keyTok.text + "', got " + describeToken(tok_));
          if (!parseInt(tok_, field.intValue)) return false;
          advance();
          break;
        case F::List:
          if (!parseIntList(field.list)) return false;
          break;
        case F::Layout:
          if (!parseLayout(field.layout, depth + 1)) return false;
          break;
      }
      fields.emplace(keyTok.text, std::move(field));
      if (is(TokenKind::Comma)) {
        advance();
        continue;
      }
      if (is(TokenKind::Greater)) break;
      return fail(tok_, "expected ',' or '>' in layout, got " + describeToken(tok_));
    }
    for (const auto& f : spec->fields)
      if (!fields.count(f.first) && !(spec->optional && std::string_view(f.first) == spec->optional))
        return fail(tok_, "missing field '" + std::string(f.first) + "' in #" + nameTok.text + " layout");
    advance();  // '>'

    auto layout = std::make_shared<Layout>();
    layout->kind = spec->kind;
    auto intOf = [&](const char* key) { return fields.at(key).intValue; };
    auto listOf = [&](const char* key) { return fields.at(key).list; };
    auto optionalFlag = [&](const char* key, int64_t& flag) {
      auto found = fields.find(key);
      if (found == fields.end()) return true;
      if (found->second.intValue != 0 && found->second.intValue != 1)
        return fail(found->second.at, std::string("'") + key + "' must be 0 or 1");
      flag = found->second.intValue;
      return true;
    };
    switch (spec->kind) {
      case LayoutKind::Blocked:
        layout->sizePerThread = listOf("spt");
        layout->threadsPerWarp = listOf("tpw");
        layout->warpsPerCta = listOf("wpc");
        layout->order = listOf("order");
        break;
      case LayoutKind::Mma:
        layout->version = intOf("version");
        layout->warpsPerCta = listOf("wpc");
        layout->instrShape = listOf("instr");
        if (!optionalFlag("thread_major", layout->threadMajor)) return false;
        break;
      case LayoutKind::DotOperand:
        layout->opIdx = intOf("idx");
        layout->kWidth = intOf("k_width");
        if (!optionalFlag("thread_major", layout->threadMajor)) return false;
        layout->parent = fields.at("parent").layout;
        break;
      case LayoutKind::Slice:
        layout->dim = intOf("dim");
        layout->parent = fields.at("parent").layout;
        break;
      case LayoutKind::Shared:
        layout->vec = intOf("vec");
        layout->perPhase = intOf("per_phase");
        layout->maxPhase = intOf("max_phase");
        layout->order = listOf("order");
        break;
    }
    out = std::move(layout);
    return true;
  }

  // ---- attributes ----

  bool parseAttrValue(AttrValue& out) {
    if (is(TokenKind::String)) {
      out = tok_.text;
      advance();
      return true;
    }
    if (is(TokenKind::LBracket)) {
      std::vector<int64_t> list;
      if (!parseIntList(list)) return false;
      out = std::move(list);
      return true;
    }
    if ((isKeyword("tile") || isKeyword("ptr")) && tok_.end() < lexer_.text().size() &&
        lexer_.text()[tok_.end()] == '<') {
      Type t;
      if (!parseType(t)) return false;
      out = std::move(t);
      return true;
    }
    if (is(TokenKind::Identifier) && !isKeyword("inf") && !isKeyword("nan")) {
      out = tok_.text;
      advance();
      return true;
    }
    std::variant<int64_t, double> number;
    if (!parseNumber(number, "attribute value")) return false;
    if (auto* i = std::get_if<int64_t>(&number))
      out = *i;
    else
      out = std::get<double>(number);
    return true;
  }

  // {key = value, ...}
  bool parseAttrDict(Attributes& out) {
    if (!expect(TokenKind::LBrace, "'{'")) return false;
    while (!is(TokenKind::RBrace)) {
      if (!is(TokenKind::Identifier)) return fail(tok_, "expected attribute name, got " + describeToken(tok_));
      Token keyTok = tok_;
      if (out.has(keyTok.text)) return fail(keyTok, "duplicate attribute '" + keyTok.text + "'");
      advance();
      if (!expect(TokenKind::Equal, "'=' after attribute name")) return false;
      AttrValue value;
      if (!parseAttrValue(value)) return false;
      out.set(keyTok.text, std::move(value));
      if (is(TokenKind::Comma)) {
        advance();
        if (is(TokenKind::RBrace)) return fail(tok_, "expected attribute name after ','");
      } else if (!is(TokenKind::RBrace)) {
        return fail(tok_, "expected ',' or '}' after attribute, got " + describeToken(tok_));
      }
    }
    advance();
    return true;
  }

  // ---- values and scopes ----
  // Every name is defined once per kernel (checked when its definition is read).
  // A value is visible from the end of its definition to the end of the block that
  // defines it; the scope stack records which names each open block made visible.

  bool defineName(const Token& t) {
    auto [it, inserted] = defined_.emplace(t.text, loc(t));
    if (!inserted)
      return fail(t, "redefinition of value '%" + t.text + "' (first defined at " + std::to_string(it->second.line) +
                         ":" + std::to_string(it->second.col) + ")");
    return true;
  }

  void makeVisible(Value* v) {
    visible_[v->name()] = v;
    scopes_.back().push_back(v->name());
  }

  bool lookup(const Token& t, Value*& out) {
    auto it = visible_.find(t.text);
    if (it != visible_.end()) {
      out = it->second;
      return true;
    }
    auto def = defined_.find(t.text);
    if (def != defined_.end())
      return fail(t, "value '%" + t.text + "' (defined at " + std::to_string(def->second.line) + ":" +
                         std::to_string(def->second.col) + ") is not visible here");
    return fail(t, "use of undefined value '%" + t.text + "'");
  }

  bool parseOperandName(Value*& out) {
    if (!is(TokenKind::ValueName)) return fail(tok_, "expected value, got " + describeToken(tok_));
    if (!lookup(tok_, out)) return false;
    advance();
    return true;
  }

  bool parseDefinedName(Token& out) {
    if (!is(TokenKind::ValueName)) return fail(tok_, "expected value name, got " + describeToken(tok_));
    out = tok_;
    if (!defineName(out)) return false;
    advance();
    return true;
  }

  // ---- kernels ----

  bool parseKernel(Module& module) {
    if (!isKeyword("kernel")) return fail(tok_, "expected 'kernel', got " + describeToken(tok_));
    Token kernelTok = tok_;
    advance();
    if (!is(TokenKind::SymbolName)) return fail(tok_, "expected kernel name '@name', got " + describeToken(tok_));
    if (module.findKernel(tok_.text)) return fail(tok_, "redefinition of kernel '@" + tok_.text + "'");
    auto kernel = std::make_unique<Kernel>(tok_.text, loc(kernelTok));
    kernel->docLines() = docLinesAbove(lexer_.text(), kernelTok);
    advance();

    defined_.clear();
    visible_.clear();
    scopes_.assign(1, {});
    if (!parseParameters(*kernel)) return false;
    if (isKeyword("constexprs")) {
      advance();
      if (!parseConstexprs(*kernel)) return false;
    }
    if (isKeyword("attributes")) {
      advance();
      if (!parseAttrDict(kernel->attrs())) return false;
    }
    if (!is(TokenKind::LBrace)) return fail(tok_, "expected '{' to open the kernel body, got " + describeToken(tok_));
    advance();
    if (!parseOperations(kernel->body())) return false;
    advance();  // '}'
    module.addKernel(std::move(kernel));
    return true;
  }

  bool parseParameters(Kernel& kernel) {
    if (!expect(TokenKind::LParen, "'(' after the kernel name")) return false;
    if (is(TokenKind::RParen)) {
      advance();
      return true;
    }
    while (true) {
      Token nameTok;
      if (!parseDefinedName(nameTok)) return false;
      if (!expect(TokenKind::Colon, "':' after parameter name")) return false;
      Type type;
      if (!parseType(type)) return false;
      Attributes attrs;
      if (is(TokenKind::LBrace) && !parseAttrDict(attrs)) return false;
      makeVisible(kernel.addParameter(std::move(type), nameTok.text, std::move(attrs)));
      if (is(TokenKind::RParen)) break;
      if (!is(TokenKind::Comma)) return fail(tok_, "expected ',' or ')' after parameter, got " + describeToken(tok_));
      advance();
    }
    advance();
    return true;
  }

  bool parseConstexprs(Kernel& kernel) {
    if (!expect(TokenKind::LBrace, "'{' after 'constexprs'")) return false;
    while (true) {
      if (!is(TokenKind::Identifier)) return fail(tok_, "expected constexpr name, got " + describeToken(tok_));
      Token nameTok = tok_;
      if (kernel.findConstexpr(nameTok.text)) return fail(nameTok, "duplicate constexpr '" + nameTok.text + "'");
      advance();
      if (!expect(TokenKind::Equal, "'=' after constexpr name")) return false;
      Constexpr c;
      c.name = nameTok.text;
      if (!parseNumber(c.value, "integer or float literal")) return false;
      kernel.constexprs().push_back(std::move(c));
      if (is(TokenKind::RBrace)) break;
      if (!is(TokenKind::Comma)) return fail(tok_, "expected ',' or '}' after constexpr, got " + describeToken(tok_));
      advance();
    }
    advance();
    return true;
  }

  // ---- operations ----

  // Operations up to (not consuming) the '}' closing the block.
  bool parseOperations(Block& block) {
    while (!is(TokenKind::RBrace)) {
      if (is(TokenKind::Eof)) return fail(tok_, "expected '}' before end of file");
      if (!parseOperation(block)) return false;
    }
    return true;
  }

  // '{' operations '}' with `args` (already defined) visible inside.
  bool parseRegion(Block& block) {
    if (!is(TokenKind::LBrace)) return fail(tok_, "expected '{' to open a region, got " + describeToken(tok_));
    if (regionDepth_ >= kMaxRegionDepth)
      return fail(tok_, "regions nested deeper than " + std::to_string(kMaxRegionDepth) + " levels");
    advance();
    ++regionDepth_;
    scopes_.emplace_back();
    for (const auto& arg : block.arguments()) makeVisible(arg.get());
    bool ok = parseOperations(block);
    for (const std::string& name : scopes_.back()) visible_.erase(name);
    scopes_.pop_back();
    --regionDepth_;
    if (!ok) return false;
    advance();  // '}'
    return true;
  }

  bool parseTypeList(std::vector<Type>& out) {
    while (true) {
      Type t;
      if (!parseType(t)) return false;
      out.push_back(std::move(t));
      if (!is(TokenKind::Comma)) return true;
      advance();
    }
  }

  // "-> (T, ...)"
  bool parseResultTypes(std::vector<Type>& out) {
    advance();  // ->
    if (!expect(TokenKind::LParen, "'(' after '->'")) return false;
    if (!parseTypeList(out)) return false;
    return expect(TokenKind::RParen, "',' or ')' after result type");
  }

  bool parseOperation(Block& block) {
    std::vector<Token> resultNames;
    if (is(TokenKind::ValueName)) {
      while (true) {
        Token nameTok;
        if (!parseDefinedName(nameTok)) return false;
        resultNames.push_back(nameTok);
        if (!is(TokenKind::Comma)) break;
        advance();
      }
      if (!expect(TokenKind::Equal, "',' or '=' after result name")) return false;
    }
    if (!is(TokenKind::Identifier)) return fail(tok_, "expected operation, got " + describeToken(tok_));
    if (isKeyword("kernel") && resultNames.empty())
      return fail(tok_, "expected '}' to close the kernel body before the next 'kernel'");
    Token opTok = tok_;
    Opcode opcode;
    if (!parseOpcodeName(opTok.text, opcode)) return fail(opTok, "unknown op '" + opTok.text + "'");
    advance();
    auto op = std::make_unique<Operation>(opcode, loc(opTok));
    bool ok = opcode == Opcode::For  ? parseForOp(*op, opTok, resultNames)
              : opcode == Opcode::If ? parseIfOp(*op, opTok, resultNames)
                                     : parseGenericOp(*op, opTok, resultNames);
    if (!ok) return false;
    Operation* appended = block.append(std::move(op));
    for (const auto& r : appended->results()) makeVisible(r.get());
    return true;
  }

  // [%operand, ...] [{attrs}] [: type, ...]. The first operand must be on the op's
  // line, so that `yield` or `return` is never continued by the next line's result.
  bool parseGenericOp(Operation& op, const Token& opTok, const std::vector<Token>& resultNames) {
    if (is(TokenKind::ValueName) && tok_.line == opTok.line) {
      while (true) {
        Value* v = nullptr;
        if (!parseOperandName(v)) return false;
        op.addOperand(v);
        if (!is(TokenKind::Comma)) break;
        advance();
      }
    }
    if (is(TokenKind::LBrace) && !parseAttrDict(op.attrs())) return false;
    if (!is(TokenKind::Colon)) {
      if (!resultNames.empty())
        return fail(tok_, "expected ':' and the result type of '" + opTok.text + "', got " + describeToken(tok_));
      return true;
    }
    Token colonTok = tok_;
    if (resultNames.empty())
      return fail(colonTok, "result types given but no result names (write '%r = " + opTok.text + " ...')");
    advance();
    std::vector<Type> types;
    if (!parseTypeList(types)) return false;
    if (types.size() != resultNames.size())
      return fail(colonTok, "'" + opTok.text + "' names " + std::to_string(resultNames.size()) + " result(s) but " +
                                std::to_string(types.size()) + " result type(s) follow");
    for (size_t i = 0; i < types.size(); ++i) op.addResult(types[i], resultNames[i].text);
    return true;
  }

  // for %iv = %lo to %hi step %step [iter_args(%a = %init, ...)] [-> (T, ...)]
  //     [attributes {...}] { ... }
  bool parseForOp(Operation& op, const Token& opTok, const std::vector<Token>& resultNames) {
    Token ivTok;
    if (!parseDefinedName(ivTok)) return false;
    if (!expect(TokenKind::Equal, "'=' after the induction variable")) return false;
    Value *lo = nullptr, *hi = nullptr, *step = nullptr;
    if (!parseOperandName(lo)) return false;
    if (!expectKeyword("to", "after the lower bound")) return false;
    if (!parseOperandName(hi)) return false;
    if (!expectKeyword("step", "after the upper bound")) return false;
    if (!parseOperandName(step)) return false;
    op.addOperand(lo);
    op.addOperand(hi);
    op.addOperand(step);

    std::vector<Token> iterNames;
    if (isKeyword("iter_args")) {
      advance();
      if (!expect(TokenKind::LParen, "'(' after 'iter_args'")) return false;
      while (true) {
        Token nameTok;
        if (!parseDefinedName(nameTok)) return false;
        iterNames.push_back(nameTok);
        if (!expect(TokenKind::Equal, "'=' after the iter_arg name")) return false;
        Value* init = nullptr;
        if (!parseOperandName(init)) return false;
        op.addOperand(init);
        if (!is(TokenKind::Comma)) break;
        advance();
      }
      if (!expect(TokenKind::RParen, "',' or ')' after iter_arg")) return false;
    }
    std::vector<Type> types;
    if (is(TokenKind::Arrow)) {
      Token arrowTok = tok_;
      if (!parseResultTypes(types)) return false;
      if (types.size() != iterNames.size())
        return fail(arrowTok, "'for' has " + std::to_string(iterNames.size()) + " iter_args but " +
                                  std::to_string(types.size()) + " result type(s)");
    } else if (!iterNames.empty()) {
      return fail(tok_, "expected '->' and the types of the iter_args, got " + describeToken(tok_));
    }
    if (resultNames.size() != iterNames.size())
      return fail(opTok, "'for' names " + std::to_string(resultNames.size()) + " result(s) but has " +
                             std::to_string(iterNames.size()) + " iter_args");
    if (isKeyword("attributes")) {
      advance();
      if (!parseAttrDict(op.attrs())) return false;
    }
    Block* body = op.addRegion();
    body->addArgument(lo->type(), ivTok.text);
    for (size_t i = 0; i < iterNames.size(); ++i) {
      body->addArgument(types[i], iterNames[i].text);
      op.addResult(types[i], resultNames[i].text);
    }
    return parseRegion(*body);
  }

  // if %cond [-> (T, ...)] [attributes {...}] { ... } [else { ... }]
  bool parseIfOp(Operation& op, const Token& opTok, const std::vector<Token>& resultNames) {
    Value* cond = nullptr;
    if (!parseOperandName(cond)) return false;
    op.addOperand(cond);
    std::vector<Type> types;
    if (is(TokenKind::Arrow)) {
      if (!parseResultTypes(types)) return false;
    }
    if (types.size() != resultNames.size())
      return fail(opTok, "'if' names " + std::to_string(resultNames.size()) + " result(s) but has " +
                             std::to_string(types.size()) + " result type(s)");
    for (size_t i = 0; i < types.size(); ++i) op.addResult(types[i], resultNames[i].text);
    if (isKeyword("attributes")) {
      advance();
      if (!parseAttrDict(op.attrs())) return false;
    }
    Block* thenBlock = op.addRegion();
    Block* elseBlock = op.addRegion();
    if (!parseRegion(*thenBlock)) return false;
    if (isKeyword("else")) {
      advance();
      return parseRegion(*elseBlock);
    }
    // An absent else yields nothing (the printer omits exactly this else).
    elseBlock->append(std::make_unique<Operation>(Opcode::Yield, loc(opTok)));
    return true;
  }

  Lexer lexer_;
  std::string file_;
  Token tok_;
  std::optional<support::Diagnostic> error_;
  int regionDepth_ = 0;
  std::unordered_map<std::string, support::Location> defined_;
  std::unordered_map<std::string, Value*> visible_;
  std::vector<std::vector<std::string>> scopes_;
};

}  // namespace

support::Expected<std::unique_ptr<Module>> parseModule(std::string_view text, const std::string& fileName) {
  return Parser(text, fileName).module();
}

support::Expected<Type> parseType(std::string_view text) { return Parser(text, "<type>").standaloneType(); }

}  // namespace attnjit::ir
