// The LLaMA-family causal language model (llama, mistral, qwen2: io/hf_config.h) with Hugging
// Face's module tree, so that named_parameters() yields checkpoint keys as they are:
// model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight (and .bias where the model
// type has one), ..., model.norm.weight, lm_head.weight (absent when tie_word_embeddings: the head
// then multiplies by the embedding table). A model with sliding-window layers builds a second
// mask per forward, for those layers.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/hf_config.h"
#include "model/decoder_layer.h"
#include "model/linear.h"
#include "model/rms_norm.h"
#include "model/rotary_embedding.h"

namespace ft::model {

class KvCache;

// What a decoder layer needs besides its input, computed once per forward.
struct LayerInputs {
  torch::Tensor cos, sin;  // rotary tables [B,T,hd]
  AttentionMask mask;      // this layer's (full causal, or its sliding window)
  KvCache* cache = nullptr;
};

// Runs decoder layer `index` on `x`: the hook that activation checkpointing (recompute in
// backward) and FSDP (gather the layer's parameters around it) plug into. Empty = call the layer.
using LayerRunner = std::function<torch::Tensor(std::size_t index, DecoderLayer& layer, const torch::Tensor& x,
                                                const LayerInputs& inputs)>;

struct ForwardOptions {
  // [B,T] int64; default: past + 0..T-1 for every row.
  torch::Tensor position_ids;
  // [B,T] int64; tokens attend only within their segment (packing); negative = padding.
  torch::Tensor segment_ids;
  // Incremental decoding: read and extend this cache (no segment ids then).
  KvCache* cache = nullptr;
  LayerRunner layer_runner;
};

class LlamaModelImpl : public torch::nn::Module {
 public:
  LlamaModelImpl(const io::LlamaConfig& config, const torch::TensorOptions& options, Quantization quantize = Quantization::kNone);
  // ids [B,T] -> final hidden states [B,T,H] (after the last norm).
  torch::Tensor forward(const torch::Tensor& ids, const ForwardOptions& options = {});

  // How attention is computed (model.attention); sdpa where this LibTorch has it.
  AttentionKernel attention_kernel = parse_attention_kernel("auto", "model.attention");

  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layer_list{nullptr};  // registered as "layers"
  std::vector<DecoderLayer> layers;
  RMSNorm norm{nullptr};

 private:
  RotaryEmbedding rotary_;
  std::vector<std::int64_t> layer_windows_;  // per layer: its sliding window, 0 = none
};
TORCH_MODULE(LlamaModel);

class LlamaForCausalLMImpl : public torch::nn::Module {
 public:
  // `quantize`: how the decoder layers' projections store their frozen weights (int8/nf4 for
  // LoRA over a quantized base); embeddings, norms and lm_head stay in options' dtype.
  LlamaForCausalLMImpl(const io::LlamaConfig& config, const torch::TensorOptions& options, Quantization quantize = Quantization::kNone);

  // ids [B,T] -> logits [B,T,V] in the parameters' dtype.
  torch::Tensor forward(const torch::Tensor& ids, const ForwardOptions& options = {});
  // hidden [..., H] -> logits [..., V]; lets the loss run over chunks of positions.
  torch::Tensor logits(const torch::Tensor& hidden);
  // The output projection: lm_head.weight, or the embedding table when tied.
  torch::Tensor output_weight();

  const io::LlamaConfig& config() const { return config_; }

  LlamaModel model{nullptr};
  Linear lm_head{nullptr};  // null when tie_word_embeddings

 private:
  io::LlamaConfig config_;
};
TORCH_MODULE(LlamaForCausalLM);

// The seven projections of every decoder layer, in model order, named as their checkpoint keys
// without ".weight": "model.layers.N.self_attn.q_proj", ..., "model.layers.N.mlp.down_proj". They
// are what LoRA applies to and what model.quantize stores quantized (lm_head never is).
using NamedProjection = std::pair<std::string, std::shared_ptr<LinearImpl>>;
std::vector<NamedProjection> named_projections(LlamaForCausalLM& model);

// Replaces every quantized projection weight by a dense frozen parameter holding its dequantized
// values, in the dtype of the model's other weights (to write the model as an HF folder).
void dequantize_projections(LlamaForCausalLM& model);

// Fills the weights as HF's LlamaPreTrainedModel._init_weights does (normal(0, std) for linear
// and embedding weights, ones for norms, zeros for biases), from a fixed seed, for benchmarks and
// tests.
// The decoder layer each of `parameters` belongs to (its index in model.layers), or -1 for one
// outside the layers (embedding, final norm, output head): what FSDP makes its units from.
std::vector<std::int64_t> decoder_layers_of(LlamaForCausalLM& model, const std::vector<at::Tensor>& parameters);

void init_weights(LlamaForCausalLM& model, std::uint64_t seed, double std = 0.02);

}  // namespace ft::model
