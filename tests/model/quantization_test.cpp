// int8 / NF4 quantization of frozen base weights: the code books and the storage layout against
// tests/data/quantization_reference.json (tests/reference/make_quantization_reference.py, an
// independent transcription of bitsandbytes' layout), the quantized linear's forward and backward
// against a dense linear over the same dequantized weight, and what quantizing does to the real
// TinyStories model's loss.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <cstring>

#include "data/tokenizer.h"
#include "model/causal_lm_loss.h"
#include "model/lora.h"
#include "model/model_loader.h"
#include "model/quantization.h"
#include "model/quantized_linear.h"
#include "test_support.h"
#include "io/safetensors.h"
#include "util/error.h"
#include "util/file_util.h"
#include "util/json.h"
#include "util/memory_counter.h"
#include "util/torch_version.h"

namespace ft::model {
namespace {

const Json& reference() {
  static const Json json = parse_json_file(test::data_path("quantization_reference.json"));
  return json;
}

// The script's test weight: k/1024 · 2^-(block % 5), exact in fp32.
torch::Tensor test_weight(std::int64_t rows, std::int64_t cols) {
  std::vector<float> v(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < rows * cols; ++i) {
    const std::int64_t k = (i * 7919 + 13) % 2001 - 1000;
    v[static_cast<std::size_t>(i)] = static_cast<float>(k / 1024.0 * std::ldexp(1.0, -static_cast<int>((i / 64) % 5)));
  }
  return torch::from_blob(v.data(), {rows, cols}, torch::kFloat).clone();
}

std::string hex(const torch::Tensor& bytes) {
  static const char* digits = "0123456789abcdef";
  const auto b = bytes.contiguous().to(torch::kByte);
  std::string s;
  for (std::int64_t i = 0; i < b.numel(); ++i) {
    const unsigned v = b.data_ptr<std::uint8_t>()[i];
    s += digits[v >> 4];
    s += digits[v & 15];
  }
  return s;
}

void expect_close(const torch::Tensor& actual, const Json& expected, double rel, const std::string& what) {
  const auto e = torch::tensor(expected.get<std::vector<float>>());
  ASSERT_EQ(actual.numel(), e.numel()) << what;
  const double err = (actual.flatten().to(torch::kFloat) - e).abs().max().item<double>();
  EXPECT_LE(err, rel * e.abs().max().item<double>()) << what;
}

TEST(Quantization, CodeBooksMatchTheReference) {
  const auto nf4 = reference()["nf4_code_book_derived"].get<std::vector<float>>();
  ASSERT_EQ(nf4.size(), 16u);
  for (std::size_t i = 0; i < 16; ++i) EXPECT_EQ(nf4_code_book()[i], nf4[i]) << i;  // derived from N(0,1) quantiles
  // The dynamic map comes from torch.linspace in float32, whose last bit depends on the LibTorch
  // version (1.13's vectorized kernel and 2.x's round differently): exact on 1.13, where the
  // reference was made, within two units in the last place on 2.x (the midpoints of a linspace
  // one unit off, times a power of ten).
  const auto dyn = reference()["dynamic_map"].get<std::vector<float>>();
  ASSERT_EQ(dyn.size(), 256u);
  for (std::size_t i = 0; i < 256; ++i) {
#if FT_TORCH_AT_LEAST(2, 0)
    // Units in the last place between two floats of one sign: the distance of their bit patterns.
    std::int32_t a, b;
    std::memcpy(&a, &dynamic_map_code()[i], 4);
    std::memcpy(&b, &dyn[i], 4);
    EXPECT_LE(std::abs(static_cast<std::int64_t>(a) - b), 2) << i << ": " << dynamic_map_code()[i] << " vs " << dyn[i];
#else
    EXPECT_EQ(dynamic_map_code()[i], dyn[i]) << i;
#endif
  }
}

TEST(Quantization, Nf4LayoutMatchesTheReference) {
  for (const Json& c : reference()["cases"]) {
    const std::int64_t rows = c["rows"], cols = c["cols"];
    const std::string what = std::to_string(rows) + "x" + std::to_string(cols);
    QuantizedWeight q(test_weight(rows, cols), Quantization::kNf4);
    const Json& r = c["nf4"];
    EXPECT_EQ(hex(q->codes), r["codes_hex"].get<std::string>()) << what;
    EXPECT_EQ(hex(q->absmax_codes), r["absmax_codes_hex"].get<std::string>()) << what;
    expect_close(q->absmax_scale, r["absmax_scale"], 1e-7, what + " absmax scale");
    EXPECT_NEAR(q->absmax_offset.item<double>(), r["absmax_offset"].get<double>(), 1e-7) << what;
    const auto deq = q->dequantize(torch::kFloat).flatten();
    expect_close(deq.slice(0, 0, 200), r["dequantized_first"], 1e-6, what + " first values");
    expect_close(deq.slice(0, deq.numel() - 50), r["dequantized_last"], 1e-6, what + " last values");
    EXPECT_NEAR(round_trip_error(test_weight(rows, cols), *q).relative_rms, r["relative_rms_error"].get<double>(), 1e-6);
    EXPECT_EQ(q->bytes(), quantized_bytes(rows, cols, Quantization::kNf4));
  }
}

TEST(Quantization, Int8MatchesTheReference) {
  for (const Json& c : reference()["cases"]) {
    const std::int64_t rows = c["rows"], cols = c["cols"];
    QuantizedWeight q(test_weight(rows, cols), Quantization::kInt8);
    EXPECT_EQ(q->codes.scalar_type(), torch::kChar);
    EXPECT_EQ(hex(q->codes), c["int8"]["codes_hex"].get<std::string>());
    expect_close(q->scale, c["int8"]["scale"], 1e-7, "int8 scale");
    EXPECT_NEAR(round_trip_error(test_weight(rows, cols), *q).relative_rms, c["int8"]["relative_rms_error"].get<double>(),
                1e-6);
    EXPECT_EQ(q->bytes(), quantized_bytes(rows, cols, Quantization::kInt8));
  }
}

// The fused CPU loops and the tensor-op path that GPUs take give the same bits in every dtype.
TEST(Quantization, FusedCpuDequantizationEqualsTheTensorOpPath) {
  torch::manual_seed(9);
  const auto w = torch::randn({37, 200}) * 0.03;  // 7400 weights: a partial last block
  for (auto mode : {Quantization::kInt8, Quantization::kNf4}) {
    QuantizedWeight q(w, mode);
    for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf, torch::kDouble}) {
      const auto fused = q->dequantize(dtype), ops = q->dequantize_with_tensor_ops(dtype);
      EXPECT_EQ(fused.scalar_type(), dtype);
      EXPECT_EQ(fused.sizes(), w.sizes());
      EXPECT_TRUE(torch::equal(fused, ops)) << quantization_name(mode) << " " << c10::toString(dtype);
    }
  }
}

TEST(Quantization, ZeroBlocksAndRowsStayZeroInsteadOfNaN) {
  auto w = torch::zeros({4, 128});
  w[2][5] = 0.5;
  for (auto mode : {Quantization::kInt8, Quantization::kNf4}) {
    QuantizedWeight q(w, mode);
    const auto deq = q->dequantize(torch::kFloat);
    EXPECT_TRUE(torch::isfinite(deq).all().item<bool>()) << quantization_name(mode);
    EXPECT_EQ(deq[0].abs().max().item<float>(), 0.0f) << quantization_name(mode);
  }
}

TEST(Quantization, ModuleDtypeConversionLeavesCodesAloneAndDeviceMoves) {
  Linear linear(64, 32, torch::TensorOptions().dtype(torch::kFloat));
  linear->set_weight(test_weight(32, 64));
  linear->quantize_weight(Quantization::kNf4);
  EXPECT_FALSE(linear->weight.defined());
  EXPECT_TRUE(linear->named_parameters().is_empty());
  const auto before = linear->dense_weight(torch::kFloat);
  linear->to(torch::kBFloat16);
  EXPECT_EQ(linear->weight_quantized->codes.scalar_type(), torch::kByte);
  EXPECT_EQ(linear->weight_quantized->absmax_scale.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(linear->dense_weight(torch::kFloat), before));
  linear->to(torch::kCPU);
  EXPECT_TRUE(torch::equal(linear->dense_weight(torch::kFloat), before));
  linear->dequantize_weight(torch::kFloat);
  ASSERT_TRUE(linear->weight.defined());
  EXPECT_FALSE(linear->weight.requires_grad());
  EXPECT_TRUE(torch::equal(linear->weight, before));
}

TEST(Quantization, UnknownNameIsAnErrorNamingTheKey) {
  EXPECT_EQ(parse_quantization("nf4", "k"), Quantization::kNf4);
  try {
    parse_quantization("fp4", "model.quantize");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.quantize: \"fp4\" is not a quantization; expected none, int8 or nf4"),
              std::string::npos);
  }
}

// Forward and dL/dx equal a dense linear over the dequantized weight; nothing flows to the codes.
TEST(QuantizedLinear, ForwardAndBackwardEqualTheDenseLinearOfTheDequantizedWeight) {
  torch::manual_seed(3);
  const auto w = torch::randn({48, 64}) * 0.05;
  for (auto mode : {Quantization::kInt8, Quantization::kNf4}) {
    QuantizedWeight q(w, mode);
    const auto dense = q->dequantize(torch::kFloat);
    auto x1 = torch::randn({2, 5, 64}).requires_grad_(true);
    auto x2 = x1.detach().clone().requires_grad_(true);
    auto upstream = torch::randn({2, 5, 48});
    auto y1 = quantized_linear(x1, q);
    auto y2 = torch::nn::functional::linear(x2, dense);
    EXPECT_TRUE(torch::allclose(y1, y2, 1e-6, 1e-6)) << quantization_name(mode);
    (y1 * upstream).sum().backward();
    (y2 * upstream).sum().backward();
    EXPECT_TRUE(torch::allclose(x1.grad(), x2.grad(), 1e-6, 1e-6)) << quantization_name(mode);
  }
}

// LoRA over a quantized projection: the adapter trains (gets gradients), the base does not.
TEST(QuantizedLinear, LoraOverAQuantizedBaseGetsGradients) {
  torch::manual_seed(4);
  Linear linear(64, 32, torch::TensorOptions().dtype(torch::kFloat));
  linear->set_weight(torch::randn({32, 64}) * 0.05);
  linear->quantize_weight(Quantization::kInt8);
  linear->enable_lora(4, 2.0, 0.0);
  torch::NoGradGuard no_grad_init;
  linear->lora_A->weight.normal_(0, 0.1);
  linear->lora_B->weight.normal_(0, 0.1);
  {
    torch::AutoGradMode grad(true);
    linear->lora_A->weight.set_requires_grad(true);
    linear->lora_B->weight.set_requires_grad(true);
    auto x = torch::randn({3, 64});
    linear(x).square().sum().backward();
  }
  EXPECT_TRUE(linear->lora_A->weight.grad().defined());
  EXPECT_GT(linear->lora_B->weight.grad().abs().sum().item<double>(), 0);
  EXPECT_EQ(linear->named_parameters().size(), 2u);  // lora_A and lora_B only
}

// The real model: every projection quantized while loading, the round trip reported per tensor,
// and the mean cross-entropy on the recorded TinyStories sentences close to the unquantized one.
class QuantizedStories : public ::testing::Test {
 protected:
  static double mean_ce(LlamaForCausalLM& model) {
    torch::NoGradGuard g;
    const Json golden = parse_json_file(test::data_path("stories260K-golden.json"));
    double total = 0;
    std::int64_t tokens = 0;
    for (const Json& item : golden["per_text"]) {
      auto ids = torch::tensor(item["ids"].get<std::vector<std::int64_t>>()).unsqueeze(0);
      LossSum loss = causal_lm_loss(model(ids), ids);
      total += loss.sum.item<double>();
      tokens += loss.tokens;
    }
    return total / static_cast<double>(tokens);
  }
};

TEST_F(QuantizedStories, LossStaysCloseToTheUnquantizedModel) {
  torch::set_num_threads(1);
  auto base = load_llama(test::data_path("stories260K"));
  const double ce = mean_ce(base);
  const std::int64_t projections = 7 * base->config().num_hidden_layers;
  // int8 within 1 %. NF4 costs this 64-wide model 6.3 % on these in-distribution sentences
  // (each weight matrix has about 9 % RMS error, as NF4 has on any Gaussian-like weights); on the
  // configs' eval set (alpaca, what the trainer reports as eval_loss) it is 3.2 %, within the 5 %
  // the quantized-training test asserts (tests/train/quantized_lora_test.cpp).
  for (auto [mode, tolerance] : {std::pair{Quantization::kInt8, 0.01}, std::pair{Quantization::kNf4, 0.08}}) {
    LoadOptions options;
    options.quantize = mode;
    QuantizationReport report;
    auto model = load_llama(test::data_path("stories260K"), options, &report);
    EXPECT_EQ(report.quantization, mode);
    ASSERT_EQ(static_cast<std::int64_t>(report.tensors.size()), projections);
    for (const auto& t : report.tensors) {
      EXPECT_GT(t.error.relative_rms, 0) << t.name;
      EXPECT_LT(t.error.relative_rms, mode == Quantization::kInt8 ? 0.02 : 0.15) << t.name;
      EXPECT_LT(t.quantized_bytes, t.dense_bytes / (mode == Quantization::kInt8 ? 3 : 6)) << t.name;
    }
    // Embeddings, norms (and lm_head when untied) stay parameters in the compute dtype.
    for (const auto& p : model->named_parameters())
      EXPECT_TRUE(p.key().find("proj") == std::string::npos) << p.key() << " should be quantized";
    const double qce = mean_ce(model);
    std::cout << quantization_name(mode) << ": mean CE " << qce << " vs " << ce << " unquantized ("
              << 100 * (qce - ce) / ce << " %); " << report.summary() << "\n";
    EXPECT_LT(std::abs(qce - ce) / ce, tolerance) << quantization_name(mode);
  }
}

// Loading quantizes tensor by tensor as it reads: the most CPU memory LibTorch holds while loading
// a random 13 MB (fp32) model as NF4 is the quantized model plus the transients of quantizing one
// matrix, well under one decoder layer in fp32; the fp32 load holds the whole model.
TEST(QuantizedLoading, PeakMemoryIsTheQuantizedModelPlusLessThanOneLayer) {
  install_cpu_memory_counter();
  test::TempDir dir;
  io::LlamaConfig c = io::load_llama_config(test::data_path("stories260K"));
  c.hidden_size = 256;
  c.intermediate_size = 688;
  c.num_hidden_layers = 4;
  c.num_attention_heads = c.num_key_value_heads = 4;
  c.head_dim = 64;
  c.tie_word_embeddings = false;
  std::int64_t dense_bytes = 0;
  {
    LlamaForCausalLM random(c, torch::TensorOptions().dtype(torch::kFloat));
    init_weights(random, 5);
    io::NamedTensors tensors;
    for (const auto& p : random->named_parameters()) tensors.emplace_back(p.key(), p.value().detach());
    io::write_safetensors(dir.file("model.safetensors"), tensors);
    write_file_atomic(dir.file("config.json"), c.to_json(torch::kFloat).dump(2));
    for (const auto& p : random->parameters()) dense_bytes += p.numel() * 4;
  }
  const std::int64_t h = c.hidden_size, i = c.intermediate_size;
  const std::int64_t layer_bytes = (4 * h * h + 3 * h * i) * 4;

  auto peak_of_load = [&](Quantization q, std::int64_t* held) {
    const std::int64_t before = cpu_allocated_bytes();
    reset_cpu_peak_allocated_bytes();
    LoadOptions options;
    options.quantize = q;
    auto model = load_llama(dir.path(), options);
    *held = cpu_allocated_bytes() - before;
    return cpu_peak_allocated_bytes() - before;
  };
  std::int64_t dense_held = 0, nf4_held = 0;
  const std::int64_t dense_peak = peak_of_load(Quantization::kNone, &dense_held);
  const std::int64_t nf4_peak = peak_of_load(Quantization::kNf4, &nf4_held);
  std::cout << "model " << dense_bytes << " B in fp32, one layer " << layer_bytes << " B; load peak fp32 " << dense_peak
            << " B (holds " << dense_held << "), nf4 " << nf4_peak << " B (holds " << nf4_held << ")\n";
  EXPECT_GE(dense_held, dense_bytes);
  EXPECT_LT(nf4_held, dense_bytes / 2);  // embeddings and head stay fp32 here
  EXPECT_LT(nf4_peak, nf4_held + layer_bytes);
  EXPECT_LT(nf4_peak, dense_peak / 2);
}

// A merge into a quantized base goes into its dequantized values: merged = dequantized + B·A.
TEST_F(QuantizedStories, MergeIntoAQuantizedBaseUsesTheDequantizedWeights) {
  LoadOptions options;
  options.quantize = Quantization::kNf4;
  auto model = load_llama(test::data_path("stories260K"), options);
  auto& q_proj = model->model->layers[0]->self_attn->q_proj;
  const auto dequantized = q_proj->dense_weight(torch::kFloat);
  LoraOptions lora;
  apply_lora(model, lora, 7);
  {
    torch::NoGradGuard g;
    q_proj->lora_B->weight.normal_(0, 0.1);
  }
  const auto delta = torch::mm(q_proj->lora_B->weight, q_proj->lora_A->weight) * lora.scale();
  auto ids = torch::tensor(std::vector<std::int64_t>{1, 400, 12, 77, 3}).unsqueeze(0);
  torch::NoGradGuard g;
  const auto before = model(ids);
  merge_lora(model);
  EXPECT_FALSE(q_proj->is_quantized());
  EXPECT_TRUE(torch::allclose(q_proj->weight, dequantized + delta, 1e-6, 1e-6));
  EXPECT_TRUE(model->model->layers[0]->self_attn->k_proj->is_quantized());  // no LoRA there: untouched
  EXPECT_TRUE(torch::allclose(model(ids), before, 1e-4, 1e-4));
}

}  // namespace
}  // namespace ft::model
