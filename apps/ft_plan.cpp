// ft_plan: will a run fit? Per GPU and strategy, the bytes of weights, gradients, optimizer state,
// communication buckets, gathered layers, activations and framework overhead, from the run config
// and the model's config.json alone (no weights: plan a 70B run on a laptop).
//   ft_plan configs/llama13b_zero2.json --gpus 8
//   ft_plan configs/llama7b_lora.json --gpus 2 --gpu-mem-gb 24 --seq-len 4096 --json
//   ft_plan --model meta-llama/Llama-2-13b-hf --gpus 8      # a bundled config.json, default recipe
//   ft_plan configs/llama3_8b_lora.json --max-seq-len       # the longest sequence each strategy fits
// Without the weights, model.path's config.json comes from configs/models/ORG/NAME/ (see
// io/model_catalog.h).
#include <cxxopts.hpp>

#include <cstdio>
#include <iostream>

#include "app_main.h"
#include "config_args.h"
#include "io/hf_config.h"
#include "io/model_catalog.h"
#include "plan/memory_plan.h"
#include "util/json.h"

namespace {

double gb(std::int64_t bytes) { return bytes / 1e9; }

ft::Json to_json(const ft::plan::MemoryPlan& plan) {
  ft::Json strategies = ft::Json::array();
  for (const auto& p : plan.strategies) {
    const auto& m = p.at_micro_batch;
    strategies.push_back({{"strategy", p.name},
                          {"lora", p.lora},
                          {"model_state_bytes", m.model_state()},
                          {"activation_bytes", m.activations},
                          {"total_bytes", m.total()},
                          {"fits", p.fits},
                          {"micro_batch", p.micro_batch},
                          {"grad_accum", p.grad_accum},
                          {"max_seq_len", p.max_seq_len},
                          {"global_batch", p.global_batch},
                          {"note", p.note},
                          {"bytes",
                           {{"weights", m.weights},
                            {"gradients", m.gradients},
                            {"optimizer", m.optimizer},
                            {"host_optimizer", m.host_optimizer},
                            {"comm_buckets", m.comm_buckets},
                            {"gathered", m.gathered},
                            {"gathered_resident", m.gathered_resident},
                            {"host_batches", m.host_batches},
                            {"host_activations", m.host_activations},
                            {"host_checkpoint", m.host_checkpoint},
                            {"activations_checkpointed", m.activations_checkpointed},
                            {"activations_full", m.activations_full},
                            {"logits", m.logits},
                            {"overhead", m.overhead}}}});
  }
  return {{"parameters", plan.parameters},        {"lora_parameters", plan.lora_parameters},
          {"gpus", plan.options.gpus},            {"gpu_mem_gb", plan.options.gpu_mem_gb},
          {"seq_len", plan.seq_len},              {"attention", ft::model::attention_kernel_name(plan.attention)},
          {"strategies", strategies},
          {"recommendation", plan.recommendation}};
}

void print_table(const ft::plan::MemoryPlan& plan, const ft::config::RunConfig& run, const ft::io::LlamaConfig& model,
                 bool longest_sequence) {
  std::printf("%s: %.2fB parameters (LoRA row: %.1fM trainable), %s, %lld tokens per sequence, %lld GPU%s x %.1f GB%s\n",
              run.source.c_str(), plan.parameters / 1e9, plan.lora_parameters / 1e6, ft::config::choice_name(run.train.precision).c_str(),
              (long long)plan.seq_len, (long long)plan.options.gpus, plan.options.gpus == 1 ? "" : "s",
              plan.options.gpu_mem_gb, run.model.quantize == ft::config::Quantization::kNone ? "" : (", base " + ft::config::choice_name(run.model.quantize)).c_str());
  std::printf("GB per GPU at the micro-batch shown; activations with the config's checkpointing (%s), the other "
              "setting in brackets, %s attention; fits = under %.0f%% of the GPU\n",
              run.train.activation_checkpointing ? "on" : "off",
              plan.attention == ft::model::AttentionKernel::kSdpa ? "sdpa (fused, no s² scores)" : "eager (s² scores kept)",
              100 * (1 - plan.options.headroom));
  std::printf("%-12s %8s %8s %8s %8s %8s %18s %8s %8s  %-4s %5s %5s\n", "strategy", "weights", "grads", "optim",
              "buckets", "gathered", "activations", "overhead", "total", "fits", "micro", "accum");
  for (const auto& p : plan.strategies) {
    const auto& m = p.at_micro_batch;
    const std::int64_t other = run.train.activation_checkpointing ? m.activations_full : m.activations_checkpointed;
    std::printf("%-12s %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f (%7.2f) %8.2f %8.2f  %-4s %5lld %5lld\n", p.name.c_str(),
                gb(m.weights), gb(m.gradients), gb(m.optimizer), gb(m.comm_buckets), gb(m.gathered), gb(m.activations),
                gb(other), gb(m.overhead), gb(m.total()), p.fits ? "yes" : "no", (long long)p.micro_batch,
                (long long)p.grad_accum);
    std::printf("%-12s of the activations, output head and loss: %.2f GB (%s)\n", "", gb(m.logits),
                run.train.loss_chunk_tokens > 0
                    ? ("chunks of " + std::to_string(run.train.loss_chunk_tokens) + " target tokens").c_str()
                    : "full logits, train.loss_chunk_tokens 0");
    if (m.host_optimizer > 0) std::printf("%-12s host memory per rank for the offloaded optimizer: %.2f GB\n", "", gb(m.host_optimizer));
    if (m.host_activations > 0)
      std::printf("%-12s host memory per rank for the offloaded layer inputs: %.2f GB (pinned)\n", "", gb(m.host_activations));
    if (m.host_checkpoint > 0)
      std::printf("%-12s host memory of rank 0 for a checkpoint saved in the background: %.2f GB\n", "", gb(m.host_checkpoint));
    if (!p.note.empty()) std::printf("%-12s note: %s\n", "", p.note.c_str());
    if (longest_sequence) {
      std::printf("%-12s longest sequence at micro-batch 1: %lld tokens%s%s\n", "", (long long)p.max_seq_len,
                  p.max_seq_len >= ft::plan::kLongestPlannedSequence ? " or more" : "",
                  p.max_seq_len > model.max_position_embeddings
                      ? (" (beyond the model's max_position_embeddings, " +
                         std::to_string(model.max_position_embeddings) + ")").c_str()
                      : "");
    }
  }
  std::printf("%s\n", plan.recommendation.c_str());
}

// The recipe planned by `ft_plan --model NAME` without a CONFIG: a full fine-tune in bf16 at 2048
// tokens with activation checkpointing, global batch 32 (ft_plan shows the LoRA row beside it).
ft::Json default_recipe(const std::string& model) {
  return {{"run_dir", "runs/plan"},
          {"model", {{"path", model}}},
          {"data", {{"train", "(none: planning only)"}, {"max_seq_len", 2048}}},
          {"train", {{"global_batch_size", 32}, {"lr", 1e-5}, {"precision", "bf16"}, {"activation_checkpointing", true}}}};
}

int run(int argc, char** argv) {
  cxxopts::Options options("ft_plan", "Memory and batch plan for a run, per GPU and strategy (needs config.json only).");
  ft::app::add_config_options(options);
  options.add_options()
      ("gpus", "GPUs (ranks) the run will use", cxxopts::value<std::int64_t>()->default_value("1"))
      ("gpu-mem-gb", "memory per GPU in GB (1e9 bytes)", cxxopts::value<double>()->default_value("24"))
      ("seq-len", "tokens per sequence (default: data.max_seq_len)", cxxopts::value<std::int64_t>()->default_value("0"))
      ("micro-batch", "plan at this micro-batch (e.g. the config's) instead of the largest that fits",
       cxxopts::value<std::int64_t>()->default_value("0"))
      ("attention", "plan for this attention kernel: auto (this build's: sdpa on LibTorch 2.x) | sdpa | eager "
                    "(default: the config's model.attention)", cxxopts::value<std::string>())
      ("model", "plan this model: a folder with config.json, or a Hugging Face name bundled in configs/models "
                "(" FT_MODEL_CATALOG_DIR "); replaces model.path. Without CONFIG: a bf16 full fine-tune at 2048 tokens",
       cxxopts::value<std::string>())
      ("max-seq-len", "also print each strategy's longest sequence that fits at micro-batch 1")
      ("cpu", "plan for training on the CPU (no CUDA context; memory is host memory)")
      ("json", "print the plan as JSON")
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  ft::plan::PlanOptions plan_options;
  plan_options.gpus = args["gpus"].as<std::int64_t>();
  plan_options.gpu_mem_gb = args["gpu-mem-gb"].as<double>();
  plan_options.seq_len = args["seq-len"].as<std::int64_t>();
  plan_options.micro_batch = args["micro-batch"].as<std::int64_t>();
  plan_options.cpu = args.count("cpu") > 0;
  if (args.count("attention")) plan_options.attention = args["attention"].as<std::string>();
  if (plan_options.micro_batch < 0) throw ft::app::UsageError{"--micro-batch must be positive"};
  if (plan_options.gpus <= 0) throw ft::app::UsageError{"--gpus must be positive"};
  if (plan_options.gpu_mem_gb <= 0) throw ft::app::UsageError{"--gpu-mem-gb must be positive"};
  if (plan_options.seq_len < 0) throw ft::app::UsageError{"--seq-len must be positive"};
  if (!args.count("config") && !args.count("model")) throw ft::app::UsageError{"a config file or --model is required"};
  ft::config::RunConfig config =
      args.count("config") ? ft::app::load_config_from_args(args)
                           : ft::config::parse_run_config(default_recipe(args["model"].as<std::string>()),
                                                          "--model " + args["model"].as<std::string>(),
                                                          ft::app::set_overrides(args));
  if (args.count("model")) config.model.path = args["model"].as<std::string>();
  const ft::io::ModelConfigFolder found = ft::io::find_model_config(config.model.path, FT_MODEL_CATALOG_DIR);
  if (!found.note.empty()) std::fprintf(stderr, "ft_plan: %s\n", found.note.c_str());
  const ft::io::LlamaConfig model = ft::io::load_llama_config(found.folder);
  const ft::plan::MemoryPlan plan = ft::plan::plan_memory(config, model, plan_options);
  if (args.count("json")) {
    std::cout << to_json(plan).dump(2) << std::endl;
  } else {
    print_table(plan, config, model, args.count("max-seq-len") > 0);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ft::app::run_main("ft_plan", argc, argv, run, ft::app::MatrixProducts::kNo);
}
