// From token-file samples to model inputs. Without packing an item is one sample and a batch is
// padded to its longest item; with packing an item is a pack of consecutive samples (greedy, in
// file order, up to max_seq_len) whose positions restart at every sample and whose tokens attend
// only within their sample (segment ids feed the model's block-diagonal causal mask).
// Packs are fixed by the file alone, so every rank sees the same items and the sampler shuffles
// packs, not samples.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "data/token_file.h"

namespace ft::data {

constexpr std::int64_t kIgnoreLabel = -100;  // equal to model::kIgnoreIndex

struct Batch {
  at::Tensor input_ids;    // [B,T] int64 (padding: 0)
  at::Tensor labels;       // [B,T] int64, -100 where not trained on (prompt, padding, sample starts)
  at::Tensor position_ids; // [B,T] int64, restarting at 0 for every sample
  at::Tensor segment_ids;  // [B,T] int64, sample index within the row; -1 for padding
  std::int64_t num_samples = 0;
  std::int64_t num_tokens = 0;         // non-padding tokens
  std::int64_t num_target_tokens = 0;  // tokens the loss counts
  std::int64_t num_padding = 0;
  // A row holds more than one sample: the model needs segment_ids. Otherwise padding sits only at
  // the rows' ends, where causality already keeps it from every real token, and plain causal
  // attention (a fused kernel's fast path) gives the same losses and gradients.
  bool packed = false;
  std::vector<std::int64_t> items;     // dataset items in this batch
};

// The dataset as the sampler sees it: a list of items, each a run of consecutive samples.
class ItemView {
 public:
  ItemView(const TokenFile& file, std::int64_t max_seq_len, bool packing);
  std::size_t size() const { return first_sample_.size() - 1; }
  std::size_t first_sample(std::size_t item) const { return first_sample_[item]; }
  std::size_t end_sample(std::size_t item) const { return first_sample_[item + 1]; }
  std::int64_t item_length(std::size_t item) const;  // tokens
  const TokenFile& file() const { return file_; }

 private:
  const TokenFile& file_;
  std::vector<std::size_t> first_sample_;
};

Batch collate(const ItemView& view, const std::vector<std::int64_t>& items);

}  // namespace ft::data
