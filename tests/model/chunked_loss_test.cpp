// The chunked output head + cross-entropy (model::chunked_causal_lm_loss) against the plain
// path (full logits, then causal_lm_loss): the same loss, target count and gradients for the
// hidden states and the output projection, over chunk sizes that divide the targets, do not,
// are one row or all of them; a tied embedding's gradient (lookup + head) and a frozen head;
// labels that are all ignored; bf16 as close to fp32 as the plain bf16 path is.
//
// Tolerances (fp32): both paths compute the same products and the same log-softmax per row; what
// differs is the order of sums: a chunk's matrix product blocks its rows differently, the
// log-sum-exp is max + log(sum(exp(x - max))) like log_softmax but rounded separately (on the CPU
// a raw loop: exp a polynomial within about 1 ulp, the sum in double), and the
// weight's gradient is summed chunk by chunk. Each of those is a few fp32 roundings (2^-24 ≈
// 6e-8) per term, accumulated over at most ~100 rows here: 2e-6 relative to the largest entry
// bounds it with room (measured: about 1e-7).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <torch/torch.h>

#include "model/causal_lm_loss.h"
#include "model/llama_model.h"

namespace ft::model {
namespace {

struct Result {
  double loss = 0;
  std::int64_t tokens = 0;
  torch::Tensor grad_hidden, grad_weight;
};

// Loss and gradients of hidden [B,T,H] and weight [V,H]; chunk 0 = the plain path.
Result run(const torch::Tensor& hidden0, const torch::Tensor& weight0, const torch::Tensor& labels, std::int64_t chunk,
           bool weight_trainable = true) {
  torch::Tensor hidden = hidden0.detach().clone().requires_grad_(true);
  torch::Tensor weight = weight0.detach().clone().requires_grad_(weight_trainable);
  LossSum l = chunk > 0 ? chunked_causal_lm_loss(hidden, weight, labels, chunk)
                        : causal_lm_loss(torch::nn::functional::linear(hidden, weight), labels);
  (l.sum * 0.37).backward();  // a multiplier, as the trainer's 1 / step tokens
  Result r;
  r.loss = l.sum.item<double>();
  r.tokens = l.tokens;
  r.grad_hidden = hidden.grad();
  r.grad_weight = weight.grad();
  return r;
}

double max_relative(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max() / b.to(torch::kDouble).abs().max()).item<double>();
}

struct Inputs {
  torch::Tensor hidden, weight, labels;
};

Inputs make_inputs(std::int64_t b, std::int64_t t, std::int64_t h, std::int64_t v, double ignored_fraction,
                   c10::ScalarType dtype = torch::kFloat) {
  torch::manual_seed(5);
  Inputs in;
  in.hidden = torch::randn({b, t, h}).to(dtype);
  in.weight = (torch::randn({v, h}) * 0.5).to(dtype);
  in.labels = torch::randint(0, v, {b, t}, torch::kLong);
  in.labels.masked_fill_(torch::rand({b, t}) < ignored_fraction, kIgnoreIndex);
  return in;
}

TEST(ChunkedLoss, EqualsTheFullLogitsLossAndGradientsInFp32) {
  const Inputs in = make_inputs(3, 29, 16, 301, 0.3);
  const Result ref = run(in.hidden, in.weight, in.labels, 0);
  ASSERT_GT(ref.tokens, 20);
  for (const std::int64_t chunk : std::vector<std::int64_t>{1, 7, 16, ref.tokens, 1000}) {
    const Result r = run(in.hidden, in.weight, in.labels, chunk);
    EXPECT_EQ(r.tokens, ref.tokens);
    EXPECT_NEAR(r.loss, ref.loss, 2e-6 * std::abs(ref.loss)) << "chunk " << chunk;
    EXPECT_LT(max_relative(r.grad_hidden, ref.grad_hidden), 2e-6) << "chunk " << chunk;
    EXPECT_LT(max_relative(r.grad_weight, ref.grad_weight), 2e-6) << "chunk " << chunk;
    std::printf("fp32 chunk %4lld: loss %+.2e relative, grad hidden %.2e, grad weight %.2e\n", (long long)chunk,
                (r.loss - ref.loss) / ref.loss, max_relative(r.grad_hidden, ref.grad_hidden),
                max_relative(r.grad_weight, ref.grad_weight));
    // Positions whose next label is ignored (and every row's last) get exactly zero.
    EXPECT_TRUE(r.grad_hidden.select(1, 28).eq(0).all().item<bool>());
  }
}

// A NaN or an infinite hidden state makes NaN of its row's logits' log-sum-exp in both paths, so
// the loss and the gradients it reaches are NaN: the trainer's checks must see it.
TEST(ChunkedLoss, NanAndInfinityReachTheLossAndGradientsAsInThePlainPath) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    Inputs in = make_inputs(2, 9, 16, 301, 0.0);
    in.hidden[0][3][5] = bad;
    in.labels[0][4] = 7;
    const Result ref = run(in.hidden, in.weight, in.labels, 0);
    ASSERT_TRUE(std::isnan(ref.loss)) << bad;
    for (const std::int64_t chunk : {1, 5, 1000}) {
      const Result r = run(in.hidden, in.weight, in.labels, chunk);
      EXPECT_TRUE(std::isnan(r.loss)) << bad << ", chunk " << chunk;
      EXPECT_TRUE(torch::equal(r.grad_hidden.isnan(), ref.grad_hidden.isnan())) << bad << ", chunk " << chunk;
      EXPECT_TRUE(torch::equal(r.grad_weight.isnan(), ref.grad_weight.isnan())) << bad << ", chunk " << chunk;
    }
  }
}

TEST(ChunkedLoss, FrozenWeightGetsNoGradient) {
  const Inputs in = make_inputs(2, 17, 8, 50, 0.2);
  const Result ref = run(in.hidden, in.weight, in.labels, 0, /*weight_trainable=*/false);
  const Result r = run(in.hidden, in.weight, in.labels, 5, /*weight_trainable=*/false);
  EXPECT_FALSE(r.grad_weight.defined());
  EXPECT_LT(max_relative(r.grad_hidden, ref.grad_hidden), 2e-6);
}

TEST(ChunkedLoss, AllLabelsIgnoredGivesZeroLossAndZeroGradients) {
  Inputs in = make_inputs(2, 9, 8, 40, 0.0);
  in.labels.fill_(kIgnoreIndex);
  in.labels.select(1, 0).fill_(3);  // a row's first label is never a target
  const Result r = run(in.hidden, in.weight, in.labels, 4);
  EXPECT_EQ(r.tokens, 0);
  EXPECT_EQ(r.loss, 0.0);
  // The weight still gets a (zero) gradient, as in the full-logits path: gradient hooks fire.
  ASSERT_TRUE(r.grad_weight.defined());
  EXPECT_TRUE(r.grad_weight.eq(0).all().item<bool>());
  EXPECT_TRUE(r.grad_hidden.eq(0).all().item<bool>());
}

TEST(ChunkedLoss, Bf16AsAccurateAsTheFullLogitsPath) {
  // bf16 has 8 bits of mantissa (rounding 2^-9 ≈ 2e-3 relative). Both paths round the logits'
  // gradient to bf16 before the products, but at different points (the chunked one before the
  // incoming gradient multiplies it, and once more after), and the hidden state's gradient is a
  // sum over the vocabulary that cancels (softmax - one_hot sums to 0): a rounding difference of
  // 2^-9 per term shows up as a few percent of the largest entry, in either path. So each path
  // is measured against the same product in fp32 (the bf16 inputs widened): the chunked one may
  // be off by no more than the plain bf16 path is, plus one bf16 rounding of the largest entry
  // (2^-8). Measured, the hidden state's gradient: pip LibTorch 6.7e-3 chunked, 6.4e-3 plain;
  // Debian's 1.13 2.05e-2 both.
  const Inputs in = make_inputs(2, 33, 32, 257, 0.25, torch::kBFloat16);
  const Result exact = run(in.hidden.to(torch::kFloat), in.weight.to(torch::kFloat), in.labels, 0);
  const Result ref = run(in.hidden, in.weight, in.labels, 0);
  const double ref_hidden = max_relative(ref.grad_hidden, exact.grad_hidden);
  const double ref_weight = max_relative(ref.grad_weight, exact.grad_weight);
  ASSERT_LT(ref_hidden, 0.1);  // the bar below is only as good as the plain path
  ASSERT_LT(ref_weight, 0.1);
  for (const std::int64_t chunk : std::vector<std::int64_t>{5, 64}) {
    const Result r = run(in.hidden, in.weight, in.labels, chunk);
    EXPECT_EQ(r.tokens, ref.tokens);
    EXPECT_EQ(r.grad_hidden.scalar_type(), torch::kBFloat16);
    EXPECT_NEAR(r.loss, exact.loss, 1e-2 * std::abs(exact.loss)) << "chunk " << chunk;
    const double hidden = max_relative(r.grad_hidden, exact.grad_hidden);
    const double weight = max_relative(r.grad_weight, exact.grad_weight);
    EXPECT_LE(hidden, ref_hidden + 0x1p-8) << "chunk " << chunk;
    EXPECT_LE(weight, ref_weight + 0x1p-8) << "chunk " << chunk;
    std::printf("bf16 chunk %4lld against fp32: loss %+.2e relative, grad hidden %.2e (plain bf16 path %.2e), "
                "grad weight %.2e (%.2e)\n",
                (long long)chunk, (r.loss - exact.loss) / exact.loss, hidden, ref_hidden, weight, ref_weight);
  }
}

// fp16 takes the other path (logits computed again in backward, where the incoming gradient, the
// loss scale, multiplies them before they are rounded to fp16): the same values within fp16's
// rounding (2^-11 ≈ 5e-4). Skipped where the CPU has no fp16 matrix product (LibTorch 1.13).
TEST(ChunkedLoss, Fp16RecomputesInBackwardWithinRounding) {
  try {
    (void)torch::mm(torch::ones({2, 2}, torch::kHalf), torch::ones({2, 2}, torch::kHalf));
  } catch (const c10::Error&) {
    GTEST_SKIP() << "this LibTorch has no fp16 matrix product on the CPU";
  }
  const Inputs in = make_inputs(2, 21, 16, 131, 0.25, torch::kHalf);
  const Result ref = run(in.hidden, in.weight, in.labels, 0);
  const Result r = run(in.hidden, in.weight, in.labels, 8);
  EXPECT_EQ(r.grad_hidden.scalar_type(), torch::kHalf);
  EXPECT_NEAR(r.loss, ref.loss, 5e-3 * std::abs(ref.loss));
  EXPECT_LT(max_relative(r.grad_hidden, ref.grad_hidden), 1e-2);
  EXPECT_LT(max_relative(r.grad_weight, ref.grad_weight), 1e-2);
}

io::LlamaConfig tiny_config(bool tied) {
  io::LlamaConfig c;
  c.vocab_size = 97;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 8;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = tied;
  return c;
}

TEST(ChunkedLoss, ModelLossGivesEveryParameterTheSameGradientTiedOrNot) {
  for (const bool tied : {true, false}) {
    LlamaForCausalLM model(tiny_config(tied), torch::TensorOptions().dtype(torch::kFloat));
    init_weights(model, 3, 0.1);
    torch::manual_seed(9);
    const torch::Tensor ids = torch::randint(0, 97, {2, 19}, torch::kLong);
    torch::Tensor labels = ids.clone();
    labels.narrow(1, 0, 6).fill_(kIgnoreIndex);  // a prompt
    auto gradients = [&](std::int64_t chunk) {
      for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
      LossSum l = model_loss(model, ids, labels, {}, chunk);
      (l.sum / static_cast<double>(l.tokens)).backward();
      std::vector<std::pair<std::string, torch::Tensor>> out;
      out.emplace_back("loss", l.sum.detach().reshape({1}));
      for (const auto& p : model->named_parameters()) out.emplace_back(p.key(), p.value().grad().clone());
      return out;
    };
    const auto ref = gradients(0);
    for (const std::int64_t chunk : std::vector<std::int64_t>{3, 1024}) {
      const auto got = gradients(chunk);
      ASSERT_EQ(got.size(), ref.size());
      for (std::size_t i = 0; i < ref.size(); ++i)
        EXPECT_LT(max_relative(got[i].second, ref[i].second), 2e-6)
            << (tied ? "tied" : "untied") << ", chunk " << chunk << ": " << ref[i].first;
    }
    // Without grad (evaluation) the same loss.
    torch::NoGradGuard no_grad;
    const LossSum plain = model_loss(model, ids, labels, {}, 0), chunked = model_loss(model, ids, labels, {}, 4);
    EXPECT_FALSE(chunked.sum.requires_grad());
    EXPECT_NEAR(chunked.sum.item<double>(), plain.sum.item<double>(), 2e-6 * plain.sum.item<double>());
  }
}

}  // namespace
}  // namespace ft::model
