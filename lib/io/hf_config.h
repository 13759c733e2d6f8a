// Hugging Face config.json for LlamaForCausalLM: the fields the model needs, validated, with
// HF's defaults. Newer transformers files keep rope_theta / rope_scaling inside
// "rope_parameters"; both spellings are read. The parsed JSON is kept so that a merged or
// fine-tuned model is written back with every key the original had.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "util/json.h"

namespace ft::io {

// rope_scaling: "default" (none), "linear" (positions divided by factor) or "llama3"
// (LLaMA-3.1's frequency-dependent scaling).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  std::int64_t original_max_position_embeddings = 8192;
};

struct LlamaConfig {
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t num_hidden_layers = 0;
  std::int64_t num_attention_heads = 0;
  std::int64_t num_key_value_heads = 0;  // default: num_attention_heads (no GQA)
  std::int64_t head_dim = 0;             // default: hidden_size / num_attention_heads
  std::int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  std::int64_t bos_token_id = 1;
  std::vector<std::int64_t> eos_token_ids{2};  // config.json may give one id or a list
  std::optional<c10::ScalarType> torch_dtype;  // the stored dtype, when the file says
  Json raw;                                    // the file as parsed, for writing it back

  // Parameters, counting a tied embedding once.
  std::int64_t num_parameters() const;
  // The config as config.json: `raw` with the validated fields (and torch_dtype) written over.
  Json to_json(std::optional<c10::ScalarType> dtype = std::nullopt) const;
};

// `source` names the file in errors ("MODEL/config.json: num_attention_heads: expected ...").
LlamaConfig parse_llama_config(const Json& json, const std::string& source);
// Reads `path`, or `path`/config.json when `path` is a folder.
LlamaConfig load_llama_config(const std::string& path);

}  // namespace ft::io
