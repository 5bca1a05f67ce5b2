// libFuzzer entry point of fuzz_disk_cache_entry (fuzz/FuzzBodies.h says what it checks).
#include <cstdio>
#include <cstdlib>

#include "fuzz/FuzzBodies.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const attnjit::fuzz::FuzzOutcome outcome = attnjit::fuzz::fuzzDiskCacheEntry(std::span<const std::uint8_t>(data, size));
  if (!outcome.violation.empty()) {
    std::fprintf(stderr, "fuzz_disk_cache_entry: property violated: %s\n", outcome.violation.c_str());
    std::abort();
  }
  return 0;
}
