// libFuzzer target: a model's config.json (io/hf_config.h), and writing the parsed config back.
//   scripts/fuzz.sh hf_config 60
#include "io/hf_config.h"
#include "json_configs_fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fuzz_json(data, size, [](const ft::Json& j) {
    const ft::io::LlamaConfig c = ft::io::parse_llama_config(j, "config.json");
    (void)c.num_parameters();
    (void)c.to_json().dump();
  });
}
