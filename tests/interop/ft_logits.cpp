// ft_logits: ft's logits for token ids, for the interop tests that compare them with transformers
// and PEFT (tests/interop/*.py). Not a user program: it lives with the tests.
//   ft_logits --model DIR [--adapter DIR] [--dtype fp32|bf16] [--attention eager|sdpa]
//             --ids IDS.json --out LOGITS.safetensors
// IDS.json: {"input_ids": [[...], ...]} with optional "position_ids" and "segment_ids" of the
// same shape (a packed batch). LOGITS.safetensors holds "logits" [B, T, V] in fp32.
#include <cxxopts.hpp>

#include <torch/torch.h>

#include "app_main.h"
#include "io/dtype.h"
#include "io/safetensors.h"
#include "model/attention.h"
#include "model/lora.h"
#include "model/model_loader.h"
#include "util/error.h"
#include "util/file_util.h"
#include "util/json.h"

namespace {

torch::Tensor int_matrix(const ft::Json& rows, const std::string& what) {
  FT_CHECK(rows.is_array() && !rows.empty(), what, ": expected a list of rows of integers");
  std::vector<std::int64_t> flat;
  const std::size_t width = rows[0].size();
  for (const auto& row : rows) {
    FT_CHECK(row.is_array() && row.size() == width, what, ": rows of different lengths");
    for (const auto& v : row) flat.push_back(v.get<std::int64_t>());
  }
  return torch::tensor(flat, torch::kLong).view({static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(width)});
}

int run(int argc, char** argv) {
  cxxopts::Options options("ft_logits", "ft's logits for token ids (interop tests).");
  options.add_options()("model", "HF model folder", cxxopts::value<std::string>())(
      "adapter", "PEFT LoRA adapter folder", cxxopts::value<std::string>())(
      "dtype", "fp32|bf16 (default: fp32)", cxxopts::value<std::string>()->default_value("fp32"))(
      "attention", "eager|sdpa|auto", cxxopts::value<std::string>()->default_value("auto"))(
      "ids", "IDS.json", cxxopts::value<std::string>())("out", "LOGITS.safetensors", cxxopts::value<std::string>());
  auto args = options.parse(argc, argv);
  for (const char* required : {"model", "ids", "out"}) {
    if (!args.count(required)) throw ft::app::UsageError{std::string("--") + required + " is required"};
  }
  torch::set_num_threads(1);
  ft::model::LoadOptions load;
  load.dtype = ft::io::parse_float_dtype(args["dtype"].as<std::string>(), "--dtype");
  auto model = ft::model::load_llama(args["model"].as<std::string>(), load);
  model->model->attention_kernel = ft::model::parse_attention_kernel(args["attention"].as<std::string>(), "--attention");
  if (args.count("adapter")) ft::model::load_adapter(model, args["adapter"].as<std::string>());
  model->eval();

  const ft::Json ids = ft::parse_json(ft::read_file(args["ids"].as<std::string>()), args["ids"].as<std::string>());
  ft::model::ForwardOptions forward;
  if (ids.contains("position_ids")) forward.position_ids = int_matrix(ids["position_ids"], "position_ids");
  if (ids.contains("segment_ids")) forward.segment_ids = int_matrix(ids["segment_ids"], "segment_ids");
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = model->forward(int_matrix(ids["input_ids"], "input_ids"), forward).to(torch::kFloat);
  ft::io::write_safetensors(args["out"].as<std::string>(), {{"logits", logits.contiguous()}});
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("ft_logits", argc, argv, run); }
