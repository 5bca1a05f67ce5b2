// An ahead-of-time bundle loaded for launching: the directory `attnjit aot` wrote (manifest.json,
// PTX and cubin images; runtime/BundleManifest.h), opened by the runtime library alone, with no
// LLVM in the process.
//
// Opening reads the manifest and every image file it names, and checks each against its
// SHA-256: a bundle that opens is complete and unmodified, and nothing is read from disk later.
// Launching picks, per kernel and CUDA context, the best image for the context's device:
//   1. a cubin built for exactly the device's SM (an sm_90a cubin runs on an sm_90 device, and
//      is preferred there over a plain sm_90 one);
//   2. else PTX, compiled by the driver for the device: the newest architecture the device
//      can run (arch-specific PTX only on exactly its chip);
//   3. else an error listing the images the bundle has.
// The chosen kernel stays loaded for the bundle's lifetime.
//
// Arguments are checked before anything touches the GPU: count, kind (pointer, integer,
// float), null and misaligned pointers against the `align` promise, integers against their
// `divisibility` promise and their type's range. A launch is asynchronous on the caller's
// stream, like any kernel launch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "runtime/BundleManifest.h"
#include "runtime/DiskCache.h"
#include "runtime/Driver.h"
#include "runtime/KernelCache.h"
#include "runtime/Module.h"

namespace attnjit::runtime {

// One launch argument, in kernel parameter order.
struct BundleArgument {
  enum class Kind { Pointer, Integer, Float };

  Kind kind = Kind::Pointer;
  const void* pointer = nullptr;  // a device address
  std::int64_t integer = 0;
  double floating = 0;

  static BundleArgument fromPointer(const void* address) { return {Kind::Pointer, address, 0, 0}; }
  static BundleArgument fromDeviceAddress(std::uint64_t address) {
    return fromPointer(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(address)));
  }
  static BundleArgument fromInteger(std::int64_t value) { return {Kind::Integer, nullptr, value, 0}; }
  static BundleArgument fromFloat(double value) { return {Kind::Float, nullptr, 0, value}; }
};

// What each image is and where it would run (chooseBundleImage), for tests and tools.
enum class BundleImageForm { Cubin, Ptx };
struct BundleImageChoice {
  const BundleImage* image = nullptr;
  BundleImageForm form = BundleImageForm::Ptx;
};

// The image a device of SM `deviceSm` (90 for compute capability 9.0) runs, by the rules
// above; an error naming the kernel, the device and the images otherwise.
support::Expected<BundleImageChoice> chooseBundleImage(const BundleKernel& kernel, int deviceSm);

// The SM number (90 for compute capability 9.0) of the device of the calling thread's current
// context (device 0's primary context made current when none is).
support::Expected<int> currentContextDeviceSm();

// Checks `arguments` against `kernel`'s parameters (see above); the error names the kernel,
// the parameter (by position and name) and the broken promise.
support::Status checkBundleArguments(const BundleKernel& kernel, std::span<const BundleArgument> arguments);

class Bundle {
 public:
  // Opens the bundle in `directory`: manifest parsed, every image read and its checksum
  // checked. Errors name the manifest field or the image file.
  static support::Expected<std::unique_ptr<Bundle>> open(const std::filesystem::path& directory);

  Bundle(const Bundle&) = delete;
  Bundle& operator=(const Bundle&) = delete;

  const std::filesystem::path& directory() const { return directory_; }
  const BundleManifest& manifest() const { return manifest_; }
  // Null when the bundle has no kernel of that name.
  const BundleKernel* findKernel(std::string_view name) const { return manifest_.findKernel(name); }
  // The bytes of a file the manifest names (checked when the bundle opened).
  const std::vector<std::uint8_t>& fileBytes(const BundleFile& file) const { return files_.at(file.path); }

  // Checks the arguments, then launches `kernel` (one of this bundle's) on `stream` in the
  // calling thread's current context (device 0's primary context when none is current),
  // loading the best image first if this context has not used the kernel yet.
  support::Status launch(const BundleKernel& kernel, std::span<const BundleArgument> arguments, Dim3 grid,
                StreamHandle stream);

  // The image `launch` uses in the current context (loads it if needed), for reports.
  support::Expected<BundleImageChoice> imageForCurrentContext(const BundleKernel& kernel);

  // Copies every image that has a cubin into `cache`'s disk cache under its JIT key (as
  // `cache` would file it: the key plus the cache's toolchain identity), so the JIT of
  // that exact kernel loads it instead of compiling. Returns how many entries were stored.
  // Images without a cubin are skipped (the JIT disk cache holds cubins only). With the
  // driver's loader the toolchain identity is the driver version, so seed where the driver
  // that will run the JIT is loaded.
  support::Expected<int> seedJitDiskCache(KernelCache& cache) const;

 private:
  struct LoadedImage {
    BundleImageChoice choice;
    std::shared_ptr<Module> module;
    Function function;
  };

  Bundle(std::filesystem::path directory, BundleManifest manifest,
         std::map<std::string, std::vector<std::uint8_t>> files)
      : directory_(std::move(directory)), manifest_(std::move(manifest)), files_(std::move(files)) {}

  support::Expected<const LoadedImage*> loadedImage(const BundleKernel& kernel);
  support::Expected<LoadedImage> loadImage(const BundleKernel& kernel, int deviceSm) const;

  std::filesystem::path directory_;
  BundleManifest manifest_;
  std::map<std::string, std::vector<std::uint8_t>> files_;  // by manifest path

  std::mutex mutex_;
  // Per (context, kernel name); entries are never erased, so pointers to them stay valid.
  std::map<std::pair<ContextHandle, std::string>, std::unique_ptr<LoadedImage>> loaded_;
};

}  // namespace attnjit::runtime
