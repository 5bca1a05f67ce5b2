// The manifest of an ahead-of-time bundle: DIR/manifest.json, written by `attnjit aot` and read
// by the runtime (runtime/Bundle.h) without LLVM. It lists every kernel of the bundle with what
// a launcher needs: the parameters in order with their promises, and per target architecture
// one image (PTX, plus a cubin where ptxas was available) with its launch configuration.
//
// Layout (format_version 1):
//   {
//     "format": "attnjit-bundle", "format_version": 1,
//     "attnjit_version": "0.1.0", "llvm_version": "22.1.8",
//     "kernels": [{
//       "name": "merge_attn_states_f32_h4_d64_lse",   // the PTX entry; a C identifier
//       "family": "merge_attn_states", "spec": "specs/merge.yaml",
//       "params": "dtype=f32 num_heads=4 ...",           // the variant in spec spelling
//       "grid": "grid = (ceil(num_tokens / BLOCK_TOKENS), num_heads)",
//       "stage2": "reduce_segments_bf16_h32_d128",      // optional: see BundleKernel::stage2
//       "constexprs": {"BLOCK_TOKENS": 16, ...},
//       "parameters": [
//         {"name": "output", "kind": "pointer", "dtype": "f32", "align": 16},
//         {"name": "num_tokens", "kind": "integer", "dtype": "i32"},
//         {"name": "o_stride_token", "kind": "integer", "dtype": "i64", "divisibility": 8}, ...],
//       "images": [{
//         "arch": "sm_90a", "ptx_version": 90,
//         "threads_per_block": 128, "dynamic_shared_bytes": 0,
//         "ptx": {"file": "sm_90a/NAME.ptx", "sha256": "..."},
//         "cubin": {"file": "sm_90a/NAME.cubin", "sha256": "..."},   // or null: no ptxas
//         "ptxas": {"registers": 40, "spill_store_bytes": 0, ...},    // or null
//         "jit_cache_key": "attnjit 0.1.0\nllvm ...\n..."}]}]
//   }
// Promises: a pointer's `align` is the byte alignment its address must have; an integer's
// `divisibility` is a divisor its value must have. The kernel was compiled assuming them, so
// the launcher refuses arguments that break them.
//
// Parsing checks everything a launcher relies on and names the offending field with its
// line and column: types, ranges, C-identifier names, unique kernel names, architecture
// spellings, sha256 spellings, and file paths that stay inside the bundle (relative, '/'
// separated, no "." or ".." component, only [A-Za-z0-9._-] in names), and a `stage2` that
// names another kernel of the bundle.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "support/Diagnostics.h"

namespace attnjit::runtime {

// ptxas's resource report for one image (`ptxas -v`).
struct BundlePtxasReport {
  int registers = 0;
  int spillStoreBytes = 0;
  int spillLoadBytes = 0;
  int stackFrameBytes = 0;

  friend bool operator==(const BundlePtxasReport&, const BundlePtxasReport&) = default;
};

// A file of the bundle: a path relative to the bundle directory and the SHA-256 (lowercase
// hex) of its bytes.
struct BundleFile {
  std::string path;
  std::string sha256;

  friend bool operator==(const BundleFile&, const BundleFile&) = default;
};

// One kernel compiled for one architecture.
struct BundleImage {
  std::string arch;           // "sm_90a"
  int smVersion = 0;          // 90 (derived from arch)
  bool archSpecific = false;  // the "a" targets: run only on exactly that chip (derived)
  int ptxVersion = 0;         // PTX ISA of the PTX, major*10+minor
  int threadsPerBlock = 0;
  int dynamicSharedBytes = 0;
  BundleFile ptx;
  std::optional<BundleFile> cubin;  // absent where ptxas was not available
  std::optional<BundlePtxasReport> ptxas;
  // The key the JIT files this exact code under (compiler/driver/Jit.h jitCacheKey).
  std::string jitCacheKey;
  // The tensor maps the kernel takes after its parameters (its TMA copies), as
  // runtime/TensorMap.h's recipe text; empty when it takes none.
  std::string tensorMaps;

  friend bool operator==(const BundleImage&, const BundleImage&) = default;
};

enum class BundleParameterKind { Pointer, Integer, Float };

struct BundleParameter {
  std::string name;
  BundleParameterKind kind = BundleParameterKind::Pointer;
  // Pointers: the element type ("bf16", "f32", "i32", ...). Scalars: the value's type, one of
  // i1 i8 i16 i32 i64 (integer) or f32 f64 (float).
  std::string dtype;
  std::int64_t align = 0;         // pointers: required byte alignment of the address; 0: none
  std::int64_t divisibility = 0;  // integers: required divisor of the value; 0: none

  friend bool operator==(const BundleParameter&, const BundleParameter&) = default;
};

struct BundleKernel {
  std::string name;
  std::string family;
  std::string spec;    // the spec file it came from, as given to `attnjit aot`
  std::string params;  // the variant's parameters in spec spelling
  std::string grid;    // the grid the caller launches, in words
  // Split-KV variants (stage 1 only) name the bundle's kernel that finishes their work, a
  // reduce_segments launched after them on the same scratch; empty for every other kernel.
  std::string stage2;
  std::vector<std::pair<std::string, double>> constexprs;
  std::vector<BundleParameter> parameters;
  std::vector<BundleImage> images;

  friend bool operator==(const BundleKernel&, const BundleKernel&) = default;
};

struct BundleManifest {
  // Version 2 lets images carry tensor maps (TMA kernels); a bundle without
  // any is written as version 1, which runtimes that predate them read too.
  static constexpr int kFormatVersion = 2;
  static constexpr int kOldestFormatVersion = 1;
  static constexpr const char* kFormatName = "attnjit-bundle";
  static constexpr const char* kFileName = "manifest.json";

  int formatVersion = kFormatVersion;
  std::string attnjitVersion;
  std::string llvmVersion;
  std::vector<BundleKernel> kernels;

  const BundleKernel* findKernel(std::string_view name) const;
  friend bool operator==(const BundleManifest&, const BundleManifest&) = default;
};

// The manifest in `text`; errors are located at `sourceName`:line:col and name the field
// ("kernels[2].images[0].cubin.sha256: expected a string, found a number").
support::Expected<BundleManifest> parseBundleManifest(std::string_view text, const std::string& sourceName);

// The JSON text of `manifest` (indented, fields in the order above). parseBundleManifest of
// the result gives `manifest` back.
std::string writeBundleManifest(const BundleManifest& manifest);

// "sm_90a" → {90, true}; nullopt for anything that is not sm_<digits>[a].
struct BundleArch {
  int smVersion = 0;
  bool archSpecific = false;
};
std::optional<BundleArch> parseBundleArch(std::string_view arch);

// Whether `path` is a safe bundle-relative path (see above).
bool isSafeBundlePath(std::string_view path);

// Whether `name` is a C identifier ([A-Za-z_][A-Za-z0-9_]*).
bool isCIdentifier(std::string_view name);

// The C spelling of a parameter kind: "pointer", "integer", "float".
const char* bundleParameterKindName(BundleParameterKind kind);

}  // namespace attnjit::runtime
