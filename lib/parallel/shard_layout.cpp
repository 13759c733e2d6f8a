// ZeRO's flat layout: buckets planned as for DDP, each padded to world_size equal chunks.
#include "parallel/shard_layout.h"

#include <algorithm>

#include "parallel/grad_buckets.h"
#include "util/error.h"

namespace ft::parallel {

ShardLayout::ShardLayout(const std::vector<std::int64_t>& slot_numels, int world_size, int rank,
                         std::int64_t bucket_elements)
    : world_(world_size), rank_(rank) {
  FT_ASSERT(world_size >= 1 && rank >= 0 && rank < world_size, "rank ", rank, " of ", world_size);
  auto groups = plan_buckets(slot_numels, bucket_elements);
  offsets_.assign(slot_numels.size(), 0);
  // plan_buckets lists the last bucket first, each from its last slot: lay them out in flat order.
  for (auto g = groups.rbegin(); g != groups.rend(); ++g) {
    ShardBucket b;
    b.begin = numel_;
    b.shard_offset = shard_numel_;
    b.slots.assign(g->rbegin(), g->rend());
    std::int64_t length = 0;
    for (std::size_t s : b.slots) {
      offsets_[s] = b.begin + length;
      length += slot_numels[s];
    }
    b.chunk = (length + world_ - 1) / world_;
    numel_ += b.chunk * world_;
    shard_numel_ += b.chunk;
    buckets_.push_back(std::move(b));
  }
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
