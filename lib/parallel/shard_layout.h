// How ZeRO lays the trainable parameters out over W ranks. Parameters are grouped into gradient
// buckets (grad_buckets.h's plan, in backward order), and each bucket's region of the flat buffer
// is padded to W equal chunks: rank r owns chunk r of every bucket. So a bucket is reduce-scattered
// (ZeRO-2) or all-gathered as soon as it is complete, in one collective with no reordering, and a
// rank's shard (its fp32 master weights, AdamW state, gradient shard) is its chunks side by side.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optim/adamw.h"

namespace ft::parallel {

// A contiguous run of a rank's shard (its master weights and AdamW moments): elements
// [param_offset, param_offset + length) of parameter `name` (flattened), at `shard_offset` in the
// shard. A checkpoint stores each rank's shard with its pieces, so that it can be read back into
// any other layout (another world size, another strategy).
struct ShardPiece {
  std::string name;
  std::int64_t param_offset = 0;
  std::int64_t length = 0;
  std::int64_t shard_offset = 0;
};

struct ShardBucket {
  std::int64_t begin = 0;         // first element of the bucket's region in the flat buffer
  std::int64_t chunk = 0;         // elements per rank: the region is world * chunk elements
  std::int64_t shard_offset = 0;  // where every rank's chunk of this bucket sits in its shard
  std::vector<std::size_t> slots;  // parameters in the bucket, in flat order
};

class ShardLayout {
 public:
  // slot_numels: the parameters' element counts in model order; bucket_elements as grad_buckets.h's.
  ShardLayout(const std::vector<std::int64_t>& slot_numels, int world_size, int rank, std::int64_t bucket_elements);
  // Buckets given explicitly, in flat order, each its slots in order (FSDP: one bucket per unit).
  // Every slot in exactly one group.
  ShardLayout(const std::vector<std::int64_t>& slot_numels, int world_size, int rank,
              const std::vector<std::vector<std::size_t>>& groups);

  int world_size() const { return world_; }
  int rank() const { return rank_; }
  // Element offset of each parameter in the flat buffer (gaps are padding; increasing with the
  // planned buckets, in the groups' order with explicit ones).
  const std::vector<std::int64_t>& slot_offsets() const { return offsets_; }
  std::int64_t numel() const { return numel_; }              // flat buffer, padded
  std::int64_t shard_numel() const { return shard_numel_; }  // per rank, the same on every rank
  // In flat order (the last bucket holds the model's last parameters: backward fills it first).
  const std::vector<ShardBucket>& buckets() const { return buckets_; }
  std::int64_t region_numel(const ShardBucket& b) const { return b.chunk * world_; }
  // First flat element of this rank's chunk of `b`.
  std::int64_t chunk_begin(const ShardBucket& b) const { return b.begin + b.chunk * rank_; }
  // This rank's shard as pieces of the named parameters (slot order), padding left out.
  std::vector<ShardPiece> shard_pieces(const std::vector<std::string>& slot_names,
                                       const std::vector<std::int64_t>& slot_numels) const;
  // The weight-decay segments of this rank's shard, from those of the flat buffer.
  std::vector<optim::DecaySegment> shard_segments(const std::vector<optim::DecaySegment>& flat_segments) const;

 private:
  void build(const std::vector<std::int64_t>& slot_numels, const std::vector<std::vector<std::size_t>>& groups);

  int world_, rank_;
  std::vector<std::int64_t> offsets_;
  std::vector<ShardBucket> buckets_;
  std::int64_t numel_ = 0, shard_numel_ = 0;
};

}  // namespace ft::parallel
