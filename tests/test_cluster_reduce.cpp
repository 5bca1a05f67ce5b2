// Thread-block clusters in the tile IR: cluster_reduce_max / cluster_reduce_sum
// (ir/Ops.def) in the verifier, the interpreter (a cluster's programs on host
// threads, meeting at each op) and codegen (distributed shared memory, sm_90+),
// and [gpu] the device's results against the interpreter's, bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "compiler/driver/CompileDriver.h"
#include "compiler/driver/DeviceTarget.h"
#include "compiler/kernels/UnifiedAttention.h"
#include "compiler/validation/AttentionGpu.h"
#include "ir/Builder.h"
#include "ir/Interpreter.h"
#include "ir/KernelAttributes.h"
#include "ir/Verifier.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"
#include "runtime/Module.h"
#include "runtime/Stream.h"
#include "tests/test_attention_checks.h"
#include "tests/test_tools.h"

namespace support = attnjit::support;

using namespace attnjit;
using namespace attnjit::ir;
namespace validation = attnjit::validation;

namespace {

constexpr int64_t kRows = 16, kCols = 32;

// Program (x, z) of a grid (X, 1, Z) loads its own [16, 32] tile of `x` (tile
// index x·Z + z), all-reduces it across its cluster and stores the cluster's sum
// and maximum at its own tile of `sum` and `max`. With `skipRank` >= 0 the
// program of that rank skips the reductions (control flow that is not uniform
// across the cluster).
std::unique_ptr<Kernel> clusterKernel(int clusterSize, int numWarps = 4, int skipRank = -1) {
  auto kernel = std::make_unique<Kernel>("cluster_sums");
  Value* x = kernel->addParameter(Type::pointer(ScalarKind::F32), "x");
  Value* sum = kernel->addParameter(Type::pointer(ScalarKind::F32), "sum");
  Value* max = kernel->addParameter(Type::pointer(ScalarKind::F32), "max");
  setKernelAttribute(*kernel, KernelAttribute::NumWarps, numWarps);
  setKernelAttribute(*kernel, KernelAttribute::ClusterSize, clusterSize);
  Builder b(*kernel);
  const Type i32 = Type::scalar(ScalarKind::I32);
  Value* z = b.programId(2, "z");
  Value* tileIndex = b.add(b.mul(b.programId(0), b.numPrograms(2)), z, "tile_index");
  Value* rows = b.broadcast(b.mul(b.expandDims(b.arange(0, kRows), 1), b.constInt(kCols, Type::tile({kRows, 1}, i32))),
                            {kRows, kCols});
  Value* offsets = b.add(b.add(rows, b.broadcast(b.expandDims(b.arange(0, kCols), 0), {kRows, kCols})),
                         b.splat(b.mul(tileIndex, b.i32(kRows * kCols)), {kRows, kCols}), "offsets");
  auto at = [&](Value* base) { return b.addPtr(b.splat(base, {kRows, kCols}), offsets); };
  Value* tile = b.load(at(x), nullptr, nullptr, "tile");
  if (skipRank >= 0) {
    Value* rank = b.rem(z, b.i32(clusterSize), "rank");
    b.beginIf(b.cmp(CmpPredicate::Ne, rank, b.i32(skipRank)));
  }
  b.store(at(sum), b.clusterReduce(Opcode::ClusterReduceSum, tile, "cluster_sum"));
  b.store(at(max), b.clusterReduce(Opcode::ClusterReduceMax, tile, "cluster_max"));
  if (skipRank >= 0) b.endIf();
  REQUIRE(b.finish().isOk());
  return kernel;
}

// Random inputs with a few exact zeros of both signs, infinities and a NaN, so
// that the combination order and NaN propagation show.
std::vector<float> inputs(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (float& value : v) value = dist(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 24) - 12);
  v[5] = -INFINITY;
  v[kRows * kCols + 5] = -INFINITY;  // the same element of the next program
  v[77] = NAN;
  return v;
}

// The cluster's sum in rank order (f32 additions, ((t0 + t1) + t2) + ...) and
// its NaN-propagating maximum, for every tile.
void expected(const std::vector<float>& x, int tiles, int clusterSize, std::vector<float>& sum,
              std::vector<float>& max) {
  const size_t tileElements = static_cast<size_t>(kRows * kCols);
  sum.assign(x.size(), 0.0f);
  max.assign(x.size(), 0.0f);
  for (int t = 0; t < tiles; ++t) {
    const int first = t / clusterSize * clusterSize;
    for (size_t e = 0; e < tileElements; ++e) {
      float s = x[first * tileElements + e], m = s;
      for (int r = 1; r < clusterSize; ++r) {
        const float v = x[(first + r) * tileElements + e];
        s += v;
        m = std::isnan(m) || std::isnan(v) ? NAN : (m < v ? v : m);
      }
      sum[t * tileElements + e] = s;
      max[t * tileElements + e] = m;
    }
  }
}

// A GPU with thread-block clusters (sm_90 and newer); otherwise the test is skipped.
bool clusterGpuPresent() {
  if (!tests::gpuPresent()) return false;
  auto target = compiler::localTarget();
  REQUIRE(target.isOk());
  if (std::stoi(target->substr(3, 2)) >= 90) return true;
  tests::skipTest("thread-block clusters need sm_90 or newer, this GPU is " + *target);
  return false;
}

bool sameBits(float a, float b) { return std::isnan(a) ? std::isnan(b) : a == b && std::signbit(a) == std::signbit(b); }

int mismatches(const std::vector<float>& got, const std::vector<float>& want) {
  int n = 0;
  for (size_t i = 0; i < got.size(); ++i) n += !sameBits(got[i], want[i]);
  return n;
}

struct Interpreted {
  support::Status status;
  std::vector<float> sum, max;
};

Interpreted interpret(const Kernel& kernel, LaunchGrid grid, const std::vector<float>& x) {
  Interpreted result;
  std::vector<float> in = x;
  result.sum.assign(x.size(), -1.0f);
  result.max.assign(x.size(), -1.0f);
  InterpreterMemory memory;
  const uint64_t ax = memory.map(in.data(), in.size() * sizeof(float), "x");
  const uint64_t asum = memory.map(result.sum.data(), result.sum.size() * sizeof(float), "sum");
  const uint64_t amax = memory.map(result.max.data(), result.max.size() * sizeof(float), "max");
  result.status = interpretKernel(kernel, grid, {PointerArg{ax}, PointerArg{asum}, PointerArg{amax}}, memory);
  return result;
}

}  // namespace

TEST_CASE("cluster_reduce ops all-reduce in rank order across a cluster's programs", "[interp][cluster]") {
  for (int clusterSize : {2, 4, 8, 16}) {
    INFO("cluster_size " << clusterSize);
    auto kernel = clusterKernel(clusterSize);
    const LaunchGrid grid{3, 1, 2 * clusterSize};
    const int tiles = static_cast<int>(grid.x * grid.z);
    const std::vector<float> x = inputs(static_cast<size_t>(tiles * kRows * kCols), 11 + clusterSize);
    Interpreted run = interpret(*kernel, grid, x);
    INFO(run.status.message());
    REQUIRE(run.status.isOk());
    std::vector<float> sum, max;
    expected(x, tiles, clusterSize, sum, max);
    CHECK(mismatches(run.sum, sum) == 0);
    CHECK(mismatches(run.max, max) == 0);
    CHECK(std::isnan(run.sum[77]));
    CHECK(std::isnan(run.max[77]));
  }
}

TEST_CASE("the interpreter reports clusters whose programs do not all meet, and grids they do not divide",
          "[interp][cluster]") {
  SECTION("one rank skips the reductions") {
    auto kernel = clusterKernel(4, 4, /*skipRank=*/2);
    const std::vector<float> x = inputs(static_cast<size_t>(8 * kRows * kCols), 3);
    Interpreted run = interpret(*kernel, LaunchGrid{1, 1, 8}, x);
    REQUIRE(!run.status.isOk());
    CHECK_THAT(run.status.message(), Catch::Contains("cluster_reduce_sum") &&
                                         Catch::Contains("ended without reaching it"));
  }
  SECTION("grid z not a multiple of the cluster size") {
    auto kernel = clusterKernel(4);
    const std::vector<float> x = inputs(static_cast<size_t>(6 * kRows * kCols), 3);
    Interpreted run = interpret(*kernel, LaunchGrid{1, 1, 6}, x);
    REQUIRE(!run.status.isOk());
    CHECK_THAT(run.status.message(), Catch::Contains("not a multiple of its cluster_size (4)"));
  }
}

TEST_CASE("the verifier accepts cluster_reduce only on f32 tiles of cluster kernels", "[verifier][cluster]") {
  SECTION("no clusters") {
    auto kernel = clusterKernel(2);
    setKernelAttribute(*kernel, KernelAttribute::ClusterSize, 1);
    support::Status status = verifyKernel(*kernel);
    REQUIRE(!status.isOk());
    CHECK_THAT(status.message(), Catch::Contains("'cluster_reduce_sum'") && Catch::Contains("cluster_size of 2"));
  }
  SECTION("more than the 16 any GPU runs") {
    auto kernel = clusterKernel(2);
    setKernelAttribute(*kernel, KernelAttribute::ClusterSize, 32);
    support::Status status = verifyKernel(*kernel);
    REQUIRE(!status.isOk());
    CHECK_THAT(status.message(), Catch::Contains("cluster_size"));
  }
  SECTION("integers") {
    Kernel kernel("cluster_ints");
    setKernelAttribute(kernel, KernelAttribute::ClusterSize, 2);
    Builder b(kernel);
    b.clusterReduce(Opcode::ClusterReduceMax, b.arange(0, 32));
    support::Status status = b.finish();
    REQUIRE(!status.isOk());
    CHECK_THAT(status.message(), Catch::Contains("requires a tile of f32"));
  }
}

TEST_CASE("cluster kernels lower to distributed shared memory with the cluster in the PTX", "[codegen][cluster]") {
  auto kernel = clusterKernel(4, 8);
  compiler::CompileOptions options;
  options.target = "sm_90a";
  auto compiled = compiler::compileKernel(*kernel, options);
  INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
  REQUIRE(compiled.isOk());
  const std::string& ptx = compiled->ptx;
  CHECK(ptx.find(".reqnctapercluster 1, 1, 4") != std::string::npos);
  // Two reductions: each reads a thread's words in vectors of up to four from
  // each of the 4 CTAs, and meets the cluster twice.
  const int wordsPerThread = static_cast<int>(kRows * kCols / (8 * 32));
  const int remoteLoads = tests::countOf(ptx, "ld.shared::cluster");
  CHECK(remoteLoads >= 2 * 4 * ((wordsPerThread + 3) / 4));
  CHECK(remoteLoads % (2 * 4) == 0);
  CHECK(tests::countOf(ptx, "ld.shared::cluster.b32") == 0);
  CHECK(tests::countOf(ptx, "barrier.cluster.arrive") == 4);
  CHECK(tests::countOf(ptx, "barrier.cluster.wait") == 4);
  CHECK(tests::countOf(ptx, "mapa.shared::cluster") >= 4);
  CHECK(compiled->sharedMemoryBytes >= wordsPerThread * 256 * 4);
  tests::checkAssembles(ptx, "sm_90a");

  options.target = "sm_80";
  auto refused = compiler::compileKernel(*kernel, options);
  REQUIRE(!refused.isOk());
  CHECK_THAT(refused.diagnostic().str(), Catch::Contains("thread-block clusters need sm_90 or newer, not sm_80"));
}

TEST_CASE("gpu: cluster_reduce on the device gives the interpreter's bits", "[gpu][cluster]") {
  if (!clusterGpuPresent()) return;
  for (int clusterSize : {2, 8, 16}) {  // 16: a non-portable cluster
    INFO("cluster_size " << clusterSize);
    auto kernel = clusterKernel(clusterSize);
    const LaunchGrid grid{5, 1, 3 * clusterSize};
    const size_t n = static_cast<size_t>(grid.x * grid.z * kRows * kCols);
    const std::vector<float> x = inputs(n, 29 + clusterSize);
    Interpreted reference = interpret(*kernel, grid, x);
    REQUIRE(reference.status.isOk());
    compiler::CompileOptions options;
    options.target = compiler::localTarget().value();
    auto compiled = compiler::compileKernel(*kernel, options);
    INFO((compiled.isOk() ? std::string() : compiled.diagnostic().str()));
    REQUIRE(compiled.isOk());
    const tests::GpuKernel loaded = tests::loadOnGpu(*compiled, "cluster.ptx");
    auto in = runtime::DeviceBuffer::allocate(n * sizeof(float));
    auto sum = runtime::DeviceBuffer::allocate(n * sizeof(float));
    auto max = runtime::DeviceBuffer::allocate(n * sizeof(float));
    REQUIRE((in.isOk() && sum.isOk() && max.isOk()));
    REQUIRE(in->copyFromHost(x.data(), n * sizeof(float)).isOk());
    REQUIRE(sum->fill(0xFF).isOk());  // NaN poison
    REQUIRE(max->fill(0xFF).isOk());
    void* params[] = {in->kernelArgument(), sum->kernelArgument(), max->kernelArgument()};
    runtime::LaunchConfig config;
    config.grid = {static_cast<unsigned>(grid.x), 1, static_cast<unsigned>(grid.z)};
    config.block = {static_cast<unsigned>(compiled->numThreads), 1, 1};
    config.dynamicSharedBytes = static_cast<unsigned>(compiled->sharedMemoryBytes);
    support::Status launched = loaded.function.launch(config, params);
    INFO(launched.message());
    REQUIRE(launched.isOk());
    REQUIRE(runtime::synchronizeStream(nullptr).isOk());
    std::vector<float> gotSum(n), gotMax(n);
    REQUIRE(sum->copyToHost(gotSum.data(), n * sizeof(float)).isOk());
    REQUIRE(max->copyToHost(gotMax.data(), n * sizeof(float)).isOk());
    CHECK(mismatches(gotSum, reference.sum) == 0);
    CHECK(mismatches(gotMax, reference.max) == 0);
  }
}

// ---- unified attention's split-KV inside a cluster (cluster_split) ----

namespace {

compiler::UnifiedAttentionConfig clusterAttention(int clusterSplit, ScalarKind dtype = ScalarKind::BF16) {
  compiler::UnifiedAttentionConfig c;
  c.dtype = dtype;
  c.numQueryHeads = 8;
  c.numKvHeads = 2;
  c.headSize = 80;  // padded to 128: the rank's column share includes padding
  c.blockSize = 16;
  c.causal = true;
  c.clusterSplit = clusterSplit;
  return c;
}

}  // namespace

TEST_CASE("cluster split: segments merged in the cluster agree with the reference", "[attention][cluster]") {
  for (int clusterSplit : {2, 8}) {
    compiler::BatchShape fixed = tests::mixedAttentionBatch(21);
    compiler::BatchShape perSequence = tests::mixedAttentionBatch(22);
    perSequence.numSegments = clusterSplit;  // each sequence's range cut in cluster_split segments on the GPU
    perSequence.segmentTiles = 1;
    for (const compiler::BatchShape& shape : {fixed, perSequence}) {
      compiler::UnifiedAttentionConfig c = clusterAttention(clusterSplit);
      tests::runAndCheck(c, shape);
      c.outputLse = true;
      c.sinks = true;          // joins in segment 0 only
      c.slidingWindow = 45;    // leaves the long decode's first segments empty
      tests::runAndCheck(c, shape, /*afterPasses=*/true);
      compiler::UnifiedAttentionConfig quantized = clusterAttention(clusterSplit, ScalarKind::F16);
      quantized.kvCacheFormat = compiler::KvCacheFormat::Int8PerTokenHead;
      quantized.causal = false;
      quantized.outputLse = true;
      tests::runAndCheck(quantized, shape);
    }
  }
}

TEST_CASE("cluster split: names, parameters, cluster attribute and validation", "[attention][cluster]") {
  compiler::UnifiedAttentionConfig c = clusterAttention(4);
  CHECK(c.kernelName() == "unified_attention_bf16_h8kv2_d80_bs16_causal_cl4");
  auto kernel = compiler::buildUnifiedAttention(c);
  REQUIRE(kernel.isOk());
  CHECK(kernelAttribute(**kernel, KernelAttribute::ClusterSize) == 4);
  const Kernel& k = **kernel;
  CHECK(k.parameter(0)->name() == "out");
  CHECK(k.parameter(k.numParameters() - 1)->name() == "segment_tiles");
  for (size_t i = 0; i < k.numParameters(); ++i) CHECK(k.parameter(i)->name().rfind("segm_", 0) == std::string::npos);

  auto errorOf = [](compiler::UnifiedAttentionConfig config) {
    support::Status status = config.validate();
    REQUIRE(!status.isOk());
    return status.message();
  };
  compiler::UnifiedAttentionConfig bad = clusterAttention(1);
  CHECK_THAT(errorOf(bad), Catch::Contains("cluster_split (1) must be 0 (off) or a cluster of 2 to 16 programs"));
  bad.clusterSplit = 32;
  CHECK_THAT(errorOf(bad), Catch::Contains("cluster_split (32)"));
  bad = clusterAttention(2);
  bad.splitKv = true;
  CHECK_THAT(errorOf(bad), Catch::Contains("choose one"));
  bad = clusterAttention(2);
  bad.warpSpecialize = true;
  CHECK_THAT(errorOf(bad), Catch::Contains("unsupported with warp_specialize"));

  // PTX: ptxas accepts it for sm_90a; sm_80 has no clusters.
  c.headSize = 128;
  c.numQueryHeads = 32;
  c.numKvHeads = 8;
  compiler::CompiledKernel compiled = tests::compileAttention(c, "sm_90a");
  CHECK(compiled.ptx.find(".reqnctapercluster 1, 1, 4") != std::string::npos);
  tests::checkAssembles(compiled.ptx, "sm_90a");
  CHECK_THAT(tests::compileAttentionError(c, "sm_80"), Catch::Contains("thread-block clusters need sm_90 or newer"));
}

TEST_CASE("GPU: split-KV inside a cluster agrees with float64", "[gpu][cluster][attention]") {
  if (!clusterGpuPresent()) return;
  compiler::BatchShape shape;
  shape.queryLens = {1, 37, 1, 130, 5, 1};
  shape.contextLens = {777, 0, 300, 61, 1, 4000};
  shape.seed = 31;
  for (int clusterSplit : {2, 4, 8, 16})
    for (int tileSize : {32, 128}) {
      compiler::UnifiedAttentionConfig c = clusterAttention(clusterSplit);
      c.numQueryHeads = 32;
      c.numKvHeads = 8;
      c.headSize = 128;
      c.tileSize = tileSize;
      c.outputLse = clusterSplit == 4;
      c.sinks = clusterSplit == 8;
      INFO(c.kernelName() << " on " << shape.str());
      auto result = validation::runUnifiedAttentionGpu(c, shape, {});
      INFO((result.isOk() ? result->check.detail : result.diagnostic().str()));
      REQUIRE(result.isOk());
      CHECK(result->check.passed);
      compiler::UnifiedAttentionConfig quantized = c;
      quantized.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
      auto fp8 = validation::runUnifiedAttentionGpu(quantized, shape, {});
      INFO((fp8.isOk() ? fp8->check.detail : fp8.diagnostic().str()));
      REQUIRE(fp8.isOk());
      CHECK(fp8->check.passed);
    }
}
