// LoRA over a quantized base as users run it, with the shipped tiny configs: quantizing costs the
// base little eval loss (int8 within 1 %, NF4 within 5 % of the unquantized model), LoRA on an NF4
// base lowers the eval loss about as much as on the unquantized base, and
// configs/tiny_zero2_int8.json (ZeRO-2 over the LoRA state on 2 ranks, int8 base, bf16,
// activation checkpointing) trains and writes an adapter that the unquantized bf16 base loads.
// The NF4 and unquantized runs compute in fp32: LibTorch's CPU matrix products in bf16 are about
// 4x slower than in fp32 (20 steps: 92 s against 25 s), and the bf16 path over a quantized base
// is the int8 run's.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "test_support.h"
#include "util/file_util.h"

namespace ft {
namespace {

constexpr int kSteps = 20;

std::string repo_root() {
  return std::filesystem::weakly_canonical(std::filesystem::path(test::data_path("")) / ".." / "..").string();
}

struct RunEvals {
  double first_eval = NAN, last_eval = NAN;  // before training and after kSteps
  Json quantization;                          // RUN_DIR/quantization.json, null when absent
};

// Runs the shipped config from the repository root (its paths are relative to it).
RunEvals run_config(const test::TempDir& dir, const std::string& config, int ranks, const std::string& args) {
  const std::string run_dir = dir.file("run");
  const auto r = test::run_command("cd " + repo_root() + " && " +
                                       test::ft_train_command(ranks, "configs/" + config,
                                                              "--set run_dir=" + run_dir + " --set train.max_steps=" +
                                                                  std::to_string(kSteps) + " --set log.eval_every_steps=" +
                                                                  std::to_string(kSteps) + " " + args),
                                   true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  RunEvals out;
  for (const Json& m : test::read_metrics(run_dir)) {
    if (!m.contains("eval_loss")) continue;
    if (std::isnan(out.first_eval)) out.first_eval = m["eval_loss"];
    out.last_eval = m["eval_loss"];
  }
  if (file_exists(run_dir + "/quantization.json")) out.quantization = parse_json_file(run_dir + "/quantization.json");
  return out;
}

TEST(QuantizedLora, EvalLossOfTheQuantizedBaseAndWhatLoraDoesOnIt) {
  const std::string fp32 = "--set train.precision=fp32 --set checkpoint.every_steps=0";
  test::TempDir plain_dir, nf4_dir, int8_dir;
  const RunEvals plain = run_config(plain_dir, "tiny_lora.json", 1, fp32);
  const RunEvals nf4 = run_config(nf4_dir, "tiny_lora.json", 1, fp32 + " --set model.quantize=nf4");
  const RunEvals int8 = run_config(int8_dir, "tiny_zero2_int8.json", 2, "--set checkpoint.every_steps=0");
  ASSERT_FALSE(std::isnan(plain.first_eval));

  auto relative = [&](double loss) { return std::abs(loss - plain.first_eval) / plain.first_eval; };
  std::cout << "eval loss before training: fp32 " << plain.first_eval << ", int8 " << int8.first_eval << " ("
            << 100 * relative(int8.first_eval) << " %), nf4 " << nf4.first_eval << " (" << 100 * relative(nf4.first_eval)
            << " %)\nafter " << kSteps << " LoRA steps: fp32 " << plain.last_eval << ", nf4 " << nf4.last_eval
            << ", int8 (zero2, 2 ranks) " << int8.last_eval << "\n";
  EXPECT_LT(relative(int8.first_eval), 0.01);
  EXPECT_LT(relative(nf4.first_eval), 0.05);

  // LoRA lowers the loss on the NF4 base about as much as on the unquantized base.
  const double plain_drop = plain.first_eval - plain.last_eval, nf4_drop = nf4.first_eval - nf4.last_eval;
  EXPECT_GT(plain_drop, 0.5);
  EXPECT_NEAR(nf4_drop / plain_drop, 1.0, 0.2);
  EXPECT_GT(int8.first_eval - int8.last_eval, 0.5);

  // Each run says what quantizing did to each projection (7 per layer, 5 layers).
  EXPECT_TRUE(plain.quantization.is_null());
  for (const auto& [run, name, worst] : {std::tuple{&nf4, "nf4", 0.15}, std::tuple{&int8, "int8", 0.02}}) {
    ASSERT_TRUE(run->quantization.is_object()) << name;
    EXPECT_EQ(run->quantization["quantization"], name);
    EXPECT_EQ(run->quantization["tensors"].size(), 35u);
    EXPECT_LT(run->quantization["quantized_bytes"].get<double>(), run->quantization["dense_bytes"].get<double>() / 1.8);
    for (const Json& t : run->quantization["tensors"]) EXPECT_LT(t["relative_rms_error"].get<double>(), worst) << t["name"];
  }

  // The adapter trained on the int8 base is an ordinary PEFT adapter: the bf16 base loads it.
  const auto generate = test::run_command(test::bin_path("ft_generate") + " --threads 1 --model " +
                                              test::data_path("stories260K") + " --dtype bf16 --adapter " +
                                              int8_dir.file("run/adapter") +
                                              " --template alpaca --prompt 'Name a color.' --temperature 0 --max-new-tokens 8",
                                          true);
  EXPECT_EQ(generate.exit_code, 0) << generate.output;
  EXPECT_NE(generate.output.find("applied LoRA adapter"), std::string::npos) << generate.output;
}

}  // namespace
}  // namespace ft
