// Command-line handling shared by programs that take a run config: `PROGRAM CONFIG
// [--set key.path=value ...]`, with the config validated before any work.
#pragma once

#include <cxxopts.hpp>

#include <string>

#include "config/run_config.h"

namespace ft::app {

// Adds the positional CONFIG and the repeatable --set option.
void add_config_options(cxxopts::Options& options);
// Loads CONFIG with the --set overrides; throws UsageError when CONFIG is missing.
config::RunConfig load_config_from_args(const cxxopts::ParseResult& args);

}  // namespace ft::app
