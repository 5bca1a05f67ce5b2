#include "runtime/Sha256.h"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#define ATTNJIT_SHA256_X86 1
#endif

namespace attnjit::runtime {
namespace {

// First 32 bits of the fractional parts of the cube roots of the first 64 primes.
constexpr std::uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

constexpr std::uint32_t rotateRight(std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }


void compressPortable(Sha256::State& state, const std::uint8_t* block) {
  std::uint32_t w[64];
  for (int i = 0; i < 16; ++i) {
    w[i] = std::uint32_t(block[4 * i]) << 24 | std::uint32_t(block[4 * i + 1]) << 16 |
           std::uint32_t(block[4 * i + 2]) << 8 | std::uint32_t(block[4 * i + 3]);
  }
  for (int i = 16; i < 64; ++i) {
    std::uint32_t s0 = rotateRight(w[i - 15], 7) ^ rotateRight(w[i - 15], 18) ^ (w[i - 15] >> 3);
    std::uint32_t s1 = rotateRight(w[i - 2], 17) ^ rotateRight(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  std::uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  std::uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int i = 0; i < 64; ++i) {
    std::uint32_t sum1 = rotateRight(e, 6) ^ rotateRight(e, 11) ^ rotateRight(e, 25);
    std::uint32_t choice = (e & f) ^ (~e & g);
    std::uint32_t t1 = h + sum1 + choice + kRoundConstants[i] + w[i];
    std::uint32_t sum0 = rotateRight(a, 2) ^ rotateRight(a, 13) ^ rotateRight(a, 22);
    std::uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    std::uint32_t t2 = sum0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

#ifdef ATTNJIT_SHA256_X86
bool cpuHasShaExtensions() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  const bool ssse3 = (ecx >> 9) & 1, sse41 = (ecx >> 19) & 1;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool sha = (ebx >> 29) & 1;
  return ssse3 && sse41 && sha;
}

// Two rounds per sha256rnds2, which keeps the state as (A, B, E, F) and (C, D, G, H)
// with A and C in the highest lane; after two rounds the old (A, B, E, F) is the new
// (C, D, G, H), so the two registers swap roles from one call to the next.
__attribute__((target("sha,sse4.1,ssse3"))) void compressShaExtensions(Sha256::State& state,
                                                                       const std::uint8_t* blocks,
                                                                       std::size_t count) {
  const __m128i byteSwap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
  // (A, B, C, D), (E, F, G, H) → (A, B, E, F), (C, D, G, H).
  __m128i low = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[0])), 0xB1);
  __m128i high = _mm_shuffle_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(&state[4])), 0x1B);
  __m128i abef = _mm_alignr_epi8(low, high, 8);
  __m128i cdgh = _mm_blend_epi16(high, low, 0xF0);
  for (; count > 0; --count, blocks += 64) {
    const __m128i abefBefore = abef, cdghBefore = cdgh;
    __m128i w[4];  // w[g % 4]: message words 4g .. 4g + 3
    for (int i = 0; i < 4; ++i)
      w[i] = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blocks + 16 * i)), byteSwap);
    for (int group = 0; group < 16; ++group) {
      __m128i& words = w[group % 4];
      if (group >= 4) {
        // W[i..i+3] from W[i-16..i-13] (words), W[i-12..i-9], W[i-7..i-4] and W[i-4..i-1].
        const __m128i& previous = w[(group + 3) % 4];
        __m128i sum = _mm_sha256msg1_epu32(words, w[(group + 1) % 4]);
        sum = _mm_add_epi32(sum, _mm_alignr_epi8(previous, w[(group + 2) % 4], 4));
        words = _mm_sha256msg2_epu32(sum, previous);
      }
      const __m128i constants = _mm_loadu_si128(reinterpret_cast<const __m128i*>(&kRoundConstants[4 * group]));
      const __m128i wk = _mm_add_epi32(words, constants);
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(wk, 0x0E));
    }
    abef = _mm_add_epi32(abef, abefBefore);
    cdgh = _mm_add_epi32(cdgh, cdghBefore);
  }
  // Back to (A, B, C, D), (E, F, G, H).
  const __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  const __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[0]), _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(&state[4]), _mm_alignr_epi8(dchg, feba, 8));
}
#endif

}  // namespace

// First 32 bits of the fractional parts of the square roots of the first 8 primes.
Sha256::Sha256()
    : state_{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19} {}

bool Sha256::hardwareAccelerated() {
#ifdef ATTNJIT_SHA256_X86
  static const bool has = cpuHasShaExtensions();
  return has;
#else
  return false;
#endif
}

void Sha256::compressBlocks(State& state, const std::uint8_t* blocks, std::size_t count, bool allowHardware) {
#ifdef ATTNJIT_SHA256_X86
  if (allowHardware && hardwareAccelerated()) {
    compressShaExtensions(state, blocks, count);
    return;
  }
#else
  (void)allowHardware;
#endif
  for (; count > 0; --count, blocks += 64) compressPortable(state, blocks);
}

void Sha256::update(const void* data, std::size_t size) {
  // Empty input may come as a null pointer (an empty vector's data()), which memcpy must
  // never see, even for zero bytes.
  if (size == 0) return;
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  totalBytes_ += size;
  if (bufferedBytes_ > 0) {
    std::size_t take = std::min(size, buffer_.size() - bufferedBytes_);
    std::memcpy(buffer_.data() + bufferedBytes_, bytes, take);
    bufferedBytes_ += take;
    bytes += take;
    size -= take;
    if (bufferedBytes_ < buffer_.size()) return;
    compressBlocks(state_, buffer_.data(), 1, true);
    bufferedBytes_ = 0;
  }
  const std::size_t wholeBlocks = size / 64;
  compressBlocks(state_, bytes, wholeBlocks, true);
  bytes += 64 * wholeBlocks;
  size -= 64 * wholeBlocks;
  if (size > 0) {
    std::memcpy(buffer_.data(), bytes, size);
    bufferedBytes_ = size;
  }
}

Sha256::Digest Sha256::finish() {
  // Padding: a 1 bit, zeros up to 56 bytes mod 64, then the message length in bits (big endian).
  const std::uint64_t bitLength = totalBytes_ * 8;
  const std::uint8_t one = 0x80;
  update(&one, 1);
  const std::uint8_t zero = 0;
  while (bufferedBytes_ != 56) update(&zero, 1);
  std::uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<std::uint8_t>(bitLength >> (56 - 8 * i));
  update(length, 8);

  Digest digest;
  for (int i = 0; i < 8; ++i) {
    digest[4 * i] = static_cast<std::uint8_t>(state_[i] >> 24);
    digest[4 * i + 1] = static_cast<std::uint8_t>(state_[i] >> 16);
    digest[4 * i + 2] = static_cast<std::uint8_t>(state_[i] >> 8);
    digest[4 * i + 3] = static_cast<std::uint8_t>(state_[i]);
  }
  return digest;
}

Sha256::Digest Sha256::digest(std::string_view text) {
  Sha256 hash;
  hash.update(text);
  return hash.finish();
}

std::string Sha256::hexDigest(std::string_view text) { return toHex(digest(text)); }

std::string Sha256::toHex(const Digest& digest) {
  static const char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(64);
  for (std::uint8_t byte : digest) {
    hex.push_back(kHex[byte >> 4]);
    hex.push_back(kHex[byte & 15]);
  }
  return hex;
}

}  // namespace attnjit::runtime
