// ft_plan against what runs really use: the shipped tiny configs trained for a few steps on 2
// ranks under every strategy (and bf16, LoRA in bf16 with and without dropout, an int8 base), each rank's memory
// read from metrics.jsonl (the trainer's counting CPU allocator), compared with the planner's
// numbers for the same config, micro-batch and world size. Model state (what a rank holds as a
// step begins: weights, gradients, optimizer state, FSDP's root unit and the prefetched batches)
// must be within 5 %, the peak of a step within 15 %. On the CPU there is no framework overhead
// (CUDA context, workspaces) and the batches live in the same memory, so the comparison leaves
// out the former and adds the latter.
// The vocabulary cases give stories260K a 16K vocabulary (random weights, the same tokenizer), so
// that the output head and the loss dominate the step's peak: with full logits and in chunks
// (train.loss_chunk_tokens) for a full fine-tune, and in chunks under FSDP and LoRA.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "config/run_config.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "model/llama_model.h"
#include "plan/memory_plan.h"
#include "test_support.h"
#include "util/file_util.h"
#include "util/json.h"

namespace ft::plan {
namespace {

constexpr int kRanks = 2;

struct Case {
  std::string name;
  std::string config;  // under configs/
  std::vector<std::string> overrides;
  std::int64_t vocab = 0;  // > 0: stories260K with this vocabulary (random weights)
};

// stories260K's shapes and tokenizer with `vocab` embedding rows, randomly initialized, in `dir`.
std::string large_vocab_model(const std::string& dir, std::int64_t vocab) {
  namespace fs = std::filesystem;
  const std::string source = test::data_path("stories260K");
  io::LlamaConfig c = io::load_llama_config(source);
  c.vocab_size = vocab;
  model::LlamaForCausalLM m(c, torch::TensorOptions().dtype(torch::kFloat));
  model::init_weights(m, 11);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(source)) {
    const std::string name = entry.path().filename().string();
    if (name != "model.safetensors" && name != "config.json") fs::copy_file(entry.path(), fs::path(dir) / name);
  }
  io::NamedTensors tensors;
  for (auto& p : m->named_parameters()) tensors.emplace_back(p.key(), p.value().detach());
  io::write_safetensors(join_path(dir, "model.safetensors"), tensors);
  write_file_atomic(join_path(dir, "config.json"), c.to_json(torch::kFloat).dump(2) + "\n");
  return dir;
}

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::string repo_file(const std::string& relative) {
  return (std::filesystem::path(test::data_path("")) / ".." / ".." / relative).lexically_normal().string();
}

class PlanAccuracy : public ::testing::TestWithParam<Case> {};

TEST_P(PlanAccuracy, ModelStateWithin5PercentAndPeakWithin15PercentOfMeasured) {
  const Case& c = GetParam();
  test::TempDir dir;
  // Packed sequences with the prompts trained on: every micro-batch is max_seq_len tokens long and
  // every position a target, as the planner assumes (its worst case: the chunked loss holds one
  // chunk of target rows, and prompt tokens are not targets by default).
  std::vector<std::string> overrides = {"run_dir=" + dir.path(),
                                        "model.path=" + (c.vocab > 0 ? large_vocab_model(dir.file("model"), c.vocab)
                                                                     : test::data_path("stories260K")),
                                        "data.train=" + test::data_path("datasets/alpaca_train.json"),
                                        "data.eval=" + test::data_path("datasets/alpaca_eval.jsonl"),
                                        "data.packing=true",
                                        "data.train_on_prompt=true",
                                        "train.max_steps=4",
                                        "log.every_steps=1",
                                        "log.eval_every_steps=0",
                                        "checkpoint.every_steps=0"};
  overrides.insert(overrides.end(), c.overrides.begin(), c.overrides.end());
  std::string args;
  for (const auto& o : overrides) args += " --set '" + o + "'";
  const std::string config_path = repo_file("configs/" + c.config);
  const test::CommandResult run = test::run_command(test::ft_train_command(kRanks, config_path, args), true);
  ASSERT_EQ(run.exit_code, 0) << run.output;

  // Held: the median over steps 2 to 4 (from step 2 on the optimizer state exists) of the ranks'
  // least. A step may begin with more: a communication thread still holding the last
  // collective's staging buffers (Gloo frees them after wait() returned: on a loaded machine zero2
  // bf16 once began step 2 with 219 KB more than the model state). Or with less: the data
  // prefetcher one step behind (under a parallel ctest, LoRA once began a step 64 KB short, one
  // step's batches). Either happens in one step, seldom in two.
  std::vector<std::int64_t> held_per_step;
  std::int64_t peak = 0;
  for (const Json& record : test::read_metrics(dir.path())) {
    if (!record.contains("memory_bytes") || record["step"].get<std::int64_t>() < 2) continue;
    ASSERT_EQ(record["memory_bytes"].size(), static_cast<std::size_t>(kRanks)) << record.dump();
    std::int64_t least = 0;
    for (int r = 0; r < kRanks; ++r) {
      const std::int64_t at_start = record["memory_bytes"][r].get<std::int64_t>();
      EXPECT_GT(at_start, 0);
      least = r == 0 ? at_start : std::min(least, at_start);
    }
    held_per_step.push_back(least);
  }
  ASSERT_EQ(held_per_step.size(), 3u);
  std::sort(held_per_step.begin(), held_per_step.end());
  const std::int64_t held = held_per_step[1];
  for (const Json& record : test::read_metrics(dir.path())) {
    if (!record.contains("peak_memory_bytes")) continue;
    for (int r = 0; r < kRanks; ++r) peak = std::max(peak, record["peak_memory_bytes"][r].get<std::int64_t>());
  }
  ASSERT_GT(peak, held);

  const config::RunConfig run_config = config::load_run_config(config_path, overrides);
  const io::LlamaConfig model = io::load_llama_config(run_config.model.path);
  PlanOptions options;
  options.gpus = kRanks;
  options.micro_batch = run_config.train.micro_batch_size;
  options.cpu = true;  // measured here on the CPU: no framework overhead, CPU dropout
  const MemoryPlan plan = plan_memory(run_config, model, options);
  const StrategyPlan* planned = nullptr;
  for (const auto& p : plan.strategies)
    if (p.strategy == run_config.parallel.strategy && p.lora == run_config.lora.has_value()) planned = &p;
  ASSERT_NE(planned, nullptr) << config::choice_name(run_config.parallel.strategy);
  const MemoryBreakdown& m = planned->at_micro_batch;
  const double planned_held = static_cast<double>(m.held_between_steps() + m.host_batches);
  const double planned_peak = static_cast<double>(m.total() + m.host_batches);
  std::printf("%-16s held %9.3f MB, planned %9.3f MB (%+.1f %%); peak %8.2f MB, planned %8.2f MB (%+.1f %%)\n",
              c.name.c_str(), held / 1e6, planned_held / 1e6, (planned_held / held - 1) * 100, peak / 1e6,
              planned_peak / 1e6, (planned_peak / peak - 1) * 100);
  EXPECT_NEAR(planned_held / held, 1.0, 0.05) << "model state: planned " << planned_held << ", measured " << held;
  EXPECT_NEAR(planned_peak / peak, 1.0, 0.15) << "peak: planned " << planned_peak << ", measured " << peak;
}

INSTANTIATE_TEST_SUITE_P(
    TinyConfigs, PlanAccuracy,
    ::testing::Values(Case{"ddp", "tiny_zero2.json", {"parallel.strategy=ddp"}},
                      Case{"zero1", "tiny_zero2.json", {"parallel.strategy=zero1"}},
                      Case{"zero2", "tiny_zero2.json", {}},
                      Case{"zero2_bf16", "tiny_zero2.json", {"train.precision=bf16"}},
                      Case{"fsdp_checkpointed", "tiny_fsdp.json", {}},
                      Case{"fsdp_bf16", "tiny_fsdp.json", {"train.precision=bf16", "train.activation_checkpointing=false"}},
                      Case{"lora_ddp", "tiny_lora.json", {}},
                      Case{"lora_bf16", "tiny_lora.json", {"train.precision=bf16"}},
                      Case{"lora_bf16_dropout", "tiny_lora.json", {"train.precision=bf16", "lora.dropout=0.1"}},
                      Case{"lora_zero2_int8", "tiny_zero2_int8.json", {}},
                      Case{"vocab16k_full_logits", "tiny_zero2.json", {"parallel.strategy=ddp", "train.loss_chunk_tokens=0"}, 16384},
                      Case{"vocab16k_chunked", "tiny_zero2.json", {"parallel.strategy=ddp", "train.loss_chunk_tokens=128"}, 16384},
                      Case{"vocab16k_fsdp_chunked", "tiny_fsdp.json", {"train.loss_chunk_tokens=256"}, 16384},
                      Case{"vocab16k_lora_chunked", "tiny_lora.json", {"train.loss_chunk_tokens=128"}, 16384}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace ft::plan
