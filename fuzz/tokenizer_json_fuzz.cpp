// libFuzzer target: a Hugging Face tokenizer.json (data/bpe_tokenizer.cpp's reader) whose bytes
// are the input. Any input must load or give an ft::Error; one that loads then encodes and
// decodes a fixed text touching every pre-tokenizer branch (contractions, letters, digits,
// punctuation, newlines, trailing spaces, non-ASCII, invalid UTF-8) and looks up a special token.
//   scripts/fuzz.sh tokenizer_json 60
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "data/tokenizer.h"
#include "util/error.h"
#include "util/file_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/tmp/ft_fuzz_tokenizer_" + std::to_string(::getpid()) + ".json";
  ft::write_file_atomic(path, std::string(reinterpret_cast<const char*>(data), size));
  try {
    ft::data::Tokenizer tokenizer(path);
    const std::vector<std::int64_t> ids =
        tokenizer.encode("He'LL say 12345 <|eot_id|>!!\r\n\n  x\xc3\xa9\xe3\x80\x80\xf0\x9f\x99\x82 \xff\xfe end   ", true, true);
    const std::string text = tokenizer.decode(ids);
    for (std::int64_t id : ids) (void)tokenizer.id_to_piece(id);
    (void)tokenizer.special_token_id("<|eot_id|>");
    if (text.size() == 123456789) std::abort();  // keep the work
  } catch (const ft::Error&) {
  }
  return 0;
}
