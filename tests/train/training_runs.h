// Helpers for tests that run ft_train as users do (through ft_launch, on the tiny model) and
// compare runs: a small training set whose epochs are 4 steps long on 1, 2 or 4 ranks, 12 steps
// in all with a checkpoint every 3, a run folder with its config, and comparisons of losses,
// evaluations and written weights. Shared by the checkpoint and the fault-injection suites.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_folder.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/manifest.h"
#include "io/safetensors.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft::test {

constexpr int kSteps = 12;  // 3 epochs of 4 steps: epochs end after steps 4 and 8
constexpr int kEvery = 3;

// The first 40 alpaca records: 32 usable samples, 4 steps of 8 per epoch on 1, 2 or 4 ranks.
inline const std::string& small_dataset() {
  static TempDir dir;
  static const std::string path = [] {
    const Json all = parse_json(read_file(data_path("datasets/alpaca_train.json")), "alpaca_train.json");
    std::string lines;
    for (std::size_t i = 0; i < 40; ++i) lines += all[i].dump() + "\n";
    write_file_atomic(dir.file("small.jsonl"), lines);
    return dir.file("small.jsonl");
  }();
  return path;
}

struct TrainSetup {
  std::string strategy;
  bool lora = false;
  double dropout = 0.0;
  std::string precision = "fp32";
  bool offload = false;
  bool skip_spikes = false;  // with a hair trigger (window 4, 1 sigma), so the guard's history matters
};

inline std::string label(const TrainSetup& s) {
  return s.strategy + (s.lora ? "_lora" : "_full") + (s.precision == "fp32" ? "" : "_" + s.precision) +
         (s.offload ? "_offload" : "") + (s.skip_spikes ? "_spikes" : "");
}
inline void PrintTo(const TrainSetup& s, std::ostream* os) { *os << label(s); }

inline Json make_config(const std::string& run_dir, const TrainSetup& s, int keep_last) {
  Json c = {{"run_dir", run_dir},
            {"model", {{"path", data_path("stories260K")}}},
            {"data", {{"train", small_dataset()},
                      {"eval", data_path("datasets/alpaca_eval.jsonl")},
                      {"max_seq_len", 64},
                      {"template", {{"base", "alpaca"}, {"prompt", "{instruction}\n"}, {"prompt_with_input", "{instruction}\n{input}\n"}}}}},
            {"parallel", {{"strategy", s.strategy}, {"timeout_s", 30}, {"bucket_mb", 0.05}}},
            // adam_eps 1e-2: see zero_multirank_test.cpp (runs on different world sizes compared).
            {"train", {{"global_batch_size", 8}, {"micro_batch_size", 2}, {"epochs", 3}, {"lr", s.lora ? 1e-2 : 1e-3},
                       {"warmup_steps", 2}, {"adam_eps", 1e-2}, {"weight_decay", 0.1}, {"threads", 1}}},
            {"checkpoint", {{"every_steps", kEvery}, {"keep_last", keep_last}}},
            {"log", {{"every_steps", 1}}}};
  if (s.lora) c["lora"] = {{"r", 4}, {"alpha", 8}, {"dropout", s.dropout}, {"target_modules", "all-linear"}};
  c["train"]["precision"] = s.precision;
  c["parallel"]["offload_optimizer"] = s.offload;
  if (s.skip_spikes) {
    c["train"]["skip_spikes"] = true;
    c["train"]["spike_window"] = 4;
    c["train"]["spike_sigma"] = 1.0;
  }
  return c;
}

struct RunResult {
  int exit_code = -1;
  std::string output;
  std::vector<double> losses;  // every training record in metrics.jsonl
  double eval_loss = NAN;      // the last evaluation
  io::NamedTensors weights;    // adapter/ or model/ when written
};

// A run folder with its config; run() starts ft_train on it.
class RunDir {
 public:
  RunDir(const TrainSetup& s, int keep_last) : setup_(s) { write_config(make_config(run_dir(), s, keep_last)); }
  std::string run_dir() const { return dir_.file("run"); }
  std::string config_path() const { return dir_.file("config.json"); }
  std::string checkpoint(int step) const { return checkpoint::checkpoints_dir(run_dir()) + "/" + checkpoint::step_name(step); }
  void write_config(const Json& c) { write_file_atomic(config_path(), c.dump(2)); }

  // env: variables set for this command only ("FT_FAULT=step.done:5@1").
  RunResult run(int ranks, const std::string& args = "", const std::string& env = "") const {
    const auto result = run_command(env + (env.empty() ? "" : " ") + ft_train_command(ranks, config_path(), args), true);
    RunResult r = collect();
    r.exit_code = result.exit_code;
    r.output = result.output;
    return r;
  }

  // What the run folder holds now: metrics and the written weights.
  RunResult collect() const {
    RunResult r;
    for (const Json& m : read_metrics(run_dir())) {
      // A skipped non-finite step logs its loss as null (JSON has no NaN).
      if (m.contains("loss")) r.losses.push_back(m["loss"].is_number() ? m["loss"].get<double>() : NAN);
      if (m.contains("eval_loss")) r.eval_loss = m["eval_loss"].get<double>();
    }
    const std::string file = setup_.lora ? run_dir() + "/adapter/adapter_model.safetensors" : run_dir() + "/model/model.safetensors";
    if (file_exists(file)) {
      io::SafetensorsReader reader(file);
      for (const auto& t : reader.tensors()) r.weights.emplace_back(t.name, reader.load(t.name));
    }
    return r;
  }

 private:
  TrainSetup setup_;
  TempDir dir_;
};

// The step `latest` names (-1 when there is none).
inline std::int64_t latest_step(const std::string& run_dir) {
  const auto path = checkpoint::latest_checkpoint(run_dir);
  if (!path) return -1;
  return checkpoint::step_of(path->substr(path->rfind('/') + 1)).value_or(-2);
}

// Every file of the checkpoint `latest` names is there with its size and checksum.
inline void expect_latest_complete(const std::string& run_dir) {
  const auto path = checkpoint::latest_checkpoint(run_dir);
  ASSERT_TRUE(path.has_value());
  checkpoint::CheckpointReader reader(*path);
  for (const auto& f : reader.manifest().files) EXPECT_NO_THROW(checkpoint::verify_file(*path, reader.manifest(), f.path)) << f.path;
  for (const std::string& name : list_directory(checkpoint::checkpoints_dir(run_dir)))
    EXPECT_EQ(name.find(".tmp"), std::string::npos) << "left behind: " << name;
}

inline void expect_identical(const RunResult& a, const RunResult& b) {
  ASSERT_EQ(a.losses.size(), static_cast<std::size_t>(kSteps));
  ASSERT_EQ(b.losses.size(), a.losses.size());
  for (std::size_t i = 0; i < a.losses.size(); ++i) EXPECT_EQ(a.losses[i], b.losses[i]) << "step " << i + 1;
  EXPECT_EQ(a.eval_loss, b.eval_loss);
  ASSERT_FALSE(a.weights.empty());
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (std::size_t i = 0; i < a.weights.size(); ++i) {
    ASSERT_EQ(a.weights[i].first, b.weights[i].first);
    EXPECT_TRUE(torch::equal(a.weights[i].second, b.weights[i].second)) << a.weights[i].first;
  }
}

// `resumed` logged the steps after `from`; they continue `reference` to 1e-5 relative.
inline void expect_continues(const RunResult& reference, const RunResult& resumed, int from) {
  ASSERT_EQ(reference.losses.size(), static_cast<std::size_t>(kSteps));
  ASSERT_EQ(resumed.losses.size(), static_cast<std::size_t>(kSteps - from)) << resumed.output;
  for (int i = 0; i < kSteps - from; ++i) {
    const double want = reference.losses[static_cast<std::size_t>(from + i)];
    EXPECT_NEAR(resumed.losses[static_cast<std::size_t>(i)], want, 1e-5 * std::abs(want)) << "step " << from + i + 1;
  }
  EXPECT_NEAR(resumed.eval_loss, reference.eval_loss, 1e-5 * std::abs(reference.eval_loss));
}

// One uninterrupted 2-rank run per setup and keep_last, shared by the tests (kept for the process).
inline const std::pair<std::shared_ptr<RunDir>, RunResult>& reference(const TrainSetup& s, int keep_last = 100) {
  static std::map<std::string, std::pair<std::shared_ptr<RunDir>, RunResult>> runs;
  const std::string key = label(s) + "/" + std::to_string(s.dropout) + "/" + std::to_string(keep_last);
  auto found = runs.find(key);
  if (found == runs.end()) {
    auto dir = std::make_shared<RunDir>(s, keep_last);
    RunResult r = dir->run(2);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    found = runs.emplace(key, std::make_pair(dir, std::move(r))).first;
  }
  return found->second;
}

}  // namespace ft::test
