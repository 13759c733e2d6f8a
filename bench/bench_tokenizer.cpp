// bench_tokenizer: encoding and decoding speed of ft::data::Tokenizer on instruction data, on one
// thread and on several (encode is const and shares nothing mutable). Every text of the dataset's
// records is encoded --reps times; tokens/s counts output ids, MB/s input bytes. The default
// paths are relative to the repository root:
//   build/bin/bench_tokenizer                        # LLaMA-2 tokenizer, alpaca demo data
//   build/bin/bench_tokenizer --tokenizer tests/data/stories260K --threads 4
#include <cxxopts.hpp>

#include <cstdio>
#include <iostream>
#include <thread>
#include <vector>

#include "app_main.h"
#include "data/tokenizer.h"
#include "util/json.h"
#include "util/timer.h"

namespace {

int run(int argc, char** argv) {
  cxxopts::Options options("bench_tokenizer", "Tokenizer encode/decode throughput.");
  options.add_options()
      ("tokenizer", "tokenizer.model or a model folder",
       cxxopts::value<std::string>()->default_value("tests/data/llama2-tokenizer/tokenizer.model"))
      ("data", "alpaca-style JSON records (instruction, input, output)",
       cxxopts::value<std::string>()->default_value("tests/data/datasets/alpaca_en_demo.json"))
      ("reps", "passes over the data", cxxopts::value<int>()->default_value("5"))
      ("threads", "threads for the parallel pass", cxxopts::value<int>()->default_value("2"))
      ("h,help", "show this help");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help() << std::endl;
    return 0;
  }
  const ft::data::Tokenizer tok(args["tokenizer"].as<std::string>());
  std::vector<std::string> texts;
  std::size_t bytes = 0;
  for (const ft::Json& r : ft::parse_json_file(args["data"].as<std::string>())) {
    for (const char* field : {"instruction", "input", "output"}) {
      if (r.contains(field) && r[field].is_string() && !r[field].get<std::string>().empty()) {
        texts.push_back(r[field].get<std::string>());
        bytes += texts.back().size();
      }
    }
  }
  const int reps = args["reps"].as<int>();
  const int threads = args["threads"].as<int>();

  std::size_t tokens = 0;
  std::vector<std::vector<std::int64_t>> encoded;
  for (const auto& t : texts) encoded.push_back(tok.encode(t, false));  // warm up
  ft::Stopwatch watch;
  for (int rep = 0; rep < reps; ++rep)
    for (const auto& t : texts) tokens += tok.encode(t, false).size();
  const double encode_s = watch.seconds();

  watch.restart();
  std::size_t decoded_bytes = 0;
  for (int rep = 0; rep < reps; ++rep)
    for (const auto& ids : encoded) decoded_bytes += tok.decode(ids).size();
  const double decode_s = watch.seconds();

  watch.restart();
  std::vector<std::thread> pool;
  std::vector<std::size_t> counts(threads, 0);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int rep = 0; rep < reps; ++rep)
        for (std::size_t i = t; i < texts.size(); i += threads) counts[t] += tok.encode(texts[i], false).size();
    });
  }
  for (auto& th : pool) th.join();
  const double parallel_s = watch.seconds();

  std::printf("tokenizer: %s (%lld pieces)\n", tok.path().c_str(), (long long)tok.vocab_size());
  std::printf("data: %zu texts, %.2f MB, %zu tokens per pass, %d passes\n", texts.size(), bytes / 1e6,
              tokens / reps, reps);
  std::printf("encode, 1 thread:   %10.0f tokens/s  %6.2f MB/s\n", tokens / encode_s, bytes * reps / encode_s / 1e6);
  std::printf("decode, 1 thread:   %10.0f tokens/s  %6.2f MB/s\n", tokens / decode_s,
              decoded_bytes / decode_s / 1e6);
  std::printf("encode, %d threads:  %10.0f tokens/s\n", threads, tokens / parallel_s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("bench_tokenizer", argc, argv, run); }
