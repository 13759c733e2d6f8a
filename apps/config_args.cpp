#include "config_args.h"

#include "app_main.h"

namespace ft::app {

void add_config_options(cxxopts::Options& options) {
  options.add_options()
      ("config", "the run config (JSON)", cxxopts::value<std::string>())
      ("set", "override one config key: key.path=value (repeatable)", cxxopts::value<std::vector<std::string>>());
  options.parse_positional({"config"});
  options.positional_help("CONFIG");
}

config::RunConfig load_config_from_args(const cxxopts::ParseResult& args) {
  if (!args.count("config")) throw UsageError{"a config file is required"};
  std::vector<std::string> overrides;
  if (args.count("set")) overrides = args["set"].as<std::vector<std::string>>();
  return config::load_run_config(args["config"].as<std::string>(), overrides);
}

}  // namespace ft::app
