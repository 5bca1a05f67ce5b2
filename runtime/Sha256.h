// SHA-256 (FIPS 180-4). Names disk-cache entries after their key and checksums their
// contents: entries carry machine code, so a collision-resistant hash is worth its cost.
// A warm start hashes about half a megabyte (keys holding the tile IR, cubin, PTX): the
// portable code runs at ~150 MB/s, so x86 CPUs with the SHA extensions (Intel since Ice
// Lake and Goldmont, AMD since Zen) take them, chosen once at run time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace attnjit::runtime {

class Sha256 {
 public:
  using Digest = std::array<std::uint8_t, 32>;

  Sha256();
  void update(const void* data, std::size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  // Pads and returns the digest; the object must not be updated afterwards.
  Digest finish();

  static Digest digest(std::string_view text);
  // Lowercase hex of the digest (64 characters).
  static std::string hexDigest(std::string_view text);
  static std::string toHex(const Digest& digest);

  using State = std::array<std::uint32_t, 8>;
  // Whether this CPU has the instructions the accelerated path uses.
  static bool hardwareAccelerated();
  // The compression function over `count` whole 64-byte blocks; with `allowHardware`
  // it uses the SHA extensions where hardwareAccelerated() (tests compare both paths).
  static void compressBlocks(State& state, const std::uint8_t* blocks, std::size_t count, bool allowHardware);

 private:

  State state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t bufferedBytes_ = 0;
  std::uint64_t totalBytes_ = 0;
};

}  // namespace attnjit::runtime
