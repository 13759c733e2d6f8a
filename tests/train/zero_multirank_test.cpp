// Sharded strategies with real processes: ft_launch starts 2 or 4 ft_train ranks on Gloo.
// ZeRO-1, ZeRO-2 and FSDP, with and without optimizer offload and activation checkpointing (those
// two on 2 ranks; 4 ranks check the strategies themselves), give
// DDP's losses and final weights (1e-5 relative, fp32) over 20 steps with gradient accumulation,
// for LoRA (the adapter) and full fine-tuning (the model written through
// for_each_full_parameter); offload changes no bit on the CPU. Each strategy's bytes handed to
// collectives per step follow from its algorithm. The memory test runs zero_worker in bf16 and
// checks what each strategy holds against the ZeRO paper's per-rank formulas, printing the table.
// A qwen2 model (stories260K with random q/k/v biases) trains the same under ddp, zero2 and fsdp,
// its 1-D biases sharded, trained and written under their HF names.
#include <gtest/gtest.h>

#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>

#include "io/safetensors.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft {
namespace {

constexpr int kSteps = 20;

Json base_config(const test::TempDir& dir, bool lora) {
  Json c = {{"run_dir", dir.file("run")},
            {"model", {{"path", test::data_path("stories260K")}}},
            {"data", {{"train", test::data_path("datasets/alpaca_train.json")},
                      {"eval", test::data_path("datasets/alpaca_eval.jsonl")},
                      {"max_seq_len", 64},
                      {"template", {{"base", "alpaca"}, {"prompt", "{instruction}\n"}, {"prompt_with_input", "{instruction}\n{input}\n"}}}}},
            // adam_eps 1e-2 as in ddp_multirank_test.cpp: with the default 1e-8 Adam's first steps
            // turn the rounding of near-cancelling gradient elements (summed in another order:
            // ZeRO-2 sums over ranks per micro-batch, DDP over micro-batches first) into full-lr
            // moves of those elements; an eps above most gradient elements makes the comparison
            // measure the reduced gradients themselves.
            {"train", {{"global_batch_size", 8}, {"micro_batch_size", 2}, {"max_steps", kSteps}, {"lr", lora ? 1e-2 : 1e-3},
                       {"adam_eps", 1e-2}, {"weight_decay", 0.1}, {"threads", 1}}},
            {"parallel", {{"timeout_s", 30}}},
            {"log", {{"every_steps", 1}}}};
  if (lora) c["lora"] = {{"r", 4}, {"alpha", 8}, {"dropout", 0.0}, {"target_modules", "all-linear"}};
  return c;
}

struct RunResult {
  std::vector<double> losses, comm_bytes;
  double eval_loss = 0;
  io::NamedTensors weights;  // the adapter (LoRA) or the whole model (full fine-tune)
};

RunResult train(int ranks, bool lora, const std::string& overrides) {
  test::TempDir dir;
  write_file_atomic(dir.file("config.json"), base_config(dir, lora).dump(2));
  auto r = test::run_command(test::ft_train_command(ranks, dir.file("config.json"), overrides), true);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  RunResult out;
  for (const Json& m : test::read_metrics(dir.file("run"))) {
    if (m.contains("loss")) {
      out.losses.push_back(m["loss"]);
      out.comm_bytes.push_back(m["comm_bytes"]);
    }
    if (m.contains("eval_loss")) out.eval_loss = m["eval_loss"];
  }
  const std::string file = lora ? dir.file("run/adapter/adapter_model.safetensors") : dir.file("run/model/model.safetensors");
  EXPECT_TRUE(file_exists(file)) << file;
  if (file_exists(file)) {
    io::SafetensorsReader reader(file);
    for (const auto& t : reader.tensors()) out.weights.emplace_back(t.name, reader.load(t.name));
  }
  return out;
}

// tolerance 0: bit for bit.
void expect_same_run(const RunResult& a, const RunResult& b, double tolerance) {
  ASSERT_EQ(a.losses.size(), static_cast<std::size_t>(kSteps));
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (std::size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_NEAR(a.losses[i], b.losses[i], tolerance * std::abs(b.losses[i])) << "step " << i + 1;
  EXPECT_NEAR(a.eval_loss, b.eval_loss, tolerance * std::abs(b.eval_loss));
  ASSERT_EQ(a.weights.size(), b.weights.size());
  ASSERT_FALSE(a.weights.empty());
  double worst = 0;
  for (std::size_t i = 0; i < a.weights.size(); ++i) {
    ASSERT_EQ(a.weights[i].first, b.weights[i].first);
    const auto x = a.weights[i].second.to(torch::kDouble), y = b.weights[i].second.to(torch::kDouble);
    ASSERT_EQ(x.sizes(), y.sizes()) << a.weights[i].first;
    if (tolerance == 0) {
      EXPECT_TRUE(torch::equal(x, y)) << a.weights[i].first;
      continue;
    }
    // Relative error in norm (ddp_multirank_test.cpp says why not element-wise).
    const double rel = (x - y).norm().item<double>() / (y.norm().item<double>() + 1e-12);
    worst = std::max(worst, rel);
    EXPECT_LT(rel, tolerance) << a.weights[i].first;
  }
  if (std::getenv("FT_TEST_VERBOSE")) std::cerr << "worst relative weight difference " << worst << "\n";
}

// ZeRO-1 hands the all-reduce (Ψ) and the all-gather (Ψ) to collectives, ZeRO-2 one reduce-scatter
// (Ψ) per micro-batch and the all-gather: with fp32 gradients and parameters, 2x and
// (accumulation + 1)x DDP's payload (up to each bucket's padding to a multiple of the world size).
void expect_comm_bytes(const RunResult& run, const RunResult& ddp, double factor) {
  ASSERT_FALSE(run.comm_bytes.empty());
  EXPECT_NEAR(run.comm_bytes.back(), factor * ddp.comm_bytes.back(), 1e-3 * factor * ddp.comm_bytes.back());
}

// FSDP gathers each layer twice per micro-batch (forward, backward; with prefetch the last layer
// once, as it stays whole from its forward to its backward), reduce-scatters Ψ per micro-batch
// and gathers the root unit (embeddings, norm, head) once after the step.
// FSDP's bytes per step: per micro-batch its layers gathered (twice, but for the last one under
// prefetch; once without resharding after forward) and the gradients reduce-scattered, and the
// root unit gathered after the optimizer step.
void expect_fsdp_comm_bytes(const RunResult& fsdp, const RunResult& ddp, int accumulation, bool prefetch,
                            bool reshard_after_forward = true) {
  double layers = 0, root = 0;
  std::map<int, double> per_layer;
  for (const auto& [name, t] : fsdp.weights) {
    const auto at = name.find("layers.");
    if (at == std::string::npos) {
      root += t.numel();
    } else {
      layers += t.numel();
      per_layer[std::stoi(name.substr(at + 7))] += t.numel();
    }
  }
  ASSERT_FALSE(per_layer.empty());
  const double psi = layers + root;
  const double gathered = reshard_after_forward ? 2 * layers - (prefetch ? per_layer.rbegin()->second : 0) : layers;
  expect_comm_bytes(fsdp, ddp, (accumulation * gathered + accumulation * psi + root) / psi);
}

void equivalence(int ranks, bool lora, const std::string& batch) {
  const RunResult ddp = train(ranks, lora, batch);
  {
    SCOPED_TRACE("fsdp");
    const RunResult fsdp = train(ranks, lora, batch + " --set parallel.strategy=fsdp");
    expect_same_run(fsdp, ddp, 1e-5);
    expect_fsdp_comm_bytes(fsdp, ddp, 2, /*prefetch=*/true);
    if (ranks == 2) {
      {
        SCOPED_TRACE("fsdp, offload: bitwise");
        expect_same_run(train(ranks, lora, batch + " --set parallel.strategy=fsdp --set parallel.offload_optimizer=true"),
                        fsdp, 0);
      }
      {
        // Prefetch changes when the gathers travel, not what they carry.
        SCOPED_TRACE("fsdp, no prefetch: bitwise");
        const RunResult at_use = train(ranks, lora, batch + " --set parallel.strategy=fsdp --set parallel.fsdp_prefetch=0");
        expect_same_run(at_use, fsdp, 0);
        expect_fsdp_comm_bytes(at_use, ddp, 2, /*prefetch=*/false);
      }
      {
        // Kept whole from forward to backward, each layer travels once per micro-batch.
        SCOPED_TRACE("fsdp, no resharding after forward: bitwise");
        const RunResult kept = train(ranks, lora, batch + " --set parallel.strategy=fsdp"
                                                          " --set parallel.fsdp_reshard_after_forward=false");
        expect_same_run(kept, fsdp, 0);
        expect_fsdp_comm_bytes(kept, ddp, 2, /*prefetch=*/true, /*reshard_after_forward=*/false);
      }
      {
        SCOPED_TRACE("fsdp, every layer prefetched, activation checkpointing: bitwise");
        expect_same_run(train(ranks, lora, batch + " --set parallel.strategy=fsdp --set parallel.fsdp_prefetch=64"
                                                   " --set train.activation_checkpointing=true"),
                        fsdp, 0);
      }
    }
  }
  if (ranks == 2) {
    // Checkpointing recomputes each layer in backward (for FSDP, right after gathering it again).
    for (const char* strategy : {"ddp", "zero1", "zero2", "fsdp"}) {
      SCOPED_TRACE(std::string(strategy) + ", activation checkpointing");
      expect_same_run(train(ranks, lora, batch + " --set train.activation_checkpointing=true --set parallel.strategy=" +
                                             strategy),
                      ddp, 1e-5);
    }
  }
  const RunResult zero1 = train(ranks, lora, batch + " --set parallel.strategy=zero1");
  const RunResult zero2 = train(ranks, lora, batch + " --set parallel.strategy=zero2");
  {
    SCOPED_TRACE("zero1");
    expect_same_run(zero1, ddp, 1e-5);
    expect_comm_bytes(zero1, ddp, 2);
  }
  {
    SCOPED_TRACE("zero2");
    expect_same_run(zero2, ddp, 1e-5);
    expect_comm_bytes(zero2, ddp, 3);  // accumulation 2
  }
  if (ranks == 2) {
    // Offload and checkpointing change nothing that depends on the number of ranks (the same
    // shards are offloaded, the same layers recomputed): 4 ranks check the four strategies only.
    SCOPED_TRACE("zero2, offload: bitwise");
    expect_same_run(train(ranks, lora, batch + " --set parallel.strategy=zero2 --set parallel.offload_optimizer=true"),
                    zero2, 0);
    SCOPED_TRACE("zero1, offload: bitwise");
    expect_same_run(train(ranks, lora, batch + " --set parallel.strategy=zero1 --set parallel.offload_optimizer=true"),
                    zero1, 0);
    SCOPED_TRACE("ddp, offload: bitwise");
    expect_same_run(train(ranks, lora, batch + " --set parallel.offload_optimizer=true"), ddp, 0);
  }
}

// 2 ranks x micro-batch 2 x accumulation 2 = 8 sequences per step.
TEST(ZeroMultirank, LoraTwoRanks) { equivalence(2, true, "--set train.micro_batch_size=2"); }
TEST(ZeroMultirank, FullFineTuneTwoRanks) { equivalence(2, false, "--set train.micro_batch_size=2"); }
// 4 ranks x micro-batch 2 x accumulation 2 = 16.
TEST(ZeroMultirank, LoraFourRanks) { equivalence(4, true, "--set train.global_batch_size=16"); }
TEST(ZeroMultirank, FullFineTuneFourRanks) { equivalence(4, false, "--set train.global_batch_size=16"); }

// LoRA over a quantized base: the strategies only see the LoRA parameters, the quantized base is
// replicated and frozen, so every strategy (with activation checkpointing recomputing through the
// quantized layers) still equals DDP.
TEST(ZeroMultirank, LoraOverAQuantizedBaseTwoRanks) {
  for (const char* quantize : {"int8", "nf4"}) {
    SCOPED_TRACE(quantize);
    const std::string batch = std::string("--set train.micro_batch_size=2 --set model.quantize=") + quantize;
    const RunResult ddp = train(2, true, batch);
    expect_same_run(train(2, true, batch + " --set parallel.strategy=zero2"), ddp, 1e-5);
    expect_same_run(train(2, true, batch + " --set parallel.strategy=fsdp --set train.activation_checkpointing=true"),
                    ddp, 1e-5);
  }
}

// stories260K's weights as a qwen2 model: model_type qwen2 and seeded non-zero q/k/v biases.
std::string qwen2_model(const test::TempDir& dir) {
  const std::string src = test::data_path("stories260K");
  io::SafetensorsReader reader(src + "/model.safetensors");
  io::NamedTensors tensors;
  for (const auto& t : reader.tensors()) tensors.emplace_back(t.name, reader.load(t.name));
  auto gen = at::detail::createCPUGenerator(5);
  for (int layer = 0; layer < 5; ++layer)
    for (const char* proj : {"q_proj", "k_proj", "v_proj"})
      tensors.emplace_back("model.layers." + std::to_string(layer) + ".self_attn." + proj + ".bias",
                           at::normal(0.0, 0.3, {std::string(proj) == "q_proj" ? 64 : 32}, gen,
                                      torch::TensorOptions().dtype(torch::kFloat)));
  const std::string out = dir.file("qwen2");
  make_directories(out);
  io::write_safetensors(out + "/model.safetensors", tensors);
  Json config = parse_json_file(src + "/config.json");
  config["model_type"] = "qwen2";
  config["architectures"] = Json::array({"Qwen2ForCausalLM"});
  write_file_atomic(out + "/config.json", config.dump(2));
  write_file_atomic(out + "/tokenizer.model", read_file(src + "/tokenizer.model"));
  return out;
}

TEST(ZeroMultirank, Qwen2BiasesTrainTheSameUnderEveryStrategy) {
  test::TempDir dir;
  const std::string model = qwen2_model(dir);
  const std::string batch = "--set train.micro_batch_size=2 --set model.path=" + model;
  const RunResult ddp = train(2, false, batch);
  io::SafetensorsReader base(model + "/model.safetensors");
  int biases = 0;
  for (const auto& [name, t] : ddp.weights) {
    if (name.size() < 5 || name.compare(name.size() - 5, 5, ".bias") != 0) continue;
    ++biases;
    EXPECT_GT((t - base.load(name)).abs().max().item<double>(), 0) << name << " did not train";
  }
  EXPECT_EQ(biases, 15);
  for (const char* strategy : {"zero2", "fsdp"}) {
    SCOPED_TRACE(strategy);
    expect_same_run(train(2, false, batch + " --set parallel.strategy=" + strategy), ddp, 1e-5);
  }
}

TEST(ZeroMultirank, SmallBucketsAndNoOverlap) {
  // 1 KB buckets: ~70 buckets in flight two at a time, chunks of a few hundred elements per rank.
  const std::string batch = "--set train.micro_batch_size=2 --set parallel.bucket_mb=0.001";
  const RunResult ddp = train(2, false, batch);
  expect_same_run(train(2, false, batch + " --set parallel.strategy=zero2"), ddp, 1e-5);
  expect_same_run(train(2, false, batch + " --set parallel.strategy=zero2 --set parallel.overlap_grad_reduce=false"),
                  ddp, 1e-5);
  expect_same_run(train(2, false, batch + " --set parallel.strategy=zero1"), ddp, 1e-5);
}

// What each rank holds, in bytes, against the ZeRO paper's mixed-precision formulas (bf16
// parameters and gradients, fp32 master + m + v): per rank on W ranks
//   ddp   2Ψ + 2Ψ   + 12Ψ      zero1 2Ψ + 2Ψ + 12Ψ/W      zero2 2Ψ + 2Ψ/W + 12Ψ/W
// and with optimizer offload the optimizer term moves to host memory (plus the host fp32
// gradient the update reads, 4Ψ/W). ZeRO-2's staging during backward is bounded by the buckets,
// not by Ψ: with 50 KB buckets (fp32 on the wire) it stays a fraction of the gradient here.
TEST(ZeroMultirank, MemoryPerRankMatchesTheZeroFormulas) {
  test::TempDir dir;
  Json c = base_config(dir, false);
  c["train"]["precision"] = "bf16";
  c["parallel"]["bucket_mb"] = 0.05;
  write_file_atomic(dir.file("config.json"), c.dump(2));
  const int W = 2;
  struct Case {
    std::string strategy;
    bool offload;
    double params, grads, optimizer;  // multiples of Ψ
  };
  const std::vector<Case> cases = {
      {"ddp", false, 2, 2, 12},          {"zero1", false, 2, 2, 12.0 / W},        {"zero2", false, 2, 2.0 / W, 12.0 / W},
      {"fsdp", false, 2.0 / W, 2.0 / W, 12.0 / W}, {"ddp", true, 2, 2, 12}, {"zero1", true, 2, 2, 12.0 / W},
      {"zero2", true, 2, 2.0 / W, 12.0 / W},       {"fsdp", true, 2.0 / W, 2.0 / W, 12.0 / W}};
  std::ostringstream table;
  table << "per-rank bytes, bf16 mixed precision, W = " << W << " (Ψ = trainable parameters):\n"
        << std::left << std::setw(16) << "strategy" << std::right << std::setw(14) << "parameters" << std::setw(14)
        << "gradients" << std::setw(14) << "optimizer" << std::setw(16) << "host optimizer" << std::setw(16)
        << "host gradients" << std::setw(14) << "grad staging" << std::setw(12) << "gathered" << std::setw(12)
        << "total/Ψ\n";
  for (const Case& k : cases) {
    SCOPED_TRACE(k.strategy + (k.offload ? " offload" : ""));
    const std::string cmd = test::bin_path("ft_launch") + " --nproc_per_node 2 " + test::bin_path("zero_worker") + " " +
                            dir.file("config.json") + " --set parallel.strategy=" + k.strategy +
                            " --set parallel.offload_optimizer=" + (k.offload ? "true" : "false");
    auto r = test::run_command(cmd, true);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::map<int, Json> ranks;
    std::istringstream lines(r.output);
    std::string line;
    while (std::getline(lines, line)) {
      const auto at = line.find("MEMORY ");
      if (at == std::string::npos) continue;
      Json j = parse_json(line.substr(at + 7), "zero_worker");
      ranks[j["rank"].get<int>()] = j;
    }
    ASSERT_EQ(ranks.size(), 2u) << r.output;
    EXPECT_EQ(ranks[0]["grad_sum_of_squares"], ranks[1]["grad_sum_of_squares"]) << "the global norm differs by rank";
    for (auto& entry : ranks) {  // not a structured binding: the lambda captures these
      const int rank = entry.first;
      Json& j = entry.second;
      const double psi = j["psi"].get<double>();
      auto expect_near = [&](const char* key, double multiple) {
        const double got = j[key].get<double>();
        EXPECT_NEAR(got, multiple * psi, 0.05 * multiple * psi + 1) << key << " on rank " << rank;
      };
      expect_near("parameters", k.params);
      expect_near("gradients", k.grads);
      expect_near(k.offload ? "host_optimizer" : "optimizer", k.optimizer);
      expect_near(k.offload ? "optimizer" : "host_optimizer", 0);
      if (k.offload) expect_near("host_gradients", k.strategy == "ddp" ? 4 : 4.0 / W);
      if (k.strategy == "fsdp") {
        // Whole at peak: the root unit (embeddings, norm, head) and at most 2 + fsdp_prefetch layers.
        EXPECT_GT(j["gathered"].get<double>(), 0);
        EXPECT_LE(j["gathered"].get<double>(), j["max_gathered_bytes"].get<double>());
      }
      if (k.strategy == "zero2") {
        // At most kMaxInFlight + 1 = 3 buckets alive, each its region plus this rank's chunk.
        EXPECT_GT(j["grad_staging"].get<double>(), 0);
        EXPECT_LE(j["grad_staging"].get<double>(), 3 * 1.5 * j["max_bucket_bytes"].get<double>());
        EXPECT_LT(j["grad_staging"].get<double>(), 4 * psi) << "staging as large as an fp32 gradient";
      }
      if (rank != 0) continue;
      const double total = j["parameters"].get<double>() + j["gradients"].get<double>() + j["optimizer"].get<double>();
      table << std::left << std::setw(16) << (k.strategy + (k.offload ? "+offload" : "")) << std::right;
      for (const char* key : {"parameters", "gradients", "optimizer"}) table << std::setw(14) << j[key].get<std::int64_t>();
      table << std::setw(16) << j["host_optimizer"].get<std::int64_t>() << std::setw(16)
            << j["host_gradients"].get<std::int64_t>() << std::setw(14) << j["grad_staging"].get<std::int64_t>()
            << std::setw(12) << j["gathered"].get<std::int64_t>() << std::setw(11) << std::fixed << std::setprecision(2) << total / psi << "\n";
      if (k.strategy == "ddp" && !k.offload) table << "  (Ψ = " << j["psi"].get<std::int64_t>() << ")\n";
    }
  }
  std::cerr << table.str();
}

}  // namespace
}  // namespace ft
