// Diagnostics: the user-error channel. Anything a user can get wrong (a malformed
// .tir file, an invalid kernel, a bad spec) becomes a Diagnostic with a location,
// carried in a Status or an Expected<T>. Compiler bugs use ATTNJIT_CHECK, which
// aborts with context: they are never the user's fault.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace attnjit::support {

// A point in a source file (1-based line and column). An empty file name means
// "built in C++"; line 0 means "no position".
struct Location {
  std::string file;
  int line = 0;
  int col = 0;

  bool known() const { return line > 0; }
  // "file:line:col" (or the parts that are known).
  std::string str() const;
};

struct Diagnostic {
  Location loc;
  std::string message;

  // "file:line:col: error: message", the format every tool prints.
  std::string str() const;
};

// Success, or one diagnostic explaining the failure.
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(Location loc, std::string message) {
    Status s;
    s.diag_ = Diagnostic{std::move(loc), std::move(message)};
    return s;
  }
  static Status error(Diagnostic d) {
    Status s;
    s.diag_ = std::move(d);
    return s;
  }

  bool isOk() const { return !diag_.has_value(); }
  explicit operator bool() const { return isOk(); }
  const Diagnostic& diagnostic() const { return *diag_; }
  std::string message() const { return diag_ ? diag_->str() : std::string("ok"); }

 private:
  std::optional<Diagnostic> diag_;
};

// A value or the diagnostic explaining why there is none.
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Expected(Status status) : v_(status.isOk() ? Diagnostic{{}, "internal: Expected built from an ok Status"}
                                             : status.diagnostic()) {}
  Expected(Diagnostic d) : v_(std::move(d)) {}  // NOLINT

  bool isOk() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return isOk(); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Diagnostic& diagnostic() const { return std::get<Diagnostic>(v_); }
  Status status() const { return isOk() ? Status::ok() : Status::error(diagnostic()); }

 private:
  std::variant<T, Diagnostic> v_;
};

[[noreturn]] void internalError(const char* file, int line, const std::string& message);

// A user's input as a message quotes it: unchanged up to 64 characters, else its
// first 48 and "... (N bytes)", so that an error about a huge value stays short.
std::string excerpt(std::string_view text);

}  // namespace attnjit::support

// Internal invariant: a failure is a compiler bug, never a user error.
#define ATTNJIT_CHECK(cond, msg)                                          \
  do {                                                                    \
    if (!(cond)) ::attnjit::support::internalError(__FILE__, __LINE__, (msg)); \
  } while (0)
