#include "data/prepared_data.h"

#include <chrono>
#include <thread>

#include "data/tokenizer.h"
#include "util/error.h"
#include "util/file_util.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/mapped_file.h"
#include "util/timer.h"

namespace ft::data {

std::string token_file_path(const config::RunConfig& config, Split split) {
  const std::string dir = config.data.cache_dir.empty() ? join_path(config.run_dir, "tokens") : config.data.cache_dir;
  return join_path(dir, split == Split::kTrain ? "train.ftok" : "eval.ftok");
}

const std::string& dataset_path(const config::RunConfig& config, Split split) {
  return split == Split::kTrain ? config.data.train : config.data.eval;
}

TokenFileIdentity expected_identity(const std::string& dataset, const SampleSettings& settings, const Tokenizer& tokenizer) {
  FT_CHECK(file_exists(dataset), dataset, ": dataset not found");
  MappedFile file(dataset);
  TokenFileIdentity id;
  id.tokenizer = std::stoull(tokenizer.fingerprint(), nullptr, 16);
  id.source = fnv1a64(file.data(), file.size());
  id.settings = settings.hash();
  id.vocab_size = static_cast<std::uint64_t>(tokenizer.vocab_size());
  id.tokenizer_kind = tokenizer.kind();
  return id;
}

DataStats prepare_token_file(const config::RunConfig& config, Split split, const Tokenizer& tokenizer) {
  const std::string& dataset = dataset_path(config, split);
  const SampleSettings settings = SampleSettings::from_config(config.data, &tokenizer);
  const TokenFileIdentity id = expected_identity(dataset, settings, tokenizer);
  TokenizedDataset data = tokenize_dataset(dataset, settings, tokenizer, static_cast<int>(config.data.num_workers));
  write_token_file(token_file_path(config, split), data, id);
  return data.stats;
}

std::shared_ptr<TokenFile> open_token_file(const config::RunConfig& config, Split split, const Tokenizer& tokenizer,
                                           bool is_builder, double timeout_s) {
  const std::string path = token_file_path(config, split);
  const std::string& dataset = dataset_path(config, split);
  const TokenFileIdentity id = expected_identity(dataset, SampleSettings::from_config(config.data, &tokenizer), tokenizer);
  if (!file_exists(path)) {
    if (is_builder) {
      log::info(path, " does not exist yet: tokenizing ", dataset);
      Stopwatch watch;
      DataStats stats = prepare_token_file(config, split, tokenizer);
      log::info(dataset, ": ", stats.summary(), " in ", watch.seconds(), " s");
    } else {
      Stopwatch watch;
      while (!file_exists(path)) {
        FT_CHECK(watch.seconds() < timeout_s, "waited ", timeout_s, " s (parallel.timeout_s) for rank 0 to write ", path,
                 " (did rank 0 fail?)");
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }
  auto file = std::make_shared<TokenFile>(path);
  const std::string mismatch = token_file_mismatch(*file, id);
  FT_CHECK(mismatch.empty(), mismatch);
  return file;
}

}  // namespace ft::data
