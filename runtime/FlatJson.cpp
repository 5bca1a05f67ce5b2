#include "runtime/FlatJson.h"

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <tuple>

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
  // For documents (parseJson): errors located at sourceName:line:col instead of a byte offset.
  Parser(std::string_view text, std::string_view sourceName) : text_(text), sourceName_(sourceName), located_(true) {}

  support::Expected<StringMap> parseObject() {
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
  support::Status error(const std::string& message) const {
    if (located_) {
      // A truncated document is the common case of an early end: say so.
      return support::Status::error(locationOf(position_),
                               position_ >= text_.size() ? message + ", found the end of the text" : message);
    }
    return support::Status::error(support::Location{"<metadata json>", 0, 0},
                             message + " at byte " + std::to_string(position_));
  }
  // Line and column (1-based, in bytes) of `offset`. Offsets are asked for in increasing
  // order while parsing, so the scan resumes where the last one stopped (linear overall).
  support::Location locationOf(std::size_t offset) const {
    if (offset < scannedOffset_) {
      scannedOffset_ = 0;
      scannedLine_ = 1;
      scannedCol_ = 1;
    }
    for (; scannedOffset_ < offset && scannedOffset_ < text_.size(); ++scannedOffset_) {
      if (text_[scannedOffset_] == '\n') {
        ++scannedLine_;
        scannedCol_ = 1;
      } else {
        ++scannedCol_;
      }
    }
    return support::Location{std::string(sourceName_), scannedLine_, scannedCol_};
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
      int digit = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
      if (digit < 0) return std::nullopt;
      value = value * 16 + static_cast<std::uint32_t>(digit);
    }
    position_ += 4;
    return value;
  }
  support::Expected<std::string> parseString() {
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
  std::string_view sourceName_;
  bool located_ = false;
  mutable std::size_t scannedOffset_ = 0;
  mutable int scannedLine_ = 1;
  mutable int scannedCol_ = 1;

 public:
  // A whole document: one value and nothing after it but whitespace.
  support::Expected<JsonValue> parseDocument() {
    skipWhitespace();
    auto value = parseValue(0);
    if (!value) return value;
    skipWhitespace();
    if (position_ != text_.size()) return error("unexpected text after the JSON value");
    return value;
  }

 private:
  static constexpr int kMaxDepth = 64;

  support::Expected<JsonValue> parseValue(int depth) {
    if (depth > kMaxDepth) return error("nesting deeper than " + std::to_string(kMaxDepth) + " levels");
    JsonValue value;
    value.location = locationOf(position_);
    if (position_ >= text_.size()) return error("expected a value");
    const char c = text_[position_];
    if (c == '{') return parseObjectValue(std::move(value), depth);
    if (c == '[') return parseArrayValue(std::move(value), depth);
    if (c == '"') {
      auto text = parseString();
      if (!text) return text.status();
      value.kind = JsonValue::Kind::String;
      value.string = std::move(*text);
      return value;
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parseNumberValue(std::move(value));
    for (const auto& [word, kind, truth] : {std::tuple{"true", JsonValue::Kind::Bool, true},
                                           std::tuple{"false", JsonValue::Kind::Bool, false},
                                           std::tuple{"null", JsonValue::Kind::Null, false}}) {
      std::string_view literal(word);
      if (text_.substr(position_, literal.size()) == literal) {
        position_ += literal.size();
        value.kind = kind;
        value.boolean = truth;
        return value;
      }
    }
    return error("expected a value (object, array, string, number, true, false or null)");
  }

  support::Expected<JsonValue> parseObjectValue(JsonValue value, int depth) {
    value.kind = JsonValue::Kind::Object;
    consume('{');
    skipWhitespace();
    if (consume('}')) return value;
    while (true) {
      skipWhitespace();
      const std::size_t keyStart = position_;
      auto key = parseString();
      if (!key) return key.status();
      if (value.find(*key) != nullptr) {
        return support::Status::error(locationOf(keyStart), "duplicate key \"" + *key + "\"");
      }
      skipWhitespace();
      if (!consume(':')) return error("expected ':' after a key");
      skipWhitespace();
      auto member = parseValue(depth + 1);
      if (!member) return member;
      value.object.push_back(JsonMember{std::move(*key), std::move(*member)});
      skipWhitespace();
      if (consume('}')) return value;
      if (!consume(',')) return error("expected ',' or '}'");
    }
  }

  support::Expected<JsonValue> parseArrayValue(JsonValue value, int depth) {
    value.kind = JsonValue::Kind::Array;
    consume('[');
    skipWhitespace();
    if (consume(']')) return value;
    while (true) {
      skipWhitespace();
      auto element = parseValue(depth + 1);
      if (!element) return element;
      value.array.push_back(std::move(*element));
      skipWhitespace();
      if (consume(']')) return value;
      if (!consume(',')) return error("expected ',' or ']'");
    }
  }

  // JSON's number grammar exactly: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  support::Expected<JsonValue> parseNumberValue(JsonValue value) {
    const std::size_t start = position_;
    auto digits = [&] {
      std::size_t first = position_;
      while (position_ < text_.size() && text_[position_] >= '0' && text_[position_] <= '9') ++position_;
      return position_ - first;
    };
    consume('-');
    if (consume('0')) {
      // A leading zero stands alone.
    } else if (digits() == 0) {
      return error("expected digits in a number");
    }
    bool integral = true;
    if (consume('.')) {
      integral = false;
      if (digits() == 0) return error("expected digits after '.' in a number");
    }
    if (consume('e') || consume('E')) {
      integral = false;
      if (!consume('+')) consume('-');
      if (digits() == 0) return error("expected digits in a number's exponent");
    }
    const std::string literal(text_.substr(start, position_ - start));
    value.kind = JsonValue::Kind::Number;
    value.number = std::strtod(literal.c_str(), nullptr);
    if (integral) {
      errno = 0;
      char* end = nullptr;
      long long parsed = std::strtoll(literal.c_str(), &end, 10);
      if (errno == 0 && end == literal.c_str() + literal.size()) {
        value.isInteger = true;
        value.integer = parsed;
      }
    }
    return value;
  }
};

void appendIndent(std::string& out, int depth) { out.append(static_cast<std::size_t>(depth) * 2, ' '); }

void appendNumber(std::string& out, const JsonValue& value) {
  if (value.isInteger) {
    out += std::to_string(value.integer);
    return;
  }
  if (!std::isfinite(value.number)) {
    // JSON has no infinities or NaN; writers are expected not to produce them.
    out += "null";
    return;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", value.number);
  out += buffer;
  // A non-integer number must read back as one: "-0" would come back as the integer 0 and lose
  // its sign, so a value printed without a fraction or exponent gets ".0".
  if (std::string_view(buffer).find_first_of(".eE") == std::string_view::npos) out += ".0";
}

void appendValue(std::string& out, const JsonValue& value, int depth) {
  switch (value.kind) {
    case JsonValue::Kind::Null: out += "null"; return;
    case JsonValue::Kind::Bool: out += value.boolean ? "true" : "false"; return;
    case JsonValue::Kind::Number: appendNumber(out, value); return;
    case JsonValue::Kind::String: appendEscaped(out, value.string); return;
    case JsonValue::Kind::Array:
      if (value.array.empty()) {
        out += "[]";
        return;
      }
      out += "[\n";
      for (std::size_t i = 0; i < value.array.size(); ++i) {
        appendIndent(out, depth + 1);
        appendValue(out, value.array[i], depth + 1);
        out += i + 1 < value.array.size() ? ",\n" : "\n";
      }
      appendIndent(out, depth);
      out += "]";
      return;
    case JsonValue::Kind::Object:
      if (value.object.empty()) {
        out += "{}";
        return;
      }
      out += "{\n";
      for (std::size_t i = 0; i < value.object.size(); ++i) {
        appendIndent(out, depth + 1);
        appendEscaped(out, value.object[i].key);
        out += ": ";
        appendValue(out, value.object[i].value, depth + 1);
        out += i + 1 < value.object.size() ? ",\n" : "\n";
      }
      appendIndent(out, depth);
      out += "}";
      return;
  }
}

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

support::Expected<StringMap> parseFlatJson(std::string_view text) { return Parser(text).parseObject(); }

}  // namespace attnjit::runtime

namespace attnjit::runtime {

JsonValue JsonValue::makeString(std::string text) {
  JsonValue value;
  value.kind = Kind::String;
  value.string = std::move(text);
  return value;
}

JsonValue JsonValue::makeInteger(std::int64_t integer) {
  JsonValue value;
  value.kind = Kind::Number;
  value.isInteger = true;
  value.integer = integer;
  value.number = static_cast<double>(integer);
  return value;
}

JsonValue JsonValue::makeNumber(double number) {
  JsonValue value;
  value.kind = Kind::Number;
  value.number = number;
  return value;
}

JsonValue JsonValue::makeBool(bool truth) {
  JsonValue value;
  value.kind = Kind::Bool;
  value.boolean = truth;
  return value;
}

JsonValue JsonValue::makeArray() {
  JsonValue value;
  value.kind = Kind::Array;
  return value;
}

JsonValue JsonValue::makeObject() {
  JsonValue value;
  value.kind = Kind::Object;
  return value;
}

const JsonValue* JsonValue::find(std::string_view key) const {
  for (const auto& [name, member] : object) {
    if (name == key) return &member;
  }
  return nullptr;
}

JsonValue& JsonValue::add(std::string key, JsonValue value) {
  object.push_back(JsonMember{std::move(key), std::move(value)});
  return object.back().value;
}

const char* JsonValue::kindName(Kind kind) {
  switch (kind) {
    case Kind::Null: return "null";
    case Kind::Bool: return "a boolean";
    case Kind::Number: return "a number";
    case Kind::String: return "a string";
    case Kind::Array: return "an array";
    case Kind::Object: return "an object";
  }
  return "a value";
}

support::Expected<JsonValue> parseJson(std::string_view text, std::string_view sourceName) {
  return Parser(text, sourceName).parseDocument();
}

std::string writeJson(const JsonValue& value) {
  std::string out;
  appendValue(out, value, 0);
  out += "\n";
  return out;
}

}  // namespace attnjit::runtime
