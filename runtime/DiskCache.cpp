#include "runtime/DiskCache.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include "runtime/Sha256.h"

namespace attnjit::runtime {
namespace {

namespace fs = std::filesystem;

// Entries larger than this are treated as corrupt rather than read into memory.
constexpr std::uint64_t kMaxEntryBytes = std::uint64_t(1) << 30;

std::string errnoText(int error) { return std::strerror(error); }

std::uint64_t readLittleEndian(const std::uint8_t* bytes, int width) {
  std::uint64_t value = 0;
  for (int i = width - 1; i >= 0; --i) value = value << 8 | bytes[i];
  return value;
}

// The checksum covers every part after the header, in file order.
Sha256::Digest contentChecksum(std::string_view key, const std::uint8_t* cubin, std::size_t cubinBytes,
                               std::string_view ptx, std::string_view metadata) {
  Sha256 hash;
  hash.update(key);
  hash.update(cubin, cubinBytes);
  hash.update(ptx);
  hash.update(metadata);
  return hash.finish();
}

bool writeAll(int fd, const std::uint8_t* data, std::size_t size, int& error) {
  while (size > 0) {
    ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      error = errno;
      return false;
    }
    data += written;
    size -= static_cast<std::size_t>(written);
  }
  return true;
}

bool readAll(int fd, std::uint8_t* data, std::size_t size) {
  while (size > 0) {
    ssize_t got = ::read(fd, data, size);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    data += got;
    size -= static_cast<std::size_t>(got);
  }
  return true;
}

// Closes a descriptor on every path.
struct FileDescriptor {
  int fd = -1;
  explicit FileDescriptor(int value) : fd(value) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// Deletes a corrupt entry, but only if the path still names the file we read: a concurrent
// writer may have renamed a fresh entry over it in the meantime.
std::string removeCorruptEntry(const fs::path& path, const struct stat& readFile, const std::string& reason) {
  struct stat current;
  if (::lstat(path.c_str(), &current) != 0 || current.st_dev != readFile.st_dev || current.st_ino != readFile.st_ino) {
    return reason + " (entry already replaced)";
  }
  if (::unlink(path.c_str()) != 0) return reason + " (could not remove the entry: " + errnoText(errno) + ")";
  return reason + " (entry removed)";
}

// A warning goes to the cache's sink when it has one, else to stderr at most once per
// process for each kind (`stderrOnce`): stderr is shared by every cache of the process.
void emitWarning(const WarningSink& sink, std::atomic<bool>& stderrOnce, const std::string& message) {
  if (sink) {
    sink(message);
  } else if (!stderrOnce.exchange(true)) {
    std::fprintf(stderr, "%s\n", message.c_str());
  }
}

std::string uniqueTempName(std::string_view digest) {
  static std::atomic<std::uint64_t> counter{0};
  thread_local std::mt19937_64 random{std::random_device{}() ^
                                      std::hash<std::thread::id>{}(std::this_thread::get_id())};
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, "%d-%llu-%016llx", static_cast<int>(::getpid()),
                static_cast<unsigned long long>(counter.fetch_add(1)), static_cast<unsigned long long>(random()));
  return ".tmp-" + std::string(digest.substr(0, 16)) + "-" + suffix;
}

}  // namespace

bool cacheDisabledByEnvironment() {
  const char* value = std::getenv("ATTNJIT_CACHE_DISABLE");
  if (value == nullptr) return false;
  std::string text(value);
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return !(text.empty() || text == "0" || text == "false" || text == "no" || text == "off");
}

fs::path defaultCacheDirectory() {
  if (const char* dir = std::getenv("ATTNJIT_CACHE_DIR"); dir != nullptr && *dir != '\0') return fs::path(dir);
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    return fs::path(xdg) / "attnjit";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return fs::path(home) / ".cache" / "attnjit";
  }
  struct passwd entry;
  struct passwd* result = nullptr;
  std::vector<char> buffer(16384);
  if (::getpwuid_r(::geteuid(), &entry, buffer.data(), buffer.size(), &result) == 0 && result != nullptr &&
      result->pw_dir != nullptr && result->pw_dir[0] == '/') {
    return fs::path(result->pw_dir) / ".cache" / "attnjit";
  }
  return {};
}

std::optional<std::uint64_t> cacheSizeLimitFromEnvironment(std::string& problem) {
  problem.clear();
  const char* value = std::getenv("ATTNJIT_CACHE_MAX_BYTES");
  if (value == nullptr || *value == '\0') return std::nullopt;
  std::string text(value);
  std::uint64_t scale = 1;
  if (!text.empty()) {
    switch (std::toupper(static_cast<unsigned char>(text.back()))) {
      case 'K': scale = std::uint64_t(1) << 10; break;
      case 'M': scale = std::uint64_t(1) << 20; break;
      case 'G': scale = std::uint64_t(1) << 30; break;
      default: break;
    }
    if (scale != 1) text.pop_back();
  }
  std::uint64_t number = 0;
  bool digits = !text.empty() && text.size() <= 15;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) digits = false;
    if (digits) number = number * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (!digits || number > std::numeric_limits<std::uint64_t>::max() / scale) {
    problem = std::string("ATTNJIT_CACHE_MAX_BYTES='") + value +
              "' is not a byte count (digits, optionally followed by K, M or G)";
    return std::nullopt;
  }
  return number * scale;
}

DiskCache DiskCache::fromEnvironment(WarningSink warn) {
  if (cacheDisabledByEnvironment()) return disabled();
  fs::path directory = defaultCacheDirectory();
  if (directory.empty()) return disabled();
  std::string problem;
  std::optional<std::uint64_t> limit = cacheSizeLimitFromEnvironment(problem);
  if (!problem.empty()) {
    // A bad limit keeps the default.
    static std::atomic<bool> warnedOnStderr{false};
    emitWarning(warn, warnedOnStderr,
                "attnjit: warning: " + problem + "; the kernel disk cache keeps its default limit");
  }
  DiskCache cache(std::move(directory), std::move(warn));
  if (limit) cache.setSizeLimit(*limit);
  return cache;
}

DiskCache DiskCache::disabled() { return DiskCache(); }

DiskCache::DiskCache(fs::path directory, WarningSink warn)
    : directory_(std::move(directory)), enabled_(!directory_.empty()), warn_(std::move(warn)) {}

fs::path DiskCache::entryPath(std::string_view keyText) const {
  return directory_ / (Sha256::hexDigest(keyText) + kEntrySuffix);
}

std::vector<std::uint8_t> DiskCache::encodeEntry(std::string_view keyText, const CacheEntry& entry) {
  const std::string metadata = writeFlatJson(entry.metadata);
  const Sha256::Digest checksum =
      contentChecksum(keyText, entry.cubin.data(), entry.cubin.size(), entry.ptx, metadata);
  std::vector<std::uint8_t> bytes(kHeaderBytes + keyText.size() + entry.cubin.size() + entry.ptx.size() +
                                  metadata.size());
  std::size_t offset = 0;
  auto put = [&](const void* data, std::size_t size) {
    if (size > 0) std::memcpy(bytes.data() + offset, data, size);
    offset += size;
  };
  auto putLittleEndian = [&](std::uint64_t value, int width) {
    for (int i = 0; i < width; ++i) bytes[offset++] = static_cast<std::uint8_t>(value >> (8 * i));
  };
  put(kMagic, sizeof kMagic);
  putLittleEndian(kFormatVersion, 4);
  putLittleEndian(kHeaderBytes, 4);
  putLittleEndian(keyText.size(), 8);
  putLittleEndian(entry.cubin.size(), 8);
  putLittleEndian(entry.ptx.size(), 8);
  putLittleEndian(metadata.size(), 8);
  put(checksum.data(), checksum.size());
  put(keyText.data(), keyText.size());
  put(entry.cubin.data(), entry.cubin.size());
  put(entry.ptx.data(), entry.ptx.size());
  put(metadata.data(), metadata.size());
  return bytes;
}

DiskLookup DiskCache::load(std::string_view keyText) const {
  DiskLookup lookup;
  if (!enabled_) {
    lookup.missReason = "disk cache disabled";
    return lookup;
  }
  const fs::path path = entryPath(keyText);
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (file.fd < 0) {
    int error = errno;
    if (error == ENOENT) {
      lookup.missReason = "no entry";
    } else if (error == ELOOP) {
      lookup.missReason = "entry " + path.string() + " is a symbolic link (ignored)";
    } else {
      lookup.missReason = "cannot open entry " + path.string() + ": " + errnoText(error);
    }
    return lookup;
  }
  struct stat info;
  if (::fstat(file.fd, &info) != 0) {
    lookup.missReason = "cannot stat entry " + path.string() + ": " + errnoText(errno);
    return lookup;
  }
  // Ownership and permission rules: never run code that another user could have written.
  if (!S_ISREG(info.st_mode)) {
    lookup.missReason = "entry " + path.string() + " is not a regular file (ignored)";
    return lookup;
  }
  if (info.st_uid != ::geteuid()) {
    lookup.missReason = "entry " + path.string() + " is owned by uid " + std::to_string(info.st_uid) +
                        ", not the current user (ignored)";
    return lookup;
  }
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    lookup.missReason = "entry " + path.string() + " is group- or world-writable (ignored)";
    return lookup;
  }

  auto corrupt = [&](const std::string& reason) {
    lookup.missReason = removeCorruptEntry(path, info, "corrupt entry " + path.string() + ": " + reason);
    return lookup;
  };
  const auto fileBytes = static_cast<std::uint64_t>(info.st_size);
  if (fileBytes < kHeaderBytes) return corrupt("truncated header (" + std::to_string(fileBytes) + " bytes)");
  if (fileBytes > kMaxEntryBytes) return corrupt("implausibly large (" + std::to_string(fileBytes) + " bytes)");
  std::vector<std::uint8_t> bytes(fileBytes);
  if (!readAll(file.fd, bytes.data(), bytes.size())) return corrupt("short read");
  std::string problem;
  lookup.entry = decodeEntry(keyText, bytes, problem);
  if (!lookup.entry) return corrupt(problem);
  // Mark the entry used for the size limit's least-recently-used order (best effort).
  ::futimens(file.fd, nullptr);
  return lookup;
}

std::optional<CacheEntry> DiskCache::decodeEntry(std::string_view keyText, std::span<const std::uint8_t> bytes,
                                                 std::string& problem) {
  auto fail = [&](std::string reason) {
    problem = std::move(reason);
    return std::nullopt;
  };
  const std::uint64_t fileBytes = bytes.size();
  if (fileBytes < kHeaderBytes) return fail("truncated header (" + std::to_string(fileBytes) + " bytes)");
  const std::uint8_t* header = bytes.data();
  if (std::memcmp(header, kMagic, sizeof kMagic) != 0) return fail("bad magic");
  const auto version = static_cast<std::uint32_t>(readLittleEndian(header + 8, 4));
  if (version != kFormatVersion) {
    return fail("format version " + std::to_string(version) + ", expected " + std::to_string(kFormatVersion));
  }
  if (readLittleEndian(header + 12, 4) != kHeaderBytes) return fail("bad header size");
  std::uint64_t partBytes[4];
  std::uint64_t payloadBytes = 0;
  for (int i = 0; i < 4; ++i) {
    partBytes[i] = readLittleEndian(header + 16 + 8 * i, 8);
    // Each part is below 2^30, so the sum cannot overflow.
    if (partBytes[i] > kMaxEntryBytes) return fail("implausible part size");
    payloadBytes += partBytes[i];
  }
  if (kHeaderBytes + payloadBytes != fileBytes) {
    return fail("size mismatch: header announces " + std::to_string(kHeaderBytes + payloadBytes) +
                " bytes, file has " + std::to_string(fileBytes));
  }
  const std::uint8_t* storedChecksum = header + 48;
  const char* cursor = reinterpret_cast<const char*>(bytes.data() + kHeaderBytes);
  std::string_view storedKey(cursor, partBytes[0]);
  const auto* cubin = reinterpret_cast<const std::uint8_t*>(cursor + partBytes[0]);
  std::string_view ptx(cursor + partBytes[0] + partBytes[1], partBytes[2]);
  std::string_view metadataText(cursor + partBytes[0] + partBytes[1] + partBytes[2], partBytes[3]);

  Sha256::Digest checksum = contentChecksum(storedKey, cubin, partBytes[1], ptx, metadataText);
  if (std::memcmp(checksum.data(), storedChecksum, checksum.size()) != 0) return fail("checksum mismatch");
  if (storedKey != keyText) return fail("key mismatch (the entry holds a different key)");
  auto metadata = parseFlatJson(metadataText);
  if (!metadata) return fail("metadata: " + metadata.diagnostic().message);

  CacheEntry entry;
  entry.cubin.assign(cubin, cubin + partBytes[1]);
  entry.ptx = std::string(ptx);
  entry.metadata = std::move(*metadata);
  return entry;
}

bool DiskCache::ensureDirectory(std::string& error) const {
  // Create missing components one by one with mode 0700 (the cache holds code; other users
  // have no business in it). An existing directory keeps the mode its owner chose.
  fs::path partial;
  for (const fs::path& component : directory_) {
    partial /= component;
    if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      error = "cannot create " + partial.string() + ": " + errnoText(errno);
      return false;
    }
  }
  struct stat info;
  if (::stat(directory_.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    error = directory_.string() + " is not a directory";
    return false;
  }
  return true;
}

void DiskCache::turnOffStores(const std::string& reason) const {
  health_->storesEnabled.store(false);
  if (health_->warned.exchange(true)) return;
  // stderr is shared by the whole process: every cache that falls back says so only once in
  // total (a server that builds caches per model must not repeat the warning).
  static std::atomic<bool> warnedOnStderr{false};
  emitWarning(warn_, warnedOnStderr,
              "attnjit: warning: kernel disk cache turned off: " + reason +
                  "; kernels will be compiled again in every process (set ATTNJIT_CACHE_DIR to a "
                  "writable directory, or ATTNJIT_CACHE_DISABLE=1 to silence this)");
}

bool DiskCache::store(std::string_view keyText, const CacheEntry& entry) const {
  if (!storesEnabled()) return false;
  std::string error;
  if (!ensureDirectory(error)) {
    turnOffStores(error);
    return false;
  }
  const std::vector<std::uint8_t> bytes = encodeEntry(keyText, entry);
  const std::string digest = Sha256::hexDigest(keyText);
  const fs::path finalPath = directory_ / (digest + kEntrySuffix);
  const fs::path tempPath = directory_ / uniqueTempName(digest);

  auto fail = [&](const std::string& what, int errorNumber, bool removeTemp) {
    if (removeTemp) ::unlink(tempPath.c_str());
    turnOffStores(what + " " + tempPath.string() + ": " + errnoText(errorNumber));
    return false;
  };
  int fd = ::open(tempPath.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return fail("cannot create", errno, false);
  int writeError = 0;
  bool written = writeAll(fd, bytes.data(), bytes.size(), writeError);
  if (written && ::fsync(fd) != 0) {
    writeError = errno;
    written = false;
  }
  if (::close(fd) != 0 && written) {
    writeError = errno;
    written = false;
  }
  if (!written) return fail("cannot write", writeError, true);
  if (::rename(tempPath.c_str(), finalPath.c_str()) != 0) return fail("cannot rename", errno, true);
  // Persist the rename itself; best effort (some filesystems refuse fsync on directories).
  FileDescriptor directory(::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (directory.fd >= 0) ::fsync(directory.fd);
  trimToSizeLimit(finalPath);
  return true;
}

int DiskCache::trimToSizeLimit(const fs::path& keep) const {
  if (!enabled_) return 0;
  struct Candidate {
    fs::path path;
    std::uint64_t bytes;
    struct timespec used;
  };
  std::vector<Candidate> entries;
  std::uint64_t total = 0;
  const std::string suffix = kEntrySuffix;
  const auto now = std::chrono::system_clock::now();
  std::error_code error;
  for (fs::directory_iterator it(directory_, error), end; !error && it != end; it.increment(error)) {
    const fs::path& path = it->path();
    const std::string name = path.filename().string();
    const bool entry = name.size() > suffix.size() && name.ends_with(suffix);
    const bool temp = name.starts_with(".tmp-");
    if (!entry && !temp) continue;
    struct stat info;
    // lstat: links are never followed, nor removed; only the current user's regular files.
    if (::lstat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode) || info.st_uid != ::geteuid()) continue;
    if (temp) {
      const auto modified = std::chrono::system_clock::from_time_t(info.st_mtim.tv_sec);
      if (now - modified > std::chrono::hours(1)) ::unlink(path.c_str());
      continue;
    }
    total += static_cast<std::uint64_t>(info.st_size);
    if (path != keep) entries.push_back({path, static_cast<std::uint64_t>(info.st_size), info.st_mtim});
  }
  if (sizeLimit_ == 0 || total <= sizeLimit_) return 0;
  std::sort(entries.begin(), entries.end(), [](const Candidate& a, const Candidate& b) {
    return a.used.tv_sec != b.used.tv_sec ? a.used.tv_sec < b.used.tv_sec : a.used.tv_nsec < b.used.tv_nsec;
  });
  const std::uint64_t target = sizeLimit_ / 4 * 3;
  int removed = 0;
  for (const Candidate& candidate : entries) {
    if (total <= target) break;
    // Another process may have removed it first; either way it no longer counts.
    if (::unlink(candidate.path.c_str()) == 0) ++removed;
    total -= candidate.bytes;
  }
  return removed;
}

}  // namespace attnjit::runtime
