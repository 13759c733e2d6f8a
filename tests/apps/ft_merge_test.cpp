// ft_merge and ft_generate --adapter as a user runs them: the merged folder is a complete HF
// folder that load_llama reads and that computes what base + adapter computes; an existing
// folder is not overwritten without --force; bad adapters exit 1 with a message.
#include <gtest/gtest.h>

#include <filesystem>

#include "io/safetensors.h"
#include "model/lora.h"
#include "model/model_loader.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft {
namespace {

const torch::Tensor& prompt() {
  static const torch::Tensor ids = torch::tensor({1, 403, 407, 261, 378, 285, 308, 42}).unsqueeze(0);
  return ids;
}

torch::Tensor logits_of(model::LlamaForCausalLM& m) {
  torch::NoGradGuard no_grad;
  return m(prompt());
}

// Writes an all-linear r=4 adapter for stories260K into DIR; B random unless `zero_b`.
void make_adapter(const std::string& dir, bool zero_b = false) {
  auto m = model::load_llama(test::data_path("stories260K"));
  model::LoraOptions o;
  o.r = 4;
  o.alpha = 8;
  o.targets = io::LoraTargets{{"all-linear"}, ""};
  model::apply_lora(m, o, 1);
  if (!zero_b) {
    torch::NoGradGuard no_grad;
    auto gen = at::detail::createCPUGenerator(2);
    for (auto& [name, p] : model::lora_parameters(m))
      if (name.find("lora_B") != std::string::npos)
        p.copy_(at::normal(0.0, 0.05, p.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat)));
  }
  model::save_adapter(m, o, dir, "stories260K");
}

torch::Tensor base_plus_adapter_logits(const std::string& base, const std::string& adapter) {
  auto m = model::load_llama(base);
  model::load_adapter(m, adapter);
  return logits_of(m);
}

std::string merge_cmd(const std::string& args) { return test::bin_path("ft_merge") + " --threads 1 " + args; }

TEST(FtMerge, MergedFolderLoadsAndMatchesBasePlusAdapter) {
  test::TempDir dir;
  const std::string base = test::data_path("stories260K");
  make_adapter(dir.file("adapter"));
  auto r = test::run_command(merge_cmd("--base " + base + " --adapter " + dir.file("adapter") + " --out " +
                                       dir.file("merged")), true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.model", "tokenizer_config.json",
                        "special_tokens_map.json", "generation_config.json"})
    EXPECT_TRUE(file_exists(dir.file("merged/") + f)) << f;
  EXPECT_FALSE(file_exists(dir.file("merged.tmp")));
  EXPECT_EQ(read_file(dir.file("merged/tokenizer.model")), read_file(base + "/tokenizer.model"));

  io::SafetensorsReader reader(dir.file("merged/model.safetensors"));
  EXPECT_EQ(reader.tensors().size(), 47u);  // tied: no lm_head.weight, as save_pretrained
  EXPECT_FALSE(reader.contains("lm_head.weight"));
  for (const auto& t : reader.tensors()) {
    EXPECT_STREQ(t.dtype->name, "F32") << t.name;
    EXPECT_EQ(t.name.find("lora"), std::string::npos) << t.name;
  }
  Json config = parse_json_file(dir.file("merged/config.json"));
  Json original = parse_json_file(base + "/config.json");
  EXPECT_EQ(config["torch_dtype"], "float32");
  EXPECT_EQ(config["architectures"], original["architectures"]);
  EXPECT_EQ(config["rms_norm_eps"], original["rms_norm_eps"]);

  auto merged = model::load_llama(dir.file("merged"));
  auto expected = base_plus_adapter_logits(base, dir.file("adapter"));
  const double err = test::max_abs_diff(logits_of(merged), expected);
  std::printf("ft_merge equivalence: max |logits(merged folder) - logits(base + adapter)| = %.3g (fp32)\n", err);
  EXPECT_LT(err, 1e-4);  // fp32 rounding order: see lora_test.cpp (measured 2.2e-5)
  auto plain = model::load_llama(base);
  EXPECT_GT(test::max_abs_diff(logits_of(merged), logits_of(plain)), 1e-2);
}

TEST(FtMerge, RefusesToOverwriteWithoutForce) {
  test::TempDir dir;
  make_adapter(dir.file("adapter"));
  const std::string args = "--base " + test::data_path("stories260K") + " --adapter " + dir.file("adapter") +
                           " --out " + dir.file("out");
  make_directories(dir.file("out"));  // an empty folder is fine
  ASSERT_EQ(test::run_command(merge_cmd(args), true).exit_code, 0);
  write_file_atomic(dir.file("out/marker"), "x");
  auto again = test::run_command(merge_cmd(args), true);
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.output.find("ft_merge: error: " + dir.file("out") + ": exists and is not empty (use --force to replace it)"),
            std::string::npos) << again.output;
  auto forced = test::run_command(merge_cmd(args + " --force"), true);
  EXPECT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_FALSE(file_exists(dir.file("out/marker")));  // replaced, not mixed
  EXPECT_TRUE(file_exists(dir.file("out/model.safetensors")));
  EXPECT_FALSE(file_exists(dir.file("out.old")));
}

TEST(FtMerge, Bf16BaseMergesInFp32AndStaysBf16) {
  test::TempDir dir;
  // A bf16 copy of the base.
  io::SafetensorsReader reader(test::data_path("stories260K/model.safetensors"));
  io::NamedTensors tensors;
  for (const auto& t : reader.tensors()) tensors.emplace_back(t.name, reader.load(t.name).to(torch::kBFloat16));
  make_directories(dir.file("base16"));
  io::write_safetensors(dir.file("base16/model.safetensors"), tensors);
  Json config = parse_json_file(test::data_path("stories260K/config.json"));
  config["torch_dtype"] = "bfloat16";
  write_file_atomic(dir.file("base16/config.json"), config.dump(2));
  make_adapter(dir.file("adapter"));

  auto r = test::run_command(merge_cmd("--base " + dir.file("base16") + " --adapter " + dir.file("adapter") +
                                       " --out " + dir.file("merged")), true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  io::SafetensorsReader merged(dir.file("merged/model.safetensors"));
  for (const auto& t : merged.tensors()) EXPECT_STREQ(t.dtype->name, "BF16") << t.name;
  EXPECT_EQ(parse_json_file(dir.file("merged/config.json"))["torch_dtype"], "bfloat16");
  EXPECT_FALSE(file_exists(dir.file("merged/tokenizer.model")));  // nothing to copy: not invented

  // Each weight is exactly bf16(W_bf16 in fp32 + scale·B·A).
  auto adapter = io::read_peft_adapter(dir.file("adapter"));
  std::map<std::string, torch::Tensor> lora(adapter.tensors.begin(), adapter.tensors.end());
  const std::string w = "model.layers.2.mlp.gate_proj";
  auto expected = (reader.load(w + ".weight").to(torch::kBFloat16).to(torch::kFloat) +
                   adapter.config.scale() * lora[w + ".lora_B.weight"].mm(lora[w + ".lora_A.weight"]))
                      .to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(merged.load(w + ".weight"), expected));
  EXPECT_TRUE(torch::equal(merged.load("model.norm.weight"), reader.load("model.norm.weight").to(torch::kBFloat16)));
}

// An adapter trained on a quantized base (q_proj and v_proj only) merges into the dequantized
// weights; the other projections are written dequantized too; everything in bf16, and it says so.
TEST(FtMerge, QuantizedBaseMergesIntoTheDequantizedWeightsAndWritesBf16) {
  test::TempDir dir;
  const std::string base = test::data_path("stories260K");
  model::LoadOptions load;
  load.quantize = model::Quantization::kNf4;
  auto trained = model::load_llama(base, load);
  model::LoraOptions o;  // q_proj, v_proj
  model::apply_lora(trained, o, 3);
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, p] : model::lora_parameters(trained))
      if (name.find("lora_B") != std::string::npos) p.normal_(0, 0.05);
  }
  model::save_adapter(trained, o, dir.file("adapter"), "stories260K");
  auto r = test::run_command(merge_cmd("--quantize nf4 --base " + base + " --adapter " + dir.file("adapter") +
                                       " --out " + dir.file("merged")), true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("merged into its dequantized weights, written in bf16"), std::string::npos) << r.output;
  io::SafetensorsReader reader(dir.file("merged/model.safetensors"));
  EXPECT_EQ(reader.tensors().size(), 47u);
  for (const auto& t : reader.tensors()) EXPECT_STREQ(t.dtype->name, "BF16") << t.name;
  EXPECT_EQ(parse_json_file(dir.file("merged/config.json"))["torch_dtype"], "bfloat16");

  const auto& q = trained->model->layers[1]->self_attn->q_proj;
  const auto expected_q = q->dense_weight(torch::kFloat) +
                          torch::mm(q->lora_B->weight, q->lora_A->weight).detach() * o.scale();
  const auto merged_q = reader.load("model.layers.1.self_attn.q_proj.weight").to(torch::kFloat);
  EXPECT_TRUE(torch::allclose(merged_q, expected_q, 1e-2, 1e-3));  // bf16 rounding of the sum
  // No LoRA on k_proj: its dequantized values, rounded to bf16.
  const auto& k = trained->model->layers[1]->self_attn->k_proj;
  EXPECT_TRUE(torch::equal(reader.load("model.layers.1.self_attn.k_proj.weight"), k->dense_weight(torch::kBFloat16)));

  auto bad = test::run_command(merge_cmd("--quantize fp4 --base " + base + " --adapter " + dir.file("adapter") +
                                         " --out " + dir.file("merged2")), true);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("--quantize: \"fp4\" is not a quantization; expected none, int8 or nf4"), std::string::npos)
      << bad.output;
}

TEST(FtMerge, BadInputExitsNonZeroWithAMessage) {
  test::TempDir dir;
  auto usage = test::run_command(merge_cmd("--base x --out y"), true);
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_NE(usage.output.find("ft_merge: --adapter is required"), std::string::npos) << usage.output;
  auto missing = test::run_command(
      merge_cmd("--base " + test::data_path("stories260K") + " --adapter " + dir.file("none") + " --out " + dir.file("o")),
      true);
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("ft_merge: error: " + dir.file("none") + ": not found or not a folder"), std::string::npos)
      << missing.output;
  EXPECT_FALSE(file_exists(dir.file("o")));
  EXPECT_FALSE(file_exists(dir.file("o.tmp")));
  // An adapter of another shape: r=4 tensors but config says r=8.
  make_adapter(dir.file("adapter"));
  Json c = parse_json_file(dir.file("adapter/adapter_config.json"));
  c["r"] = 8;
  write_file_atomic(dir.file("adapter/adapter_config.json"), c.dump());
  auto bad = test::run_command(
      merge_cmd("--base " + test::data_path("stories260K") + " --adapter " + dir.file("adapter") + " --out " + dir.file("o")),
      true);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("has shape [4, 64] but expected [8, 64] = [r, in_features]"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("(hint: is this adapter for another base model?)"), std::string::npos) << bad.output;
}

TEST(FtGenerateAdapter, ZeroAdapterKeepsTheRecordedTextAndARealOneRuns) {
  test::TempDir dir;
  Json golden = parse_json_file(test::data_path("stories260K-golden.json"));
  make_adapter(dir.file("zero"), /*zero_b=*/true);
  const std::string gen = test::bin_path("ft_generate") + " --threads 1 --model " + test::data_path("stories260K") +
                          " --prompt 'Once upon a time' --temperature 0 --max-new-tokens 40 --adapter ";
  auto zero = test::run_command(gen + dir.file("zero"));
  EXPECT_EQ(zero.exit_code, 0);
  EXPECT_EQ(zero.output, golden["greedy_text"].get<std::string>() + "\n");
  make_adapter(dir.file("real"));
  auto real = test::run_command(gen + dir.file("real"), true);
  EXPECT_EQ(real.exit_code, 0) << real.output;
  EXPECT_NE(real.output.find("Once upon a time"), std::string::npos) << real.output;
  EXPECT_NE(real.output.find("applied LoRA adapter"), std::string::npos) << real.output;
  auto bad = test::run_command(gen + dir.file("none"), true);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("ft_generate: error: " + dir.file("none") + ": not found or not a folder"), std::string::npos)
      << bad.output;
}

}  // namespace
}  // namespace ft
