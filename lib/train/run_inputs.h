// The files a run config names, checked all at once before any other output or work: a user's
// first command on a shipped config gets one error listing everything missing, each with what
// belongs there and how to point the config elsewhere, instead of failing on the first.
#pragma once

#include <string>
#include <vector>

#include "config/run_config.h"

namespace ft::train {

struct InputNeeds {
  bool weights = true;  // ft_prep needs only the tokenizer and the data
};

struct MissingInput {
  std::string key;        // the config key that names it: "model.path", "data.train", ...
  std::string path;       // what was looked for
  std::string expected;   // what belongs there
};

// Every input of `config` that is not there, in config order (none: an empty list).
std::vector<MissingInput> find_missing_inputs(const config::RunConfig& config, const InputNeeds& needs = {});

// Throws ft::Error listing every missing input of `config` (see find_missing_inputs).
void check_run_inputs(const config::RunConfig& config, const InputNeeds& needs = {});

}  // namespace ft::train
