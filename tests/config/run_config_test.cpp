// lib/config: every rule's message is pinned here, since users read them.
#include <gtest/gtest.h>

#include <filesystem>

#include "config/run_config.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft::config {
namespace {

Json minimal() {
  return parse_json(R"({
    "run_dir": "runs/x",
    "model": {"path": "tests/data/stories260K"},
    "data": {"train": "tests/data/datasets/alpaca_en_demo.json"},
    "lora": {},
    "train": {"global_batch_size": 8, "lr": 1e-3}
  })", "inline");
}

std::string error_of(Json config, const std::vector<std::string>& overrides = {}) {
  try {
    parse_run_config(std::move(config), "cfg.json", overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(RunConfig, DefaultsFillEveryKey) {
  RunConfig c = parse_run_config(minimal(), "cfg.json");
  EXPECT_EQ(c.run_dir, "runs/x");
  EXPECT_EQ(c.data.format, RecordFormat::kAlpaca);
  EXPECT_EQ(c.data.max_seq_len, 512);
  ASSERT_TRUE(c.lora.has_value());
  EXPECT_EQ(c.lora->r, 8);
  EXPECT_EQ(c.lora->target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  EXPECT_EQ(c.parallel.strategy, Strategy::kDdp);
  EXPECT_EQ(c.train.lr_schedule, LrSchedule::kCosine);
  EXPECT_DOUBLE_EQ(c.train.lr, 1e-3);
  // The resolved JSON has every key of the schema (lora included since the section is present).
  for (const auto& k : run_config_schema().keys()) {
    const auto dot = k.path.find('.');
    const Json& v = dot == std::string::npos ? c.resolved[k.path] : c.resolved[k.path.substr(0, dot)][k.path.substr(dot + 1)];
    EXPECT_FALSE(v.is_null()) << k.path;
  }
}

// Found by fuzz_run_config: a config file that is not a JSON object, with --set, threw
// nlohmann's type_error past every handler.
TEST(RunConfig, OverrideOnAConfigThatIsNotAnObjectIsAnError) {
  for (const Json& bad : {Json("text"), Json::array({1, 2}), Json(3)})
    EXPECT_FT_ERROR(config::parse_run_config(bad, "x.json", {"train.lr=0.001"}), "not a JSON object");
}

TEST(RunConfig, NoLoraSectionMeansFullFineTune) {
  Json j = minimal();
  j.erase("lora");
  RunConfig c = parse_run_config(j, "cfg.json");
  EXPECT_FALSE(c.lora.has_value());
  EXPECT_FALSE(c.resolved.contains("lora"));
}

TEST(RunConfig, EveryErrorAtOnceWithPathExpectedAndFound) {
  Json j = minimal();
  j["train"]["lr"] = "2e-5x";
  j["train"]["learning_rate"] = 1;
  j["data"]["max_seq_len"] = 0;
  j["parallel"] = {{"strategy", "zero4"}};
  j["model"].erase("path");
  const std::string e = error_of(j);
  EXPECT_NE(e.find("cfg.json: 5 errors in the config:"), std::string::npos) << e;
  EXPECT_NE(e.find("train.lr: expected a number > 0, got \"2e-5x\" (a string)"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key train.learning_rate, did you mean train.lr?"), std::string::npos) << e;
  EXPECT_NE(e.find("data.max_seq_len: expected an integer >= 1, got 0"), std::string::npos) << e;
  EXPECT_NE(e.find("parallel.strategy: expected one of \"ddp\", \"zero1\", \"zero2\", \"fsdp\", got \"zero4\" (a string)"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("missing required key model.path (Hugging Face model folder)"), std::string::npos) << e;
}

TEST(RunConfig, DidYouMean) {
  auto hint = [](const char* key) {
    Json j = minimal();
    const std::string path = key;
    const auto dot = path.find('.');
    j[path.substr(0, dot)][path.substr(dot + 1)] = 1;
    return error_of(j);
  };
  EXPECT_NE(hint("train.learning_rate").find("did you mean train.lr?"), std::string::npos);
  EXPECT_NE(hint("train.warmup_step").find("did you mean train.warmup_steps?"), std::string::npos);
  EXPECT_NE(hint("train.num_train_epochs").find("did you mean train.epochs?"), std::string::npos);
  EXPECT_NE(hint("lora.lora_alpha").find("did you mean lora.alpha?"), std::string::npos);
  EXPECT_NE(hint("trian.lr").find("unknown key trian, did you mean train?"), std::string::npos);
  EXPECT_NE(hint("data.max_seq_length").find("did you mean data.max_seq_len?"), std::string::npos);
  std::string none = hint("data.zzzzzzzz");
  EXPECT_NE(none.find("unknown key data.zzzzzzzz"), std::string::npos);
  EXPECT_EQ(none.find("did you mean"), std::string::npos) << none;
}

TEST(RunConfig, WrongTypesAndRanges) {
  auto e = [](const char* section, const char* k, Json v) {
    Json j = minimal();
    j[section][k] = v;
    return error_of(j);
  };
  EXPECT_NE(e("train", "epochs", 1.5).find("train.epochs: expected an integer >= 1, got 1.5"), std::string::npos);
  EXPECT_NE(e("lora", "dropout", 1.0).find("lora.dropout: expected a number in [0, 0.999], got 1.0"), std::string::npos);
  EXPECT_NE(e("data", "packing", "yes").find("data.packing: expected true or false, got \"yes\" (a string)"),
            std::string::npos);
  EXPECT_NE(e("lora", "target_modules", Json({"q_proj", "qkv"})).find("lora.target_modules: unknown module \"qkv\""),
            std::string::npos);
  EXPECT_NE(e("lora", "target_modules", "all").find("lora.target_modules: expected a list of strings or one of \"all-linear\""),
            std::string::npos);
  EXPECT_NE(e("train", "micro_batch_size", 16).find("train.micro_batch_size: 16 is larger than train.global_batch_size 8"),
            std::string::npos);
  Json j = minimal();
  j["train"] = 3;
  EXPECT_NE(error_of(j).find("train: expected a section (an object), got 3"), std::string::npos) << error_of(j);
  Json d = minimal();
  d["model"]["dtype"] = "bf16";
  EXPECT_NE(error_of(d).find("model.dtype: \"bf16\" differs from train.precision \"fp32\""), std::string::npos);
  Json q = minimal();
  q.erase("lora");
  q["model"]["quantize"] = "nf4";
  EXPECT_NE(error_of(q).find("model.quantize: a quantized base needs a lora section"), std::string::npos);
  EXPECT_NE(e("train", "offload_activations", true)
                .find("train.offload_activations: offloads the inputs activation checkpointing keeps; set "
                      "train.activation_checkpointing to true as well"),
            std::string::npos);
}

TEST(RunConfig, SetOverrides) {
  RunConfig c = parse_run_config(minimal(), "cfg.json",
                                 {"train.lr=3e-4", "data.packing=true", "run_dir=42", "lora.target_modules=all-linear",
                                  "lora.target_modules=[\"q_proj\",\"k_proj\"]"});
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);
  EXPECT_TRUE(c.data.packing);
  EXPECT_EQ(c.run_dir, "42");  // string keys take the text as it is
  EXPECT_EQ(c.lora->target_modules, (std::vector<std::string>{"q_proj", "k_proj"}));
  EXPECT_NE(error_of(minimal(), {"train.lrr=1"}).find("--set train.lrr=1: unknown key train.lrr, did you mean train.lr?"),
            std::string::npos);
  EXPECT_NE(error_of(minimal(), {"train.lr"}).find("--set train.lr: expected key.path=value"), std::string::npos);
  EXPECT_NE(error_of(minimal(), {"train.lr=fast"}).find("train.lr: expected a number > 0, got \"fast\" (a string)"),
            std::string::npos);
}

// --set VALUE is any JSON value, commas and all; strings need no quotes unless they would read
// as something else.
TEST(RunConfig, SetTakesAnyJsonValue) {
  const Json object = {{"base", "alpaca"}, {"prompt", "Q: {instruction}, briefly\n"}};
  RunConfig c = parse_run_config(minimal(), "cfg.json",
                                 {"lora.target_modules=[\"q_proj\", \"v_proj\",\"down_proj\"]",
                                  "data.template=" + object.dump(), "run_dir=runs/a,b c", "model.path=\"quoted, path\""});
  EXPECT_EQ(c.lora->target_modules, (std::vector<std::string>{"q_proj", "v_proj", "down_proj"}));
  EXPECT_EQ(c.data.template_spec, object);
  EXPECT_EQ(c.run_dir, "runs/a,b c");       // a string key takes any text as it is
  EXPECT_EQ(c.model.path, "quoted, path");  // or a JSON string, unquoted

  // Not JSON and not a plain word: the error quotes the value and shows how to write a list.
  const std::string broken = error_of(minimal(), {"lora.target_modules=[\"q_proj\",\"v_proj\""});
  EXPECT_NE(broken.find("--set lora.target_modules=[\"q_proj\",\"v_proj\": the value '[\"q_proj\",\"v_proj\"' is neither "
                        "JSON nor a plain word"),
            std::string::npos)
      << broken;
  EXPECT_NE(broken.find("--set 'lora.target_modules=[\"q_proj\",\"v_proj\"]'"), std::string::npos) << broken;
  EXPECT_NE(error_of(minimal(), {"lora.target_modules=q_proj,v_proj"}).find("neither JSON nor a plain word"),
            std::string::npos);
  EXPECT_NE(error_of(minimal(), {"data.template={base: alpaca}"}).find("'{base: alpaca}' is neither JSON"),
            std::string::npos);
}

TEST(RunConfig, FileErrors) {
  test::TempDir dir;
  write_file_atomic(dir.file("bad.json"), "{\n \"run_dir\": \"x\",\n}");
  EXPECT_FT_ERROR(load_run_config(dir.file("bad.json")), "bad.json: invalid JSON at line 3");
  EXPECT_FT_ERROR(load_run_config(dir.file("none.json")), "none.json: cannot open");
}

TEST(GradientAccumulation, DerivedNeverGuessed) {
  EXPECT_EQ(gradient_accumulation_steps(64, 4, 8), 2);
  EXPECT_EQ(gradient_accumulation_steps(8, 1, 1), 8);
  EXPECT_FT_ERROR(gradient_accumulation_steps(60, 4, 8),
                  "train.global_batch_size 60 is not a multiple of train.micro_batch_size 4 x 8 ranks = 32: use a global "
                  "batch of 32 or 64");
  EXPECT_FT_ERROR(gradient_accumulation_steps(12, 5, 2), "or a micro-batch of 1, 2, 3, 6");
  EXPECT_FT_ERROR(gradient_accumulation_steps(3, 1, 2), "use a global batch of 2 or 4");
}

TEST(ConfigHash, SameConfigSameHash) {
  RunConfig a = parse_run_config(minimal(), "a");
  RunConfig b = parse_run_config(minimal(), "b");
  RunConfig c = parse_run_config(minimal(), "c", {"train.lr=0.5"});
  EXPECT_EQ(config_hash(a.resolved), config_hash(b.resolved));
  EXPECT_NE(config_hash(a.resolved), config_hash(c.resolved));
}

}  // namespace
}  // namespace ft::config

namespace ft::config {
namespace {

// Every shipped config is valid: a typo in configs/ would otherwise surface only on a GPU box.
TEST(RunConfig, EveryShippedConfigParses) {
  const std::filesystem::path dir = std::filesystem::path(test::data_path("")) / ".." / ".." / "configs";
  std::size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().string());
    const RunConfig c = load_run_config(entry.path().string());
    // The real-model configs are for 8 ranks, the tiny ones for the 2 of scripts/demo.sh.
    const std::int64_t ranks = entry.path().filename().string().rfind("llama", 0) == 0 ? 8 : 2;
    EXPECT_GT(gradient_accumulation_steps(c.train.global_batch_size, c.train.micro_batch_size, ranks), 0);
    ++count;
  }
  EXPECT_GE(count, 7u);
}

}  // namespace
}  // namespace ft::config
