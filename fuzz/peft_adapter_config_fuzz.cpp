// libFuzzer target: a PEFT adapter_config.json (io/peft_adapter.h), and writing it back.
//   scripts/fuzz.sh peft_adapter_config 60
#include "io/peft_adapter.h"
#include "json_configs_fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fuzz_json(data, size, [](const ft::Json& j) {
    (void)ft::io::parse_peft_adapter_config(j, "adapter_config.json").to_json().dump();
  });
}
