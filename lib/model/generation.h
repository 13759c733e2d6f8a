// Autoregressive generation with a KV cache: the prompt is run once, then one token per step
// reuses the cached keys and values. Stops after max_new_tokens or at a stop id (EOS by default).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "model/llama_model.h"
#include "model/sampler.h"

namespace ft::model {

struct GenerationOptions {
  std::int64_t max_new_tokens = 128;
  SamplingOptions sampling;
  std::uint64_t seed = 0;
  std::vector<std::int64_t> stop_ids;  // empty: the model's eos_token_id(s)
  bool use_cache = true;               // false recomputes the whole sequence each step (tests)
};

// Returns the generated ids (a stop id, when reached, is the last element). `on_token` is called
// with each new id as soon as it is chosen, for streaming output.
std::vector<std::int64_t> generate(LlamaForCausalLM& model, const std::vector<std::int64_t>& prompt,
                                   const GenerationOptions& options,
                                   const std::function<void(std::int64_t)>& on_token = {});

}  // namespace ft::model
