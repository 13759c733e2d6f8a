#include "train/evaluator.h"

#include <torch/torch.h>

#include <cmath>

#include "data/batch.h"
#include "model/causal_lm_loss.h"

namespace ft::train {

EvalResult evaluate(model::LlamaForCausalLM& model, const data::TokenFile& file, std::int64_t micro_batch_size,
                    std::int64_t max_seq_len, bool packing, comm::Communicator& comm, const ForwardHooks& hooks,
                    std::int64_t loss_chunk_tokens) {
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  data::ItemView view(file, max_seq_len, packing);
  const auto n = static_cast<std::int64_t>(view.size());
  const std::int64_t world = comm.world_size(), rank = comm.rank();
  const std::int64_t most_items = (n + world - 1) / world;
  const std::int64_t batches = (most_items + micro_batch_size - 1) / micro_batch_size;
  const auto device = model->output_weight().device();
  torch::Tensor loss_sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device));
  std::int64_t tokens = 0;
  for (std::int64_t b = 0; b < batches; ++b) {
    std::vector<std::int64_t> items;
    for (std::int64_t k = b * micro_batch_size; k < (b + 1) * micro_batch_size; ++k)
      if (rank + k * world < n) items.push_back(rank + k * world);
    const bool dummy = items.empty();
    if (dummy) items.push_back(0);
    data::Batch batch = data::collate(view, items);
    model::ForwardOptions options;
    options.layer_runner = hooks.layer_runner;
    if (hooks.before_forward) hooks.before_forward();
    options.position_ids = batch.position_ids.to(device);
    if (batch.packed) options.segment_ids = batch.segment_ids.to(device);
    model::LossSum loss =
        model::model_loss(model, batch.input_ids.to(device), batch.labels.to(device), options, loss_chunk_tokens);
    if (dummy) continue;
    loss_sum += loss.sum.detach();  // on the device: read once, after the last batch
    tokens += loss.tokens;
  }
  const torch::Tensor token_count = torch::full({1}, static_cast<double>(tokens), loss_sum.options());
  const std::vector<double> totals =
      comm::all_reduce_to_host(comm, torch::cat({loss_sum.reshape({1}), token_count}), comm::ReduceOp::kSum);
  if (was_training) model->train();
  EvalResult r;
  r.tokens = static_cast<std::int64_t>(totals[1]);
  r.loss = r.tokens > 0 ? totals[0] / r.tokens : NAN;
  r.perplexity = std::exp(r.loss);
  return r;
}

}  // namespace ft::train
