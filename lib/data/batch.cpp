#include "data/batch.h"

#include <torch/torch.h>

#include <algorithm>

#include "util/error.h"

namespace ft::data {

ItemView::ItemView(const TokenFile& file, std::int64_t max_seq_len, bool packing) : file_(file) {
  first_sample_.push_back(0);
  if (!packing) {
    for (std::size_t i = 1; i <= file.num_samples(); ++i) first_sample_.push_back(i);
    return;
  }
  std::int64_t length = 0;
  for (std::size_t i = 0; i < file.num_samples(); ++i) {
    const auto n = static_cast<std::int64_t>(file.sample_length(i));
    FT_CHECK(n <= max_seq_len, file.path(), ": sample ", i, " has ", n, " tokens, more than data.max_seq_len ",
             max_seq_len, " (re-run ft_prep)");
    if (length > 0 && length + n > max_seq_len) {
      first_sample_.push_back(i);
      length = 0;
    }
    length += n;
  }
  first_sample_.push_back(file.num_samples());
}

std::int64_t ItemView::item_length(std::size_t item) const {
  std::int64_t n = 0;
  for (std::size_t s = first_sample(item); s < end_sample(item); ++s) n += file_.sample_length(s);
  return n;
}

Batch collate(const ItemView& view, const std::vector<std::int64_t>& items) {
  FT_ASSERT(!items.empty(), "a batch has at least one item");
  std::int64_t width = 0;
  for (auto item : items) width = std::max(width, view.item_length(item));
  const auto rows = static_cast<std::int64_t>(items.size());
  Batch b;
  b.items = items;
  b.input_ids = torch::zeros({rows, width}, torch::kLong);
  b.labels = torch::full({rows, width}, kIgnoreLabel, torch::kLong);
  b.position_ids = torch::zeros({rows, width}, torch::kLong);
  b.segment_ids = torch::full({rows, width}, -1, torch::kLong);
  auto ids = b.input_ids.accessor<std::int64_t, 2>();
  auto labels = b.labels.accessor<std::int64_t, 2>();
  auto positions = b.position_ids.accessor<std::int64_t, 2>();
  auto segments = b.segment_ids.accessor<std::int64_t, 2>();
  const TokenFile& file = view.file();
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t t = 0, segment = 0;
    for (std::size_t s = view.first_sample(items[r]); s < view.end_sample(items[r]); ++s, ++segment) {
      const std::int32_t* tokens = file.sample_tokens(s);
      const std::uint8_t* targets = file.sample_targets(s);
      const auto n = static_cast<std::int64_t>(file.sample_length(s));
      for (std::int64_t i = 0; i < n; ++i, ++t) {
        ids[r][t] = tokens[i];
        positions[r][t] = i;
        segments[r][t] = segment;
        if (targets[i] && i > 0) {
          labels[r][t] = tokens[i];
          ++b.num_target_tokens;
        }
      }
      ++b.num_samples;
    }
    b.packed = b.packed || segment > 1;
    b.num_tokens += t;
  }
  b.num_padding = rows * width - b.num_tokens;
  return b;
}

}  // namespace ft::data
