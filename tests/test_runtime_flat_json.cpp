// The metadata format of disk-cache entries: a flat JSON object of strings.
#include <catch2/catch.hpp>

#include "runtime/FlatJson.h"

using namespace attnjit::runtime;

TEST_CASE("flat json writes sorted, escaped objects and reads them back", "[runtime]") {
  StringMap values = {{"b", "plain"}, {"a", "quote \" backslash \\ newline \n tab \t"},
                      {"ctl", std::string("\x01\x1f", 2)}, {"utf8", "\xc3\xa9t\xc3\xa9"}, {"", ""}};
  const std::string text = writeFlatJson(values);
  CHECK(text ==
        "{\"\":\"\",\"a\":\"quote \\\" backslash \\\\ newline \\n tab \\t\",\"b\":\"plain\","
        "\"ctl\":\"\\u0001\\u001f\",\"utf8\":\"\xc3\xa9t\xc3\xa9\"}");
  auto parsed = parseFlatJson(text);
  REQUIRE(parsed.isOk());
  CHECK(*parsed == values);
  CHECK(writeFlatJson({}) == "{}");
}

TEST_CASE("flat json accepts JSON whitespace and unicode escapes", "[runtime]") {
  auto parsed = parseFlatJson(" {\n \"e\" : \"\\u00e9\" ,\t\"smile\":\"\\ud83d\\ude00\", \"s\":\"a\\/b\"}\n");
  REQUIRE(parsed.isOk());
  CHECK(parsed->at("e") == "\xc3\xa9");
  CHECK(parsed->at("smile") == "\xf0\x9f\x98\x80");
  CHECK(parsed->at("s") == "a/b");
}

TEST_CASE("flat json rejects malformed text with the byte offset", "[runtime]") {
  struct Case {
    const char* text;
    const char* message;
  };
  const Case cases[] = {
      {"", "expected '{' at byte 0"},
      {"{\"a\" \"b\"}", "expected ':' after a key at byte 5"},
      {"{\"a\":\"b\",\"a\":\"c\"}", "duplicate key at byte 16"},
      {"{\"a\":\"b\"} x", "unexpected text after the object at byte 10"},
      {"{\"a\":\"\\q\"}", "unknown escape at byte 8"},
      {"{\"a\":\"\\ud83d\"}", "unpaired surrogate at byte 12"},
      {"{\"a\":1}", "expected a string at byte 5"},
      {"{\"a\":\"b", "unterminated string at byte 7"},
      {"{\"a\":\"b\",}", "expected a string at byte 9"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    auto parsed = parseFlatJson(c.text);
    REQUIRE_FALSE(parsed.isOk());
    CHECK(parsed.diagnostic().message == c.message);
  }
}
