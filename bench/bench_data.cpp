// bench_data: the data pipeline's numbers on the bundled alpaca data. Tokenization throughput
// (what ft_prep does) with 1 and all threads, the cost of collating one batch, and the fraction
// of padding tokens in batches with and without packing.
//   bench_data [--model tests/data/stories260K] [--data tests/data/datasets/alpaca_train.json]
//              [--max-seq-len 256] [--micro-batch 4]
#include <cxxopts.hpp>

#include <cstdio>
#include <iostream>
#include <thread>

#include "app_main.h"
#include "data/batch.h"
#include "data/distributed_sampler.h"
#include "data/token_file.h"
#include "data/tokenized_dataset.h"
#include "data/tokenizer.h"
#include "util/file_util.h"
#include "util/timer.h"

namespace {

int run(int argc, char** argv) {
  cxxopts::Options options("bench_data", "Data pipeline throughput and padding.");
  options.add_options()
      ("model", "model folder with tokenizer.model", cxxopts::value<std::string>()->default_value("tests/data/stories260K"))
      ("data", "alpaca dataset", cxxopts::value<std::string>()->default_value("tests/data/datasets/alpaca_train.json"))
      ("max-seq-len", "tokens per sample", cxxopts::value<std::int64_t>()->default_value("256"))
      ("micro-batch", "items per batch", cxxopts::value<std::int64_t>()->default_value("4"))
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  ft::data::Tokenizer tokenizer(args["model"].as<std::string>());
  ft::config::DataConfig dc;
  dc.max_seq_len = args["max-seq-len"].as<std::int64_t>();
  auto settings = ft::data::SampleSettings::from_config(dc);
  const std::string path = args["data"].as<std::string>();
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  ft::data::TokenizedDataset data;
  for (int threads : {1, cores}) {
    ft::Stopwatch watch;
    int reps = 0;
    while (watch.seconds() < 2.0 || reps < 3) {
      data = ft::data::tokenize_dataset(path, settings, tokenizer, threads);
      ++reps;
    }
    const double s = watch.seconds() / reps;
    std::printf("tokenize (%d thread%s): %.0f records/s, %.0f tokens/s (%lld records, %lld tokens, %.3f s)\n", threads,
                threads == 1 ? "" : "s", data.stats.records / s, data.stats.tokens / s,
                (long long)data.stats.records, (long long)data.stats.tokens, s);
  }
  std::printf("  %s\n", data.stats.summary().c_str());

  const std::string tmp = "/tmp/bench_data.ftok";
  ft::data::write_token_file(tmp, data, {1, 2, 3, static_cast<std::uint64_t>(tokenizer.vocab_size()), tokenizer.kind()});
  ft::data::TokenFile file(tmp);
  const std::int64_t micro = args["micro-batch"].as<std::int64_t>();
  for (bool packing : {false, true}) {
    ft::data::ItemView view(file, dc.max_seq_len, packing);
    ft::data::DistributedSampler sampler(static_cast<std::int64_t>(view.size()), 1, 0, true, 42);
    std::int64_t tokens = 0, padding = 0, batches = 0;
    ft::Stopwatch watch;
    while (true) {
      auto items = sampler.next_indices(micro);
      if (static_cast<std::int64_t>(items.size()) < micro) break;
      auto batch = ft::data::collate(view, items);
      tokens += batch.num_tokens;
      padding += batch.num_padding;
      ++batches;
    }
    const double s = watch.seconds();
    std::printf("%s: %zu items, %lld batches of %lld: %.1f us per batch, padding %.1f%% of %lld positions\n",
                packing ? "packed  " : "unpacked", view.size(), (long long)batches, (long long)micro,
                1e6 * s / batches, 100.0 * padding / (tokens + padding), (long long)(tokens + padding));
  }
  std::remove(tmp.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("bench_data", argc, argv, run); }
