#include "train/model_setup.h"

#include <torch/torch.h>

#include <functional>
#include <memory>

#include "data/tokenizer.h"
#include "io/dtype.h"
#include "io/safetensors.h"
#include "model/model_loader.h"
#include "parallel/strategy_traits.h"
#include "util/error.h"
#include "util/file_util.h"
#include "util/log.h"

namespace ft::train {

c10::ScalarType compute_dtype(const config::RunConfig& c) {
  return io::scalar_type(c.train.precision);
}

void check_vocab_size(const io::LlamaConfig& model, const data::Tokenizer& tokenizer, const std::string& config_file) {
  FT_CHECK(tokenizer.vocab_size() <= model.vocab_size, config_file, ": vocab_size ", model.vocab_size,
           " is smaller than the tokenizer's ", tokenizer.vocab_size(), " ids (", tokenizer.path(),
           "); the embedding has no row for the ids from ", model.vocab_size, " on");
}

TrainableModel build_trainable_model(const config::RunConfig& c, const data::Tokenizer& tokenizer,
                                     c10::Device device) {
  TrainableModel tm;
  check_vocab_size(io::load_llama_config(c.model.path), tokenizer, join_path(c.model.path, "config.json"));
  model::LoadOptions load;
  load.dtype = compute_dtype(c);
  model::check_compute_dtype(*load.dtype, device, "train.precision");
  // FSDP on a GPU: the model is loaded into host memory and the strategy moves only this rank's
  // shards to the device (run_training moves the rest after setup), so a model larger than one
  // card can start.
  load.device = parallel::strategy_traits(c.parallel.strategy).loads_model_on_host ? c10::Device(c10::kCPU) : device;
  load.quantize = c.model.quantize;
  if (load.quantize != model::Quantization::kNone) tm.quantization.emplace();
  tm.model = model::load_llama(c.model.path, load, tm.quantization ? &*tm.quantization : nullptr);
  if (tm.quantization) log::info("base quantized to ", tm.quantization->summary());
  tm.model->model->attention_kernel = model::parse_attention_kernel(c.model.attention, "model.attention");
  if (c.lora) {
    if (!c.lora->init_from.empty()) {
      tm.lora = model::load_adapter(tm.model, c.lora->init_from);
      log::info("LoRA: continuing from ", c.lora->init_from, " (r ", tm.lora->r, ", alpha ", tm.lora->alpha, ")");
    } else {
      tm.lora = model::lora_options(*c.lora);
      auto modules = model::apply_lora(tm.model, *tm.lora, c.train.seed);
      log::info("LoRA r ", tm.lora->r, ", alpha ", tm.lora->alpha, " on ", modules.size(), " projections");
    }
    for (auto& [name, p] : model::lora_parameters(tm.model)) tm.trainable.emplace_back(name, p);
  } else {
    for (auto& p : tm.model->named_parameters()) {
      p.value().set_requires_grad(true);
      tm.trainable.emplace_back(p.key(), p.value());
    }
  }
  std::vector<at::Tensor> tensors;
  for (auto& [name, p] : tm.trainable) tensors.push_back(p);
  tm.trainable_layers = model::decoder_layers_of(tm.model, tensors);
  std::int64_t trainable = 0, total = 0;
  for (auto& [name, p] : tm.trainable) trainable += p.numel();
  for (auto& p : tm.model->parameters()) total += p.numel();
  log::info("parameters: ", trainable, " trainable of ", total, " (", 100.0 * trainable / total, "%)");
  return tm;
}

namespace {

// A full fine-tune's folder beside model.safetensors: config.json, the tokenizer and generation files.
void write_model_side_files(const config::RunConfig& c, const TrainableModel& tm, const data::Tokenizer& tokenizer,
                            const std::string& dir) {
  write_file_atomic(join_path(dir, "config.json"), tm.model->config().to_json(compute_dtype(c)).dump(2) + "\n");
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json"}) {
    const std::string from = join_path(c.model.path, name);
    if (file_exists(from)) write_file_atomic(join_path(dir, name), read_file(from));
  }
  // Under the file's own name: tokenizer.json (byte-level BPE) or tokenizer.model (sentencepiece).
  const std::string& source = tokenizer.path();
  const std::string file_name = source.substr(source.find_last_of('/') + 1);
  write_file_atomic(join_path(dir, file_name), read_file(source));
}

// model.safetensors of a full fine-tune in the compute dtype, to be filled parameter by parameter.
std::unique_ptr<io::SafetensorsStreamWriter> open_model_file(const config::RunConfig& c, const TrainableModel& tm,
                                                             const std::string& dir) {
  make_directories(dir);
  std::vector<io::SafetensorsStreamWriter::Entry> entries;
  for (auto& [name, p] : tm.trainable) entries.push_back({name, compute_dtype(c), p.sizes().vec()});
  return std::make_unique<io::SafetensorsStreamWriter>(join_path(dir, "model.safetensors"), entries);
}

}  // namespace

void write_trained_weights(const config::RunConfig& c, TrainableModel& tm, parallel::ParallelStrategy& strategy,
                           comm::Communicator& comm, const data::Tokenizer& tokenizer, const std::string& dir) {
  const bool root = comm.is_root();
  std::string error;  // rank 0's first failure; the gathers go on without writing
  auto on_root = [&](const std::function<void()>& fn) {
    if (!root || !error.empty()) return;
    try {
      fn();
    } catch (const std::exception& e) {
      error = e.what();
    }
  };
  if (tm.lora) {
    // Sharded strategies hold the LoRA weights in shards (FSDP frees the model's copies): take
    // fp32 copies as the strategy gathers them.
    io::NamedTensors adapter;
    strategy.for_each_full_parameter([&](const std::string& name, const at::Tensor& value) {
      adapter.emplace_back(name, value.detach().to(torch::kCPU, torch::kFloat, false, /*copy=*/true));
    });
    on_root([&] { model::save_adapter(adapter, *tm.lora, dir, c.model.path); });
    FT_CHECK(error.empty(), error);
    return;
  }
  // Full fine-tune: an HF folder in the compute dtype, streamed one parameter at a time as the
  // strategy gathers them; a tied head is not written (as transformers' save_pretrained does).
  std::unique_ptr<io::SafetensorsStreamWriter> writer;
  on_root([&] { writer = open_model_file(c, tm, dir); });
  strategy.for_each_full_parameter(
      [&](const std::string& name, const at::Tensor& value) { on_root([&] { writer->write(name, value); }); });
  on_root([&] {
    writer->finish();
    write_model_side_files(c, tm, tokenizer, dir);
  });
  FT_CHECK(error.empty(), error);
}

checkpoint::WeightsWriter snapshot_trained_weights(const config::RunConfig& c, TrainableModel& tm,
                                                   parallel::ParallelStrategy& strategy, comm::Communicator& comm,
                                                   const data::Tokenizer& tokenizer, checkpoint::HostStaging& staging) {
  // Every rank takes part in the gathers; rank 0 keeps host copies (the whole model, in the
  // compute dtype, for a full fine-tune: host memory for the time of the save).
  const bool root = comm.is_root();
  auto weights = std::make_shared<io::NamedTensors>();
  const at::ScalarType dtype = tm.lora ? at::kFloat : compute_dtype(c);
  strategy.for_each_full_parameter([&](const std::string& name, const at::Tensor& value) {
    if (root) weights->emplace_back(name, staging.copy("weights." + name, value, dtype));
  });
  if (!root) return [](const std::string&) {};
  const config::RunConfig* config = &c;
  const TrainableModel* model = &tm;
  const data::Tokenizer* tok = &tokenizer;
  const std::string folder = tm.lora ? "adapter" : "model";
  return [weights, config, model, tok, folder](const std::string& checkpoint_dir) {
    const std::string dir = join_path(checkpoint_dir, folder);
    if (model->lora) {
      model::save_adapter(*weights, *model->lora, dir, config->model.path);
      return;
    }
    std::unique_ptr<io::SafetensorsStreamWriter> writer = open_model_file(*config, *model, dir);
    for (const auto& [name, value] : *weights) writer->write(name, value);
    writer->finish();
    write_model_side_files(*config, *model, *tok, dir);
  };
}

void save_result(const config::RunConfig& c, TrainableModel& tm, parallel::ParallelStrategy& strategy,
                 comm::Communicator& comm, const data::Tokenizer& tokenizer) {
  const std::string dir = join_path(c.run_dir, tm.lora ? "adapter" : "model");
  write_trained_weights(c, tm, strategy, comm, tokenizer, dir);
  if (comm.is_root()) log::info(tm.lora ? "adapter" : "model", " written to ", dir);
}

}  // namespace ft::train
