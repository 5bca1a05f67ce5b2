#include "compiler/cli/PtxInstructionMix.h"

#include <cctype>
#include <string_view>

namespace attnjit::compiler::cli {
namespace {

bool startsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

std::string_view trimLeft(std::string_view s) {
  while (!s.empty() && (std::isspace(static_cast<unsigned char>(s.front())) || s.front() == '{' || s.front() == '}'))
    s.remove_prefix(1);
  return s;
}

std::string_view firstToken(std::string_view s) {
  size_t end = 0;
  while (end < s.size() && !std::isspace(static_cast<unsigned char>(s[end])) && s[end] != ';') ++end;
  return s.substr(0, end);
}

// The opcode of one statement ("ld.global.nc.v4.u32"), or "" for directives,
// labels and empty statements.
std::string_view opcodeOf(std::string_view statement) {
  statement = trimLeft(statement);
  std::string_view token = firstToken(statement);
  // "$L__BB0_2:" may precede a statement on the same line.
  if (!token.empty() && token.back() == ':') {
    statement = trimLeft(statement.substr(token.size()));
    token = firstToken(statement);
  }
  if (startsWith(token, "@")) {
    statement = trimLeft(statement.substr(token.size()));
    token = firstToken(statement);
  }
  if (token.empty() || token.front() == '.' || token.back() == ':') return {};
  return token;
}

void count(std::string_view op, PtxInstructionMix& mix) {
  if (startsWith(op, "mma.")) {
    ++mix.mma;
  } else if (startsWith(op, "wgmma.mma_async")) {
    ++mix.wgmma;
  } else if (startsWith(op, "ldmatrix.")) {
    ++mix.ldmatrix;
  } else if (startsWith(op, "mbarrier.") || startsWith(op, "cp.async.mbarrier.")) {
    ++mix.mbarrier;
  } else if (startsWith(op, "cp.async.bulk.tensor.")) {
    ++mix.tma;
  } else if (startsWith(op, "cp.async.")) {
    bool bookkeeping = contains(op, "commit_group") || contains(op, "wait_group") || contains(op, "wait_all");
    if (!bookkeeping) ++mix.cpAsync;
  } else if (startsWith(op, "shfl.")) {
    ++mix.shfl;
  } else if (op == "bar.sync" || startsWith(op, "bar.sync.") || op == "barrier.sync" ||
             startsWith(op, "barrier.sync.")) {
    ++mix.barSync;
  } else if (startsWith(op, "ld.global.")) {
    ++mix.ldGlobal;
    if (contains(op, ".v2.") || contains(op, ".v4.") || contains(op, ".v8.")) ++mix.ldGlobalVector;
  } else if (startsWith(op, "st.global.")) {
    ++mix.stGlobal;
  } else if (startsWith(op, "ld.shared.") || startsWith(op, "ld.shared::")) {
    ++mix.ldShared;
  } else if (startsWith(op, "st.shared.") || startsWith(op, "st.shared::")) {
    ++mix.stShared;
  } else if (startsWith(op, "ex2.")) {
    ++mix.ex2;
  }
}

}  // namespace

PtxInstructionMix countPtxInstructions(const std::string& ptx) {
  PtxInstructionMix mix;
  std::string_view text = ptx;
  while (!text.empty()) {
    size_t lineEnd = text.find('\n');
    std::string_view line = text.substr(0, lineEnd);
    text.remove_prefix(lineEnd == std::string_view::npos ? text.size() : lineEnd + 1);
    line = line.substr(0, line.find("//"));
    while (!line.empty()) {
      size_t statementEnd = line.find(';');
      std::string_view op = opcodeOf(line.substr(0, statementEnd));
      if (!op.empty()) count(op, mix);
      line.remove_prefix(statementEnd == std::string_view::npos ? line.size() : statementEnd + 1);
    }
  }
  return mix;
}

}  // namespace attnjit::compiler::cli
