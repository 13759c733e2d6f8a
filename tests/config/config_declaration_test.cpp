// Every config key is declared once (config/run_config.cpp). What comes from that declaration
// must agree with it: the member initializers of RunConfig (for code that builds one by hand),
// the resolved JSON, and docs/config.md's key table, which must be exactly the table the
// declaration prints (regenerate it from the expected text this test prints on failure).
#include <gtest/gtest.h>

#include "config/run_config.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft::config {
namespace {

TEST(ConfigDeclaration, StructDefaultsEqualTheDeclaredDefaults) {
  const Json from_struct = default_struct_values();
  std::size_t checked = 0;
  for (const KeySpec& key : run_config_schema().keys()) {
    if (!key.default_value) continue;
    ASSERT_TRUE(from_struct.contains(key.path)) << key.path;
    EXPECT_EQ(from_struct[key.path], *key.default_value) << key.path << ": the member initializer in run_config.h "
                                                         << "says " << from_struct[key.path].dump();
    ++checked;
  }
  EXPECT_GT(checked, 50u);
}

TEST(ConfigDeclaration, ParsedValuesLandInTheirMembers) {
  // Every key set to a non-default value lands in the struct: the resolved JSON and the struct agree.
  const RunConfig c = parse_run_config(
      Json::parse(R"({"run_dir": "r", "model": {"path": "m", "dtype": "bf16", "attention": "eager"},
                      "data": {"train": "t.jsonl", "format": "sharegpt", "too_long": "drop", "prefetch": 5},
                      "lora": {"r": 4, "dropout": 0.0, "target_modules": "all-linear"},
                      "parallel": {"strategy": "zero2", "backend": "gloo", "grad_comm_dtype": "bf16"},
                      "train": {"global_batch_size": 8, "lr": 0.001, "precision": "bf16", "loss_scale": "dynamic",
                                "on_nonfinite": "skip", "seed": 7},
                      "checkpoint": {"resume": "none"}})"),
      "test");
  EXPECT_EQ(c.model.dtype, WeightDtype::kBf16);
  EXPECT_EQ(c.model.attention, "eager");
  EXPECT_EQ(c.data.format, RecordFormat::kShareGpt);
  EXPECT_EQ(c.data.too_long, TooLong::kDrop);
  EXPECT_EQ(c.data.prefetch, 5);
  ASSERT_TRUE(c.lora);
  EXPECT_EQ(c.lora->r, 4);
  EXPECT_EQ(c.lora->dropout, 0.0);
  EXPECT_EQ(c.lora->target_modules, std::vector<std::string>{"all-linear"});
  EXPECT_EQ(c.parallel.strategy, Strategy::kZero2);
  EXPECT_EQ(c.parallel.backend, Backend::kGloo);
  EXPECT_EQ(c.parallel.grad_comm_dtype, Precision::kBf16);
  EXPECT_EQ(c.train.precision, Precision::kBf16);
  EXPECT_EQ(c.train.loss_scale, LossScaling::kDynamic);
  EXPECT_TRUE(uses_loss_scaling(c.train));
  EXPECT_EQ(c.train.on_nonfinite, OnNonfinite::kSkip);
  EXPECT_EQ(c.train.seed, 7u);
  EXPECT_EQ(c.checkpoint.resume, ResumeMode::kNone);
  EXPECT_EQ(c.resolved["parallel"]["strategy"], "zero2");
}

TEST(ConfigDeclaration, ChoicesComeFromTheEnums) {
  EXPECT_EQ(run_config_schema().find("parallel.strategy")->choices, choice_names<Strategy>());
  EXPECT_EQ(run_config_schema().find("train.precision")->choices, choice_names<Precision>());
  EXPECT_EQ(parse_choice<Strategy>("fsdp", "parallel.strategy"), Strategy::kFsdp);
  EXPECT_THROW(parse_choice<Strategy>("zero3", "parallel.strategy"), Error);
}

TEST(ConfigDeclaration, LossScalingIsOnForFp16OrWhenAsked) {
  TrainConfig t;
  EXPECT_FALSE(uses_loss_scaling(t));
  t.precision = Precision::kFp16;
  EXPECT_TRUE(uses_loss_scaling(t));
  t.loss_scale = LossScaling::kNone;
  EXPECT_FALSE(uses_loss_scaling(t));
  t.precision = Precision::kBf16;
  t.loss_scale = LossScaling::kDynamic;
  EXPECT_TRUE(uses_loss_scaling(t));
}

TEST(ConfigDeclaration, DocsKeyTableIsTheDeclaration) {
  const std::string path = test::data_path("../../docs/config.md");
  const std::string doc = read_file(path);
  const std::string begin = "<!-- config-keys:begin -->\n", end = "<!-- config-keys:end -->";
  const auto b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << path << " has no " << begin;
  ASSERT_NE(e, std::string::npos) << path << " has no " << end;
  const std::string table = doc.substr(b + begin.size(), e - b - begin.size());
  EXPECT_EQ(table, config_key_table()) << "docs/config.md's key table differs from the declaration in "
                                          "lib/config/run_config.cpp; the table it declares:\n"
                                       << config_key_table();
}

}  // namespace
}  // namespace ft::config
