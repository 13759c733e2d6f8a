// DistributedSampler: which dataset indices each rank reads in each epoch, exactly as PyTorch
// 1.13's torch.utils.data.DistributedSampler yields them (same LibTorch generator and randperm,
// so the shuffles are bit-identical), plus a saveable position for exact mid-epoch resumption,
// also on a different number of ranks. It hands out indices only: batching, packing and
// reading the samples are the dataset's and the loader's business.
#pragma once

#include <cstdint>
#include <vector>

namespace ft::data {

// Where a sampler stands: `consumed` counts samples consumed in `epoch` by all ranks together
// (global samples), so a state saved on W ranks can be restored on W' ranks.
struct SamplerState {
  std::int64_t epoch = 0;
  std::int64_t consumed = 0;
};

// The global sequence of an epoch. With shuffle, perm = torch.randperm(n) from a CPU generator
// seeded with seed + epoch; without, perm = 0..n-1. PyTorch pads the tail by repeating the head
// (several times when n < W), so position p of the padded list is S[p] = perm[p % n]: the
// padded list for W ranks is the first total_size entries of this one endless sequence S,
// whatever W is. Rank r of W takes positions r, r+W, r+2W, ... (PyTorch's indices[r::W]).
//
// Resumption. After c global samples of an epoch, the positions used are exactly S[0, c) on any
// number of ranks (strided assignment only changes which rank read which). next_indices(k) on
// rank r returns S[c + r + W*j] for j < k and advances c by W*k, so all ranks together read
// S[c, c + W*k): contiguous whatever c is. The epoch ends at
//   end(c) = c + ceil((n - c) / W) * W     without drop_last,
//   end(c) = c + floor((n - c) / W) * W    with drop_last         (end(c) = c once c >= n),
// which is invariant as c advances by multiples of W and, when c is a multiple of W, equals
// PyTorch's total_size. Hence the guarantee:
//   - restored on the same W: rank r's remaining indices are epoch_indices()[c / W ...], bit
//     for bit what an uninterrupted PyTorch epoch would still yield;
//   - restored on another W' (c need not be a multiple of W'): the epoch as a whole reads
//     S[0, end'(c)): without drop_last every one of the n samples at least once and the only
//     extra reads are the fewer than W' head repeats S[n, end'); with drop_last each sample at
//     most once and fewer than W' skipped at the tail. Every rank reads the same number (no
//     rank waits in a collective for another). A state saved after the epoch ended stays
//     ended without drop_last (c >= n); with drop_last, fewer ranks may still read some of the
//     tail that W ranks skipped (still each sample at most once). When c is a multiple of W'
//     too, the rest of the epoch is exactly what W' ranks from the start would read after c.
// Not thread-safe for mutation; each rank owns its own sampler.
class DistributedSampler {
 public:
  // dataset_size = n samples; rank in [0, world_size). Throws ft::Error when the arguments
  // are invalid or a rank would get no samples at all.
  DistributedSampler(std::int64_t dataset_size, std::int64_t world_size, std::int64_t rank,
                     bool shuffle = true, std::int64_t seed = 0, bool drop_last = false);

  // Starts epoch `epoch` (>= 0) from its beginning (consumed = 0) and reshuffles.
  void set_epoch(std::int64_t epoch);
  std::int64_t epoch() const { return epoch_; }

  // This rank's indices for the whole current epoch, as PyTorch's __iter__ yields them
  // (ignores the position: a fresh epoch on this world size).
  std::vector<std::int64_t> epoch_indices() const;
  // The padded global list of the current epoch (total_size entries), all ranks together.
  std::vector<std::int64_t> global_indices() const;

  // PyTorch's len(sampler) and total_size for this world size (a fresh epoch).
  std::int64_t num_samples() const { return num_samples_; }
  std::int64_t total_size() const { return num_samples_ * world_size_; }

  // The next up to `count` indices of this rank; fewer (possibly none) when the epoch runs
  // out, never wrapping into the next epoch. Advances the position by world_size * returned.
  std::vector<std::int64_t> next_indices(std::int64_t count);
  // How many indices next_indices still has for this rank in this epoch (same on every rank).
  std::int64_t remaining() const;

  SamplerState state() const { return {epoch_, consumed_}; }
  // Continues from a state saved on any world size (see the guarantee above); reshuffles for
  // state.epoch.
  void restore(const SamplerState& state);

  std::int64_t dataset_size() const { return dataset_size_; }
  std::int64_t world_size() const { return world_size_; }
  std::int64_t rank() const { return rank_; }

 private:
  std::int64_t end_position() const;  // end(consumed_) above
  std::int64_t at(std::int64_t position) const { return perm_[position % dataset_size_]; }

  std::int64_t dataset_size_;
  std::int64_t world_size_;
  std::int64_t rank_;
  bool shuffle_;
  std::int64_t seed_;
  bool drop_last_;
  std::int64_t num_samples_;
  std::int64_t epoch_ = 0;
  std::int64_t consumed_ = 0;
  std::vector<std::int64_t> perm_;  // this epoch's perm (n entries); S[p] = perm_[p % n]
};

}  // namespace ft::data
