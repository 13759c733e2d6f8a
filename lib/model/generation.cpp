#include "model/generation.h"

#include <torch/torch.h>

#include <algorithm>

#include "model/kv_cache.h"
#include "util/error.h"

namespace ft::model {

std::vector<std::int64_t> generate(LlamaForCausalLM& model, const std::vector<std::int64_t>& prompt,
                                   const GenerationOptions& options,
                                   const std::function<void(std::int64_t)>& on_token) {
  validate(options.sampling);
  FT_CHECK(!prompt.empty(), "generation needs at least one prompt token");
  FT_CHECK(options.max_new_tokens >= 0, "--max-new-tokens: expected an integer >= 0, got ",
           options.max_new_tokens);
  const io::LlamaConfig& config = model->config();
  for (std::size_t i = 0; i < prompt.size(); ++i)
    FT_CHECK(prompt[i] >= 0 && prompt[i] < config.vocab_size, "prompt token id ", prompt[i], " at position ",
             i, " is outside the model's vocabulary [0, ", config.vocab_size, ")");
  const std::vector<std::int64_t> stop_ids = options.stop_ids.empty() ? config.eos_token_ids : options.stop_ids;

  torch::NoGradGuard no_grad;
  const auto weight = model->output_weight();
  const auto id_options = torch::TensorOptions().dtype(torch::kLong).device(weight.device());
  at::Generator generator = at::detail::createCPUGenerator(options.seed);

  std::vector<std::int64_t> sequence = prompt;
  std::vector<std::int64_t> generated;
  std::unique_ptr<KvCache> cache;
  if (options.use_cache)
    cache = std::make_unique<KvCache>(config, 1, static_cast<std::int64_t>(prompt.size()) + options.max_new_tokens,
                                      weight.options());
  std::vector<std::int64_t> pending = prompt;  // tokens not yet run through the model
  for (std::int64_t step = 0; step < options.max_new_tokens; ++step) {
    const auto& input = options.use_cache ? pending : sequence;
    auto ids = torch::tensor(input, id_options).unsqueeze(0);
    ForwardOptions forward;
    forward.cache = cache.get();
    auto hidden = model->model(ids, forward);
    auto last_logits = model->logits(hidden.select(1, hidden.size(1) - 1)).squeeze(0).to(torch::kCPU);
    const std::int64_t next = sample_next_token(last_logits, options.sampling, generator);
    generated.push_back(next);
    sequence.push_back(next);
    pending = {next};
    if (on_token) on_token(next);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
  }
  return generated;
}

}  // namespace ft::model
