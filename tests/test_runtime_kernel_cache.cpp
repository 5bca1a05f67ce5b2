// The kernel cache's logic with a fake compiler and a fake loader (no GPU): single flight,
// independent keys, failures, the disk round trip, damaged entries, contexts, bypass.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "runtime/KernelCache.h"
#include "test_runtime_support.h"

using namespace attnjit::runtime;
using attnjit::ir::Status;
using attnjit::runtime::testing::TempDirectory;
namespace fs = std::filesystem;

namespace {

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

Status fakeError(const std::string& message) { return Status::error({"fake", 0, 0}, message); }

// Stands in for the driver: "links" PTX by prefixing it, "loads" any cubin that does not
// start with "BAD", and counts everything.
class FakeLoader final : public KernelLoader {
 public:
  struct Counters {
    std::atomic<int> links{0};
    std::atomic<int> loads{0};
    std::atomic<int> liveModules{0};
    std::atomic<std::uintptr_t> context{0x1000};
  };

  explicit FakeLoader(std::shared_ptr<Counters> counters) : counters_(std::move(counters)) {}

  Expected<ContextHandle> currentContext() override {
    return reinterpret_cast<ContextHandle>(counters_->context.load());
  }

  Expected<std::vector<std::uint8_t>> linkPtx(const std::string& ptx, const std::string& ptxName) override {
    ++counters_->links;
    if (contains(ptx, "syntax error")) return fakeError(ptxName + ": ptxas: syntax error");
    std::string cubin = "CUBIN:" + ptx;
    return std::vector<std::uint8_t>(cubin.begin(), cubin.end());
  }

  Expected<LoadedModule> load(const std::vector<std::uint8_t>& cubin, const std::string& entryName) override {
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
      auto kernel = cache->getOrCompile("same key", [&]() -> Expected<CompiledKernel> {
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
  Status firstWaitResult = Status::ok();
  std::thread first([&] {
    auto kernel = cache->getOrCompile("key A", [&]() -> Expected<CompiledKernel> {
      std::unique_lock<std::mutex> lock(mutex);
      if (!changed.wait_for(lock, std::chrono::seconds(10), [&] { return secondStarted; })) {
        return fakeError("key B never started compiling");
      }
      return ptxKernel("kernel_a");
    });
    firstWaitResult = kernel.status();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  auto second = cache->getOrCompile("key B", [&]() -> Expected<CompiledKernel> {
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
      auto kernel = cache->getOrCompile("key " + std::to_string(i), [i] { return Expected<CompiledKernel>(ptxKernel("k" + std::to_string(i))); });
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
      auto kernel = cache->getOrCompile("failing", [&]() -> Expected<CompiledKernel> {
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
    return Expected<CompiledKernel>(ptxKernel("fixed"));
  });
  REQUIRE(retried.isOk());
  CHECK(compiles == 2);
  CHECK((*retried)->function.name() == "fixed");

  // Errors from the link step and from a throwing compile are reported the same way.
  auto badPtx = cache->getOrCompile("bad ptx", [] {
    CompiledKernel kernel = ptxKernel("broken");
    kernel.ptx = "syntax error";
    return Expected<CompiledKernel>(kernel);
  });
  REQUIRE_FALSE(badPtx.isOk());
  CHECK(badPtx.status().message() == "fake: error: broken.ptx: ptxas: syntax error");
  auto throwing = cache->getOrCompile("throws", []() -> Expected<CompiledKernel> { throw std::runtime_error("bad alloc"); });
  REQUIRE_FALSE(throwing.isOk());
  CHECK(contains(throwing.status().message(), "kernel compile for key 'throws' threw: bad alloc"));
  auto unnamed = cache->getOrCompile("unnamed", [] { return Expected<CompiledKernel>(ptxKernel("")); });
  REQUIRE_FALSE(unnamed.isOk());
  CHECK(contains(unnamed.status().message(), "named no entry point"));
  CHECK(cache->getOrCompile("throws", [] { return Expected<CompiledKernel>(ptxKernel("ok")); }).isOk());
}

TEST_CASE("kernel cache: a second process finds the kernel on disk", "[runtime]") {
  Fixture fixture;
  {
    auto cache = fixture.makeCache();
    auto kernel = cache->getOrCompile("persist", [] { return Expected<CompiledKernel>(ptxKernel("decode")); });
    REQUIRE(kernel.isOk());
    CHECK(fixture.counters->links == 1);
  }
  // A fresh cache: nothing in memory, same directory.
  auto cache = fixture.makeCache();
  int compiles = 0;
  auto kernel = cache->getOrCompile("persist", [&] {
    ++compiles;
    return Expected<CompiledKernel>(ptxKernel("decode"));
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
    return Expected<CompiledKernel>(prebuilt);
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
    REQUIRE(cache->getOrCompile("damaged", [] { return Expected<CompiledKernel>(ptxKernel("k")); }).isOk());
  }
  DiskCache disk(fixture.temp.path());
  const fs::path entry = disk.entryPath("damaged");
  fs::resize_file(entry, fs::file_size(entry) - 3);

  auto cache = fixture.makeCache();
  cache->setLogSink([&](const std::string& line) { logs.push_back(line); });
  int compiles = 0;
  auto compile = [&] {
    ++compiles;
    return Expected<CompiledKernel>(ptxKernel("k"));
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
  auto first = cache->getOrCompile("ctx", [] { return Expected<CompiledKernel>(ptxKernel("k")); });
  fixture.counters->context = 0x2000;
  auto second = cache->getOrCompile("ctx", [] { return Expected<CompiledKernel>(ptxKernel("k")); });
  REQUIRE(first.isOk());
  REQUIRE(second.isOk());
  // The second context loads its own module (from the disk entry the first one wrote).
  CHECK(first->get() != second->get());
  CHECK(fixture.counters->loads == 2);
  CHECK((*second)->origin == LoadedKernel::Origin::DiskCache);
  fixture.counters->context = 0x1000;
  auto again = cache->getOrCompile("ctx", [] { return Expected<CompiledKernel>(ptxKernel("k")); });
  REQUIRE(again.isOk());
  CHECK(again->get() == first->get());
}

TEST_CASE("kernel cache: modules unload when neither the cache nor a caller holds them", "[runtime]") {
  Fixture fixture;
  auto cache = fixture.makeCache();
  auto kernel = cache->getOrCompile("lifetime", [] { return Expected<CompiledKernel>(ptxKernel("k")); });
  REQUIRE(kernel.isOk());
  CHECK(fixture.counters->liveModules == 1);
  cache->clearMemory();
  CHECK(fixture.counters->liveModules == 1);  // the caller still holds it
  kernel = Expected<std::shared_ptr<const LoadedKernel>>(Status::error({}, "dropped"));
  CHECK(fixture.counters->liveModules == 0);
}

TEST_CASE("kernel cache: bypass (ATTNJIT_CACHE_DISABLE) compiles every time and writes nothing", "[runtime]") {
  Fixture fixture;
  auto cache = fixture.makeCache(/*bypass=*/true);
  int compiles = 0;
  auto compile = [&] {
    ++compiles;
    return Expected<CompiledKernel>(ptxKernel("k"));
  };
  REQUIRE(cache->getOrCompile("bypassed", compile).isOk());
  REQUIRE(cache->getOrCompile("bypassed", compile).isOk());
  CHECK(compiles == 2);
  CHECK(fs::is_empty(fixture.temp.path()));
  CHECK(cache->stats().memoryHits == 0);
}
