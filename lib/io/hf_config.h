// Hugging Face config.json of a LLaMA-family causal LM: the fields the model needs, validated,
// with transformers' defaults. Newer transformers files keep rope_theta / rope_scaling inside
// "rope_parameters"; both spellings are read. The parsed JSON is kept so that a merged or
// fine-tuned model is written back with every key the original had.
//
// Model types (config.json "model_type"; absent = llama; anything else is refused by name):
//   llama    LlamaForCausalLM: LLaMA 1/2/3.x (rope_scaling linear or llama3, tied or untied head,
//            any vocabulary size). attention_bias true adds biases to q/k/v/o_proj (as
//            transformers' LlamaAttention); mlp_bias true is refused.
//   mistral  MistralForCausalLM: LLaMA's layers with sliding-window attention on every layer when
//            sliding_window is set (query i sees keys (i - sliding_window, i]); null = full
//            causal attention. No biases.
//   qwen2    Qwen2ForCausalLM: biases on q_proj, k_proj and v_proj, always (none on o_proj;
//            attention_bias is not read, as transformers' Qwen2Attention); sliding-window
//            attention only with use_sliding_window true, then on the layers layer_types marks
//            "sliding_attention" (default: layers >= max_window_layers), as transformers.
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

enum class ModelType { kLlama, kMistral, kQwen2 };

// "llama", "mistral", "qwen2"; the architectures entry ("LlamaForCausalLM", ...).
const char* model_type_name(ModelType type);
const char* architecture_name(ModelType type);

struct LlamaConfig {
  ModelType model_type = ModelType::kLlama;
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
  // Biases of the attention projections ("bias" [out] beside "weight"): q/k/v (qwen2, llama with
  // attention_bias) and o_proj (llama with attention_bias).
  bool qkv_bias = false;
  bool o_bias = false;
  // Sliding-window attention: 0 = none; else layer i with sliding_layers[i] lets query position p
  // see key positions (p - sliding_window, p]. sliding_layers has num_hidden_layers entries
  // when sliding_window > 0 (mistral: all true).
  std::int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;
  Json raw;                                    // the file as parsed, for writing it back

  // The window of layer `layer` (0 = full causal attention).
  std::int64_t layer_window(std::int64_t layer) const;
  // Parameters, counting a tied embedding once, and the projections' biases.
  std::int64_t num_parameters() const;
  // Bias parameters of one decoder layer.
  std::int64_t layer_bias_parameters() const;
  // The config as config.json: `raw` with the validated fields (and torch_dtype) written over;
  // model_type and architectures added when the file had none.
  Json to_json(std::optional<c10::ScalarType> dtype = std::nullopt) const;
};

// `source` names the file in errors ("MODEL/config.json: num_attention_heads: expected ...").
LlamaConfig parse_llama_config(const Json& json, const std::string& source);
// Reads `path`, or `path`/config.json when `path` is a folder.
LlamaConfig load_llama_config(const std::string& path);

}  // namespace ft::io
