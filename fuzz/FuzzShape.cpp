// libFuzzer entry point of fuzz_shape (fuzz/FuzzOpBodies.h says what it checks).
#include <cstdio>
#include <cstdlib>

#include "fuzz/FuzzOpBodies.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const attnjit::fuzz::FuzzOutcome outcome = attnjit::fuzz::fuzzShapeArguments(text);
  if (!outcome.violation.empty()) {
    std::fprintf(stderr, "fuzz_shape: property violated: %s\n", outcome.violation.c_str());
    std::abort();
  }
  return 0;
}
