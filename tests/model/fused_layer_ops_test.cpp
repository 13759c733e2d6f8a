// The fused layer operations (model/fused_layer_ops.h) against the ATen chains they replace, in
// forward and backward: fp32 on the CPU (the raw loops) within 1e-6 of the largest entry, bf16
// (the generic path) within bf16's rounding (SwiGLU's and the attention softmax's: the same
// bits); gradients for every input, also a gradient that arrives non-contiguous, as the attention
// hands it to the rotary embedding. The RMSNorm weight's gradient is the same bits with 1 and 2
// threads. And the modules in training mode (fused) against evaluation mode (unfused): a decoder
// layer with LoRA, its output and every gradient.
//
// Tolerance: each fused loop rounds the same operations in the same order as ATen except the sums
// (RMSNorm's mean of squares, softmax's sum of exponentials and the backwards' row dot products,
// in double here) and exp (a
// polynomial within about 1 ulp, as LibTorch's vectorized exp): a few fp32 roundings, 2^-24 ≈
// 6e-8 each, relative to the largest entry. Measured: at most about 3e-7.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>
#include <limits>
#include <torch/torch.h>

#include "model/attention.h"
#include "model/decoder_layer.h"
#include "model/fused_layer_ops.h"
#include "model/llama_model.h"
#include "model/lora.h"
#include "model/lora_branch.h"
#include "model/rotary_embedding.h"
#include "util/memory_counter.h"

namespace ft::model {
namespace {

double relative_difference(const torch::Tensor& a, const torch::Tensor& b) {
  const auto x = a.to(torch::kDouble), y = b.to(torch::kDouble);
  return ((x - y).abs().max() / y.abs().max().clamp_min(1e-30)).item<double>();
}

using Op = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

// Output and gradients of every input of `op`, for the incoming gradient `dy`.
std::vector<torch::Tensor> run(const Op& op, const std::vector<torch::Tensor>& inputs, const torch::Tensor& dy) {
  std::vector<torch::Tensor> leaves;
  for (const auto& t : inputs) leaves.push_back(t.detach().clone().requires_grad_(true));
  const torch::Tensor y = op(leaves);
  y.backward(dy);
  std::vector<torch::Tensor> out{y.detach()};
  for (const auto& l : leaves) out.push_back(l.grad());
  return out;
}

void expect_close(const Op& fused, const Op& reference, const std::vector<torch::Tensor>& inputs,
                  const torch::Tensor& dy, double tolerance, const std::string& what) {
  const auto a = run(fused, inputs, dy), b = run(reference, inputs, dy);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(what + (i == 0 ? ": output" : ": gradient of input " + std::to_string(i - 1)));
    ASSERT_TRUE(a[i].defined() && b[i].defined());
    EXPECT_EQ(a[i].scalar_type(), b[i].scalar_type());
    EXPECT_EQ(a[i].sizes(), b[i].sizes());
    const double d = relative_difference(a[i], b[i]);
    EXPECT_LE(d, tolerance);
    std::printf("%-28s %-22s %.2e\n", what.c_str(), i == 0 ? "output" : ("grad " + std::to_string(i - 1)).c_str(), d);
  }
}

torch::Tensor unfused_rms_norm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  auto h = x.to(torch::kFloat);
  h = h * torch::rsqrt(h.pow(2).mean(-1, true) + eps);
  return w * h.to(x.scalar_type());
}

TEST(FusedLayerOps, RmsNormEqualsTheUnfusedChain) {
  torch::manual_seed(1);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const double tolerance = dtype == torch::kFloat ? 1e-6 : 2e-2;
    const auto x = (torch::randn({3, 37, 72}) * 3).to(dtype), w = (1 + 0.1 * torch::randn({72})).to(dtype);
    const auto dy = torch::randn({3, 37, 72}).to(dtype);
    expect_close([](const auto& in) { return fused_rms_norm(in[0], in[1], 1e-5); },
                 [](const auto& in) { return unfused_rms_norm(in[0], in[1], 1e-5); }, {x, w}, dy, tolerance,
                 std::string("rms_norm ") + c10::toString(dtype));
  }
}

TEST(FusedLayerOps, RmsNormWeightGradientIsTheSameWithAnyThreadCount) {
  torch::manual_seed(2);
  const auto x = torch::randn({300, 64}), w = torch::randn({64}), dy = torch::randn({300, 64});
  const int threads = at::get_num_threads();
  std::vector<torch::Tensor> grads;
  for (const int n : {1, 2}) {
    at::set_num_threads(n);
    grads.push_back(run([](const auto& in) { return fused_rms_norm(in[0], in[1], 1e-6); }, {x, w}, dy)[2]);
  }
  at::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(grads[0], grads[1]));
}

TEST(FusedLayerOps, SwigluEqualsSiluTimesUp) {
  torch::manual_seed(3);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    // bf16 runs the unfused chain's own operations, forward and backward: the same bits.
    const double tolerance = dtype == torch::kFloat ? 1e-6 : 0.0;
    // Wide range: exp's clamp (|g| > 87) and both tails of the sigmoid.
    auto g = torch::randn({2, 33, 50}) * 4;
    g.view({-1}).narrow(0, 0, 4).copy_(torch::tensor({-120.f, -88.f, 90.f, 150.f}));
    const auto u = torch::randn({2, 33, 50}).to(dtype), dy = torch::randn({2, 33, 50}).to(dtype);
    expect_close([](const auto& in) { return fused_swiglu(in[0], in[1]); },
                 [](const auto& in) { return torch::silu(in[0]) * in[1]; }, {g.to(dtype), u}, dy, tolerance,
                 std::string("swiglu ") + c10::toString(dtype));
  }
}

TEST(FusedLayerOps, RotaryEqualsRotateHalfWithAGradientThatIsNotContiguous) {
  torch::manual_seed(4);
  io::LlamaConfig c;
  c.head_dim = 16;
  c.rope_theta = 10000;
  const RotaryEmbedding rope(c);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const double tolerance = dtype == torch::kFloat ? 1e-6 : 2e-2;
    for (const std::int64_t batch_positions : {1, 2}) {  // cos/sin shared by the batch, or per row
      const auto positions = torch::arange(11).repeat({batch_positions, 1}) + torch::arange(batch_positions).unsqueeze(1);
      auto [cos, sin] = rope.cos_sin(positions, dtype);
      const auto x = torch::randn({2, 11, 3, 16}).to(dtype);
      // The attention's gradient comes back through transpose(1, 2): [B,T,H,hd] with the heads outermost.
      const auto dy = torch::randn({2, 3, 11, 16}).to(dtype).transpose(1, 2);
      const torch::Tensor cs = cos, sn = sin;
      expect_close([&](const auto& in) { return fused_rotary(in[0], cs, sn); },
                   [&](const auto& in) {
                     auto q = in[0].transpose(1, 2);
                     return apply_rotary(q, q, cs, sn).first.transpose(1, 2);
                   },
                   {x}, dy, tolerance, std::string("rotary ") + c10::toString(dtype));
    }
  }
}

io::LlamaConfig fused_test_config() {
  io::LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 12;
  c.max_position_embeddings = 64;
  return c;
}

// The LoRA branch (model/lora_branch.h) against PEFT's chain of separate operations, in fp32 and
// bf16, every input's gradient: in fp32 within a few roundings of the sums (the same products,
// summed maybe in another order), in bf16 within its rounding of the result; and what it keeps
// for backward: the input itself, not an fp32 copy of it.
torch::Tensor unfused_lora(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& a,
                           const torch::Tensor& b, double scale) {
  const auto h = x.to(torch::kFloat);
  const auto delta = torch::nn::functional::linear(torch::nn::functional::linear(h, a), b);
  return (y + delta * scale).to(x.scalar_type());
}

// The attention's scale, bias and softmax: a causal bias shared by the batch, and one per row
// with packed segments and padding (seg -1: a query that may attend to nothing gets a uniform
// average, as unfused). bf16 runs the unfused chain's operations: the same bits.
TEST(FusedLayerOps, AttentionSoftmaxEqualsScaleBiasSoftmax) {
  torch::manual_seed(5);
  const std::int64_t b = 2, heads = 3, t = 37;
  const double scale = 1.0 / std::sqrt(48.0);
  const auto segments = torch::tensor({0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2,
                                       3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, -1, -1, -1, -1, -1}, torch::kLong);
  const torch::Tensor packed = torch::stack({segments, torch::zeros({t}, torch::kLong)});
  for (const torch::Tensor& bias : {make_attention_bias(t, 0, {}, torch::kCPU, torch::kFloat, 0),
                                    make_attention_bias(t, 0, packed, torch::kCPU, torch::kFloat, 0)}) {
    for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
      const auto scores = (torch::randn({b, heads, t, t}) * 6).to(dtype);
      const auto dy = torch::randn({b, heads, t, t}).to(dtype);
      const std::string what = std::string("softmax, bias ") + (bias.size(0) == 1 ? "shared " : "per row ") +
                               c10::toString(dtype);
      expect_close([&](const auto& in) { return fused_attention_softmax(in[0], bias, scale); },
                   [&](const auto& in) {
                     return torch::softmax((in[0] * scale).to(torch::kFloat) + bias, -1).to(dtype);
                   },
                   {scores}, dy, dtype == torch::kFloat ? 1e-6 : 0.0, what);
      // Masked keys weigh exactly 0 (not a denormal, which would slow the product with v), except
      // in a padding query's row, where every key is masked.
      const auto probs = fused_attention_softmax(scores, bias, scale).to(torch::kFloat);
      const auto masked = (bias < -1).logical_and((bias > -1).any(-1, /*keepdim=*/true));
      ASSERT_GT(masked.sum().item<std::int64_t>(), 0);
      EXPECT_TRUE(probs.masked_select(masked.expand_as(probs)).eq(0).all().item<bool>()) << what;
    }
  }
}

// A NaN or +inf score makes its row NaN, as ATen's softmax does (the raw loop's exp would clamp
// them to finite values).
TEST(FusedLayerOps, AttentionSoftmaxKeepsNanAndInfinityAsTheUnfusedChain) {
  torch::manual_seed(6);
  const auto scores = torch::randn({1, 2, 5, 5});
  scores[0][0][1][2] = std::numeric_limits<float>::quiet_NaN();  // a masked key: NaN all the same
  scores[0][1][3][0] = std::numeric_limits<float>::infinity();
  const auto bias = make_attention_bias(5, 0, {}, torch::kCPU, torch::kFloat, 0);
  const auto fused = fused_attention_softmax(scores, bias, 0.5);
  const auto unfused = torch::softmax(scores * 0.5 + bias, -1);
  EXPECT_EQ(unfused.isnan().sum().item<std::int64_t>(), 10);
  EXPECT_TRUE(torch::equal(fused.isnan(), unfused.isnan()));
  EXPECT_LT((fused - unfused).nan_to_num(0).abs().max().item<double>(), 1e-6);
}

TEST(FusedLayerOps, LoraBranchEqualsPeftsChain) {
  torch::manual_seed(11);
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    const auto x = torch::randn({2, 7, 24}).to(dtype), y = torch::randn({2, 7, 20}).to(dtype);
    const auto a = torch::randn({4, 24}) * 0.3, b = torch::randn({20, 4}) * 0.3;
    const auto dy = torch::randn({2, 7, 20}).to(dtype);
    expect_close([](const std::vector<torch::Tensor>& t) { return lora_branch(t[0], t[1], t[2], t[3], 2.5); },
                 [](const std::vector<torch::Tensor>& t) { return unfused_lora(t[0], t[1], t[2], t[3], 2.5); },
                 {x, y, a, b}, dy, dtype == torch::kFloat ? 1e-6 : 4e-3, dtype == torch::kFloat ? "lora fp32" : "lora bf16");
  }
}

// Bytes alive after `op` ran forward (its output and what autograd keeps), less the output.
std::int64_t kept_for_backward(const Op& op, const std::vector<torch::Tensor>& inputs) {
  const std::int64_t before = cpu_allocated_bytes();
  const torch::Tensor out = op(inputs);
  return cpu_allocated_bytes() - before - static_cast<std::int64_t>(out.numel() * out.element_size());
}

TEST(FusedLayerOps, LoraBranchKeepsItsInputNotAnFp32Copy) {
  install_cpu_memory_counter();
  const std::int64_t rows = 64, in = 256, out = 128, r = 8;
  const auto x = torch::randn({rows, in}).to(torch::kBFloat16).requires_grad_(true);
  const auto y = torch::randn({rows, out}).to(torch::kBFloat16).requires_grad_(true);
  const auto a = (torch::randn({r, in}) * 0.1).requires_grad_(true), b = (torch::randn({out, r}) * 0.1).requires_grad_(true);
  const std::vector<torch::Tensor> inputs{x, y, a, b};
  const std::int64_t fused = kept_for_backward([](const auto& t) { return lora_branch(t[0], t[1], t[2], t[3], 2.0); }, inputs);
  const std::int64_t peft = kept_for_backward([](const auto& t) { return unfused_lora(t[0], t[1], t[2], t[3], 2.0); }, inputs);
  EXPECT_EQ(fused, rows * r * 4);             // the rank-r hidden only: x is kept as it is
  EXPECT_GE(peft, fused + rows * in * 4);     // PEFT's chain keeps x's fp32 copy too
  std::printf("kept for backward: lora_branch %lld bytes, PEFT's chain %lld\n", (long long)fused, (long long)peft);
}

// down_proj's branch keeps gate and up (which SwiGLU's backward keeps anyway) instead of their
// product, and remakes the product in backward: the same bits in every gradient, in fp32 and
// bf16, and the product's bytes less kept for backward.
TEST(FusedLayerOps, DownProjectionBranchRemakesItsInputBitForBit) {
  install_cpu_memory_counter();
  torch::manual_seed(12);
  const std::int64_t rows = 32, in = 96, out = 40, r = 4;
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto gate = torch::randn({2, rows / 2, in}).to(dtype), up = torch::randn({2, rows / 2, in}).to(dtype);
    const auto y = torch::randn({2, rows / 2, out}).to(dtype);
    const auto a = torch::randn({r, in}) * 0.3, b = torch::randn({out, r}) * 0.3;
    const auto dy = torch::randn({2, rows / 2, out}).to(dtype);
    const Op kept_input = [](const std::vector<torch::Tensor>& t) {
      return lora_branch(fused_swiglu(t[0], t[1]), t[2], t[3], t[4], 2.5);
    };
    const Op remade_input = [](const std::vector<torch::Tensor>& t) {
      return lora_branch_of_swiglu(fused_swiglu(t[0], t[1]), t[0], t[1], t[2], t[3], t[4], 2.5);
    };
    const auto expected = run(kept_input, {gate, up, y, a, b}, dy);
    const auto remade = run(remade_input, {gate, up, y, a, b}, dy);
    ASSERT_EQ(expected.size(), remade.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      ASSERT_TRUE(expected[i].defined() && remade[i].defined()) << i;
      EXPECT_TRUE(torch::equal(expected[i], remade[i])) << (i == 0 ? "output" : "gradient of input " + std::to_string(i - 1));
    }
    std::vector<torch::Tensor> leaves;
    for (const auto& t : {gate, up, y, a, b}) leaves.push_back(t.detach().clone().requires_grad_(true));
    const std::int64_t product = rows * in * static_cast<std::int64_t>(c10::elementSize(dtype));
    EXPECT_EQ(kept_for_backward(kept_input, leaves) - kept_for_backward(remade_input, leaves), product);
    EXPECT_EQ(kept_for_backward(remade_input, leaves), rows * r * 4);  // the rank-r hidden only
  }
}

// A whole model with LoRA on every projection: training mode (every fused operation, LoRA's
// addmm) against evaluation mode (the unfused chains), logits and every gradient.
TEST(FusedLayerOps, ATrainingModeModelEqualsTheEvaluationModeOne) {
  for (const bool lora : {false, true}) {
    SCOPED_TRACE(lora ? "LoRA" : "full");
    std::vector<torch::Tensor> logits, grads[2];
    for (const bool training : {true, false}) {
      LlamaForCausalLM model(fused_test_config(), torch::TensorOptions().dtype(torch::kFloat));
      init_weights(model, 7, 0.2);
      if (lora) {
        LoraOptions o;
        o.targets = io::LoraTargets{{"all-linear"}, ""};
        apply_lora(model, o, 3);
        torch::NoGradGuard no_grad;
        for (auto& [name, t] : lora_parameters(model)) t.normal_(0, 0.1);  // B is zero after init
      }
      model->train(training);
      torch::manual_seed(8);
      const auto ids = torch::randint(0, 64, {2, 19}, torch::kLong);
      const auto y = model(ids);
      (y * torch::randn(y.sizes())).sum().backward();
      logits.push_back(y.detach());
      for (const auto& p : model->parameters())
        if (p.requires_grad()) grads[training ? 0 : 1].push_back(p.grad());
    }
    EXPECT_LT(relative_difference(logits[0], logits[1]), 1e-6);
    ASSERT_EQ(grads[0].size(), grads[1].size());
    ASSERT_FALSE(grads[0].empty());
    for (std::size_t i = 0; i < grads[0].size(); ++i) EXPECT_LT(relative_difference(grads[0][i], grads[1][i]), 2e-6) << i;
  }
}

}  // namespace
}  // namespace ft::model
