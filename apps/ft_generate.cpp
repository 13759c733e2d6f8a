// ft_generate: continue a prompt with a LLaMA model from a Hugging Face folder.
//   ft_generate --model tests/data/stories260K --prompt "Once upon a time" --temperature 0
//   ft_generate --model BASE --adapter RUN_DIR/adapter --prompt "..."   (base + PEFT LoRA adapter)
//   ft_generate --model BASE --quantize nf4 --prompt "..."   (the base as model.quantize stores it)
// Prints the prompt followed by the generated text on stdout (streamed as tokens arrive);
// speed goes to stderr.
#include <cxxopts.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include <torch/torch.h>

#include "app_main.h"
#include "data/prompt_template.h"
#include "data/tokenized_dataset.h"
#include "data/tokenizer.h"
#include "io/dtype.h"
#include "io/generation_config.h"
#include "model/generation.h"
#include "model/lora.h"
#include "model/model_loader.h"
#include "util/build_info.h"
#include "util/cpu_threads.h"
#include "util/error.h"
#include "util/log.h"
#include "util/timer.h"

namespace {

// The template --template names: a built-in, or "auto" for the tokenizer's own chat format.
ft::data::PromptTemplate prompt_template(const std::string& name, const ft::data::Tokenizer& tokenizer) {
  if (name == "auto") return ft::data::resolve_template("auto", ft::data::RecordFormat::kChat, &tokenizer);
  ft::data::PromptTemplate tmpl = ft::data::resolve_template(name, ft::data::RecordFormat::kChat, &tokenizer);
  ft::data::validate_template(tmpl, ft::data::RecordFormat::kChat, &tokenizer);
  return tmpl;
}

// Generation stops at any of the model's EOS ids (config.json and generation_config.json, as
// transformers' generate does) and at the template's end-of-turn token.
std::vector<std::int64_t> stop_ids(const std::string& model_dir, const ft::io::LlamaConfig& config,
                                   const ft::data::PromptTemplate& tmpl, const ft::data::Tokenizer& tokenizer) {
  std::vector<std::int64_t> ids = config.eos_token_ids;
  for (std::int64_t id : ft::io::generation_eos_ids(model_dir)) ids.push_back(id);
  if (!tmpl.stop.empty()) ids.push_back(tokenizer.special_token_id(tmpl.stop));
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

// --device: "auto" picks the first GPU when there is one.
c10::Device parse_device(const std::string& name) {
  if (name == "auto") return torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  FT_CHECK(name == "cpu" || name.rfind("cuda", 0) == 0, "--device: expected auto, cpu, cuda or cuda:N, got \"", name, "\"");
  c10::Device device(c10::kCPU);
  try {
    device = c10::Device(name);
  } catch (const std::exception&) {
    FT_CHECK(false, "--device: expected auto, cpu, cuda or cuda:N, got \"", name, "\"");
  }
  if (device.is_cuda()) {
    FT_CHECK(torch::cuda::is_available(), "--device ", name, ": ",
             FT_TORCH_CUDA ? "this LibTorch has CUDA but sees no GPU (nvidia-smi, CUDA_VISIBLE_DEVICES)"
                           : "this build's LibTorch has no CUDA (scripts/build.sh --libtorch pip builds one that has)");
    const auto count = static_cast<c10::DeviceIndex>(torch::cuda::device_count());
    if (!device.has_index()) device = c10::Device(c10::kCUDA, 0);
    FT_CHECK(device.index() < count, "--device ", name, ": this machine shows ", count, " GPUs");
  }
  return device;
}

int run(int argc, char** argv) {
  cxxopts::Options options("ft_generate", "Generate text from a LLaMA-family model (HF folder).");
  options.add_options()
      ("model", "Hugging Face model folder (config.json, *.safetensors, tokenizer.json or tokenizer.model)", cxxopts::value<std::string>())
      ("prompt", "text to continue", cxxopts::value<std::string>())
      ("template", "render --prompt as the user turn of a prompt template first: alpaca | llama2_chat | llama3 | "
                   "chatml | none, or auto (the tokenizer's chat format); what the adapter was trained with",
       cxxopts::value<std::string>()->default_value("none"))
      ("adapter", "PEFT LoRA adapter folder to apply to the model", cxxopts::value<std::string>())
      ("max-new-tokens", "tokens to generate at most", cxxopts::value<std::int64_t>()->default_value("128"))
      ("temperature", "sampling temperature; 0 = greedy", cxxopts::value<double>()->default_value("1.0"))
      ("top-k", "keep the k most likely tokens; 0 = off", cxxopts::value<std::int64_t>()->default_value("0"))
      ("top-p", "nucleus sampling mass; 1 = off", cxxopts::value<double>()->default_value("1.0"))
      ("seed", "random seed for sampling", cxxopts::value<std::uint64_t>()->default_value("0"))
      ("dtype", "compute dtype fp32|bf16|fp16 (default: the model's)", cxxopts::value<std::string>())
      ("quantize", "store the projections quantized as model.quantize does in training: none | int8 | nf4",
       cxxopts::value<std::string>()->default_value("none"))
      ("attention", "attention kernel: auto | sdpa | eager (model.attention)",
       cxxopts::value<std::string>()->default_value("auto"))
      ("device", "cpu, cuda or cuda:N; auto = cuda:0 when LibTorch has CUDA and a GPU is visible, else cpu",
       cxxopts::value<std::string>()->default_value("auto"))
      ("threads", "CPU threads for matrix products (default: every core)", cxxopts::value<int>())
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  if (!args.count("model")) throw ft::app::UsageError{"--model is required"};
  if (!args.count("prompt")) throw ft::app::UsageError{"--prompt is required"};
  ft::configure_cpu_threads(args.count("threads") ? args["threads"].as<int>() : 0);

  const std::string model_dir = args["model"].as<std::string>();
  ft::model::LoadOptions load;
  load.device = parse_device(args["device"].as<std::string>());
  const auto attention = ft::model::parse_attention_kernel(args["attention"].as<std::string>(), "--attention");
  if (args.count("dtype")) {
    load.dtype = ft::io::parse_float_dtype(args["dtype"].as<std::string>(), "--dtype");
    ft::model::check_compute_dtype(*load.dtype, load.device, "--dtype");
  } else {
    auto stored = ft::io::load_llama_config(model_dir).torch_dtype;
    if (stored && !ft::model::compute_dtype_supported(*stored, load.device)) {
      ft::log::info("the model is stored in ", c10::toString(*stored), ", which this LibTorch cannot compute in on ",
                    load.device.str(), ": running in fp32 (choose with --dtype)");
      load.dtype = torch::kFloat;
    }
  }
  load.quantize = ft::model::parse_quantization(args["quantize"].as<std::string>(), "--quantize");
  ft::model::QuantizationReport report;
  auto model = ft::model::load_llama(model_dir, load, &report);
  model->model->attention_kernel = attention;
  if (load.quantize != ft::model::Quantization::kNone) ft::log::info("base quantized to ", report.summary());
  if (args.count("adapter")) {
    auto lora = ft::model::load_adapter(model, args["adapter"].as<std::string>());
    model->eval();
    ft::log::info("applied LoRA adapter ", args["adapter"].as<std::string>(), " (r=", lora.r, ", scale=", lora.scale(),
                  ", targets ", lora.targets.describe(), ")");
  }
  ft::data::Tokenizer tokenizer(model_dir);
  FT_CHECK(tokenizer.vocab_size() <= model->config().vocab_size, tokenizer.path(), ": the tokenizer has ",
           tokenizer.vocab_size(), " pieces but the model's vocab_size is ", model->config().vocab_size);

  ft::model::GenerationOptions gen;
  gen.max_new_tokens = args["max-new-tokens"].as<std::int64_t>();
  gen.sampling.temperature = args["temperature"].as<double>();
  gen.sampling.top_k = args["top-k"].as<std::int64_t>();
  gen.sampling.top_p = args["top-p"].as<double>();
  gen.seed = args["seed"].as<std::uint64_t>();
  const ft::data::PromptTemplate tmpl = prompt_template(args["template"].as<std::string>(), tokenizer);
  gen.stop_ids = stop_ids(model_dir, model->config(), tmpl, tokenizer);

  std::vector<std::int64_t> ids = ft::data::encode_prompt(tmpl, args["prompt"].as<std::string>(), tokenizer);
  // Stream: print whatever the decoded text gained with each token. Decoding the whole sequence
  // each time keeps sentencepiece's spacing and multi-byte characters right. Special tokens (a
  // template's turn markers, the stop token) are not printed.
  std::string printed = tokenizer.decode(ids);
  std::cout << printed << std::flush;
  ft::Stopwatch watch;
  auto generated = ft::model::generate(model, ids, gen, [&](std::int64_t id) {
    ids.push_back(id);
    std::string text = tokenizer.decode(ids);
    // A character split over byte-fallback tokens decodes as U+FFFD until it is complete: wait.
    const bool incomplete = text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0;
    if (!incomplete && text.size() > printed.size() && text.compare(0, printed.size(), printed) == 0) {
      std::cout << text.substr(printed.size()) << std::flush;
      printed = text;
    }
  });
  std::cout << std::endl;
  const double seconds = watch.seconds();
  ft::log::info(generated.size(), " tokens in ", seconds, " s (", generated.size() / std::max(seconds, 1e-9),
                " tokens/s)");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("ft_generate", argc, argv, run); }
