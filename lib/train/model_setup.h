// The model a run trains: the base loaded in the compute dtype (train.precision), then either
// LoRA on the configured projections (base frozen; a fresh adapter or lora.init_from) or every
// parameter trainable (full fine-tune); and what the run leaves behind: RUN_DIR/adapter in PEFT's
// layout, or RUN_DIR/model as a Hugging Face folder.
#pragma once

#include <optional>

#include "config/run_config.h"
#include "model/llama_model.h"
#include "model/lora.h"
#include "parallel/parallel_strategy.h"

namespace ft::data {
class Tokenizer;
}

namespace ft::train {

struct TrainableModel {
  model::LlamaForCausalLM model{nullptr};
  parallel::NamedParameters trainable;    // requires_grad, in model order
  std::optional<model::LoraOptions> lora;  // set for LoRA runs
};

c10::ScalarType compute_dtype(const config::RunConfig& config);

// The model in the compute dtype on `device` (with parallel.strategy fsdp: on the host, for the
// strategy to shard onto the device), LoRA applied or every parameter trainable.
TrainableModel build_trainable_model(const config::RunConfig& config, const data::Tokenizer& tokenizer,
                                     c10::Device device = c10::kCPU);

// After training, on every rank (collective for sharded strategies; rank 0 writes): the adapter
// (LoRA) or the whole model (full fine-tune), gathered one parameter group at a time.
void save_result(const config::RunConfig& config, TrainableModel& model, parallel::ParallelStrategy& strategy,
                 dist::Communicator& comm, const data::Tokenizer& tokenizer);

}  // namespace ft::train
