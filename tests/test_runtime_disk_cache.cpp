// The on-disk kernel cache: hits and misses, every kind of damaged or untrusted entry,
// degradation when the directory is unusable, atomic concurrent stores, environment knobs.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "runtime/DiskCache.h"
#include "runtime/Sha256.h"
#include "test_runtime_fixtures.h"

using namespace attnjit::runtime;
using attnjit::runtime::testing::readFileBytes;
using attnjit::runtime::testing::ScopedEnvironment;
using attnjit::runtime::testing::TempDirectory;
using attnjit::runtime::testing::writeFileBytes;
namespace fs = std::filesystem;

namespace {

CacheEntry sampleEntry(const std::string& tag = "0") {
  CacheEntry entry;
  for (int i = 0; i < 300; ++i) entry.cubin.push_back(static_cast<std::uint8_t>((i * 131 + 7) & 0xFF));
  entry.ptx = "// ptx " + tag + "\n.version 8.0\n.target sm_80\n";
  entry.metadata = {{"attnjit.entry", "kernel_" + tag}, {"num_warps", "4"}, {"note", "quote \" and \\"}};
  return entry;
}

// Names of everything in `directory`.
std::vector<std::string> listDirectory(const fs::path& directory) {
  std::vector<std::string> names;
  for (const auto& item : fs::directory_iterator(directory)) names.push_back(item.path().filename().string());
  return names;
}

unsigned modeOf(const fs::path& path) {
  struct stat info;
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

int countOccurrences(const std::string& text, const std::string& part) {
  int count = 0;
  for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++count;
  return count;
}

// Runs `body` in a forked child with stderr sent to `stderrPath`; returns the child's exit
// status (body's result), or -1 when it did not exit normally. The child never returns into
// Catch2: process-wide state it changes (rlimits, signal dispositions, the once-per-process
// stderr warning) stays in the child.
template <typename Body>
int runInChild(const fs::path& stderrPath, Body body) {
  const pid_t child = ::fork();
  if (child == 0) {
    int fd = ::open(stderrPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0 || ::dup2(fd, STDERR_FILENO) < 0) ::_exit(100);
    ::_exit(body());
  }
  if (child < 0) return -1;
  int status = 0;
  if (::waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

std::string readText(const fs::path& path) {
  const auto bytes = readFileBytes(path);
  return std::string(bytes.begin(), bytes.end());
}

}  // namespace

TEST_CASE("disk cache: a miss, then a hit with identical contents", "[runtime]") {
  TempDirectory temp;
  const fs::path directory = temp.path() / "nested" / "cache";
  DiskCache cache(directory);
  const std::string key = "kernel=vector_add;sm=90;compiler=1";

  DiskLookup miss = cache.load(key);
  CHECK_FALSE(miss.hit());
  CHECK(miss.missReason == "no entry");

  REQUIRE(cache.store(key, sampleEntry()));
  CHECK(modeOf(directory) == 0700);
  CHECK(modeOf(temp.path() / "nested") == 0700);
  const fs::path entryPath = cache.entryPath(key);
  CHECK(entryPath == directory / (Sha256::hexDigest(key) + ".kernel"));
  CHECK((modeOf(entryPath) & 077) == 0);

  DiskLookup hit = cache.load(key);
  REQUIRE(hit.hit());
  CHECK(hit.missReason.empty());
  CHECK(*hit.entry == sampleEntry());

  // The file is exactly header + key + parts, with the documented header fields.
  const auto bytes = readFileBytes(entryPath);
  const std::string metadata = writeFlatJson(sampleEntry().metadata);
  CHECK(bytes.size() == DiskCache::kHeaderBytes + key.size() + 300 + sampleEntry().ptx.size() + metadata.size());
  CHECK(std::string(bytes.begin(), bytes.begin() + 8) == "ATTNJITK");
  CHECK(bytes[8] == 1);
  CHECK(bytes[12] == DiskCache::kHeaderBytes);
  CHECK(bytes[16] == key.size());
  CHECK(std::string(bytes.begin() + DiskCache::kHeaderBytes, bytes.begin() + DiskCache::kHeaderBytes + key.size()) ==
        key);

  // A second store replaces the entry.
  REQUIRE(cache.store(key, sampleEntry("1")));
  DiskLookup replaced = cache.load(key);
  REQUIRE(replaced.hit());
  CHECK(*replaced.entry == sampleEntry("1"));
  CHECK(listDirectory(directory).size() == 1);
}

TEST_CASE("disk cache: an entry holding another key is a miss and is removed", "[runtime]") {
  TempDirectory temp;
  DiskCache cache(temp.path());
  REQUIRE(cache.store("key A", sampleEntry()));
  fs::copy_file(cache.entryPath("key A"), cache.entryPath("key B"));

  DiskLookup lookup = cache.load("key B");
  CHECK_FALSE(lookup.hit());
  CHECK(contains(lookup.missReason, "key mismatch"));
  CHECK(contains(lookup.missReason, "(entry removed)"));
  CHECK_FALSE(fs::exists(cache.entryPath("key B")));
  CHECK(cache.load("key A").hit());
}

TEST_CASE("disk cache: a truncated entry is a miss and is removed", "[runtime]") {
  TempDirectory temp;
  DiskCache cache(temp.path());
  const std::string key = "truncation";
  const std::vector<std::uint8_t> full = DiskCache::encodeEntry(key, sampleEntry());
  const std::size_t lengths[] = {0, 1, 7, 12, 47, DiskCache::kHeaderBytes - 1, DiskCache::kHeaderBytes,
                                 DiskCache::kHeaderBytes + key.size() / 2, full.size() / 2, full.size() - 1};
  for (std::size_t length : lengths) {
    INFO("cut at " << length << " of " << full.size());
    writeFileBytes(cache.entryPath(key), std::vector<std::uint8_t>(full.begin(), full.begin() + length));
    DiskLookup lookup = cache.load(key);
    CHECK_FALSE(lookup.hit());
    CHECK(contains(lookup.missReason, "corrupt entry"));
    CHECK_FALSE(fs::exists(cache.entryPath(key)));
  }
  // One byte too many is as wrong as one too few.
  std::vector<std::uint8_t> extended = full;
  extended.push_back(0);
  writeFileBytes(cache.entryPath(key), extended);
  DiskLookup lookup = cache.load(key);
  CHECK_FALSE(lookup.hit());
  CHECK(contains(lookup.missReason, "size mismatch"));
}

TEST_CASE("disk cache: flipping any single byte of an entry makes it a miss", "[runtime]") {
  TempDirectory temp;
  DiskCache cache(temp.path());
  const std::string key = "flip";
  const std::vector<std::uint8_t> full = DiskCache::encodeEntry(key, sampleEntry());
  int misses = 0;
  for (std::size_t position = 0; position < full.size(); ++position) {
    std::vector<std::uint8_t> damaged = full;
    damaged[position] ^= 0x20;
    writeFileBytes(cache.entryPath(key), damaged);
    DiskLookup lookup = cache.load(key);
    if (!lookup.hit() && contains(lookup.missReason, "corrupt entry") && !fs::exists(cache.entryPath(key))) ++misses;
  }
  CHECK(misses == static_cast<int>(full.size()));
  // Flips in the payload are caught by the checksum in particular.
  std::vector<std::uint8_t> damaged = full;
  damaged[DiskCache::kHeaderBytes + key.size() + 100] ^= 1;  // inside the cubin
  writeFileBytes(cache.entryPath(key), damaged);
  CHECK(contains(cache.load(key).missReason, "checksum mismatch"));
}

TEST_CASE("disk cache: wrong magic or format version is a miss with the reason", "[runtime]") {
  TempDirectory temp;
  DiskCache cache(temp.path());
  const std::string key = "format";
  std::vector<std::uint8_t> bytes = DiskCache::encodeEntry(key, sampleEntry());

  std::vector<std::uint8_t> badMagic = bytes;
  badMagic[0] = 'X';
  writeFileBytes(cache.entryPath(key), badMagic);
  DiskLookup lookup = cache.load(key);
  CHECK_FALSE(lookup.hit());
  CHECK(contains(lookup.missReason, "bad magic (entry removed)"));

  std::vector<std::uint8_t> newerVersion = bytes;
  newerVersion[8] = 2;
  writeFileBytes(cache.entryPath(key), newerVersion);
  lookup = cache.load(key);
  CHECK_FALSE(lookup.hit());
  CHECK(contains(lookup.missReason, "format version 2, expected 1 (entry removed)"));
  CHECK_FALSE(fs::exists(cache.entryPath(key)));
}

TEST_CASE("disk cache: entries another user could have written are ignored, not removed", "[runtime]") {
  TempDirectory temp;
  DiskCache cache(temp.path());
  const std::string key = "trust";
  REQUIRE(cache.store(key, sampleEntry()));
  const fs::path path = cache.entryPath(key);

  for (fs::perms extra : {fs::perms::group_write, fs::perms::others_write}) {
    fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write | extra);
    DiskLookup lookup = cache.load(key);
    CHECK_FALSE(lookup.hit());
    CHECK(contains(lookup.missReason, "is group- or world-writable (ignored)"));
    CHECK(fs::exists(path));
  }
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);
  CHECK(cache.load(key).hit());

  // A symbolic link is never followed.
  const fs::path elsewhere = temp.path() / "elsewhere.bin";
  fs::rename(path, elsewhere);
  fs::create_symlink(elsewhere, path);
  DiskLookup linked = cache.load(key);
  CHECK_FALSE(linked.hit());
  CHECK(contains(linked.missReason, "is a symbolic link (ignored)"));
  fs::remove(path);
  fs::rename(elsewhere, path);

  // Ownership: only root can hand a file to another user, so only root checks it.
  if (::geteuid() == 0) {
    REQUIRE(::chown(path.c_str(), 12345, 12345) == 0);
    DiskLookup foreign = cache.load(key);
    CHECK_FALSE(foreign.hit());
    CHECK(contains(foreign.missReason, "is owned by uid 12345, not the current user (ignored)"));
    CHECK(fs::exists(path));
  }
}

TEST_CASE("disk cache: an unusable directory turns stores off with one warning", "[runtime]") {
  TempDirectory temp;
  // A directory below a regular file can never be created, whatever the privileges.
  const fs::path blocker = temp.path() / "not-a-directory";
  writeFileBytes(blocker, {1, 2, 3});
  std::vector<std::string> warnings;
  DiskCache cache(blocker / "cache", [&](const std::string& message) { warnings.push_back(message); });

  CHECK(cache.storesEnabled());
  CHECK_FALSE(cache.store("k1", sampleEntry()));
  CHECK_FALSE(cache.store("k2", sampleEntry()));
  CHECK_FALSE(cache.storesEnabled());
  REQUIRE(warnings.size() == 1);
  CHECK(contains(warnings[0], "attnjit: warning: kernel disk cache turned off: cannot create "));
  CHECK(contains(warnings[0], "not-a-directory/cache: Not a directory"));
  DiskLookup lookup = cache.load("k1");
  CHECK_FALSE(lookup.hit());
}

TEST_CASE("disk cache: a read-only directory turns stores off, loads still work", "[runtime]") {
  if (::geteuid() == 0) {
    // Root writes through permission bits; the unusable-directory cases that hold for root
    // are the tests around this one.
    attnjit::tests::skipTest("running as root, a read-only directory is writable");
    return;
  }
  TempDirectory temp;
  std::vector<std::string> warnings;
  DiskCache writer(temp.path());
  REQUIRE(writer.store("present", sampleEntry()));
  fs::permissions(temp.path(), fs::perms::owner_read | fs::perms::owner_exec);
  DiskCache cache(temp.path(), [&](const std::string& message) { warnings.push_back(message); });
  CHECK_FALSE(cache.store("new", sampleEntry()));
  CHECK_FALSE(cache.store("newer", sampleEntry()));
  REQUIRE(warnings.size() == 1);
  CHECK(contains(warnings[0], "kernel disk cache turned off: cannot create "));
  CHECK(contains(warnings[0], "Permission denied"));
  CHECK(cache.load("present").hit());
  fs::permissions(temp.path(), fs::perms::owner_all);
  CHECK(listDirectory(temp.path()).size() == 1);
}

TEST_CASE("disk cache: an entry path taken by a directory turns stores off, not the caller", "[runtime]") {
  // rename() cannot replace a directory with a file, whatever the privileges.
  TempDirectory temp;
  std::vector<std::string> warnings;
  DiskCache cache(temp.path(), [&](const std::string& message) { warnings.push_back(message); });
  fs::create_directory(cache.entryPath("blocked"));
  CHECK_FALSE(cache.store("blocked", sampleEntry()));
  CHECK_FALSE(cache.storesEnabled());
  REQUIRE(warnings.size() == 1);
  CHECK(contains(warnings[0], "cannot rename "));
  DiskLookup lookup = cache.load("blocked");
  CHECK_FALSE(lookup.hit());
  CHECK(contains(lookup.missReason, "is not a regular file (ignored)"));
  // The failed store left no temp file behind.
  CHECK(listDirectory(temp.path()) == std::vector<std::string>{Sha256::hexDigest("blocked") + ".kernel"});
}

TEST_CASE("disk cache: a full disk turns stores off with one warning and leaves no temp file", "[runtime]") {
  // RLIMIT_FSIZE makes write() fail with EFBIG exactly as a full disk fails with ENOSPC; the
  // limit and the ignored SIGXFSZ live in a child process.
  TempDirectory temp;
  const fs::path cacheDir = temp.path() / "cache";
  const fs::path log = temp.path() / "stderr.txt";
  const int status = runInChild(log, [&] {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit;
    if (::getrlimit(RLIMIT_FSIZE, &limit) != 0) return 10;
    limit.rlim_cur = 64;
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 11;
    std::vector<std::string> warnings;
    DiskCache cache(cacheDir, [&](const std::string& message) { warnings.push_back(message); });
    if (cache.store("k1", sampleEntry()) || cache.store("k2", sampleEntry())) return 12;
    if (warnings.size() != 1 || !contains(warnings[0], "cannot write ") || !contains(warnings[0], "File too large")) {
      return 13;
    }
    return 0;
  });
  CHECK(status == 0);
  CHECK(fs::is_empty(cacheDir));
  CHECK(readText(log).empty());
}

TEST_CASE("disk cache: the stderr warning is printed once per process, not once per cache", "[runtime]") {
  TempDirectory temp;
  const fs::path blocker = temp.path() / "file";
  writeFileBytes(blocker, {0});
  const fs::path log = temp.path() / "stderr.txt";
  // The child inherits the parent's once-per-process flag: no test in this executable lets a
  // cache with the default sink turn its stores off in the parent process.
  const int status = runInChild(log, [&] {
    for (int cacheNumber = 0; cacheNumber < 3; ++cacheNumber) {
      DiskCache cache(blocker / std::to_string(cacheNumber));
      if (cache.store("k", sampleEntry()) || cache.store("k2", sampleEntry())) return 20;
      if (cache.storesEnabled()) return 21;
    }
    return 0;
  });
  CHECK(status == 0);
  const std::string printed = readText(log);
  CHECK(countOccurrences(printed, "attnjit: warning: kernel disk cache turned off: cannot create ") == 1);
  CHECK(countOccurrences(printed, "\n") == 1);
}

TEST_CASE("disk cache: concurrent writers of one key leave one valid entry and no temp files", "[runtime]") {
  TempDirectory temp;
  DiskCache cache(temp.path());
  const std::string key = "contended";
  std::atomic<int> corruptReads{0};
  std::atomic<int> failedStores{0};
  std::vector<std::thread> threads;
  for (int writer = 0; writer < 8; ++writer) {
    threads.emplace_back([&, writer] {
      for (int round = 0; round < 20; ++round) {
        if (!cache.store(key, sampleEntry(std::to_string(writer)))) ++failedStores;
        DiskLookup lookup = cache.load(key);
        // Readers see a whole entry or none: never half of one.
        if (!lookup.hit() && lookup.missReason != "no entry") ++corruptReads;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(failedStores == 0);
  CHECK(corruptReads == 0);
  const auto names = listDirectory(temp.path());
  REQUIRE(names.size() == 1);
  CHECK(names[0] == Sha256::hexDigest(key) + ".kernel");
  DiskLookup lookup = cache.load(key);
  REQUIRE(lookup.hit());
  bool matchesAWriter = false;
  for (int writer = 0; writer < 8; ++writer) matchesAWriter |= *lookup.entry == sampleEntry(std::to_string(writer));
  CHECK(matchesAWriter);
}

TEST_CASE("disk cache: the environment picks the directory or disables the cache", "[runtime]") {
  ScopedEnvironment clearDir("ATTNJIT_CACHE_DIR", nullptr);
  ScopedEnvironment clearDisable("ATTNJIT_CACHE_DISABLE", nullptr);
  {
    ScopedEnvironment home("HOME", "/home/someone");
    ScopedEnvironment xdg("XDG_CACHE_HOME", nullptr);
    CHECK(defaultCacheDirectory() == fs::path("/home/someone/.cache/attnjit"));
    ScopedEnvironment relativeXdg("XDG_CACHE_HOME", "relative/cache");
    CHECK(defaultCacheDirectory() == fs::path("/home/someone/.cache/attnjit"));
    ScopedEnvironment absoluteXdg("XDG_CACHE_HOME", "/var/cache/me");
    CHECK(defaultCacheDirectory() == fs::path("/var/cache/me/attnjit"));
    ScopedEnvironment explicitDir("ATTNJIT_CACHE_DIR", "/opt/kernels");
    CHECK(defaultCacheDirectory() == fs::path("/opt/kernels"));
    CHECK(DiskCache::fromEnvironment().directory() == fs::path("/opt/kernels"));
    CHECK(DiskCache::fromEnvironment().enabled());
  }
  for (const char* off : {"1", "true", "YES", "on"}) {
    ScopedEnvironment disable("ATTNJIT_CACHE_DISABLE", off);
    INFO(off);
    CHECK(cacheDisabledByEnvironment());
    DiskCache cache = DiskCache::fromEnvironment();
    CHECK_FALSE(cache.enabled());
    CHECK(cache.load("anything").missReason == "disk cache disabled");
    CHECK_FALSE(cache.store("anything", sampleEntry()));
  }
  for (const char* on : {"", "0", "false", "off"}) {
    ScopedEnvironment disable("ATTNJIT_CACHE_DISABLE", on);
    INFO(on);
    CHECK_FALSE(cacheDisabledByEnvironment());
  }
}

namespace {

// Sets an entry file's last-use time (mtime) to `secondsAgo` before now.
void setLastUse(const fs::path& path, int secondsAgo) {
  struct timespec times[2];
  ::clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= secondsAgo;
  times[1] = times[0];
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

CacheEntry entryOfBytes(std::size_t cubinBytes, const std::string& tag) {
  CacheEntry entry = sampleEntry(tag);
  entry.cubin.assign(cubinBytes, static_cast<std::uint8_t>(tag.size()));
  return entry;
}

}  // namespace

TEST_CASE("disk cache: over its size limit the least recently used entries go", "[runtime]") {
  TempDirectory temp;
  DiskCache cache(temp.path());
  const std::uint64_t entryBytes = DiskCache::encodeEntry("key a", entryOfBytes(10000, "a")).size();
  cache.setSizeLimit(4 * entryBytes + entryBytes / 2);  // room for four entries
  for (const char* key : {"key a", "key b", "key c", "key d"}) REQUIRE(cache.store(key, entryOfBytes(10000, key)));
  // Last use: a long ago, then b, c, d; loading a makes it the most recent.
  setLastUse(cache.entryPath("key a"), 400);
  setLastUse(cache.entryPath("key b"), 300);
  setLastUse(cache.entryPath("key c"), 200);
  setLastUse(cache.entryPath("key d"), 100);
  REQUIRE(cache.load("key a").hit());
  // The fifth entry crosses the limit: the least recently used go until three quarters
  // of it remain (three entries), never the one just stored.
  REQUIRE(cache.store("key e", entryOfBytes(10000, "key e")));
  CHECK(cache.load("key a").hit());
  CHECK_FALSE(fs::exists(cache.entryPath("key b")));
  CHECK_FALSE(fs::exists(cache.entryPath("key c")));
  CHECK(cache.load("key d").hit());
  CHECK(cache.load("key e").hit());

  SECTION("no limit keeps everything") {
    cache.setSizeLimit(0);
    for (const char* key : {"key f", "key g", "key h"}) REQUIRE(cache.store(key, entryOfBytes(10000, key)));
    CHECK(cache.trimToSizeLimit() == 0);
    for (const char* key : {"key a", "key d", "key e", "key f", "key g", "key h"}) CHECK(cache.load(key).hit());
  }
  SECTION("an entry larger than the limit is stored, and goes with the next store") {
    cache.setSizeLimit(entryBytes / 2);
    REQUIRE(cache.store("big", entryOfBytes(10000, "big")));
    CHECK(cache.load("big").hit());
    REQUIRE(cache.store("next", entryOfBytes(10000, "next")));
    CHECK_FALSE(fs::exists(cache.entryPath("big")));
    CHECK(cache.load("next").hit());
  }
}

TEST_CASE("disk cache: trimming leaves other files, links and old writers' temp files alone or cleans them",
          "[runtime]") {
  TempDirectory temp;
  DiskCache cache(temp.path());
  REQUIRE(cache.store("key", entryOfBytes(5000, "key")));
  const fs::path notes = temp.path() / "notes.txt";
  attnjit::runtime::testing::writeFileBytes(notes, std::vector<std::uint8_t>(50000, 1));
  const fs::path target = temp.path() / "elsewhere.bin";
  attnjit::runtime::testing::writeFileBytes(target, std::vector<std::uint8_t>(50000, 2));
  const fs::path link = temp.path() / (std::string(64, 'f') + DiskCache::kEntrySuffix);
  fs::create_symlink(target, link);
  const fs::path oldTemp = temp.path() / ".tmp-0123456789abcdef-1-2-3";
  const fs::path freshTemp = temp.path() / ".tmp-fedcba9876543210-4-5-6";
  attnjit::runtime::testing::writeFileBytes(oldTemp, {1, 2, 3});
  attnjit::runtime::testing::writeFileBytes(freshTemp, {4, 5, 6});
  setLastUse(oldTemp, 2 * 3600);
  cache.setSizeLimit(1);  // everything over the limit
  CHECK(cache.trimToSizeLimit() == 1);  // the one entry
  CHECK_FALSE(fs::exists(cache.entryPath("key")));
  CHECK(fs::exists(notes));
  CHECK(fs::is_symlink(link));
  CHECK(fs::exists(target));
  CHECK_FALSE(fs::exists(oldTemp));
  CHECK(fs::exists(freshTemp));  // a writer may still be busy with it
}

TEST_CASE("disk cache: ATTNJIT_CACHE_MAX_BYTES sets the size limit", "[runtime]") {
  ScopedEnvironment dir("ATTNJIT_CACHE_DIR", "/tmp/attnjit-limit-test");
  ScopedEnvironment enable("ATTNJIT_CACHE_DISABLE", nullptr);
  for (const char* unset : {static_cast<const char*>(nullptr), ""}) {
    ScopedEnvironment limit("ATTNJIT_CACHE_MAX_BYTES", unset);
    std::vector<std::string> warnings;
    CHECK(DiskCache::fromEnvironment([&](const std::string& w) { warnings.push_back(w); }).sizeLimit() ==
          DiskCache::kDefaultSizeLimit);
    CHECK(warnings.empty());
  }
  const std::pair<const char*, std::uint64_t> good[] = {
      {"0", 0}, {"123456", 123456}, {"64K", 64u << 10}, {"512m", 512u << 20}, {"3G", std::uint64_t(3) << 30}};
  for (const auto& [text, bytes] : good) {
    ScopedEnvironment limit("ATTNJIT_CACHE_MAX_BYTES", text);
    INFO(text);
    CHECK(DiskCache::fromEnvironment().sizeLimit() == bytes);
  }
  for (const char* bad : {"G", "12X", "-5", "1.5G", "99999999999999999999", "999999999999999G"}) {
    ScopedEnvironment limit("ATTNJIT_CACHE_MAX_BYTES", bad);
    INFO(bad);
    std::vector<std::string> warnings;
    DiskCache cache = DiskCache::fromEnvironment([&](const std::string& w) { warnings.push_back(w); });
    CHECK(cache.sizeLimit() == DiskCache::kDefaultSizeLimit);
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("ATTNJIT_CACHE_MAX_BYTES") != std::string::npos);
  }
}
