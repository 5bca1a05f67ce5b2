// attnjit aot: every variant of the given specs compiled for every requested architecture,
// in parallel, into a bundle directory that the runtime library loads without LLVM
// (runtime/Bundle.h): PTX per kernel and arch, a cubin where ptxas is on the PATH,
// manifest.json (runtime/BundleManifest.h) and a C header of typed launchers.
//
// The kernels go through the JIT's own path (buildVariantKernel, the pass pipeline,
// codegen) and each image records the JIT's cache key for the same code, so a bundle can
// pre-seed the JIT disk cache.
//
// A split-KV variant (unified_attention or mla_decode with split_kv) is only stage 1: its
// partials are combined by a reduce_segments kernel. The bundle gets that kernel too, built
// from the config the JIT launches (reduceSegmentsFor), once however many variants share it,
// and the manifest names it in the variant's "stage2" field.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "codegen/Codegen.h"
#include "codegen/Target.h"
#include "compiler/driver/CompileDriver.h"
#include "compiler/driver/Jit.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/cli/AotLaunchHeader.h"
#include "compiler/cli/Command.h"
#include "compiler/cli/CudaTools.h"
#include "compiler/kernels/ReduceSegments.h"
#include "ir/Verifier.h"
#include "runtime/BundleManifest.h"
#include "runtime/Driver.h"
#include "runtime/Sha256.h"
#include "support/InputFile.h"

#ifndef ATTNJIT_VERSION
#define ATTNJIT_VERSION "unknown"
#endif

namespace attnjit::compiler::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCommand = "aot";
constexpr const char* kHeaderFileName = "attnjit_bundle_kernels.h";
constexpr const char* kDefaultBundleInclude = "runtime/attnjit_bundle.h";
// The runtime's own bound (runtime/Bundle.cpp) on a manifest it will load.
constexpr std::uintmax_t kMaxManifestBytes = 64u << 20;

struct KernelSource {
  const Variant* variant;
  std::string specPath;
  std::string stage2;    // split-KV variants: the name of their reduce_segments kernel
  bool derived = false;  // a stage 2 that aot added, not a variant of the specs
};

// One (kernel, arch) compile and what it produced.
struct Job {
  std::size_t kernel = 0;
  std::size_t arch = 0;
  std::optional<support::Diagnostic> error;
  bool internal = false;  // a compiler bug rather than bad input
  CompiledKernel compiled;
  std::string cacheKey;
  std::string cubin;  // empty without ptxas
  std::optional<runtime::BundlePtxasReport> ptxas;
  // The kernel's signature, taken from the arch-0 job's IR.
  std::vector<runtime::BundleParameter> parameters;
  std::vector<std::pair<std::string, double>> constexprs;
  std::string grid;
};

support::Diagnostic at(const std::string& where, std::string message) {
  return support::Diagnostic{support::Location{where, 0, 0}, std::move(message)};
}

// --arch=sm_80,sm_90a → the target table's entries, in order, without repeats.
support::Expected<std::vector<codegen::TargetInfo>> parseArchList(const std::string& list) {
  const std::string where = "attnjit aot";
  if (list.empty()) return at(where, "--arch is required: the architectures to build for, e.g. --arch sm_80,sm_90a");
  std::vector<codegen::TargetInfo> targets;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    const std::string name = list.substr(start, end - start);
    if (name.empty()) return at(where, "--arch=" + list + ": empty architecture name");
    auto target = codegen::lookupTarget(name);
    if (!target) return at(where, "--arch=" + list + ": " + target.diagnostic().message);
    for (const auto& seen : targets) {
      if (seen.name == name) return at(where, "--arch=" + list + ": " + name + " is listed twice");
    }
    targets.push_back(*target);
    start = end + 1;
  }
  return targets;
}

// The signature of a built kernel in manifest terms; an error (a compiler bug) for a
// parameter the manifest cannot describe.
support::Status describeKernel(const ir::Kernel& kernel, Job& job) {
  for (std::size_t i = 0; i < kernel.numParameters(); ++i) {
    const ir::Type& type = kernel.parameter(i)->type();
    const ir::Attributes& attrs = kernel.parameterAttrs(i);
    runtime::BundleParameter parameter;
    parameter.name = kernel.parameter(i)->name();
    parameter.dtype = ir::scalarName(type.scalarKind());
    if (type.isPointer() && type.addressSpace() == ir::AddressSpace::Global) {
      parameter.kind = runtime::BundleParameterKind::Pointer;
      if (const ir::AttrValue* align = attrs.find("align")) parameter.align = std::get<int64_t>(*align);
    } else if (type.isScalar() && ir::isInteger(type.scalarKind())) {
      parameter.kind = runtime::BundleParameterKind::Integer;
      if (const ir::AttrValue* divisibility = attrs.find("divisibility")) {
        parameter.divisibility = std::get<int64_t>(*divisibility);
      }
    } else if (type.isScalar() && (parameter.dtype == "f32" || parameter.dtype == "f64")) {
      parameter.kind = runtime::BundleParameterKind::Float;
    } else {
      return support::Status::error(kernel.location(), "internal: kernel '" + kernel.name() + "' parameter " +
                                                      std::to_string(i) + " has type " + type.str() +
                                                      ", which a bundle cannot pass");
    }
    if (!runtime::isCIdentifier(parameter.name)) {
      return support::Status::error(kernel.location(), "internal: kernel '" + kernel.name() + "' parameter " +
                                                      std::to_string(i) + " is named '" + parameter.name +
                                                      "', not a C identifier");
    }
    job.parameters.push_back(std::move(parameter));
  }
  for (const ir::Constexpr& constant : kernel.constexprs()) {
    double value = std::holds_alternative<int64_t>(constant.value)
                       ? static_cast<double>(std::get<int64_t>(constant.value))
                       : std::get<double>(constant.value);
    job.constexprs.emplace_back(constant.name, value);
  }
  for (const std::string& line : kernel.docLines()) job.grid += (job.grid.empty() ? "" : " ") + line;
  return support::Status::ok();
}

void runJob(Job& job, const KernelSource& source, const codegen::TargetInfo& target, int maxPtx,
            const std::string& ptxas) {
  const Variant& variant = *source.variant;
  auto kernel = buildVariantKernel(variant);
  if (!kernel) {
    job.error = support::Diagnostic{variant.location,
                                    "cannot build variant '" + variant.name + "': " + kernel.diagnostic().message};
    return;
  }
  if (support::Status verified = ir::verifyKernel(**kernel); !verified) {
    job.internal = true;
    job.error = verified.diagnostic();
    job.error->message =
        "internal: the kernel builder produced invalid IR for '" + variant.name + "': " + job.error->message;
    return;
  }
  if (job.arch == 0) {
    if (support::Status described = describeKernel(**kernel, job); !described) {
      job.internal = true;
      job.error = described.diagnostic();
      return;
    }
  }
  CompileOptions options;
  options.target = target.name;
  options.driverMaxPtx = maxPtx;
  options.keepLlvmIr = false;
  auto compiled = compileKernel(**kernel, options);
  if (!compiled) {
    support::Diagnostic d = compiled.diagnostic();
    job.internal = d.message.rfind("internal", 0) == 0;
    if (d.loc.file.empty()) d.loc = variant.location;
    d.message = "cannot compile kernel '" + variant.name + "' for " + target.name + ": " + d.message;
    job.error = std::move(d);
    return;
  }
  job.compiled = std::move(*compiled);
  // Only the PTX and the launch facts are kept; the other stages are large.
  job.compiled.tir.clear();
  job.cacheKey = jitCacheKey(job.compiled, options);
  // As compiler/driver/Jit.cpp: hand-edited PTX is not visible in the IR, so it joins the key.
  if (job.compiled.wasOverridden("ptx")) {
    job.cacheKey += "\noverride ptx\n" + job.compiled.ptx;
  }
  if (ptxas.empty()) return;
  auto assembled = assemblePtx(ptxas, job.compiled.ptx, target.name, true);
  if (!assembled) {
    job.internal = true;
    job.error = assembled.diagnostic();
    job.error->message = "internal: ptxas rejected the PTX generated for '" + variant.name + "' (" + target.name +
                         "): " + job.error->message;
    return;
  }
  job.cubin = std::move(assembled->cubin);
  PtxasResources resources = parsePtxasResources(assembled->ptxasLog);
  if (resources.found) {
    job.ptxas = runtime::BundlePtxasReport{resources.registers, resources.spillStoreBytes, resources.spillLoadBytes,
                                           resources.stackFrameBytes};
  }
}

// Prints "[done/total] kernel arch" over itself on a terminal, one line per job otherwise.
class Progress {
 public:
  explicit Progress(std::size_t total) : total_(total), terminal_(isatty(STDERR_FILENO) != 0) {}

  void finished(const std::string& kernel, const std::string& arch) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++done_;
    std::string line =
        "attnjit aot: [" + std::to_string(done_) + "/" + std::to_string(total_) + "] " + kernel + " " + arch;
    if (terminal_) {
      const std::size_t width = std::max(line.size(), lastWidth_);
      line.resize(width, ' ');
      lastWidth_ = width;
      std::fprintf(stderr, "\r%s", line.c_str());
    } else {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }

  void end() {
    if (terminal_ && done_ > 0) std::fputc('\n', stderr);
  }

 private:
  std::mutex mutex_;
  std::size_t total_;
  std::size_t done_ = 0;
  std::size_t lastWidth_ = 0;
  bool terminal_;
};

// Writes `bytes` to `path` through a temporary file in the same directory, fsynced and renamed
// over it: a reader (or a crash) sees the old file or the new one, never half of one.
support::Status writeFileAtomically(const fs::path& path, std::string_view bytes) {
  const fs::path temporary = path.string() + ".tmp." + std::to_string(getpid());
  auto failure = [&](const std::string& what) {
    std::string reason = std::strerror(errno);
    ::unlink(temporary.c_str());
    return support::Status::error(support::Location{path.string(), 0, 0},
                                  "cannot write the bundle: " + what + ": " + reason);
  };
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return failure("cannot create " + temporary.string());
  std::size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      return failure("write failed");
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    return failure("fsync failed");
  }
  if (::close(fd) != 0) return failure("close failed");
  if (::rename(temporary.c_str(), path.c_str()) != 0) return failure("rename failed");
  return support::Status::ok();
}

std::string sha256Hex(std::string_view bytes) { return runtime::Sha256::hexDigest(bytes); }

support::Status createDirectory(const fs::path& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error)
    return support::Status::error(support::Location{dir.string(), 0, 0},
                                  "cannot create the directory: " + error.message());
  return support::Status::ok();
}

// True for the names aot writes itself: a leftover temporary (writeFileAtomically, the
// writability probe) of an interrupted run counts as part of a bundle.
bool isAotTemporary(const std::string& name) {
  if (name.rfind(".attnjit-aot-probe.", 0) == 0) return true;
  const std::size_t tmp = name.rfind(".tmp.");
  if (tmp == std::string::npos || tmp + 5 == name.size()) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(tmp + 5), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

bool isArchDirectoryName(const std::string& name) {
  return name.size() > 3 && name.rfind("sm_", 0) == 0 &&
         std::all_of(name.begin() + 3, name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
}

bool isImageName(const std::string& name) {
  auto endsWith = [&](std::string_view suffix) {
    return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return endsWith(".ptx") || endsWith(".cubin") || isAotTemporary(name);
}

support::Status notABundle(const fs::path& dir, const fs::path& entry, const std::string& why) {
  return support::Status::error(support::Location{dir.string(), 0, 0},
                                "the output directory holds '" + entry.lexically_relative(dir).string() + "', " + why +
                                    ": aot writes into an empty directory or over an earlier bundle, never over "
                                    "other files; choose another -o");
}

// An existing, non-empty output directory must be an earlier bundle: its manifest parses and
// every entry is one aot writes (manifest, launch header, sm_* folders of PTX and cubins).
// Anything else (a source tree, a home directory given by mistake) is refused before any
// file is touched, since writing a bundle replaces and removes files there.
support::Status checkEarlierBundle(const fs::path& dir) {
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const fs::path& path = it->path();
    const std::string name = path.filename().string();
    if (name == runtime::BundleManifest::kFileName) {
      auto text = support::readInputFile(path.string(), kMaxManifestBytes, "bundle manifest");
      if (!text) return text.status();
      if (auto parsed = runtime::parseBundleManifest(*text, path.string()); !parsed)
        return notABundle(dir, path, "which is not an attnjit bundle manifest (" + parsed.diagnostic().message + ")");
      continue;
    }
    if (name == kHeaderFileName || isAotTemporary(name)) {
      if (!it->is_regular_file(error)) return notABundle(dir, path, "which is not a regular file");
      continue;
    }
    if (!isArchDirectoryName(name) || it->is_symlink(error) || !it->is_directory(error))
      return notABundle(dir, path, "which is not part of an attnjit bundle");
    for (fs::directory_iterator image(path, error); !error && image != end; image.increment(error)) {
      if (!isImageName(image->path().filename().string()) || image->is_symlink(error) ||
          !image->is_regular_file(error))
        return notABundle(dir, image->path(), "which is not a kernel image of an attnjit bundle");
    }
  }
  if (error)
    return support::Status::error(support::Location{dir.string(), 0, 0},
                                  "cannot list the output directory: " + error.message());
  return support::Status::ok();
}

// Makes `dir` (and parents) and checks it takes files, before any compile time is spent.
// `created` tells whether the directory is new, so a failed run can take it away again.
support::Status prepareOutputDirectory(const fs::path& dir, bool& created) {
  std::error_code error;
  created = false;
  const bool existed = fs::exists(fs::symlink_status(dir, error));
  if (existed) {
    if (!fs::is_directory(dir, error))
      return support::Status::error(support::Location{dir.string(), 0, 0}, "the output path is not a directory");
    if (support::Status bundle = checkEarlierBundle(dir); !bundle) return bundle;
  } else {
    fs::create_directories(dir, error);
    if (error)
      return support::Status::error(support::Location{dir.string(), 0, 0},
                                    "cannot create the output directory: " + error.message());
    created = true;
  }
  const fs::path probe = dir / (".attnjit-aot-probe." + std::to_string(getpid()));
  if (support::Status written = writeFileAtomically(probe, "probe"); !written) {
    return support::Status::error(support::Location{dir.string(), 0, 0}, "the output directory is not writable (" +
                                                                   written.diagnostic().message + ")");
  }
  fs::remove(probe, error);
  return support::Status::ok();
}

// After a new bundle is written over an earlier one: the images its manifest does not name
// (kernels or architectures dropped since), leftover temporaries, and arch folders left empty.
void removeStaleImages(const fs::path& dir, const runtime::BundleManifest& manifest) {
  std::set<std::string> current;
  for (const runtime::BundleKernel& kernel : manifest.kernels) {
    for (const runtime::BundleImage& image : kernel.images) {
      current.insert(image.ptx.path);
      if (image.cubin) current.insert(image.cubin->path);
    }
  }
  std::error_code error;
  std::vector<fs::path> stale, archDirectories;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (isAotTemporary(name)) stale.push_back(it->path());
    if (!isArchDirectoryName(name) || it->is_symlink(error) || !it->is_directory(error)) continue;
    archDirectories.push_back(it->path());
    for (fs::directory_iterator image(it->path(), error); !error && image != end; image.increment(error)) {
      const std::string relative = name + "/" + image->path().filename().string();
      if (!current.count(relative) && isImageName(image->path().filename().string())) stale.push_back(image->path());
    }
  }
  for (const fs::path& path : stale) fs::remove(path, error);
  for (const fs::path& path : archDirectories) {
    if (fs::is_empty(path, error)) fs::remove(path, error);
  }
}

// Adds the stage 2 of every split-KV kernel (built into `derived`, which owns them) and names
// it in the kernel's `stage2`. A stage 2 that the specs define already (same name, family
// reduce_segments, same parameters) is used as it is; any other kernel of that name is a clash.
support::Status addStage2Kernels(std::vector<KernelSource>& kernels, std::map<std::string, const Variant*>& byName,
                            std::deque<Variant>& derived) {
  const std::size_t selected = kernels.size();
  for (std::size_t k = 0; k < selected; ++k) {
    const Variant& stage1 = *kernels[k].variant;
    const std::optional<ReduceSegmentsConfig> reduce = splitKvStage2(stage1);
    if (!reduce) continue;
    const std::string name = reduce->kernelName();
    if (auto it = byName.find(name); it != byName.end()) {
      const Variant& existing = *it->second;
      if (existing.family != Family::ReduceSegments || !(existing.reduceSegments == *reduce)) {
        const std::string what = existing.family == Family::ReduceSegments
                                     ? "with other parameters (" + formatVariantParams(existing) + ")"
                                     : std::string("of family ") + familyName(existing.family);
        return support::Status::error(stage1.location,
                                 "the stage 2 of split-KV variant '" + stage1.name + "' is kernel '" + name +
                                     "' (reduce_segments " + formatSpecParams(*reduce) + "), but kernel '" + name +
                                     "' at " + existing.location.str() + " is " + what +
                                     "; rename or remove that variant");
      }
      kernels[k].stage2 = name;
      continue;
    }
    Variant& added = derived.emplace_back();
    added.name = name;
    added.family = Family::ReduceSegments;
    added.reduceSegments = *reduce;
    added.location = stage1.location;
    byName.emplace(name, &added);
    kernels.push_back({&added, kernels[k].specPath, "", true});
    kernels[k].stage2 = name;
  }
  return support::Status::ok();
}

// The variants of every spec (narrowed by --variant), with unique names across specs, then
// the stage 2 kernels of the split-KV ones (owned by `derived`).
support::Expected<std::vector<KernelSource>> collectKernels(const ParsedArguments& args, std::vector<Spec>& specs,
                                                       std::deque<Variant>& derived) {
  for (const std::string& path : args.positionals) {
    auto spec = loadSpecForCommand(path, kCommand);
    if (!spec) return spec.status();
    specs.push_back(std::move(*spec));
  }
  std::vector<KernelSource> kernels;
  std::map<std::string, const Variant*> byName;
  for (std::size_t s = 0; s < specs.size(); ++s) {
    auto selected = selectVariants(specs[s], args, kCommand);
    if (!selected) return selected.status();
    for (const Variant* variant : *selected) {
      auto [it, inserted] = byName.emplace(variant->name, variant);
      if (!inserted) {
        return support::Diagnostic{variant->location, "kernel '" + variant->name + "' is already defined at " +
                                                     it->second->location.str() +
                                                     "; kernel names must be unique within a bundle"};
      }
      kernels.push_back({variant, args.positionals[s], "", false});
    }
  }
  if (kernels.empty()) return at("attnjit aot", "the specs define no kernels");
  if (support::Status added = addStage2Kernels(kernels, byName, derived); !added) return added;
  return kernels;
}

// Runs every job on `threadCount` threads; after the first failure no new job starts.
void compileAll(std::vector<Job>& jobs, const std::vector<KernelSource>& kernels,
                const std::vector<codegen::TargetInfo>& targets, int maxPtx, const std::string& ptxas,
                unsigned threadCount) {
  Progress progress(jobs.size());
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  auto worker = [&] {
    while (!failed.load()) {
      const std::size_t index = next.fetch_add(1);
      if (index >= jobs.size()) return;
      Job& job = jobs[index];
      const codegen::TargetInfo& target = targets[job.arch];
      runJob(job, kernels[job.kernel], target, maxPtx, ptxas);
      if (job.error) {
        failed = true;
        return;
      }
      const KernelSource& source = kernels[job.kernel];
      progress.finished(source.variant->name + (source.derived ? " (split-KV stage 2)" : ""), target.name);
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < threadCount; ++t) threads.emplace_back(worker);
  for (std::thread& thread : threads) thread.join();
  progress.end();
}

// Writes the images, the header and (last) the manifest; returns the number of cubins.
// `jobs` holds kernel k's image for targets[a] at k * targets.size() + a.
support::Expected<std::size_t> writeBundle(const fs::path& outDir, const std::vector<KernelSource>& kernels,
                                      const std::vector<codegen::TargetInfo>& targets, const std::vector<Job>& jobs,
                                      const std::string& bundleHeaderInclude) {
  // A stale manifest would describe images about to be replaced: it goes first, the new one
  // comes last, so an interrupted run leaves a directory without a manifest, never a wrong one.
  std::error_code removeError;
  fs::remove(outDir / runtime::BundleManifest::kFileName, removeError);
  runtime::BundleManifest manifest;
  manifest.attnjitVersion = ATTNJIT_VERSION;
  manifest.llvmVersion = codegen::llvmVersion();
  std::size_t cubins = 0;
  for (const codegen::TargetInfo& target : targets) {
    if (support::Status made = createDirectory(outDir / target.name); !made) return made;
  }
  for (std::size_t k = 0; k < kernels.size(); ++k) {
    const Variant& variant = *kernels[k].variant;
    const Job& first = jobs[k * targets.size()];
    runtime::BundleKernel kernel;
    kernel.name = variant.name;
    kernel.family = familyName(variant.family);
    kernel.spec = kernels[k].specPath;
    kernel.params = formatVariantParams(variant);
    kernel.grid = first.grid;
    kernel.stage2 = kernels[k].stage2;
    kernel.constexprs = first.constexprs;
    kernel.parameters = first.parameters;
    for (std::size_t a = 0; a < targets.size(); ++a) {
      const Job& job = jobs[k * targets.size() + a];
      const std::string& arch = targets[a].name;
      runtime::BundleImage image;
      image.arch = arch;
      image.smVersion = targets[a].computeCapability;
      image.archSpecific = targets[a].archSpecific;
      image.ptxVersion = job.compiled.ptxVersion;
      image.threadsPerBlock = job.compiled.numThreads;
      image.dynamicSharedBytes = job.compiled.sharedMemoryBytes;
      image.ptx = {arch + "/" + variant.name + ".ptx", sha256Hex(job.compiled.ptx)};
      if (support::Status written = writeFileAtomically(outDir / image.ptx.path, job.compiled.ptx); !written)
        return written;
      if (!job.cubin.empty()) {
        image.cubin = runtime::BundleFile{arch + "/" + variant.name + ".cubin", sha256Hex(job.cubin)};
        if (support::Status written = writeFileAtomically(outDir / image.cubin->path, job.cubin); !written)
          return written;
        ++cubins;
      }
      image.ptxas = job.ptxas;
      image.jitCacheKey = job.cacheKey;
      image.tensorMaps = job.compiled.tensorMaps;
      kernel.images.push_back(std::move(image));
    }
    manifest.kernels.push_back(std::move(kernel));
  }
  // Runtimes that read only version 1 would launch a TMA kernel without its maps.
  bool tensorMaps = false;
  for (const auto& kernel : manifest.kernels)
    for (const auto& image : kernel.images) tensorMaps = tensorMaps || !image.tensorMaps.empty();
  manifest.formatVersion = tensorMaps ? runtime::BundleManifest::kFormatVersion
                                      : runtime::BundleManifest::kOldestFormatVersion;
  const std::string header = generateLaunchHeader(manifest, bundleHeaderInclude);
  if (support::Status written = writeFileAtomically(outDir / kHeaderFileName, header); !written) return written;
  if (support::Status written = writeFileAtomically(outDir / runtime::BundleManifest::kFileName,
                                               runtime::writeBundleManifest(manifest));
      !written) {
    return written;
  }
  removeStaleImages(outDir, manifest);
  return cubins;
}

support::Expected<unsigned> parseJobCount(const ParsedArguments& args) {
  if (!args.has("--jobs")) return std::max(1u, std::thread::hardware_concurrency());
  const std::string text = args.value("--jobs");
  char* end = nullptr;
  long parsed = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || parsed < 1 || parsed > 1024) {
    return at("attnjit aot", "--jobs=" + text + ": expected a number of threads from 1 to 1024");
  }
  return static_cast<unsigned>(parsed);
}

int runAot(const ParsedArguments& args) {
  if (args.positionals.empty()) {
    reportUsageError(kCommand, "missing the spec files (see 'attnjit aot --help')");
    return kExitUserError;
  }
  if (!args.has("-o")) {
    reportUsageError(kCommand, "missing -o DIR: the bundle directory to write");
    return kExitUserError;
  }
  auto targets = parseArchList(args.value("--arch"));
  if (!targets) {
    reportError(targets.diagnostic());
    return kExitUserError;
  }
  auto jobCount = parseJobCount(args);
  if (!jobCount) {
    reportError(jobCount.diagnostic());
    return kExitUserError;
  }
  std::vector<Spec> specs;
  specs.reserve(args.positionals.size());
  std::deque<Variant> stage2Variants;
  auto kernels = collectKernels(args, specs, stage2Variants);
  if (!kernels) {
    reportError(kernels.diagnostic());
    return kExitUserError;
  }
  const fs::path outDir = args.value("-o");
  bool createdOutDir = false;
  if (support::Status prepared = prepareOutputDirectory(outDir, createdOutDir); !prepared) {
    reportError(prepared.diagnostic());
    return kExitUserError;
  }
  // A directory this run made holds only what it wrote: a failure takes it away again.
  auto removeCreatedOutDir = [&] {
    std::error_code ignored;
    if (createdOutDir) fs::remove_all(outDir, ignored);
  };
  const std::string ptxas = findOnPath("ptxas");
  // The PTX must be one the local toolchain accepts: the ptxas at hand (and so the driver of
  // that CUDA release), else the local driver; with neither, LLVM's newest.
  int maxPtx = ptxas.empty() ? 0 : ptxasMaxPtxVersion(ptxas);
  if (ptxas.empty()) {
    if (auto driverPtx = runtime::driverMaxPtxIsa()) maxPtx = driverPtx->asNumber();
  }

  std::vector<Job> jobs;
  for (std::size_t k = 0; k < kernels->size(); ++k) {
    for (std::size_t a = 0; a < targets->size(); ++a) {
      Job job;
      job.kernel = k;
      job.arch = a;
      jobs.push_back(std::move(job));
    }
  }
  const auto start = std::chrono::steady_clock::now();
  const unsigned threadCount = static_cast<unsigned>(std::min<std::size_t>(*jobCount, jobs.size()));
  compileAll(jobs, *kernels, *targets, maxPtx, ptxas, threadCount);
  for (const Job& job : jobs) {
    if (!job.error) continue;
    if (job.internal) std::fprintf(stderr, "attnjit: internal error (a compiler bug):\n");
    reportError(*job.error);
    removeCreatedOutDir();
    return job.internal ? kExitInternalError : kExitUserError;
  }
  auto cubins = writeBundle(outDir, *kernels, *targets, jobs, args.value("--include", kDefaultBundleInclude));
  if (!cubins) {
    reportError(cubins.diagnostic());
    removeCreatedOutDir();
    return kExitUserError;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string stage2Note =
      stage2Variants.empty() ? "" : " (" + std::to_string(stage2Variants.size()) + " of them split-KV stage 2)";
  std::printf("attnjit aot: %zu kernels%s x %zu architectures in %.1f s (%u threads) -> %s: %zu PTX, %zu cubins%s\n",
              kernels->size(), stage2Note.c_str(), targets->size(), seconds, threadCount, outDir.string().c_str(),
              jobs.size(), *cubins,
              ptxas.empty() ? " (no ptxas on the PATH: the driver compiles the PTX at load time)" : "");
  return kExitSuccess;
}

}  // namespace

Command aotCommand() {
  return Command{
      "aot",
      "Compile specs ahead of time into a bundle the runtime loads without LLVM.",
      "attnjit aot <spec.yaml>... --arch sm_80,sm_90a -o DIR [--jobs N] [--variant NAME]",
      "Compiles every variant of every spec for every architecture of --arch (in parallel,\n"
      "with a progress line on stderr) and writes into DIR:\n"
      "  <arch>/<kernel>.ptx             the PTX of each kernel and architecture\n"
      "  <arch>/<kernel>.cubin           the cubin, where ptxas is on the PATH\n"
      "  manifest.json                   kernels, parameters and their promises, launch\n"
      "                                  configuration, images with sha256 and JIT cache keys,\n"
      "                                  ptxas registers and spills\n"
      "  attnjit_bundle_kernels.h        typed C launch functions, one per kernel\n"
      "A split-KV variant (split_kv: true of unified_attention or mla_decode) is stage 1\n"
      "only: the bundle also gets its stage 2, the reduce_segments kernel the JIT launches\n"
      "after it (one copy per distinct reduce kernel), and the manifest names it in the\n"
      "variant's \"stage2\" field. A spec may define that kernel itself (family\n"
      "reduce_segments) with the same parameters; another kernel of that name is an error.\n"
      "Kernel names must be unique across the specs. Files are written atomically and the\n"
      "manifest last. DIR must be new, empty or an earlier bundle (whose images the new\n"
      "manifest no longer names are removed); any other file there is an error, before\n"
      "anything is written. A DIR that aot created is removed again when it fails.\n"
      "Load the bundle with runtime/attnjit_bundle.h (C) or runtime/Bundle.h.\n",
      {
          {"--arch", "sm_XX,...", false, "architectures to build for (required)"},
          {"-o", "DIR", false, "the bundle directory (created if needed; required)"},
          {"--jobs", "N", false, "compile threads (default: the number of cores)"},
          {"--variant", "NAME", false, "only this variant of each spec"},
          {"--include", "PATH", false, "how the header includes attnjit_bundle.h (default runtime/attnjit_bundle.h)"},
          {"--help", "", false, "show this help"},
      },
      runAot,
  };
}

}  // namespace attnjit::compiler::cli
