// ft_bench: the FLOP count against PaLM's formula worked by hand for LLaMA-2-7B, the burst
// summary and the rates on made-up metrics, and the program as users run it (the tiny LoRA config
// on 1 and 2 real ranks): its JSON, its chart, and its errors.
#include <gtest/gtest.h>

#include "bench/scaling_bench.h"
#include "bench/training_flops.h"
#include "io/hf_config.h"
#include "test_support.h"
#include "util/error.h"
#include "util/file_util.h"

namespace ft::bench {
namespace {

TEST(TrainingFlops, Llama2_7bMatchesPalmFormulaByHand) {
  const io::LlamaConfig m = io::load_llama_config(test::model_config_path("meta-llama/Llama-2-7b-hf"));
  // 32 layers x (4 x 4096² + 3 x 4096 x 11008) + 32000 x 4096 (the head) = 6,607,077,376.
  EXPECT_EQ(matmul_parameters(m), 6607077376LL);
  // 6N + 12 x 32 layers x 32 heads x 128 x 4096 tokens.
  EXPECT_DOUBLE_EQ(training_flops_per_token(m, 4096, 0), 6.0 * 6607077376.0 + 6442450944.0);
  // LoRA: no gradients for the frozen weights, 6 per LoRA parameter.
  EXPECT_DOUBLE_EQ(training_flops_per_token(m, 4096, 1000), 4.0 * 6607077376.0 + 6000.0 + 6442450944.0);
}

Json step(std::int64_t n, double seconds, double tokens_per_s, double comm) {
  return {{"step", n},
          {"loss", 1.0},
          {"tokens_per_s", tokens_per_s},
          {"peak_memory_bytes", Json::array({100 * n, 50})},
          {"time", {{"step", seconds}, {"data_wait", 0.01}, {"compute", seconds - comm - 0.02},
                    {"communication", comm}, {"optimizer", 0.01}}}};
}

TEST(ScalingBench, SummaryLeavesOutWarmupAndEvaluations) {
  const std::vector<Json> records = {Json{{"step", 0}, {"eval_loss", 2.0}}, step(1, 5.0, 10, 0),
                                     step(2, 1.0, 1000, 0.1), step(3, 3.0, 2000, 0.3),
                                     Json{{"step", 3}, {"checkpoint_s", 0.5}}};
  const BurstResult r = summarize_burst(records, 1, "m.jsonl");
  EXPECT_EQ(r.steps, 2);
  EXPECT_DOUBLE_EQ(r.step_s, 2.0);
  EXPECT_DOUBLE_EQ(r.tokens_per_s, (1000.0 * 1 + 2000.0 * 3) / 4.0);  // tokens over time, not a mean of rates
  EXPECT_DOUBLE_EQ(r.communication_s, 0.2);
  EXPECT_EQ(r.peak_memory_bytes, 300);  // the warm-up's peaks count too
  EXPECT_THROW(summarize_burst(records, 3, "m.jsonl"), Error);
}

TEST(ScalingBench, EfficiencyAndMfu) {
  std::vector<BurstResult> rs(3);
  rs[0].ranks = 1, rs[0].tokens_per_s = 100;
  rs[1].ranks = 2, rs[1].tokens_per_s = 180;
  rs[2].ranks = 4, rs[2].tokens_per_s = 300;
  add_rates(rs, 10.0, 2000.0, /*shared_device=*/false);
  EXPECT_DOUBLE_EQ(rs[1].scaling_efficiency, 0.9);
  EXPECT_DOUBLE_EQ(rs[2].scaling_efficiency, 0.75);
  EXPECT_DOUBLE_EQ(rs[2].achieved_flops_per_s, 3000.0);
  EXPECT_DOUBLE_EQ(rs[2].mfu, 3000.0 / (2000.0 * 4));  // one device per rank
  add_rates(rs, 10.0, 2000.0, /*shared_device=*/true);
  EXPECT_DOUBLE_EQ(rs[2].mfu, 3000.0 / 2000.0);        // the ranks share one CPU
}

TEST(ScalingBench, RankListIsCheckedWithItsText) {
  EXPECT_EQ(parse_rank_list("1,2,4"), (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(parse_rank_list("8"), (std::vector<int>{8}));
  for (const char* bad : {"", "0", "1,,2", "1,x", "2,1", "-1", "1,2,"}) EXPECT_THROW(parse_rank_list(bad), Error) << bad;
}

std::string tiny_lora_args(const std::string& out) {
  return test::bin_path("ft_bench") + " " + test::data_path("../../configs/tiny_lora.json") +
         " --set model.path=" + test::data_path("stories260K") +
         " --set data.train=" + test::data_path("datasets/alpaca_train.json") + " --out " + out;
}

TEST(FtBench, RunsBurstsOnOneAndTwoRanksAndWritesJsonAndChart) {
  test::TempDir dir;
  const std::string out = dir.file("bench");
  const test::CommandResult r =
      test::run_command(tiny_lora_args(out) + " --ranks 1,2 --steps 2 --warmup 1", true);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("efficiency"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("GFLOP/s measured"), std::string::npos) << r.output;  // the peak it assumed
  const Json report = parse_json_file(join_path(out, "bench.json"));
  EXPECT_GT(report["peak_flops_per_s"].get<double>(), 1e8);
  EXPECT_GT(report["flops_per_token"].get<double>(), 0);
  ASSERT_EQ(report["results"].size(), 2u);
  EXPECT_DOUBLE_EQ(report["results"][0]["scaling_efficiency"].get<double>(), 1.0);
  for (const Json& row : report["results"]) {
    EXPECT_EQ(row["steps"], 2);
    EXPECT_GT(row["tokens_per_s"].get<double>(), 0);
    EXPECT_GT(row["mfu"].get<double>(), 0);
    EXPECT_LT(row["mfu"].get<double>(), 1);
    EXPECT_GT(row["peak_memory_bytes"].get<std::int64_t>(), 0);
    const Json& t = row["time"];
    const double parts = t["data_wait"].get<double>() + t["compute"].get<double>() +
                         t["communication"].get<double>() + t["optimizer"].get<double>();
    EXPECT_LE(parts, t["step"].get<double>() * 1.001);
  }
  EXPECT_EQ(report["results"][0]["time"]["communication"].get<double>(), 0.0);  // one rank talks to no one
  EXPECT_GT(report["results"][1]["time"]["communication"].get<double>(), 0.0);
  // The bursts leave no checkpoint and no adapter behind (checkpoint.save_at_end=false).
  for (const char* leftover : {"ranks_2/checkpoints", "ranks_2/adapter"})
    EXPECT_FALSE(file_exists(join_path(out, leftover))) << leftover;
  const std::string png = read_file(join_path(out, "bench.png"));
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  // A second run into the same folder replaces its bursts.
  EXPECT_EQ(test::run_command(tiny_lora_args(out) + " --ranks 2 --steps 1 --warmup 0 --no-chart", true).exit_code, 0);
}

TEST(FtBench, BadArgumentsAndFoldersAreRefusedWithTheReason) {
  test::TempDir dir;
  test::CommandResult r = test::run_command(tiny_lora_args(dir.file("b")) + " --ranks 2,1", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("increasing"), std::string::npos) << r.output;
  r = test::run_command(tiny_lora_args(dir.file("b")) + " --steps 0", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--steps"), std::string::npos) << r.output;
  // A folder that is not a bench run is never emptied.
  make_directories(dir.file("mine/ranks_1"));
  write_file_atomic(dir.file("mine/ranks_1/notes.txt"), "keep me");
  r = test::run_command(tiny_lora_args(dir.file("mine")) + " --ranks 1 --steps 1 --no-chart", true);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("not an earlier ft_bench run folder"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(dir.file("mine/ranks_1/notes.txt")), "keep me");
}

}  // namespace
}  // namespace ft::bench
