// The C header `attnjit aot` writes next to a bundle's manifest (attnjit_bundle_kernels.h): per
// kernel, a typed check function and a typed launch function whose C parameters follow the
// kernel's parameters in order, documented with the manifest's promises and grid.
#pragma once

#include <string>

#include "runtime/BundleManifest.h"

namespace attnjit::compiler::cli {

// `bundleHeaderInclude` is how the generated header includes runtime/attnjit_bundle.h
// (e.g. "runtime/attnjit_bundle.h" against the source tree).
std::string generateLaunchHeader(const runtime::BundleManifest& manifest, const std::string& bundleHeaderInclude);

}  // namespace attnjit::compiler::cli
