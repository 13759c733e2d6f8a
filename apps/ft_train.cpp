// ft_train: one rank of a training run described by a config file.
//   ft_train configs/tiny_lora.json                                   # one process
//   ft_launch --nproc_per_node 2 ft_train configs/tiny_lora.json      # two ranks
//   torchrun --nproc_per_node 2 --no-python ft_train configs/tiny_lora.json   # the same
//   ft_train configs/tiny_lora.json --resume runs/tiny_lora/checkpoints/step_000020
// Writes RUN_DIR/config.json, metrics.jsonl, checkpoints/ and adapter/ (LoRA) or model/ (full
// fine-tune). With checkpoint.resume "auto" (the default) a run continues from
// RUN_DIR/checkpoints/latest when there is one. SIGTERM or SIGINT during training: every rank
// finishes its step, a checkpoint is saved, exit code 0.
#include <cxxopts.hpp>

#include <signal.h>

#include <iostream>

#include "app_main.h"
#include "config_args.h"
#include <torch/torch.h>

#include "gpu/gpu_checks.h"
#include "comm/make_communicator.h"
#include "comm/process_exit.h"
#include "model/attention.h"
#include "train/stop_request.h"
#include "train/run_inputs.h"
#include "train/trainer.h"
#include "util/log.h"

namespace {

int run(int argc, char** argv) {
  cxxopts::Options options("ft_train", "Fine-tune a LLaMA-family model as configured (one rank).");
  ft::app::add_config_options(options);
  options.add_options()("resume", "continue from this checkpoint folder (default: checkpoints/latest when "
                                  "checkpoint.resume is \"auto\")", cxxopts::value<std::string>())(
      "resume-force", "resume even though the config changed something that changes the training")(
      "h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  const ft::config::RunConfig config = ft::app::load_config_from_args(args);
  ft::train::check_run_inputs(config);  // every missing file at once, before any other output
  ft::model::parse_attention_kernel(config.model.attention, "model.attention");  // refused before any work
  // One GPU per local rank when LibTorch has CUDA (and the backend is not forced to Gloo).
  const ft::comm::RankEnv env = ft::comm::read_rank_env();
  const bool cuda = torch::cuda::is_available() && config.parallel.backend != ft::config::Backend::kGloo;
  const c10::Device device = cuda ? c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank)) : c10::kCPU;
  if (cuda) {
    for (const auto& finding : ft::gpu::check_gpu_setup(env)) {
      FT_CHECK(!finding.fatal, finding.message);
      ft::log::warn(finding.message);
    }
  }
  // A file-size limit (ulimit -f) shows up as a write error naming the file, not a killed process.
  ::signal(SIGXFSZ, SIG_IGN);
  ft::train::install_stop_handlers();
  ft::train::ResumeOptions resume;
  if (args.count("resume")) resume.path = args["resume"].as<std::string>();
  resume.force = args.count("resume-force") > 0;
  ft::comm::World world = ft::comm::join_world(config, device);
  ft::train::run_training(config, *world.comm, device, resume);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ft::comm::exit_process(ft::app::run_main("ft_train", argc, argv, run));
}
