// SHA-256 (FIPS 180-4). Names disk-cache entries after their key and checksums their
// contents: entries carry machine code, so a collision-resistant hash is worth its cost
// (a few hundred MB/s; a cubin is tens of KB).
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

 private:
  void compressBlock(const std::uint8_t* block);

  std::array<std::uint32_t, 8> state_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t bufferedBytes_ = 0;
  std::uint64_t totalBytes_ = 0;
};

}  // namespace attnjit::runtime
