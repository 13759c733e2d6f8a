// ft_train: one rank of a training run described by a config file.
//   ft_train configs/tiny_lora.json                                   # one process
//   ft_launch --nproc_per_node 2 ft_train configs/tiny_lora.json      # two ranks
//   torchrun --nproc_per_node 2 --no-python ft_train configs/tiny_lora.json   # the same
// Writes RUN_DIR/config.json, metrics.jsonl and adapter/ (LoRA) or model/ (full fine-tune).
#include <cxxopts.hpp>

#include <iostream>

#include "app_main.h"
#include "config_args.h"
#include <torch/torch.h>

#include "dist/gpu_checks.h"
#include "dist/make_communicator.h"
#include "dist/process_exit.h"
#include "train/trainer.h"
#include "util/log.h"

namespace {

int run(int argc, char** argv) {
  cxxopts::Options options("ft_train", "Fine-tune a LLaMA-family model as configured (one rank).");
  ft::app::add_config_options(options);
  options.add_options()("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  const ft::config::RunConfig config = ft::app::load_config_from_args(args);
  // One GPU per local rank when LibTorch has CUDA (and the backend is not forced to Gloo).
  const ft::dist::RankEnv env = ft::dist::read_rank_env();
  const bool cuda = torch::cuda::is_available() && config.parallel.backend != "gloo";
  const c10::Device device = cuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank)) : c10::kCPU;
  if (cuda) {
    for (const auto& finding : ft::dist::check_gpu_setup(env)) {
      FT_CHECK(!finding.fatal, finding.message);
      ft::log::warn(finding.message);
    }
  }
  ft::dist::World world = ft::dist::join_world(config, device);
  ft::train::run_training(config, *world.comm, device);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ft::dist::exit_process(ft::app::run_main("ft_train", argc, argv, run));
}
