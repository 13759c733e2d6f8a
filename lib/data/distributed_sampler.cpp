// DistributedSampler: PyTorch 1.13's DistributedSampler index lists, computed with the same
// LibTorch CPU generator and randperm, and the resumable stream over them (see the header for
// the resumption guarantee). Reference values: tests/reference/make_sampler_reference.py.
#include "data/distributed_sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <mutex>

#include "util/error.h"

namespace ft::data {
namespace {

// PyTorch: num_samples = ceil((n - W) / W) with drop_last when W does not divide n (that is
// floor(n / W) for n >= W, and 0 for n < W), else ceil(n / W).
std::int64_t pytorch_num_samples(std::int64_t n, std::int64_t w, bool drop_last) {
  if (drop_last) return n / w;
  return (n + w - 1) / w;
}

// `g = torch.Generator(); g.manual_seed(seed); torch.randperm(n, generator=g).tolist()`.
// Python's manual_seed takes seed + epoch as an unsigned 64-bit value (negative seeds wrap the
// same way), so the sum is formed in uint64 here, which also avoids signed overflow.
std::vector<std::int64_t> randperm(std::int64_t n, std::uint64_t seed) {
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>();
  {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_current_seed(seed);
  }
  const torch::Tensor perm = torch::randperm(n, generator, torch::kLong).contiguous();
  const std::int64_t* p = perm.data_ptr<std::int64_t>();
  return std::vector<std::int64_t>(p, p + n);
}

}  // namespace

DistributedSampler::DistributedSampler(std::int64_t dataset_size, std::int64_t world_size,
                                       std::int64_t rank, bool shuffle, std::int64_t seed,
                                       bool drop_last)
    : dataset_size_(dataset_size),
      world_size_(world_size),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  FT_CHECK(world_size >= 1, "DistributedSampler: world_size must be at least 1, got ",
           world_size);
  FT_CHECK(rank >= 0 && rank < world_size, "DistributedSampler: rank must be in [0, ",
           world_size - 1, "] for world_size ", world_size, ", got ", rank);
  FT_CHECK(dataset_size >= 1, "DistributedSampler: the dataset must hold at least 1 sample, got ",
           dataset_size, " (hint: is the token file empty or every sample filtered out?)");
  num_samples_ = pytorch_num_samples(dataset_size, world_size, drop_last);
  FT_CHECK(num_samples_ >= 1, "DistributedSampler: drop_last with ", dataset_size,
           " samples on ", world_size, " ranks leaves every rank 0 samples; expected at least ",
           world_size, " samples (hint: turn drop_last off or use fewer ranks)");
  set_epoch(0);
}

void DistributedSampler::set_epoch(std::int64_t epoch) {
  FT_CHECK(epoch >= 0, "DistributedSampler: epoch must be >= 0, got ", epoch);
  epoch_ = epoch;
  consumed_ = 0;
  if (shuffle_) {
    perm_ = randperm(dataset_size_,
                     static_cast<std::uint64_t>(seed_) + static_cast<std::uint64_t>(epoch));
  } else if (static_cast<std::int64_t>(perm_.size()) != dataset_size_) {
    perm_.resize(dataset_size_);  // arange, the same every epoch
    for (std::int64_t i = 0; i < dataset_size_; ++i) perm_[i] = i;
  }
}

std::vector<std::int64_t> DistributedSampler::global_indices() const {
  std::vector<std::int64_t> out(total_size());
  for (std::int64_t p = 0; p < total_size(); ++p) out[p] = at(p);
  return out;
}

std::vector<std::int64_t> DistributedSampler::epoch_indices() const {
  std::vector<std::int64_t> out(num_samples_);
  for (std::int64_t j = 0; j < num_samples_; ++j) out[j] = at(rank_ + j * world_size_);
  return out;
}

std::int64_t DistributedSampler::end_position() const {
  const std::int64_t left = dataset_size_ - consumed_;
  if (left <= 0) return consumed_;
  const std::int64_t w = world_size_;
  const std::int64_t steps = drop_last_ ? left / w : (left + w - 1) / w;
  return consumed_ + steps * world_size_;
}

std::int64_t DistributedSampler::remaining() const {
  return (end_position() - consumed_) / world_size_;
}

std::vector<std::int64_t> DistributedSampler::next_indices(std::int64_t count) {
  FT_CHECK(count >= 0, "DistributedSampler::next_indices: count must be >= 0, got ", count);
  const std::int64_t n = std::min(count, remaining());
  std::vector<std::int64_t> out(n);
  for (std::int64_t j = 0; j < n; ++j) out[j] = at(consumed_ + rank_ + j * world_size_);
  consumed_ += n * world_size_;
  return out;
}

void DistributedSampler::restore(const SamplerState& state) {
  FT_CHECK(state.consumed >= 0, "DistributedSampler: restored state has consumed = ",
           state.consumed, " samples in epoch ", state.epoch, "; expected >= 0");
  set_epoch(state.epoch);
  consumed_ = state.consumed;
}

}  // namespace ft::data
