// libFuzzer target: a training config (config/run_config.h: schema, types, ranges, cross-key
// rules, --set overrides), as ft_train reads it.
//   scripts/fuzz.sh run_config 60
#include "config/run_config.h"
#include "json_configs_fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fuzz_json(data, size, [](const ft::Json& j) {
    const ft::config::RunConfig c = ft::config::parse_run_config(j, "config.json", {"train.lr=0.001"});
    (void)ft::config::config_hash(c.resolved);
  });
}
