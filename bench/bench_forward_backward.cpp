// bench_forward_backward: training throughput of a LLaMA model (random init) on this machine.
// Measures the matrix-product rate in the model's dtype first (the ceiling), then forward +
// backward of the causal-LM loss, and reports tokens/s, achieved GFLOP/s (6N + 12·L·H·Q·T per
// token, N the parameters that take part in matrix products) and that as a fraction of the
// ceiling (MFU), and the peak memory of a step.
//   bench_forward_backward                      # ~110M parameters, batch 4 x 256 tokens
//   bench_forward_backward --layers 4 --hidden 256 --seq 128 --threads 1
//   bench_forward_backward --device cuda --dtype bf16 --layers 16 --hidden 2048 --heads 16 --kv-heads 16
//     --intermediate 5632 --batch 8 --seq 2048            (~1B parameters on a GPU, one command)
//   bench_forward_backward --layers 2 --hidden 256 --heads 4 --kv-heads 4 --intermediate 688 --vocab 128256
//     --batch 1 --seq 2048 --steps 1 --loss-chunk 0     (Llama 3's vocabulary: full logits; 1024 = chunked)
//   bench_forward_backward --lora-r 8 --lora-targets q_proj,v_proj   (LoRA: the base frozen)
//   bench_forward_backward --profile step.json   (one more step under LibTorch's profiler, a Chrome
//                                                  trace: bench/profile_step.py sums it per operator)
#include <cxxopts.hpp>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>

#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include "app_main.h"
#include "bench/matmul_peak.h"
#include "bench/training_flops.h"
#include "model/causal_lm_loss.h"
#include "model/llama_model.h"
#include "model/lora.h"
#include "train/memory_tracker.h"
#include "train/metrics_log.h"
#include "util/cpu_threads.h"
#include "util/heap_reuse.h"
#include "util/error.h"
#include "util/timer.h"

namespace {

int run(int argc, char** argv) {
  cxxopts::Options options("bench_forward_backward", "LLaMA forward+backward throughput (random init).");
  options.add_options()
      ("batch", "sequences per step", cxxopts::value<std::int64_t>()->default_value("4"))
      ("seq", "tokens per sequence", cxxopts::value<std::int64_t>()->default_value("256"))
      ("steps", "timed steps", cxxopts::value<int>()->default_value("5"))
      ("layers", "decoder layers", cxxopts::value<std::int64_t>()->default_value("12"))
      ("hidden", "hidden size", cxxopts::value<std::int64_t>()->default_value("768"))
      ("heads", "attention heads", cxxopts::value<std::int64_t>()->default_value("12"))
      ("kv-heads", "key/value heads", cxxopts::value<std::int64_t>()->default_value("4"))
      ("intermediate", "SwiGLU hidden size", cxxopts::value<std::int64_t>()->default_value("2048"))
      ("vocab", "vocabulary size", cxxopts::value<std::int64_t>()->default_value("32000"))
      ("dtype", "fp32|bf16", cxxopts::value<std::string>()->default_value("fp32"))
      ("device", "cpu or cuda", cxxopts::value<std::string>()->default_value("cpu"))
      ("attention", "auto | sdpa | eager", cxxopts::value<std::string>()->default_value("auto"))
      ("threads", "CPU threads (default: all cores)", cxxopts::value<int>())
      ("loss-chunk", "target tokens per chunk of the head + cross-entropy (train.loss_chunk_tokens); 0 = full logits",
       cxxopts::value<std::int64_t>()->default_value("1024"))
      ("lora-r", "LoRA rank; 0 = full fine-tuning", cxxopts::value<std::int64_t>()->default_value("0"))
      ("lora-targets", "comma-separated projections LoRA applies to", cxxopts::value<std::string>()->default_value("q_proj,v_proj"))
      ("profile", "write a Chrome trace of one more step to this file", cxxopts::value<std::string>())
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  ft::configure_cpu_threads(args.count("threads") ? args["threads"].as<int>() : 0);
  const auto dtype = args["dtype"].as<std::string>() == "bf16" ? torch::kBFloat16 : torch::kFloat;

  ft::io::LlamaConfig c;
  c.num_hidden_layers = args["layers"].as<std::int64_t>();
  c.hidden_size = args["hidden"].as<std::int64_t>();
  c.num_attention_heads = args["heads"].as<std::int64_t>();
  c.num_key_value_heads = args["kv-heads"].as<std::int64_t>();
  c.head_dim = c.hidden_size / c.num_attention_heads;
  c.intermediate_size = args["intermediate"].as<std::int64_t>();
  c.vocab_size = args["vocab"].as<std::int64_t>();
  c.tie_word_embeddings = true;
  const std::int64_t batch = args["batch"].as<std::int64_t>(), seq = args["seq"].as<std::int64_t>();
  c.max_position_embeddings = seq;
  const int steps = args["steps"].as<int>();
  const std::int64_t loss_chunk = args["loss-chunk"].as<std::int64_t>();

  const c10::Device device(args["device"].as<std::string>());
  ft::keep_freed_heap_memory(device.is_cpu() ? ft::StepMemory::kHost : ft::StepMemory::kDevice);  // as ft_train does
  FT_CHECK(device.is_cpu() || torch::cuda::is_available(), "--device ", device.str(), ": no CUDA device is visible");
  const double peak =
      ft::bench::measure_matmul_peak(device, dtype, at::get_num_threads(), device.is_cpu() ? 2048 : 0).flops_per_s / 1e9;
  ft::model::LlamaForCausalLM model(c, torch::TensorOptions().dtype(dtype));
  ft::model::init_weights(model, 1234);
  const std::int64_t lora_r = args["lora-r"].as<std::int64_t>();
  std::int64_t lora_parameters = 0;
  if (lora_r > 0) {
    ft::model::LoraOptions lora;
    lora.r = lora_r;
    lora.alpha = 2.0 * static_cast<double>(lora_r);
    lora.targets.names.clear();
    std::stringstream names(args["lora-targets"].as<std::string>());
    for (std::string name; std::getline(names, name, ',');) lora.targets.names.push_back(name);
    ft::model::apply_lora(model, lora, 1);
    for (const auto& [name, t] : ft::model::lora_parameters(model)) lora_parameters += t.numel();
  }
  model->to(device);
  model->model->attention_kernel = ft::model::parse_attention_kernel(args["attention"].as<std::string>(), "--attention");
  ft::train::MemoryTracker memory(device);
  // PaLM's model FLOPs per token (the one ft_bench uses).
  const double flops_per_token = ft::bench::training_flops_per_token(c, seq, lora_parameters);

  auto gen = at::detail::createCPUGenerator(7);
  auto ids = torch::randint(0, c.vocab_size, {batch, seq}, gen, torch::kLong).to(device);
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize();
  };
  auto step = [&] {
    auto loss = ft::model::model_loss(model, ids, ids, {}, loss_chunk);
    (loss.sum / static_cast<double>(loss.tokens)).backward();
  };
  step();  // warm up: first-touch allocations, kernel selection
  model->zero_grad();
  sync();
  memory.reset_peak();
  ft::Stopwatch watch;
  for (int i = 0; i < steps; ++i) {
    step();
    model->zero_grad();
  }
  sync();
  const double seconds = watch.seconds();
  if (args.count("profile")) {
    torch::autograd::profiler::RecordProfile profile(args["profile"].as<std::string>());
    step();
    model->zero_grad();
    sync();
  }
  const double tokens_per_s = batch * seq * steps / seconds;
  const double gflops = tokens_per_s * flops_per_token / 1e9;
  std::printf("model: %.1fM parameters, %lld layers, hidden %lld, heads %lld/%lld, vocab %lld, %s, %s attention, on %s\n",
              static_cast<double>(c.num_parameters()) / 1e6, (long long)c.num_hidden_layers, (long long)c.hidden_size,
              (long long)c.num_attention_heads, (long long)c.num_key_value_heads, (long long)c.vocab_size,
              args["dtype"].as<std::string>().c_str(), ft::model::attention_kernel_name(model->model->attention_kernel),
              device.str().c_str());
  if (lora_r > 0)
    std::printf("LoRA: r %lld on %s, %.2fM trainable parameters, the base frozen\n", (long long)lora_r,
                args["lora-targets"].as<std::string>().c_str(), static_cast<double>(lora_parameters) / 1e6);
  std::printf("BLAS: %s\n", ft::blas_description().c_str());
  std::printf("threads: %d (BLAS; LibTorch's own pool 1), batch %lld x %lld tokens, %d steps\n",
              args.count("threads") ? args["threads"].as<int>() : static_cast<int>(std::thread::hardware_concurrency()),
              (long long)batch,
              (long long)seq, steps);
  std::printf("matmul peak (2048^3 mm):  %8.1f GFLOP/s\n", peak);
  std::printf("forward+backward:         %8.1f tokens/s, %.3f s/step\n", tokens_per_s, seconds / steps);
  std::printf("achieved:                 %8.1f GFLOP/s (%.2f GFLOP/token) = %.0f%% of the matmul peak\n",
              gflops, flops_per_token / 1e9, 100.0 * gflops / peak);
  std::printf("peak memory of a step:    %8.2f GB (%s), loss chunk %lld tokens%s\n", memory.peak_bytes() / 1e9,
              device.is_cpu() ? "counted CPU allocations" : "CUDA caching allocator", (long long)loss_chunk,
              loss_chunk > 0 ? "" : " (full logits)");
  std::printf("peak RSS of the process:  %8.2f GB\n", ft::train::peak_rss_bytes() / 1e9);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("bench_forward_backward", argc, argv, run); }
