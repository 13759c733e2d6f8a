// Non-cryptographic content fingerprints (FNV-1a, 64-bit) for telling files apart: tokenizer
// and dataset identity in token-file headers, config hashes across ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ft {

constexpr std::uint64_t kFnvOffsetBasis = 0xcbf29ce484222325ull;

std::uint64_t fnv1a64(const void* data, std::size_t size, std::uint64_t seed = kFnvOffsetBasis);
std::string to_hex(std::uint64_t value);  // 16 lowercase hex digits

}  // namespace ft
