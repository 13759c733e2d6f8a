// Key/value cache for incremental decoding: per layer, preallocated [B, n_kv_heads, capacity,
// head_dim] buffers filled as tokens are generated, so each new token costs one position of
// attention work instead of a recomputation of the whole sequence.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "io/hf_config.h"

namespace ft::model {

class KvCache {
 public:
  KvCache(const io::LlamaConfig& config, std::int64_t batch_size, std::int64_t capacity,
          const at::TensorOptions& options);

  std::int64_t length() const { return length_; }  // positions already committed
  std::int64_t capacity() const { return capacity_; }

  // Writes k/v [B, nkv, T, hd] of `layer` at positions [length, length + T) and returns the
  // cached keys and values [B, nkv, length + T, hd] (views into the buffers).
  std::pair<at::Tensor, at::Tensor> update(std::size_t layer, const at::Tensor& k, const at::Tensor& v);
  // Called once every layer has been updated for the T new positions.
  void commit(std::int64_t new_positions);

 private:
  std::vector<at::Tensor> keys_, values_;
  std::int64_t length_ = 0;
  std::int64_t capacity_;
};

}  // namespace ft::model
