// Each LLaMA layer against tests/data/layer_reference.json, made by an independent
// pure-PyTorch copy of HF transformers' modeling_llama.py (tests/reference/make_layer_reference.py).
// Same LibTorch kernels in fp32: agreement is expected to about 1e-6; 1e-5 leaves room for a
// different but equivalent order of operations.
#include <gtest/gtest.h>

#include <torch/version.h>

#include <limits>
#include <vector>

#include "model/attention.h"
#include "model/decoder_layer.h"
#include "model/mlp.h"
#include "model/rms_norm.h"
#include "model/rotary_embedding.h"
#include "test_support.h"

namespace ft::model {
namespace {

constexpr double kTolerance = 1e-5;

class LayerReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ref_ = new Json(parse_json_file(test::data_path("layer_reference.json"))); }
  static void TearDownTestSuite() { delete ref_; }

  static torch::Tensor tensor(const std::string& key) { return test::tensor_from_json((*ref_)[key]); }
  static torch::Tensor weight(const std::string& key) { return test::tensor_from_json((*ref_)["weights"][key]); }
  static io::LlamaConfig config() {
    const Json& c = (*ref_)["config"];
    io::LlamaConfig out;
    out.vocab_size = 32;
    out.num_hidden_layers = 1;
    out.hidden_size = c["hidden_size"];
    out.intermediate_size = c["intermediate_size"];
    out.num_attention_heads = c["num_attention_heads"];
    out.num_key_value_heads = c["num_key_value_heads"];
    out.head_dim = c["head_dim"];
    out.rms_norm_eps = c["rms_norm_eps"];
    out.rope_theta = c["rope_theta"];
    return out;
  }
  static torch::Tensor position_ids() {
    auto rows = (*ref_)["position_ids"].get<std::vector<std::vector<std::int64_t>>>();
    std::vector<std::int64_t> flat;
    for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    return torch::tensor(flat).reshape({static_cast<std::int64_t>(rows.size()), -1});
  }
  static void load_attention(Attention& attn) {
    torch::NoGradGuard g;
    for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"})
      attn->named_parameters()[std::string(p) + ".weight"].copy_(weight(p));
  }
  static void load_mlp(Mlp& mlp) {
    torch::NoGradGuard g;
    for (const char* p : {"gate_proj", "up_proj", "down_proj"})
      mlp->named_parameters()[std::string(p) + ".weight"].copy_(weight(p));
  }

  static Json* ref_;
};
Json* LayerReference::ref_ = nullptr;

const auto kFloat = torch::TensorOptions().dtype(torch::kFloat);

TEST_F(LayerReference, RMSNorm) {
  RMSNorm norm(16, 1e-5, kFloat);
  torch::NoGradGuard g;
  norm->weight.copy_(weight("input_layernorm"));
  EXPECT_LT(test::max_abs_diff(norm(tensor("x")), tensor("rms_norm_out")), kTolerance);
}

TEST_F(LayerReference, RotaryEmbedding) {
  RotaryEmbedding rope(config());
  EXPECT_LT(test::max_abs_diff(rope.inv_freq(), tensor("inv_freq")), 1e-9);
  auto [cos, sin] = rope.cos_sin(position_ids(), torch::kFloat);
  EXPECT_LT(test::max_abs_diff(cos, tensor("cos")), 1e-6);
  EXPECT_LT(test::max_abs_diff(sin, tensor("sin")), 1e-6);
  auto [q, k] = apply_rotary(tensor("q_in"), tensor("k_in"), tensor("cos"), tensor("sin"));
  EXPECT_LT(test::max_abs_diff(q, tensor("q_rot")), 1e-6);
  EXPECT_LT(test::max_abs_diff(k, tensor("k_rot")), 1e-6);
}

TEST_F(LayerReference, Llama3RopeScaling) {
  const Json& r = (*ref_)["llama3_inv_freq"];
  io::LlamaConfig c = config();
  c.head_dim = r["head_dim"];
  c.rope_theta = r["rope_theta"];
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = r["factor"];
  c.rope_scaling.low_freq_factor = r["low_freq_factor"];
  c.rope_scaling.high_freq_factor = r["high_freq_factor"];
  c.rope_scaling.original_max_position_embeddings = r["original_max_position_embeddings"];
  RotaryEmbedding rope(c);
  auto expected = torch::tensor(r["values"].get<std::vector<float>>());
  EXPECT_LT((rope.inv_freq() - expected).abs().div(expected.abs()).max().item<double>(), 1e-6);
}

// The attention kernels this LibTorch has: eager always, sdpa from 2.0.
std::vector<AttentionKernel> kernels() {
  std::vector<AttentionKernel> out{AttentionKernel::kEager};
  if (sdpa_available()) out.push_back(AttentionKernel::kSdpa);
  return out;
}

TEST_F(LayerReference, GroupedQueryAttention) {
  Attention attn(config(), 0, kFloat);
  load_attention(attn);
  torch::NoGradGuard g;
  auto x = tensor("rms_norm_out");
  for (AttentionKernel kernel : kernels()) {
    const auto mask = make_attention_mask(kernel, x.size(1), 0, torch::Tensor(), torch::kFloat, torch::kCPU);
    auto out = attn(x, tensor("cos"), tensor("sin"), mask, nullptr);
    EXPECT_LT(test::max_abs_diff(out, tensor("attention_out")), kTolerance) << attention_kernel_name(kernel);
  }
}

TEST_F(LayerReference, SwiGLU) {
  Mlp mlp(config(), kFloat);
  load_mlp(mlp);
  torch::NoGradGuard g;
  EXPECT_LT(test::max_abs_diff(mlp(tensor("mlp_in")), tensor("mlp_out")), kTolerance);
}

TEST_F(LayerReference, DecoderLayer) {
  DecoderLayer layer(config(), 0, kFloat);
  load_attention(layer->self_attn);
  load_mlp(layer->mlp);
  torch::NoGradGuard g;
  layer->input_layernorm->weight.copy_(weight("input_layernorm"));
  layer->post_attention_layernorm->weight.copy_(weight("post_attention_layernorm"));
  auto x = tensor("x");
  for (AttentionKernel kernel : kernels()) {
    const auto mask = make_attention_mask(kernel, x.size(1), 0, torch::Tensor(), torch::kFloat, torch::kCPU);
    auto out = layer(x, tensor("cos"), tensor("sin"), mask, nullptr);
    EXPECT_LT(test::max_abs_diff(out, tensor("layer_out")), kTolerance) << attention_kernel_name(kernel);
  }
}

TEST(AttentionBias, CausalSegmentsAndPadding) {
  // Two packed samples [0,0,1] and padding: token 2 sees only itself, the pad sees nothing.
  auto seg = torch::tensor({0, 0, 1, -1}).unsqueeze(0);
  auto bias = make_attention_bias(4, 0, seg, torch::kCPU).squeeze();
  auto allowed = bias.eq(0);
  auto expected = torch::tensor({1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0}).to(torch::kBool).reshape({4, 4});
  EXPECT_TRUE(torch::equal(allowed, expected)) << allowed;
  // With a cache of 3 positions, 2 new queries see everything up to themselves.
  auto cached = make_attention_bias(2, 3, torch::Tensor(), torch::kCPU).squeeze().eq(0);
  EXPECT_TRUE(torch::equal(cached, torch::tensor({1, 1, 1, 1, 0, 1, 1, 1, 1, 1}).to(torch::kBool).reshape({2, 5})));
  // In bf16 (the sdpa kernel's dtype) the masked value is bf16's lowest, finite.
  auto bf16 = make_attention_bias(2, 0, torch::Tensor(), torch::kCPU, torch::kBFloat16).squeeze();
  EXPECT_EQ(bf16.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::isfinite(bf16).all().item<bool>());
  EXPECT_EQ(bf16[0][1].item<double>(), static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest()));
}

TEST(AttentionBias, SlidingWindow) {
  // Window 2: query p sees keys p-1 and p (transformers: kv_idx > q_idx - sliding_window).
  auto allowed = make_attention_bias(4, 0, torch::Tensor(), torch::kCPU, torch::kFloat, 2).squeeze().eq(0);
  EXPECT_TRUE(torch::equal(allowed, torch::tensor({1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1})
                                        .to(torch::kBool).reshape({4, 4})))
      << allowed;
  // Over a cache of 3: the new queries at positions 3 and 4 see (1, 3] and (2, 4].
  auto cached = make_attention_bias(2, 3, torch::Tensor(), torch::kCPU, torch::kFloat, 2).squeeze().eq(0);
  EXPECT_TRUE(torch::equal(cached, torch::tensor({0, 0, 1, 1, 0, 0, 0, 0, 1, 1}).to(torch::kBool).reshape({2, 5})));
  // With segments: both restrictions.
  auto seg = make_attention_bias(4, 0, torch::tensor({{0, 0, 0, 1}}), torch::kCPU, torch::kFloat, 2).squeeze().eq(0);
  EXPECT_TRUE(torch::equal(seg, torch::tensor({1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 1}).to(torch::kBool).reshape({4, 4})));
  // A window covering every key changes nothing: eager gets the plain causal bias.
  auto wide = make_attention_mask(AttentionKernel::kEager, 4, 0, torch::Tensor(), torch::kFloat, torch::kCPU, 4);
  EXPECT_TRUE(torch::equal(wide.bias, make_attention_bias(4, 0, torch::Tensor(), torch::kCPU)));
  if (!sdpa_available()) return;
  // sdpa: plain causal (no tensor) while the window covers the keys, a bias once it does not.
  EXPECT_FALSE(make_attention_mask(AttentionKernel::kSdpa, 4, 0, torch::Tensor(), torch::kFloat, torch::kCPU, 4).bias.defined());
  EXPECT_FALSE(make_attention_mask(AttentionKernel::kSdpa, 1, 3, torch::Tensor(), torch::kFloat, torch::kCPU, 4).bias.defined());
  const auto narrow = make_attention_mask(AttentionKernel::kSdpa, 4, 0, torch::Tensor(), torch::kFloat, torch::kCPU, 3);
  ASSERT_TRUE(narrow.bias.defined());
  EXPECT_FALSE(narrow.causal);
  const auto decode = make_attention_mask(AttentionKernel::kSdpa, 1, 4, torch::Tensor(), torch::kFloat, torch::kCPU, 4);
  ASSERT_TRUE(decode.bias.defined());
  EXPECT_EQ(decode.bias.squeeze().eq(0).sum().item<std::int64_t>(), 4);
}

TEST(AttentionMask, SdpaGetsATensorOnlyWhenCausalityDoesNotSayItAll) {
  const auto none = torch::Tensor();
  if (!sdpa_available()) {
    EXPECT_FT_ERROR(parse_attention_kernel("sdpa", "model.attention"), "model.attention: sdpa needs LibTorch 2.0");
    EXPECT_EQ(parse_attention_kernel("auto", "model.attention"), AttentionKernel::kEager);
    GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no scaled_dot_product_attention";
  }
  EXPECT_EQ(parse_attention_kernel("auto", "x"), AttentionKernel::kSdpa);
  EXPECT_FT_ERROR(parse_attention_kernel("flash", "model.attention"), "model.attention: expected auto, sdpa or eager, got \"flash\"");
  const auto plain = make_attention_mask(AttentionKernel::kSdpa, 5, 0, none, torch::kFloat, torch::kCPU);
  EXPECT_TRUE(plain.causal);
  EXPECT_FALSE(plain.bias.defined());
  const auto decode = make_attention_mask(AttentionKernel::kSdpa, 1, 7, none, torch::kFloat, torch::kCPU);
  EXPECT_FALSE(decode.causal);
  EXPECT_FALSE(decode.bias.defined());
  const auto packed = make_attention_mask(AttentionKernel::kSdpa, 3, 0, torch::tensor({{0, 0, 1}}), torch::kBFloat16,
                                          torch::kCPU);
  ASSERT_TRUE(packed.bias.defined());
  EXPECT_EQ(packed.bias.scalar_type(), torch::kBFloat16);
  const auto chunk = make_attention_mask(AttentionKernel::kSdpa, 2, 3, none, torch::kFloat, torch::kCPU);
  ASSERT_TRUE(chunk.bias.defined());
  EXPECT_EQ(chunk.bias.sizes(), (std::vector<std::int64_t>{1, 1, 2, 5}));
  // eager always has its fp32 bias
  const auto eager = make_attention_mask(AttentionKernel::kEager, 5, 0, none, torch::kBFloat16, torch::kCPU);
  ASSERT_TRUE(eager.bias.defined());
  EXPECT_EQ(eager.bias.scalar_type(), torch::kFloat);
}

}  // namespace
}  // namespace ft::model
