// libFuzzer entry point of fuzz_op_params (fuzz/FuzzOpBodies.h says what it checks).
#include <cstdio>
#include <cstdlib>

#include "fuzz/FuzzOpBodies.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const attnjit::fuzz::FuzzOutcome outcome = attnjit::fuzz::fuzzOpParams({data, size});
  if (!outcome.violation.empty()) {
    std::fprintf(stderr, "fuzz_op_params: property violated: %s\n", outcome.violation.c_str());
    std::abort();
  }
  return 0;
}
