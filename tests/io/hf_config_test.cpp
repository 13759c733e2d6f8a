// io/hf_config: config.json of llama / mistral / qwen2 with transformers' defaults and clear errors.
#include <gtest/gtest.h>

#include "io/hf_config.h"
#include "test_support.h"

namespace ft::io {
namespace {

Json base_config() {
  return parse_json(R"({"model_type": "llama", "vocab_size": 100, "hidden_size": 32, "intermediate_size": 64,
                        "num_hidden_layers": 2, "num_attention_heads": 4})", "inline");
}

TEST(HfConfig, TinyStories) {
  LlamaConfig c = load_llama_config(test::data_path("stories260K"));
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 172);
  EXPECT_EQ(c.num_hidden_layers, 5);
  EXPECT_EQ(c.num_attention_heads, 8);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<std::int64_t>{2});
  EXPECT_EQ(c.torch_dtype, c10::ScalarType::Float);
  EXPECT_EQ(c.num_parameters(), 260032);  // the asset README's count
}

TEST(HfConfig, Defaults) {
  LlamaConfig c = parse_llama_config(base_config(), "c.json");
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_scaling.type, "default");
}

TEST(HfConfig, RopeParametersAndEosList) {
  Json j = base_config();
  j["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                          {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
  j["eos_token_id"] = {7, 9};
  LlamaConfig c = parse_llama_config(j, "c.json");
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<std::int64_t>{7, 9}));
  // Top-level rope_scaling as transformers 4.x writes it.
  Json k = base_config();
  k["rope_theta"] = 123.0;
  k["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  LlamaConfig d = parse_llama_config(k, "c.json");
  EXPECT_DOUBLE_EQ(d.rope_theta, 123.0);
  EXPECT_EQ(d.rope_scaling.type, "linear");
}

TEST(HfConfig, ErrorsNameFileKeyAndValue) {
  auto expect = [](std::function<void(Json&)> edit, const std::string& message) {
    Json j = base_config();
    edit(j);
    EXPECT_FT_ERROR(parse_llama_config(j, "m/config.json"), "m/config.json: ");
    EXPECT_FT_ERROR(parse_llama_config(j, "m/config.json"), message);
  };
  expect([](Json& j) { j.erase("hidden_size"); }, "missing required key \"hidden_size\"");
  expect([](Json& j) { j["num_hidden_layers"] = "2"; }, "num_hidden_layers: expected a positive integer, got \"2\" (a string)");
  expect([](Json& j) { j["num_key_value_heads"] = 3; }, "num_attention_heads 4 is not a multiple of num_key_value_heads 3");
  expect([](Json& j) { j["model_type"] = "gpt2"; },
         "model_type \"gpt2\" is not supported (supported: llama, mistral, qwen2: LLaMA-family models)");
  expect([](Json& j) { j["model_type"] = 3; }, "model_type 3 is not supported (supported: llama, mistral, qwen2");
  expect([](Json& j) { j["model_type"] = "mixtral"; }, "model_type \"mixtral\" is not supported");
  expect([](Json& j) { j["rms_norm_eps"] = -1; }, "rms_norm_eps: expected a positive number, got -1");
  expect([](Json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}}; }, "rope scaling \"yarn\" is not supported");
  expect([](Json& j) { j["eos_token_id"] = 100; }, "eos_token_id 100 is not below vocab_size 100");
  expect([](Json& j) { j["mlp_bias"] = true; }, "mlp_bias true is not supported");
  expect([](Json& j) { j["attention_bias"] = "yes"; }, "attention_bias: expected true or false, got \"yes\"");
  expect([](Json& j) { j["model_type"] = "mistral"; j["sliding_window"] = 0; },
         "sliding_window: expected a positive integer, got 0");
  expect([](Json& j) { j["model_type"] = "qwen2"; j["use_sliding_window"] = true; j["sliding_window"] = -4; },
         "sliding_window: expected a positive integer, got -4");
  expect([](Json& j) { j["model_type"] = "qwen2"; j["use_sliding_window"] = true; j["layer_types"] = {"full_attention"}; },
         "layer_types: expected a list of 2 entries (num_hidden_layers)");
  expect([](Json& j) {
           j["model_type"] = "qwen2";
           j["use_sliding_window"] = true;
           j["layer_types"] = {"full_attention", "chunked_attention"};
         },
         "layer_types[1]: expected \"full_attention\" or \"sliding_attention\", got \"chunked_attention\"");
  expect([](Json& j) { j["torch_dtype"] = "int8"; }, "torch_dtype: expected fp32, bf16 or fp16, got \"int8\"");
  EXPECT_FT_ERROR(load_llama_config("/nonexistent"), "/nonexistent: not found");
}

TEST(HfConfig, Llama3) {
  // LLaMA-3.2-1B's shape (tied, GQA, 128K vocabulary, llama3 rope scaling, eos list), as
  // transformers 5 writes it.
  Json j = parse_json(R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 128256,
    "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
    "tie_word_embeddings": true, "attention_bias": false, "mlp_bias": false, "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
                        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})", "llama3");
  LlamaConfig c = parse_llama_config(j, "c.json");
  EXPECT_EQ(c.model_type, ModelType::kLlama);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.num_parameters(), 1235814400);  // LLaMA-3.2-1B's published count
  // attention_bias true: transformers' LlamaAttention puts a bias on all four projections.
  j["attention_bias"] = true;
  LlamaConfig b = parse_llama_config(j, "c.json");
  EXPECT_TRUE(b.qkv_bias);
  EXPECT_TRUE(b.o_bias);
  EXPECT_EQ(b.num_parameters() - c.num_parameters(), 16 * (2048 + 512 + 512 + 2048));
  EXPECT_EQ(b.to_json()["attention_bias"], true);
  // A sliding_window key means nothing to LlamaForCausalLM.
  j["sliding_window"] = 16;
  EXPECT_EQ(parse_llama_config(j, "c.json").sliding_window, 0);
}

TEST(HfConfig, Mistral) {
  Json j = base_config();
  j["model_type"] = "mistral";
  j["sliding_window"] = 16;
  j["attention_bias"] = true;  // MistralAttention has no biases whatever the file says
  LlamaConfig c = parse_llama_config(j, "c.json");
  EXPECT_EQ(c.model_type, ModelType::kMistral);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.layer_window(0), 16);
  EXPECT_EQ(c.layer_window(1), 16);
  EXPECT_EQ(c.num_parameters(), parse_llama_config(base_config(), "c.json").num_parameters());
  // null: full attention; absent: MistralConfig's default 4096.
  j["sliding_window"] = nullptr;
  EXPECT_EQ(parse_llama_config(j, "c.json").sliding_window, 0);
  j.erase("sliding_window");
  EXPECT_EQ(parse_llama_config(j, "c.json").sliding_window, 4096);
  // layer_types is not read by MistralModel (one mask for every layer).
  j["layer_types"] = {"full_attention", "full_attention"};
  EXPECT_EQ(parse_llama_config(j, "c.json").layer_window(0), 4096);
  Json out = parse_llama_config(j, "c.json").to_json();
  EXPECT_EQ(out["model_type"], "mistral");
  j.erase("model_type");
  j["sliding_window"] = 8;
  LlamaConfig no_type = parse_llama_config(j, "c.json");  // absent model_type = llama
  EXPECT_EQ(no_type.sliding_window, 0);
  no_type.model_type = ModelType::kMistral;
  EXPECT_EQ(no_type.to_json()["model_type"], "mistral");
  EXPECT_EQ(no_type.to_json()["architectures"], Json::array({"MistralForCausalLM"}));
}

TEST(HfConfig, Qwen2) {
  Json j = base_config();
  j["model_type"] = "qwen2";
  j["num_key_value_heads"] = 2;
  j["attention_bias"] = false;  // not read: Qwen2Attention has q/k/v biases always
  LlamaConfig c = parse_llama_config(j, "c.json");
  EXPECT_EQ(c.model_type, ModelType::kQwen2);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.layer_bias_parameters(), 32 + 16 + 16);
  Json plain = j;
  plain["model_type"] = "llama";
  EXPECT_EQ(c.num_parameters() - parse_llama_config(plain, "c.json").num_parameters(), 2 * (32 + 16 + 16));
  // Qwen2.5's files carry a sliding_window that use_sliding_window false switches off.
  j["sliding_window"] = 32768;
  j["use_sliding_window"] = false;
  j["max_window_layers"] = 1;
  EXPECT_EQ(parse_llama_config(j, "c.json").sliding_window, 0);
  // use_sliding_window true: layers >= max_window_layers (default 28), or as layer_types says.
  j["use_sliding_window"] = true;
  j["sliding_window"] = 8;
  LlamaConfig w = parse_llama_config(j, "c.json");
  EXPECT_EQ(w.sliding_window, 8);
  EXPECT_EQ(w.layer_window(0), 0);
  EXPECT_EQ(w.layer_window(1), 8);
  j.erase("max_window_layers");
  EXPECT_EQ(parse_llama_config(j, "c.json").sliding_window, 0);  // no layer reaches 28
  j["layer_types"] = {"sliding_attention", "full_attention"};
  LlamaConfig t = parse_llama_config(j, "c.json");
  EXPECT_EQ(t.layer_window(0), 8);
  EXPECT_EQ(t.layer_window(1), 0);
  Json out = t.to_json();
  EXPECT_EQ(out["model_type"], "qwen2");
  EXPECT_FALSE(out.contains("attention_bias") && out["attention_bias"] == true);
  EXPECT_FALSE(out.contains("head_dim"));  // as the file had it: implied by hidden_size / heads
  j["head_dim"] = 16;
  EXPECT_EQ(parse_llama_config(j, "c.json").to_json()["head_dim"], 16);
}

TEST(HfConfig, ToJsonKeepsUnknownKeys) {
  Json j = base_config();
  j["custom_key"] = "kept";
  LlamaConfig c = parse_llama_config(j, "c.json");
  Json out = c.to_json(c10::ScalarType::BFloat16);
  EXPECT_EQ(out["custom_key"], "kept");
  EXPECT_EQ(out["torch_dtype"], "bfloat16");
  EXPECT_EQ(parse_llama_config(out, "round").hidden_size, 32);
}

}  // namespace
}  // namespace ft::io
