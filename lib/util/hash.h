// Non-cryptographic content fingerprints (FNV-1a, 64-bit) for telling files apart: tokenizer
// and dataset identity in token-file headers, config hashes across ranks; CRC-32 (zlib's, the
// same as Python's zlib.crc32, several GB/s) for checking that a checkpoint file is intact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace ft {

constexpr std::uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t seed = kFnvOffsetBasis);
std::string to_hex(std::uint64_t value);  // 16 lowercase hex digits

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc = 0);
// CRC-32 of a whole file, read in large blocks; throws ft::Error naming the path.
std::uint32_t file_crc32(const std::string& path);
std::string crc32_hex(std::uint32_t crc);  // 8 lowercase hex digits

// Fast in-memory hashing for hash tables (the tokenizers' piece and merge tables): a 64-bit
// finalizer (MurmurHash3's fmix64) and a word-at-a-time byte hash built on it. Not stable across
// versions and not for identities on disk (use fnv1a64 there).
inline std::uint64_t mix64(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

inline std::uint64_t table_hash_bytes(const char* p, std::size_t n) {
  std::uint64_t h = 0x9E3779B97F4A7C15ull * (n + 1);
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    h = mix64(h ^ v);
    p += 8;
    n -= 8;
  }
  std::uint64_t v = 0;
  std::memcpy(&v, p, n);
  return mix64(h ^ v);
}

}  // namespace ft
