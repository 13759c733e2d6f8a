// The CUDA path on a real GPU (ctest -L gpu; scripts/gpu_check.sh runs it on a GPU machine). Where
// LibTorch has no CUDA or no GPU is visible the whole suite reports itself skipped, by name
// (exit code 77, ctest's SKIP_RETURN_CODE). On one GPU:
//   - the NCCL communicator's collectives in a world of one (and of two, in two threads, when two
//     GPUs exist), and the staged step numbers (all_reduce_values, gather_per_rank) through it;
//   - ft_train of the tiny model in bf16 on CUDA, LoRA and full (ZeRO-2), through a real NCCL
//     communicator: losses within bf16 rounding of the same run on the CPU;
//   - optimizer offload to pinned host memory changes no bit of the trained model;
//   - the memory tracker reads the CUDA caching allocator's statistics;
//   - FSDP gives a layer's gathered parameters back to the allocator after its forward;
//   - activation checkpointing replays the CUDA generator: LoRA dropout gradients bitwise equal,
//     also with the layers' inputs offloaded to pinned host memory (train.offload_activations),
//     which leaves less on the GPU when backward begins; and the offload's activation peak and
//     saving against ft_plan's (within 15%);
//   - ft_generate's greedy text on CUDA is the CPU's (and the recorded one);
//   - the fused attention kernels (flash without a mask, memory-efficient with one) equal eager;
//   - NVML telemetry reads this GPU's temperature, power and clock.
#include <gtest/gtest.h>

#include <torch/torch.h>
#include <torch/version.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "comm/communicator.h"
#include "gpu/gpu_telemetry.h"
#include "comm/make_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/store.h"
#include "config/run_config.h"
#include "model/activation_checkpoint.h"
#include "model/causal_lm_loss.h"
#include "model/lora.h"
#include "model/model_loader.h"
#include "parallel/fsdp_strategy.h"
#include "plan/memory_plan.h"
#include "test_support.h"
#include "train/memory_tracker.h"
#include "util/build_info.h"
#include "util/error.h"
#include "util/torch_version.h"

#if FT_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ft {
namespace {

constexpr int kSkipped = 77;  // tests/CMakeLists.txt: SKIP_RETURN_CODE
const c10::Device kGpu(c10::kCUDA, 0);

std::string repo_file(const std::string& relative) {
  return (std::filesystem::path(test::data_path("")) / ".." / ".." / relative).lexically_normal().string();
}

// --- NCCL -------------------------------------------------------------------------------------

#ifdef FT_WITH_NCCL
TEST(GpuNccl, WorldOfOneCollectivesAndStagedNumbers) {
  auto comm = comm::make_communicator("nccl", kGpu, comm::RankEnv{}, nullptr, 60);
  ASSERT_EQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->device(), kGpu);
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble, torch::kLong}) {
    SCOPED_TRACE(c10::toString(dtype));
    const auto original = torch::arange(1, 1001, torch::TensorOptions().dtype(dtype).device(kGpu));
    auto t = original.clone();
    comm->all_reduce(t, comm::ReduceOp::kSum)->wait();
    EXPECT_TRUE(torch::equal(t, original));
    comm->all_reduce(t, comm::ReduceOp::kMax)->wait();
    EXPECT_TRUE(torch::equal(t, original));
    auto out = torch::zeros_like(original);
    comm->reduce_scatter(out, original, comm::ReduceOp::kSum)->wait();
    EXPECT_TRUE(torch::equal(out, original));
    out.zero_();
    comm->all_gather(out, original)->wait();
    EXPECT_TRUE(torch::equal(out, original));
    comm->broadcast(t, 0)->wait();
    EXPECT_TRUE(torch::equal(t, original));
  }
  comm->barrier();
  EXPECT_EQ(comm::all_reduce_values(*comm, {1.5, -2.0, 7.0}, comm::ReduceOp::kSum),
            (std::vector<double>{1.5, -2.0, 7.0}));
  EXPECT_EQ(comm::gather_per_rank(*comm, {3.0, 4.0}), (std::vector<std::vector<double>>{{3.0, 4.0}}));
  auto cpu = torch::ones({4});
  EXPECT_FT_ERROR(comm->all_reduce(cpu, comm::ReduceOp::kSum), "the  tensor is on cpu");
}

TEST(GpuNccl, TwoGpusInTwoThreadsReduceRankValues) {
  if (torch::cuda::device_count() < 2) GTEST_SKIP() << "needs 2 GPUs, " << torch::cuda::device_count() << " visible";
  const int port = test::free_port();
  std::vector<std::vector<float>> results(2);
  std::vector<std::string> errors(2);
  auto rank_main = [&](int rank) {
    try {
      comm::RankEnv env;
      env.rank = env.local_rank = rank;
      env.world_size = env.local_world_size = 2;
      env.master_addr = "127.0.0.1";
      env.master_port = port;
      auto store = comm::Store::connect(env, 30);
      auto comm = comm::make_nccl_communicator(env, store, rank, 30);
      auto t = torch::full({8}, static_cast<float>(rank + 1), torch::TensorOptions().device(c10::Device(c10::kCUDA, rank)));
      comm->all_reduce(t, comm::ReduceOp::kSum)->wait();
      auto gathered = torch::zeros({16}, t.options());
      comm->all_gather(gathered, t)->wait();
      auto t_cpu = gathered.cpu();
      results[rank].assign(t_cpu.data_ptr<float>(), t_cpu.data_ptr<float>() + 16);
    } catch (const std::exception& e) {
      errors[rank] = e.what();
    }
  };
  std::thread a(rank_main, 0), b(rank_main, 1);
  a.join();
  b.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    EXPECT_EQ(results[r], std::vector<float>(16, 3.0f)) << "rank " << r;  // 1 + 2 on both, gathered twice
  }
}
#endif

// --- training through the programs -----------------------------------------------------------

struct TrainResult {
  std::vector<double> losses;
  std::vector<Json> metrics;
  std::string output;
};

// ft_train on one rank: the tiny config for `steps` steps, on CUDA through a real NCCL
// communicator (parallel.backend nccl in a world of one) or on the CPU through Gloo's.
TrainResult run_ft_train(const std::string& config, bool cuda, const std::string& run_dir, std::vector<std::string> overrides) {
  overrides.insert(overrides.begin(), {"run_dir=" + run_dir, "model.path=" + test::data_path("stories260K"),
                                       "data.train=" + test::data_path("datasets/alpaca_train.json"),
                                       "data.eval=" + test::data_path("datasets/alpaca_eval.jsonl"),
                                       "train.max_steps=8", "log.every_steps=1",
                                       "checkpoint.every_steps=0", std::string("parallel.backend=") + (cuda ? "nccl" : "gloo")});
  std::string args;
  for (const auto& o : overrides) args += " --set '" + o + "'";
  const auto r = test::run_command(test::ft_train_command(1, repo_file("configs/" + config), args), true);
  TrainResult run;
  run.output = r.output;
  EXPECT_EQ(r.exit_code, 0) << r.output;
  run.metrics = test::read_metrics(run_dir);
  run.losses = test::metric_losses(run.metrics);
  return run;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(GpuTraining, Bf16LoraAndFullOnCudaFollowTheCpuRun) {
  for (const std::string config : {"tiny_lora.json", "tiny_zero2.json"}) {
    SCOPED_TRACE(config);
    test::TempDir gpu_dir, cpu_dir;
    const std::vector<std::string> bf16 = {"train.precision=bf16"};
    const TrainResult gpu = run_ft_train(config, true, gpu_dir.path(), bf16);
    const TrainResult cpu = run_ft_train(config, false, cpu_dir.path(), bf16);
    ASSERT_EQ(gpu.losses.size(), 8u) << gpu.output;
    ASSERT_EQ(cpu.losses.size(), 8u) << cpu.output;
    // Two bf16 computations (different kernels, different summation orders): the first step's
    // loss within bf16 rounding, the curve within 2 % as small differences in the weights grow.
    EXPECT_NEAR(gpu.losses[0], cpu.losses[0], 1e-2 * cpu.losses[0]);
    for (std::size_t i = 0; i < 8; ++i) EXPECT_NEAR(gpu.losses[i], cpu.losses[i], 2e-2 * cpu.losses[i]) << "step " << i + 1;
    std::printf("%s bf16: step 1 loss cuda %.5f cpu %.5f; step 8 cuda %.5f cpu %.5f\n", config.c_str(), gpu.losses[0],
                cpu.losses[0], gpu.losses[7], cpu.losses[7]);
    // The GPU run reports device memory and the GPU's readings.
    const Json& last = gpu.metrics.back();
    ASSERT_TRUE(last.contains("peak_memory_bytes")) << last.dump();
    EXPECT_GT(last["peak_memory_bytes"][0].get<std::int64_t>(), last["memory_bytes"][0].get<std::int64_t>());
    EXPECT_TRUE(last.contains("gpu")) << "no NVML reading: " << last.dump();
  }
}

TEST(GpuTraining, PinnedOptimizerOffloadChangesNoBit) {
  test::TempDir plain_dir, offload_dir;
  const std::vector<std::string> full = {"train.precision=bf16"};
  std::vector<std::string> offloaded = full;
  offloaded.push_back("parallel.offload_optimizer=true");
  const TrainResult plain = run_ft_train("tiny_zero2.json", true, plain_dir.path(), full);
  const TrainResult offload = run_ft_train("tiny_zero2.json", true, offload_dir.path(), offloaded);
  EXPECT_EQ(offload.losses, plain.losses);
  const std::string a = file_bytes(plain_dir.file("model/model.safetensors"));
  ASSERT_FALSE(a.empty());
  EXPECT_TRUE(a == file_bytes(offload_dir.file("model/model.safetensors"))) << "the trained weights differ";
}

TEST(GpuGenerate, GreedyTextOnCudaIsTheCpuOne) {
  const Json golden = parse_json_file(test::data_path("stories260K-golden.json"));
  std::string text[2];
  for (int cuda = 0; cuda < 2; ++cuda) {
    const auto r = test::run_command(test::bin_path("ft_generate") + " --model " + test::data_path("stories260K") +
                                     " --prompt 'Once upon a time' --temperature 0 --max-new-tokens 40 --device " +
                                     (cuda ? "cuda" : "cpu"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    text[cuda] = r.output;
  }
  EXPECT_EQ(text[1], text[0]);
  EXPECT_EQ(text[1], golden["greedy_text"].get<std::string>() + "\n");
}

// --- in one process ---------------------------------------------------------------------------

#if FT_TORCH_CUDA
TEST(GpuMemory, TrackerReadsTheCachingAllocator) {
  train::MemoryTracker tracker(kGpu);
  torch::cuda::synchronize();
  const std::int64_t before = tracker.allocated_bytes();
  auto stats = [] { return c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0]; };
  EXPECT_EQ(before, stats().current);
  {
    auto x = torch::empty({1 << 20}, torch::TensorOptions().device(kGpu));  // 4 MiB, a multiple of the block size
    EXPECT_EQ(tracker.allocated_bytes() - before, 4 << 20);
    EXPECT_EQ(tracker.allocated_bytes(), stats().current);
  }
  EXPECT_EQ(tracker.allocated_bytes(), before);
  EXPECT_GE(tracker.peak_bytes(), before + (4 << 20));
  tracker.reset_peak();
  EXPECT_EQ(tracker.peak_bytes(), tracker.allocated_bytes());
}
#endif

io::LlamaConfig wide_config() {
  io::LlamaConfig c;
  c.vocab_size = 256;
  c.hidden_size = 512;
  c.intermediate_size = 1024;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  return c;
}

TEST(GpuFsdp, ALayersParametersGoBackToTheAllocatorAfterItsForward) {
  model::LlamaForCausalLM m(wide_config(), torch::TensorOptions().dtype(torch::kFloat));
  model::init_weights(m, 3);
  parallel::NamedParameters params;
  std::vector<at::Tensor> tensors;
  for (auto& p : m->named_parameters()) {
    p.value().set_requires_grad(true);
    params.emplace_back(p.key(), p.value());
    tensors.push_back(p.value());
  }
  auto comm = comm::make_single_process_communicator();
  parallel::StrategyOptions options;
  options.device = kGpu;
  parallel::FsdpStrategy fsdp(*comm, options);
  fsdp.setup(params, model::decoder_layers_of(m, tensors));
  m->to(kGpu);
  train::MemoryTracker tracker(kGpu);
  // One layer's parameters in fp32: q and o [512, 512], k and v [256, 512], the MLP's three
  // [1024, 512] matrices, two norms.
  const std::int64_t layer_bytes = 4 * (2 * 512 * 512 + 2 * 256 * 512 + 3 * 1024 * 512 + 2 * 512);
  std::vector<std::int64_t> grown;  // device bytes each layer's forward left behind
  auto inner = fsdp.layer_runner(false);
  model::ForwardOptions fo;
  fo.layer_runner = [&](std::size_t i, model::DecoderLayer& layer, const torch::Tensor& x, const model::LayerInputs& in) {
    const std::int64_t before = tracker.allocated_bytes();
    torch::Tensor y = inner(i, layer, x, in);
    grown.push_back(tracker.allocated_bytes() - before);
    return y;
  };
  fsdp.before_backward(true);
  fsdp.before_forward();
  tracker.reset_peak();
  const auto ids = torch::randint(256, {2, 64}, torch::TensorOptions().dtype(torch::kLong).device(kGpu));
  model::LossSum loss = model::causal_lm_loss(m(ids, fo), ids);
  ASSERT_EQ(grown.size(), 3u);
  // Each layer's forward leaves behind its activations only (well under a layer's parameters at
  // 2 x 64 tokens): the gathered parameters went back to the allocator; the peak saw them.
  for (std::int64_t g : grown) EXPECT_LT(g, layer_bytes / 2) << "a gathered layer stayed on the device";
  EXPECT_GE(tracker.peak_bytes() - tracker.allocated_bytes(), layer_bytes / 2) << "the peak never held a layer";
  std::printf("FSDP on %s: a layer's parameters %.2f MB; left behind by each forward %.2f, %.2f, %.2f MB\n",
              kGpu.str().c_str(), layer_bytes / 1e6, grown[0] / 1e6, grown[1] / 1e6, grown[2] / 1e6);
  EXPECT_EQ(fsdp.gathered_units(), 1u);  // only the root unit
  loss.sum.backward();
  fsdp.finish_gradients();
}

TEST(GpuCheckpointing, CudaDropoutMasksReplayBitwise) {
  // Eager attention: the fused kernels' backward may sum in a different order run to run, which
  // is not what this test is about (the generator's replay is).
  model::LoadOptions load;
  load.device = kGpu;
  auto m = model::load_llama(test::data_path("stories260K"), load);
  m->model->attention_kernel = model::AttentionKernel::kEager;
  config::LoraConfig lc;
  lc.r = 8;
  lc.dropout = 0.2;
  lc.target_modules = {"all-linear"};
  model::apply_lora(m, model::lora_options(lc), 1);
  m->train();
  for (auto& p : m->parameters())
    if (p.requires_grad()) torch::nn::init::normal_(p, 0, 0.02);  // B != 0: the adapters matter
  const auto ids = torch::randint(3, 500, {2, 48}, torch::TensorOptions().dtype(torch::kLong).device(kGpu));
  // The bytes on the GPU once the forward is done, when the offloaded inputs are in host memory.
  std::int64_t after_forward[2] = {0, 0};
  auto grads = [&](bool checkpointing, bool offload = false, bool prefetch = true) {
    torch::manual_seed(42);
    m->zero_grad();
    model::ForwardOptions fo;
    if (checkpointing) fo.layer_runner = model::activation_checkpointing_runner({offload, prefetch});
    auto loss = model::causal_lm_loss(m(ids, fo), ids);
    torch::cuda::synchronize();
    if (checkpointing) after_forward[offload ? 1 : 0] = train::MemoryTracker(kGpu).allocated_bytes();
    loss.sum.backward();
    std::vector<torch::Tensor> out;
    for (auto& p : m->parameters())
      if (p.requires_grad()) out.push_back(p.grad().clone());
    return out;
  };
  const auto plain = grads(false);
  const auto again = grads(false);
  const auto checkpointed = grads(true);
  const auto offloaded = grads(true, true);
  const auto on_demand = grads(true, true, /*prefetch=*/false);
  ASSERT_FALSE(plain.empty());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(torch::equal(plain[i], again[i])) << "the plain run itself is not repeatable (" << i << ")";
    EXPECT_TRUE(torch::equal(checkpointed[i], plain[i])) << "parameter " << i;
    EXPECT_TRUE(torch::equal(offloaded[i], plain[i])) << "offloaded, parameter " << i;
    EXPECT_TRUE(torch::equal(on_demand[i], plain[i])) << "offloaded without prefetch, parameter " << i;
  }
  // Each checkpointed layer's input: [2, 48, hidden] in the model's dtype; stories260K has 5 layers.
  const std::int64_t layer_input = 2 * 48 * m->config().hidden_size * static_cast<std::int64_t>(m->output_weight().element_size());
  EXPECT_LE(after_forward[1], after_forward[0] - 4 * layer_input)
      << "on the GPU after forward: " << after_forward[0] << " bytes kept, " << after_forward[1] << " offloaded";
  std::printf("after forward on the GPU: %lld bytes with the checkpointed inputs, %lld with them offloaded\n",
              (long long)after_forward[0], (long long)after_forward[1]);
}

// train.offload_activations on the device it is for, against ft_plan: a bf16 LoRA forward +
// backward with every layer checkpointed (8 layers, 2 x 2048 tokens: each layer input 4 MiB), its
// layer inputs kept, offloaded with the copy back prefetched, and offloaded without. Each run's
// activation peak (the caching allocator's peak, less what was allocated before forward and the
// LoRA gradients) must be within 15% of the plan's activation bytes for the same shapes, as
// test_plan_accuracy holds the CPU runs, and the offload's saving within 15% of the plan's:
// (layers - 2) inputs with the prefetch, (layers - 1) without. A layer input that something else
// keeps alive on the GPU (the caller, autograd) shows here as a saving one input short.
TEST(GpuPlan, OffloadedLayerInputsLeaveTheGpuAsPlanned) {
  io::LlamaConfig c = wide_config();
  c.num_hidden_layers = 8;
  c.max_position_embeddings = 2048;
  const std::int64_t batch = 2, seq = 2048;
  struct Variant {
    const char* name;
    bool offload, prefetch;
  };
  const Variant variants[] = {{"inputs kept", false, true}, {"offloaded", true, true}, {"offloaded, no prefetch", true, false}};
  std::int64_t measured[3] = {0, 0, 0}, planned[3] = {0, 0, 0};
  for (int v = 0; v < 3; ++v) {
    SCOPED_TRACE(variants[v].name);
    const config::RunConfig run = config::load_run_config(
        repo_file("configs/tiny_lora.json"),
        {"train.precision=bf16", "lora.r=8", "lora.dropout=0", "data.packing=false",
         "train.activation_checkpointing=true", str("train.offload_activations=", variants[v].offload ? "true" : "false"),
         str("train.offload_prefetch=", variants[v].prefetch ? "true" : "false")});
    model::LlamaForCausalLM m(c, torch::TensorOptions().dtype(torch::kBFloat16).device(kGpu));
    model::init_weights(m, 5);
    model::apply_lora(m, model::lora_options(*run.lora), 1);
    m->train();
    const auto ids = torch::randint(3, c.vocab_size, {batch, seq}, torch::TensorOptions().dtype(torch::kLong).device(kGpu));
    model::ForwardOptions fo;
    fo.layer_runner = model::activation_checkpointing_runner({variants[v].offload, variants[v].prefetch});
    // A step first, so that what stays allocated after it (cuBLAS's workspace, made at the first
    // product on a stream) is counted in `before`, not in the peak; its gradients then dropped.
    model::model_loss(m, ids, ids, fo, run.train.loss_chunk_tokens).sum.backward();
    for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
    torch::cuda::synchronize();
    train::MemoryTracker tracker(kGpu);
    const std::int64_t before = tracker.allocated_bytes();
    tracker.reset_peak();
    model::model_loss(m, ids, ids, fo, run.train.loss_chunk_tokens).sum.backward();
    torch::cuda::synchronize();
    std::int64_t lora_grads = 0;
    for (const auto& p : m->parameters())
      if (p.grad().defined()) lora_grads += static_cast<std::int64_t>(p.grad().nbytes());
    measured[v] = tracker.peak_bytes() - before - lora_grads;
    planned[v] = plan::memory_for(run, c, config::Strategy::kDdp, /*lora=*/true, batch, seq, 1,
                                  m->model->attention_kernel)
                     .activations;
    std::printf("%-24s activation peak %8.2f MB, planned %8.2f MB (%+.1f %%)\n", variants[v].name, measured[v] / 1e6,
                planned[v] / 1e6, (static_cast<double>(planned[v]) / measured[v] - 1) * 100);
    EXPECT_NEAR(static_cast<double>(planned[v]) / measured[v], 1.0, 0.15);
  }
  for (int v = 1; v < 3; ++v) {
    const double saved = static_cast<double>(measured[0] - measured[v]), plan_saved = static_cast<double>(planned[0] - planned[v]);
    std::printf("%-24s saves %8.2f MB, planned %8.2f MB\n", variants[v].name, saved / 1e6, plan_saved / 1e6);
    EXPECT_NEAR(saved / plan_saved, 1.0, 0.15) << variants[v].name;
  }
}

TEST(GpuAttention, FusedKernelsEqualEager) {
  if (!model::sdpa_available()) GTEST_SKIP() << "LibTorch " << TORCH_VERSION << " has no SDPA";
  for (auto dtype : {torch::kBFloat16, torch::kFloat}) {
    SCOPED_TRACE(c10::toString(dtype));
    model::LoadOptions load;
    load.device = kGpu;
    load.dtype = dtype;
    auto m = model::load_llama(test::data_path("stories260K"), load);
    const auto ids = torch::randint(3, 500, {2, 128}, torch::TensorOptions().dtype(torch::kLong).device(kGpu));
    auto segments = torch::zeros({2, 128}, ids.options());
    segments.narrow(1, 50, 78).fill_(1);
    for (bool packed : {false, true}) {
      model::ForwardOptions fo;
      if (packed) fo.segment_ids = segments;
      std::vector<torch::Tensor> logits, grads;
      for (auto kernel : {model::AttentionKernel::kEager, model::AttentionKernel::kSdpa}) {
        m->model->attention_kernel = kernel;
        m->zero_grad();
        for (auto& p : m->parameters()) p.set_requires_grad(true);
        auto out = m(ids, fo);
        model::causal_lm_loss(out, ids).sum.backward();
        logits.push_back(out.detach().to(torch::kFloat));
        grads.push_back(m->model->layers[0]->self_attn->q_proj->weight.grad().to(torch::kFloat).clone());
      }
      auto rel = [](const torch::Tensor& a, const torch::Tensor& b) {
        return (a - b).abs().max().item<double>() / b.abs().max().item<double>();
      };
      // fp32: a different summation order; bf16: eager rounds the probabilities to bf16, the
      // fused kernels keep them in fp32.
      EXPECT_LT(rel(logits[1], logits[0]), dtype == torch::kFloat ? 1e-4 : 3e-2) << (packed ? "packed" : "causal");
      EXPECT_LT(rel(grads[1], grads[0]), dtype == torch::kFloat ? 1e-3 : 1e-1) << (packed ? "packed" : "causal");
      std::printf("sdpa vs eager on %s, %s, %s: logits rel %.2e, q_proj grad rel %.2e\n", kGpu.str().c_str(),
                  c10::toString(dtype), packed ? "packed (mask)" : "plain causal", rel(logits[1], logits[0]),
                  rel(grads[1], grads[0]));
    }
  }
#if FT_TORCH_AT_LEAST(2, 5)
  // Which fused kernel SDPA picks for our calls (0 math, 1 flash, 2 memory-efficient, 3 cuDNN).
  auto q = torch::randn({2, 8, 128, 64}, torch::TensorOptions().dtype(torch::kBFloat16).device(kGpu));
  auto kv = torch::randn({2, 4, 128, 64}, q.options());
  auto kv_repeated = model::repeat_kv(kv, 2);
  auto mask = torch::zeros({2, 1, 128, 128}, q.options());
  const int causal = at::_fused_sdp_choice(q, kv, kv, {}, 0.0, true, {}, true);
  const int masked = at::_fused_sdp_choice(q, kv_repeated, kv_repeated, mask, 0.0, false, {}, false);
  std::printf("SDPA backend chosen on cuda:0 (0 math, 1 flash, 2 memory-efficient, 3 cuDNN): plain causal with grouped "
              "heads %d, packed mask %d\n", causal, masked);
  EXPECT_NE(causal, 0) << "plain causal attention fell back to the math kernel";
  EXPECT_NE(masked, 0) << "masked attention fell back to the math kernel";
#endif
}

TEST(GpuTelemetry, NvmlReadsThisGpu) {
  auto telemetry = gpu::GpuTelemetry::open(0);
  ASSERT_NE(telemetry, nullptr) << "NVML did not open (FT_NVML_LIBRARY, libnvidia-ml.so.1)";
  const auto sample = telemetry->sample();
  ASSERT_TRUE(sample.has_value());
  EXPECT_GT(sample->temperature_c, 0);
  EXPECT_LT(sample->temperature_c, 110);
  EXPECT_GT(sample->power_w, 0);
  EXPECT_GT(sample->sm_clock_mhz, 0);
  std::printf("NVML: %.0f C, %.1f W, SM %.0f MHz, throttle reasons 0x%llx\n", sample->temperature_c, sample->power_w,
              sample->sm_clock_mhz, static_cast<unsigned long long>(sample->throttle_reasons));
}

}  // namespace
}  // namespace ft

int main(int argc, char** argv) {
  if (!torch::cuda::is_available()) {
    std::printf("test_gpu: skipped: %s (LibTorch %s%s)\n",
                FT_TORCH_CUDA ? "no CUDA device is visible" : "this build's LibTorch has no CUDA", TORCH_VERSION,
                FT_TORCH_CUDA ? ", built with CUDA " FT_TORCH_CUDA_VERSION : ", CPU only");
    return ft::kSkipped;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
