// The split regexes of Hugging Face byte-level BPE tokenizers, hand-coded (no regex engine) with
// Oniguruma's leftmost-alternative, backtracking semantics, as `tokenizers`' Split(Isolated) and
// ByteLevel(use_regex) apply them. Only the known patterns: Llama 3's, Qwen2's (single digits) and
// GPT-2's (ByteLevel's own). A pattern not among them is refused by find_split_pattern's caller.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ft::data {

enum class SplitPattern { kLlama3, kQwen2, kGpt2 };

// The pattern whose regex source is exactly `regex`; false when it is none of the known ones.
bool find_split_pattern(const std::string& regex, SplitPattern* pattern);
const char* split_pattern_regex(SplitPattern pattern);

struct PreToken {
  std::uint32_t begin, end;  // byte offsets into the text
};

// Appends the pieces of `text` (valid UTF-8) between [begin, end) to *out, in order, covering it
// (the patterns match at every position, so Isolated leaves no gaps).
void split_pre_tokens(std::string_view text, std::uint32_t begin, std::uint32_t end, SplitPattern pattern,
                      std::vector<PreToken>* out);

}  // namespace ft::data
