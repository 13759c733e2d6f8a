#include "config_args.h"

#include "app_main.h"

namespace ft::app {

void add_config_options(cxxopts::Options& options) {
  options.add_options()
      ("config", "the run config (JSON)", cxxopts::value<std::string>())
      ("set", "override one config key: key.path=VALUE, VALUE a JSON value or a plain word (repeatable); "
              "e.g. --set 'lora.target_modules=[\"q_proj\",\"v_proj\"]'",
       cxxopts::value<std::string>());
  options.parse_positional({"config"});
  options.positional_help("CONFIG");
}

config::RunConfig load_config_from_args(const cxxopts::ParseResult& args) {
  if (!args.count("config")) throw UsageError{"a config file is required"};
  return config::load_run_config(args["config"].as<std::string>(), set_overrides(args));
}

std::vector<std::string> set_overrides(const cxxopts::ParseResult& args) {
  // A single-valued option given several times keeps only its last value, but every occurrence
  // is in arguments(), whole and in order.
  std::vector<std::string> out;
  for (const auto& kv : args.arguments()) {
    if (kv.key() == "set") out.push_back(kv.value());
  }
  return out;
}

}  // namespace ft::app
