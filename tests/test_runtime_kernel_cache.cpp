// The kernel cache's logic with a fake compiler and a fake loader (no GPU): single flight,
// independent keys, failures, the disk round trip, damaged entries, contexts, bypass.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "codegen/Codegen.h"
#include "compiler/driver/Jit.h"
#include "compiler/spec/VariantKernel.h"
#include "runtime/KernelCache.h"
#include "runtime/Sha256.h"
#include "test_runtime_fixtures.h"

// libattnjit.so's version (cmake/SharedLibrary.cmake).
extern "C" const char* attnjit_version();

using namespace attnjit::runtime;
using attnjit::support::Status;
namespace support = attnjit::support;
using attnjit::runtime::testing::TempDirectory;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

support::Status fakeError(const std::string& message) { return support::Status::error({"fake", 0, 0}, message); }

// Stands in for the driver: "links" PTX by prefixing it, "loads" any cubin that does not
// start with "BAD", and counts everything.
class FakeLoader final : public KernelLoader {
 public:
  struct Counters {
    std::atomic<int> links{0};
    std::atomic<int> loads{0};
    std::atomic<int> liveModules{0};
    std::atomic<std::uintptr_t> context{0x1000};
    std::string toolchain;  // toolchainIdentity(); set while no request is running
  };

  explicit FakeLoader(std::shared_ptr<Counters> counters) : counters_(std::move(counters)) {}

  support::Expected<ContextHandle> currentContext() override {
    return reinterpret_cast<ContextHandle>(counters_->context.load());
  }

  support::Expected<std::vector<std::uint8_t>> linkPtx(const std::string& ptx, const std::string& ptxName) override {
    ++counters_->links;
    if (contains(ptx, "syntax error")) return fakeError(ptxName + ": ptxas: syntax error");
    std::string cubin = "CUBIN:" + ptx;
    return std::vector<std::uint8_t>(cubin.begin(), cubin.end());
  }

  support::Expected<LoadedModule> load(const std::vector<std::uint8_t>& cubin, const std::string& entryName) override {
    ++counters_->loads;
    if (std::string(cubin.begin(), cubin.end()).rfind("BAD", 0) == 0) return fakeError("invalid image");
    auto counters = counters_;
    ++counters->liveModules;
    std::shared_ptr<void> module(new int(0), [counters](void* p) {
      --counters->liveModules;
      delete static_cast<int*>(p);
    });
    auto handle = reinterpret_cast<void*>(std::uintptr_t(0x10000) + std::uintptr_t(counters_->loads.load()));
    return LoadedModule{Function(handle, entryName), module};
  }

  std::string toolchainIdentity() override { return counters_->toolchain; }

 private:
  std::shared_ptr<Counters> counters_;
};

struct Fixture {
  TempDirectory temp;
  std::shared_ptr<FakeLoader::Counters> counters = std::make_shared<FakeLoader::Counters>();

  std::unique_ptr<KernelCache> makeCache(bool bypass = false) {
    return std::make_unique<KernelCache>(std::make_unique<FakeLoader>(counters), DiskCache(temp.path()), bypass);
  }
};

CompiledKernel ptxKernel(const std::string& name) {
  CompiledKernel kernel;
  kernel.entryName = name;
  kernel.ptx = ".entry " + name + " {}";
  kernel.metadata = {{"num_warps", "4"}};
  return kernel;
}

// Lets N threads start at once.
class StartingGate {
 public:
  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    opened_.wait(lock, [&] { return open_; });
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
};

}  // namespace

TEST_CASE("kernel cache: 16 threads asking for one key compile it once", "[runtime]") {
  Fixture fixture;
  auto cache = fixture.makeCache();
  std::atomic<int> compiles{0};
  StartingGate gate;
  std::vector<const LoadedKernel*> results(16, nullptr);
  std::vector<std::thread> threads;
  for (int i = 0; i < 16; ++i) {
    threads.emplace_back([&, i] {
      gate.wait();
      auto kernel = cache->getOrCompile("same key", [&]() -> support::Expected<CompiledKernel> {
        ++compiles;
        // Long enough for every other thread to arrive while this compile is in flight.
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        return ptxKernel("attention");
      });
      if (kernel) results[i] = kernel->get();
    });
  }
  gate.open();
  for (auto& thread : threads) thread.join();

  CHECK(compiles == 1);
  CHECK(fixture.counters->links == 1);
  CHECK(fixture.counters->loads == 1);
  for (const LoadedKernel* result : results) {
    REQUIRE(result != nullptr);
    CHECK(result == results[0]);
  }
  CHECK(results[0]->function.name() == "attention");
  CHECK(results[0]->origin == LoadedKernel::Origin::Compiled);
  KernelCache::Stats stats = cache->stats();
  CHECK(stats.compiles == 1);
  CHECK(stats.memoryHits == 15);
  CHECK(stats.diskMisses == 1);
}

TEST_CASE("kernel cache: different keys compile independently and concurrently", "[runtime]") {
  Fixture fixture;
  auto cache = fixture.makeCache();
  // Key A's compile waits until key B's compile has started: a cache that serialized
  // compiles across keys would time out here.
  std::mutex mutex;
  std::condition_variable changed;
  bool secondStarted = false;
  support::Status firstWaitResult = support::Status::ok();
  std::thread first([&] {
    auto kernel = cache->getOrCompile("key A", [&]() -> support::Expected<CompiledKernel> {
      std::unique_lock<std::mutex> lock(mutex);
      if (!changed.wait_for(lock, std::chrono::seconds(10), [&] { return secondStarted; })) {
        return fakeError("key B never started compiling");
      }
      return ptxKernel("kernel_a");
    });
    firstWaitResult = kernel.status();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto second = cache->getOrCompile("key B", [&]() -> support::Expected<CompiledKernel> {
    {
      std::lock_guard<std::mutex> lock(mutex);
      secondStarted = true;
    }
    changed.notify_all();
    return ptxKernel("kernel_b");
  });
  first.join();
  CHECK(firstWaitResult.isOk());
  REQUIRE(second.isOk());
  CHECK((*second)->function.name() == "kernel_b");
  CHECK(cache->stats().compiles == 2);

  // Eight more keys from eight threads: eight compiles, eight distinct kernels.
  std::vector<std::thread> threads;
  std::vector<std::string> names(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto kernel = cache->getOrCompile("key " + std::to_string(i), [i] {
        return support::Expected<CompiledKernel>(ptxKernel("k" + std::to_string(i)));
      });
      if (kernel) names[i] = (*kernel)->function.name();
    });
  }
  for (auto& thread : threads) thread.join();
  for (int i = 0; i < 8; ++i) CHECK(names[i] == "k" + std::to_string(i));
  CHECK(cache->stats().compiles == 10);
}

TEST_CASE("kernel cache: a failed compile reaches every waiter and is retried later", "[runtime]") {
  Fixture fixture;
  auto cache = fixture.makeCache();
  std::atomic<int> compiles{0};
  StartingGate gate;
  std::vector<std::string> messages(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      gate.wait();
      auto kernel = cache->getOrCompile("failing", [&]() -> support::Expected<CompiledKernel> {
        ++compiles;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        return fakeError("unsupported head size 7");
      });
      messages[i] = kernel.isOk() ? "ok" : kernel.status().message();
    });
  }
  gate.open();
  for (auto& thread : threads) thread.join();
  CHECK(compiles == 1);
  for (const std::string& message : messages) CHECK(message == "fake: error: unsupported head size 7");
  CHECK(cache->stats().compileFailures == 1);

  auto retried = cache->getOrCompile("failing", [&] {
    ++compiles;
    return support::Expected<CompiledKernel>(ptxKernel("fixed"));
  });
  REQUIRE(retried.isOk());
  CHECK(compiles == 2);
  CHECK((*retried)->function.name() == "fixed");

  // Errors from the link step and from a throwing compile are reported the same way.
  auto badPtx = cache->getOrCompile("bad ptx", [] {
    CompiledKernel kernel = ptxKernel("broken");
    kernel.ptx = "syntax error";
    return support::Expected<CompiledKernel>(kernel);
  });
  REQUIRE_FALSE(badPtx.isOk());
  CHECK(badPtx.status().message() == "fake: error: broken.ptx: ptxas: syntax error");
  auto throwing = cache->getOrCompile(
      "throws", []() -> support::Expected<CompiledKernel> { throw std::runtime_error("bad alloc"); });
  REQUIRE_FALSE(throwing.isOk());
  CHECK(contains(throwing.status().message(), "kernel compile for key 'throws' threw: bad alloc"));
  auto unnamed = cache->getOrCompile("unnamed", [] { return support::Expected<CompiledKernel>(ptxKernel("")); });
  REQUIRE_FALSE(unnamed.isOk());
  CHECK(contains(unnamed.status().message(), "named no entry point"));
  CHECK(cache->getOrCompile("throws", [] { return support::Expected<CompiledKernel>(ptxKernel("ok")); }).isOk());
}

TEST_CASE("kernel cache: a second process finds the kernel on disk", "[runtime]") {
  Fixture fixture;
  {
    auto cache = fixture.makeCache();
    auto kernel = cache->getOrCompile("persist", [] { return support::Expected<CompiledKernel>(ptxKernel("decode")); });
    REQUIRE(kernel.isOk());
    CHECK(fixture.counters->links == 1);
  }
  // A fresh cache: nothing in memory, same directory.
  auto cache = fixture.makeCache();
  int compiles = 0;
  auto kernel = cache->getOrCompile("persist", [&] {
    ++compiles;
    return support::Expected<CompiledKernel>(ptxKernel("decode"));
  });
  REQUIRE(kernel.isOk());
  CHECK(compiles == 0);
  CHECK(fixture.counters->links == 1);
  CHECK((*kernel)->origin == LoadedKernel::Origin::DiskCache);
  CHECK((*kernel)->function.name() == "decode");
  CHECK((*kernel)->ptx == ".entry decode {}");
  CHECK((*kernel)->metadata.at("num_warps") == "4");
  CHECK((*kernel)->metadata.at(KernelCache::kEntryNameKey) == "decode");
  CHECK(cache->stats().diskHits == 1);

  // A given cubin is used as is (no link step) and stored too.
  auto withCubin = cache->getOrCompile("prebuilt", [] {
    CompiledKernel prebuilt = ptxKernel("prebuilt");
    prebuilt.cubin = {'E', 'L', 'F'};
    return support::Expected<CompiledKernel>(prebuilt);
  });
  REQUIRE(withCubin.isOk());
  CHECK(fixture.counters->links == 1);
  auto stored = DiskCache(fixture.temp.path()).load("prebuilt");
  REQUIRE(stored.hit());
  CHECK(stored.entry->cubin == std::vector<std::uint8_t>{'E', 'L', 'F'});
}

TEST_CASE("kernel cache: a damaged or unloadable disk entry is recompiled and replaced", "[runtime]") {
  Fixture fixture;
  std::vector<std::string> logs;
  {
    auto cache = fixture.makeCache();
    REQUIRE(cache->getOrCompile("damaged", [] { return support::Expected<CompiledKernel>(ptxKernel("k")); }).isOk());
  }
  DiskCache disk(fixture.temp.path());
  const fs::path entry = disk.entryPath("damaged");
  fs::resize_file(entry, fs::file_size(entry) - 3);

  auto cache = fixture.makeCache();
  cache->setLogSink([&](const std::string& line) { logs.push_back(line); });
  int compiles = 0;
  auto compile = [&] {
    ++compiles;
    return support::Expected<CompiledKernel>(ptxKernel("k"));
  };
  REQUIRE(cache->getOrCompile("damaged", compile).isOk());
  CHECK(compiles == 1);
  CHECK(contains(cache->stats().lastDiskMissReason, "corrupt entry"));
  REQUIRE(logs.size() == 1);
  CHECK(contains(logs[0], "attnjit: kernel cache: disk miss: corrupt entry"));
  CHECK(disk.load("damaged").hit());

  // An intact entry whose cubin the driver rejects (another GPU, a driver change).
  CacheEntry rejected{{'B', 'A', 'D'}, "ptx", {{KernelCache::kEntryNameKey, "k"}}};
  REQUIRE(disk.store("rejected", rejected));
  REQUIRE(cache->getOrCompile("rejected", compile).isOk());
  CHECK(compiles == 2);
  CHECK(contains(cache->stats().lastDiskMissReason, "cached cubin did not load: invalid image"));
  auto replaced = disk.load("rejected");
  REQUIRE(replaced.hit());
  CHECK(replaced.entry->cubin != rejected.cubin);
}

TEST_CASE("kernel cache: kernels are cached per context", "[runtime]") {
  Fixture fixture;
  auto cache = fixture.makeCache();
  auto first = cache->getOrCompile("ctx", [] { return support::Expected<CompiledKernel>(ptxKernel("k")); });
  fixture.counters->context = 0x2000;
  auto second = cache->getOrCompile("ctx", [] { return support::Expected<CompiledKernel>(ptxKernel("k")); });
  REQUIRE(first.isOk());
  REQUIRE(second.isOk());
  // The second context loads its own module (from the disk entry the first one wrote).
  CHECK(first->get() != second->get());
  CHECK(fixture.counters->loads == 2);
  CHECK((*second)->origin == LoadedKernel::Origin::DiskCache);
  fixture.counters->context = 0x1000;
  auto again = cache->getOrCompile("ctx", [] { return support::Expected<CompiledKernel>(ptxKernel("k")); });
  REQUIRE(again.isOk());
  CHECK(again->get() == first->get());
}

TEST_CASE("kernel cache: modules unload when neither the cache nor a caller holds them", "[runtime]") {
  Fixture fixture;
  auto cache = fixture.makeCache();
  auto kernel = cache->getOrCompile("lifetime", [] { return support::Expected<CompiledKernel>(ptxKernel("k")); });
  REQUIRE(kernel.isOk());
  CHECK(fixture.counters->liveModules == 1);
  cache->clearMemory();
  CHECK(fixture.counters->liveModules == 1);  // the caller still holds it
  kernel = support::Expected<std::shared_ptr<const LoadedKernel>>(support::Status::error({}, "dropped"));
  CHECK(fixture.counters->liveModules == 0);
}

TEST_CASE("kernel cache: bypass (ATTNJIT_CACHE_DISABLE) compiles every time and writes nothing", "[runtime]") {
  Fixture fixture;
  auto cache = fixture.makeCache(/*bypass=*/true);
  int compiles = 0;
  auto compile = [&] {
    ++compiles;
    return support::Expected<CompiledKernel>(ptxKernel("k"));
  };
  REQUIRE(cache->getOrCompile("bypassed", compile).isOk());
  REQUIRE(cache->getOrCompile("bypassed", compile).isOk());
  CHECK(compiles == 2);
  CHECK(fs::is_empty(fixture.temp.path()));
  CHECK(cache->stats().memoryHits == 0);
}

TEST_CASE("kernel cache: 32 threads asking for a mix of 50 kernels compile each once", "[runtime]") {
  constexpr int kThreads = 32;
  constexpr int kKeys = 50;
  Fixture fixture;
  auto cache = fixture.makeCache();
  std::array<std::atomic<int>, kKeys> compiles{};
  std::array<std::atomic<const LoadedKernel*>, kKeys> firstResult{};
  std::atomic<int> wrongResults{0};
  StartingGate gate;
  std::vector<std::thread> threads;
  for (int thread = 0; thread < kThreads; ++thread) {
    threads.emplace_back([&, thread] {
      // Every thread asks for every key twice, in its own order.
      std::vector<int> order;
      for (int round = 0; round < 2; ++round)
        for (int key = 0; key < kKeys; ++key) order.push_back(key);
      std::mt19937 random(static_cast<unsigned>(thread) * 7919u + 1u);
      std::shuffle(order.begin(), order.end(), random);
      gate.wait();
      for (int key : order) {
        const std::string name = "kernel_" + std::to_string(key);
        auto kernel =
            cache->getOrCompile("mix " + std::to_string(key), [&, key, name]() -> support::Expected<CompiledKernel> {
              ++compiles[key];
              // Compiles take a while, so requests for a key pile up behind its compile.
              std::this_thread::sleep_for(std::chrono::microseconds(500 + 97 * key));
              return ptxKernel(name);
            });
        if (!kernel || (*kernel)->function.name() != name) {
          ++wrongResults;
          continue;
        }
        const LoadedKernel* expected = nullptr;
        if (!firstResult[key].compare_exchange_strong(expected, kernel->get()) && expected != kernel->get()) {
          ++wrongResults;  // two different kernels for one key
        }
      }
    });
  }
  gate.open();
  for (auto& thread : threads) thread.join();

  CHECK(wrongResults == 0);
  int compiledOnce = 0;
  for (int key = 0; key < kKeys; ++key) compiledOnce += compiles[key] == 1 ? 1 : 0;
  CHECK(compiledOnce == kKeys);
  CHECK(fixture.counters->links == kKeys);
  CHECK(fixture.counters->loads == kKeys);
  KernelCache::Stats stats = cache->stats();
  CHECK(stats.compiles == kKeys);
  CHECK(stats.memoryHits == kThreads * kKeys * 2 - kKeys);
  CHECK(stats.diskHits == 0);
  CHECK(stats.diskMisses == kKeys);
  int entries = 0;
  for (const auto& item : fs::directory_iterator(fixture.temp.path())) entries += item.path().extension() == ".kernel";
  CHECK(entries == kKeys);
}

namespace {

constexpr int kSharedKeys = 50;

std::string sharedKey(int key) { return "shared folder kernel " + std::to_string(key); }

// A kernel big enough (tens of KiB) that a non-atomic write would be caught half-done.
CompiledKernel sharedKernel(int key) {
  CompiledKernel kernel = ptxKernel("shared_" + std::to_string(key));
  kernel.ptx += std::string(20000 + 997 * key, static_cast<char>('a' + key % 26));
  return kernel;
}

// One process sharing the cache folder: rounds of 4 threads asking for every key through a
// fresh KernelCache (nothing in memory, so most answers come from disk) while a fifth thread
// keeps rewriting the entries. Returns 0, or the first problem's code: 1 a request failed,
// 2 wrong contents, 3 a key compiled twice by one cache, 4 a disk miss other than "no
// entry" (a torn or failed load), 5 a store failed.
int shareCacheFolder(const fs::path& folder, int process) {
  std::atomic<int> problem{0};
  auto report = [&](int code) {
    int none = 0;
    problem.compare_exchange_strong(none, code);
  };
  for (int round = 0; round < 3 && problem == 0; ++round) {
    auto counters = std::make_shared<FakeLoader::Counters>();
    counters->toolchain = "fake-driver 1";
    KernelCache cache(std::make_unique<FakeLoader>(counters), DiskCache(folder), /*bypassLookups=*/false);
    cache.setLogSink([&](const std::string&) { report(4); });
    std::array<std::atomic<int>, kSharedKeys> compiles{};
    std::vector<std::thread> threads;
    for (int thread = 0; thread < 4; ++thread) {
      threads.emplace_back([&, thread] {
        std::vector<int> order(kSharedKeys);
        for (int key = 0; key < kSharedKeys; ++key) order[key] = key;
        std::mt19937 random(static_cast<unsigned>(process * 1000 + round * 10 + thread));
        std::shuffle(order.begin(), order.end(), random);
        for (int key : order) {
          auto kernel = cache.getOrCompile(sharedKey(key), [&, key] {
            ++compiles[key];
            return support::Expected<CompiledKernel>(sharedKernel(key));
          });
          if (!kernel) {
            report(1);
          } else if ((*kernel)->ptx != sharedKernel(key).ptx ||
                     (*kernel)->function.name() != sharedKernel(key).entryName) {
            report(2);
          }
        }
      });
    }
    threads.emplace_back([&] {
      DiskCache disk(folder);
      for (int key = 0; key < kSharedKeys; ++key) {
        CompiledKernel kernel = sharedKernel(key);
        const std::string cubin = "CUBIN:" + kernel.ptx;  // what FakeLoader's link makes
        StringMap metadata = kernel.metadata;
        metadata[KernelCache::kEntryNameKey] = kernel.entryName;
        CacheEntry entry{std::vector<std::uint8_t>(cubin.begin(), cubin.end()), kernel.ptx, metadata};
        if (!disk.store(cache.diskKey(sharedKey(key)), entry)) report(5);
      }
    });
    for (auto& thread : threads) thread.join();
    for (const auto& count : compiles) {
      if (count > 1) report(3);
    }
  }
  return problem;
}

}  // namespace

TEST_CASE("kernel cache: processes sharing one cache folder never see torn or failed entries", "[runtime]") {
  constexpr int kProcesses = 6;
  TempDirectory temp;
  const fs::path folder = temp.path() / "cache";
  std::vector<pid_t> children;
  for (int process = 0; process < kProcesses; ++process) {
    const pid_t child = ::fork();
    // The child runs only this function and leaves without returning into Catch2.
    if (child == 0) ::_exit(shareCacheFolder(folder, process));
    REQUIRE(child > 0);
    children.push_back(child);
  }
  std::vector<int> exitCodes;
  for (pid_t child : children) {
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    exitCodes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
  CHECK(exitCodes == std::vector<int>(kProcesses, 0));

  // Exactly one whole entry per key and no temp file left behind.
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(folder)) names.push_back(item.path().filename().string());
  CHECK(names.size() == kSharedKeys);
  CHECK(std::none_of(names.begin(), names.end(), [](const std::string& name) { return name.rfind(".tmp-", 0) == 0; }));
  auto counters = std::make_shared<FakeLoader::Counters>();
  counters->toolchain = "fake-driver 1";
  KernelCache reader(std::make_unique<FakeLoader>(counters), DiskCache(folder), false);
  int intact = 0;
  for (int key = 0; key < kSharedKeys; ++key) {
    DiskLookup lookup = DiskCache(folder).load(reader.diskKey(sharedKey(key)));
    intact += lookup.hit() && lookup.entry->ptx == sharedKernel(key).ptx ? 1 : 0;
  }
  CHECK(intact == kSharedKeys);
}

TEST_CASE("kernel cache: a driver update never loads an entry the old driver wrote", "[runtime]") {
  Fixture fixture;
  int compiles = 0;
  auto compile = [&] {
    ++compiles;
    return support::Expected<CompiledKernel>(ptxKernel("k"));
  };
  fixture.counters->toolchain = "cuda-driver 12080";
  REQUIRE(fixture.makeCache()->getOrCompile("versioned", compile).isOk());
  CHECK(compiles == 1);

  // The disk key is the caller's key plus the toolchain line.
  auto cache = fixture.makeCache();
  CHECK(cache->diskKey("versioned") == "versioned\ntoolchain cuda-driver 12080\n");
  CHECK(DiskCache(fixture.temp.path()).load("versioned\ntoolchain cuda-driver 12080\n").hit());

  fixture.counters->toolchain = "cuda-driver 12090";
  auto updated = fixture.makeCache()->getOrCompile("versioned", compile);
  REQUIRE(updated.isOk());
  CHECK(compiles == 2);
  CHECK((*updated)->origin == LoadedKernel::Origin::Compiled);

  // Even an old entry put under the new entry's name is refused: it holds the old key.
  DiskCache disk(fixture.temp.path());
  const fs::path oldEntry = disk.entryPath("versioned\ntoolchain cuda-driver 12080\n");
  const fs::path newEntry = disk.entryPath("versioned\ntoolchain cuda-driver 12090\n");
  fs::copy_file(oldEntry, newEntry, fs::copy_options::overwrite_existing);
  auto forged = fixture.makeCache();
  REQUIRE(forged->getOrCompile("versioned", compile).isOk());
  CHECK(compiles == 3);
  CHECK(contains(forged->stats().lastDiskMissReason, "key mismatch"));

  // Back on the old driver, its own entry is still good.
  fixture.counters->toolchain = "cuda-driver 12080";
  auto old = fixture.makeCache()->getOrCompile("versioned", compile);
  REQUIRE(old.isOk());
  CHECK(compiles == 3);
  CHECK((*old)->origin == LoadedKernel::Origin::DiskCache);
}

TEST_CASE("kernel cache: the JIT key names the attnjit and LLVM versions", "[runtime]") {
  attnjit::compiler::CompiledKernel afterPasses;
  afterPasses.target = "sm_90";
  afterPasses.ptxVersion = 85;
  afterPasses.tirOptimized = "kernel @k() {}\n";
  const std::string key = attnjit::compiler::jitCacheKey(afterPasses, attnjit::compiler::CompileOptions{});
  CHECK(contains(key, std::string("attnjit ") + attnjit_version() + "\n"));
  CHECK(contains(key, "llvm " + attnjit::codegen::llvmVersion() + "\n"));
  CHECK(contains(key, "target sm_90 ptx 85\n"));
  CHECK(contains(key, "kernel @k() {}\n"));
}

namespace {

// A small attention kernel for the JIT tests below (the fake loader "links" its PTX).
attnjit::compiler::KernelFactory smallAttentionKernel() {
  attnjit::compiler::UnifiedAttentionConfig config;
  config.numQueryHeads = 4;
  config.numKvHeads = 2;
  config.headSize = 64;
  return [config] { return attnjit::compiler::buildUnifiedAttention(config); };
}

}  // namespace

TEST_CASE("kernel cache: a warm start finds the JIT kernel through its alias, without the passes", "[runtime]") {
  using namespace attnjit::compiler;
  REQUIRE_FALSE(jitBuildIdentity().empty());
  Fixture f;
  const KernelFactory factory = smallAttentionKernel();
  const CompileOptions options;
  auto first = f.makeCache();
  auto cold = jitKernel(factory, options, *first);
  INFO((cold.isOk() ? std::string() : cold.diagnostic().str()));
  REQUIRE(cold.isOk());
  CHECK(cold->compiledNow);
  CHECK_FALSE(cold->passesSkipped);

  // The same process: the alias and the kernel come from memory.
  auto again = jitKernel(factory, options, *first);
  REQUIRE(again.isOk());
  CHECK(again->passesSkipped);
  CHECK_FALSE(again->compiledNow);
  CHECK(again->loaded == cold->loaded);

  // A new process (a new cache on the same folder): alias and kernel from disk.
  auto second = f.makeCache();
  auto warm = jitKernel(factory, options, *second);
  REQUIRE(warm.isOk());
  CHECK(warm->passesSkipped);
  CHECK(warm->fromDisk);
  CHECK_FALSE(warm->compiledNow);
  CHECK(warm->name == cold->name);
  CHECK(warm->numThreads == cold->numThreads);
  CHECK(warm->sharedMemoryBytes == cold->sharedMemoryBytes);
  CHECK(second->stats().aliasHits == 1);
  CHECK(second->stats().compiles == 0);

  // The alias key holds the tile IR before the passes and the binary's identity;
  // another target is another alias.
  auto built = factory();
  REQUIRE(built.isOk());
  const std::string alias = jitAliasKey(**built, options);
  CHECK(contains(alias, jitBuildIdentity()));
  CHECK(contains(alias, "before passes\n"));
  CHECK(contains(alias, "@" + cold->name + "("));
  CHECK_FALSE(contains(alias, "layout"));  // the passes assign the layouts
  CompileOptions sm80 = options;
  sm80.target = "sm_80";
  CHECK(jitAliasKey(**built, sm80) != alias);
  CHECK_FALSE(second->resolveAlias(jitAliasKey(**built, sm80)).has_value());
  // A hand-edited stage may replace any part: no alias then.
  CompileOptions overridden = options;
  overridden.overrideDir = f.temp.path().string();
  CHECK(jitAliasKey(**built, overridden).empty());
}

TEST_CASE("kernel cache: a stale or damaged JIT alias falls back to the passes and is replaced", "[runtime]") {
  using namespace attnjit::compiler;
  Fixture f;
  const KernelFactory factory = smallAttentionKernel();
  const CompileOptions options;
  auto built = factory();
  REQUIRE(built.isOk());
  const std::string alias = jitAliasKey(**built, options);
  REQUIRE_FALSE(alias.empty());

  SECTION("an alias naming a key the passes do not make") {
    auto cache = f.makeCache();
    cache->recordAlias(alias, "attnjit 0\nno such kernel\n");
    auto jit = jitKernel(factory, options, *cache);
    INFO((jit.isOk() ? std::string() : jit.diagnostic().str()));
    REQUIRE(jit.isOk());
    CHECK(jit->compiledNow);
    CHECK_FALSE(jit->passesSkipped);
    auto repaired = f.makeCache()->resolveAlias(alias);
    REQUIRE(repaired.has_value());
    CHECK(contains(*repaired, "kernel @" + jit->name));
    auto warm = jitKernel(factory, options, *f.makeCache());
    REQUIRE(warm.isOk());
    CHECK(warm->passesSkipped);
    CHECK(warm->fromDisk);
  }

  SECTION("an alias whose kernel entry is gone") {
    auto cold = jitKernel(factory, options, *f.makeCache());
    REQUIRE(cold.isOk());
    auto key = f.makeCache()->resolveAlias(alias);
    REQUIRE(key.has_value());
    auto probe = f.makeCache();
    REQUIRE(fs::remove(probe->disk().entryPath(probe->diskKey(*key))));
    auto jit = jitKernel(factory, options, *f.makeCache());
    REQUIRE(jit.isOk());
    CHECK(jit->compiledNow);  // the alias held: passes only to compile, under the same key
    CHECK(f.makeCache()->resolveAlias(alias) == key);
  }

  SECTION("a damaged alias entry") {
    auto cold = jitKernel(factory, options, *f.makeCache());
    REQUIRE(cold.isOk());
    const fs::path aliasFile = f.makeCache()->disk().entryPath("attnjit alias\n" + alias);
    REQUIRE(fs::exists(aliasFile));
    fs::resize_file(aliasFile, fs::file_size(aliasFile) / 2);
    auto cache = f.makeCache();
    CHECK_FALSE(cache->resolveAlias(alias).has_value());
    CHECK_FALSE(fs::exists(aliasFile));  // removed, never trusted
    auto jit = jitKernel(factory, options, *cache);
    REQUIRE(jit.isOk());
    CHECK_FALSE(jit->passesSkipped);
    CHECK(jit->fromDisk);  // the kernel itself was fine
    CHECK(fs::exists(aliasFile));  // and the alias is written again
  }

  SECTION("threads that share a stale alias all get the kernel") {
    // One request meets the stale key; the others only wait on it (single flight)
    // and must not return its error.
    auto cache = f.makeCache();
    cache->recordAlias(alias, "attnjit 0\nno such kernel\n");
    StartingGate gate;
    std::vector<std::thread> threads;
    std::vector<int> ok(8, 0);
    for (int t = 0; t < 8; ++t)
      threads.emplace_back([&, t] {
        gate.wait();
        ok[t] = jitKernel(factory, options, *cache).isOk() ? 1 : 0;
      });
    gate.open();
    for (auto& thread : threads) thread.join();
    CHECK(std::count(ok.begin(), ok.end(), 1) == 8);
    auto repaired = cache->resolveAlias(alias);
    REQUIRE(repaired.has_value());
    CHECK(*repaired != "attnjit 0\nno such kernel\n");
    CHECK(contains(*repaired, "codegen revision "));  // a key the passes made
  }

  SECTION("lookups bypassed (ATTNJIT_CACHE_DISABLE)") {
    auto cache = f.makeCache(/*bypass=*/true);
    cache->recordAlias(alias, "attnjit 0\nno such kernel\n");
    CHECK_FALSE(cache->resolveAlias(alias).has_value());
    auto jit = jitKernel(factory, options, *cache);
    REQUIRE(jit.isOk());
    CHECK_FALSE(jit->passesSkipped);
    CHECK(jit->compiledNow);
  }
}

TEST_CASE("kernel cache: an unusable cache folder leaves launches working, in memory, with one warning",
          "[runtime]") {
  TempDirectory temp;
  const fs::path blocker = temp.path() / "regular-file";
  attnjit::runtime::testing::writeFileBytes(blocker, {1});
  std::vector<std::string> warnings;
  auto counters = std::make_shared<FakeLoader::Counters>();
  KernelCache cache(std::make_unique<FakeLoader>(counters),
                    DiskCache(blocker / "cache", [&](const std::string& message) { warnings.push_back(message); }),
                    /*bypassLookups=*/false);
  int compiles = 0;
  for (int request = 0; request < 3; ++request) {
    for (const char* key : {"first", "second"}) {
      auto kernel = cache.getOrCompile(key, [&] {
        ++compiles;
        return support::Expected<CompiledKernel>(ptxKernel(key));
      });
      REQUIRE(kernel.isOk());
      CHECK((*kernel)->function.name() == key);
    }
  }
  CHECK(compiles == 2);
  CHECK(cache.stats().memoryHits == 4);
  REQUIRE(warnings.size() == 1);
  CHECK(contains(warnings[0], "kernel disk cache turned off"));
  CHECK_FALSE(cache.disk().storesEnabled());
}
