// The C++ embedding API (include/attnjit/jit.hpp) and the companion ops
// (compiler/ops/CompanionOps.h): runtime options, kernels from spec text and files,
// PTX compiles and their statistics on the CPU; launch-argument checks; op
// argument validation; and, on a GPU, launches checked against float64
// references.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <vector>

#include "attnjit/jit.hpp"
#include "runtime/DeviceBuffer.h"
#include "runtime/Stream.h"
#include "test_paths.h"
#include "test_tools.h"
#include "compiler/validation/reference/CompanionReference.h"

namespace validation = attnjit::validation;

namespace {

using attnjit::KernelArgument;

// One merge_attn_states variant: f32, 4 heads, head size 64, with the LSE output.
const char* kMergeSpec = R"(family: merge_attn_states
params:
  dtype: f32
  num_heads: 4
  head_size: 64
  output_lse: true
)";

attnjit::JitOptions deviceOption(int device) {
  attnjit::JitOptions options;
  options.device = device;
  return options;
}
attnjit::JitOptions targetOption(const std::string& target) {
  attnjit::JitOptions options;
  options.target = target;
  return options;
}
attnjit::JitOptions cacheOption(const std::string& folder) {
  attnjit::JitOptions options;
  options.cacheDirectory = folder;
  return options;
}
attnjit::JitOptions bypassOption() {
  attnjit::JitOptions options;
  options.bypassCache = true;
  return options;
}

attnjit::Jit cpuRuntime() {
  auto runtime = attnjit::Jit::create();
  REQUIRE(runtime);
  return *runtime;
}

// Arguments for the merge kernel above; pointers at 16-byte aligned fake addresses.
std::vector<KernelArgument> mergeArguments(uint64_t base, int64_t numTokens) {
  std::vector<KernelArgument> args;
  for (int i = 0; i < 6; ++i) args.push_back(KernelArgument::devicePointer(base + 4096 * i));
  args.push_back(KernelArgument::integerValue(numTokens));
  for (int64_t stride : {4 * 64, 64, 4 * 64, 64, 4 * 64, 64}) args.push_back(KernelArgument::integerValue(stride));
  return args;
}

}  // namespace

TEST_CASE("runtime options are checked", "[embed]") {
  auto negative = attnjit::Jit::create(deviceOption(-1));
  REQUIRE_FALSE(negative);
  CHECK_THAT(negative.diagnostic().message, Catch::Contains("device -1 is not a device ordinal"));

  auto unknownTarget = attnjit::Jit::create(targetOption("sm_99"));
  REQUIRE_FALSE(unknownTarget);
  CHECK_THAT(unknownTarget.diagnostic().message, Catch::Contains("sm_99"));
  CHECK_THAT(unknownTarget.diagnostic().message, Catch::Contains("sm_90a"));

  auto pinned = attnjit::Jit::create(targetOption("sm_80"));
  REQUIRE(pinned);
  CHECK(pinned->target() == "sm_80");

  const auto folder = std::filesystem::temp_directory_path() / "attnjit_embed_cache_option";
  auto custom = attnjit::Jit::create(cacheOption(folder.string()));
  REQUIRE(custom);
  CHECK(custom->cacheDirectory() == folder.string());
  auto bypass = attnjit::Jit::create(bypassOption());
  REQUIRE(bypass);
  CHECK(bypass->cacheDirectory().empty());
}

TEST_CASE("a kernel from spec text compiles to PTX with statistics", "[embed]") {
  auto runtime = attnjit::Jit::create(targetOption("sm_80"));
  REQUIRE(runtime);
  auto kernel = runtime->kernelFromSpecText(kMergeSpec);
  REQUIRE(kernel);
  CHECK(kernel->name() == "merge_attn_states_f32_h4_d64_lse");
  CHECK(kernel->family() == "merge_attn_states");
  CHECK_THAT(kernel->specParams(), Catch::Contains("num_heads=4"));
  REQUIRE(kernel->parameters().size() == 13);
  CHECK(kernel->parameters()[0].name == "output");
  CHECK(kernel->parameters()[0].alignBytes == 16);
  CHECK(kernel->parameters()[7].name == "o_stride_token");
  CHECK(kernel->parameters()[7].divisibility == 8);

  CHECK(kernel->stats().origin == attnjit::KernelOrigin::NotLoaded);
  REQUIRE(kernel->compile());
  auto ptx = kernel->ptx();
  REQUIRE(ptx);
  CHECK_THAT(*ptx, Catch::Contains(".entry merge_attn_states_f32_h4_d64_lse"));
  CHECK_THAT(*ptx, Catch::Contains(".target sm_80"));
  const attnjit::CompileStats stats = kernel->stats();
  CHECK(stats.target == "sm_80");
  CHECK(stats.origin == attnjit::KernelOrigin::NotLoaded);
  CHECK(stats.passesMs > 0);
  CHECK(stats.llvmOptimizeMs > 0);
  CHECK(stats.ptxEmitMs > 0);
  CHECK(stats.threads == 128);
  CHECK(stats.registers == -1);
}

TEST_CASE("without a pinned target a kernel compiles for the device, else for its spec", "[embed]") {
  attnjit::Jit runtime = cpuRuntime();
  auto kernel = runtime.kernelFromSpecText(std::string(kMergeSpec) + "target: sm_86\n");
  REQUIRE(kernel);
  REQUIRE(kernel->compile());
  const std::string expected = runtime.target().empty() ? "sm_86" : runtime.target();
  CHECK(kernel->stats().target == expected);
}

TEST_CASE("kernels from spec files pick a variant by name", "[embed]") {
  attnjit::Jit runtime = cpuRuntime();
  const std::string spec = attnjit::tests::sourceDir() + "/specs/merge_attn_states.yaml";
  auto kernel = runtime.kernelFromSpecFile(spec, "merge_attn_states_bf16_h32_d128_lse");
  REQUIRE(kernel);
  CHECK(kernel->name() == "merge_attn_states_bf16_h32_d128_lse");

  auto unnamed = runtime.kernelFromSpecFile(spec);
  REQUIRE_FALSE(unnamed);
  CHECK_THAT(unnamed.diagnostic().str(), Catch::Contains("expands to 24 variants; name one of"));

  auto misspelt = runtime.kernelFromSpecFile(spec, "merge_attn_states_bf16_h32_d128_lsf");
  REQUIRE_FALSE(misspelt);
  CHECK_THAT(misspelt.diagnostic().message, Catch::Contains("did you mean 'merge_attn_states_bf16_h32_d128_lse'"));

  auto missing = runtime.kernelFromSpecFile("/nonexistent/spec.yaml");
  REQUIRE_FALSE(missing);
  CHECK_THAT(missing.diagnostic().str(), Catch::Contains("/nonexistent/spec.yaml"));
}

TEST_CASE("spec text errors are located", "[embed]") {
  attnjit::Jit runtime = cpuRuntime();
  auto bad = runtime.kernelFromSpecText("family: merge_attn_states\nparams:\n  dtype: f32\n  num_hedas: 4\n");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.diagnostic().str(), Catch::Contains("<spec text>:4:"));
  CHECK_THAT(bad.diagnostic().str(), Catch::Contains("num_hedas"));
}

TEST_CASE("launch arguments are checked against the kernel's promises", "[embed]") {
  attnjit::Jit runtime = cpuRuntime();
  auto kernel = runtime.kernelFromSpecText(kMergeSpec);
  REQUIRE(kernel);
  const uint64_t base = 0x7f0000000000;
  std::vector<KernelArgument> args = mergeArguments(base, 37);
  CHECK(kernel->checkLaunch({10, 4, 1}, args));

  auto message = [&](attnjit::GridDim grid, const std::vector<KernelArgument>& a) {
    attnjit::Status s = kernel->checkLaunch(grid, a);
    REQUIRE_FALSE(s);
    return s.diagnostic().message;
  };
  CHECK_THAT(message({0, 4, 1}, args), Catch::Contains("grid (0, 4, 1) has an empty dimension"));
  std::vector<KernelArgument> shorter(args.begin(), args.end() - 1);
  CHECK_THAT(message({1, 1, 1}, shorter), Catch::Contains("takes 13 arguments, got 12"));
  auto changed = [&](size_t index, KernelArgument value) {
    std::vector<KernelArgument> copy = args;
    copy[index] = value;
    return message({1, 1, 1}, copy);
  };
  CHECK_THAT(changed(0, KernelArgument::devicePointer(0)), Catch::Contains("parameter 'output'") &&
                                                               Catch::Contains("is a null pointer"));
  CHECK_THAT(changed(2, KernelArgument::devicePointer(base + 4)),
             Catch::Contains("parameter 'prefix_output'") && Catch::Contains("not 16-byte aligned"));
  CHECK_THAT(changed(7, KernelArgument::integerValue(250)),
             Catch::Contains("parameter 'o_stride_token'") && Catch::Contains("250, not a multiple of 8"));
  CHECK_THAT(changed(6, KernelArgument::realValue(3.0)), Catch::Contains("takes an integer, got a real number"));
  CHECK_THAT(changed(6, KernelArgument::integerValue(int64_t{1} << 40)), Catch::Contains("outside the 32-bit range"));
  CHECK_THAT(changed(1, KernelArgument::integerValue(64)), Catch::Contains("takes a device pointer, got an integer"));
}

TEST_CASE("cache write arguments are validated without a GPU", "[embed]") {
  attnjit::CacheWriteParams p;
  p.dtype = attnjit::ir::ScalarKind::BF16;
  p.numKvHeads = 8;
  p.headSize = 128;
  p.blockSize = 16;
  p.numTokens = 5;
  p.key = 0x10000;
  p.value = 0x20000;
  p.kvCache = 0x30000;
  p.slotMapping = 0x40000;
  p.keyStrideToken = p.valueStrideToken = 8 * 128;
  p.keyStrideHead = p.valueStrideHead = 128;
  p.kvStrideBlock = 2 * 16 * 8 * 128;
  p.kvStrideKv = 16 * 8 * 128;
  p.kvStrideToken = 8 * 128;
  p.kvStrideHead = 128;
  CHECK(attnjit::ops::validateCacheWrite(p));

  auto message = [](const attnjit::CacheWriteParams& q) {
    attnjit::Status s = attnjit::ops::validateCacheWrite(q);
    REQUIRE_FALSE(s);
    return s.diagnostic().message;
  };
  attnjit::CacheWriteParams q = p;
  q.key = 0;
  CHECK_THAT(message(q), Catch::StartsWith("cache write: parameter 'key'") && Catch::Contains("null pointer"));
  // Less aligned layouts select kernels with narrower accesses; only pointers
  // that miss the element's own alignment are refused.
  CHECK(attnjit::ops::selectCacheWriteVariant(p).kernelName() == "reshape_and_cache_bf16_kv8_d128_bs16");
  q = p;
  q.kvCache += 8;
  CHECK(attnjit::ops::validateCacheWrite(q));
  CHECK(attnjit::ops::selectCacheWriteVariant(q).cacheAlign == 8);
  q.kvCache += 1;
  CHECK_THAT(message(q), Catch::Contains("'kv_cache'") && Catch::Contains("not 2-byte aligned"));
  q = p;
  q.kvStrideHead = 0;
  CHECK_THAT(message(q), Catch::Contains("kv_stride_head (0) must be positive"));
  q = p;
  q.keyStrideHead = 100;
  CHECK(attnjit::ops::validateCacheWrite(q));
  CHECK(attnjit::ops::selectCacheWriteVariant(q).sourceAlign == 8);
  q.keyStrideHead = 101;
  CHECK(attnjit::ops::validateCacheWrite(q));
  CHECK(attnjit::ops::selectCacheWriteVariant(q).kernelName() == "reshape_and_cache_bf16_kv8_d128_bs16_align2x16");
  q = p;
  q.value += 3;
  CHECK_THAT(message(q), Catch::Contains("'value'") && Catch::Contains("not 2-byte aligned"));
  q = p;
  q.kScale = 0x50000;
  CHECK_THAT(message(q), Catch::Contains("cache format auto has no per-tensor scales"));
  q = p;
  q.cacheFormat = attnjit::compiler::KvCacheFormat::Fp8E4M3;
  CHECK_THAT(message(q), Catch::Contains("'k_scale'") && Catch::Contains("null pointer"));
  q.kScale = 0x50000;
  q.vScale = 0x50010;
  CHECK(attnjit::ops::validateCacheWrite(q));
  q = p;
  q.numKvHeads = 0;
  CHECK_THAT(message(q), Catch::StartsWith("cache write: "));
  q = p;
  q.numTokens = -1;
  CHECK_THAT(message(q), Catch::Contains("num_tokens (-1) must be between 0 and"));
  q = attnjit::CacheWriteParams{};
  q.numKvHeads = 8;
  q.headSize = 128;
  q.blockSize = 16;
  q.numTokens = 0;  // nothing to write: no pointer is needed
  CHECK(attnjit::ops::validateCacheWrite(q));
  CHECK(attnjit::ops::cacheWrite(q));
}

TEST_CASE("merge arguments are validated without a GPU", "[embed]") {
  attnjit::MergeAttnStatesParams p;
  p.dtype = attnjit::ir::ScalarKind::F16;
  p.numHeads = 32;
  p.headSize = 128;
  p.numTokens = 9;
  p.output = 0x10000;
  p.prefixOutput = 0x20000;
  p.prefixLse = 0x30000;
  p.suffixOutput = 0x40000;
  p.suffixLse = 0x50000;
  p.outputStrideToken = p.prefixStrideToken = p.suffixStrideToken = 32 * 128;
  p.outputStrideHead = p.prefixStrideHead = p.suffixStrideHead = 128;
  CHECK(attnjit::ops::validateMergeAttnStates(p));  // no LSE output
  // 16 tokens of 256-byte rows: 4 warps give each thread 32 bytes of each input.
  CHECK(attnjit::ops::selectMergeAttnStatesVariant(p).kernelName() == "merge_attn_states_f16_h32_d128_nolse");
  attnjit::MergeAttnStatesParams wide = p;
  wide.dtype = attnjit::ir::ScalarKind::F32;
  wide.headSize = 256;
  CHECK(attnjit::ops::selectMergeAttnStatesVariant(wide).numWarps == 4);
  wide.headSize = 64;
  wide.dtype = attnjit::ir::ScalarKind::BF16;
  CHECK(attnjit::ops::selectMergeAttnStatesVariant(wide).numWarps == 2);
  wide.headSize = 16;
  CHECK(attnjit::ops::selectMergeAttnStatesVariant(wide).numWarps == 1);

  attnjit::MergeAttnStatesParams q = p;
  q.suffixLse = 0;
  attnjit::Status s = attnjit::ops::validateMergeAttnStates(q);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.diagnostic().message, Catch::StartsWith("merge_attn_states: parameter 'suffix_lse'"));
  q = p;
  q.prefixStrideHead = 0;
  s = attnjit::ops::validateMergeAttnStates(q);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.diagnostic().message, Catch::Contains("prefix_stride_head (0) must be positive"));
  q = p;
  q.headSize = 0;
  CHECK_FALSE(attnjit::ops::validateMergeAttnStates(q));
}

TEST_CASE("runtime ops validate before they need a GPU", "[embed]") {
  attnjit::Jit runtime = cpuRuntime();
  attnjit::PagedAttentionParams p;
  p.numQueryHeads = 32;
  p.numKvHeads = 8;
  p.headSize = 128;
  p.blockSize = 16;
  p.numSeqs = 0;
  attnjit::Status s = runtime.pagedAttention(p);
  REQUIRE_FALSE(s);
  CHECK_THAT(s.diagnostic().message, Catch::Contains("num_seqs (0) must be at least 1"));

  // A Jit for another device takes the ops too (they run on their stream's
  // device): a bad call is refused by its arguments there as well.
  auto other = attnjit::Jit::create(deviceOption(1));
  if (other) {
    attnjit::Status invalid = other->mergeAttnStates({});
    REQUIRE_FALSE(invalid);
    CHECK_THAT(invalid.diagnostic().message, Catch::StartsWith("merge_attn_states"));
  }
}

TEST_CASE("without a driver, loading and launching report it", "[embed]") {
  if (attnjit::runtime::driverAvailable()) return;
  attnjit::Jit runtime = cpuRuntime();
  auto kernel = runtime.kernelFromSpecText(kMergeSpec);
  REQUIRE(kernel);
  attnjit::Status s = kernel->launch({1, 4, 1}, mergeArguments(0x7f0000000000, 37));
  REQUIRE_FALSE(s);
  CHECK_THAT(s.message(), Catch::Contains("CUDA driver not available"));
}

// ---- GPU ----

namespace {

std::vector<float> randomFloats(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

attnjit::runtime::DeviceBuffer upload(const void* data, size_t bytes) {
  auto buffer = attnjit::runtime::DeviceBuffer::allocate(bytes);
  REQUIRE(buffer);
  REQUIRE(buffer->copyFromHost(data, bytes));
  return std::move(*buffer);
}

}  // namespace

TEST_CASE("a kernel from spec text launches through the facade and reports load statistics", "[embed][gpu]") {
  if (!attnjit::tests::gpuPresent()) return;
  const int tokens = 37, heads = 4, headSize = 64;
  attnjit::validation::reference::MergeInputs inputs{tokens, heads, headSize, {}, {}, {}, {}};
  auto prefix = randomFloats(size_t(tokens) * heads * headSize, 1, -2, 2);
  auto suffix = randomFloats(prefix.size(), 2, -2, 2);
  auto prefixLse = randomFloats(size_t(heads) * tokens, 3, -4, 4);
  auto suffixLse = randomFloats(prefixLse.size(), 4, -4, 4);
  inputs.prefixOutput.assign(prefix.begin(), prefix.end());
  inputs.suffixOutput.assign(suffix.begin(), suffix.end());
  inputs.prefixLse.assign(prefixLse.begin(), prefixLse.end());
  inputs.suffixLse.assign(suffixLse.begin(), suffixLse.end());
  const attnjit::validation::reference::MergeOutputs expected =
      attnjit::validation::reference::referenceMergeAttnStates(inputs);

  auto runtime = attnjit::Jit::create(bypassOption());
  REQUIRE(runtime);
  auto kernel = runtime->kernelFromSpecText(kMergeSpec);
  REQUIRE(kernel);
  auto out = attnjit::runtime::DeviceBuffer::allocate(prefix.size() * 4);
  auto outLse = attnjit::runtime::DeviceBuffer::allocate(prefixLse.size() * 4);
  REQUIRE(out);
  REQUIRE(outLse);
  auto dPrefix = upload(prefix.data(), prefix.size() * 4), dSuffix = upload(suffix.data(), suffix.size() * 4);
  auto dPrefixLse = upload(prefixLse.data(), prefixLse.size() * 4);
  auto dSuffixLse = upload(suffixLse.data(), suffixLse.size() * 4);
  std::vector<KernelArgument> args = {
      KernelArgument::devicePointer(out->address()),    KernelArgument::devicePointer(outLse->address()),
      KernelArgument::devicePointer(dPrefix.address()), KernelArgument::devicePointer(dPrefixLse.address()),
      KernelArgument::devicePointer(dSuffix.address()), KernelArgument::devicePointer(dSuffixLse.address()),
      KernelArgument::integerValue(tokens)};
  for (int i = 0; i < 3; ++i) {
    args.push_back(KernelArgument::integerValue(heads * headSize));
    args.push_back(KernelArgument::integerValue(headSize));
  }
  const unsigned gridX = static_cast<unsigned>((tokens + 15) / 16);
  REQUIRE(kernel->launch({gridX, static_cast<unsigned>(heads), 1}, args));
  REQUIRE(attnjit::runtime::synchronizeContext());
  std::vector<float> got(prefix.size()), gotLse(prefixLse.size());
  REQUIRE(out->copyToHost(got.data(), got.size() * 4));
  REQUIRE(outLse->copyToHost(gotLse.data(), gotLse.size() * 4));
  double maxError = 0;
  for (size_t i = 0; i < got.size(); ++i) maxError = std::max(maxError, std::abs(got[i] - expected.output[i]));
  for (size_t i = 0; i < gotLse.size(); ++i) maxError = std::max(maxError, std::abs(gotLse[i] - expected.lse[i]));
  CHECK(maxError < 1e-4);

  const attnjit::CompileStats stats = kernel->stats();
  CHECK(stats.origin == attnjit::KernelOrigin::Compiled);
  CHECK(stats.target == runtime->target());
  CHECK(stats.llvmOptimizeMs > 0);
  CHECK(stats.loadMs > 0);
  CHECK(stats.registers > 0);
  CHECK(stats.spillBytes == 0);
  CHECK(stats.threads == 128);
}

namespace {

// An f32 cache write of `tokens` rows of heads x headSize, token-major and
// dense, into vLLM's cache [blocks, 2 (K, V), blockSize, heads, headSize].
attnjit::CacheWriteParams f32CacheWrite(int tokens, int heads, int headSize, int blockSize, uint64_t key,
                                        uint64_t value, uint64_t cache, uint64_t slots) {
  const int64_t rowElements = int64_t{heads} * headSize;
  attnjit::CacheWriteParams p;
  p.dtype = attnjit::ir::ScalarKind::F32;
  p.numKvHeads = heads;
  p.headSize = headSize;
  p.blockSize = blockSize;
  p.numTokens = tokens;
  p.key = key;
  p.value = value;
  p.kvCache = cache;
  p.slotMapping = slots;
  p.keyStrideToken = p.valueStrideToken = p.kvStrideToken = rowElements;
  p.keyStrideHead = p.valueStrideHead = p.kvStrideHead = headSize;
  p.kvStrideBlock = 2 * blockSize * rowElements;
  p.kvStrideKv = blockSize * rowElements;
  return p;
}

// The cache f32CacheWrite's call leaves: every element `sentinel` but the rows
// of the tokens with a slot (negative: padding, skipped).
std::vector<float> scattered(const std::vector<float>& key, const std::vector<float>& value,
                             const std::vector<int64_t>& slots, size_t rowElements, int blockSize, size_t elements,
                             float sentinel) {
  std::vector<float> expected(elements, sentinel);
  for (size_t t = 0; t < slots.size(); ++t) {
    if (slots[t] < 0) continue;
    const size_t block = size_t(slots[t] / blockSize), offset = size_t(slots[t] % blockSize);
    for (size_t kv = 0; kv < 2; ++kv)
      for (size_t e = 0; e < rowElements; ++e)
        expected[((block * 2 + kv) * size_t(blockSize) + offset) * rowElements + e] =
            (kv == 0 ? key : value)[t * rowElements + e];
  }
  return expected;
}

}  // namespace

TEST_CASE("the cache write op scatters rows to their slots on the GPU", "[embed][gpu]") {
  if (!attnjit::tests::gpuPresent()) return;
  const int tokens = 20, heads = 2, headSize = 64, blockSize = 16, numBlocks = 4;
  const size_t rowElements = size_t(heads) * headSize;
  auto key = randomFloats(tokens * rowElements, 11, -3, 3);
  auto value = randomFloats(tokens * rowElements, 12, -3, 3);
  std::vector<int64_t> slots(tokens);
  for (int t = 0; t < tokens; ++t) slots[t] = (t * 7 + 3) % (numBlocks * blockSize);
  slots[5] = -1;  // a padding token: skipped
  const float sentinel = 1234.5f;
  std::vector<float> cache(size_t(numBlocks) * 2 * blockSize * rowElements, sentinel);
  auto dKey = upload(key.data(), key.size() * 4), dValue = upload(value.data(), value.size() * 4);
  auto dCache = upload(cache.data(), cache.size() * 4), dSlots = upload(slots.data(), slots.size() * 8);

  const attnjit::CacheWriteParams p = f32CacheWrite(tokens, heads, headSize, blockSize, dKey.address(),
                                                    dValue.address(), dCache.address(), dSlots.address());
  auto runtime = attnjit::Jit::create();
  REQUIRE(runtime);
  REQUIRE(runtime->cacheWrite(p));
  REQUIRE(attnjit::runtime::synchronizeContext());
  REQUIRE(dCache.copyToHost(cache.data(), cache.size() * 4));
  CHECK(cache == scattered(key, value, slots, rowElements, blockSize, cache.size(), sentinel));
}

namespace {

// Eight rows scattered by `runtime`'s cache write on a stream of device
// `device`'s primary context (or on the default stream: then `device` must be
// the Jit's), called with no context current on the thread (the op takes its
// stream's, or the Jit's device's for the default stream) or with device 0's
// current: checks the rows and that the thread's current context is what it
// was before the call.
void checkCacheWriteOnDevice(attnjit::Jit& runtime, int device, bool noContextCurrent, bool defaultStream = false) {
  auto home = attnjit::runtime::activatePrimaryContext(device);
  REQUIRE(home);
  auto stream = attnjit::runtime::Stream::create();  // in `device`'s primary context
  REQUIRE(stream);
  const int tokens = 8, heads = 1, headSize = 64, blockSize = 16;
  auto key = randomFloats(size_t(tokens) * headSize, 31, -3, 3);
  auto value = randomFloats(size_t(tokens) * headSize, 32, -3, 3);
  std::vector<int64_t> slots(tokens);
  for (int t = 0; t < tokens; ++t) slots[t] = 2 * t + 1;
  std::vector<float> cache(size_t(2) * blockSize * headSize, -7.0f);
  auto dKey = upload(key.data(), key.size() * 4), dValue = upload(value.data(), value.size() * 4);
  auto dCache = upload(cache.data(), cache.size() * 4), dSlots = upload(slots.data(), slots.size() * 8);
  attnjit::CacheWriteParams p = f32CacheWrite(tokens, heads, headSize, blockSize, dKey.address(), dValue.address(),
                                              dCache.address(), dSlots.address());
  p.stream = defaultStream ? nullptr : stream->handle();
  if (noContextCurrent) {
    REQUIRE(attnjit::runtime::makeContextCurrent(nullptr));
  } else {
    REQUIRE(attnjit::runtime::activatePrimaryContext(0));
  }
  attnjit::Status written = runtime.cacheWrite(p);
  CHECK(attnjit::runtime::currentContextDevice() == (noContextCurrent ? -1 : 0));
  REQUIRE(attnjit::runtime::makeContextCurrent(*home));
  INFO(written.message());
  REQUIRE(written);
  REQUIRE(stream->synchronize());
  REQUIRE(attnjit::runtime::synchronizeContext());
  REQUIRE(dCache.copyToHost(cache.data(), cache.size() * 4));
  CHECK(cache == scattered(key, value, slots, size_t(headSize), blockSize, cache.size(), -7.0f));
}

}  // namespace

TEST_CASE("an op runs in its stream's context and leaves the caller's current context", "[embed][gpu]") {
  if (!attnjit::tests::gpuPresent()) return;
  auto runtime = attnjit::Jit::create();
  REQUIRE(runtime);
  checkCacheWriteOnDevice(*runtime, 0, true);
  checkCacheWriteOnDevice(*runtime, 0, true, true);  // the default stream: the Jit's device
}

TEST_CASE("ops run on a second GPU, from its Jit or device 0's", "[embed][gpu]") {
  if (!attnjit::tests::gpuPresent()) return;
  auto count = attnjit::runtime::deviceCount();
  REQUIRE(count);
  if (*count < 2) {
    attnjit::tests::skipTest("one GPU here: the ops on a second device need two");
    return;
  }
  const int last = *count - 1;
  auto second = attnjit::Jit::create(deviceOption(last));
  auto first = attnjit::Jit::create();
  REQUIRE(second);
  REQUIRE(first);
  checkCacheWriteOnDevice(*second, last, false);
  checkCacheWriteOnDevice(*first, last, false);  // the stream decides, not the Jit
  checkCacheWriteOnDevice(*second, last, true);
}

TEST_CASE("the merge op matches the float64 reference on the GPU", "[embed][gpu]") {
  if (!attnjit::tests::gpuPresent()) return;
  const int tokens = 50, heads = 3, headSize = 80;  // head size padded to 128 inside
  const size_t elements = size_t(tokens) * heads * headSize;
  auto prefix = randomFloats(elements, 21, -2, 2), suffix = randomFloats(elements, 22, -2, 2);
  auto prefixLse = randomFloats(size_t(heads) * tokens, 23, -5, 5);
  auto suffixLse = randomFloats(prefixLse.size(), 24, -5, 5);
  prefixLse[7] = std::numeric_limits<float>::infinity();  // an empty prefix (FA2's +inf)
  attnjit::validation::reference::MergeInputs inputs{tokens, heads, headSize, {}, {}, {}, {}};
  inputs.prefixOutput.assign(prefix.begin(), prefix.end());
  inputs.suffixOutput.assign(suffix.begin(), suffix.end());
  inputs.prefixLse.assign(prefixLse.begin(), prefixLse.end());
  inputs.suffixLse.assign(suffixLse.begin(), suffixLse.end());
  const attnjit::validation::reference::MergeOutputs expected =
      attnjit::validation::reference::referenceMergeAttnStates(inputs);

  auto dPrefix = upload(prefix.data(), elements * 4), dSuffix = upload(suffix.data(), elements * 4);
  auto dPrefixLse = upload(prefixLse.data(), prefixLse.size() * 4);
  auto dSuffixLse = upload(suffixLse.data(), suffixLse.size() * 4);
  auto out = attnjit::runtime::DeviceBuffer::allocate(elements * 4);
  auto outLse = attnjit::runtime::DeviceBuffer::allocate(prefixLse.size() * 4);
  REQUIRE(out);
  REQUIRE(outLse);
  attnjit::MergeAttnStatesParams p;
  p.dtype = attnjit::ir::ScalarKind::F32;
  p.numHeads = heads;
  p.headSize = headSize;
  p.numTokens = tokens;
  p.output = out->address();
  p.outputLse = outLse->address();
  p.prefixOutput = dPrefix.address();
  p.prefixLse = dPrefixLse.address();
  p.suffixOutput = dSuffix.address();
  p.suffixLse = dSuffixLse.address();
  p.outputStrideToken = p.prefixStrideToken = p.suffixStrideToken = heads * headSize;
  p.outputStrideHead = p.prefixStrideHead = p.suffixStrideHead = headSize;
  auto stream = attnjit::runtime::Stream::create();
  REQUIRE(stream);
  p.stream = stream->handle();
  auto runtime = attnjit::Jit::create();
  REQUIRE(runtime);
  REQUIRE(runtime->mergeAttnStates(p));
  REQUIRE(stream->synchronize());
  std::vector<float> got(elements), gotLse(prefixLse.size());
  REQUIRE(out->copyToHost(got.data(), elements * 4));
  REQUIRE(outLse->copyToHost(gotLse.data(), gotLse.size() * 4));
  double maxError = 0;
  for (size_t i = 0; i < elements; ++i) maxError = std::max(maxError, std::abs(got[i] - expected.output[i]));
  for (size_t i = 0; i < gotLse.size(); ++i) maxError = std::max(maxError, std::abs(gotLse[i] - expected.lse[i]));
  CHECK(maxError < 1e-4);
}
