#include "model/model_loader.h"

#include <torch/torch.h>

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "io/tensor_shape.h"
#include "util/error.h"
#include "util/file_util.h"
#include "util/log.h"

namespace ft::model {
namespace {

using io::shape_string;

// Tensors that HF checkpoints may carry but that are not parameters.
bool is_ignorable(const std::string& name, bool tied) {
  if (name.find("rotary_emb.inv_freq") != std::string::npos) return true;
  return tied && name == "lm_head.weight";  // written by some converters, equal to the embedding
}

// The stored tensor `name`, which the model described by config.json needs.
const io::TensorInfo& required_tensor(const io::WeightSource& weights, const std::string& name,
                                      std::int64_t num_hidden_layers) {
  FT_CHECK(weights.contains(name), weights.path(), ": missing tensor '", name, "' (config.json describes ",
           num_hidden_layers, " layers; hint: is this the model the config belongs to?)");
  return weights.info(name);
}

// config.json decides every allocation the model makes, and nothing bounds it but the weights:
// before allocating, each dimension it gives is checked against the shape of a tensor the
// safetensors files actually hold (their sizes are checked against the files' lengths). A config
// that does not belong to the weights, or a hostile one, gets an error naming both, not an
// attempt to allocate terabytes.
void check_config_against_weights(const io::LlamaConfig& c, const io::WeightSource& weights) {
  const std::string config_file = join_path(weights.path(), "config.json");
  auto shape_of = [&](const std::string& name) -> const std::vector<std::int64_t>& {
    const std::vector<std::int64_t>& shape = required_tensor(weights, name, c.num_hidden_layers).shape;
    FT_CHECK(shape.size() == 2, weights.file_of(name), ": tensor '", name, "' has shape ", shape_string(shape),
             "; expected a matrix");
    return shape;
  };
  auto expect = [&](const std::string& tensor, std::int64_t dim, std::int64_t found, const std::string& keys,
                    std::int64_t implied) {
    FT_CHECK(found == implied, config_file, ": ", keys, " = ", implied, " but ", weights.file_of(tensor), " has '",
             tensor, "' of shape ", shape_string(shape_of(tensor)), " (dimension ", dim,
             "); is this the config of these weights?");
  };
  const std::string embed = "model.embed_tokens.weight";
  expect(embed, 0, shape_of(embed)[0], "vocab_size", c.vocab_size);
  expect(embed, 1, shape_of(embed)[1], "hidden_size", c.hidden_size);
  // The last layer must exist and the one after it must not (layers count from 0).
  const std::string prefix = "model.layers." + std::to_string(c.num_hidden_layers - 1) + ".";
  const std::string q = prefix + "self_attn.q_proj.weight", k = prefix + "self_attn.k_proj.weight";
  const std::string gate = prefix + "mlp.gate_proj.weight";
  shape_of(q);
  FT_CHECK(!weights.contains("model.layers." + std::to_string(c.num_hidden_layers) + ".self_attn.q_proj.weight"),
           config_file, ": num_hidden_layers = ", c.num_hidden_layers, " but ", weights.path(),
           " has more layers; is this the config of these weights?");
  // Products in checked arithmetic: each factor is compared on its own first.
  auto product = [](std::int64_t a, std::int64_t b) {
    std::int64_t out = 0;
    return __builtin_mul_overflow(a, b, &out) ? std::int64_t{-1} : out;
  };
  expect(q, 0, shape_of(q)[0], "num_attention_heads * head_dim", product(c.num_attention_heads, c.head_dim));
  expect(q, 1, shape_of(q)[1], "hidden_size", c.hidden_size);
  expect(k, 0, shape_of(k)[0], "num_key_value_heads * head_dim", product(c.num_key_value_heads, c.head_dim));
  expect(gate, 0, shape_of(gate)[0], "intermediate_size", c.intermediate_size);
  // Biases: the model type (and attention_bias) decide which projections have one; weights that
  // say otherwise belong to another config.
  const char* type = io::model_type_name(c.model_type);
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
    const std::string bias = "model.layers.0.self_attn." + std::string(proj) + ".bias";
    const bool expected = std::string(proj) == "o_proj" ? c.o_bias : c.qkv_bias;
    const std::string why = c.model_type == io::ModelType::kLlama
                                ? str("attention_bias ", expected ? "true" : "false", " (model_type llama)")
                                : str("model_type ", type, expected ? " has a bias on " : " has no bias on ", proj);
    FT_CHECK(weights.contains(bias) == expected, config_file, ": ", why, " but ", weights.path(),
             expected ? " has no tensor '" : " has a tensor '", bias, "'; is this the config of these weights?");
  }
}

}  // namespace

bool compute_dtype_supported(c10::ScalarType dtype, c10::Device device) {
  static std::mutex mutex;
  static std::map<std::pair<int, std::string>, bool> known;
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(static_cast<int>(dtype), device.str());
  auto it = known.find(key);
  if (it != known.end()) return it->second;
  bool ok = true;
  try {
    auto a = torch::ones({2, 2}, torch::TensorOptions().dtype(dtype).device(device));
    torch::mm(a, a);
  } catch (const c10::Error&) {
    ok = false;
  }
  known[key] = ok;
  return ok;
}

void check_compute_dtype(c10::ScalarType dtype, c10::Device device, const std::string& what) {
  FT_CHECK(compute_dtype_supported(dtype, device), what, ": this LibTorch cannot compute in ",
           c10::toString(dtype), " on ", device.str(), " (no matrix product for it); use ",
           device.is_cpu() ? "bf16 or fp32 on CPU" : "another dtype");
}

std::int64_t QuantizationReport::dense_bytes() const {
  std::int64_t n = 0;
  for (const auto& t : tensors) n += t.dense_bytes;
  return n;
}

std::int64_t QuantizationReport::quantized_bytes() const {
  std::int64_t n = 0;
  for (const auto& t : tensors) n += t.quantized_bytes;
  return n;
}

std::string QuantizationReport::summary() const {
  double sum = 0;
  const Tensor* worst = nullptr;
  for (const auto& t : tensors) {
    sum += t.error.relative_rms;
    if (!worst || t.error.relative_rms > worst->error.relative_rms) worst = &t;
  }
  auto size = [](std::int64_t bytes) {
    return bytes >= 1e9 ? str(bytes / 1e9, " GB") : str(bytes / 1e6, " MB");
  };
  std::ostringstream s;
  s.precision(4);
  s << quantization_name(quantization) << ": " << tensors.size() << " tensors, " << size(dense_bytes()) << " -> "
    << size(quantized_bytes());
  if (worst)
    s << "; round-trip relative RMS error mean " << sum / static_cast<double>(tensors.size()) << ", worst "
      << worst->error.relative_rms << " (" << worst->name << ")";
  return s.str();
}

void load_weights(LlamaForCausalLM& model, const io::WeightSource& weights, QuantizationReport* report) {
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  // Checks the stored tensor `name` against the shape the model expects, then hands it over.
  auto load = [&](const std::string& name, at::IntArrayRef shape, const std::function<void(const at::Tensor&)>& set) {
    const io::TensorInfo& info = required_tensor(weights, name, model->config().num_hidden_layers);
    FT_CHECK(at::IntArrayRef(info.shape) == shape, weights.file_of(name), ": tensor '", name, "' has shape ",
             shape_string(info.shape), " but config.json implies ", shape_string(shape));
    FT_CHECK(info.dtype->scalar && at::isFloatingType(*info.dtype->scalar), weights.file_of(name),
             ": tensor '", name, "' has dtype ", info.dtype->name, "; expected F32, F16 or BF16");
    set(weights.load(name));
    used.insert(name);
  };
  for (auto& p : model->named_parameters())
    load(p.key(), p.value().sizes(), [&](const at::Tensor& value) { p.value().copy_(value); });
  const c10::ScalarType dtype = model->output_weight().scalar_type();
  for (const auto& projection : named_projections(model)) {
    const auto& linear = projection.second;
    if (!linear->is_quantized()) continue;
    const std::string name = projection.first + ".weight";
    load(name, {linear->out_features(), linear->in_features()}, [&](const at::Tensor& value) {
      linear->set_weight(value);
      if (!report) return;
      report->quantization = linear->quantization();
      report->tensors.push_back({name, value.numel() * static_cast<std::int64_t>(c10::elementSize(dtype)),
                                 linear->weight_quantized->bytes(),
                                 round_trip_error(value, *linear->weight_quantized)});
    });
  }
  std::vector<std::string> unused;
  for (const auto& name : weights.names())
    if (!used.count(name) && !is_ignorable(name, model->config().tie_word_embeddings)) unused.push_back(name);
  if (!unused.empty())
    log::warn(weights.path(), ": ", unused.size(), " tensors are not used by the model, e.g. '", unused[0], "'");
}

LlamaForCausalLM load_llama(const std::string& model_dir, const LoadOptions& options, QuantizationReport* report) {
  io::LlamaConfig config = io::load_llama_config(model_dir);
  io::WeightSource weights(model_dir);
  c10::ScalarType dtype = torch::kFloat;
  if (options.dtype) {
    dtype = *options.dtype;
  } else if (config.torch_dtype) {
    dtype = *config.torch_dtype;
  } else if (weights.contains("model.embed_tokens.weight")) {
    auto stored = weights.info("model.embed_tokens.weight").dtype->scalar;
    if (stored && at::isFloatingType(*stored)) dtype = *stored;
  }
  check_config_against_weights(config, weights);
  LlamaForCausalLM model(config, torch::TensorOptions().dtype(dtype).device(options.device), options.quantize);
  load_weights(model, weights, report);
  model->eval();
  return model;
}

}  // namespace ft::model
