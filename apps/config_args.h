// Command-line handling shared by programs that take a run config: `PROGRAM CONFIG
// [--set key.path=value ...]`, with the config validated before any work.
#pragma once

#include <cxxopts.hpp>

#include <string>
#include <vector>

#include "config/run_config.h"

namespace ft::app {

// Adds the positional CONFIG and the repeatable --set option.
void add_config_options(cxxopts::Options& options);
// Every --set value, in command-line order, each whole: a JSON list or object keeps its commas
// (cxxopts would split a vector option's values at them).
std::vector<std::string> set_overrides(const cxxopts::ParseResult& args);
// Loads CONFIG with the --set overrides; throws UsageError when CONFIG is missing.
config::RunConfig load_config_from_args(const cxxopts::ParseResult& args);

}  // namespace ft::app
