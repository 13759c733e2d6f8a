// The training data of one rank, one optimizer step at a time: the sampler's next
// micro_batch x accumulation items, collated into micro-batches on a background thread
// (data.prefetch steps ahead), crossing epochs as needed. Each step carries the sampler position
// *after* it, so a checkpoint saved after step k resumes exactly at step k + 1 whatever the
// prefetcher had already read.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "data/batch.h"
#include "data/distributed_sampler.h"
#include "data/prefetcher.h"
#include "data/token_file.h"

namespace ft::data {

struct StepData {
  std::vector<Batch> micro_batches;
  std::int64_t epoch = 0;
  SamplerState next_state;  // the sampler position after this step
  double epoch_progress = 0; // epoch + fraction of the epoch consumed after this step
};

struct LoaderOptions {
  std::int64_t micro_batch_size = 1;
  std::int64_t accumulation = 1;
  std::int64_t max_seq_len = 512;
  bool packing = false;
  bool shuffle = true;
  std::uint64_t seed = 0;
  std::size_t prefetch = 2;
  // Batches in page-locked host memory (done on the prefetch thread), so that copying them to a
  // GPU with non_blocking runs asynchronously. Needs a CUDA LibTorch: set for CUDA training.
  bool pin_memory = false;
};

class TrainDataLoader {
 public:
  TrainDataLoader(std::shared_ptr<TokenFile> file, const LoaderOptions& options, int rank, int world_size,
                  SamplerState start = {});

  // Optimizer steps in one epoch: the items each rank gets, in whole steps (a partial step at
  // the end of an epoch is skipped, identically on every rank).
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  std::size_t num_items() const { return view_.size(); }

  // The next step's micro-batches; never ends (epochs follow each other): the trainer decides
  // when to stop.
  StepData next();
  double waited_seconds() const { return prefetcher_ ? prefetcher_->waited_seconds() : 0.0; }

 private:
  std::optional<StepData> produce();

  std::shared_ptr<TokenFile> file_;
  LoaderOptions options_;
  ItemView view_;
  DistributedSampler sampler_;
  std::int64_t steps_per_epoch_;
  std::unique_ptr<Prefetcher<StepData>> prefetcher_;
};

}  // namespace ft::data
