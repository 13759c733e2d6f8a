// Where token files live and when they are (re)built. ft_prep always tokenizes and writes them;
// ft_train opens them, refuses one made with another tokenizer, from a changed dataset or with
// other data settings (saying to re-run ft_prep), and builds a missing one on rank 0 only while
// the other ranks wait for it to appear (written atomically, so nobody reads half a file).
#pragma once

#include <memory>
#include <string>

#include "config/run_config.h"
#include "data/token_file.h"
#include "data/tokenized_dataset.h"

namespace ft::data {

class Tokenizer;

enum class Split { kTrain, kEval };

// data.cache_dir (default RUN_DIR/tokens) / train.ftok or eval.ftok.
std::string token_file_path(const config::RunConfig& config, Split split);
const std::string& dataset_path(const config::RunConfig& config, Split split);

// The identity a token file for this dataset must carry (hashes the dataset file).
TokenFileIdentity expected_identity(const std::string& dataset, const SampleSettings& settings, const Tokenizer& tokenizer);

// Tokenizes and writes the token file (ft_prep). Returns the statistics.
DataStats prepare_token_file(const config::RunConfig& config, Split split, const Tokenizer& tokenizer);

// Opens a matching token file (ft_train). When there is none: the builder prepares it, the
// others wait up to `timeout_s` for it to appear.
std::shared_ptr<TokenFile> open_token_file(const config::RunConfig& config, Split split, const Tokenizer& tokenizer,
                                           bool is_builder, double timeout_s);

}  // namespace ft::data
