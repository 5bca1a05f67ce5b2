// Ahead-of-time bundles: `attnjit aot` (run as a process), the manifest format, the runtime's
// bundle loader (integrity checks, argument checks, image choice, JIT-cache seeding), the
// generated C header, and examples/aot. The [gpu] case launches from a bundle on the GPU and
// compares with the JIT's launch of the same variant.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "codegen/Target.h"
#include "compiler/driver/Jit.h"
#include "compiler/spec/VariantKernel.h"
#include "compiler/spec/Spec.h"
#include "compiler/kernels/MlaDecode.h"
#include "compiler/kernels/ReduceSegments.h"
#include "runtime/Bundle.h"
#include "runtime/BundleManifest.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/FlatJson.h"
#include "runtime/Sha256.h"
#include "runtime/Stream.h"
#include "runtime/TensorMap.h"
#include "runtime/attnjit_bundle.h"
#include "test_paths.h"
#include "test_tools.h"

namespace fs = std::filesystem;
using namespace attnjit;
using runtime::BundleArgument;
using runtime::BundleManifest;

namespace {

const std::string kExampleSpec = tests::sourceDir() + "/examples/aot/merge_attn_states_f32.yaml";
const std::string kExampleKernel = "merge_attn_states_f32_h4_d64_lse";

// A small unified attention spec (one variant) next to the shipped merge spec.
const char* kUnifiedSpec = R"(family: unified_attention
target: sm_90a
params:
  dtype: bf16
  num_query_heads: 4
  num_kv_heads: 1
  head_size: 64
  block_size: 16
  causal: true
run:
  query_lens: [1, 3]
  context_lens: [7, 0]
  seed: 1
)";

// A scratch directory for this process, removed at exit.
const fs::path& scratchRoot() {
  struct Root {
    fs::path path = fs::temp_directory_path() / ("attnjit_test_aot_" + std::to_string(getpid()));
    Root() { fs::create_directories(path); }
    ~Root() {
      std::error_code error;
      fs::remove_all(path, error);
    }
  };
  static Root root;
  return root.path;
}

std::string shellQuote(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct AotRun {
  int exitCode = -1;
  std::string output;
};

AotRun runAot(const std::string& arguments) {
  AotRun run;
  run.output = tests::runShell(shellQuote(tests::cliPath()) + " aot " + arguments, &run.exitCode);
  return run;
}

// Bundles built once per process (each costs seconds of compiling).
const fs::path& smallBundle() {
  static const fs::path dir = [] {
    fs::path out = scratchRoot() / "small";
    AotRun run = runAot(shellQuote(kExampleSpec) + " --arch sm_80,sm_90a -o " + shellQuote(out.string()));
    INFO(run.output);
    REQUIRE(run.exitCode == 0);
    return out;
  }();
  return dir;
}

const fs::path& shippedSpecsBundle() {
  static const fs::path dir = [] {
    fs::path unified = scratchRoot() / "unified_small.yaml";
    std::ofstream(unified) << kUnifiedSpec;
    fs::path out = scratchRoot() / "shipped";
    AotRun run = runAot(shellQuote(tests::sourceDir() + "/specs/merge_attn_states.yaml") + " " +
                        shellQuote(unified.string()) + " --arch sm_80,sm_90a --jobs 2 -o " + shellQuote(out.string()));
    INFO(run.output);
    REQUIRE(run.exitCode == 0);
    return out;
  }();
  return dir;
}

BundleManifest readManifest(const fs::path& bundle) {
  auto manifest = runtime::parseBundleManifest(tests::readFile(bundle / "manifest.json"), "manifest.json");
  INFO((manifest ? "" : manifest.diagnostic().str()));
  REQUIRE(manifest);
  return *manifest;
}

// A copy of the small bundle, to damage.
fs::path copyOfSmallBundle(const std::string& name) {
  fs::path copy = scratchRoot() / name;
  fs::remove_all(copy);
  fs::copy(smallBundle(), copy, fs::copy_options::recursive);
  return copy;
}

void replaceOnce(std::string& text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
}

std::string openError(const fs::path& bundle) {
  auto opened = runtime::Bundle::open(bundle);
  REQUIRE_FALSE(opened);
  return opened.diagnostic().str();
}

// Arguments for the example kernel: placeholder addresses (never dereferenced) and the strides
// of [37 tokens][4 heads][64] outputs.
std::vector<BundleArgument> exampleArguments() {
  std::vector<BundleArgument> arguments;
  for (int i = 1; i <= 6; ++i)
    arguments.push_back(BundleArgument::fromDeviceAddress(0x7f0000000000ull + i * 0x10000ull));
  arguments.push_back(BundleArgument::fromInteger(37));
  for (int i = 0; i < 3; ++i) {
    arguments.push_back(BundleArgument::fromInteger(256));
    arguments.push_back(BundleArgument::fromInteger(64));
  }
  return arguments;
}

runtime::BundleImage syntheticImage(const std::string& arch, bool cubin) {
  runtime::BundleImage image;
  image.arch = arch;
  auto parsed = runtime::parseBundleArch(arch);
  REQUIRE(parsed);
  image.smVersion = parsed->smVersion;
  image.archSpecific = parsed->archSpecific;
  image.ptxVersion = 90;
  image.threadsPerBlock = 128;
  image.ptx = {arch + "/k.ptx", std::string(64, 'a')};
  if (cubin) image.cubin = runtime::BundleFile{arch + "/k.cubin", std::string(64, 'b')};
  image.jitCacheKey = "key " + arch;
  return image;
}

class FixedToolchainLoader final : public runtime::KernelLoader {
 public:
  runtime::Expected<runtime::ContextHandle> currentContext() override {
    return reinterpret_cast<runtime::ContextHandle>(0x1000);
  }
  runtime::Expected<std::vector<std::uint8_t>> linkPtx(const std::string&, const std::string&) override {
    return runtime::Status::error({}, "no linking in this test");
  }
  runtime::Expected<LoadedModule> load(const std::vector<std::uint8_t>&, const std::string&) override {
    return runtime::Status::error({}, "no loading in this test");
  }
  std::string toolchainIdentity() override { return "test-toolchain 1"; }
};

}  // namespace

TEST_CASE("aot: general JSON parses, locates errors and round-trips", "[aot]") {
  auto value = runtime::parseJson(R"({"a": [1, -2.5e3, true, null, "x\u00e9"], "b": {}})", "t.json");
  REQUIRE(value);
  REQUIRE(value->find("a") != nullptr);
  const auto& array = value->find("a")->array;
  REQUIRE(array.size() == 5);
  CHECK(array[0].isInteger);
  CHECK(array[0].integer == 1);
  CHECK_FALSE(array[1].isInteger);
  CHECK(array[1].number == -2500.0);
  CHECK(array[2].boolean);
  CHECK(array[3].kind == runtime::JsonValue::Kind::Null);
  CHECK(array[4].string == "x\xc3\xa9");
  auto again = runtime::parseJson(runtime::writeJson(*value), "again.json");
  REQUIRE(again);
  CHECK(runtime::writeJson(*again) == runtime::writeJson(*value));

  // Non-integers stay non-integers through writing: -0E4 and 5.0 must not come back as the
  // integers 0 and 5 (the first would also lose its sign).
  for (const char* literal : {"-0E4", "5.0", "-0.0", "1e300"}) {
    auto number = runtime::parseJson(literal, "n.json");
    REQUIRE(number);
    const std::string written = runtime::writeJson(*number);
    auto reread = runtime::parseJson(written, "n2.json");
    REQUIRE(reread);
    CHECK_FALSE(reread->isInteger);
    CHECK(std::signbit(reread->number) == std::signbit(number->number));
    CHECK(runtime::writeJson(*reread) == written);
  }

  auto bad = runtime::parseJson("{\n  \"a\": [1,]\n}", "bad.json");
  REQUIRE_FALSE(bad);
  CHECK(bad.diagnostic().str().find("bad.json:2:") == 0);
  CHECK_FALSE(runtime::parseJson(R"({"a": 1, "a": 2})", "dup.json"));
  CHECK_FALSE(runtime::parseJson("01", "zero.json"));
  CHECK_FALSE(runtime::parseJson(std::string(100, '['), "deep.json"));
  CHECK_FALSE(runtime::parseJson("{} {}", "two.json"));
}

TEST_CASE("aot: over the merge spec and a unified attention spec for sm_80 and sm_90a", "[aot]") {
  const fs::path& bundle = shippedSpecsBundle();
  const BundleManifest manifest = readManifest(bundle);
  CHECK(manifest.formatVersion == BundleManifest::kOldestFormatVersion);  // no TMA kernel
  CHECK(manifest.attnjitVersion == "0.1.0");
  // 3 dtypes x 2 head counts x 4 head sizes, plus the unified attention variant.
  REQUIRE(manifest.kernels.size() == 25);
  const bool ptxas = tests::havePtxas();
  std::set<std::string> families;
  for (const auto& kernel : manifest.kernels) {
    INFO(kernel.name);
    families.insert(kernel.family);
    CHECK_FALSE(kernel.grid.empty());
    CHECK_FALSE(kernel.parameters.empty());
    REQUIRE(kernel.images.size() == 2);
    CHECK(kernel.images[0].arch == "sm_80");
    CHECK(kernel.images[1].arch == "sm_90a");
    for (const auto& image : kernel.images) {
      CHECK(fs::is_regular_file(bundle / image.ptx.path));
      CHECK(runtime::Sha256::hexDigest(tests::readFile(bundle / image.ptx.path)) == image.ptx.sha256);
      CHECK(image.threadsPerBlock > 0);
      // Cubins and registers exactly where ptxas was on the PATH.
      CHECK(image.cubin.has_value() == ptxas);
      CHECK(image.ptxas.has_value() == ptxas);
      if (image.cubin) {
        const std::string cubin = tests::readFile(bundle / image.cubin->path);
        CHECK(cubin.substr(0, 4) == "\x7f" "ELF");
        CHECK(runtime::Sha256::hexDigest(cubin) == image.cubin->sha256);
        CHECK(image.ptxas->registers > 0);
      }
    }
  }
  CHECK(families == std::set<std::string>{"merge_attn_states", "unified_attention"});
  const auto* unified = manifest.findKernel("unified_attention_bf16_h4kv1_d64_bs16_causal");
  REQUIRE(unified != nullptr);
  CHECK(unified->grid.find("grid = (num_seqs + num_tokens / BLOCK_Q, Hkv)") != std::string::npos);
  CHECK(unified->parameters[0].name == "out");
  CHECK(unified->parameters[0].align == 16);

  auto opened = runtime::Bundle::open(bundle);
  INFO((opened ? "" : opened.diagnostic().str()));
  CHECK(opened);
}

TEST_CASE("aot: images carry the JIT's cache key for the same code", "[aot]") {
  const BundleManifest manifest = readManifest(smallBundle());
  auto spec = compiler::loadSpecFile(kExampleSpec);
  REQUIRE(spec);
  REQUIRE(spec->variants.size() == 1);
  const auto* kernel = manifest.findKernel(kExampleKernel);
  REQUIRE(kernel != nullptr);
  for (const auto& image : kernel->images) {
    INFO(image.arch);
    auto built = compiler::buildVariantKernel(spec->variants[0]);
    REQUIRE(built);
    compiler::CompileOptions options;
    options.target = image.arch;
    options.driverMaxPtx = image.ptxVersion;
    options.stopAfter = "tir-opt";  // what compiler/Jit.cpp runs before its lookup
    auto afterPasses = compiler::compileKernel(**built, options);
    REQUIRE(afterPasses);
    CHECK(compiler::jitCacheKey(*afterPasses, options) == image.jitCacheKey);
  }
}

TEST_CASE("aot: the manifest round-trips and is written with its files", "[aot]") {
  const fs::path& bundle = smallBundle();
  const std::string text = tests::readFile(bundle / "manifest.json");
  const BundleManifest manifest = readManifest(bundle);
  CHECK(runtime::writeBundleManifest(manifest) == text);
  REQUIRE(manifest.kernels.size() == 1);
  const auto& kernel = manifest.kernels[0];
  CHECK(kernel.name == kExampleKernel);
  CHECK(kernel.family == "merge_attn_states");
  CHECK(kernel.params.find("num_heads=4 head_size=64") != std::string::npos);
  CHECK(kernel.grid.find("ceil(num_tokens / BLOCK_TOKENS)") != std::string::npos);
  REQUIRE(kernel.parameters.size() == 13);
  CHECK(kernel.parameters[0].name == "output");
  CHECK(kernel.parameters[0].kind == runtime::BundleParameterKind::Pointer);
  CHECK(kernel.parameters[0].dtype == "f32");
  CHECK(kernel.parameters[0].align == 16);
  CHECK(kernel.parameters[6].name == "num_tokens");
  CHECK(kernel.parameters[6].dtype == "i32");
  CHECK(kernel.parameters[7].divisibility == 8);
  CHECK(kernel.constexprs.front() == std::make_pair(std::string("BLOCK_TOKENS"), 16.0));
  // No temporary file is left behind.
  for (const auto& entry : fs::recursive_directory_iterator(bundle)) {
    CHECK(entry.path().filename().string().find(".tmp.") == std::string::npos);
  }

  const std::string header = tests::readFile(bundle / "attnjit_bundle_kernels.h");
  CHECK(header.find("attnjit_launch_" + kExampleKernel + "(") != std::string::npos);
  CHECK(header.find("attnjit_check_" + kExampleKernel + "(") != std::string::npos);
  CHECK(header.find("float* output /* f32 elements, 16-byte aligned */") != std::string::npos);
  CHECK(header.find("int64_t o_stride_token /* i64, a multiple of 8 */") != std::string::npos);
  // The header is C: a C compiler accepts it with every warning an error.
  int code = 0;
  tests::runShell("command -v cc", &code);
  if (code == 0) {
    const fs::path source = scratchRoot() / "uses_header.c";
    std::ofstream(source) << "#include \"attnjit_bundle_kernels.h\"\nint main(void) { return 0; }\n";
    std::string output = tests::runShell("cc -std=c99 -Wall -Wextra -Wpedantic -Werror -fsyntax-only -I" +
                                             shellQuote(bundle.string()) + " -I" + shellQuote(tests::sourceDir()) +
                                             " " + shellQuote(source.string()),
                                         &code);
    INFO(output);
    CHECK(code == 0);
  } else {
    WARN("no C compiler (cc) on the PATH: the generated header was not compiled as C");
  }
}

TEST_CASE("aot: manifest round trip keeps every field", "[aot]") {
  BundleManifest manifest;
  manifest.attnjitVersion = "9.9.9";
  manifest.llvmVersion = "22.1.0";
  runtime::BundleKernel kernel;
  kernel.name = "k";
  kernel.family = "merge_attn_states";
  kernel.spec = "a b.yaml";
  kernel.params = "x=1 \"quoted\"\n";
  kernel.grid = "grid = (n, 1)";
  kernel.constexprs = {{"A", 16.0}, {"SCALE", 0.1}, {"NEG", -3.0}};
  kernel.parameters = {{"p", runtime::BundleParameterKind::Pointer, "bf16", 16, 0},
                       {"n", runtime::BundleParameterKind::Integer, "i64", 0, 8},
                       {"s", runtime::BundleParameterKind::Float, "f32", 0, 0}};
  kernel.images = {syntheticImage("sm_80", false), syntheticImage("sm_90a", true)};
  kernel.images[1].ptxas = runtime::BundlePtxasReport{168, 8, 4, 16};
  kernel.images[1].tensorMaps = "first=3\nbf16 address=p0:8 dims=c64,p1:4 strides=p2:8 box=64,16 swizzle=128";
  manifest.kernels.push_back(kernel);
  const std::string text = runtime::writeBundleManifest(manifest);
  auto parsed = runtime::parseBundleManifest(text, "m.json");
  INFO((parsed ? "" : parsed.diagnostic().str()));
  REQUIRE(parsed);
  CHECK(*parsed == manifest);
  // A recipe that does not parse is the manifest's error, located at the field.
  std::string bad = text;
  const std::string from = "box=64,16 swizzle=128", to = "box=64,16 swizzle=100";
  REQUIRE(bad.find(from) != std::string::npos);
  bad.replace(bad.find(from), from.size(), to);
  auto refused = runtime::parseBundleManifest(bad, "m.json");
  REQUIRE_FALSE(refused);
  CHECK_THAT(refused.diagnostic().str(), Catch::Contains("images[1].tensor_maps"));
  CHECK_THAT(refused.diagnostic().str(), Catch::Contains("the swizzle is 0, 32, 64 or 128 bytes"));
}

// A kernel with TMA copies (tma: true) takes tensor maps after its parameters:
// the bundle records their recipes with its image, and the bundle runtime
// encodes them at launch as the JIT's does.
TEST_CASE("aot: TMA kernels carry their tensor-map recipes", "[aot][tma]") {
  fs::path out = scratchRoot() / "tma";
  AotRun run = runAot(shellQuote(tests::sourceDir() + "/bench/prefill_tma.yaml") + " --arch sm_90a --jobs 2 -o " +
                      shellQuote(out.string()));
  INFO(run.output);
  REQUIRE(run.exitCode == 0);
  const BundleManifest manifest = readManifest(out);
  int withMaps = 0;
  for (const auto& kernel : manifest.kernels) {
    INFO(kernel.name);
    REQUIRE(kernel.images.size() == 1);
    const bool tma = kernel.name.size() > 4 && kernel.name.substr(kernel.name.size() - 4) == "_tma";
    CHECK(kernel.images[0].tensorMaps.empty() != tma);
    if (!tma) continue;
    ++withMaps;
    auto maps = runtime::parseTensorMapRecipes(kernel.images[0].tensorMaps);
    REQUIRE(maps.isOk());
    CHECK(maps->first == static_cast<int>(kernel.parameters.size()));
    REQUIRE(maps->maps.size() == 1);
    CHECK(maps->maps[0].box == std::vector<std::uint32_t>{64, 1, 16, 1, 1});
  }
  CHECK(withMaps == 2);
  CHECK(manifest.formatVersion == BundleManifest::kFormatVersion);
  CHECK(runtime::Bundle::open(out));
}

TEST_CASE("aot: corrupt manifests and images give named errors", "[aot]") {
  const std::string good = tests::readFile(smallBundle() / "manifest.json");
  auto parseError = [](const std::string& text) {
    auto parsed = runtime::parseBundleManifest(text, "m.json");
    REQUIRE_FALSE(parsed);
    return parsed.diagnostic().str();
  };
  SECTION("truncated") {
    std::string error = parseError(good.substr(0, good.size() / 2));
    CHECK(error.rfind("m.json:", 0) == 0);
    CHECK(error.find("error:") != std::string::npos);
  }
  SECTION("wrong field type") {
    std::string text = good;
    replaceOnce(text, "\"threads_per_block\": 128", "\"threads_per_block\": \"128\"");
    CHECK(parseError(text).find("kernels[0].images[0].threads_per_block: expected a number, found a string") !=
          std::string::npos);
  }
  SECTION("missing field") {
    std::string text = good;
    replaceOnce(text, "\"grid\":", "\"grit\":");
    CHECK(parseError(text).find("kernels[0].grid: missing field") != std::string::npos);
  }
  SECTION("path escaping the bundle") {
    std::string text = good;
    replaceOnce(text, "\"file\": \"sm_80/", "\"file\": \"../");
    CHECK(parseError(text).find("kernels[0].images[0].ptx.file: '../") != std::string::npos);
    text = good;
    replaceOnce(text, "\"file\": \"sm_80/", "\"file\": \"/etc/");
    CHECK(parseError(text).find("is not a path inside the bundle") != std::string::npos);
  }
  SECTION("other format version") {
    std::string text = good;
    replaceOnce(text, "\"format_version\": 1", "\"format_version\": 3");
    CHECK(parseError(text).find("format_version: version 3 is not supported (this runtime reads versions 1 to 2)") !=
          std::string::npos);
  }
  SECTION("misaligned promise") {
    std::string text = good;
    replaceOnce(text, "\"align\": 16", "\"align\": 12");
    CHECK(parseError(text).find("kernels[0].parameters[0].align: must be a power of two") != std::string::npos);
  }
  SECTION("sha256 mismatch of an image") {
    fs::path copy = copyOfSmallBundle("damaged_sha");
    const BundleManifest manifest = readManifest(copy);
    const fs::path ptx = copy / manifest.kernels[0].images[1].ptx.path;
    std::string bytes = tests::readFile(ptx);
    bytes[bytes.size() / 2] ^= 1;
    std::ofstream(ptx, std::ios::binary) << bytes;
    std::string error = openError(copy);
    CHECK(error.find(ptx.string()) != std::string::npos);
    CHECK(error.find("kernels[0].images[1].ptx: sha256 mismatch") != std::string::npos);
  }
  SECTION("missing image file") {
    fs::path copy = copyOfSmallBundle("missing_image");
    const BundleManifest manifest = readManifest(copy);
    fs::remove(copy / manifest.kernels[0].images[0].ptx.path);
    CHECK(openError(copy).find("kernels[0].images[0].ptx: bundle image does not exist") != std::string::npos);
  }
  SECTION("image that is a link out of the bundle") {
    fs::path copy = copyOfSmallBundle("linked_image");
    const BundleManifest manifest = readManifest(copy);
    const fs::path ptx = copy / manifest.kernels[0].images[0].ptx.path;
    const fs::path outside = scratchRoot() / "outside.ptx";
    fs::copy_file(ptx, outside, fs::copy_options::overwrite_existing);
    fs::remove(ptx);
    fs::create_symlink(outside, ptx);
    CHECK(openError(copy).find("resolves outside the bundle directory") != std::string::npos);
  }
  SECTION("truncated manifest on disk, through the C API") {
    fs::path copy = copyOfSmallBundle("truncated_c");
    std::ofstream(copy / "manifest.json", std::ios::binary) << good.substr(0, good.size() - 10);
    attnjit_bundle* bundle = reinterpret_cast<attnjit_bundle*>(0x1);
    CHECK(attnjit_bundle_open(copy.string().c_str(), &bundle) == ATTNJIT_BUNDLE_ERROR_BAD_BUNDLE);
    CHECK(bundle == nullptr);
    CHECK(std::string(attnjit_bundle_last_error()).find("manifest.json:") != std::string::npos);
  }
  SECTION("no bundle at all") {
    CHECK(openError(scratchRoot() / "nothing_here").find("bundle directory does not exist") != std::string::npos);
  }
}

TEST_CASE("aot: launch arguments are checked against the kernel's promises", "[aot]") {
  auto opened = runtime::Bundle::open(smallBundle());
  REQUIRE(opened);
  const runtime::BundleKernel* kernel = (*opened)->findKernel(kExampleKernel);
  REQUIRE(kernel != nullptr);
  std::vector<BundleArgument> arguments = exampleArguments();
  CHECK(runtime::checkBundleArguments(*kernel, arguments));

  auto errorFor = [&](std::vector<BundleArgument> changed) {
    runtime::Status status = runtime::checkBundleArguments(*kernel, changed);
    REQUIRE_FALSE(status);
    return status.diagnostic().message;
  };
  auto changed = arguments;
  changed.pop_back();
  CHECK(errorFor(changed) == "kernel '" + kExampleKernel + "' takes 13 arguments, got 12");
  changed = arguments;
  changed[2] = BundleArgument::fromPointer(nullptr);
  CHECK(errorFor(changed) == "kernel '" + kExampleKernel + "' parameter 2 ('prefix_output') is a null pointer");
  changed = arguments;
  changed[3] = BundleArgument::fromDeviceAddress(0x7f0000040008ull);
  CHECK(errorFor(changed).find("parameter 3 ('prefix_lse') is 0x7f0000040008, not 16-byte aligned as the kernel was "
                               "compiled to assume") != std::string::npos);
  changed = arguments;
  changed[7] = BundleArgument::fromInteger(260);
  CHECK(errorFor(changed).find("parameter 7 ('o_stride_token') is 260, not a multiple of 8") != std::string::npos);
  changed = arguments;
  changed[6] = BundleArgument::fromInteger(std::int64_t{1} << 31);
  CHECK(errorFor(changed).find("parameter 6 ('num_tokens'): 2147483648 does not fit its type i32") !=
        std::string::npos);
  changed = arguments;
  changed[6] = BundleArgument::fromFloat(37.0);
  CHECK(errorFor(changed).find("parameter 6 ('num_tokens') is integer i32, got float argument") != std::string::npos);
  changed = arguments;
  changed[0] = BundleArgument::fromInteger(4096);
  CHECK(errorFor(changed).find("parameter 0 ('output') is a pointer to f32, got integer argument") !=
        std::string::npos);

  // The same through the C API, which also refuses unknown kernels by name.
  attnjit_bundle* bundle = nullptr;
  REQUIRE(attnjit_bundle_open(smallBundle().string().c_str(), &bundle) == ATTNJIT_BUNDLE_OK);
  attnjit_bundle_kernel* handle = nullptr;
  CHECK(attnjit_bundle_find_kernel(bundle, "merge_attn_states_f32_h4_d65_lse", &handle) ==
        ATTNJIT_BUNDLE_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnjit_bundle_last_error()).find("kernels: " + kExampleKernel) != std::string::npos);
  REQUIRE(attnjit_bundle_find_kernel(bundle, kExampleKernel.c_str(), &handle) == ATTNJIT_BUNDLE_OK);
  CHECK(attnjit_bundle_kernel_parameter_count(handle) == 13);
  std::vector<attnjit_bundle_arg> cArguments;
  for (const BundleArgument& a : arguments) {
    cArguments.push_back(a.kind == BundleArgument::Kind::Pointer ? attnjit_bundle_pointer_arg(a.pointer)
                                                                 : attnjit_bundle_integer_arg(a.integer));
  }
  CHECK(attnjit_bundle_check_args(handle, cArguments.data(), cArguments.size()) == ATTNJIT_BUNDLE_OK);
  cArguments[9] = attnjit_bundle_integer_arg(1001);
  CHECK(attnjit_bundle_check_args(handle, cArguments.data(), cArguments.size()) ==
        ATTNJIT_BUNDLE_ERROR_BAD_LAUNCH_ARGUMENT);
  CHECK(std::string(attnjit_bundle_last_error()).find("'p_stride_token') is 1001, not a multiple of 8") !=
        std::string::npos);
  cArguments[9] = attnjit_bundle_integer_arg(256);
  if (!runtime::driverAvailable()) {
    // Arguments pass, then the launch stops at the missing driver.
    CHECK(attnjit_bundle_launch(handle, cArguments.data(), cArguments.size(), attnjit_bundle_dim3{3, 4, 1}, nullptr) ==
          ATTNJIT_BUNDLE_ERROR_NO_DRIVER);
    CHECK(std::string(attnjit_bundle_last_error()).find("CUDA driver not available") != std::string::npos);
  }
  attnjit_bundle_close(bundle);
}

TEST_CASE("aot: the image for a device is its cubin, else the best PTX", "[aot]") {
  runtime::BundleKernel kernel;
  kernel.name = "k";
  kernel.images = {syntheticImage("sm_80", true), syntheticImage("sm_90", false), syntheticImage("sm_90a", true)};
  auto choose = [&](int sm) {
    auto choice = runtime::chooseBundleImage(kernel, sm);
    REQUIRE(choice);
    return choice->image->arch + (choice->form == runtime::BundleImageForm::Cubin ? " cubin" : " ptx");
  };
  CHECK(choose(80) == "sm_80 cubin");
  CHECK(choose(86) == "sm_80 ptx");
  CHECK(choose(89) == "sm_80 ptx");
  CHECK(choose(90) == "sm_90a cubin");  // the arch-specific cubin runs on sm_90 devices
  CHECK(choose(100) == "sm_90 ptx");    // sm_90a code runs only on sm_90
  kernel.images[2].cubin.reset();
  CHECK(choose(90) == "sm_90a ptx");
  auto none = runtime::chooseBundleImage(kernel, 75);
  REQUIRE_FALSE(none);
  CHECK(none.diagnostic().message.find("no image that runs on an sm_75 device; the bundle has: sm_80 (cubin, PTX), "
                                       "sm_90 (PTX), sm_90a (PTX)") != std::string::npos);
}

TEST_CASE("aot: a bundle seeds the JIT disk cache under the JIT's keys", "[aot]") {
  auto opened = runtime::Bundle::open(smallBundle());
  REQUIRE(opened);
  const fs::path cacheDir = scratchRoot() / "seeded_cache";
  runtime::KernelCache cache(std::make_unique<FixedToolchainLoader>(), runtime::DiskCache(cacheDir), false);
  auto stored = (*opened)->seedJitDiskCache(cache);
  REQUIRE(stored);
  const auto& kernel = (*opened)->manifest().kernels[0];
  int withCubin = 0;
  for (const auto& image : kernel.images) {
    if (!image.cubin) continue;
    ++withCubin;
    runtime::DiskLookup lookup = cache.disk().load(cache.diskKey(image.jitCacheKey));
    INFO(lookup.missReason);
    REQUIRE(lookup.hit());
    CHECK(lookup.entry->cubin == (*opened)->fileBytes(*image.cubin));
    CHECK(lookup.entry->metadata.at("threads") == std::to_string(image.threadsPerBlock));
    CHECK(lookup.entry->metadata.at("shared_bytes") == std::to_string(image.dynamicSharedBytes));
    CHECK(lookup.entry->metadata.at(runtime::KernelCache::kEntryNameKey) == kernel.name);
  }
  CHECK(*stored == withCubin);
  if (withCubin == 0) WARN("no ptxas on the PATH: the bundle has no cubins to seed");
  runtime::KernelCache disabled(std::make_unique<FixedToolchainLoader>(), runtime::DiskCache::disabled(), false);
  CHECK_FALSE((*opened)->seedJitDiskCache(disabled));
}

TEST_CASE("aot: command-line errors are located and exit with status 2", "[aot]") {
  const fs::path out = scratchRoot() / "cli_errors";
  AotRun run = runAot(shellQuote(kExampleSpec) + " --arch sm_80,sm_42 -o " + shellQuote(out.string()));
  CHECK(run.exitCode == 2);
  CHECK(run.output.find("attnjit aot: error: --arch=sm_80,sm_42:") != std::string::npos);

  run = runAot(shellQuote(kExampleSpec) + " -o " + shellQuote(out.string()));
  CHECK(run.exitCode == 2);
  CHECK(run.output.find("--arch is required") != std::string::npos);

  const fs::path badSpec = scratchRoot() / "bad.yaml";
  std::ofstream(badSpec) << "family: merge_attn_states\nparams:\n  dtype: f33\n";
  run = runAot(shellQuote(badSpec.string()) + " --arch sm_80 -o " + shellQuote(out.string()));
  CHECK(run.exitCode == 2);
  CHECK(run.output.find(badSpec.string() + ":3:") != std::string::npos);

  // The same kernel twice.
  run = runAot(shellQuote(kExampleSpec) + " " + shellQuote(kExampleSpec) + " --arch sm_80 -o " +
               shellQuote(out.string()));
  CHECK(run.exitCode == 2);
  CHECK(run.output.find("kernel '" + kExampleKernel + "' is already defined at") != std::string::npos);

  // An output path below a regular file cannot be created.
  const fs::path file = scratchRoot() / "a_file";
  std::ofstream(file) << "x";
  run = runAot(shellQuote(kExampleSpec) + " --arch sm_80 -o " + shellQuote((file / "bundle").string()));
  CHECK(run.exitCode == 2);
  CHECK(run.output.find((file / "bundle").string() + ": error: cannot create the output directory") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(out / "manifest.json"));
}

TEST_CASE("aot: the output directory is new, empty or an earlier bundle", "[aot]") {
  const fs::path other = scratchRoot() / "merge_h8.yaml";
  std::ofstream(other) << "family: merge_attn_states\nparams:\n  dtype: f32\n  num_heads: 8\n  head_size: 64\n  output_lse: true\n";
  const std::string otherKernel = "merge_attn_states_f32_h8_d64_lse";

  // Foreign files: refused before anything is written, and left as they were.
  const fs::path foreign = scratchRoot() / "foreign";
  fs::create_directories(foreign / "src");
  std::ofstream(foreign / "notes.txt") << "mine";
  AotRun run = runAot(shellQuote(kExampleSpec) + " --arch sm_80 -o " + shellQuote(foreign.string()));
  CHECK(run.exitCode == 2);
  CHECK(run.output.find(foreign.string() + ": error: the output directory holds '") != std::string::npos);
  CHECK(run.output.find("choose another -o") != std::string::npos);
  CHECK(tests::readFile(foreign / "notes.txt") == "mine");
  CHECK_FALSE(fs::exists(foreign / "manifest.json"));
  CHECK_FALSE(fs::exists(foreign / "sm_80"));

  // A file in an arch folder that is not an image, and a manifest that is not one.
  const fs::path strayImage = scratchRoot() / "stray_image";
  fs::create_directories(strayImage / "sm_80");
  std::ofstream(strayImage / "sm_80" / "readme.md") << "x";
  run = runAot(shellQuote(kExampleSpec) + " --arch sm_80 -o " + shellQuote(strayImage.string()));
  CHECK(run.exitCode == 2);
  CHECK(run.output.find("holds 'sm_80/readme.md', which is not a kernel image") != std::string::npos);
  const fs::path badManifest = scratchRoot() / "bad_manifest";
  fs::create_directories(badManifest);
  std::ofstream(badManifest / "manifest.json") << "{\"name\": \"my project\"}";
  run = runAot(shellQuote(kExampleSpec) + " --arch sm_80 -o " + shellQuote(badManifest.string()));
  CHECK(run.exitCode == 2);
  CHECK(run.output.find("which is not an attnjit bundle manifest") != std::string::npos);
  CHECK(tests::readFile(badManifest / "manifest.json") == "{\"name\": \"my project\"}");

  // An existing empty directory is fine; rewriting a bundle drops what the new one lacks.
  const fs::path bundle = scratchRoot() / "rewritten";
  fs::create_directories(bundle);
  run = runAot(shellQuote(kExampleSpec) + " " + shellQuote(other.string()) + " --arch sm_80,sm_90a -o " +
               shellQuote(bundle.string()));
  INFO(run.output);
  REQUIRE(run.exitCode == 0);
  CHECK(fs::exists(bundle / "sm_90a" / (otherKernel + ".ptx")));
  std::ofstream(bundle / "sm_80" / (kExampleKernel + ".ptx.tmp.12345")) << "left by a killed run";
  run = runAot(shellQuote(kExampleSpec) + " --arch sm_80 -o " + shellQuote(bundle.string()));
  REQUIRE(run.exitCode == 0);
  const BundleManifest manifest = readManifest(bundle);
  REQUIRE(manifest.kernels.size() == 1);
  CHECK(manifest.kernels[0].name == kExampleKernel);
  CHECK(fs::exists(bundle / "sm_80" / (kExampleKernel + ".ptx")));
  CHECK_FALSE(fs::exists(bundle / "sm_80" / (otherKernel + ".ptx")));
  CHECK_FALSE(fs::exists(bundle / "sm_80" / (kExampleKernel + ".ptx.tmp.12345")));
  CHECK_FALSE(fs::exists(bundle / "sm_90a"));
  auto opened = runtime::Bundle::open(bundle);
  INFO((opened ? "" : opened.diagnostic().str()));
  CHECK(opened);
}

TEST_CASE("aot: examples/aot opens a bundle, checks arguments and launches", "[aot]") {
  const fs::path example = fs::path(tests::cliPath()).parent_path() / "attnjit_aot_example";
  if (!fs::exists(example)) {
    // A device bundle (scripts/device-bundle) may ship without the example.
    if (std::getenv("ATTNJIT_CLI") != nullptr) {
      tests::skipTest("no " + example.string());
      return;
    }
    FAIL("the example is not built: " << example.string());
  }
  int code = 0;
  const std::string output =
      tests::runShell(shellQuote(example.string()) + " " + shellQuote(smallBundle().string()), &code);
  INFO(output);
  CHECK(output.find("check: misaligned prefix_output") != std::string::npos);
  CHECK(output.find("not 16-byte aligned") != std::string::npos);
  CHECK(output.find("not a multiple of 8") != std::string::npos);
  if (runtime::driverAvailable()) {
    CHECK(code == 0);
    CHECK(output.find("PASS") != std::string::npos);
  } else {
    CHECK(code == 2);
    CHECK(output.find("CUDA driver not available") != std::string::npos);
    CHECK(output.find("stopped before the launch: no CUDA driver") != std::string::npos);
  }
  // The runtime alone: no LLVM in the example.
  const std::string symbols =
      tests::runShell("nm -C " + shellQuote(example.string()) + " | grep -c 'llvm::' || true", &code);
  CHECK(std::atoi(symbols.c_str()) == 0);
}

TEST_CASE("aot: a bundled kernel computes what the JIT's kernel computes", "[aot][gpu]") {
  if (!tests::gpuPresent()) return;
  REQUIRE(runtime::activatePrimaryContext(0));
  auto opened = runtime::Bundle::open(smallBundle());
  REQUIRE(opened);
  runtime::Bundle& bundle = **opened;
  const runtime::BundleKernel& kernel = *bundle.findKernel(kExampleKernel);
  auto choice = bundle.imageForCurrentContext(kernel);
  INFO((choice ? "" : choice.diagnostic().str()));
  REQUIRE(choice);

  constexpr int kTokens = 37, kHeads = 4, kHeadSize = 64;
  const std::size_t outputElements = std::size_t{kTokens} * kHeads * kHeadSize, lseElements = kHeads * kTokens;
  std::mt19937 random(11);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  auto randomBuffer = [&](std::size_t elements) {
    std::vector<float> host(elements);
    for (float& v : host) v = uniform(random);
    auto buffer = runtime::DeviceBuffer::allocate(elements * sizeof(float));
    REQUIRE(buffer);
    REQUIRE(buffer->copyFromHost(host.data(), elements * sizeof(float)));
    return std::move(*buffer);
  };
  std::vector<runtime::DeviceBuffer> buffers;
  for (std::size_t elements : {outputElements, lseElements, outputElements, lseElements, outputElements, lseElements}) {
    buffers.push_back(randomBuffer(elements));
  }
  std::vector<BundleArgument> arguments = exampleArguments();
  for (std::size_t i = 0; i < 6; ++i) arguments[i] = BundleArgument::fromDeviceAddress(buffers[i].address());
  const runtime::Dim3 grid{(kTokens + 15) / 16, kHeads, 1};
  REQUIRE(bundle.launch(kernel, arguments, grid, nullptr));
  REQUIRE(runtime::synchronizeContext());
  std::vector<float> bundled(outputElements), bundledLse(lseElements);
  REQUIRE(buffers[0].copyToHost(bundled.data(), bundled.size() * sizeof(float)));
  REQUIRE(buffers[1].copyToHost(bundledLse.data(), bundledLse.size() * sizeof(float)));
  REQUIRE(buffers[0].fill(0));
  REQUIRE(buffers[1].fill(0));

  // The JIT's kernel for the same variant on the same inputs.
  auto spec = compiler::loadSpecFile(kExampleSpec);
  REQUIRE(spec);
  const compiler::Variant variant = spec->variants[0];
  compiler::CompileOptions options;
  options.target = choice->image->arch;
  if (auto ptx = runtime::driverMaxPtxIsa()) options.driverMaxPtx = ptx->asNumber();
  auto jit = compiler::jitKernel([&] { return compiler::buildVariantKernel(variant); }, options);
  INFO((jit ? "" : jit.diagnostic().str()));
  REQUIRE(jit);
  std::vector<std::uint64_t> packed(arguments.size());
  std::vector<void*> params;
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    if (i < 6) {
      packed[i] = buffers[i].address();
    } else if (kernel.parameters[i].dtype == "i32") {
      const std::int32_t narrow = static_cast<std::int32_t>(arguments[i].integer);
      std::memcpy(&packed[i], &narrow, sizeof narrow);
    } else {
      std::memcpy(&packed[i], &arguments[i].integer, sizeof(std::int64_t));
    }
    params.push_back(&packed[i]);
  }
  runtime::LaunchConfig config;
  config.grid = grid;
  config.block = runtime::Dim3{static_cast<unsigned>(jit->numThreads), 1, 1};
  config.dynamicSharedBytes = static_cast<unsigned>(jit->sharedMemoryBytes);
  REQUIRE(jit->loaded->function.launch(config, params.data()));
  REQUIRE(runtime::synchronizeContext());
  std::vector<float> jitted(outputElements), jittedLse(lseElements);
  REQUIRE(buffers[0].copyToHost(jitted.data(), jitted.size() * sizeof(float)));
  REQUIRE(buffers[1].copyToHost(jittedLse.data(), jittedLse.size() * sizeof(float)));
  // Same PTX, so the same instructions: the results agree bit for bit.
  CHECK(std::memcmp(bundled.data(), jitted.data(), bundled.size() * sizeof(float)) == 0);
  CHECK(std::memcmp(bundledLse.data(), jittedLse.data(), bundledLse.size() * sizeof(float)) == 0);

  // Seeded into a fresh disk cache, the bundle's cubin is what the JIT loads.
  auto target = codegen::lookupTarget(options.target);
  REQUIRE(target);
  auto jitPtx = codegen::choosePtxVersion(*target, options.driverMaxPtx);
  REQUIRE(jitPtx);
  if (choice->form == runtime::BundleImageForm::Cubin && choice->image->ptxVersion == *jitPtx) {
    const fs::path cacheDir = scratchRoot() / "gpu_seeded_cache";
    runtime::KernelCache cache(runtime::makeDriverKernelLoader(), runtime::DiskCache(cacheDir), false);
    REQUIRE(bundle.seedJitDiskCache(cache));
    auto seeded = compiler::jitKernel([&] { return compiler::buildVariantKernel(variant); }, options, cache);
    REQUIRE(seeded);
    CHECK(seeded->fromDisk);
    CHECK_FALSE(seeded->compiledNow);
  } else if (choice->form != runtime::BundleImageForm::Cubin) {
    WARN("the bundle has no cubin for this device (built without ptxas): JIT-cache seeding not checked on the GPU");
  } else {
    WARN("the JIT picks PTX " << *jitPtx << " here, the bundle has " << choice->image->ptxVersion
                              << ": their cache keys differ, seeding not checked on the GPU");
  }
}

namespace {

// Two split-KV unified variants that share one stage 2 (causal or not does not reach
// reduce_segments), and a split-KV MLA variant with the LSE (MLA's strided LSE).
const char* kSplitUnifiedSpec = R"(family: unified_attention
params:
  dtype: bf16
  num_query_heads: 4
  num_kv_heads: 1
  head_size: 64
  block_size: 16
  causal: [true, false]
  split_kv: true
)";
const char* kSplitMlaSpec = R"(family: mla_decode
params:
  dtype: f16
  num_heads: 16
  kv_lora_rank: 256
  rope_dim: 64
  block_size: 16
  split_kv: true
  output_lse: true
)";
const char* kReduceSpec = R"(family: reduce_segments
params:
  dtype: bf16
  num_query_heads: 4
  head_size: 64
)";

fs::path writeScratchSpec(const std::string& name, const char* text) {
  const fs::path path = scratchRoot() / name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("aot: split-KV variants bring their stage 2 reduce_segments kernel once", "[aot][reduce_segments]") {
  const fs::path unified = writeScratchSpec("split_unified.yaml", kSplitUnifiedSpec);
  const fs::path mla = writeScratchSpec("split_mla.yaml", kSplitMlaSpec);
  const fs::path out = scratchRoot() / "split";
  AotRun run = runAot(shellQuote(unified.string()) + " " + shellQuote(mla.string()) + " --arch sm_90a --jobs 2 -o " +
                      shellQuote(out.string()));
  INFO(run.output);
  REQUIRE(run.exitCode == 0);
  CHECK(run.output.find("attnjit aot: 5 kernels (2 of them split-KV stage 2) x 1 architectures") != std::string::npos);
  CHECK(run.output.find("reduce_segments_bf16_h4_d64 (split-KV stage 2) sm_90a") != std::string::npos);

  const BundleManifest manifest = readManifest(out);
  REQUIRE(manifest.kernels.size() == 5);
  const std::string unifiedReduce = "reduce_segments_bf16_h4_d64";
  const std::string mlaReduce = "reduce_segments_f16_h16_d256_lse_strided";
  int stage1 = 0;
  for (const auto& kernel : manifest.kernels) {
    INFO(kernel.name);
    if (kernel.family == "reduce_segments") {
      CHECK(kernel.stage2.empty());
      continue;
    }
    ++stage1;
    CHECK(kernel.stage2 == (kernel.family == "mla_decode" ? mlaReduce : unifiedReduce));
    REQUIRE(manifest.findKernel(kernel.stage2) != nullptr);
    CHECK(manifest.findKernel(kernel.stage2)->family == "reduce_segments");
  }
  CHECK(stage1 == 3);
  // The stage 2 kernels are the ones the JIT builds for these variants.
  const auto* reduce = manifest.findKernel(unifiedReduce);
  REQUIRE(reduce != nullptr);
  CHECK(reduce->spec == unified.string());
  CHECK(reduce->params == "dtype=bf16 num_query_heads=4 head_size=64 output_lse=false num_warps=4");
  CHECK(reduce->grid.find("grid = (num_tokens (MLA decode: num_seqs), ceil(Hq / HEADS_PER_PROGRAM))") !=
        std::string::npos);
  REQUIRE(reduce->parameters.size() == 7);
  CHECK(reduce->parameters[0].name == "out");
  CHECK(reduce->parameters[0].dtype == "bf16");
  CHECK(reduce->parameters[4].name == "num_segments");
  const auto* mlaKernel = manifest.findKernel(mlaReduce);
  REQUIRE(mlaKernel != nullptr);
  CHECK(mlaKernel->spec == mla.string());
  REQUIRE(mlaKernel->parameters.size() == 10);
  CHECK(mlaKernel->parameters[4].name == "lse");
  CHECK(mlaKernel->parameters[9].name == "lse_stride_token");
  compiler::MlaDecodeConfig mlaConfig;
  mlaConfig.dtype = ir::ScalarKind::F16;
  mlaConfig.numHeads = 16;
  mlaConfig.kvLoraRank = 256;
  mlaConfig.splitKv = true;
  mlaConfig.outputLse = true;
  CHECK(compiler::reduceSegmentsFor(mlaConfig).kernelName() == mlaReduce);
  for (const auto& image : mlaKernel->images) CHECK(fs::is_regular_file(out / image.ptx.path));

  // The header launches the stage 2 and says so at the stage 1.
  const std::string header = tests::readFile(out / "attnjit_bundle_kernels.h");
  CHECK(header.find("attnjit_launch_" + unifiedReduce + "(") != std::string::npos);
  CHECK(header.find("which attnjit_launch_" + mlaReduce + " (stage 2, after it on the same stream)") !=
        std::string::npos);
  auto opened = runtime::Bundle::open(out);
  INFO((opened ? "" : opened.diagnostic().str()));
  CHECK(opened);
}

TEST_CASE("aot: a stage 2 the specs define is used as it is", "[aot][reduce_segments]") {
  const fs::path unified = writeScratchSpec("split_unified_own.yaml", kSplitUnifiedSpec);
  const fs::path own = writeScratchSpec("own_reduce.yaml", kReduceSpec);
  const fs::path out = scratchRoot() / "split_own";
  AotRun run = runAot(shellQuote(unified.string()) + " " + shellQuote(own.string()) + " --arch sm_80 --jobs 2 -o " +
                      shellQuote(out.string()));
  INFO(run.output);
  REQUIRE(run.exitCode == 0);
  CHECK(run.output.find("attnjit aot: 3 kernels x 1 architectures") != std::string::npos);
  const BundleManifest manifest = readManifest(out);
  REQUIRE(manifest.kernels.size() == 3);
  const auto* reduce = manifest.findKernel("reduce_segments_bf16_h4_d64");
  REQUIRE(reduce != nullptr);
  CHECK(reduce->spec == own.string());  // the spec's own variant, not a second copy
  CHECK(manifest.kernels[0].stage2 == "reduce_segments_bf16_h4_d64");
  CHECK(manifest.kernels[1].stage2 == "reduce_segments_bf16_h4_d64");
  // --variant keeps a split variant's stage 2 with it.
  const fs::path narrowed = scratchRoot() / "split_narrowed";
  run = runAot(shellQuote(unified.string()) +
               " --variant unified_attention_bf16_h4kv1_d64_bs16_causal_3d --arch sm_80 -o " +
               shellQuote(narrowed.string()));
  INFO(run.output);
  REQUIRE(run.exitCode == 0);
  const BundleManifest two = readManifest(narrowed);
  REQUIRE(two.kernels.size() == 2);
  CHECK(two.kernels[0].stage2 == two.kernels[1].name);
}

TEST_CASE("aot: manifest stage2 round-trips and must name a kernel of the bundle", "[aot][reduce_segments]") {
  BundleManifest manifest;
  manifest.attnjitVersion = "9.9.9";
  manifest.llvmVersion = "22.1.0";
  runtime::BundleKernel stage1;
  stage1.name = "split";
  stage1.family = "unified_attention";
  stage1.spec = "s.yaml";
  stage1.grid = "grid = (n, 1, num_segments)";
  stage1.stage2 = "reduce";  // later in the list: still found
  stage1.images = {syntheticImage("sm_90a", false)};
  runtime::BundleKernel reduce = stage1;
  reduce.name = "reduce";
  reduce.family = "reduce_segments";
  reduce.stage2.clear();
  manifest.kernels = {stage1, reduce};
  const std::string text = runtime::writeBundleManifest(manifest);
  CHECK(text.find("\"stage2\": \"reduce\"") != std::string::npos);
  auto parsed = runtime::parseBundleManifest(text, "m.json");
  INFO((parsed ? "" : parsed.diagnostic().str()));
  REQUIRE(parsed);
  CHECK(*parsed == manifest);
  CHECK(parsed->kernels[1].stage2.empty());

  auto parseError = [](const std::string& bad) {
    auto result = runtime::parseBundleManifest(bad, "m.json");
    REQUIRE_FALSE(result);
    return result.diagnostic().str();
  };
  std::string dangling = text;
  replaceOnce(dangling, "\"stage2\": \"reduce\"", "\"stage2\": \"reduce_missing\"");
  CHECK(parseError(dangling).find(
            "kernels[0].stage2: names kernel 'reduce_missing', which is not in the bundle") != std::string::npos);
  std::string self = text;
  replaceOnce(self, "\"stage2\": \"reduce\"", "\"stage2\": \"split\"");
  CHECK(parseError(self).find("kernels[0].stage2: a kernel cannot be its own stage 2") != std::string::npos);
  std::string number = text;
  replaceOnce(number, "\"stage2\": \"reduce\"", "\"stage2\": 3");
  CHECK(parseError(number).find("kernels[0].stage2: expected a string, found a number") != std::string::npos);
  std::string notName = text;
  replaceOnce(notName, "\"stage2\": \"reduce\"", "\"stage2\": \"re duce\"");
  CHECK(parseError(notName).find("kernels[0].stage2: 're duce' is not a kernel name") != std::string::npos);

  // The bundle loader refuses a dangling stage 2 before it touches any image.
  fs::path copy = copyOfSmallBundle("dangling_stage2");
  std::string onDisk = tests::readFile(copy / "manifest.json");
  replaceOnce(onDisk, "\"grid\":", "\"stage2\": \"no_such_kernel\",\n      \"grid\":");
  std::ofstream(copy / "manifest.json", std::ios::binary) << onDisk;
  CHECK(openError(copy).find("kernels[0].stage2: names kernel 'no_such_kernel', which is not in the bundle") !=
        std::string::npos);
}
