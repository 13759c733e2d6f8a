// libFuzzer target: what a resume reads before any tensor: a checkpoint's manifest.json and
// training_state.json (checkpoint/manifest.h, checkpoint/training_state.h). The first input byte
// picks the parser.
//   scripts/fuzz.sh checkpoint_manifest 60
#include "checkpoint/manifest.h"
#include "checkpoint/training_state.h"
#include "json_configs_fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const bool manifest = data[0] % 2 == 0;
  return fuzz_json(data + 1, size - 1, [manifest](const ft::Json& j) {
    if (manifest) {
      const auto m = ft::checkpoint::Manifest::from_json(j, "manifest.json");
      (void)m.to_json().dump();
    } else {
      (void)ft::checkpoint::TrainingState::from_json(j, "training_state.json").to_json().dump();
    }
  });
}
