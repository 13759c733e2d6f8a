// ft_merge: fold a PEFT LoRA adapter into its base model and write a complete HF folder.
//   ft_merge --base tests/data/stories260K --adapter RUN_DIR/adapter --out merged/ [--force]
// The base is loaded in its stored dtype, each W + scale·B·A computed in fp32 and cast back.
// With --quantize int8|nf4 (the adapter was trained on a quantized base), the base is quantized
// as in training and the adapter merged into the dequantized weights, written in bf16.
// Written into OUT.tmp and renamed into place, so a crash never leaves a complete-looking OUT.
#include <cxxopts.hpp>

#include <filesystem>
#include <iostream>

#include <torch/torch.h>

#include "app_main.h"
#include "io/safetensors.h"
#include "model/lora.h"
#include "model/model_loader.h"
#include "util/error.h"
#include "util/file_util.h"
#include "util/log.h"

namespace {

namespace fs = std::filesystem;

// Files of an HF folder that travel with the weights unchanged.
const char* const kCopiedFiles[] = {"tokenizer.model", "tokenizer.json", "tokenizer_config.json",
                                    "special_tokens_map.json", "generation_config.json"};

bool non_empty_directory(const std::string& path) {
  return ft::is_directory(path) && fs::directory_iterator(path) != fs::directory_iterator();
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  FT_CHECK(!ec, path, ": cannot remove: ", ec.message());
}

void rename_path(const std::string& from, const std::string& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  FT_CHECK(!ec, "cannot rename ", from, " to ", to, ": ", ec.message());
}

int run(int argc, char** argv) {
  cxxopts::Options options("ft_merge", "Merge a PEFT LoRA adapter into its base model (HF folder out).");
  options.add_options()
      ("base", "base model folder (Hugging Face layout)", cxxopts::value<std::string>())
      ("adapter", "PEFT adapter folder (adapter_config.json, adapter_model.safetensors)", cxxopts::value<std::string>())
      ("out", "output folder for the merged model", cxxopts::value<std::string>())
      ("force", "replace OUT when it exists and is not empty")
      ("quantize", "the base was quantized in training (model.quantize): int8 | nf4 merges into its dequantized "
                   "weights and writes bf16; none (default) merges into the stored weights",
       cxxopts::value<std::string>()->default_value("none"))
      ("threads", "CPU threads (default: LibTorch's choice)", cxxopts::value<int>())
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  for (const char* flag : {"base", "adapter", "out"})
    if (!args.count(flag)) throw ft::app::UsageError{std::string("--") + flag + " is required"};
  if (args.count("threads")) torch::set_num_threads(args["threads"].as<int>());
  const std::string base = args["base"].as<std::string>();
  const std::string adapter = args["adapter"].as<std::string>();
  std::string out = args["out"].as<std::string>();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  const bool force = args.count("force") > 0;

  FT_CHECK(!ft::file_exists(out) || ft::is_directory(out), out, ": exists and is not a folder");
  FT_CHECK(force || !non_empty_directory(out), out, ": exists and is not empty (use --force to replace it)");
  FT_CHECK(fs::weakly_canonical(out) != fs::weakly_canonical(base), out, ": is the base model folder; choose another --out");

  ft::model::LoadOptions load;  // default: the stored dtype
  load.quantize = ft::model::parse_quantization(args["quantize"].as<std::string>(), "--quantize");
  if (load.quantize != ft::model::Quantization::kNone) load.dtype = torch::kBFloat16;
  auto model = ft::model::load_llama(base, load);
  const c10::ScalarType dtype = model->output_weight().scalar_type();
  auto lora = ft::model::load_adapter(model, adapter);
  const std::size_t modules = ft::model::lora_parameters(model).size() / 2;
  ft::model::merge_lora(model);
  ft::model::dequantize_projections(model);  // the projections without LoRA too
  if (load.quantize != ft::model::Quantization::kNone)
    ft::log::info("the base was quantized to ", ft::model::quantization_name(load.quantize),
                  " as in training: the adapter is merged into its dequantized weights, written in bf16 "
                  "(the merged model carries the quantization error of the base it was trained on)");

  // Everything goes into OUT.tmp first; a leftover from a crashed run is discarded.
  const std::string tmp = out + ".tmp";
  if (ft::file_exists(tmp)) remove_tree(tmp);
  ft::make_directories(tmp);
  ft::io::NamedTensors tensors;
  for (const auto& p : model->named_parameters()) tensors.emplace_back(p.key(), p.value().detach());
  ft::io::write_safetensors(ft::join_path(tmp, "model.safetensors"), tensors);  // tied: no lm_head.weight
  ft::write_file_atomic(ft::join_path(tmp, "config.json"), model->config().to_json(dtype).dump(2) + "\n");
  for (const char* name : kCopiedFiles) {
    const std::string from = ft::join_path(base, name);
    if (ft::file_exists(from)) ft::write_file_atomic(ft::join_path(tmp, name), ft::read_file(from));
  }
  ft::fsync_directory(tmp);

  if (ft::file_exists(out)) {
    // Empty, or --force: move the old folder aside, put the new one in place, then delete the old.
    const std::string old = out + ".old";
    if (ft::file_exists(old)) remove_tree(old);
    rename_path(out, old);
    rename_path(tmp, out);
    remove_tree(old);
  } else {
    rename_path(tmp, out);
  }
  ft::fsync_directory(ft::parent_directory(out));
  ft::log::info("merged ", modules, " LoRA modules (r=", lora.r, ", scale=", lora.scale(), ") into ", out, " (",
                c10::toString(dtype), ", ", tensors.size(), " tensors)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("ft_merge", argc, argv, run); }
