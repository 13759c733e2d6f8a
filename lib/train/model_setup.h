// The model a run trains: the base loaded in the compute dtype (train.precision), then either
// LoRA on the configured projections (base frozen; a fresh adapter or lora.init_from) or every
// parameter trainable (full fine-tune); and what the run leaves behind: RUN_DIR/adapter in PEFT's
// layout, or RUN_DIR/model as a Hugging Face folder. Before anything loads, the tokenizer's ids
// must fit config.json's vocab_size (check_vocab_size).
#pragma once

#include <optional>

#include "checkpoint/checkpoint_writer.h"
#include "config/run_config.h"
#include "model/llama_model.h"
#include "model/lora.h"
#include "model/model_loader.h"
#include "parallel/parallel_strategy.h"

namespace ft::data {
class Tokenizer;
}

namespace ft::train {

struct TrainableModel {
  model::LlamaForCausalLM model{nullptr};
  parallel::NamedParameters trainable;    // requires_grad, in model order
  std::vector<std::int64_t> trainable_layers;  // each one's decoder layer (-1: outside the layers)
  std::optional<model::LoraOptions> lora;  // set for LoRA runs
  std::optional<model::QuantizationReport> quantization;  // set when model.quantize is int8/nf4
};

c10::ScalarType compute_dtype(const config::RunConfig& config);

// Throws ft::Error when the tokenizer has ids the model has no embedding row for (its vocab_size()
// is larger than config.json's vocab_size): "MODEL/config.json: vocab_size N is smaller than the
// tokenizer's M ids (FILE) ...". build_trainable_model checks it before loading the weights.
void check_vocab_size(const io::LlamaConfig& model, const data::Tokenizer& tokenizer, const std::string& config_file);

// The model in the compute dtype on `device` (with parallel.strategy fsdp: on the host, for the
// strategy to shard onto the device), LoRA applied or every parameter trainable; with
// model.quantize the frozen projections quantized as they load.
TrainableModel build_trainable_model(const config::RunConfig& config, const data::Tokenizer& tokenizer,
                                     c10::Device device = c10::kCPU);

// Collective (every rank calls it; rank 0 writes): the adapter in PEFT's layout (LoRA) or the
// whole model as a Hugging Face folder (full fine-tune) into `dir`, gathered one parameter group
// at a time. When rank 0's writing fails (a full disk) it still takes part in every gather and
// throws at the end, so the other ranks never wait on a collective it skipped.
void write_trained_weights(const config::RunConfig& config, TrainableModel& model, parallel::ParallelStrategy& strategy,
                           comm::Communicator& comm, const data::Tokenizer& tokenizer, const std::string& dir);

// For a checkpoint saved in the background: the strategy gathers the weights (collective) and
// rank 0 keeps host copies (in `staging`, pinned from a GPU); the writer it returns writes them into
// CHECKPOINT_DIR/adapter or CHECKPOINT_DIR/model later, on any thread, as write_trained_weights
// would have. `config`, `model` and `tokenizer` must outlive the writer.
checkpoint::WeightsWriter snapshot_trained_weights(const config::RunConfig& config, TrainableModel& model,
                                                   parallel::ParallelStrategy& strategy, comm::Communicator& comm,
                                                   const data::Tokenizer& tokenizer, checkpoint::HostStaging& staging);
// After training: write_trained_weights into RUN_DIR/adapter or RUN_DIR/model.
void save_result(const config::RunConfig& config, TrainableModel& model, parallel::ParallelStrategy& strategy,
                 comm::Communicator& comm, const data::Tokenizer& tokenizer);

}  // namespace ft::train
