// model_loader: HF folders load in any float dtype; a missing tensor or a shape config.json does
// not imply is an error naming the file and the tensor. Model types: qwen2's q/k/v biases load,
// contradict no config, stay frozen (and dense) under LoRA and get gradients in full fine-tuning.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/safetensors.h"
#include "model/lora.h"
#include "model/model_loader.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft::model {
namespace {

// Copies the TinyStories folder, letting `edit` change the tensors and config.json.
std::string edited_copy(const test::TempDir& dir, const std::function<void(io::NamedTensors&, Json&)>& edit) {
  io::SafetensorsReader reader(test::data_path("stories260K/model.safetensors"));
  io::NamedTensors tensors;
  for (const auto& t : reader.tensors()) tensors.emplace_back(t.name, reader.load(t.name));
  Json config = parse_json_file(test::data_path("stories260K/config.json"));
  edit(tensors, config);
  io::write_safetensors(dir.file("model.safetensors"), tensors);
  write_file_atomic(dir.file("config.json"), config.dump(2));
  return dir.path();
}

TEST(Loader, NamesMatchHfKeys) {
  auto model = load_llama(test::data_path("stories260K"));
  auto params = model->named_parameters();
  EXPECT_EQ(params.size(), 47u);  // 48 stored tensors minus the tied lm_head
  EXPECT_TRUE(params.contains("model.layers.4.mlp.down_proj.weight"));
  EXPECT_TRUE(params.contains("model.norm.weight"));
  EXPECT_FALSE(params.contains("lm_head.weight"));
}

TEST(Loader, ConvertsDtypes) {
  auto fp32 = load_llama(test::data_path("stories260K"));
  for (auto dtype : {torch::kBFloat16, torch::kHalf}) {
    LoadOptions options;
    options.dtype = dtype;
    auto model = load_llama(test::data_path("stories260K"), options);
    auto w = model->named_parameters()["model.layers.0.self_attn.q_proj.weight"];
    EXPECT_EQ(w.scalar_type(), dtype);
    EXPECT_TRUE(torch::equal(w, fp32->named_parameters()["model.layers.0.self_attn.q_proj.weight"].to(dtype)));
    if (!compute_dtype_supported(dtype, torch::kCPU)) {
      EXPECT_FT_ERROR(check_compute_dtype(dtype, torch::kCPU, "--dtype"), "--dtype: this LibTorch cannot compute in Half");
      continue;
    }
    torch::NoGradGuard g;
    auto logits = model(torch::tensor({1, 403, 407}).unsqueeze(0));
    EXPECT_EQ(logits.scalar_type(), dtype);
    EXPECT_LT(test::max_abs_diff(logits, fp32(torch::tensor({1, 403, 407}).unsqueeze(0))), 0.25);
  }
}

TEST(Loader, UntiedModelUsesLmHead) {
  test::TempDir dir;
  auto path = edited_copy(dir, [](io::NamedTensors& t, Json& c) {
    c["tie_word_embeddings"] = false;
    for (auto& [name, tensor] : t)
      if (name == "lm_head.weight") tensor = tensor * 2;
  });
  auto model = load_llama(path);
  auto tied = load_llama(test::data_path("stories260K"));
  torch::NoGradGuard g;
  auto ids = torch::tensor({1, 403}).unsqueeze(0);
  EXPECT_LT(test::max_abs_diff(model(ids), tied(ids) * 2), 1e-4);
}

TEST(Loader, MissingTensorIsAnError) {
  test::TempDir dir;
  auto path = edited_copy(dir, [](io::NamedTensors& t, Json&) {
    t.erase(std::remove_if(t.begin(), t.end(), [](auto& p) { return p.first == "model.layers.3.mlp.up_proj.weight"; }),
            t.end());
  });
  EXPECT_FT_ERROR(load_llama(path), "missing tensor 'model.layers.3.mlp.up_proj.weight'");
}

TEST(Loader, ShapeThatConfigDoesNotImplyIsAnError) {
  test::TempDir dir;
  auto path = edited_copy(dir, [](io::NamedTensors&, Json& c) { c["intermediate_size"] = 128; });
  EXPECT_FT_ERROR(load_llama(path), "config.json: intermediate_size = 128 but " + path +
                                        "/model.safetensors has 'model.layers.4.mlp.gate_proj.weight' of shape [172, 64]");
  auto path2 = edited_copy(dir, [](io::NamedTensors&, Json& c) { c["num_hidden_layers"] = 6; });
  EXPECT_FT_ERROR(load_llama(path2), "missing tensor 'model.layers.5.");
}

// config.json sizes every allocation: a hostile or mismatched one is refused by comparing its
// dimensions with the tensors the files hold, before anything is allocated (these would ask for
// terabytes, or overflow).
TEST(Loader, HugeConfigDimensionsAreRefusedBeforeAllocating) {
  test::TempDir dir;
  const std::int64_t huge = std::int64_t{1} << 40;
  EXPECT_FT_ERROR(load_llama(edited_copy(dir, [&](io::NamedTensors&, Json& c) { c["intermediate_size"] = huge; })),
                  "intermediate_size = 1099511627776 but");
  EXPECT_FT_ERROR(load_llama(edited_copy(dir, [&](io::NamedTensors&, Json& c) { c["vocab_size"] = huge; })),
                  "vocab_size = 1099511627776 but");
  EXPECT_FT_ERROR(load_llama(edited_copy(dir, [&](io::NamedTensors&, Json& c) { c["head_dim"] = huge; })),
                  "num_attention_heads * head_dim = ");
  EXPECT_FT_ERROR(load_llama(edited_copy(dir, [&](io::NamedTensors&, Json& c) {
                    c["head_dim"] = std::int64_t{1} << 62;  // times 8 heads overflows int64
                  })),
                  "num_attention_heads * head_dim = -1 but");
  EXPECT_FT_ERROR(load_llama(edited_copy(dir, [&](io::NamedTensors&, Json& c) { c["num_hidden_layers"] = 3; })),
                  "num_hidden_layers = 3 but");
}

TEST(Loader, IntegerWeightIsAnError) {
  test::TempDir dir;
  auto path = edited_copy(dir, [](io::NamedTensors& t, Json&) {
    for (auto& [name, tensor] : t)
      if (name == "model.norm.weight") tensor = tensor.to(torch::kInt);
  });
  EXPECT_FT_ERROR(load_llama(path), "tensor 'model.norm.weight' has dtype I32; expected F32, F16 or BF16");
}


// qwen2: stories260K's weights with model_type qwen2 and seeded non-zero q/k/v biases.
std::string qwen2_copy(const test::TempDir& dir) {
  return edited_copy(dir, [](io::NamedTensors& t, Json& c) {
    c["model_type"] = "qwen2";
    auto gen = at::detail::createCPUGenerator(7);
    for (int layer = 0; layer < 5; ++layer)
      for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
        const std::int64_t out = std::string(proj) == "q_proj" ? 64 : 32;  // 8 heads / 4 KV heads of 8
        t.emplace_back("model.layers." + std::to_string(layer) + ".self_attn." + proj + ".bias",
                       at::normal(0.0, 0.5, {out}, gen, torch::TensorOptions().dtype(torch::kFloat)));
      }
  });
}

TEST(ModelTypes, Qwen2BiasesLoadAndChangeTheLogits) {
  test::TempDir dir;
  const std::string path = qwen2_copy(dir);
  auto model = load_llama(path);
  auto params = model->named_parameters();
  EXPECT_EQ(params.size(), 47u + 15u);
  io::SafetensorsReader reader(path + "/model.safetensors");
  const std::string key = "model.layers.2.self_attn.k_proj.bias";
  ASSERT_TRUE(params.contains(key));
  EXPECT_TRUE(torch::equal(params[key], reader.load(key)));
  EXPECT_FALSE(params.contains("model.layers.2.self_attn.o_proj.bias"));
  std::int64_t count = 0;
  for (const auto& p : params) count += p.value().numel();
  EXPECT_EQ(count, model->config().num_parameters());
  torch::NoGradGuard g;
  auto ids = torch::tensor({1, 403, 407, 12}).unsqueeze(0);
  auto plain = load_llama(test::data_path("stories260K"));
  EXPECT_GT(test::max_abs_diff(model(ids), plain(ids)), 1e-2);  // the biases are used
  // Zero biases give the plain model's logits.
  for (auto& p : model->named_parameters())
    if (p.key().find(".bias") != std::string::npos) p.value().zero_();
  EXPECT_LT(test::max_abs_diff(model(ids), plain(ids)), 1e-5);
}

TEST(ModelTypes, BiasesThatContradictTheConfigAreErrors) {
  test::TempDir dir;
  // qwen2 weights under a llama config.
  auto llama = edited_copy(dir, [](io::NamedTensors& t, Json& c) {
    c["model_type"] = "llama";
    t.emplace_back("model.layers.0.self_attn.q_proj.bias", torch::zeros({64}));
  });
  EXPECT_FT_ERROR(load_llama(llama), "config.json: attention_bias false (model_type llama) but " + llama +
                                         " has a tensor 'model.layers.0.self_attn.q_proj.bias'; is this the config of these weights?");
  // A qwen2 config over weights without biases.
  test::TempDir dir2;
  auto no_bias = edited_copy(dir2, [](io::NamedTensors&, Json& c) { c["model_type"] = "qwen2"; });
  EXPECT_FT_ERROR(load_llama(no_bias), "config.json: model_type qwen2 has a bias on q_proj but " + no_bias +
                                           " has no tensor 'model.layers.0.self_attn.q_proj.bias'");
  // A bias of the wrong length, and one missing in a later layer.
  test::TempDir dir3;
  auto wrong = edited_copy(dir3, [](io::NamedTensors& t, Json& c) {
    c["model_type"] = "qwen2";
    for (int layer = 0; layer < 5; ++layer)
      for (const char* proj : {"q_proj", "k_proj", "v_proj"})
        t.emplace_back("model.layers." + std::to_string(layer) + ".self_attn." + proj + ".bias",
                       torch::zeros({layer == 3 && std::string(proj) == "v_proj" ? 64 : (std::string(proj) == "q_proj" ? 64 : 32)}));
  });
  EXPECT_FT_ERROR(load_llama(wrong), "tensor 'model.layers.3.self_attn.v_proj.bias' has shape [64] but config.json implies [32]");
  test::TempDir dir4;
  auto missing = edited_copy(dir4, [](io::NamedTensors& t, Json& c) {
    c["model_type"] = "qwen2";
    for (const char* proj : {"q_proj", "k_proj", "v_proj"})
      t.emplace_back(std::string("model.layers.0.self_attn.") + proj + ".bias", torch::zeros({std::string(proj) == "q_proj" ? 64 : 32}));
  });
  EXPECT_FT_ERROR(load_llama(missing), "missing tensor 'model.layers.1.self_attn.q_proj.bias'");
}

// LoRA leaves the biases in the frozen base (also over a quantized base, where they stay dense);
// merging keeps them; full fine-tuning gives them gradients.
TEST(ModelTypes, Qwen2BiasesFrozenUnderLoraTrainedInFullFineTuning) {
  test::TempDir dir;
  const std::string path = qwen2_copy(dir);
  auto ids = torch::tensor({1, 403, 407, 12, 99}).unsqueeze(0);
  const std::string key = "model.layers.1.self_attn.q_proj.bias";
  {
    auto model = load_llama(path);
    LoraOptions options;
    options.targets = io::LoraTargets{{"all-linear"}, ""};
    apply_lora(model, options, 3);
    for (const auto& [name, p] : lora_parameters(model)) EXPECT_EQ(name.find(".bias"), std::string::npos) << name;
    auto params = model->named_parameters();
    ASSERT_TRUE(params.contains(key));
    EXPECT_FALSE(params[key].requires_grad());
    // B non-zero, so merging changes the weights; the merged model computes the same logits.
    {
      torch::NoGradGuard g;
      for (auto& [name, p] : lora_parameters(model))
        if (name.find("lora_B") != std::string::npos) p.normal_(0, 0.05);
    }
    torch::NoGradGuard g;
    model->eval();
    auto before = model(ids);
    const auto bias_before = params[key].clone();
    merge_lora(model);
    EXPECT_LT(test::max_abs_diff(model(ids), before), 1e-4);
    EXPECT_TRUE(torch::equal(model->named_parameters()[key], bias_before));
  }
  {
    LoadOptions load;
    load.quantize = Quantization::kInt8;
    auto model = load_llama(path, load);
    auto params = model->named_parameters();
    ASSERT_TRUE(params.contains(key));
    EXPECT_EQ(params[key].scalar_type(), torch::kFloat);
    EXPECT_FALSE(params.contains("model.layers.1.self_attn.q_proj.weight"));  // quantized
    torch::NoGradGuard g;
    auto with_biases = model(ids);
    for (auto& p : model->named_parameters())
      if (p.key().find(".bias") != std::string::npos) p.value().zero_();
    EXPECT_GT(test::max_abs_diff(model(ids), with_biases), 1e-2);  // the quantized layers add them
  }
  {
    auto model = load_llama(path);
    for (auto& p : model->parameters()) p.set_requires_grad(true);
    model->train();
    model(ids).pow(2).mean().backward();
    auto grad = model->named_parameters()[key].grad();
    ASSERT_TRUE(grad.defined());
    EXPECT_GT(grad.abs().max().item<double>(), 0);
  }
}

}  // namespace
}  // namespace ft::model
