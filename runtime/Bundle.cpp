#include "runtime/Bundle.h"

#include "runtime/ArgumentPromises.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <system_error>

#include "runtime/DriverInternal.h"
#include "runtime/Sha256.h"

namespace attnjit::runtime {
namespace {

namespace fs = std::filesystem;

// Far above any real manifest or image; a larger file is refused rather than read.
constexpr std::uintmax_t kMaxManifestBytes = 64u << 20;
constexpr std::uintmax_t kMaxImageBytes = 512u << 20;

support::Status bundleError(const fs::path& file, std::string message) {
  return support::Status::error(support::Location{file.string(), 0, 0}, std::move(message));
}

// The bytes of `path` (a regular file of at most `limit` bytes).
support::Expected<std::vector<std::uint8_t>> readRegularFile(const fs::path& path, std::uintmax_t limit,
                                                             const char* what) {
  std::error_code error;
  fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status)) return bundleError(path, std::string(what) + " does not exist");
  if (!fs::is_regular_file(status)) return bundleError(path, std::string(what) + " is not a regular file");
  std::uintmax_t size = fs::file_size(path, error);
  if (error) return bundleError(path, std::string("cannot read the size of the ") + what + ": " + error.message());
  if (size > limit) {
    return bundleError(path, std::string(what) + " is " + std::to_string(size) + " bytes, more than the limit of " +
                                 std::to_string(limit));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return bundleError(path, std::string("cannot open the ") + what);
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(size));
  if (size > 0) in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(size));
  if (!in || in.gcount() != static_cast<std::streamsize>(size)) {
    return bundleError(path, std::string("cannot read the ") + what + " (short read)");
  }
  return bytes;
}

// Whether `path` lies inside `root` once symbolic links are resolved (both canonical).
bool staysInside(const fs::path& root, const fs::path& path) {
  auto rootEnd = root.end();
  auto it = path.begin();
  for (auto r = root.begin(); r != rootEnd; ++r, ++it) {
    if (it == path.end() || *it != *r) return false;
  }
  return true;
}

std::string describeImages(const BundleKernel& kernel) {
  std::string text;
  for (const BundleImage& image : kernel.images) {
    if (!text.empty()) text += ", ";
    text += image.arch + (image.cubin ? " (cubin, PTX)" : " (PTX)");
  }
  return text;
}

std::string parameterLabel(const BundleKernel& kernel, std::size_t index) {
  return "kernel '" + kernel.name + "' parameter " + std::to_string(index) + " ('" + kernel.parameters[index].name +
         "')";
}

const char* argumentKindName(BundleArgument::Kind kind) {
  switch (kind) {
    case BundleArgument::Kind::Pointer: return "pointer";
    case BundleArgument::Kind::Integer: return "integer";
    case BundleArgument::Kind::Float: return "float";
  }
  return "argument";
}

bool kindsMatch(BundleParameterKind parameter, BundleArgument::Kind argument) {
  switch (parameter) {
    case BundleParameterKind::Pointer: return argument == BundleArgument::Kind::Pointer;
    case BundleParameterKind::Integer: return argument == BundleArgument::Kind::Integer;
    case BundleParameterKind::Float: return argument == BundleArgument::Kind::Float;
  }
  return false;
}

// The inclusive range of an integer dtype.
std::pair<std::int64_t, std::int64_t> integerRange(const std::string& dtype) {
  if (dtype == "i1") return {0, 1};
  if (dtype == "i8") return {std::numeric_limits<std::int8_t>::min(), std::numeric_limits<std::int8_t>::max()};
  if (dtype == "i16") return {std::numeric_limits<std::int16_t>::min(), std::numeric_limits<std::int16_t>::max()};
  if (dtype == "i32") return {std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max()};
  return {std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()};
}

// A kernel parameter's bytes as cuLaunchKernel reads them: 8-byte pointers, i64 and f64;
// f32 as a float; the narrower integers as a 32-bit value (as compiler/validation/GpuTiming.h packs them).
struct PackedArgument {
  alignas(8) unsigned char bytes[8] = {};
};

PackedArgument packArgument(const BundleParameter& parameter, const BundleArgument& argument) {
  PackedArgument packed;
  switch (parameter.kind) {
    case BundleParameterKind::Pointer: {
      const std::uint64_t address = reinterpret_cast<std::uintptr_t>(argument.pointer);
      std::memcpy(packed.bytes, &address, sizeof address);
      break;
    }
    case BundleParameterKind::Integer:
      if (parameter.dtype == "i64") {
        std::memcpy(packed.bytes, &argument.integer, sizeof argument.integer);
      } else {
        const std::int32_t narrow = static_cast<std::int32_t>(argument.integer);
        std::memcpy(packed.bytes, &narrow, sizeof narrow);
      }
      break;
    case BundleParameterKind::Float:
      if (parameter.dtype == "f64") {
        std::memcpy(packed.bytes, &argument.floating, sizeof argument.floating);
      } else {
        const float single = static_cast<float>(argument.floating);
        std::memcpy(packed.bytes, &single, sizeof single);
      }
      break;
  }
  return packed;
}

}  // namespace

support::Expected<int> currentContextDeviceSm() {
  auto context = currentOrPrimaryContext();
  if (!context) return context.status();
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const cuda::DriverApi& api = **apiOr;
  cuda::CUdevice device = 0;
  cuda::CUresult result = api.cuCtxGetDevice(&device);
  if (result != cuda::CUDA_SUCCESS) return cudaCallError(api, result, "cuCtxGetDevice");
  int major = 0, minor = 0;
  result = api.cuDeviceGetAttribute(&major, cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  if (result != cuda::CUDA_SUCCESS) return cudaCallError(api, result, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)");
  result = api.cuDeviceGetAttribute(&minor, cuda::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  if (result != cuda::CUDA_SUCCESS) return cudaCallError(api, result, "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)");
  return major * 10 + minor;
}

support::Expected<BundleImageChoice> chooseBundleImage(const BundleKernel& kernel, int deviceSm) {
  // Prefers the arch-specific variant at equal SM: it is what the JIT builds for the chip.
  auto better = [](const BundleImage* candidate, const BundleImage* best) {
    if (best == nullptr) return true;
    if (candidate->smVersion != best->smVersion) return candidate->smVersion > best->smVersion;
    return candidate->archSpecific && !best->archSpecific;
  };
  const BundleImage* cubin = nullptr;
  const BundleImage* ptx = nullptr;
  for (const BundleImage& image : kernel.images) {
    if (image.cubin && image.smVersion == deviceSm && better(&image, cubin)) cubin = &image;
    const bool runsHere = image.archSpecific ? image.smVersion == deviceSm : image.smVersion <= deviceSm;
    if (runsHere && better(&image, ptx)) ptx = &image;
  }
  if (cubin != nullptr) return BundleImageChoice{cubin, BundleImageForm::Cubin};
  if (ptx != nullptr) return BundleImageChoice{ptx, BundleImageForm::Ptx};
  return runtimeError("kernel '" + kernel.name + "' has no image that runs on an sm_" + std::to_string(deviceSm) +
                      " device; the bundle has: " + describeImages(kernel) +
                      " (rebuild it with --arch including sm_" + std::to_string(deviceSm) + ")");
}

support::Status checkBundleArguments(const BundleKernel& kernel, std::span<const BundleArgument> arguments) {
  if (arguments.size() != kernel.parameters.size()) {
    return runtimeError("kernel '" + kernel.name + "' takes " + std::to_string(kernel.parameters.size()) +
                        " arguments, got " + std::to_string(arguments.size()));
  }
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    const BundleParameter& parameter = kernel.parameters[i];
    const BundleArgument& argument = arguments[i];
    if (!kindsMatch(parameter.kind, argument.kind)) {
      return runtimeError(parameter.kind == BundleParameterKind::Pointer
                              ? parameterLabel(kernel, i) + " is a pointer to " + parameter.dtype + ", got " +
                                    std::string(argumentKindName(argument.kind)) + " argument"
                              : parameterLabel(kernel, i) + " is " +
                                    std::string(bundleParameterKindName(parameter.kind)) + " " + parameter.dtype +
                                    ", got " + argumentKindName(argument.kind) + " argument");
    }
    switch (parameter.kind) {
      case BundleParameterKind::Pointer: {
        const uint64_t address = reinterpret_cast<std::uintptr_t>(argument.pointer);
        if (auto broken = pointerPromiseBroken(address, parameter.align))
          return runtimeError(parameterLabel(kernel, i) + " " + *broken);
        break;
      }
      case BundleParameterKind::Integer: {
        auto [low, high] = integerRange(parameter.dtype);
        if (argument.integer < low || argument.integer > high) {
          return runtimeError(parameterLabel(kernel, i) + ": " + std::to_string(argument.integer) +
                              " does not fit its type " + parameter.dtype);
        }
        if (auto broken = divisibilityPromiseBroken(argument.integer, parameter.divisibility))
          return runtimeError(parameterLabel(kernel, i) + " " + *broken);
        break;
      }
      case BundleParameterKind::Float: break;
    }
  }
  return support::Status::ok();
}

support::Expected<std::unique_ptr<Bundle>> Bundle::open(const fs::path& directory) {
  std::error_code error;
  if (!fs::is_directory(directory, error)) return bundleError(directory, "bundle directory does not exist");
  const fs::path root = fs::canonical(directory, error);
  if (error) return bundleError(directory, "cannot resolve the bundle directory: " + error.message());
  const fs::path manifestPath = directory / BundleManifest::kFileName;
  auto manifestBytes = readRegularFile(manifestPath, kMaxManifestBytes, "bundle manifest");
  if (!manifestBytes) return manifestBytes.status();
  const std::string_view text(reinterpret_cast<const char*>(manifestBytes->data()), manifestBytes->size());
  auto manifest = parseBundleManifest(text, manifestPath.string());
  if (!manifest) return manifest.status();

  std::map<std::string, std::vector<std::uint8_t>> files;
  auto load = [&](const BundleFile& file, const std::string& field) -> support::Status {
    if (files.count(file.path) != 0) return support::Status::ok();
    const fs::path path = directory / file.path;
    const fs::path resolved = fs::weakly_canonical(path, error);
    if (error || !staysInside(root, resolved)) {
      return bundleError(path, field + ": '" + file.path + "' resolves outside the bundle directory");
    }
    auto bytes = readRegularFile(path, kMaxImageBytes, "bundle image");
    if (!bytes) return bundleError(path, field + ": " + bytes.diagnostic().message);
    Sha256 hash;
    hash.update(bytes->data(), bytes->size());
    const std::string actual = Sha256::toHex(hash.finish());
    if (actual != file.sha256) {
      return bundleError(path, field + ": sha256 mismatch: the manifest says " + file.sha256 + ", the file has " +
                                   actual + " (the bundle was modified or only partly copied)");
    }
    files.emplace(file.path, std::move(*bytes));
    return support::Status::ok();
  };
  for (std::size_t k = 0; k < manifest->kernels.size(); ++k) {
    const BundleKernel& kernel = manifest->kernels[k];
    for (std::size_t i = 0; i < kernel.images.size(); ++i) {
      const BundleImage& image = kernel.images[i];
      const std::string field = "kernels[" + std::to_string(k) + "].images[" + std::to_string(i) + "]";
      if (support::Status status = load(image.ptx, field + ".ptx"); !status) return status;
      if (image.cubin) {
        if (support::Status status = load(*image.cubin, field + ".cubin"); !status) return status;
      }
    }
  }
  return std::unique_ptr<Bundle>(new Bundle(directory, std::move(*manifest), std::move(files)));
}

support::Expected<Bundle::LoadedImage> Bundle::loadImage(const BundleKernel& kernel, int deviceSm) const {
  auto choice = chooseBundleImage(kernel, deviceSm);
  if (!choice) return choice.status();
  const BundleImage& image = *choice->image;
  std::vector<std::uint8_t> cubin;
  const std::string ptxPath = (directory_ / image.ptx.path).string();  // where a PTX error is located
  if (choice->form == BundleImageForm::Cubin) {
    cubin = fileBytes(*image.cubin);
  } else {
    auto maxPtx = driverMaxPtxIsa();
    if (!maxPtx) return maxPtx.status();
    if (maxPtx->asNumber() < image.ptxVersion) {
      return runtimeError("kernel '" + kernel.name + "': the " + image.arch + " PTX is PTX ISA " +
                          std::to_string(image.ptxVersion / 10) + "." + std::to_string(image.ptxVersion % 10) +
                          " but this CUDA driver accepts at most " + maxPtx->str() +
                          "; update the driver, or add a cubin for sm_" + std::to_string(deviceSm) +
                          " to the bundle (attnjit aot with ptxas on the PATH)");
    }
    const std::vector<std::uint8_t>& ptx = fileBytes(image.ptx);
    auto moduleImage =
        moduleImageForPtx(std::string_view(reinterpret_cast<const char*>(ptx.data()), ptx.size()), ptxPath);
    if (!moduleImage) return moduleImage.status();
    cubin = std::move(*moduleImage);
  }
  auto module = Module::load(cubin, ptxPath);
  if (!module) return module.status();
  auto owned = std::make_shared<Module>(std::move(*module));
  auto function = owned->function(kernel.name);
  if (!function) return function.status();
  if (!image.tensorMaps.empty()) {
    // The manifest's recipes parsed when it was read.
    auto maps = parseTensorMapRecipes(image.tensorMaps);
    if (!maps) return maps.status();
    function->setTensorMaps(std::make_shared<const TensorMapParameters>(std::move(*maps)));
  }
  return LoadedImage{*choice, std::move(owned), *function};
}

support::Expected<const Bundle::LoadedImage*> Bundle::loadedImage(const BundleKernel& kernel) {
  auto context = currentOrPrimaryContext();
  if (!context) return context.status();
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = std::make_pair(*context, kernel.name);
  auto found = loaded_.find(key);
  if (found != loaded_.end()) return static_cast<const LoadedImage*>(found->second.get());
  auto deviceSm = currentContextDeviceSm();
  if (!deviceSm) return deviceSm.status();
  auto image = loadImage(kernel, *deviceSm);
  if (!image) return image.status();
  auto inserted = loaded_.emplace(key, std::make_unique<LoadedImage>(std::move(*image)));
  return static_cast<const LoadedImage*>(inserted.first->second.get());
}

support::Expected<BundleImageChoice> Bundle::imageForCurrentContext(const BundleKernel& kernel) {
  auto loaded = loadedImage(kernel);
  if (!loaded) return loaded.status();
  return (*loaded)->choice;
}

support::Status Bundle::launch(const BundleKernel& kernel, std::span<const BundleArgument> arguments, Dim3 grid,
                      StreamHandle stream) {
  if (support::Status checked = checkBundleArguments(kernel, arguments); !checked) return checked;
  auto loaded = loadedImage(kernel);
  if (!loaded) return loaded.status();
  const BundleImage& image = *(*loaded)->choice.image;
  std::vector<PackedArgument> packed;
  packed.reserve(arguments.size());
  std::vector<void*> params;
  params.reserve(arguments.size());
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    packed.push_back(packArgument(kernel.parameters[i], arguments[i]));
    params.push_back(packed.back().bytes);
  }
  LaunchConfig config;
  config.grid = grid;
  config.block = Dim3{static_cast<unsigned>(image.threadsPerBlock), 1, 1};
  config.dynamicSharedBytes = static_cast<unsigned>(image.dynamicSharedBytes);
  config.stream = stream;
  return (*loaded)->function.launch(config, params.data());
}

support::Expected<int> Bundle::seedJitDiskCache(KernelCache& cache) const {
  const DiskCache& disk = cache.disk();
  if (!disk.enabled())
    return runtimeError("cannot seed the JIT cache from " + directory_.string() + ": the disk cache is disabled");
  int stored = 0;
  for (const BundleKernel& kernel : manifest_.kernels) {
    for (const BundleImage& image : kernel.images) {
      if (!image.cubin) continue;
      CacheEntry entry;
      entry.cubin = fileBytes(*image.cubin);
      const std::vector<std::uint8_t>& ptx = fileBytes(image.ptx);
      entry.ptx.assign(reinterpret_cast<const char*>(ptx.data()), ptx.size());
      // What compiler/driver/Jit.cpp records with a kernel it compiled, and the cache adds.
      entry.metadata["threads"] = std::to_string(image.threadsPerBlock);
      entry.metadata["shared_bytes"] = std::to_string(image.dynamicSharedBytes);
      entry.metadata["target"] = image.arch;
      entry.metadata[KernelCache::kEntryNameKey] = kernel.name;
      if (!disk.store(cache.diskKey(image.jitCacheKey), entry)) {
        return runtimeError("cannot seed the JIT cache in " + disk.directory().string() + " with kernel '" +
                            kernel.name + "' (" + image.arch + "): the store failed");
      }
      ++stored;
    }
  }
  return stored;
}

}  // namespace attnjit::runtime
