// libFuzzer target: the safetensors header parser must turn any byte string into either a
// validated header whose every tensor lies inside the input, or an ft::Error; never a crash,
// a hang or an out-of-bounds read (AddressSanitizer and UBSan watch for those).
//   scripts/fuzz.sh safetensors_header 60
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "io/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    auto header = ft::io::parse_safetensors_header(data, size, "fuzz");
    for (const auto& t : header.tensors)
      if (t.begin > t.end || header.data_start + t.end > size) std::abort();  // validation let it through
  } catch (const ft::Error&) {
  }
  return 0;
}
