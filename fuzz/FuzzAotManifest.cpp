// libFuzzer entry point of fuzz_aot_manifest (fuzz/FuzzBodies.h says what it checks).
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "fuzz/FuzzBodies.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const attnjit::fuzz::FuzzOutcome outcome = attnjit::fuzz::fuzzAotManifest(text);
  if (!outcome.violation.empty()) {
    std::fprintf(stderr, "fuzz_aot_manifest: property violated: %s\n", outcome.violation.c_str());
    std::abort();
  }
  return 0;
}
