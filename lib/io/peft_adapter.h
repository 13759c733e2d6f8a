// PEFT LoRA adapter folders (huggingface/peft): adapter_config.json + adapter_model.safetensors.
// Writes PEFT's conservative config key set and fp32 tensors named
// base_model.model.<module>.lora_{A,B}.weight; reads them back (with or without that prefix),
// refusing what ft cannot apply (DoRA, biases, fan_in_fan_out, modules_to_save, per-module
// ranks). Knows module names only as strings: fitting tensors to a model is lib/model/lora.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "util/json.h"

namespace ft::io {

inline constexpr const char* kAdapterConfigFile = "adapter_config.json";
inline constexpr const char* kAdapterWeightsFile = "adapter_model.safetensors";
inline constexpr const char* kPeftKeyPrefix = "base_model.model.";

// LLaMA's seven linear projections, what "all-linear" means for this model family (PEFT's
// all-linear is every linear layer but the output head).
const std::vector<std::string>& llama_linear_modules();

// Which modules get LoRA, as PEFT decides it: a list of names matches a module whose full name
// equals a name or ends in "." + name; {"all-linear"} matches the seven projections; a regex
// (when `regex` is non-empty, `names` is ignored) must match the whole module name.
struct LoraTargets {
  std::vector<std::string> names;
  std::string regex;

  bool all_linear() const { return regex.empty() && names.size() == 1 && names[0] == "all-linear"; }
  // `module` is a full module name: "model.layers.0.self_attn.q_proj".
  bool matches(const std::string& module) const;
  // For messages: "q_proj, v_proj", "all-linear" or "regex '...'".
  std::string describe() const;
};

struct PeftAdapterConfig {
  std::int64_t r = 8;
  double lora_alpha = 8;  // PEFT's default when the file has no lora_alpha
  double lora_dropout = 0;
  LoraTargets target_modules;
  bool use_rslora = false;
  std::string base_model_name_or_path;
  std::string task_type = "CAUSAL_LM";

  // The factor on B·A: lora_alpha / r, or lora_alpha / sqrt(r) with rsLoRA.
  double scale() const;
  // adapter_config.json with exactly PEFT's conservative key set (all-linear written as the
  // explicit list of the seven projections, which every PEFT version understands).
  Json to_json() const;
};

// `source` names the file in errors: "DIR/adapter_config.json: bias: ...".
PeftAdapterConfig parse_peft_adapter_config(const Json& json, const std::string& source);
// Reads DIR/adapter_config.json.
PeftAdapterConfig read_peft_adapter_config(const std::string& dir);

struct PeftAdapter {
  PeftAdapterConfig config;
  // fp32 CPU tensors named as the model's parameters (prefix removed), in file order:
  // "model.layers.0.self_attn.q_proj.lora_A.weight".
  NamedTensors tensors;
  std::string weights_path;  // DIR/adapter_model.safetensors, for messages
};

// Reads and checks both files; tensor names and dtypes are checked here, shapes against a model
// by model::load_adapter.
PeftAdapter read_peft_adapter(const std::string& dir);

// Writes DIR/adapter_config.json and DIR/adapter_model.safetensors (fp32, keys prefixed with
// base_model.model.), each atomically; creates DIR. `tensors` are named as the model's
// parameters and must all be lora_A / lora_B weights.
void write_peft_adapter(const std::string& dir, const PeftAdapterConfig& config, const NamedTensors& tensors);

}  // namespace ft::io
