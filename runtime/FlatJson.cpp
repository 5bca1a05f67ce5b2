#include "runtime/FlatJson.h"

#include <cstdint>
#include <optional>

namespace attnjit::runtime {
namespace {

void appendEscaped(std::string& out, std::string_view text) {
  static const char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out.push_back(kHex[(c >> 4) & 15]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
}

void appendUtf8(std::string& out, std::uint32_t codePoint) {
  if (codePoint < 0x80) {
    out.push_back(static_cast<char>(codePoint));
  } else if (codePoint < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (codePoint >> 6)));
    out.push_back(static_cast<char>(0x80 | (codePoint & 0x3F)));
  } else if (codePoint < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (codePoint >> 12)));
    out.push_back(static_cast<char>(0x80 | ((codePoint >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (codePoint & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (codePoint >> 18)));
    out.push_back(static_cast<char>(0x80 | ((codePoint >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((codePoint >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (codePoint & 0x3F)));
  }
}

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  ir::Expected<StringMap> parseObject() {
    StringMap values;
    skipWhitespace();
    if (!consume('{')) return error("expected '{'");
    skipWhitespace();
    if (!consume('}')) {
      while (true) {
        skipWhitespace();
        auto key = parseString();
        if (!key) return key.status();
        skipWhitespace();
        if (!consume(':')) return error("expected ':' after a key");
        skipWhitespace();
        auto value = parseString();
        if (!value) return value.status();
        if (!values.emplace(std::move(*key), std::move(*value)).second) return error("duplicate key");
        skipWhitespace();
        if (consume('}')) break;
        if (!consume(',')) return error("expected ',' or '}'");
      }
    }
    skipWhitespace();
    if (position_ != text_.size()) return error("unexpected text after the object");
    return values;
  }

 private:
  ir::Status error(const std::string& message) const {
    return ir::Status::error(ir::Location{"<metadata json>", 0, 0},
                             message + " at byte " + std::to_string(position_));
  }
  bool consume(char c) {
    if (position_ < text_.size() && text_[position_] == c) {
      ++position_;
      return true;
    }
    return false;
  }
  void skipWhitespace() {
    while (position_ < text_.size() && (text_[position_] == ' ' || text_[position_] == '\n' ||
                                        text_[position_] == '\r' || text_[position_] == '\t')) {
      ++position_;
    }
  }
  std::optional<std::uint32_t> parseHex4() {
    if (text_.size() - position_ < 4) return std::nullopt;
    std::uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[position_ + i];
      int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (digit < 0) return std::nullopt;
      value = value * 16 + static_cast<std::uint32_t>(digit);
    }
    position_ += 4;
    return value;
  }
  ir::Expected<std::string> parseString() {
    if (!consume('"')) return error("expected a string");
    std::string out;
    while (true) {
      if (position_ >= text_.size()) return error("unterminated string");
      char c = text_[position_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) return error("control character in a string");
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (position_ >= text_.size()) return error("unterminated escape");
      char escape = text_[position_++];
      switch (escape) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          auto unit = parseHex4();
          if (!unit) return error("bad \\u escape");
          std::uint32_t codePoint = *unit;
          if (codePoint >= 0xD800 && codePoint < 0xDC00) {
            if (!consume('\\') || !consume('u')) return error("unpaired surrogate");
            auto low = parseHex4();
            if (!low || *low < 0xDC00 || *low >= 0xE000) return error("unpaired surrogate");
            codePoint = 0x10000 + ((codePoint - 0xD800) << 10) + (*low - 0xDC00);
          } else if (codePoint >= 0xDC00 && codePoint < 0xE000) {
            return error("unpaired surrogate");
          }
          appendUtf8(out, codePoint);
          break;
        }
        default: return error("unknown escape");
      }
    }
  }

  std::string_view text_;
  std::size_t position_ = 0;
};

}  // namespace

std::string writeFlatJson(const StringMap& values) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : values) {
    if (!first) out.push_back(',');
    first = false;
    appendEscaped(out, key);
    out.push_back(':');
    appendEscaped(out, value);
  }
  out.push_back('}');
  return out;
}

ir::Expected<StringMap> parseFlatJson(std::string_view text) { return Parser(text).parseObject(); }

}  // namespace attnjit::runtime
