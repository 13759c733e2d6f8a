// io/peft_adapter: the files PEFT reads (exact key set of adapter_config.json, prefixed fp32
// tensors), reading back with or without the prefix, target matching as PEFT does it, and an
// error naming the file and key for everything ft refuses.
#include <gtest/gtest.h>

#include <set>

#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft::io {
namespace {

NamedTensors two_modules() {
  return {{"model.layers.0.self_attn.q_proj.lora_A.weight", torch::arange(8, torch::kFloat).reshape({2, 4})},
          {"model.layers.0.self_attn.q_proj.lora_B.weight", torch::arange(6, torch::kFloat).reshape({3, 2})},
          {"model.layers.1.mlp.down_proj.lora_A.weight", torch::ones({2, 5}, torch::kBFloat16)},
          {"model.layers.1.mlp.down_proj.lora_B.weight", torch::full({4, 2}, 0.5, torch::kBFloat16)}};
}

PeftAdapterConfig config_with(std::vector<std::string> targets) {
  PeftAdapterConfig c;
  c.r = 2;
  c.lora_alpha = 16;
  c.lora_dropout = 0.05;
  c.target_modules.names = std::move(targets);
  c.base_model_name_or_path = "meta-llama/Llama-2-7b-hf";
  return c;
}

TEST(PeftAdapter, WritesPeftKeysInFp32) {
  test::TempDir dir;
  write_peft_adapter(dir.file("a"), config_with({"q_proj", "down_proj"}), two_modules());
  SafetensorsReader reader(dir.file("a/adapter_model.safetensors"));
  std::set<std::string> names;
  for (const auto& t : reader.tensors()) {
    names.insert(t.name);
    EXPECT_STREQ(t.dtype->name, "F32") << t.name;
  }
  EXPECT_EQ(names, (std::set<std::string>{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
                                          "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
                                          "base_model.model.model.layers.1.mlp.down_proj.lora_A.weight",
                                          "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight"}));
  EXPECT_EQ(reader.info("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").shape,
            (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(reader.info("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight").shape,
            (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(reader.metadata().at("format"), "pt");
}

TEST(PeftAdapter, ConfigHasExactlyPeftsConservativeKeys) {
  test::TempDir dir;
  write_peft_adapter(dir.path(), config_with({"q_proj", "v_proj"}), two_modules());
  Json j = parse_json_file(dir.file("adapter_config.json"));
  Json expected = parse_json(R"({
    "peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": "meta-llama/Llama-2-7b-hf",
    "r": 2, "lora_alpha": 16, "lora_dropout": 0.05, "target_modules": ["q_proj", "v_proj"],
    "bias": "none", "fan_in_fan_out": false, "use_rslora": false, "use_dora": false,
    "modules_to_save": null, "inference_mode": true})", "expected");
  EXPECT_EQ(j, expected) << j.dump(2);
  EXPECT_TRUE(j["lora_alpha"].is_number_integer());  // 16, as PEFT writes it, not 16.0
  EXPECT_TRUE(j["r"].is_number_integer());
}

TEST(PeftAdapter, AllLinearIsWrittenAsTheSevenNamesAndRegexAsAString) {
  PeftAdapterConfig c = config_with({"all-linear"});
  EXPECT_EQ(c.to_json()["target_modules"],
            Json({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
  c.target_modules = LoraTargets{{}, ".*\\.(q|v)_proj"};
  EXPECT_EQ(c.to_json()["target_modules"], Json(".*\\.(q|v)_proj"));
  c.lora_alpha = 12.5;
  c.use_rslora = true;
  EXPECT_EQ(c.to_json()["lora_alpha"], Json(12.5));
  EXPECT_EQ(c.to_json()["use_rslora"], Json(true));
}

// Found by fuzz_peft_adapter_config: libstdc++'s regex compiler overflows (undefined behaviour)
// on a huge repetition count; such patterns are refused before std::regex sees them.
TEST(PeftAdapter, RegexWithHugeRepetitionCountsIsRefused) {
  Json j = {{"peft_type", "LORA"}, {"r", 8}, {"lora_alpha", 16}, {"target_modules", ".*\\.(q_proj){7777777777777777777}"}};
  EXPECT_FT_ERROR(io::parse_peft_adapter_config(j, "a/adapter_config.json"), "a repetition count");
  j["target_modules"] = ".*(q|v)_proj{1,2000}";
  EXPECT_FT_ERROR(io::parse_peft_adapter_config(j, "a/adapter_config.json"), "is above 1000");
  j["target_modules"] = "(q)_proj\\77777777777777777777";
  EXPECT_FT_ERROR(io::parse_peft_adapter_config(j, "a/adapter_config.json"), "back-reference number");
  j["target_modules"] = std::string(2000, 'a');
  EXPECT_FT_ERROR(io::parse_peft_adapter_config(j, "a/adapter_config.json"), "at most 1024");
  j["target_modules"] = ".*\\{12345\\}.*(q|v)_proj{1,3}";  // escaped braces are literal
  EXPECT_NO_THROW(io::parse_peft_adapter_config(j, "a/adapter_config.json"));
}

TEST(PeftAdapter, RoundTrip) {
  test::TempDir dir;
  PeftAdapterConfig c = config_with({"q_proj", "down_proj"});
  c.use_rslora = true;
  write_peft_adapter(dir.path(), c, two_modules());
  PeftAdapter a = read_peft_adapter(dir.path());
  EXPECT_EQ(a.config.r, 2);
  EXPECT_EQ(a.config.lora_alpha, 16);
  EXPECT_DOUBLE_EQ(a.config.lora_dropout, 0.05);
  EXPECT_EQ(a.config.target_modules.names, (std::vector<std::string>{"q_proj", "down_proj"}));
  EXPECT_TRUE(a.config.use_rslora);
  EXPECT_EQ(a.config.base_model_name_or_path, "meta-llama/Llama-2-7b-hf");
  EXPECT_EQ(a.weights_path, dir.file("adapter_model.safetensors"));
  auto expected = two_modules();
  ASSERT_EQ(a.tensors.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(a.tensors[i].first, expected[i].first);
    EXPECT_EQ(a.tensors[i].second.scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::equal(a.tensors[i].second, expected[i].second.to(torch::kFloat))) << expected[i].first;
  }
}

TEST(PeftAdapter, ReadsKeysWithoutThePrefixAndHalfPrecision) {
  test::TempDir dir;
  write_safetensors(dir.file("adapter_model.safetensors"),
                    {{"model.layers.0.self_attn.q_proj.lora_A.weight", torch::ones({2, 4}, torch::kHalf)},
                     {"model.layers.0.self_attn.q_proj.lora_B.weight", torch::ones({3, 2}, torch::kBFloat16)}});
  write_file_atomic(dir.file("adapter_config.json"), R"({"peft_type": "LORA", "target_modules": "all-linear"})");
  PeftAdapter a = read_peft_adapter(dir.path());
  EXPECT_EQ(a.tensors[0].first, "model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(a.tensors[1].second.scalar_type(), torch::kFloat);
  EXPECT_TRUE(a.config.target_modules.all_linear());
  EXPECT_EQ(a.config.r, 8);           // PEFT's defaults
  EXPECT_EQ(a.config.lora_alpha, 8);
  EXPECT_EQ(a.config.lora_dropout, 0);
  EXPECT_FALSE(a.config.use_rslora);
}

TEST(PeftAdapter, ScaleAndTargetMatching) {
  PeftAdapterConfig c = config_with({"q_proj"});
  c.r = 16;
  c.lora_alpha = 32;
  EXPECT_DOUBLE_EQ(c.scale(), 2.0);
  c.use_rslora = true;
  EXPECT_DOUBLE_EQ(c.scale(), 8.0);

  LoraTargets names{{"q_proj", "mlp.up_proj"}, ""};
  EXPECT_TRUE(names.matches("model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(names.matches("model.layers.3.mlp.up_proj"));
  EXPECT_FALSE(names.matches("model.layers.0.self_attn.xq_proj"));  // a name matches whole components
  EXPECT_FALSE(names.matches("model.layers.0.self_attn.k_proj"));
  LoraTargets all{{"all-linear"}, ""};
  EXPECT_TRUE(all.matches("model.layers.0.mlp.gate_proj"));
  EXPECT_FALSE(all.matches("lm_head"));
  LoraTargets regex{{}, R"(.*layers\.[0-2]\.self_attn\.(q|v)_proj)"};
  EXPECT_TRUE(regex.matches("model.layers.2.self_attn.v_proj"));
  EXPECT_FALSE(regex.matches("model.layers.3.self_attn.v_proj"));
  EXPECT_FALSE(LoraTargets({{}, "q_proj"}).matches("model.layers.0.self_attn.q_proj"));  // re.fullmatch
  EXPECT_EQ(regex.describe(), R"(regex '.*layers\.[0-2]\.self_attn\.(q|v)_proj')");
  EXPECT_EQ(names.describe(), "q_proj, mlp.up_proj");
}

TEST(PeftAdapter, ConfigErrorsNameTheFileAndKey) {
  auto parse = [](const std::string& text) { return parse_peft_adapter_config(parse_json(text, "t"), "A/adapter_config.json"); };
  const std::string targets = R"("target_modules": ["q_proj"])";
  EXPECT_FT_ERROR(parse(R"({"peft_type": "IA3", )" + targets + "}"),
                  "A/adapter_config.json: peft_type: expected \"LORA\", got \"IA3\" (ft applies only LoRA adapters)");
  EXPECT_FT_ERROR(parse("{" + targets + "}"), "A/adapter_config.json: missing key \"peft_type\" (expected \"LORA\")");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "use_dora": true, )" + targets + "}"),
                  "A/adapter_config.json: use_dora: DoRA adapters are not supported (expected false, got true)");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "bias": "all", )" + targets + "}"),
                  "A/adapter_config.json: bias: expected \"none\", got \"all\" (adapters that train biases are not supported)");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "fan_in_fan_out": true, )" + targets + "}"),
                  "A/adapter_config.json: fan_in_fan_out: expected false, got true");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "modules_to_save": ["lm_head"], )" + targets + "}"),
                  "A/adapter_config.json: modules_to_save: expected null, got an array (adapters carrying full copies of "
                  "modules are not supported)");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "rank_pattern": {"q_proj": 16}, )" + targets + "}"),
                  "A/adapter_config.json: rank_pattern: expected null or empty, got an object (ft applies one rank and "
                  "alpha to every targeted module)");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "layers_to_transform": [0, 1], )" + targets + "}"),
                  "A/adapter_config.json: layers_to_transform: expected null or empty");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA"})"),
                  "A/adapter_config.json: missing key \"target_modules\" (expected a list of module names, \"all-linear\" "
                  "or a regex)");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "target_modules": []})"),
                  "A/adapter_config.json: target_modules: expected a non-empty list of module names or a string, got");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "target_modules": [3]})"),
                  "A/adapter_config.json: target_modules: expected module names (strings), got 3");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "target_modules": "(q_proj"})"),
                  "A/adapter_config.json: target_modules: \"(q_proj\" is not a valid regular expression");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "r": 0, )" + targets + "}"),
                  "A/adapter_config.json: r: expected a positive integer, got 0");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "lora_alpha": "16", )" + targets + "}"),
                  "A/adapter_config.json: lora_alpha: expected a positive number, got \"16\"");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "lora_dropout": 1.5, )" + targets + "}"),
                  "A/adapter_config.json: lora_dropout: expected a number in [0, 1), got 1.5");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "use_rslora": "yes", )" + targets + "}"),
                  "A/adapter_config.json: use_rslora: expected true or false, got \"yes\"");
  // LoRA variants of PEFT 0.21 that loaded silently and computed something else (interop tests),
  // or failed on the first check with a message that did not name them.
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "alora_invocation_tokens": [5, 6], )" + targets + "}"),
                  "A/adapter_config.json: alora_invocation_tokens: expected null or empty, got an array (this LoRA "
                  "variant is not supported");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "layer_replication": [[1, 2], [0, 1]], )" + targets + "}"),
                  "A/adapter_config.json: layer_replication: expected null or empty");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "use_bdlora": {"nblocks": 2}, )" + targets + "}"),
                  "A/adapter_config.json: use_bdlora: expected null or false");
  EXPECT_FT_ERROR(parse(R"({"peft_type": "LORA", "target_modules": [], "target_parameters": ["mlp.experts.w"]})"),
                  "A/adapter_config.json: target_parameters: expected null or empty");
  // What PEFT itself writes by default passes: empty patterns, null modules_to_save, extra keys.
  PeftAdapterConfig ok = parse(R"({"peft_type": "LORA", "rank_pattern": {}, "alpha_pattern": {},
      "modules_to_save": null, "layers_to_transform": null, "init_lora_weights": true, "revision": null,
      "use_dora": false, "bias": "none", "fan_in_fan_out": false, "task_type": "CAUSAL_LM",
      "alora_invocation_tokens": null, "layer_replication": null, "use_bdlora": null, "trainable_token_indices": null,
      "arrow_config": null, )" + targets + "}");
  EXPECT_EQ(ok.target_modules.names, std::vector<std::string>{"q_proj"});
}

TEST(PeftAdapter, FolderAndTensorErrors) {
  test::TempDir dir;
  EXPECT_FT_ERROR(read_peft_adapter(dir.file("nope")), "nope: not found or not a folder (expected a PEFT adapter folder");
  EXPECT_FT_ERROR(read_peft_adapter(dir.path()), "adapter_config.json: not found (");
  write_file_atomic(dir.file("adapter_config.json"), R"({"peft_type": "LORA", "target_modules": ["q_proj"]})");
  EXPECT_FT_ERROR(read_peft_adapter(dir.path()), dir.file("adapter_model.safetensors") + ": not found");
  write_file_atomic(dir.file("adapter_model.bin"), "pickle");
  EXPECT_FT_ERROR(read_peft_adapter(dir.path()),
                  "adapter_model.safetensors: not found (this adapter is saved as adapter_model.bin, a pickle; save it "
                  "with safe_serialization=True)");

  auto with_tensors = [&](const NamedTensors& tensors) {
    write_safetensors(dir.file("adapter_model.safetensors"), tensors);
    return read_peft_adapter(dir.path());
  };
  const std::string a = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight";
  EXPECT_FT_ERROR(with_tensors({{"base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight", torch::ones({2, 4})}}),
                  "adapter_model.safetensors: tensor 'base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight' "
                  "carries an adapter name; expected PEFT's saved form, which ends in .lora_A.weight or .lora_B.weight");
  EXPECT_FT_ERROR(with_tensors({{"base_model.model.model.layers.0.self_attn.q_proj.weight", torch::ones({2, 4})}}),
                  "tensor 'base_model.model.model.layers.0.self_attn.q_proj.weight' is not a LoRA weight (expected names "
                  "ending in .lora_A.weight or .lora_B.weight)");
  EXPECT_FT_ERROR(with_tensors({{"base_model.model.model.layers.0.self_attn.q_proj.lora_magnitude_vector", torch::ones({4})}}),
                  "is a DoRA magnitude; DoRA adapters are not supported");
  EXPECT_FT_ERROR(with_tensors({{"base_model.model.model.embed_tokens.lora_embedding_A", torch::ones({2, 4})}}),
                  "is an embedding LoRA weight; only LoRA on linear layers is supported");
  EXPECT_FT_ERROR(with_tensors({{a, torch::ones({2, 4})}, {"model.layers.0.self_attn.q_proj.lora_A.weight", torch::ones({2, 4})}}),
                  "tensor 'model.layers.0.self_attn.q_proj.lora_A.weight' appears twice (with and without the "
                  "'base_model.model.' prefix)");
  EXPECT_FT_ERROR(with_tensors({{a, torch::ones({8})}}), "tensor '" + a + "' has 1 dimensions; expected a matrix");
  EXPECT_FT_ERROR(with_tensors({{a, torch::ones({2, 4}, torch::kInt)}}),
                  "tensor '" + a + "' has dtype I32; expected F32, F16 or BF16");
  EXPECT_FT_ERROR(with_tensors({}), "adapter_model.safetensors: holds no tensors (expected lora_A / lora_B weights)");
}

}  // namespace
}  // namespace ft::io
