#include "ir/Lexer.h"

namespace attnjit::ir {

namespace {
bool isDigit(char c) { return c >= '0' && c <= '9'; }
bool isLetter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isIdentChar(char c) { return isLetter(c) || isDigit(c); }
bool isNameChar(char c) { return isIdentChar(c) || c == '.'; }

std::string byteText(char c) {
  auto u = static_cast<unsigned char>(c);
  if (u >= 0x20 && u < 0x7f) return std::string(1, c);
  static const char* kHex = "0123456789abcdef";
  return std::string("\\x") + kHex[u >> 4] + kHex[u & 15];
}
}  // namespace

Lexer::Lexer(std::string_view text) : text_(text) {}

void Lexer::advance() {
  if (text_[pos_] == '\n') {
    ++line_;
    col_ = 1;
    lineHasToken_ = false;
  } else {
    ++col_;
  }
  ++pos_;
}

void Lexer::seek(size_t offset, int line, int col) {
  pos_ = offset < text_.size() ? offset : text_.size();
  line_ = line;
  col_ = col;
  lineHasToken_ = true;
}

void Lexer::skipWhitespaceAndComments() {
  while (!atEnd()) {
    char c = peek();
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      advance();
    } else if (c == '/' && peek(1) == '/') {
      while (!atEnd() && peek() != '\n') advance();
    } else {
      return;
    }
  }
}

Token Lexer::make(TokenKind kind, size_t start, int line, int col, bool first, std::string text) {
  Token t;
  t.kind = kind;
  t.text = std::move(text);
  t.offset = start;
  t.length = pos_ - start;
  t.line = line;
  t.col = col;
  t.firstOnLine = first;
  lineHasToken_ = true;
  return t;
}

Token Lexer::next() {
  skipWhitespaceAndComments();
  size_t start = pos_;
  int line = line_, col = col_;
  bool first = !lineHasToken_;
  if (atEnd()) return make(TokenKind::Eof, start, line, col, first, "");

  char c = peek();
  if (isDigit(c) || (c == '-' && isDigit(peek(1)))) return lexNumber(start, line, col, first);
  if (c == '"') return lexString(start, line, col, first);
  if (isLetter(c)) {
    while (!atEnd() && isIdentChar(peek())) advance();
    return make(TokenKind::Identifier, start, line, col, first, std::string(text_.substr(start, pos_ - start)));
  }
  if (c == '%' || c == '@' || c == '#') {
    advance();
    size_t nameStart = pos_;
    bool allowDot = c != '#';
    while (!atEnd() && (allowDot ? isNameChar(peek()) : isIdentChar(peek()))) advance();
    if (pos_ == nameStart) {
      const char* what = c == '%' ? "value name" : c == '@' ? "kernel name" : "layout name";
      return make(TokenKind::Error, start, line, col, first, std::string("expected ") + what + " after '" + c + "'");
    }
    TokenKind kind = c == '%' ? TokenKind::ValueName : c == '@' ? TokenKind::SymbolName : TokenKind::LayoutName;
    return make(kind, start, line, col, first, std::string(text_.substr(nameStart, pos_ - nameStart)));
  }

  advance();
  switch (c) {
    case '(': return make(TokenKind::LParen, start, line, col, first, "(");
    case ')': return make(TokenKind::RParen, start, line, col, first, ")");
    case '{': return make(TokenKind::LBrace, start, line, col, first, "{");
    case '}': return make(TokenKind::RBrace, start, line, col, first, "}");
    case '[': return make(TokenKind::LBracket, start, line, col, first, "[");
    case ']': return make(TokenKind::RBracket, start, line, col, first, "]");
    case '<': return make(TokenKind::Less, start, line, col, first, "<");
    case '>': return make(TokenKind::Greater, start, line, col, first, ">");
    case ',': return make(TokenKind::Comma, start, line, col, first, ",");
    case ':': return make(TokenKind::Colon, start, line, col, first, ":");
    case '=': return make(TokenKind::Equal, start, line, col, first, "=");
    case '-':
      if (peek() == '>') {
        advance();
        return make(TokenKind::Arrow, start, line, col, first, "->");
      }
      return make(TokenKind::Minus, start, line, col, first, "-");
    default:
      return make(TokenKind::Error, start, line, col, first, "unexpected character '" + byteText(c) + "'");
  }
}

Token Lexer::lexNumber(size_t start, int line, int col, bool first) {
  if (peek() == '-') advance();
  while (!atEnd() && isDigit(peek())) advance();
  bool isFloat = false;
  if (peek() == '.' && isDigit(peek(1))) {
    isFloat = true;
    advance();
    while (!atEnd() && isDigit(peek())) advance();
  }
  // An exponent only when digits follow, so `2e` in other contexts stays `2`, `e`.
  if (peek() == 'e' || peek() == 'E') {
    size_t digitsAt = (peek(1) == '+' || peek(1) == '-') ? 2 : 1;
    if (isDigit(peek(digitsAt))) {
      isFloat = true;
      for (size_t i = 0; i < digitsAt; ++i) advance();
      while (!atEnd() && isDigit(peek())) advance();
    }
  }
  return make(isFloat ? TokenKind::Float : TokenKind::Integer, start, line, col, first,
              std::string(text_.substr(start, pos_ - start)));
}

Token Lexer::lexString(size_t start, int line, int col, bool first) {
  advance();  // opening quote
  std::string value;
  while (!atEnd() && peek() != '"' && peek() != '\n') {
    if (peek() == '\\') {
      advance();
      if (atEnd() || (peek() != '"' && peek() != '\\'))
        return make(TokenKind::Error, start, line, col, first, "invalid escape in string (only \\\" and \\\\)");
    }
    value += peek();
    advance();
  }
  if (atEnd() || peek() != '"') return make(TokenKind::Error, start, line, col, first, "unterminated string");
  advance();
  return make(TokenKind::String, start, line, col, first, std::move(value));
}

std::string describeToken(const Token& token) {
  std::string sigil;
  switch (token.kind) {
    case TokenKind::Eof: return "end of file";
    case TokenKind::String: return "string";
    case TokenKind::ValueName: sigil = "%"; break;
    case TokenKind::SymbolName: sigil = "@"; break;
    case TokenKind::LayoutName: sigil = "#"; break;
    default: break;
  }
  constexpr size_t kMaxShown = 32;
  std::string text = token.text.size() > kMaxShown ? token.text.substr(0, kMaxShown) + "..." : token.text;
  return "'" + sigil + text + "'";
}

}  // namespace attnjit::ir
