// LoRA on the real TinyStories model (tests/data/stories260K): B = 0 leaves the logits exactly
// as they were; merged weights compute what base + adapter computes; PEFT's init, scale, dropout
// and freezing; adapters written and read back give identical logits; every way an adapter can
// fail to fit the model is an error naming the tensor.
#include <gtest/gtest.h>

#include <cmath>

#include "config/run_config.h"
#include "io/peft_adapter.h"
#include "io/safetensors.h"
#include "model/linear.h"
#include "model/lora.h"
#include "model/model_loader.h"
#include "stories_model.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft::model {
namespace {

const torch::Tensor& prompt() {
  static const torch::Tensor ids = torch::tensor({1, 403, 407, 261, 378, 285, 308, 42}).unsqueeze(0);
  return ids;
}

torch::Tensor logits_of(LlamaForCausalLM& model) {
  torch::NoGradGuard no_grad;
  return model(prompt());
}

LoraOptions all_linear(std::int64_t r = 4, double alpha = 8) {
  LoraOptions o;
  o.r = r;
  o.alpha = alpha;
  o.targets = io::LoraTargets{{"all-linear"}, ""};
  return o;
}

// B filled from a seeded normal so that the adapter changes the function.
void randomize_b(LlamaForCausalLM& model, std::uint64_t seed, double std = 0.05) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& [name, p] : lora_parameters(model))
    if (name.find("lora_B") != std::string::npos)
      p.copy_(at::normal(0.0, std, p.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat)));
}

TEST(Lora, ZeroBLeavesLogitsExactlyAsTheBase) {
  auto model = load_stories();
  auto base = logits_of(model);
  auto names = apply_lora(model, all_linear(), 1);
  EXPECT_EQ(names.size(), 35u);  // 7 projections x 5 layers
  EXPECT_TRUE(torch::equal(logits_of(model), base));
}

TEST(Lora, ParameterNamesShapesAndDtypesArePeftOnes) {
  auto model = load_stories();
  apply_lora(model, all_linear(4), 1);
  auto params = model->named_parameters();
  EXPECT_EQ(params.size(), 47u + 70u);
  EXPECT_EQ(params["model.layers.0.self_attn.q_proj.lora_A.weight"].sizes(), (std::vector<std::int64_t>{4, 64}));
  EXPECT_EQ(params["model.layers.0.self_attn.q_proj.lora_B.weight"].sizes(), (std::vector<std::int64_t>{64, 4}));
  EXPECT_EQ(params["model.layers.0.self_attn.k_proj.lora_B.weight"].sizes(), (std::vector<std::int64_t>{32, 4}));
  EXPECT_EQ(params["model.layers.4.mlp.down_proj.lora_A.weight"].sizes(), (std::vector<std::int64_t>{4, 172}));
  EXPECT_EQ(params["model.layers.4.mlp.down_proj.lora_B.weight"].sizes(), (std::vector<std::int64_t>{64, 4}));
  EXPECT_TRUE(params.contains("model.layers.0.self_attn.q_proj.weight"));  // the base keeps its HF name
  auto lora = lora_parameters(model);
  ASSERT_EQ(lora.size(), 70u);
  EXPECT_EQ(lora[0].first, "model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(lora[1].first, "model.layers.0.self_attn.q_proj.lora_B.weight");
  for (const auto& [name, p] : lora) EXPECT_EQ(p.scalar_type(), torch::kFloat) << name;
}

TEST(Lora, DefaultTargetsAreQAndV) {
  auto model = load_stories();
  LoraOptions o;  // q_proj, v_proj
  auto names = apply_lora(model, o, 0);
  ASSERT_EQ(names.size(), 10u);
  EXPECT_EQ(names[0], "model.layers.0.self_attn.q_proj");
  EXPECT_EQ(names[1], "model.layers.0.self_attn.v_proj");
}

TEST(Lora, OnlyLoraParametersTrain) {
  auto model = load_stories();
  apply_lora(model, all_linear(), 1);
  randomize_b(model, 2);
  int trainable = 0;
  for (const auto& p : model->named_parameters()) {
    const bool lora = p.key().find(".lora_A.") != std::string::npos || p.key().find(".lora_B.") != std::string::npos;
    EXPECT_EQ(p.value().requires_grad(), lora) << p.key();
    trainable += p.value().requires_grad();
  }
  EXPECT_EQ(trainable, 70);
  model(prompt()).sum().backward();
  for (const auto& p : model->named_parameters()) {
    if (p.value().requires_grad()) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
    } else {
      EXPECT_FALSE(p.value().grad().defined()) << p.key();
    }
  }
}

TEST(Lora, KaimingUniformBoundAndZeroB) {
  auto model = load_stories();
  apply_lora(model, all_linear(8), 7);
  for (const auto& [name, p] : lora_parameters(model)) {
    if (name.find("lora_B") != std::string::npos) {
      EXPECT_EQ(p.abs().max().item<float>(), 0.f) << name;
      continue;
    }
    // kaiming_uniform_(a=sqrt(5)): bound = sqrt(6 / ((1 + 5) fan_in)) = 1/sqrt(in).
    const double bound = 1.0 / std::sqrt(static_cast<double>(p.size(1)));
    const double max = p.abs().max().item<double>();
    EXPECT_LE(max, bound * (1 + 1e-6)) << name;
    EXPECT_GT(max, 0.9 * bound) << name;  // uniform over the whole range, not a narrower one
    EXPECT_NEAR(p.mean().item<double>(), 0.0, 0.25 * bound) << name;
  }
}

TEST(Lora, InitIsReproducibleFromTheSeed) {
  auto a = load_stories(), b = load_stories(), c = load_stories();
  apply_lora(a, all_linear(), 11);
  apply_lora(b, all_linear(), 11);
  apply_lora(c, all_linear(), 12);
  auto la = lora_parameters(a), lb = lora_parameters(b), lc = lora_parameters(c);
  for (std::size_t i = 0; i < la.size(); i += 2) {
    EXPECT_TRUE(torch::equal(la[i].second, lb[i].second)) << la[i].first;
    EXPECT_FALSE(torch::equal(la[i].second, lc[i].second)) << la[i].first;
  }
}

TEST(Lora, RandomBChangesLogitsAndMergeGivesTheSameFunction) {
  auto model = load_stories();
  auto base = logits_of(model);
  apply_lora(model, all_linear(4, 8), 3);
  randomize_b(model, 4);
  auto with_adapter = logits_of(model);
  EXPECT_GT(test::max_abs_diff(with_adapter, base), 1e-2);
  merge_lora(model);
  EXPECT_FALSE(has_lora(model));
  EXPECT_EQ(model->named_parameters().size(), 47u);
  auto merged = logits_of(model);
  const double err = test::max_abs_diff(merged, with_adapter);
  std::printf("merge equivalence: max |logits(merged) - logits(base + adapter)| = %.3g (fp32)\n", err);
  // W x + s·B(A x) and (W + s·BA) x differ only by fp32 rounding order. Measured 1.5e-5 to 2.4e-5
  // for B std 0.005 ... 0.05 (the same for a 7x larger adapter effect, so not a math error): about
  // 10 ulps of logits up to 18 in size. 1e-4 is the tolerance of the recorded-logits test.
  EXPECT_LT(err, 1e-4);
}

TEST(Lora, MergeIsWPlusScaleBA) {
  auto model = load_stories();
  auto w0 = model->named_parameters()["model.layers.1.mlp.up_proj.weight"].clone();
  LoraOptions o = all_linear(4, 6);
  o.use_rslora = true;  // scale = 6 / sqrt(4) = 3
  apply_lora(model, o, 5);
  randomize_b(model, 6);
  auto a = model->named_parameters()["model.layers.1.mlp.up_proj.lora_A.weight"].detach().clone();
  auto b = model->named_parameters()["model.layers.1.mlp.up_proj.lora_B.weight"].detach().clone();
  merge_lora(model);
  auto w1 = model->named_parameters()["model.layers.1.mlp.up_proj.weight"];
  EXPECT_LT(test::max_abs_diff(w1, w0 + 3.0 * b.mm(a)), 1e-6);
}

TEST(Lora, ScaleIsAlphaOverROrOverSqrtRWithRslora) {
  LoraOptions o;
  o.r = 16;
  o.alpha = 32;
  EXPECT_DOUBLE_EQ(o.scale(), 2.0);
  o.use_rslora = true;
  EXPECT_DOUBLE_EQ(o.scale(), 8.0);

  // The layer applies it: y = x W^T + scale * (x A^T) B^T.
  torch::manual_seed(0);
  Linear layer(6, 5, torch::TensorOptions().dtype(torch::kFloat));
  torch::NoGradGuard no_grad;
  layer->weight.normal_();
  layer->enable_lora(4, 32 / std::sqrt(4.0), 0.0);
  layer->lora_A->weight.normal_();
  layer->lora_B->weight.normal_();
  EXPECT_DOUBLE_EQ(layer->lora_scale(), 16.0);
  auto x = torch::randn({3, 6});
  auto expected = x.mm(layer->weight.t()) + 16.0 * x.mm(layer->lora_A->weight.t()).mm(layer->lora_B->weight.t());
  EXPECT_LT(test::max_abs_diff(layer(x), expected), 1e-4);
}

TEST(Lora, DropoutOnlyOnTheBranchAndOnlyInTraining) {
  torch::manual_seed(0);
  Linear layer(32, 16, torch::TensorOptions().dtype(torch::kFloat));
  torch::NoGradGuard no_grad;
  layer->weight.normal_();
  layer->enable_lora(4, 2.0, 0.5);
  EXPECT_EQ(layer->lora_B->weight.abs().max().item<float>(), 0.f);  // a fresh branch is zero
  layer->lora_A->weight.normal_();
  auto x = torch::randn({8, 32});
  auto base = x.mm(layer->weight.t());

  layer->train();
  EXPECT_TRUE(torch::equal(layer(x), base)) << "B = 0: dropout must not touch the base path";
  layer->lora_B->weight.normal_();
  auto exact = base + 2.0 * x.mm(layer->lora_A->weight.t()).mm(layer->lora_B->weight.t());
  auto t1 = layer(x), t2 = layer(x);
  EXPECT_GT(test::max_abs_diff(t1, exact), 1e-3);  // dropout active
  EXPECT_GT(test::max_abs_diff(t1, t2), 1e-3);     // and random

  layer->eval();
  EXPECT_LT(test::max_abs_diff(layer(x), exact), 1e-4);
  EXPECT_TRUE(torch::equal(layer(x), layer(x)));
}

TEST(Lora, ModelEvalTurnsAdapterDropoutOff) {
  auto model = load_stories();
  LoraOptions o = all_linear();
  o.dropout = 0.3;
  apply_lora(model, o, 1);
  randomize_b(model, 2);
  model->eval();
  auto a = logits_of(model), b = logits_of(model);
  EXPECT_TRUE(torch::equal(a, b));
  model->train();
  EXPECT_FALSE(torch::equal(logits_of(model), a));
}

TEST(Lora, Bf16BaseWithFp32LoraIsCloseToFp32) {
  auto f32 = load_stories();
  apply_lora(f32, all_linear(), 3);
  randomize_b(f32, 4);
  auto b16 = load_stories(torch::kBFloat16);
  apply_lora(b16, all_linear(), 3);
  {
    torch::NoGradGuard no_grad;
    auto src = lora_parameters(f32), dst = lora_parameters(b16);
    for (std::size_t i = 0; i < src.size(); ++i) dst[i].second.copy_(src[i].second);
  }
  for (const auto& [name, p] : lora_parameters(b16)) EXPECT_EQ(p.scalar_type(), torch::kFloat) << name;
  auto ref = logits_of(f32);
  auto low = logits_of(b16);
  EXPECT_EQ(low.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::isfinite(low).all().item<bool>());
  auto plain32 = load_stories(), plain16 = load_stories(torch::kBFloat16);
  const auto base32 = logits_of(plain32), base16 = logits_of(plain16);
  // bf16 keeps 8 bits of mantissa: the plain base's logits (up to ~18) already move by ~0.3 over
  // 5 layers. The fp32 adapter must not make that much worse (measured 0.52 with it, 0.32 without).
  const double base_gap = test::max_abs_diff(base16, base32);
  const double lora_gap = test::max_abs_diff(low, ref);
  std::printf("bf16 vs fp32 logits: %.3g without LoRA, %.3g with\n", base_gap, lora_gap);
  EXPECT_LT(lora_gap, 2.0 * base_gap);
  // And the adapter's effect (up to ~11 here) is the same in bf16 as in fp32, to a few percent.
  auto effect32 = ref.to(torch::kFloat) - base32, effect16 = low.to(torch::kFloat) - base16.to(torch::kFloat);
  const double effect = effect32.abs().max().item<double>();
  EXPECT_GT(effect, 1.0);
  EXPECT_LT(test::max_abs_diff(effect16, effect32), 0.1 * effect);
}

TEST(Lora, OptionsFromTheRunConfig) {
  config::LoraConfig c;
  c.r = 16;
  c.alpha = 32;
  c.dropout = 0.1;
  c.target_modules = {"all-linear"};
  c.use_rslora = true;
  LoraOptions o = lora_options(c);
  EXPECT_EQ(o.r, 16);
  EXPECT_EQ(o.alpha, 32);
  EXPECT_EQ(o.dropout, 0.1);
  EXPECT_TRUE(o.targets.all_linear());
  EXPECT_TRUE(o.use_rslora);
  auto peft = peft_adapter_config(o, "stories260K");
  EXPECT_EQ(peft.base_model_name_or_path, "stories260K");
  EXPECT_DOUBLE_EQ(peft.scale(), o.scale());
}

TEST(Lora, RegexTargetsMatchWholeModuleNames) {
  auto model = load_stories();
  LoraOptions o;
  o.targets = io::LoraTargets{{}, R"(model\.layers\.[01]\.self_attn\.(q|v)_proj)"};
  auto names = apply_lora(model, o, 0);
  EXPECT_EQ(names, (std::vector<std::string>{"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj",
                                             "model.layers.1.self_attn.q_proj", "model.layers.1.self_attn.v_proj"}));
}

TEST(Lora, ApplyErrors) {
  auto model = load_stories();
  LoraOptions o;
  o.targets = io::LoraTargets{{"lm_head"}, ""};
  EXPECT_FT_ERROR(apply_lora(model, o, 0),
                  "target_modules: \"lm_head\" is not a projection LoRA can apply to (expected some of q_proj, k_proj, "
                  "v_proj, o_proj, gate_proj, up_proj, down_proj, or all-linear)");
  o.targets = io::LoraTargets{{}, "self_attn\\.q_proj"};  // a full match is needed: selects nothing
  EXPECT_FT_ERROR(apply_lora(model, o, 0), "target_modules (regex 'self_attn\\.q_proj') selects no module of the model");
  apply_lora(model, LoraOptions{}, 0);
  EXPECT_FT_ERROR(apply_lora(model, LoraOptions{}, 0),
                  "the model already has LoRA on 'model.layers.0.self_attn.q_proj'; merge it (merge_lora)");
  Linear layer(4, 4, torch::TensorOptions());
  EXPECT_FT_ERROR(layer->enable_lora(0, 1.0, 0.0), "LoRA rank must be positive, got 0");
  EXPECT_FT_ERROR(layer->enable_lora(2, 1.0, 1.0), "LoRA dropout must be in [0, 1), got 1");
}

// ---- adapters on disk ----

TEST(LoraAdapter, SaveThenLoadGivesIdenticalLogits) {
  test::TempDir dir;
  auto model = load_stories();
  LoraOptions o = all_linear(4, 8);
  o.use_rslora = true;
  apply_lora(model, o, 3);
  randomize_b(model, 4);
  auto expected = logits_of(model);
  save_adapter(model, o, dir.file("adapter"), "stories260K");

  auto fresh = load_stories();
  LoraOptions loaded = load_adapter(fresh, dir.file("adapter"));
  EXPECT_EQ(loaded.r, 4);
  EXPECT_EQ(loaded.alpha, 8);
  EXPECT_TRUE(loaded.use_rslora);
  EXPECT_EQ(loaded.targets.names.size(), 7u);  // all-linear was written as the explicit list
  EXPECT_TRUE(torch::equal(logits_of(fresh), expected));
  for (const auto& p : fresh->named_parameters())
    EXPECT_EQ(p.value().requires_grad(), p.key().find(".lora_") != std::string::npos) << p.key();
}

TEST(LoraAdapter, KeysWithoutThePrefixLoadTheSame) {
  test::TempDir dir;
  auto model = load_stories();
  LoraOptions o;  // q_proj, v_proj
  apply_lora(model, o, 3);
  randomize_b(model, 4);
  auto expected = logits_of(model);
  make_directories(dir.file("bare"));
  io::write_safetensors(dir.file("bare/adapter_model.safetensors"), lora_adapter_tensors(model));
  write_file_atomic(dir.file("bare/adapter_config.json"), peft_adapter_config(o, "x").to_json().dump());
  auto fresh = load_stories();
  load_adapter(fresh, dir.file("bare"));
  EXPECT_TRUE(torch::equal(logits_of(fresh), expected));
}

TEST(LoraAdapter, LoadedAdapterMergesLikeItRuns) {
  test::TempDir dir;
  auto model = load_stories();
  apply_lora(model, all_linear(), 3);
  randomize_b(model, 4);
  save_adapter(model, all_linear(), dir.file("a"), "stories260K");
  auto fresh = load_stories();
  load_adapter(fresh, dir.file("a"));
  auto expected = logits_of(fresh);
  merge_lora(fresh);
  EXPECT_LT(test::max_abs_diff(logits_of(fresh), expected), 1e-4);  // rounding order, as above
}

// An adapter folder with a q_proj-only config and the tensors `edit` leaves.
std::string adapter_dir(const test::TempDir& dir, const std::string& name,
                        const std::function<void(io::NamedTensors&, Json&)>& edit) {
  io::NamedTensors tensors;
  for (std::int64_t i = 0; i < 5; ++i) {
    const std::string m = "model.layers." + std::to_string(i) + ".self_attn.q_proj";
    tensors.emplace_back(m + ".lora_A.weight", torch::zeros({4, 64}));
    tensors.emplace_back(m + ".lora_B.weight", torch::zeros({64, 4}));
  }
  io::PeftAdapterConfig c;
  c.r = 4;
  c.target_modules.names = {"q_proj"};
  Json config = c.to_json();
  edit(tensors, config);
  const std::string path = dir.file(name);
  make_directories(path);
  io::NamedTensors prefixed;
  for (auto& [n, t] : tensors) prefixed.emplace_back(io::kPeftKeyPrefix + n, t);
  io::write_safetensors(path + "/adapter_model.safetensors", prefixed);
  write_file_atomic(path + "/adapter_config.json", config.dump());
  return path;
}

TEST(LoraAdapter, TensorsThatDoNotFitAreErrorsNamingTheTensor) {
  test::TempDir dir;
  auto ok = adapter_dir(dir, "ok", [](io::NamedTensors&, Json&) {});
  {
    auto model = load_stories();
    load_adapter(model, ok);
    EXPECT_EQ(lora_parameters(model).size(), 10u);
  }
  struct Case {
    std::string name;
    std::function<void(io::NamedTensors&, Json&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"unknown_module",
       [](io::NamedTensors& t, Json&) { t.emplace_back("model.layers.0.self_attn.qq_proj.lora_A.weight", torch::zeros({4, 64})); },
       "adapter_model.safetensors: tensor 'model.layers.0.self_attn.qq_proj.lora_A.weight' is for module "
       "'model.layers.0.self_attn.qq_proj', which the model does not have or LoRA cannot apply to (expected "
       "model.layers.N.self_attn.{q,k,v,o}_proj or model.layers.N.mlp.{gate,up,down}_proj) (hint: is this adapter for "
       "another base model?)"},
      {"lm_head",
       [](io::NamedTensors& t, Json&) { t.emplace_back("lm_head.lora_A.weight", torch::zeros({4, 64})); },
       "tensor 'lm_head.lora_A.weight' is for module 'lm_head', which the model does not have"},
      {"layer_beyond",
       [](io::NamedTensors& t, Json&) { t.emplace_back("model.layers.7.self_attn.q_proj.lora_A.weight", torch::zeros({4, 64})); },
       "adapter_model.safetensors: tensor 'model.layers.7.self_attn.q_proj.lora_A.weight' is for layer 7 but the model "
       "has 5 layers (0..4) (hint: is this adapter for another base model?)"},
      {"layer_number_overflows",
       [](io::NamedTensors& t, Json&) {
         t.emplace_back("model.layers.99999999999999999999.self_attn.q_proj.lora_A.weight", torch::zeros({4, 64}));
       },
       "is for layer 99999999999999999999 but the model has 5 layers"},
      {"shape_a",
       [](io::NamedTensors& t, Json&) { t[0].second = torch::zeros({4, 32}); },
       "adapter_model.safetensors: tensor 'model.layers.0.self_attn.q_proj.lora_A.weight' has shape [4, 32] but expected "
       "[4, 64] = [r, in_features] (r = 4 from "},
      {"shape_b",
       [](io::NamedTensors& t, Json&) { t[1].second = torch::zeros({64, 8}); },
       "tensor 'model.layers.0.self_attn.q_proj.lora_B.weight' has shape [64, 8] but expected [64, 4] = [out_features, r]"},
      {"rank_in_config",
       [](io::NamedTensors&, Json& c) { c["r"] = 8; },
       "tensor 'model.layers.0.self_attn.q_proj.lora_A.weight' has shape [4, 64] but expected [8, 64] = [r, in_features] "
       "(r = 8 from "},
      {"missing_b",
       [](io::NamedTensors& t, Json&) { t.erase(t.begin() + 3); },
       "adapter_model.safetensors: tensor 'model.layers.1.self_attn.q_proj.lora_A.weight' has no matching "
       "'model.layers.1.self_attn.q_proj.lora_B.weight'"},
      {"missing_a",
       [](io::NamedTensors& t, Json&) { t.erase(t.begin() + 2); },
       "tensor 'model.layers.1.self_attn.q_proj.lora_B.weight' has no matching 'model.layers.1.self_attn.q_proj.lora_A.weight'"},
      {"missing_module",
       [](io::NamedTensors& t, Json&) { t.resize(8); },
       "adapter_model.safetensors: no LoRA weights for 'model.layers.4.self_attn.q_proj', which target_modules (q_proj) "
       "in "},
      {"not_targeted",
       [](io::NamedTensors& t, Json&) { t.emplace_back("model.layers.0.self_attn.k_proj.lora_A.weight", torch::zeros({4, 64})); },
       "tensor 'model.layers.0.self_attn.k_proj.lora_A.weight' is for module 'model.layers.0.self_attn.k_proj', which "
       "target_modules (q_proj) in "},
      {"bad_target",
       [](io::NamedTensors&, Json& c) { c["target_modules"] = {"embed_tokens"}; },
       "adapter_config.json: target_modules: \"embed_tokens\" is not a projection LoRA can apply to"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    auto model = load_stories();
    EXPECT_FT_ERROR(load_adapter(model, adapter_dir(dir, c.name, c.edit)), c.message);
    EXPECT_FALSE(has_lora(model)) << "a failed load must leave the model untouched";
  }
  auto model = load_stories();
  load_adapter(model, ok);
  EXPECT_FT_ERROR(load_adapter(model, ok), "the model already has LoRA on 'model.layers.0.self_attn.q_proj'");
  auto plain = load_stories();
  EXPECT_FT_ERROR(save_adapter(plain, LoraOptions{}, dir.file("none"), "x"),
                  "cannot save an adapter: the model has no LoRA weights");
}

}  // namespace
}  // namespace ft::model
