// LoRA on LLaMA's projections as PEFT does it (tuners/lora): which modules get an adapter,
// initialization (A kaiming-uniform from a seeded generator, B = 0), freezing the base, merging
// B·A into the weights, and moving adapters in and out of PEFT folders (io/peft_adapter.h).
// The per-layer math lives in LinearImpl::forward (model/linear.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "model/llama_model.h"

namespace ft::config {
struct LoraConfig;
}

namespace ft::model {

struct LoraOptions {
  std::int64_t r = 8;       // rank
  double alpha = 16;        // scale numerator
  double dropout = 0.0;     // on the adapter branch's input, training mode only
  io::LoraTargets targets{{"q_proj", "v_proj"}, ""};  // names, {"all-linear"} or a regex
  bool use_rslora = false;  // scale alpha/sqrt(r) instead of alpha/r

  double scale() const;
};

// From the run config's lora section, from an adapter's config, and back.
LoraOptions lora_options(const config::LoraConfig& config);
LoraOptions lora_options(const io::PeftAdapterConfig& config);
io::PeftAdapterConfig peft_adapter_config(const LoraOptions& options, const std::string& base_model_name_or_path);

// Enables LoRA on every projection `options.targets` selects, A ~ U(-1/sqrt(in), 1/sqrt(in)) as
// torch.nn.init.kaiming_uniform_(a=sqrt(5)) (drawn on the CPU from `seed`, module by module in
// model order, so runs are reproducible on any device), B = 0, LoRA weights fp32; freezes every
// base parameter. Returns the names of the modules that got LoRA. Throws ft::Error when the
// targets select nothing, name a module LoRA cannot apply to, or the model already has LoRA.
std::vector<std::string> apply_lora(LlamaForCausalLM& model, const LoraOptions& options, std::uint64_t seed);

// True when any projection has a LoRA branch.
bool has_lora(LlamaForCausalLM& model);
// The live LoRA parameters (for the optimizer), named as PEFT's keys without the prefix:
// "model.layers.0.self_attn.q_proj.lora_A.weight".
io::NamedTensors lora_parameters(LlamaForCausalLM& model);
// Detached fp32 CPU copies of the same, for writing an adapter.
io::NamedTensors lora_adapter_tensors(LlamaForCausalLM& model);

// W += scale · B·A (computed in fp32, cast back to W's dtype) in every LoRA projection, then
// removes the branches: the model computes the same function without LoRA. Base parameters stay
// frozen. A quantized W is dequantized first (into the dtype of the model's other weights).
void merge_lora(LlamaForCausalLM& model);

// Reads a PEFT adapter folder, checks that every tensor fits the model (module exists, layer in
// range, shapes [r, in] / [out, r], lora_A and lora_B paired, exactly the modules target_modules
// selects), then enables LoRA with the adapter's r / alpha / rsLoRA / dropout / targets and
// copies the weights. Base frozen, LoRA trainable (for continuing training). Returns the options.
LoraOptions load_adapter(LlamaForCausalLM& model, const std::string& dir);

// Writes DIR/adapter_config.json + DIR/adapter_model.safetensors for the model's LoRA weights.
void save_adapter(LlamaForCausalLM& model, const LoraOptions& options, const std::string& dir,
                  const std::string& base_model_name_or_path);
// The same from the LoRA tensors themselves, named as lora_parameters() names them.
void save_adapter(const io::NamedTensors& tensors, const LoraOptions& options, const std::string& dir,
                  const std::string& base_model_name_or_path);

}  // namespace ft::model
