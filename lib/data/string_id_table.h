// A read-mostly string -> id table for the tokenizers' vocabularies (sentencepiece pieces,
// byte-level BPE tokens): open addressing with linear probing on util/hash.h's table hash, the
// keys copied into one pool. Both tokenizers look up every candidate piece during encoding, so
// this sits on their hot path (bench_tokenizer). Safe to share once built.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "util/hash.h"

namespace ft::data {

class StringIdTable {
 public:
  // Room for `count` keys at a load factor of at most 1/2; drops what the table held.
  void reserve(std::size_t count) {
    std::size_t capacity = 16;
    while (capacity < 2 * count) capacity *= 2;
    slots_.assign(capacity, Slot{});
    pool_.clear();
    mask_ = capacity - 1;
  }
  // False (and the first id kept) when the key is already present. reserve() first.
  bool insert(std::string_view key, std::int32_t id) {
    const std::uint64_t h = table_hash_bytes(key.data(), key.size());
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s = Slot{h, static_cast<std::uint32_t>(pool_.size()), static_cast<std::uint32_t>(key.size()), id};
        pool_.append(key.data(), key.size());
        return true;
      }
      if (s.hash == h && s.size == key.size() && pool_.compare(s.offset, s.size, key) == 0) return false;
    }
  }
  // The id of the key, or -1.
  std::int32_t find(const char* data, std::size_t size) const {
    if (slots_.empty()) return -1;
    const std::uint64_t h = table_hash_bytes(data, size);
    for (std::size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == h && s.size == size && std::memcmp(pool_.data() + s.offset, data, size) == 0) return s.id;
    }
  }

 private:
  struct Slot {
    std::uint64_t hash = 0;
    std::uint32_t offset = 0, size = 0;
    std::int32_t id = -1;
  };
  std::vector<Slot> slots_;
  std::string pool_;
  std::size_t mask_ = 0;
};

}  // namespace ft::data
