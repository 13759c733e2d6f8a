// The training loop end to end on the real TinyStories model and the bundled alpaca data:
// the loss falls, runs are bitwise reproducible, gradient accumulation is exact thanks to the
// per-step token normalization, non-finite steps stop or are skipped, and the outputs exist.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "config/run_config.h"
#include "comm/communicator.h"
#include "io/peft_adapter.h"
#include "model/model_loader.h"
#include "test_support.h"
#include "train/trainer.h"
#include "util/file_util.h"

namespace ft::train {
namespace {

// A short LoRA run: 64-token samples, 8 steps of 8 sequences.
Json tiny(const std::string& run_dir) {
  return {{"run_dir", run_dir},
          {"model", {{"path", test::data_path("stories260K")}}},
          {"data", {{"train", test::data_path("datasets/alpaca_train.json")},
                    {"eval", test::data_path("datasets/alpaca_eval.jsonl")},
                    {"max_seq_len", 64},
                    {"template", {{"base", "alpaca"}, {"prompt", "{instruction}\n"}, {"prompt_with_input", "{instruction}\n{input}\n"}}}}},
          {"lora", {{"r", 4}, {"alpha", 8}, {"dropout", 0.0}, {"target_modules", "all-linear"}}},
          {"train", {{"global_batch_size", 8}, {"micro_batch_size", 2}, {"max_steps", 8}, {"lr", 1e-2},
                     {"warmup_steps", 0}, {"threads", 1}}},
          {"log", {{"every_steps", 1}}}};
}

using test::read_metrics;
const auto& losses = test::metric_losses;

TrainSummary train(const Json& config, const std::vector<std::string>& overrides = {}) {
  auto comm = comm::make_single_process_communicator();
  return run_training(config::parse_run_config(config, "test config", overrides), *comm);
}

TEST(Trainer, LoraRunLowersEvalLossAndWritesOutputs) {
  test::TempDir dir;
  TrainSummary s = train(tiny(dir.path()), {"train.max_steps=20"});
  EXPECT_EQ(s.steps, 20);
  EXPECT_LT(s.final_eval_loss, s.first_eval_loss - 0.2) << s.first_eval_loss << " -> " << s.final_eval_loss;
  auto metrics = read_metrics(dir.path());
  const Json& first_step = metrics[1];  // metrics[0] is the evaluation before training
  for (const char* key : {"step", "epoch", "loss", "lr", "grad_norm", "tokens_per_s", "samples_per_s", "time",
                          "peak_memory_bytes", "skipped"})
    EXPECT_TRUE(first_step.contains(key)) << key;
  for (const char* key : {"data_wait", "compute", "communication", "optimizer"})
    EXPECT_TRUE(first_step["time"].contains(key)) << key;
  EXPECT_TRUE(metrics.front().contains("eval_loss") && metrics.back().contains("eval_ppl"));
  // Outputs: the resolved config and a PEFT adapter.
  Json resolved = parse_json_file(join_path(dir.path(), "config.json"));
  EXPECT_EQ(resolved["train"]["max_steps"], 20);
  io::PeftAdapter adapter = io::read_peft_adapter(join_path(dir.path(), "adapter"));
  EXPECT_EQ(adapter.config.r, 4);
  EXPECT_EQ(adapter.tensors.size(), 5u * 7u * 2u);
}

// ft_bench's bursts: the steps and their metrics, but no last-step checkpoint and no adapter; a
// periodic checkpoint the config asks for is still written.
TEST(Trainer, SaveAtEndFalseWritesNoFinalCheckpointOrAdapter) {
  test::TempDir dir;
  TrainSummary s = train(tiny(dir.path()), {"train.max_steps=3", "checkpoint.every_steps=2", "checkpoint.save_at_end=false"});
  EXPECT_EQ(s.steps, 3);
  EXPECT_EQ(losses(read_metrics(dir.path())).size(), 3u);
  EXPECT_FALSE(file_exists(join_path(dir.path(), "adapter")));
  EXPECT_FALSE(file_exists(join_path(dir.path(), "model")));
  EXPECT_TRUE(file_exists(join_path(dir.path(), "checkpoints/step_000002/manifest.json")));
  EXPECT_FALSE(file_exists(join_path(dir.path(), "checkpoints/step_000003")));
}

TEST(Trainer, SameConfigTwiceIsBitwiseIdentical) {
  test::TempDir a, b;
  train(tiny(a.path()));
  train(tiny(b.path()));
  auto la = losses(read_metrics(a.path())), lb = losses(read_metrics(b.path()));
  ASSERT_EQ(la.size(), 8u);
  EXPECT_EQ(la, lb);  // exact equality of every logged loss
  EXPECT_EQ(read_file(join_path(a.path(), "adapter/adapter_model.safetensors")),
            read_file(join_path(b.path(), "adapter/adapter_model.safetensors")));
}

TEST(Trainer, AccumulationEqualsOneBigMicroBatch) {
  // 8 sequences per step as 4 micro-batches of 2, or 1 of 8: the same loss normalization (by the
  // target tokens of the whole step), so the same curve up to float summation order.
  test::TempDir a, b;
  train(tiny(a.path()), {"train.micro_batch_size=2"});
  train(tiny(b.path()), {"train.micro_batch_size=8"});
  auto la = losses(read_metrics(a.path())), lb = losses(read_metrics(b.path()));
  ASSERT_EQ(la.size(), lb.size());
  for (std::size_t i = 0; i < la.size(); ++i) EXPECT_NEAR(la[i], lb[i], 1e-5 * std::abs(lb[i])) << "step " << i + 1;
}

TEST(Trainer, NonFiniteLossStopsOrSkips) {
  test::TempDir a, b;
  // An absurd learning rate drives the weights to Inf within a few steps.
  EXPECT_FT_ERROR(train(tiny(a.path()), {"train.lr=1e30", "train.grad_clip=0"}), "stopping before it reaches the weights");
  TrainSummary s = train(tiny(b.path()), {"train.lr=1e30", "train.grad_clip=0", "train.on_nonfinite=skip"});
  EXPECT_GT(s.skipped_steps, 0);
  auto metrics = read_metrics(b.path());
  bool any_skipped = false;
  for (const Json& m : metrics)
    if (m.contains("skipped") && m["skipped"].get<bool>()) any_skipped = true;
  EXPECT_TRUE(any_skipped);
}

TEST(Trainer, FullFineTuneWritesAModelFtGenerateLoads) {
  test::TempDir dir;
  Json config = tiny(dir.path());
  config.erase("lora");
  TrainSummary s = train(config, {"train.lr=1e-3", "train.max_steps=10"});
  EXPECT_LT(s.final_eval_loss, s.first_eval_loss);
  auto tuned = model::load_llama(join_path(dir.path(), "model"));
  auto base = model::load_llama(test::data_path("stories260K"));
  EXPECT_EQ(tuned->named_parameters().size(), base->named_parameters().size());  // tied: no lm_head
  torch::NoGradGuard g;
  auto ids = torch::tensor({1, 403, 407}).unsqueeze(0);
  EXPECT_GT(test::max_abs_diff(tuned(ids), base(ids)), 1e-3);
  auto r = test::run_command(test::bin_path("ft_generate") + " --threads 1 --model " + join_path(dir.path(), "model") +
                             " --prompt 'Once' --temperature 0 --max-new-tokens 5");
  EXPECT_EQ(r.exit_code, 0);
}

TEST(Trainer, ContinuesFromAnAdapter) {
  // lora.init_from: the second run starts where the first ended (same eval loss before training).
  test::TempDir a, b;
  TrainSummary first = train(tiny(a.path()));
  TrainSummary second = train(tiny(b.path()), {"lora.init_from=" + join_path(a.path(), "adapter"), "train.max_steps=1"});
  EXPECT_NEAR(second.first_eval_loss, first.final_eval_loss, 1e-6);
  EXPECT_LT(first.final_eval_loss, first.first_eval_loss);
}

// Plain text the model knows well, then a batch of noise: with train.skip_spikes the noise step
// (loss and gradient norm far above the previous steps) is skipped and counted, the others are
// not; without it nothing is skipped.
TEST(Trainer, SkipSpikesSkipsANoiseBatch) {
  test::TempDir dir;
  std::string lines;
  for (int i = 0; i < 40; ++i)
    lines += Json{{"text", "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."}}.dump() + "\n";
  std::uint32_t x = 12345;
  for (int i = 0; i < 8; ++i) {
    std::string noise;
    for (int k = 0; k < 80; ++k) {
      x = x * 1103515245u + 12345u;
      noise += static_cast<char>('!' + (x >> 16) % 90);
    }
    lines += Json{{"text", noise}}.dump() + "\n";
  }
  write_file_atomic(dir.file("data.jsonl"), lines);
  Json c = tiny(dir.file("run"));
  c["data"] = {{"train", dir.file("data.jsonl")}, {"format", "text"}, {"max_seq_len", 64}, {"shuffle", false}};
  c["train"]["max_steps"] = 6;
  c["train"]["micro_batch_size"] = 8;
  c["train"]["lr"] = 1e-3;
  auto skipped_steps = [&](const std::vector<std::string>& overrides) {
    train(c, overrides);
    std::vector<std::int64_t> out;
    for (const Json& m : read_metrics(dir.file("run")))
      if (m.contains("skipped") && m["skipped"].get<bool>()) out.push_back(m["step"].get<std::int64_t>());
    remove_tree(dir.file("run"));
    return out;
  };
  EXPECT_EQ(skipped_steps({"train.skip_spikes=true", "train.spike_window=8", "train.spike_sigma=6"}),
            std::vector<std::int64_t>{6});
  EXPECT_EQ(skipped_steps({}), std::vector<std::int64_t>{});
}

// The quantized base is rebuilt from the weights on resume, deterministically: a resumed NF4
// run continues the uninterrupted one exactly.
TEST(Trainer, QuantizedBaseRunResumesExactly) {
  test::TempDir a, b;
  const std::vector<std::string> overrides = {"model.quantize=nf4", "checkpoint.every_steps=4"};
  train(tiny(a.path()), overrides);
  EXPECT_TRUE(file_exists(join_path(a.path(), "quantization.json")));
  auto comm = comm::make_single_process_communicator();
  ResumeOptions resume;
  resume.path = join_path(a.path(), "checkpoints/step_000004");
  TrainSummary s = run_training(config::parse_run_config(tiny(b.path()), "test config", overrides), *comm, c10::kCPU, resume);
  EXPECT_EQ(s.resumed_from_step, 4);
  auto la = losses(read_metrics(a.path())), lb = losses(read_metrics(b.path()));
  ASSERT_EQ(la.size(), 8u);
  ASSERT_EQ(lb.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(lb[i], la[4 + i]) << "step " << 5 + i;
  EXPECT_EQ(read_file(join_path(a.path(), "adapter/adapter_model.safetensors")),
            read_file(join_path(b.path(), "adapter/adapter_model.safetensors")));
}

// A run_dir that is not a run folder (here: the model's own folder) is refused before anything
// in it is overwritten.
TEST(Trainer, RunDirThatIsNotARunFolderIsRefused) {
  test::TempDir dir;
  const std::string model_copy = dir.file("model");
  std::filesystem::copy(test::data_path("stories260K"), model_copy);
  const std::string before = read_file(model_copy + "/config.json");
  Json config = tiny(model_copy);
  config["model"]["path"] = model_copy;
  EXPECT_FT_ERROR(train(config), "run_dir " + model_copy + " is not a run folder: its config.json is not a run config");
  EXPECT_EQ(read_file(model_copy + "/config.json"), before);
  EXPECT_FALSE(file_exists(model_copy + "/metrics.jsonl"));
  write_file_atomic(dir.file("a_file"), "x");
  EXPECT_FT_ERROR(train(tiny(dir.file("a_file"))), "exists and is not a folder");
}

TEST(Trainer, ActivationCheckpointingGivesTheSameLosses) {
  // Recomputing each layer in backward runs the same kernels on the same inputs (dropout masks
  // replayed), so the curves agree. They are bitwise equal on this CPU, as the gradients are in
  // tests/model/activation_checkpoint_test.cpp; 1e-6 relative leaves room for kernels that are
  // not run-to-run deterministic elsewhere. LoRA with dropout (RNG replay, frozen base) and a full
  // fine-tune (every parameter's gradient through the recomputation).
  for (const bool lora : {true, false}) {
    test::TempDir a, b;
    Json config = tiny(a.path());
    std::vector<std::string> overrides = {"train.max_steps=4"};
    if (lora) {
      overrides.push_back("lora.dropout=0.1");
    } else {
      config.erase("lora");
      overrides.push_back("train.lr=1e-3");
    }
    // Dropout masks are drawn from the default generator, which the trainer seeds from train.seed.
    train(config, overrides);
    config["run_dir"] = b.path();
    overrides.push_back("train.activation_checkpointing=true");
    torch::manual_seed(1234);  // whatever the generator held before, the run starts from train.seed
    train(config, overrides);
    auto la = losses(read_metrics(a.path())), lb = losses(read_metrics(b.path()));
    ASSERT_EQ(la.size(), 4u);
    ASSERT_EQ(lb.size(), 4u);
    for (std::size_t i = 0; i < la.size(); ++i)
      EXPECT_NEAR(lb[i], la[i], 1e-6 * std::abs(la[i])) << (lora ? "LoRA" : "full") << ", step " << i + 1;
    // Evaluation (no grad) runs the layers plainly.
    const auto ea = read_metrics(a.path()).back(), eb = read_metrics(b.path()).back();
    EXPECT_NEAR(eb["eval_loss"].get<double>(), ea["eval_loss"].get<double>(), 1e-6 * ea["eval_loss"].get<double>());
  }
}

TEST(Trainer, ChunkedLossGivesTheSameLosses) {
  // train.loss_chunk_tokens: the head and the cross-entropy over chunks of 7 target tokens (not
  // dividing a micro-batch's targets) against full logits (0). The losses and gradients agree to
  // fp32 rounding (tests/model/chunked_loss_test.cpp: ~1e-7); four AdamW steps carry such
  // differences on without amplifying them past 1e-5. LoRA (frozen head) and a full fine-tune
  // (the tied embedding's gradient through the head), training and evaluation.
  for (const bool lora : {true, false}) {
    test::TempDir a, b;
    Json config = tiny(a.path());
    std::vector<std::string> overrides = {"train.max_steps=4", "train.loss_chunk_tokens=0"};
    if (!lora) {
      config.erase("lora");
      overrides.push_back("train.lr=1e-3");
    }
    train(config, overrides);
    config["run_dir"] = b.path();
    overrides.push_back("train.loss_chunk_tokens=7");
    train(config, overrides);
    auto la = losses(read_metrics(a.path())), lb = losses(read_metrics(b.path()));
    ASSERT_EQ(la.size(), 4u);
    ASSERT_EQ(lb.size(), 4u);
    for (std::size_t i = 0; i < la.size(); ++i)
      EXPECT_NEAR(lb[i], la[i], 1e-5 * std::abs(la[i])) << (lora ? "LoRA" : "full") << ", step " << i + 1;
    const auto ea = read_metrics(a.path()).back(), eb = read_metrics(b.path()).back();
    EXPECT_NEAR(eb["eval_loss"].get<double>(), ea["eval_loss"].get<double>(), 1e-5 * ea["eval_loss"].get<double>());
  }
}

TEST(Trainer, DynamicLossScalingChangesNothingInFp32AndGrowsTheScale) {
  // Scaling by a power of two is exact in fp32, so the curve is bitwise the unscaled one.
  test::TempDir a, b, c;
  train(tiny(a.path()));
  train(tiny(b.path()), {"train.loss_scale=dynamic"});
  EXPECT_EQ(losses(read_metrics(a.path())), losses(read_metrics(b.path())));
  // The scale grows after every growth_interval good steps (here 2) and the metrics show it.
  // fp32 gradients do not overflow even at 2^127, and fp16 does not compute on CPU, so the
  // overflow path (skip on every rank, back off) is checked against GradScaler in
  // tests/optim/loss_scaler_test.cpp; the trainer decides it from the all-reduced gradient norm.
  train(tiny(c.path()), {"train.loss_scale=dynamic", "train.loss_scale_init=1", "train.loss_scale_growth_interval=2"});
  std::vector<double> scales;
  for (const Json& m : read_metrics(c.path())) {
    if (!m.contains("loss_scale")) continue;
    scales.push_back(m["loss_scale"]);
    EXPECT_FALSE(m["skipped"].get<bool>());
  }
  EXPECT_EQ(scales, (std::vector<double>{1, 1, 2, 2, 4, 4, 8, 8}));
  EXPECT_EQ(losses(read_metrics(c.path())), losses(read_metrics(a.path())));
}

// A config.json whose vocab_size is below the tokenizer's ids is refused before any training
// (the embedding would have no row for the larger ids).
TEST(Trainer, VocabSizeSmallerThanTheTokenizerIsRefusedBeforeTraining) {
  test::TempDir dir;
  const std::string model = dir.file("model");
  std::filesystem::create_directories(model);
  for (const char* file : {"model.safetensors", "tokenizer.model"})
    std::filesystem::copy_file(test::data_path(std::string("stories260K/") + file), join_path(model, file));
  Json config = parse_json_file(test::data_path("stories260K/config.json"));
  config["vocab_size"] = 300;
  write_file_atomic(join_path(model, "config.json"), config.dump(2));
  Json run = tiny(dir.file("run"));
  run["model"]["path"] = model;
  EXPECT_FT_ERROR(train(run), model + "/config.json: vocab_size 300 is smaller than the tokenizer's 512 ids (" + model +
                                  "/tokenizer.model)");
  EXPECT_FALSE(file_exists(dir.file("run/metrics.jsonl")));
}

TEST(Trainer, GlobalBatchThatDoesNotDivideIsAnError) {
  test::TempDir dir;
  EXPECT_FT_ERROR(train(tiny(dir.path()), {"train.global_batch_size=7", "train.micro_batch_size=2"}),
                  "train.global_batch_size 7 is not a multiple of train.micro_batch_size 2");
}

}  // namespace
}  // namespace ft::train

namespace ft::train {
namespace {

// The second bundled model end to end: a Qwen2 (q/k/v biases, tied head) whose tokenizer is a
// tokenizer.json, LoRA on ShareGPT conversations through the chat format "auto" picks (chatml).
TEST(Trainer, Qwen2WithTokenizerJsonLoraOnShareGpt) {
  test::TempDir dir;
  Json config = tiny(dir.path());
  config["model"]["path"] = test::data_path("qwen2-tiny");
  config["data"] = {{"train", test::data_path("datasets/alpaca_sharegpt.jsonl")},
                    {"eval", test::data_path("datasets/alpaca_sharegpt.jsonl")},
                    {"format", "sharegpt"},
                    {"max_seq_len", 128}};
  TrainSummary s = train(config, {"train.max_steps=40", "train.global_batch_size=4", "train.micro_batch_size=2", "train.lr=3e-2"});
  EXPECT_EQ(s.steps, 40);
  EXPECT_LT(s.final_eval_loss, s.first_eval_loss - 0.2) << s.first_eval_loss << " -> " << s.final_eval_loss;
  Json resolved = parse_json_file(join_path(dir.path(), "config.json"));
  io::PeftAdapter adapter = io::read_peft_adapter(join_path(dir.path(), "adapter"));
  EXPECT_EQ(adapter.tensors.size(), 2u * 7u * 2u);  // 2 layers x 7 projections x (A, B); biases stay frozen
  for (const auto& [name, tensor] : adapter.tensors) EXPECT_EQ(name.find(".bias"), std::string::npos) << name;
}

}  // namespace
}  // namespace ft::train
