// The first commands a user types on a shipped config, as programs: every missing input listed at
// once before any other output, and --set values that are whole JSON values on the command line.
#include <gtest/gtest.h>

#include "test_support.h"
#include "util/file_util.h"
#include "util/json.h"

namespace ft {
namespace {

std::string repo_root() { return test::data_path("../.."); }

// Runs a program from a folder that has none of the shipped configs' files (a new machine).
test::CommandResult run_in_empty_folder(const std::string& program, const std::string& args) {
  static test::TempDir empty;
  return test::run_command("cd " + empty.path() + " && " + test::bin_path(program) + " " + args, true);
}

TEST(RunInputs, EveryMissingInputOfAShippedConfigInOneErrorBeforeAnyOutput) {
  const auto r = run_in_empty_folder("ft_train", repo_root() + "/configs/llama13b_zero2.json");
  EXPECT_EQ(r.exit_code, 1);
  // Nothing before the error: no resolved config, no start-up lines.
  EXPECT_EQ(r.output.rfind("ft_train: error: " + repo_root() + "/configs/llama13b_zero2.json: 3 inputs are missing", 0), 0u)
      << r.output;
  for (const char* part : {"model.path: models/Llama-2-13b-hf: the folder does not exist; expected a Hugging Face model "
                           "folder: config.json, tokenizer.json or tokenizer.model, and model.safetensors",
                           "huggingface-cli download ORG/NAME --local-dir models/Llama-2-13b-hf",
                           "data.train: data/train.json: not there; expected a dataset",
                           "data.eval: data/eval.json: not there", "--set model.path="}) {
    EXPECT_NE(r.output.find(part), std::string::npos) << part << "\n" << r.output;
  }
}

TEST(RunInputs, AModelFolderWithoutWeightsOrTokenizerAndAMissingAdapter) {
  test::TempDir dir;
  make_directories(dir.file("model"));
  write_file_atomic(dir.file("model/config.json"), read_file(test::data_path("stories260K/config.json")));
  write_file_atomic(dir.file("train.jsonl"), "{\"instruction\": \"a\", \"output\": \"b\"}\n");
  const Json config = {{"run_dir", dir.file("run")},
                       {"model", {{"path", dir.file("model")}}},
                       {"data", {{"train", dir.file("train.jsonl")}}},
                       {"lora", {{"init_from", dir.file("old_adapter")}}},
                       {"train", {{"global_batch_size", 1}, {"lr", 1e-3}}}};
  write_file_atomic(dir.file("config.json"), config.dump());
  const auto train = test::run_command(test::bin_path("ft_train") + " " + dir.file("config.json"), true);
  EXPECT_EQ(train.exit_code, 1);
  for (const std::string& part :
       {std::string("4 inputs are missing"), dir.file("model/tokenizer.model") + ": not there",
        dir.file("model/model.safetensors") + ": neither it nor model.safetensors.index.json is there",
        "lora.init_from: " + dir.file("old_adapter/adapter_config.json"),
        "lora.init_from: " + dir.file("old_adapter/adapter_model.safetensors")}) {
    EXPECT_NE(train.output.find(part), std::string::npos) << part << "\n" << train.output;
  }
  EXPECT_EQ(train.output.find("data.train: "), std::string::npos) << train.output;  // that one is there
  EXPECT_FALSE(file_exists(dir.file("run")));  // no work was done
  // ft_prep tokenizes: it needs the tokenizer, not the weights.
  const auto prep = test::run_command(test::bin_path("ft_prep") + " " + dir.file("config.json"), true);
  EXPECT_EQ(prep.exit_code, 1);
  EXPECT_NE(prep.output.find("3 inputs are missing"), std::string::npos) << prep.output;
  EXPECT_EQ(prep.output.find(dir.file("model/model.safetensors")), std::string::npos) << prep.output;
}

// cxxopts splits a vector option's values at commas; --set takes each value whole.
TEST(SetOnTheCommandLine, ListsObjectsAndCommasReachTheConfigWhole) {
  const std::string plan = "cd " + repo_root() + " && " + test::bin_path("ft_plan") + " configs/tiny_lora.json --json ";
  const auto qv = test::run_command(plan + "--set 'lora.target_modules=[\"q_proj\",\"v_proj\"]'", true);
  ASSERT_EQ(qv.exit_code, 0) << qv.output;
  // stories260K: 5 layers, dim 64, 4 KV heads of 8; r 8: q 8 x (64 + 64), v 8 x (64 + 32).
  EXPECT_EQ(parse_json(qv.output, "ft_plan --json")["lora_parameters"], 5 * (8 * 128 + 8 * 96));
  const auto templ = test::run_command(
      plan + "--set 'data.template={\"base\": \"alpaca\", \"prompt\": \"Q: {instruction}, A:\"}' --set 'run_dir=runs/a, b'",
      true);
  EXPECT_EQ(templ.exit_code, 0) << templ.output;
  const auto broken = test::run_command(plan + "--set 'lora.target_modules=[\"q_proj\",'", true);
  EXPECT_EQ(broken.exit_code, 1);
  EXPECT_NE(broken.output.find("--set lora.target_modules=[\"q_proj\",: the value '[\"q_proj\",' is neither JSON nor a "
                               "plain word"),
            std::string::npos)
      << broken.output;
}

}  // namespace
}  // namespace ft
