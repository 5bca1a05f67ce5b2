#include "runtime/BundleManifest.h"

#include <cmath>
#include <set>

#include "runtime/FlatJson.h"
#include "runtime/TensorMap.h"

namespace attnjit::runtime {
namespace {

using Kind = JsonValue::Kind;

// Fields are read through this: a failure names the field path ("kernels[1].images[0].arch")
// and points at the value (or at the object that lacks it).
class FieldReader {
 public:
  explicit FieldReader(std::string sourceName) : sourceName_(std::move(sourceName)) {}

  support::Status fail(const JsonValue& where, const std::string& path, const std::string& message) const {
    support::Location location = where.location;
    if (location.file.empty()) location.file = sourceName_;
    return support::Status::error(location, (path.empty() ? "manifest" : path) + ": " + message);
  }

  support::Expected<const JsonValue*> member(const JsonValue& object, const std::string& path, std::string_view key,
                                        Kind kind) const {
    const JsonValue* value = object.find(key);
    const std::string field = join(path, key);
    if (value == nullptr) return fail(object, field, "missing field");
    if (value->kind != kind) {
      return fail(*value, field,
                  std::string("expected ") + JsonValue::kindName(kind) + ", found " + JsonValue::kindName(value->kind));
    }
    return value;
  }

  // A member that may be null or absent (nullptr then).
  support::Expected<const JsonValue*> optionalMember(const JsonValue& object, const std::string& path,
                                                     std::string_view key, Kind kind) const {
    const JsonValue* value = object.find(key);
    if (value == nullptr || value->kind == Kind::Null) return static_cast<const JsonValue*>(nullptr);
    return member(object, path, key, kind);
  }

  support::Expected<std::string> string(const JsonValue& object, const std::string& path, std::string_view key) const {
    auto value = member(object, path, key, Kind::String);
    if (!value) return value.status();
    return (*value)->string;
  }

  support::Expected<std::int64_t> integer(const JsonValue& object, const std::string& path, std::string_view key,
                                     std::int64_t min, std::int64_t max) const {
    auto value = member(object, path, key, Kind::Number);
    if (!value) return value.status();
    return checkedInteger(**value, join(path, key), min, max);
  }

  support::Expected<std::int64_t> checkedInteger(const JsonValue& value, const std::string& field, std::int64_t min,
                                            std::int64_t max) const {
    if (!value.isInteger) return fail(value, field, "expected an integer");
    if (value.integer < min || value.integer > max) {
      return fail(value, field,
                  std::to_string(value.integer) + " is out of range [" + std::to_string(min) + ", " +
                      std::to_string(max) + "]");
    }
    return value.integer;
  }

  static std::string join(const std::string& path, std::string_view key) {
    return path.empty() ? std::string(key) : path + "." + std::string(key);
  }
  static std::string index(const std::string& path, std::size_t i) { return path + "[" + std::to_string(i) + "]"; }

 private:
  std::string sourceName_;
};

constexpr std::int64_t kMaxThreadsPerBlock = 1024;
constexpr std::int64_t kMaxSharedBytes = 1 << 30;
constexpr std::int64_t kMaxAlignment = 1 << 12;
constexpr std::int64_t kMaxSmallCount = 1 << 24;

bool isLowerHexSha256(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool isScalarDtype(std::string_view dtype, BundleParameterKind kind) {
  static const std::set<std::string_view> integers = {"i1", "i8", "i16", "i32", "i64"};
  static const std::set<std::string_view> floats = {"f32", "f64"};
  return kind == BundleParameterKind::Integer ? integers.count(dtype) != 0 : floats.count(dtype) != 0;
}

bool isElementDtype(std::string_view dtype) {
  static const std::set<std::string_view> elements = {"i1",  "i4",  "i8",  "i16",    "i32",   "i64",
                                                      "f16", "bf16", "f32", "f64", "f8e4m3", "f8e5m2"};
  return elements.count(dtype) != 0;
}

support::Expected<BundleFile> readFile(const FieldReader& reader, const JsonValue& object, const std::string& path) {
  BundleFile file;
  auto name = reader.string(object, path, "file");
  if (!name) return name.status();
  if (!isSafeBundlePath(*name)) {
    return reader.fail(*object.find("file"), FieldReader::join(path, "file"),
                       "'" + *name +
                           "' is not a path inside the bundle (relative, '/'-separated, no '.' or '..', "
                           "letters, digits, '.', '_' and '-' only)");
  }
  auto sha = reader.string(object, path, "sha256");
  if (!sha) return sha.status();
  if (!isLowerHexSha256(*sha)) {
    return reader.fail(*object.find("sha256"), FieldReader::join(path, "sha256"),
                       "expected 64 lowercase hexadecimal digits");
  }
  file.path = std::move(*name);
  file.sha256 = std::move(*sha);
  return file;
}

support::Expected<BundleImage> readImage(const FieldReader& reader, const JsonValue& object, const std::string& path) {
  BundleImage image;
  auto arch = reader.string(object, path, "arch");
  if (!arch) return arch.status();
  auto parsedArch = parseBundleArch(*arch);
  if (!parsedArch) {
    return reader.fail(*object.find("arch"), FieldReader::join(path, "arch"),
                       "'" + *arch + "' is not an architecture (sm_80, sm_90a, ...)");
  }
  image.arch = std::move(*arch);
  image.smVersion = parsedArch->smVersion;
  image.archSpecific = parsedArch->archSpecific;
  auto ptxVersion = reader.integer(object, path, "ptx_version", 10, 999);
  if (!ptxVersion) return ptxVersion.status();
  image.ptxVersion = static_cast<int>(*ptxVersion);
  auto threads = reader.integer(object, path, "threads_per_block", 1, kMaxThreadsPerBlock);
  if (!threads) return threads.status();
  image.threadsPerBlock = static_cast<int>(*threads);
  auto shared = reader.integer(object, path, "dynamic_shared_bytes", 0, kMaxSharedBytes);
  if (!shared) return shared.status();
  image.dynamicSharedBytes = static_cast<int>(*shared);

  auto ptx = reader.member(object, path, "ptx", Kind::Object);
  if (!ptx) return ptx.status();
  auto ptxFile = readFile(reader, **ptx, FieldReader::join(path, "ptx"));
  if (!ptxFile) return ptxFile.status();
  image.ptx = std::move(*ptxFile);

  auto cubin = reader.optionalMember(object, path, "cubin", Kind::Object);
  if (!cubin) return cubin.status();
  if (*cubin != nullptr) {
    auto cubinFile = readFile(reader, **cubin, FieldReader::join(path, "cubin"));
    if (!cubinFile) return cubinFile.status();
    image.cubin = std::move(*cubinFile);
  }

  auto ptxas = reader.optionalMember(object, path, "ptxas", Kind::Object);
  if (!ptxas) return ptxas.status();
  if (*ptxas != nullptr) {
    const std::string reportPath = FieldReader::join(path, "ptxas");
    BundlePtxasReport report;
    const std::pair<const char*, int*> fields[] = {{"registers", &report.registers},
                                                   {"spill_store_bytes", &report.spillStoreBytes},
                                                   {"spill_load_bytes", &report.spillLoadBytes},
                                                   {"stack_frame_bytes", &report.stackFrameBytes}};
    for (const auto& [key, field] : fields) {
      auto value = reader.integer(**ptxas, reportPath, key, 0, kMaxSmallCount);
      if (!value) return value.status();
      *field = static_cast<int>(*value);
    }
    image.ptxas = report;
  }

  auto key = reader.string(object, path, "jit_cache_key");
  if (!key) return key.status();
  if (key->empty())
    return reader.fail(*object.find("jit_cache_key"), FieldReader::join(path, "jit_cache_key"), "empty");
  image.jitCacheKey = std::move(*key);

  auto maps = reader.optionalMember(object, path, "tensor_maps", Kind::String);
  if (!maps) return maps.status();
  if (*maps != nullptr) {
    if (auto parsed = parseTensorMapRecipes((*maps)->string); !parsed)
      return reader.fail(**maps, FieldReader::join(path, "tensor_maps"), parsed.diagnostic().message);
    image.tensorMaps = (*maps)->string;
  }
  return image;
}

support::Expected<BundleParameter> readParameter(const FieldReader& reader, const JsonValue& object,
                                            const std::string& path) {
  BundleParameter parameter;
  auto name = reader.string(object, path, "name");
  if (!name) return name.status();
  if (!isCIdentifier(*name)) {
    return reader.fail(*object.find("name"), FieldReader::join(path, "name"), "'" + *name + "' is not a C identifier");
  }
  parameter.name = std::move(*name);
  auto kind = reader.string(object, path, "kind");
  if (!kind) return kind.status();
  if (*kind == "pointer") {
    parameter.kind = BundleParameterKind::Pointer;
  } else if (*kind == "integer") {
    parameter.kind = BundleParameterKind::Integer;
  } else if (*kind == "float") {
    parameter.kind = BundleParameterKind::Float;
  } else {
    return reader.fail(*object.find("kind"), FieldReader::join(path, "kind"),
                       "'" + *kind + "' is not one of pointer, integer, float");
  }
  auto dtype = reader.string(object, path, "dtype");
  if (!dtype) return dtype.status();
  bool dtypeFits = parameter.kind == BundleParameterKind::Pointer ? isElementDtype(*dtype)
                                                                  : isScalarDtype(*dtype, parameter.kind);
  if (!dtypeFits) {
    return reader.fail(*object.find("dtype"), FieldReader::join(path, "dtype"),
                       "'" + *dtype + "' is not a dtype of a " + *kind + " parameter");
  }
  parameter.dtype = std::move(*dtype);

  const JsonValue* align = object.find("align");
  if (align != nullptr) {
    const std::string field = FieldReader::join(path, "align");
    if (parameter.kind != BundleParameterKind::Pointer)
      return reader.fail(*align, field, "only pointers have an alignment");
    auto value = reader.integer(object, path, "align", 1, kMaxAlignment);
    if (!value) return value.status();
    if ((*value & (*value - 1)) != 0) return reader.fail(*align, field, "must be a power of two");
    parameter.align = *value;
  }
  const JsonValue* divisibility = object.find("divisibility");
  if (divisibility != nullptr) {
    const std::string field = FieldReader::join(path, "divisibility");
    if (parameter.kind != BundleParameterKind::Integer) {
      return reader.fail(*divisibility, field, "only integers have a divisibility");
    }
    auto value = reader.integer(object, path, "divisibility", 1, kMaxSmallCount);
    if (!value) return value.status();
    parameter.divisibility = *value;
  }
  return parameter;
}

support::Expected<BundleKernel> readKernel(const FieldReader& reader, const JsonValue& object,
                                           const std::string& path) {
  BundleKernel kernel;
  const std::pair<const char*, std::string*> texts[] = {{"name", &kernel.name},     {"family", &kernel.family},
                                                        {"spec", &kernel.spec},     {"params", &kernel.params},
                                                        {"grid", &kernel.grid}};
  for (const auto& [key, field] : texts) {
    auto value = reader.string(object, path, key);
    if (!value) return value.status();
    *field = std::move(*value);
  }
  if (!isCIdentifier(kernel.name)) {
    return reader.fail(*object.find("name"), FieldReader::join(path, "name"),
                       "'" + kernel.name + "' is not a C identifier (kernel names are PTX entries and C names)");
  }
  auto stage2 = reader.optionalMember(object, path, "stage2", Kind::String);
  if (!stage2) return stage2.status();
  if (*stage2 != nullptr) {
    const std::string field = FieldReader::join(path, "stage2");
    if (!isCIdentifier((*stage2)->string)) {
      return reader.fail(**stage2, field, "'" + (*stage2)->string + "' is not a kernel name (a C identifier)");
    }
    if ((*stage2)->string == kernel.name) return reader.fail(**stage2, field, "a kernel cannot be its own stage 2");
    kernel.stage2 = (*stage2)->string;
  }

  auto constexprs = reader.member(object, path, "constexprs", Kind::Object);
  if (!constexprs) return constexprs.status();
  for (const auto& [name, value] : (*constexprs)->object) {
    const std::string field = FieldReader::join(FieldReader::join(path, "constexprs"), name);
    if (value.kind != Kind::Number) return reader.fail(value, field, "expected a number");
    kernel.constexprs.emplace_back(name, value.number);
  }

  auto parameters = reader.member(object, path, "parameters", Kind::Array);
  if (!parameters) return parameters.status();
  std::set<std::string> parameterNames;
  for (std::size_t i = 0; i < (*parameters)->array.size(); ++i) {
    const JsonValue& element = (*parameters)->array[i];
    const std::string elementPath = FieldReader::index(FieldReader::join(path, "parameters"), i);
    if (element.kind != Kind::Object) return reader.fail(element, elementPath, "expected an object");
    auto parameter = readParameter(reader, element, elementPath);
    if (!parameter) return parameter.status();
    if (!parameterNames.insert(parameter->name).second) {
      return reader.fail(element, elementPath, "parameter name '" + parameter->name + "' repeats");
    }
    kernel.parameters.push_back(std::move(*parameter));
  }

  auto images = reader.member(object, path, "images", Kind::Array);
  if (!images) return images.status();
  if ((*images)->array.empty())
    return reader.fail(**images, FieldReader::join(path, "images"), "a kernel needs an image");
  std::set<std::string> arches;
  for (std::size_t i = 0; i < (*images)->array.size(); ++i) {
    const JsonValue& element = (*images)->array[i];
    const std::string elementPath = FieldReader::index(FieldReader::join(path, "images"), i);
    if (element.kind != Kind::Object) return reader.fail(element, elementPath, "expected an object");
    auto image = readImage(reader, element, elementPath);
    if (!image) return image.status();
    if (!arches.insert(image->arch).second) {
      return reader.fail(element, elementPath, "a second image for " + image->arch);
    }
    kernel.images.push_back(std::move(*image));
  }
  return kernel;
}

JsonValue fileJson(const BundleFile& file) {
  JsonValue value = JsonValue::makeObject();
  value.add("file", JsonValue::makeString(file.path));
  value.add("sha256", JsonValue::makeString(file.sha256));
  return value;
}

JsonValue numberJson(double number) {
  // Integers (every constexpr so far) print as integers.
  if (std::nearbyint(number) == number && std::fabs(number) < 9.0e15) {
    return JsonValue::makeInteger(static_cast<std::int64_t>(number));
  }
  return JsonValue::makeNumber(number);
}

JsonValue imageJson(const BundleImage& image) {
  JsonValue value = JsonValue::makeObject();
  value.add("arch", JsonValue::makeString(image.arch));
  value.add("ptx_version", JsonValue::makeInteger(image.ptxVersion));
  value.add("threads_per_block", JsonValue::makeInteger(image.threadsPerBlock));
  value.add("dynamic_shared_bytes", JsonValue::makeInteger(image.dynamicSharedBytes));
  value.add("ptx", fileJson(image.ptx));
  value.add("cubin", image.cubin ? fileJson(*image.cubin) : JsonValue());
  if (image.ptxas) {
    JsonValue report = JsonValue::makeObject();
    report.add("registers", JsonValue::makeInteger(image.ptxas->registers));
    report.add("spill_store_bytes", JsonValue::makeInteger(image.ptxas->spillStoreBytes));
    report.add("spill_load_bytes", JsonValue::makeInteger(image.ptxas->spillLoadBytes));
    report.add("stack_frame_bytes", JsonValue::makeInteger(image.ptxas->stackFrameBytes));
    value.add("ptxas", std::move(report));
  } else {
    value.add("ptxas", JsonValue());
  }
  value.add("jit_cache_key", JsonValue::makeString(image.jitCacheKey));
  if (!image.tensorMaps.empty()) value.add("tensor_maps", JsonValue::makeString(image.tensorMaps));
  return value;
}

JsonValue kernelJson(const BundleKernel& kernel) {
  JsonValue value = JsonValue::makeObject();
  value.add("name", JsonValue::makeString(kernel.name));
  value.add("family", JsonValue::makeString(kernel.family));
  value.add("spec", JsonValue::makeString(kernel.spec));
  value.add("params", JsonValue::makeString(kernel.params));
  value.add("grid", JsonValue::makeString(kernel.grid));
  if (!kernel.stage2.empty()) value.add("stage2", JsonValue::makeString(kernel.stage2));
  JsonValue constexprs = JsonValue::makeObject();
  for (const auto& [name, number] : kernel.constexprs) constexprs.add(name, numberJson(number));
  value.add("constexprs", std::move(constexprs));
  JsonValue parameters = JsonValue::makeArray();
  for (const BundleParameter& parameter : kernel.parameters) {
    JsonValue entry = JsonValue::makeObject();
    entry.add("name", JsonValue::makeString(parameter.name));
    entry.add("kind", JsonValue::makeString(bundleParameterKindName(parameter.kind)));
    entry.add("dtype", JsonValue::makeString(parameter.dtype));
    if (parameter.align > 0) entry.add("align", JsonValue::makeInteger(parameter.align));
    if (parameter.divisibility > 0) entry.add("divisibility", JsonValue::makeInteger(parameter.divisibility));
    parameters.array.push_back(std::move(entry));
  }
  value.add("parameters", std::move(parameters));
  JsonValue images = JsonValue::makeArray();
  for (const BundleImage& image : kernel.images) images.array.push_back(imageJson(image));
  value.add("images", std::move(images));
  return value;
}

}  // namespace

const BundleKernel* BundleManifest::findKernel(std::string_view name) const {
  for (const BundleKernel& kernel : kernels) {
    if (kernel.name == name) return &kernel;
  }
  return nullptr;
}

support::Expected<BundleManifest> parseBundleManifest(std::string_view text, const std::string& sourceName) {
  auto document = parseJson(text, sourceName);
  if (!document) return document.status();
  FieldReader reader(sourceName);
  if (document->kind != Kind::Object) return reader.fail(*document, "", "expected a JSON object");
  BundleManifest manifest;
  auto format = reader.string(*document, "", "format");
  if (!format) return format.status();
  if (*format != BundleManifest::kFormatName) {
    return reader.fail(*document->find("format"), "format",
                       "'" + *format + "' is not \"" + BundleManifest::kFormatName + "\"");
  }
  auto version = reader.integer(*document, "", "format_version", 0, 1 << 20);
  if (!version) return version.status();
  if (*version < BundleManifest::kOldestFormatVersion || *version > BundleManifest::kFormatVersion) {
    return reader.fail(*document->find("format_version"), "format_version",
                       "version " + std::to_string(*version) + " is not supported (this runtime reads versions " +
                           std::to_string(BundleManifest::kOldestFormatVersion) + " to " +
                           std::to_string(BundleManifest::kFormatVersion) + "); rebuild the bundle with this attnjit");
  }
  manifest.formatVersion = static_cast<int>(*version);
  auto attnjitVersion = reader.string(*document, "", "attnjit_version");
  if (!attnjitVersion) return attnjitVersion.status();
  manifest.attnjitVersion = std::move(*attnjitVersion);
  auto llvmVersion = reader.string(*document, "", "llvm_version");
  if (!llvmVersion) return llvmVersion.status();
  manifest.llvmVersion = std::move(*llvmVersion);

  auto kernels = reader.member(*document, "", "kernels", Kind::Array);
  if (!kernels) return kernels.status();
  std::set<std::string> names;
  for (std::size_t i = 0; i < (*kernels)->array.size(); ++i) {
    const JsonValue& element = (*kernels)->array[i];
    const std::string path = FieldReader::index("kernels", i);
    if (element.kind != Kind::Object) return reader.fail(element, path, "expected an object");
    auto kernel = readKernel(reader, element, path);
    if (!kernel) return kernel.status();
    if (!names.insert(kernel->name).second) {
      return reader.fail(element, FieldReader::join(path, "name"), "kernel name '" + kernel->name + "' repeats");
    }
    manifest.kernels.push_back(std::move(*kernel));
  }
  // A stage 2 is launched by name: it must be in the bundle (after every kernel is read, so
  // that it may come later in the list).
  for (std::size_t i = 0; i < manifest.kernels.size(); ++i) {
    const BundleKernel& kernel = manifest.kernels[i];
    if (kernel.stage2.empty() || manifest.findKernel(kernel.stage2) != nullptr) continue;
    const JsonValue& element = (*kernels)->array[i];
    return reader.fail(*element.find("stage2"), FieldReader::join(FieldReader::index("kernels", i), "stage2"),
                       "names kernel '" + kernel.stage2 + "', which is not in the bundle");
  }
  return manifest;
}

std::string writeBundleManifest(const BundleManifest& manifest) {
  JsonValue document = JsonValue::makeObject();
  document.add("format", JsonValue::makeString(BundleManifest::kFormatName));
  document.add("format_version", JsonValue::makeInteger(manifest.formatVersion));
  document.add("attnjit_version", JsonValue::makeString(manifest.attnjitVersion));
  document.add("llvm_version", JsonValue::makeString(manifest.llvmVersion));
  JsonValue kernels = JsonValue::makeArray();
  for (const BundleKernel& kernel : manifest.kernels) kernels.array.push_back(kernelJson(kernel));
  document.add("kernels", std::move(kernels));
  return writeJson(document);
}

std::optional<BundleArch> parseBundleArch(std::string_view arch) {
  if (arch.substr(0, 3) != "sm_") return std::nullopt;
  std::string_view rest = arch.substr(3);
  BundleArch parsed;
  if (!rest.empty() && rest.back() == 'a') {
    parsed.archSpecific = true;
    rest.remove_suffix(1);
  }
  if (rest.empty() || rest.size() > 4) return std::nullopt;
  for (char c : rest) {
    if (c < '0' || c > '9') return std::nullopt;
    parsed.smVersion = parsed.smVersion * 10 + (c - '0');
  }
  if (rest.front() == '0') return std::nullopt;
  return parsed;
}

bool isSafeBundlePath(std::string_view path) {
  if (path.empty() || path.size() > 4096) return false;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    std::string_view component = path.substr(start, end - start);
    if (component.empty() || component == "." || component == "..") return false;
    for (char c : component) {
      bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                     c == '_' || c == '-';
      if (!allowed) return false;
    }
    start = end + 1;
  }
  return true;
}

bool isCIdentifier(std::string_view name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

const char* bundleParameterKindName(BundleParameterKind kind) {
  switch (kind) {
    case BundleParameterKind::Pointer: return "pointer";
    case BundleParameterKind::Integer: return "integer";
    case BundleParameterKind::Float: return "float";
  }
  return "pointer";
}

}  // namespace attnjit::runtime
