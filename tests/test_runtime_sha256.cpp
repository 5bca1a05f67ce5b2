// SHA-256 against the FIPS 180-2 / NIST example vectors, and streaming equals one-shot.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/Sha256.h"

using attnjit::runtime::Sha256;

TEST_CASE("sha256 matches the NIST example vectors", "[runtime]") {
  CHECK(Sha256::hexDigest("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(Sha256::hexDigest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // 448 bits: the padding needs a second block.
  CHECK(Sha256::hexDigest("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(Sha256::hexDigest("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                          "mnopqrstnopqrstu") ==
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  CHECK(Sha256::hexDigest(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("sha256 gives the same digest however the input is split", "[runtime]") {
  std::string text;
  for (int i = 0; i < 300; ++i) text.push_back(static_cast<char>((i * 37 + 11) & 0xFF));
  const std::string expected = Sha256::hexDigest(text);
  // Chunk sizes straddle the 64-byte block and the 56-byte padding boundary.
  for (std::size_t chunk : {1u, 3u, 55u, 56u, 63u, 64u, 65u, 127u}) {
    Sha256 hash;
    for (std::size_t at = 0; at < text.size(); at += chunk) hash.update(text.substr(at, chunk));
    INFO("chunk " << chunk);
    CHECK(Sha256::toHex(hash.finish()) == expected);
  }
  // Lengths around the padding boundary against digests from coreutils' sha256sum.
  CHECK(Sha256::hexDigest(std::string(55, 'x')) == "d5e285683cd4efc02d021a5c62014694958901005d6f71e89e0989fac77e4072");
  CHECK(Sha256::hexDigest(std::string(56, 'x')) == "04c26261370ee7541549d16dee320c723e3fd14671e66a099afe0a377c16888e");
  CHECK(Sha256::hexDigest(std::string(64, 'x')) == "7ce100971f64e7001e8fe5a51973ecdfe1ced42befe7ee8d5fd6219506b5393c");
}

TEST_CASE("sha256: the SHA-extension and portable compressions agree", "[runtime]") {
  // Runs both paths where the CPU has the extensions; elsewhere both calls take the
  // portable one and the test still checks the block interface.
  std::mt19937 random(7);
  for (std::size_t blocks : {1u, 2u, 3u, 16u, 257u}) {
    std::vector<std::uint8_t> data(64 * blocks);
    for (auto& byte : data) byte = static_cast<std::uint8_t>(random());
    Sha256::State initial{};
    for (auto& word : initial) word = static_cast<std::uint32_t>(random());
    Sha256::State portable = initial, hardware = initial;
    Sha256::compressBlocks(portable, data.data(), blocks, /*allowHardware=*/false);
    Sha256::compressBlocks(hardware, data.data(), blocks, /*allowHardware=*/true);
    INFO(blocks << " blocks, hardware path " << (Sha256::hardwareAccelerated() ? "on" : "absent"));
    CHECK(portable == hardware);
  }
  // The portable path alone reproduces a NIST vector (the digest API may take either).
  Sha256::State state = Sha256::State{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                      0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::uint8_t block[64] = {'a', 'b', 'c', 0x80};
  block[63] = 24;  // 24 bits
  Sha256::compressBlocks(state, block, 1, /*allowHardware=*/false);
  Sha256::Digest digest;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 4; ++j) digest[4 * i + j] = static_cast<std::uint8_t>(state[i] >> (24 - 8 * j));
  CHECK(Sha256::toHex(digest) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("sha256: empty updates, null pointers included, change nothing", "[runtime]") {
  Sha256 hash;
  hash.update("ab");
  hash.update(nullptr, 0);  // what an empty std::vector's data() may be
  hash.update(std::string_view());
  hash.update("c");
  CHECK(Sha256::toHex(hash.finish()) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}
