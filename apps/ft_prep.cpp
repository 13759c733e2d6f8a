// ft_prep: tokenize a run's datasets once, before training, into token files that ft_train
// memory-maps (data.cache_dir, default RUN_DIR/tokens/{train,eval}.ftok).
//   ft_prep configs/tiny_lora.json [--set data.max_seq_len=256]
#include <cxxopts.hpp>

#include <iostream>

#include "app_main.h"
#include "config_args.h"
#include "data/prepared_data.h"
#include "data/tokenizer.h"
#include "io/hf_config.h"
#include "train/run_inputs.h"
#include "util/log.h"
#include "util/timer.h"

namespace {

int run(int argc, char** argv) {
  cxxopts::Options options("ft_prep", "Tokenize a run's datasets into token files.");
  ft::app::add_config_options(options);
  options.add_options()("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  const ft::config::RunConfig config = ft::app::load_config_from_args(args);
  ft::train::InputNeeds needs;
  needs.weights = false;  // tokenizing needs the tokenizer and the data only
  ft::train::check_run_inputs(config, needs);
  ft::data::Tokenizer tokenizer(config.model.path);
  const ft::io::LlamaConfig model = ft::io::load_llama_config(config.model.path);
  FT_CHECK(tokenizer.vocab_size() <= model.vocab_size, tokenizer.path(), " has ", tokenizer.vocab_size(),
           " pieces but the model's vocab_size is ", model.vocab_size, ": its ids would not fit the embedding");

  for (auto split : {ft::data::Split::kTrain, ft::data::Split::kEval}) {
    const std::string& dataset = ft::data::dataset_path(config, split);
    if (dataset.empty()) continue;
    ft::Stopwatch watch;
    ft::data::DataStats stats = ft::data::prepare_token_file(config, split, tokenizer);
    const double seconds = watch.seconds();
    ft::log::info(dataset, " -> ", ft::data::token_file_path(config, split));
    ft::log::info("  ", stats.summary());
    ft::log::info("  ", seconds, " s: ", static_cast<std::int64_t>(stats.records / seconds), " records/s, ",
                  static_cast<std::int64_t>(stats.tokens / seconds), " tokens/s");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return ft::app::run_main("ft_prep", argc, argv, run, ft::app::MatrixProducts::kNo);
}
