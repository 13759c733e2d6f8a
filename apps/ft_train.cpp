// ft_train: one rank of a training run described by a config file.
//   ft_train configs/tiny_lora.json                                   # one process
//   ft_launch --nproc_per_node 2 ft_train configs/tiny_lora.json      # two ranks
// Writes RUN_DIR/config.json, metrics.jsonl and adapter/ (LoRA) or model/ (full fine-tune).
#include <cxxopts.hpp>

#include <iostream>

#include "app_main.h"
#include "config_args.h"
#include "dist/communicator.h"
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
  auto comm = ft::dist::make_single_process_communicator();
  ft::train::run_training(config, *comm);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("ft_train", argc, argv, run); }
