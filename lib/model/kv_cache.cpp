#include "model/kv_cache.h"

#include <torch/torch.h>

#include "util/error.h"

namespace ft::model {

KvCache::KvCache(const io::LlamaConfig& config, std::int64_t batch_size, std::int64_t capacity,
                 const at::TensorOptions& options)
    : capacity_(capacity) {
  for (std::int64_t i = 0; i < config.num_hidden_layers; ++i) {
    keys_.push_back(torch::empty({batch_size, config.num_key_value_heads, capacity, config.head_dim}, options));
    values_.push_back(torch::empty_like(keys_.back()));
  }
}

std::pair<at::Tensor, at::Tensor> KvCache::update(std::size_t layer, const at::Tensor& k, const at::Tensor& v) {
  FT_ASSERT(layer < keys_.size(), "layer index within the cache");
  const std::int64_t t = k.size(2);
  FT_CHECK(length_ + t <= capacity_, "the sequence would grow to ", length_ + t,
           " positions, beyond the KV cache's ", capacity_, " (lower --max-new-tokens)");
  keys_[layer].narrow(2, length_, t).copy_(k);
  values_[layer].narrow(2, length_, t).copy_(v);
  return {keys_[layer].narrow(2, 0, length_ + t), values_[layer].narrow(2, 0, length_ + t)};
}

void KvCache::commit(std::int64_t new_positions) { length_ += new_positions; }

}  // namespace ft::model
