// model_loader: HF folders load in any float dtype; a missing tensor or a shape config.json does
// not imply is an error naming the file and the tensor.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/safetensors.h"
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

}  // namespace
}  // namespace ft::model
