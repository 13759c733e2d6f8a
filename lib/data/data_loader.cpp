#include "data/data_loader.h"

#include "util/error.h"

namespace ft::data {

TrainDataLoader::TrainDataLoader(std::shared_ptr<TokenFile> file, const LoaderOptions& options, int rank,
                                 int world_size, SamplerState start)
    : file_(std::move(file)),
      options_(options),
      view_(*file_, options.max_seq_len, options.packing),
      sampler_(static_cast<std::int64_t>(view_.size()), world_size, rank, options.shuffle,
               static_cast<std::int64_t>(options.seed), /*drop_last=*/false) {
  const std::int64_t per_step = options.micro_batch_size * options.accumulation;
  steps_per_epoch_ = sampler_.num_samples() / per_step;
  FT_CHECK(steps_per_epoch_ > 0, file_->path(), ": ", view_.size(), options.packing ? " packed sequences" : " samples",
           " give each of the ", world_size, " ranks ", sampler_.num_samples(),
           ", fewer than one optimizer step needs (micro_batch_size x accumulation = ", per_step,
           "); lower train.global_batch_size or add data");
  sampler_.restore(start);
  prefetcher_ = std::make_unique<Prefetcher<StepData>>([this] { return produce(); }, options.prefetch);
}

std::optional<StepData> TrainDataLoader::produce() {
  const std::int64_t per_step = options_.micro_batch_size * options_.accumulation;
  // A partial step at the end of an epoch is skipped: move to the next epoch.
  if (sampler_.remaining() < per_step) sampler_.set_epoch(sampler_.epoch() + 1);
  StepData step;
  step.epoch = sampler_.epoch();
  for (std::int64_t m = 0; m < options_.accumulation; ++m) {
    std::vector<std::int64_t> items = sampler_.next_indices(options_.micro_batch_size);
    FT_ASSERT(static_cast<std::int64_t>(items.size()) == options_.micro_batch_size, "a whole micro-batch");
    Batch batch = collate(view_, items);
    if (options_.pin_memory) {
      for (at::Tensor* t : {&batch.input_ids, &batch.labels, &batch.position_ids, &batch.segment_ids})
        *t = t->pin_memory();
    }
    step.micro_batches.push_back(std::move(batch));
  }
  step.next_state = sampler_.state();
  const double total = static_cast<double>(sampler_.total_size());
  step.epoch_progress = static_cast<double>(step.epoch) + static_cast<double>(step.next_state.consumed) / total;
  return step;
}

StepData TrainDataLoader::next() {
  std::optional<StepData> step = prefetcher_->next();
  FT_ASSERT(step.has_value(), "the training data never ends");
  return std::move(*step);
}

}  // namespace ft::data
