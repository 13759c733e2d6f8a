#include "model/llama_model.h"

#include <unordered_map>

#include <torch/torch.h>

#include <optional>

#include "model/kv_cache.h"
#include "util/error.h"

namespace ft::model {

LlamaModelImpl::LlamaModelImpl(const io::LlamaConfig& c, const torch::TensorOptions& options, Quantization quantize)
    : rotary_(c) {
  embed_tokens = register_module("embed_tokens", Embedding(c.vocab_size, c.hidden_size, options));
  layer_list = register_module("layers", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers.push_back(DecoderLayer(c, i, options, quantize));
    layer_list->push_back(layers.back());
    layer_windows_.push_back(c.layer_window(i));
  }
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps, options));
}

torch::Tensor LlamaModelImpl::forward(const torch::Tensor& ids, const ForwardOptions& options) {
  FT_CHECK(ids.dim() == 2, "input ids must be [batch, seq], got ", ids.sizes());
  const std::int64_t b = ids.size(0), t = ids.size(1);
  const std::int64_t past = options.cache != nullptr ? options.cache->length() : 0;
  auto h = embed_tokens(ids);
  torch::Tensor positions = options.position_ids;
  if (!positions.defined())
    positions = torch::arange(past, past + t, ids.options().dtype(torch::kLong)).unsqueeze(0).expand({b, t});
  // Not a structured binding: C++17 lambdas cannot capture one (clang refuses it).
  const auto cos_sin = rotary_.cos_sin(positions, h.scalar_type());
  const torch::Tensor& cos = cos_sin.first;
  const torch::Tensor& sin = cos_sin.second;
  // One mask per window size in use (0: full causal attention; a model has at most one window),
  // made when the first layer that needs it runs and shared by the others.
  std::optional<LayerInputs> full, windowed;
  auto inputs_for = [&](std::int64_t window) -> const LayerInputs& {
    std::optional<LayerInputs>& slot = window > 0 ? windowed : full;
    if (!slot)
      slot = LayerInputs{cos, sin,
                         make_attention_mask(attention_kernel, t, past, options.segment_ids, h.scalar_type(),
                                             ids.device(), window),
                         options.cache};
    return *slot;
  };
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerInputs& in = inputs_for(layer_windows_[i]);
    h = options.layer_runner ? options.layer_runner(i, layers[i], h, in) : layers[i](h, cos, sin, in.mask, options.cache);
  }
  if (options.cache != nullptr) options.cache->commit(t);
  return norm(h);
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const io::LlamaConfig& c, const torch::TensorOptions& options,
                                           Quantization quantize)
    : config_(c) {
  model = register_module("model", LlamaModel(c, options, quantize));
  if (!c.tie_word_embeddings) lm_head = register_module("lm_head", Linear(c.hidden_size, c.vocab_size, options));
}

torch::Tensor LlamaForCausalLMImpl::output_weight() {
  return lm_head ? lm_head->weight : model->embed_tokens->weight;
}

torch::Tensor LlamaForCausalLMImpl::logits(const torch::Tensor& hidden) {
  return torch::nn::functional::linear(hidden, output_weight());
}

torch::Tensor LlamaForCausalLMImpl::forward(const torch::Tensor& ids, const ForwardOptions& options) {
  return logits(model(ids, options));
}

std::vector<NamedProjection> named_projections(LlamaForCausalLM& model) {
  std::vector<NamedProjection> out;
  for (std::size_t i = 0; i < model->model->layers.size(); ++i) {
    const std::string prefix = "model.layers." + std::to_string(i) + ".";
    auto& attn = model->model->layers[i]->self_attn;
    auto& mlp = model->model->layers[i]->mlp;
    for (const auto& [name, linear] : {std::pair{"self_attn.q_proj", attn->q_proj}, {"self_attn.k_proj", attn->k_proj},
                                       {"self_attn.v_proj", attn->v_proj}, {"self_attn.o_proj", attn->o_proj},
                                       {"mlp.gate_proj", mlp->gate_proj}, {"mlp.up_proj", mlp->up_proj},
                                       {"mlp.down_proj", mlp->down_proj}})
      out.emplace_back(prefix + name, linear.ptr());
  }
  return out;
}

void dequantize_projections(LlamaForCausalLM& model) {
  const c10::ScalarType dtype = model->output_weight().scalar_type();
  for (const auto& [name, linear] : named_projections(model)) linear->dequantize_weight(dtype);
}

std::vector<std::int64_t> decoder_layers_of(LlamaForCausalLM& model, const std::vector<at::Tensor>& parameters) {
  std::unordered_map<const c10::TensorImpl*, std::int64_t> layer_of;
  for (std::size_t i = 0; i < model->model->layers.size(); ++i)
    for (const at::Tensor& p : model->model->layers[i]->parameters())
      layer_of[p.unsafeGetTensorImpl()] = static_cast<std::int64_t>(i);
  std::vector<std::int64_t> out;
  out.reserve(parameters.size());
  for (const at::Tensor& p : parameters) {
    const auto it = layer_of.find(p.unsafeGetTensorImpl());
    out.push_back(it == layer_of.end() ? -1 : it->second);
  }
  return out;
}

void init_weights(LlamaForCausalLM& model, std::uint64_t seed, double std) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& p : model->named_parameters()) {
    auto& w = p.value();
    const std::string& name = p.key();
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) {
      w.zero_();  // projection biases (nn.Linear's bias under HF's _init_weights)
    } else if (w.dim() == 1) {
      w.fill_(1.0);  // RMSNorm weights
    } else {
      w.copy_(at::normal(0.0, std, w.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat)));
    }
  }
}

}  // namespace ft::model
