// Non-cryptographic content fingerprints (FNV-1a, 64-bit) for telling files apart: tokenizer
// and dataset identity in token-file headers, config hashes across ranks; CRC-32 (zlib's, the
// same as Python's zlib.crc32, several GB/s) for checking that a checkpoint file is intact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ft {

constexpr std::uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t seed = kFnvOffsetBasis);
std::string to_hex(std::uint64_t value);  // 16 lowercase hex digits

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc = 0);
// CRC-32 of a whole file, read in large blocks; throws ft::Error naming the path.
std::uint32_t file_crc32(const std::string& path);
std::string crc32_hex(std::uint32_t crc);  // 8 lowercase hex digits

}  // namespace ft
