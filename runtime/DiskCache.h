// The on-disk kernel cache: compiled kernels survive the process, so the second run of an
// engine skips LLVM and ptxas entirely.
//
// One file per key, named by the SHA-256 of the key text. The file holds a header (magic,
// format version, sizes of each part, SHA-256 of the contents), the full key text, the cubin,
// the PTX and the metadata (a flat JSON object); see docs/runtime.md for the byte layout.
//
// The cache is an optimization and never a source of errors for the caller:
//  - a load returns the entry only when magic, version, key, sizes and checksum all match;
//    otherwise it deletes the file (when it can) and reports a miss with a reason;
//  - entries not owned by the current user, group- or world-writable, or not regular files
//    (symbolic links included) are ignored, never executed: the cubin runs on the GPU;
//  - stores write a temporary file in the same directory, fsync it and rename it over the
//    entry, so readers see the old entry or the new one, never half of one;
//  - a directory that cannot be created or written, or a full disk, turns stores off with a
//    single warning (per cache to a WarningSink; at most once per process on stderr); kernels
//    then live in memory only.
//
// Size: after each store, when the entries (kernels and aliases) exceed the size limit, the
// least recently used ones are removed until they take at most 3/4 of it; a load marks its
// entry used (mtime). Only regular files of the current user named like entries are removed,
// never the entry just stored; temporary files older than an hour (a writer that died) go too.
// Removal is per file and atomic, so a concurrent reader sees an entry or a miss.
//
// Environment: ATTNJIT_CACHE_DIR (default $XDG_CACHE_HOME/attnjit, else ~/.cache/attnjit;
// created with mode 0700), ATTNJIT_CACHE_DISABLE=1 turns the cache off,
// ATTNJIT_CACHE_MAX_BYTES sets the size limit (bytes, or with a K, M or G suffix, binary;
// 0: none; default 2G).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/FlatJson.h"

namespace attnjit::runtime {

struct CacheEntry {
  std::vector<std::uint8_t> cubin;
  std::string ptx;
  StringMap metadata;

  friend bool operator==(const CacheEntry&, const CacheEntry&) = default;
};

struct DiskLookup {
  std::optional<CacheEntry> entry;
  // Why there is no entry (for logs); empty on a hit.
  std::string missReason;

  bool hit() const { return entry.has_value(); }
};

// Receives the one-line warning emitted when stores are turned off; default: stderr, at most
// once per process whatever the number of caches.
using WarningSink = std::function<void(const std::string&)>;

// True when ATTNJIT_CACHE_DISABLE is set to anything but "", "0", "false", "no" or "off".
bool cacheDisabledByEnvironment();

// ATTNJIT_CACHE_MAX_BYTES parsed ("512M", "2G", "1000000", "0"); nullopt when unset or
// empty, and when malformed or too large (`problem` then says why).
std::optional<std::uint64_t> cacheSizeLimitFromEnvironment(std::string& problem);

// ATTNJIT_CACHE_DIR, else $XDG_CACHE_HOME/attnjit (when absolute), else $HOME/.cache/attnjit,
// else the password database's home directory; empty when none is known.
std::filesystem::path defaultCacheDirectory();

class DiskCache {
 public:
  // Magic, format version and header size of an entry file; bump the version on any layout change.
  static constexpr char kMagic[8] = {'A', 'T', 'T', 'N', 'J', 'I', 'T', 'K'};
  static constexpr std::uint32_t kFormatVersion = 1;
  static constexpr std::size_t kHeaderBytes = 8 + 4 + 4 + 4 * 8 + 32;
  static constexpr const char* kEntrySuffix = ".kernel";
  static constexpr std::uint64_t kDefaultSizeLimit = std::uint64_t(2) << 30;

  // The cache the environment asks for (directory, or disabled).
  static DiskCache fromEnvironment(WarningSink warn = {});
  static DiskCache disabled();
  // A cache in `directory` (created on the first store).
  explicit DiskCache(std::filesystem::path directory, WarningSink warn = {});

  DiskCache(DiskCache&&) noexcept = default;
  DiskCache& operator=(DiskCache&&) noexcept = default;

  // False when disabled; stores may additionally have been turned off (storesEnabled()).
  bool enabled() const { return enabled_; }
  bool storesEnabled() const { return enabled_ && health_->storesEnabled.load(); }
  const std::filesystem::path& directory() const { return directory_; }
  // The size limit of the entries in bytes (0: none); see above.
  std::uint64_t sizeLimit() const { return sizeLimit_; }
  void setSizeLimit(std::uint64_t bytes) { sizeLimit_ = bytes; }
  // Removes least recently used entries while they exceed the limit (stores call it; exposed
  // for tests). `keep` names an entry file never removed. Returns the entries removed.
  int trimToSizeLimit(const std::filesystem::path& keep = {}) const;
  std::filesystem::path entryPath(std::string_view keyText) const;

  DiskLookup load(std::string_view keyText) const;
  // True when the entry is now on disk; false (after at most one warning per cache) otherwise.
  bool store(std::string_view keyText, const CacheEntry& entry) const;

  // The bytes of an entry file (exposed for tests that forge or damage entries).
  static std::vector<std::uint8_t> encodeEntry(std::string_view keyText, const CacheEntry& entry);
  // The entry in `bytes` (a whole entry file) when every check passes for `keyText`;
  // otherwise nullopt and `problem` says which check failed. Any bytes are safe to pass.
  static std::optional<CacheEntry> decodeEntry(std::string_view keyText, std::span<const std::uint8_t> bytes,
                                               std::string& problem);

 private:
  struct Health {
    std::atomic<bool> storesEnabled{true};
    std::atomic<bool> warned{false};
  };

  DiskCache() = default;
  bool ensureDirectory(std::string& error) const;
  void turnOffStores(const std::string& reason) const;

  std::filesystem::path directory_;
  bool enabled_ = false;
  std::uint64_t sizeLimit_ = kDefaultSizeLimit;
  WarningSink warn_;
  std::unique_ptr<Health> health_ = std::make_unique<Health>();
};

}  // namespace attnjit::runtime
