// libFuzzer entry point of fuzz_aot_manifest: the manifest reader of ahead-of-time bundles
// (runtime/BundleManifest.h) and the JSON parser under it, on untrusted bytes.
//
// Properties beyond "no crash, no leak, no hang":
//  - a rejected manifest comes with a message that names where (file:line:col);
//  - an accepted manifest writes back to text that parses to the same manifest, and writing
//    that again gives the same bytes;
//  - any accepted JSON document writes back to text that parses and writes identically.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/BundleManifest.h"
#include "runtime/FlatJson.h"

namespace {

[[noreturn]] void violated(const std::string& what) {
  std::fprintf(stderr, "fuzz_aot_manifest: property violated: %s\n", what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace attnjit::runtime;
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  auto manifest = parseBundleManifest(text, "manifest.json");
  if (!manifest) {
    const std::string message = manifest.diagnostic().str();
    if (message.rfind("manifest.json:", 0) != 0) violated("error without a location: " + message);
  } else {
    const std::string written = writeBundleManifest(*manifest);
    auto again = parseBundleManifest(written, "written.json");
    if (!again) violated("written manifest does not parse: " + again.diagnostic().str() + "\n" + written);
    if (!(*again == *manifest)) violated("manifest does not round-trip:\n" + written);
    if (writeBundleManifest(*again) != written) violated("manifest writing is not stable:\n" + written);
  }

  if (auto document = parseJson(text, "document.json")) {
    const std::string written = writeJson(*document);
    auto again = parseJson(written, "written.json");
    if (!again) violated("written JSON does not parse: " + again.diagnostic().str() + "\n" + written);
    if (writeJson(*again) != written) violated("JSON writing is not stable:\n" + written);
  }
  return 0;
}
