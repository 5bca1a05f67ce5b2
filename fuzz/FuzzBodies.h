// What each fuzz target does with one input, shared by the libFuzzer entry points (fuzz/*.cpp)
// and the regression test that replays saved inputs (tests/test_fuzz_regressions.cpp).
//
// Every body must survive any bytes: untrusted input is rejected with a diagnostic, never a
// crash. Beyond "no crash" each body checks properties that must hold for every input it
// accepts; a violated property is returned as a message (the fuzzer then aborts, the test
// fails). Bodies are inline so that the test executable, which links libattnjit.so only,
// needs no extra sources.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compiler/spec/Spec.h"
#include "compiler/spec/VariantKernel.h"
#include "ir/Parser.h"
#include "ir/Printer.h"
#include "ir/Verifier.h"
#include "runtime/BundleManifest.h"
#include "runtime/DiskCache.h"
#include "runtime/FlatJson.h"

namespace attnjit::fuzz {

struct FuzzOutcome {
  bool accepted = false;  // the input was valid (parsed, verified, loaded, ...)
  std::string violation;  // a broken property; empty when none
};

// .tir text: parse, verify; an accepted module prints to text that parses and verifies again
// and prints the same (the printer and the parser agree).
inline FuzzOutcome fuzzTirText(std::string_view text) {
  FuzzOutcome outcome;
  auto module = ir::parseModule(text, "fuzz.tir");
  if (!module) return outcome;
  if (!ir::verifyModule(**module).isOk()) return outcome;
  outcome.accepted = true;
  const std::string printed = ir::printModule(**module);
  auto reparsed = ir::parseModule(printed, "printed.tir");
  if (!reparsed) {
    outcome.violation = "printed module does not parse: " + reparsed.diagnostic().str() + "\n" + printed;
    return outcome;
  }
  if (support::Status verified = ir::verifyModule(**reparsed); !verified.isOk()) {
    outcome.violation = "printed module does not verify: " + verified.message() + "\n" + printed;
    return outcome;
  }
  if (std::string again = ir::printModule(**reparsed); again != printed) {
    outcome.violation = "printing is not stable:\n" + printed + "\n---\n" + again;
  }
  return outcome;
}

// YAML spec text: load; every variant of an accepted spec (the first few: a spec may hold
// thousands) builds a kernel that verifies. A variant the loader accepted and the builder
// rejects is a violation too: the loader validates configurations.
inline FuzzOutcome fuzzSpecText(std::string_view text) {
  constexpr std::size_t kVariantsBuilt = 4;
  FuzzOutcome outcome;
  auto spec = compiler::loadSpecText(std::string(text), "fuzz.yaml");
  if (!spec) return outcome;
  outcome.accepted = true;
  for (std::size_t i = 0; i < spec->variants.size() && i < kVariantsBuilt; ++i) {
    const compiler::Variant& variant = spec->variants[i];
    support::Expected<std::unique_ptr<ir::Kernel>> kernel = compiler::buildVariantKernel(variant);
    if (!kernel) {
      outcome.violation = "accepted variant " + variant.name + " does not build: " + kernel.diagnostic().str();
      return outcome;
    }
    if (support::Status verified = ir::verifyKernel(**kernel); !verified.isOk()) {
      outcome.violation = "kernel of variant " + variant.name + " does not verify: " + verified.message();
      return outcome;
    }
  }
  return outcome;
}

// Disk-cache entry bytes: decode as an entry for a fixed key. The checksum makes random
// bytes fail early, so the same input also goes through the metadata parser directly, and
// through an encode → decode round trip of an entry built from its parts.
inline FuzzOutcome fuzzDiskCacheEntry(std::span<const std::uint8_t> bytes) {
  FuzzOutcome outcome;
  std::string problem;
  auto decoded = runtime::DiskCache::decodeEntry("fuzz key", bytes, problem);
  outcome.accepted = decoded.has_value();
  if (!decoded && problem.empty()) {
    outcome.violation = "rejected entry without a reason";
    return outcome;
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (auto metadata = runtime::parseFlatJson(text)) {
    // What the writer produces from a parsed object parses back to the same object.
    auto again = runtime::parseFlatJson(runtime::writeFlatJson(*metadata));
    if (!again || *again != *metadata) {
      outcome.violation = "flat JSON does not round-trip: " + std::string(text);
      return outcome;
    }
  }
  // Split the input in three (key, cubin, PTX) and use it as metadata values as well.
  const std::size_t third = bytes.size() / 3;
  runtime::CacheEntry entry;
  const std::string key(text.substr(0, third));
  entry.cubin.assign(bytes.begin() + third, bytes.begin() + 2 * third);
  entry.ptx = std::string(text.substr(2 * third));
  entry.metadata[key] = entry.ptx;
  const std::vector<std::uint8_t> encoded = runtime::DiskCache::encodeEntry(key, entry);
  auto roundTrip = runtime::DiskCache::decodeEntry(key, encoded, problem);
  if (!roundTrip || !(*roundTrip == entry)) {
    outcome.violation = "entry does not round-trip: " + (roundTrip ? std::string("contents differ") : problem);
  }
  return outcome;
}

// Bytes as an ahead-of-time bundle manifest (runtime/BundleManifest.h) and as a general JSON
// document (runtime/FlatJson.h). A rejected manifest names where (file:line:col); an accepted
// one writes back to text that parses to the same manifest and writes the same bytes again;
// any accepted JSON document writes to text that parses and writes identically.
inline FuzzOutcome fuzzAotManifest(std::string_view text) {
  FuzzOutcome outcome;
  auto manifest = runtime::parseBundleManifest(text, "manifest.json");
  outcome.accepted = static_cast<bool>(manifest);
  if (!manifest) {
    const std::string message = manifest.diagnostic().str();
    if (message.rfind("manifest.json:", 0) != 0) {
      outcome.violation = "error without a location: " + message;
      return outcome;
    }
  } else {
    const std::string written = runtime::writeBundleManifest(*manifest);
    auto again = runtime::parseBundleManifest(written, "written.json");
    if (!again) {
      outcome.violation = "written manifest does not parse: " + again.diagnostic().str() + "\n" + written;
    } else if (!(*again == *manifest)) {
      outcome.violation = "manifest does not round-trip:\n" + written;
    } else if (runtime::writeBundleManifest(*again) != written) {
      outcome.violation = "manifest writing is not stable:\n" + written;
    }
    if (!outcome.violation.empty()) return outcome;
  }
  if (auto document = runtime::parseJson(text, "document.json")) {
    const std::string written = runtime::writeJson(*document);
    auto again = runtime::parseJson(written, "written.json");
    if (!again) {
      outcome.violation = "written JSON does not parse: " + again.diagnostic().str() + "\n" + written;
    } else if (runtime::writeJson(*again) != written) {
      outcome.violation = "JSON writing is not stable:\n" + written;
    }
  }
  return outcome;
}

}  // namespace attnjit::fuzz
