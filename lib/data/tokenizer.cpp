// Placeholder until the sentencepiece-model reader lands (see tokenizer.h).
#include "data/tokenizer.h"

#include "util/error.h"

namespace ft::data {

struct Tokenizer::Impl {};

Tokenizer::Tokenizer(const std::string& path) : path_(path) {
  FT_CHECK(false, path, ": tokenizer not implemented yet");
}
Tokenizer::~Tokenizer() = default;
std::vector<std::int64_t> Tokenizer::encode(const std::string&, bool, bool) const { return {}; }
std::string Tokenizer::decode(const std::vector<std::int64_t>&) const { return {}; }
std::string Tokenizer::id_to_piece(std::int64_t) const { return {}; }
std::int64_t Tokenizer::vocab_size() const { return 0; }
std::int64_t Tokenizer::bos_id() const { return 1; }
std::int64_t Tokenizer::eos_id() const { return 2; }
std::int64_t Tokenizer::unk_id() const { return 0; }
std::int64_t Tokenizer::pad_id() const { return -1; }

void check_token_ids(const std::int64_t* ids, std::size_t count, std::int64_t vocab_size,
                     const std::string& context) {
  for (std::size_t i = 0; i < count; ++i)
    FT_CHECK(ids[i] >= 0 && ids[i] < vocab_size, context, ": token id ", ids[i], " at position ", i,
             " is outside the model's vocabulary [0, ", vocab_size,
             ") (hint: was the data tokenized with another tokenizer?)");
}

}  // namespace ft::data
