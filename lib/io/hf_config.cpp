#include "io/hf_config.h"

#include <algorithm>

#include "io/dtype.h"
#include "util/error.h"
#include "util/file_util.h"

namespace ft::io {
namespace {

class Reader {
 public:
  Reader(const Json& json, std::string source) : json_(json), source_(std::move(source)) {}

  bool has(const char* key) const { return json_.contains(key) && !json_[key].is_null(); }

  std::int64_t positive_int(const char* key, std::optional<std::int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      FT_CHECK(fallback.has_value(), source_, ": missing required key \"", key, "\"");
      return *fallback;
    }
    const Json& v = json_[key];
    FT_CHECK(v.is_number_integer() && v.get<std::int64_t>() > 0, source_, ": ", key,
             ": expected a positive integer, got ", describe_json(v));
    return v.get<std::int64_t>();
  }

  double positive_number(const Json& obj, const char* key, double fallback, const std::string& prefix) const {
    if (!obj.contains(key) || obj[key].is_null()) return fallback;
    const Json& v = obj[key];
    FT_CHECK(v.is_number() && v.get<double>() > 0, source_, ": ", prefix, key,
             ": expected a positive number, got ", describe_json(v));
    return v.get<double>();
  }

  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    FT_CHECK(json_[key].is_boolean(), source_, ": ", key, ": expected true or false, got ",
             describe_json(json_[key]));
    return json_[key].get<bool>();
  }

  std::int64_t token_id(const Json& v, const char* key) const {
    FT_CHECK(v.is_number_integer() && v.get<std::int64_t>() >= 0, source_, ": ", key,
             ": expected a token id (integer >= 0), got ", describe_json(v));
    return v.get<std::int64_t>();
  }

  const std::string& source() const { return source_; }

 private:
  const Json& json_;
  std::string source_;
};

RopeScaling parse_rope_scaling(const Json& obj, const Reader& r, const std::string& key) {
  RopeScaling s;
  FT_CHECK(obj.is_object(), r.source(), ": ", key, ": expected an object or null, got ", describe_json(obj));
  const char* type_key = obj.contains("rope_type") ? "rope_type" : "type";
  if (obj.contains(type_key)) {
    FT_CHECK(obj[type_key].is_string(), r.source(), ": ", key, ".", type_key, ": expected a string");
    s.type = obj[type_key].get<std::string>();
  }
  FT_CHECK(s.type == "default" || s.type == "linear" || s.type == "llama3", r.source(), ": ", key,
           ".", type_key, ": rope scaling \"", s.type,
           "\" is not supported (supported: default, linear, llama3)");
  const std::string prefix = key + ".";
  s.factor = r.positive_number(obj, "factor", 1.0, prefix);
  s.low_freq_factor = r.positive_number(obj, "low_freq_factor", 1.0, prefix);
  s.high_freq_factor = r.positive_number(obj, "high_freq_factor", 4.0, prefix);
  s.original_max_position_embeddings = static_cast<std::int64_t>(
      r.positive_number(obj, "original_max_position_embeddings", 8192, prefix));
  if (s.type == "llama3")
    FT_CHECK(s.high_freq_factor > s.low_freq_factor, r.source(), ": ", key,
             ": high_freq_factor must exceed low_freq_factor");
  return s;
}

}  // namespace

const char* model_type_name(ModelType type) {
  switch (type) {
    case ModelType::kMistral: return "mistral";
    case ModelType::kQwen2: return "qwen2";
    default: return "llama";
  }
}

const char* architecture_name(ModelType type) {
  switch (type) {
    case ModelType::kMistral: return "MistralForCausalLM";
    case ModelType::kQwen2: return "Qwen2ForCausalLM";
    default: return "LlamaForCausalLM";
  }
}

namespace {

ModelType parse_model_type(const Json& json, const Reader& r) {
  if (!r.has("model_type")) return ModelType::kLlama;
  const Json& v = json["model_type"];
  for (ModelType t : {ModelType::kLlama, ModelType::kMistral, ModelType::kQwen2})
    if (v.is_string() && v.get<std::string>() == model_type_name(t)) return t;
  FT_CHECK(false, r.source(), ": model_type ", v.is_string() ? "\"" + v.get<std::string>() + "\"" : describe_json(v),
           " is not supported (supported: llama, mistral, qwen2: LLaMA-family models)");
  return ModelType::kLlama;
}

// The window size key: a positive integer, or null/absent (`fallback`, 0 = none).
std::int64_t window_size(const Json& json, const Reader& r, std::int64_t fallback) {
  if (!json.contains("sliding_window")) return fallback;
  if (json["sliding_window"].is_null()) return 0;
  return r.positive_int("sliding_window");
}

// Which layers use the window (transformers' semantics per model type; c.sliding_window > 0).
std::vector<bool> sliding_layers(const Json& json, const Reader& r, const LlamaConfig& c) {
  const auto n = static_cast<std::size_t>(c.num_hidden_layers);
  if (c.model_type == ModelType::kMistral) return std::vector<bool>(n, true);  // MistralModel: one mask for all
  std::vector<bool> out(n, false);
  if (r.has("layer_types")) {
    const Json& types = json["layer_types"];
    FT_CHECK(types.is_array() && types.size() == n, r.source(), ": layer_types: expected a list of ", n,
             " entries (num_hidden_layers), got ", describe_json(types));
    for (std::size_t i = 0; i < n; ++i) {
      FT_CHECK(types[i] == "full_attention" || types[i] == "sliding_attention", r.source(), ": layer_types[", i,
               "]: expected \"full_attention\" or \"sliding_attention\", got ", describe_json(types[i]));
      out[i] = types[i] == "sliding_attention";
    }
    return out;
  }
  const std::int64_t first = r.has("max_window_layers") ? r.positive_int("max_window_layers") : 28;
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::int64_t>(i) >= first;
  return out;
}

}  // namespace

LlamaConfig parse_llama_config(const Json& json, const std::string& source) {
  FT_CHECK(json.is_object(), source, ": expected a JSON object");
  Reader r(json, source);
  const ModelType type = parse_model_type(json, r);
  if (r.has("hidden_act"))
    FT_CHECK(json["hidden_act"] == "silu", source, ": hidden_act ", describe_json(json["hidden_act"]),
             " is not supported (LLaMA uses \"silu\")");

  LlamaConfig c;
  c.raw = json;
  c.model_type = type;
  // Biases and windows as each transformers model class reads them: LlamaAttention/LlamaMLP take
  // attention_bias/mlp_bias; Qwen2Attention has q/k/v biases whatever the file says; Mistral none.
  if (type == ModelType::kLlama) {
    c.qkv_bias = c.o_bias = r.boolean("attention_bias", false);
    FT_CHECK(!r.boolean("mlp_bias", false), source, ": mlp_bias true is not supported");
  } else if (type == ModelType::kQwen2) {
    c.qkv_bias = true;
  }
  c.vocab_size = r.positive_int("vocab_size");
  c.hidden_size = r.positive_int("hidden_size");
  c.intermediate_size = r.positive_int("intermediate_size");
  c.num_hidden_layers = r.positive_int("num_hidden_layers");
  c.num_attention_heads = r.positive_int("num_attention_heads");
  c.num_key_value_heads = r.positive_int("num_key_value_heads", c.num_attention_heads);
  FT_CHECK(c.hidden_size % c.num_attention_heads == 0 || r.has("head_dim"), source,
           ": hidden_size ", c.hidden_size, " is not divisible by num_attention_heads ",
           c.num_attention_heads, " and head_dim is not given");
  c.head_dim = r.positive_int("head_dim", c.hidden_size / c.num_attention_heads);
  FT_CHECK(c.head_dim % 2 == 0, source, ": head_dim ", c.head_dim, " must be even for RoPE");
  FT_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, source, ": num_attention_heads ",
           c.num_attention_heads, " is not a multiple of num_key_value_heads ", c.num_key_value_heads);
  c.max_position_embeddings = r.positive_int("max_position_embeddings", 2048);
  c.rms_norm_eps = r.positive_number(json, "rms_norm_eps", 1e-6, "");

  // rope_theta / rope_scaling at the top level (transformers <= 4.x) or in rope_parameters.
  const Json* rope = &json;
  std::string rope_prefix;
  if (r.has("rope_parameters")) {
    FT_CHECK(json["rope_parameters"].is_object(), source, ": rope_parameters: expected an object");
    rope = &json["rope_parameters"];
    rope_prefix = "rope_parameters.";
  }
  c.rope_theta = r.positive_number(*rope, "rope_theta", 10000.0, rope_prefix);
  if (rope_prefix.empty()) {
    if (r.has("rope_scaling")) c.rope_scaling = parse_rope_scaling(json["rope_scaling"], r, "rope_scaling");
  } else {
    c.rope_scaling = parse_rope_scaling(*rope, r, "rope_parameters");
  }

  c.tie_word_embeddings = r.boolean("tie_word_embeddings", false);
  if (r.has("bos_token_id")) c.bos_token_id = r.token_id(json["bos_token_id"], "bos_token_id");
  if (r.has("eos_token_id")) {
    c.eos_token_ids.clear();
    const Json& eos = json["eos_token_id"];
    if (eos.is_array()) {
      for (const Json& id : eos) c.eos_token_ids.push_back(r.token_id(id, "eos_token_id"));
    } else {
      c.eos_token_ids.push_back(r.token_id(eos, "eos_token_id"));
    }
  }
  for (std::int64_t id : c.eos_token_ids)
    FT_CHECK(id < c.vocab_size, source, ": eos_token_id ", id, " is not below vocab_size ", c.vocab_size);
  FT_CHECK(c.bos_token_id < c.vocab_size, source, ": bos_token_id ", c.bos_token_id,
           " is not below vocab_size ", c.vocab_size);
  if (type == ModelType::kMistral) {
    c.sliding_window = window_size(json, r, 4096);  // MistralConfig's default
  } else if (type == ModelType::kQwen2 && r.boolean("use_sliding_window", false)) {
    c.sliding_window = window_size(json, r, 4096);
  }
  if (c.sliding_window > 0) {
    c.sliding_layers = sliding_layers(json, r, c);
    if (std::find(c.sliding_layers.begin(), c.sliding_layers.end(), true) == c.sliding_layers.end()) {
      c.sliding_window = 0;  // no layer uses it
      c.sliding_layers.clear();
    }
  }
  const char* dtype_key = r.has("torch_dtype") ? "torch_dtype" : (r.has("dtype") ? "dtype" : nullptr);
  if (dtype_key != nullptr && json[dtype_key].is_string())
    c.torch_dtype = parse_float_dtype(json[dtype_key].get<std::string>(), source + ": " + dtype_key);
  return c;
}

LlamaConfig load_llama_config(const std::string& path) {
  const std::string file = is_directory(path) ? join_path(path, "config.json") : path;
  FT_CHECK(file_exists(file), file, ": not found (a Hugging Face model folder has a config.json)");
  return parse_llama_config(parse_json_file(file, 16), file);
}

std::int64_t LlamaConfig::layer_window(std::int64_t layer) const {
  if (sliding_window <= 0 || layer < 0 || layer >= static_cast<std::int64_t>(sliding_layers.size())) return 0;
  return sliding_layers[static_cast<std::size_t>(layer)] ? sliding_window : 0;
}

std::int64_t LlamaConfig::layer_bias_parameters() const {
  const std::int64_t q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  return (qkv_bias ? q + 2 * kv : 0) + (o_bias ? hidden_size : 0);
}

std::int64_t LlamaConfig::num_parameters() const {
  const std::int64_t h = hidden_size, q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  const std::int64_t per_layer =
      h * q + 2 * h * kv + q * h + 3 * h * intermediate_size + 2 * h + layer_bias_parameters();
  return vocab_size * h * (tie_word_embeddings ? 1 : 2) + num_hidden_layers * per_layer + h;
}

Json LlamaConfig::to_json(std::optional<c10::ScalarType> dtype) const {
  Json out = raw.is_object() ? raw : Json::object();
  out["vocab_size"] = vocab_size;
  out["hidden_size"] = hidden_size;
  out["intermediate_size"] = intermediate_size;
  out["num_hidden_layers"] = num_hidden_layers;
  out["num_attention_heads"] = num_attention_heads;
  out["num_key_value_heads"] = num_key_value_heads;
  // head_dim as the file had it: a file without one (qwen2's) keeps the derived default implicit.
  const bool implied_head_dim = hidden_size % num_attention_heads == 0 && head_dim == hidden_size / num_attention_heads;
  if (!implied_head_dim || (out.contains("head_dim") && !out["head_dim"].is_null())) out["head_dim"] = head_dim;
  out["max_position_embeddings"] = max_position_embeddings;
  out["rms_norm_eps"] = rms_norm_eps;
  out["tie_word_embeddings"] = tie_word_embeddings;
  out["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1) out["eos_token_id"] = eos_token_ids[0];
  else out["eos_token_id"] = eos_token_ids;
  if (!out.contains("rope_parameters")) out["rope_theta"] = rope_theta;
  if (!out.contains("model_type")) out["model_type"] = model_type_name(model_type);
  if (!out.contains("architectures")) out["architectures"] = {architecture_name(model_type)};
  if (model_type == ModelType::kLlama && o_bias) out["attention_bias"] = true;
  auto stored = dtype ? dtype : torch_dtype;
  if (stored) {
    out["torch_dtype"] = hf_dtype_name(*stored);
    if (out.contains("dtype")) out["dtype"] = hf_dtype_name(*stored);
  }
  return out;
}

}  // namespace ft::io
