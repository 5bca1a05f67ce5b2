#include "runtime/Module.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "runtime/DriverInternal.h"

namespace attnjit::runtime {
namespace {

using namespace cuda;

// Room for ptxas's logs; a larger log is truncated, never overflowed.
constexpr std::size_t kLinkLogBytes = 64 * 1024;
// Dynamic shared memory a kernel may use without opting in.
constexpr unsigned kDefaultDynamicSharedLimit = 48 * 1024;
// Static shared memory the kernels may declare beside the dynamic part (codegen
// declares only the producer warps' mbarriers: 2 per slot and buffer, 8 bytes
// each). Kernels with more dynamic memory than the default limit less this opt in.
constexpr unsigned kStaticSharedAllowance = 4 * 1024;

void* optionValue(std::uintptr_t value) { return reinterpret_cast<void*>(value); }

// Opts `function` in to `bytes` of dynamic shared memory where the default
// limit may not hold them (launches and occupancy queries above it need the
// opt-in first). The default limit covers static and dynamic shared memory
// together: a kernel with static shared memory (the mbarriers of producer
// warps) and 48 KiB of dynamic fails to launch without the opt-in, so every
// kernel whose dynamic part comes within a static allocation of the limit
// opts in.
support::Status optInDynamicShared(const DriverApi& api, CUfunction function, const std::string& name,
                                   unsigned bytes) {
  if (bytes <= kDefaultDynamicSharedLimit - kStaticSharedAllowance) return support::Status::ok();
  CUresult result =
      api.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, static_cast<int>(bytes));
  if (result != CUDA_SUCCESS)
    return cudaCallError(api, result,
                         "raising the dynamic shared memory of kernel " + name + " to " + std::to_string(bytes) +
                             " bytes (cuFuncSetAttribute)");
  return support::Status::ok();
}

// A kernel compiled for thread-block clusters of more than 8 CTAs (the portable
// size; `.reqnctapercluster`) launches only once it allows non-portable sizes
// (sm_90 runs clusters of up to 16). Kernels without clusters report 0 (or,
// before sm_90, fail the query) and are left alone.
support::Status allowNonPortableCluster(const DriverApi& api, CUfunction function, const std::string& name) {
  int size = 1;
  for (CUfunction_attribute dimension : {CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT,
                                         CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH}) {
    int extent = 0;
    if (api.cuFuncGetAttribute(&extent, dimension, function) != CUDA_SUCCESS) return support::Status::ok();
    size *= std::max(extent, 1);
  }
  if (size <= 8) return support::Status::ok();
  CUresult result = api.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
  if (result != CUDA_SUCCESS)
    return cudaCallError(api, result,
                         "allowing kernel " + name + " its cluster of " + std::to_string(size) +
                             " CTAs (cuFuncSetAttribute NON_PORTABLE_CLUSTER_SIZE_ALLOWED)");
  return support::Status::ok();
}

std::string logText(const std::vector<char>& buffer) {
  std::string text(buffer.data(), strnlen(buffer.data(), buffer.size()));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Owns a CUlinkState so every exit path destroys it.
class LinkState {
 public:
  LinkState(const DriverApi& api, CUlinkState state) : api_(api), state_(state) {}
  LinkState(const LinkState&) = delete;
  LinkState& operator=(const LinkState&) = delete;
  ~LinkState() { api_.cuLinkDestroy(state_); }
  CUlinkState get() const { return state_; }

 private:
  const DriverApi& api_;
  CUlinkState state_;
};

}  // namespace

bool needsWholeProgramCompile(std::string_view ptx) {
  return ptx.find("wgmma.mma_async") != std::string_view::npos || ptx.find("setmaxnreg") != std::string_view::npos;
}

std::vector<std::uint8_t> ptxModuleImage(std::string_view ptx) {
  std::vector<std::uint8_t> image(ptx.begin(), ptx.end());
  image.push_back(0);
  return image;
}

bool isPtxModuleImage(std::span<const std::uint8_t> image) {
  static constexpr std::uint8_t kElfMagic[4] = {0x7f, 'E', 'L', 'F'};
  const bool elf = image.size() >= 4 && std::memcmp(image.data(), kElfMagic, 4) == 0;
  return !elf && !image.empty() && image.back() == 0;
}

bool everyKernelWholeProgram() {
  static const bool every = [] {
    const char* value = std::getenv("ATTNJIT_WHOLE_PROGRAM");
    return value != nullptr && std::string_view(value) == "1";
  }();
  return every;
}

support::Expected<std::vector<std::uint8_t>> moduleImageForPtx(std::string_view ptx, std::string_view ptxName) {
  if (everyKernelWholeProgram() || needsWholeProgramCompile(ptx)) return ptxModuleImage(ptx);
  auto linked = linkPtx(ptx, LinkOptions{}, ptxName);
  if (!linked) return linked.status();
  return std::move(linked->cubin);
}

support::Expected<LinkedCubin> linkPtx(std::string_view ptx, const LinkOptions& options, std::string_view ptxName) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const DriverApi& api = **apiOr;
  if (options.optimizationLevel < 0 || options.optimizationLevel > 4) {
    return runtimeError("ptxas optimization level must be 0..4, got " + std::to_string(options.optimizationLevel));
  }
  if (options.targetSm < 0) return runtimeError("link target sm_" + std::to_string(options.targetSm) + " is invalid");

  std::vector<char> infoLog(kLinkLogBytes, '\0');
  std::vector<char> errorLog(kLinkLogBytes, '\0');
  std::vector<CUjit_option> keys;
  std::vector<void*> values;
  auto add = [&](CUjit_option key, void* value) {
    keys.push_back(key);
    values.push_back(value);
  };
  add(CU_JIT_INFO_LOG_BUFFER, infoLog.data());
  add(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, optionValue(infoLog.size()));
  add(CU_JIT_ERROR_LOG_BUFFER, errorLog.data());
  add(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, optionValue(errorLog.size()));
  add(CU_JIT_LOG_VERBOSE, optionValue(1));
  add(CU_JIT_OPTIMIZATION_LEVEL, optionValue(static_cast<std::uintptr_t>(options.optimizationLevel)));
  if (options.targetSm == 0) {
    add(CU_JIT_TARGET_FROM_CUCONTEXT, optionValue(0));
  } else {
    int target = options.targetSm + (options.archSpecific ? CU_COMPUTE_ACCELERATED_TARGET_BASE : 0);
    add(CU_JIT_TARGET, optionValue(static_cast<std::uintptr_t>(target)));
  }
  if (options.generateLineInfo) add(CU_JIT_GENERATE_LINE_INFO, optionValue(1));
  // An output option: the driver writes a float into the value slot.
  const std::size_t wallTimeSlot = keys.size();
  add(CU_JIT_WALL_TIME, optionValue(0));

  CUlinkState rawState = nullptr;
  CUresult result = api.cuLinkCreate(static_cast<unsigned>(keys.size()), keys.data(), values.data(), &rawState);
  if (result != CUDA_SUCCESS) return cudaCallError(api, result, "cuLinkCreate");
  LinkState state(api, rawState);

  const std::string name(ptxName);
  auto linkFailure = [&](CUresult failure, const char* step) {
    std::string message = "PTX to cubin compilation failed in " + std::string(step) + ": " +
                          describeCudaResult(api, failure);
    std::string log = logText(errorLog);
    if (!log.empty()) message += "\nptxas log:\n" + log;
    return support::Status::error(support::Location{name, 0, 0}, message);
  };
  // The driver reads PTX as a NUL-terminated string.
  std::string source(ptx);
  result = api.cuLinkAddData(state.get(), CU_JIT_INPUT_PTX, source.data(), source.size() + 1, name.c_str(), 0,
                             nullptr, nullptr);
  if (result != CUDA_SUCCESS) return linkFailure(result, "cuLinkAddData");
  void* cubin = nullptr;
  std::size_t cubinSize = 0;
  result = api.cuLinkComplete(state.get(), &cubin, &cubinSize);
  if (result != CUDA_SUCCESS) return linkFailure(result, "cuLinkComplete");

  LinkedCubin linked;
  // The cubin belongs to the link state: copy it before the state is destroyed.
  const auto* bytes = static_cast<const std::uint8_t*>(cubin);
  linked.cubin.assign(bytes, bytes + cubinSize);
  linked.infoLog = logText(infoLog);
  std::memcpy(&linked.wallMilliseconds, &values[wallTimeSlot], sizeof(float));
  return linked;
}

support::Expected<FunctionAttributes> Function::attributes() const {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const DriverApi& api = **apiOr;
  if (!valid()) return runtimeError("attributes of an invalid (null) kernel handle");
  FunctionAttributes attributes;
  struct Query {
    CUfunction_attribute attribute;
    const char* name;
    int* field;
  };
  const Query queries[] = {
      {CU_FUNC_ATTRIBUTE_NUM_REGS, "NUM_REGS", &attributes.numRegisters},
      {CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "LOCAL_SIZE_BYTES", &attributes.localBytes},
      {CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "SHARED_SIZE_BYTES", &attributes.staticSharedBytes},
      {CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, "CONST_SIZE_BYTES", &attributes.constBytes},
      {CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "MAX_THREADS_PER_BLOCK", &attributes.maxThreadsPerBlock},
      {CU_FUNC_ATTRIBUTE_PTX_VERSION, "PTX_VERSION", &attributes.ptxVersion},
      {CU_FUNC_ATTRIBUTE_BINARY_VERSION, "BINARY_VERSION", &attributes.binaryVersion},
  };
  auto function = static_cast<CUfunction>(handle_);
  for (const Query& query : queries) {
    CUresult result = api.cuFuncGetAttribute(query.field, query.attribute, function);
    if (result != CUDA_SUCCESS) {
      return cudaCallError(api, result, "cuFuncGetAttribute(" + std::string(query.name) + ") of kernel " + name_);
    }
  }
  return attributes;
}

support::Expected<int> Function::residentBlocksPerMultiprocessor(int blockThreads,
                                                                 unsigned dynamicSharedBytes) const {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const DriverApi& api = **apiOr;
  if (!valid()) return runtimeError("occupancy of an invalid (null) kernel handle");
  if (blockThreads < 1)
    return runtimeError("occupancy of kernel " + name_ + ": " + std::to_string(blockThreads) +
                        " threads per block (must be at least 1)");
  auto function = static_cast<CUfunction>(handle_);
  if (support::Status s = optInDynamicShared(api, function, name_, dynamicSharedBytes); !s) return s;
  int blocks = 0;
  CUresult result = api.cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, function, blockThreads,
                                                                    dynamicSharedBytes);
  if (result != CUDA_SUCCESS)
    return cudaCallError(api, result, "cuOccupancyMaxActiveBlocksPerMultiprocessor of kernel " + name_);
  return blocks;
}

support::Status Function::launch(const LaunchConfig& config, void** params) const {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const DriverApi& api = **apiOr;
  if (!valid()) return runtimeError("launch of an invalid (null) kernel handle");
  const Dim3& grid = config.grid;
  const Dim3& block = config.block;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || block.x == 0 || block.y == 0 || block.z == 0) {
    return runtimeError("launch of kernel " + name_ + ": grid (" + std::to_string(grid.x) + "," +
                        std::to_string(grid.y) + "," + std::to_string(grid.z) + ") and block (" +
                        std::to_string(block.x) + "," + std::to_string(block.y) + "," + std::to_string(block.z) +
                        ") must have no zero dimension");
  }
  // CUDA's limits on every device attnjit targets: x < 2^31, y and z < 2^16. The driver
  // would say only "invalid argument".
  if (grid.x > 0x7FFFFFFFu || grid.y > 65535 || grid.z > 65535) {
    return runtimeError("launch of kernel " + name_ + ": grid (" + std::to_string(grid.x) + "," +
                        std::to_string(grid.y) + "," + std::to_string(grid.z) +
                        ") is beyond CUDA's limits (x at most 2^31 - 1, y and z at most 65535)");
  }
  auto function = static_cast<CUfunction>(handle_);
  if (support::Status s = optInDynamicShared(api, function, name_, config.dynamicSharedBytes); !s) return s;
  // The maps' bytes are copied by the launch call (as every argument is), so
  // these locals may go once it returns, captured into a CUDA graph or not.
  std::vector<TensorMap> maps;
  std::vector<void*> withMaps;
  if (tensorMaps_ && !tensorMaps_->maps.empty()) {
    if (params == nullptr) return runtimeError("launch of kernel " + name_ + ": no arguments for its tensor maps");
    maps.reserve(tensorMaps_->maps.size());
    withMaps.assign(params, params + tensorMaps_->first);
    for (std::size_t i = 0; i < tensorMaps_->maps.size(); ++i) {
      auto encoded = encodeTensorMap(tensorMapShapeFor(tensorMaps_->maps[i], params));
      if (!encoded)
        return runtimeError("launch of kernel " + name_ + ": its TMA copies need a tensor map the arguments do not "
                            "give: " + encoded.diagnostic().message);
      maps.push_back(*encoded);
    }
    for (TensorMap& map : maps) withMaps.push_back(&map);
    params = withMaps.data();
  }
  if (config.overlapPriorGrid && api.cuLaunchKernelEx != nullptr && programmaticLaunchEnabled()) {
    CUlaunchAttribute overlap{};
    overlap.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    overlap.value.programmaticStreamSerializationAllowed = 1;
    const CUlaunchConfig launchConfig{grid.x,  grid.y,  grid.z, block.x, block.y, block.z, config.dynamicSharedBytes,
                                      static_cast<CUstream>(config.stream), &overlap, 1};
    CUresult result = api.cuLaunchKernelEx(&launchConfig, function, params, nullptr);
    if (result != CUDA_SUCCESS) return cudaCallError(api, result, "cuLaunchKernelEx of kernel " + name_);
    return support::Status::ok();
  }
  CUresult result = api.cuLaunchKernel(function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                       config.dynamicSharedBytes, static_cast<CUstream>(config.stream), params,
                                       nullptr);
  if (result != CUDA_SUCCESS) return cudaCallError(api, result, "cuLaunchKernel of kernel " + name_);
  return support::Status::ok();
}

bool programmaticLaunchEnabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("ATTNJIT_PROGRAMMATIC_LAUNCH");
    return value == nullptr || std::string_view(value) != "0";
  }();
  return enabled;
}

support::Expected<Module> Module::load(std::span<const std::uint8_t> image, std::string_view ptxName) {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const DriverApi& api = **apiOr;
  if (image.empty()) return runtimeError("cannot load an empty module image");
  CUmodule module = nullptr;
  CUresult result = api.cuModuleLoadData(&module, image.data());
  if (result != CUDA_SUCCESS && isPtxModuleImage(image)) {
    const std::string_view ptx(reinterpret_cast<const char*>(image.data()), image.size() - 1);
    if (auto linked = linkPtx(ptx, LinkOptions{}, ptxName); !linked) return linked.status();
  }
  if (result != CUDA_SUCCESS) return cudaCallError(api, result, "cuModuleLoadData");
  return Module(module);
}

Module& Module::operator=(Module&& other) noexcept {
  if (this != &other) {
    reset();
    handle_ = other.handle_;
    other.handle_ = nullptr;
  }
  return *this;
}

Module::~Module() { reset(); }

void Module::reset() {
  if (handle_ == nullptr) return;
  // A module only exists when the driver loaded, so the table is there.
  if (auto apiOr = driverApi()) (*apiOr)->cuModuleUnload(static_cast<CUmodule>(handle_));
  handle_ = nullptr;
}

support::Expected<Function> Module::function(const std::string& name) const {
  auto apiOr = driverApi();
  if (!apiOr) return apiOr.status();
  const DriverApi& api = **apiOr;
  if (handle_ == nullptr) return runtimeError("kernel lookup '" + name + "' in a module that is not loaded");
  CUfunction function = nullptr;
  CUresult result = api.cuModuleGetFunction(&function, static_cast<CUmodule>(handle_), name.c_str());
  if (result != CUDA_SUCCESS)
    return cudaCallError(api, result, "looking up kernel '" + name + "' (cuModuleGetFunction)");
  if (support::Status s = allowNonPortableCluster(api, function, name); !s) return s;
  return Function(function, name);
}

}  // namespace attnjit::runtime
