// make_random_model: writes a randomly initialized LLaMA as a Hugging Face folder (config.json,
// model.safetensors, and a tokenizer.model copied from another folder), for benchmarks that need
// a model of a given size on disk.
//   make_random_model --out /tmp/m50 --hidden 640 --layers 10 --intermediate 1728 --heads 10
//                     --tokenizer-from tests/data/stories260K
#include <cxxopts.hpp>

#include <iostream>

#include <torch/torch.h>

#include "app_main.h"
#include "data/tokenizer.h"
#include "io/safetensors.h"
#include "model/llama_model.h"
#include "util/file_util.h"
#include "util/log.h"

namespace {

int run(int argc, char** argv) {
  cxxopts::Options options("make_random_model", "Write a random LLaMA as an HF folder.");
  options.add_options()
      ("out", "output folder", cxxopts::value<std::string>())
      ("tokenizer-from", "folder whose tokenizer.model to copy", cxxopts::value<std::string>()->default_value("tests/data/stories260K"))
      ("hidden", "hidden size", cxxopts::value<std::int64_t>()->default_value("640"))
      ("layers", "decoder layers", cxxopts::value<std::int64_t>()->default_value("10"))
      ("heads", "attention heads", cxxopts::value<std::int64_t>()->default_value("10"))
      ("kv-heads", "key/value heads (default: heads)", cxxopts::value<std::int64_t>())
      ("intermediate", "SwiGLU size", cxxopts::value<std::int64_t>()->default_value("1728"))
      ("seed", "init seed", cxxopts::value<std::uint64_t>()->default_value("1"))
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  if (!args.count("out")) throw ft::app::UsageError{"--out is required"};
  const std::string out = args["out"].as<std::string>();
  const std::string tokenizer_dir = args["tokenizer-from"].as<std::string>();
  ft::data::Tokenizer tokenizer(tokenizer_dir);
  ft::io::LlamaConfig c;
  c.hidden_size = args["hidden"].as<std::int64_t>();
  c.num_hidden_layers = args["layers"].as<std::int64_t>();
  c.num_attention_heads = args["heads"].as<std::int64_t>();
  c.num_key_value_heads = args.count("kv-heads") ? args["kv-heads"].as<std::int64_t>() : c.num_attention_heads;
  c.head_dim = c.hidden_size / c.num_attention_heads;
  c.intermediate_size = args["intermediate"].as<std::int64_t>();
  c.vocab_size = tokenizer.vocab_size();
  c.max_position_embeddings = 2048;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  c.torch_dtype = torch::kFloat;
  ft::model::LlamaForCausalLM model(c, torch::TensorOptions().dtype(torch::kFloat));
  ft::model::init_weights(model, args["seed"].as<std::uint64_t>());
  ft::make_directories(out);
  ft::io::NamedTensors tensors;
  for (auto& p : model->named_parameters()) tensors.emplace_back(p.key(), p.value().detach());
  ft::io::write_safetensors(ft::join_path(out, "model.safetensors"), tensors);
  ft::write_file_atomic(ft::join_path(out, "config.json"), c.to_json(torch::kFloat).dump(2) + "\n");
  ft::write_file_atomic(ft::join_path(out, "tokenizer.model"), ft::read_file(tokenizer.path()));
  ft::log::info(out, ": ", c.num_parameters() / 1e6, "M parameters");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("make_random_model", argc, argv, run); }
