// libFuzzer target: a tokenizer.model (sentencepiece ModelProto, parsed by our own protobuf
// reader in data/sentencepiece_model.cpp) whose bytes are the input. Any input must load or give
// an ft::Error; one that loads then encodes and decodes a fixed text with every kind of
// character the tokenizer treats specially (spaces, newlines, bytes outside the vocabulary).
//   scripts/fuzz.sh tokenizer_model 60
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/tokenizer.h"
#include "util/error.h"
#include "util/file_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/ft_fuzz_tokenizer_" + std::to_string(::getpid()) + ".model";
  ft::write_file_atomic(path, std::string(reinterpret_cast<const char*>(data), size));
  try {
    ft::data::Tokenizer tokenizer(path);
    const std::vector<std::int64_t> ids = tokenizer.encode("Once upon a time,\n  there was\t\xc3\xa9 \xf0\x9f\x99\x82 x", true, true);
    const std::string text = tokenizer.decode(ids);
    for (std::int64_t id : ids) (void)tokenizer.id_to_piece(id);
    if (text.size() == 123456789) std::abort();  // keep the work
  } catch (const ft::Error&) {
  }
  return 0;
}
