// libFuzzer target: opening a token file (data/token_file.h) whose bytes are the input: the
// header's counts, the sample offsets and the token ids are all checked against the file, so
// any input must open or give an ft::Error; never an out-of-bounds read. Then every sample is
// read, as training would.
//   scripts/fuzz.sh token_file 60
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/token_file.h"
#include "util/error.h"
#include "util/file_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/ft_fuzz_token_file_" + std::to_string(::getpid()) + ".ftok";
  ft::write_file_atomic(path, std::string(reinterpret_cast<const char*>(data), size));
  try {
    ft::data::TokenFile file(path);
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < file.num_samples(); ++i) {
      const std::size_t n = file.sample_length(i);
      for (std::size_t t = 0; t < n; ++t) sum += static_cast<std::uint64_t>(file.sample_tokens(i)[t]) + file.sample_targets(i)[t];
    }
    if (sum == 1) std::abort();  // keep the reads
  } catch (const ft::Error&) {
  }
  return 0;
}
