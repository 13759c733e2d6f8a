// Evaluation loss and perplexity over a token file, split between ranks (item i on rank
// i mod W) and summed over them: the mean loss per target token of the whole eval set. Every
// rank runs the same number of forward passes (a rank out of items runs a dummy batch whose
// loss is discarded), so strategies that communicate inside forward (FSDP) stay in step.
// loss_chunk_tokens: the head and the loss in chunks of target tokens (model::model_loss).
#pragma once

#include <cstdint>
#include <functional>

#include "data/token_file.h"
#include "comm/communicator.h"
#include "model/llama_model.h"

namespace ft::train {

struct EvalResult {
  double loss = 0;
  double perplexity = 0;
  std::int64_t tokens = 0;
};

// How the strategy wants forwards run (FSDP gathers parameters around layers).
struct ForwardHooks {
  model::LayerRunner layer_runner;
  std::function<void()> before_forward;
};

EvalResult evaluate(model::LlamaForCausalLM& model, const data::TokenFile& file, std::int64_t micro_batch_size,
                    std::int64_t max_seq_len, bool packing, comm::Communicator& comm, const ForwardHooks& hooks = {},
                    std::int64_t loss_chunk_tokens = 0);

}  // namespace ft::train
