// Lexer for the .tir text form. It turns bytes into tokens on demand; the parser
// may move it back to an offset (seek) to lex tile shapes such as `16x128xbf16`,
// whose extents and 'x' separators touch the element type.
//
// Tokens carry their text and 1-based line/column. Malformed input never stops the
// lexer: it yields an Error token whose text is the message.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace attnjit::ir {

enum class TokenKind {
  Eof,
  Error,       // text is the error message
  Identifier,  // [A-Za-z_][A-Za-z0-9_]*: op names, keywords, types, attribute keys
  ValueName,   // %[A-Za-z0-9_.]+ (text without '%')
  SymbolName,  // @[A-Za-z0-9_.]+ (text without '@')
  LayoutName,  // #[A-Za-z0-9_]+ (text without '#')
  Integer,     // -?[0-9]+
  Float,       // -?[0-9]+ ('.' [0-9]+)? ([eE] [+-]? [0-9]+)?, with '.' or an exponent
  String,      // "..." with \" and \\ escapes (text is the unescaped content)
  LParen,
  RParen,
  LBrace,
  RBrace,
  LBracket,
  RBracket,
  Less,
  Greater,
  Comma,
  Colon,
  Equal,
  Arrow,  // ->
  Minus,  // '-' not starting a number or an arrow (as in -inf)
};

struct Token {
  TokenKind kind = TokenKind::Eof;
  std::string text;
  size_t offset = 0;  // byte offset of the first character
  size_t length = 0;  // bytes of source text covered
  int line = 1;
  int col = 1;
  // True when nothing but whitespace precedes the token on its line.
  bool firstOnLine = false;

  size_t end() const { return offset + length; }
};

class Lexer {
 public:
  explicit Lexer(std::string_view text);

  Token next();
  // Continues lexing at `offset`, which is at `line`:`col` (the parser only moves
  // forward within the current line, past the 'x' of a tile shape).
  void seek(size_t offset, int line, int col);
  std::string_view text() const { return text_; }

 private:
  void skipWhitespaceAndComments();
  Token make(TokenKind kind, size_t start, int line, int col, bool first, std::string text);
  Token lexNumber(size_t start, int line, int col, bool first);
  Token lexString(size_t start, int line, int col, bool first);
  char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
  bool atEnd() const { return pos_ >= text_.size(); }
  void advance();

  std::string_view text_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
  bool lineHasToken_ = false;
};

// Quoted, shortened rendering of a token for error messages: "'addd'", "end of file".
std::string describeToken(const Token& token);

}  // namespace attnjit::ir
