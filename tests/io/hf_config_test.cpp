// io/hf_config: LlamaForCausalLM config.json with HF's defaults and clear errors.
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
  expect([](Json& j) { j["model_type"] = "gpt2"; }, "only LLaMA-family models");
  expect([](Json& j) { j["rms_norm_eps"] = -1; }, "rms_norm_eps: expected a positive number, got -1");
  expect([](Json& j) { j["rope_scaling"] = {{"rope_type", "yarn"}}; }, "rope scaling \"yarn\" is not supported");
  expect([](Json& j) { j["eos_token_id"] = 100; }, "eos_token_id 100 is not below vocab_size 100");
  expect([](Json& j) { j["attention_bias"] = true; }, "attention_bias true is not supported");
  expect([](Json& j) { j["torch_dtype"] = "int8"; }, "torch_dtype: expected fp32, bf16 or fp16, got \"int8\"");
  EXPECT_FT_ERROR(load_llama_config("/nonexistent"), "/nonexistent: not found");
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
