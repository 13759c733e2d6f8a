#include "io/hf_config.h"

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

LlamaConfig parse_llama_config(const Json& json, const std::string& source) {
  FT_CHECK(json.is_object(), source, ": expected a JSON object");
  Reader r(json, source);
  if (r.has("model_type")) {
    FT_CHECK(json["model_type"].is_string() && json["model_type"].get<std::string>() == "llama", source,
             ": model_type is ", describe_json(json["model_type"]),
             "; only LLaMA-family models (model_type \"llama\") are supported");
  }
  if (r.has("hidden_act"))
    FT_CHECK(json["hidden_act"] == "silu", source, ": hidden_act ", describe_json(json["hidden_act"]),
             " is not supported (LLaMA uses \"silu\")");
  FT_CHECK(!r.boolean("attention_bias", false), source, ": attention_bias true is not supported");
  FT_CHECK(!r.boolean("mlp_bias", false), source, ": mlp_bias true is not supported");

  LlamaConfig c;
  c.raw = json;
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

std::int64_t LlamaConfig::num_parameters() const {
  const std::int64_t h = hidden_size, q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  const std::int64_t per_layer = h * q + 2 * h * kv + q * h + 3 * h * intermediate_size + 2 * h;
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
  out["head_dim"] = head_dim;
  out["max_position_embeddings"] = max_position_embeddings;
  out["rms_norm_eps"] = rms_norm_eps;
  out["tie_word_embeddings"] = tie_word_embeddings;
  out["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1) out["eos_token_id"] = eos_token_ids[0];
  else out["eos_token_id"] = eos_token_ids;
  if (!out.contains("rope_parameters")) out["rope_theta"] = rope_theta;
  if (!out.contains("model_type")) out["model_type"] = "llama";
  if (!out.contains("architectures")) out["architectures"] = {"LlamaForCausalLM"};
  auto stored = dtype ? dtype : torch_dtype;
  if (stored) {
    out["torch_dtype"] = hf_dtype_name(*stored);
    if (out.contains("dtype")) out["dtype"] = hf_dtype_name(*stored);
  }
  return out;
}

}  // namespace ft::io
