// ZeRO's flat layout: buckets planned as for DDP, each padded to world_size equal chunks.
#include "parallel/shard_layout.h"

#include <algorithm>

#include "parallel/grad_buckets.h"
#include "util/error.h"

namespace ft::parallel {

ShardLayout::ShardLayout(const std::vector<std::int64_t>& slot_numels, int world_size, int rank,
                         std::int64_t bucket_elements)
    : world_(world_size), rank_(rank) {
  // plan_buckets lists the last bucket first, each from its last slot: lay them out in flat order.
  auto planned = plan_buckets(slot_numels, bucket_elements);
  std::vector<std::vector<std::size_t>> groups;
  for (auto g = planned.rbegin(); g != planned.rend(); ++g) groups.emplace_back(g->rbegin(), g->rend());
  build(slot_numels, groups);
}

ShardLayout::ShardLayout(const std::vector<std::int64_t>& slot_numels, int world_size, int rank,
                         const std::vector<std::vector<std::size_t>>& groups)
    : world_(world_size), rank_(rank) {
  build(slot_numels, groups);
}

void ShardLayout::build(const std::vector<std::int64_t>& slot_numels, const std::vector<std::vector<std::size_t>>& groups) {
  FT_ASSERT(world_ >= 1 && rank_ >= 0 && rank_ < world_, "rank ", rank_, " of ", world_);
  offsets_.assign(slot_numels.size(), -1);
  for (const auto& group : groups) {
    ShardBucket b;
    b.begin = numel_;
    b.shard_offset = shard_numel_;
    b.slots = group;
    std::int64_t length = 0;
    for (std::size_t s : b.slots) {
      FT_ASSERT(s < slot_numels.size() && offsets_[s] < 0, "slot ", s, " in exactly one bucket");
      offsets_[s] = b.begin + length;
      length += slot_numels[s];
    }
    b.chunk = (length + world_ - 1) / world_;
    numel_ += b.chunk * world_;
    shard_numel_ += b.chunk;
    buckets_.push_back(std::move(b));
  }
  for (std::size_t s = 0; s < offsets_.size(); ++s) FT_ASSERT(offsets_[s] >= 0, "slot ", s, " in a bucket");
}

std::vector<ShardPiece> ShardLayout::shard_pieces(const std::vector<std::string>& slot_names,
                                                 const std::vector<std::int64_t>& slot_numels) const {
  FT_ASSERT(slot_names.size() == offsets_.size() && slot_numels.size() == offsets_.size(), "one name per slot");
  std::vector<ShardPiece> pieces;
  for (const ShardBucket& b : buckets_) {
    const std::int64_t begin = chunk_begin(b), end = begin + b.chunk;
    for (std::size_t s : b.slots) {
      const std::int64_t from = std::max(begin, offsets_[s]), to = std::min(end, offsets_[s] + slot_numels[s]);
      if (from < to) pieces.push_back({slot_names[s], from - offsets_[s], to - from, b.shard_offset + (from - begin)});
    }
  }
  return pieces;
}

std::vector<optim::DecaySegment> ShardLayout::shard_segments(const std::vector<optim::DecaySegment>& flat) const {
  std::vector<optim::DecaySegment> out;
  for (const ShardBucket& b : buckets_) {
    for (const optim::DecaySegment& s : optim::slice_segments(flat, chunk_begin(b), b.chunk)) {
      if (s.length > 0) out.push_back({b.shard_offset + s.offset, s.length, s.decay});
    }
  }
  if (out.empty()) out.push_back({0, 0, true});
  return out;
}

}  // namespace ft::parallel
