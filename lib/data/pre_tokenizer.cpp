// Each alternative of the patterns is a small function of the character classes at a position;
// the comments give the alternative and how Oniguruma's backtracking resolves it.
#include "data/pre_tokenizer.h"

#include "data/unicode_tables.h"

namespace ft::data {
namespace pre_tokenizer_internal {

const char* const kLlama3Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

enum Class : std::uint8_t { kClassOther = 0, kClassLetter = 1, kClassNumber = 2, kClassSpace = 3 };

struct Chars {
  std::vector<char32_t> cp;
  std::vector<std::uint8_t> cls;
  std::vector<std::uint32_t> offset;  // byte offset of each character; one more at the end
};

void decode(std::string_view text, std::uint32_t begin, std::uint32_t end, Chars* c) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  c->cp.clear();
  c->cls.clear();
  c->offset.clear();
  for (std::uint32_t i = begin; i < end;) {
    std::size_t len = 1;
    char32_t cp = p[i];
    if (cp >= 0x80) {
      len = unicode::valid_utf8_length(p + i, end - i);
      if (len == 0) len = 1;  // not reached: the text is valid UTF-8
      cp = unicode::decode_utf8(p + i, len);
    }
    c->cp.push_back(cp);
    c->cls.push_back(unicode::is_letter(cp)   ? kClassLetter
                     : unicode::is_number(cp) ? kClassNumber
                     : unicode::is_white_space(cp) ? kClassSpace
                                                  : kClassOther);
    c->offset.push_back(i);
    i += static_cast<std::uint32_t>(len);
  }
  c->offset.push_back(end);
}

// (?i:...) folding of the contraction letters: Oniguruma folds U+017F (long s) to 's' and
// U+212A (Kelvin) to 'k'; only 's' is among the letters.
char32_t fold(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c == 0x17F) return 's';
  return c;
}

// 's|'t|'re|'ve|'m|'ll|'d at i: the match length in characters, or 0.
std::size_t contraction(const Chars& c, std::size_t i, bool ignore_case) {
  const std::size_t n = c.cp.size();
  if (c.cp[i] != '\'' || i + 1 >= n) return 0;
  auto at = [&](std::size_t k) { return ignore_case ? fold(c.cp[k]) : c.cp[k]; };
  const char32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= n) return 0;
  const char32_t b = at(i + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

std::size_t run(const Chars& c, std::size_t i, std::uint8_t cls) {
  while (i < c.cls.size() && c.cls[i] == cls) ++i;
  return i;
}

bool is_cr_lf(char32_t c) { return c == '\r' || c == '\n'; }

// Llama 3 / Qwen2: the end (character index) of the match at i.
std::size_t match_llama3(const Chars& c, std::size_t i, std::size_t max_digits) {
  const std::size_t n = c.cp.size();
  if (std::size_t len = contraction(c, i, true)) return i + len;
  const std::uint8_t cls = c.cls[i];
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (cls != kClassLetter && cls != kClassNumber && !is_cr_lf(c.cp[i]) && i + 1 < n && c.cls[i + 1] == kClassLetter)
    return run(c, i + 1, kClassLetter);
  if (cls == kClassLetter) return run(c, i, kClassLetter);
  // \p{N}{1,3} (Qwen2: \p{N})
  if (cls == kClassNumber) {
    std::size_t j = i + 1;
    while (j < n && j - i < max_digits && c.cls[j] == kClassNumber) ++j;
    return j;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  std::size_t start = cls == kClassOther ? i : (c.cp[i] == ' ' && i + 1 < n && c.cls[i + 1] == kClassOther ? i + 1 : n);
  if (start < n) {
    std::size_t j = run(c, start, kClassOther);
    while (j < n && is_cr_lf(c.cp[j])) ++j;
    return j;
  }
  // cls == kClassSpace. \s*[\r\n]+: up to the last \r or \n of the whitespace run, if any.
  const std::size_t j = run(c, i, kClassSpace);
  for (std::size_t k = j; k > i; --k) {
    if (is_cr_lf(c.cp[k - 1])) return k;
  }
  // \s+(?!\S): the run, less its last character when a non-space follows; else \s+.
  if (j == n) return j;
  return j - 1 > i ? j - 1 : j;
}

std::size_t match_gpt2(const Chars& c, std::size_t i) {
  const std::size_t n = c.cp.size();
  if (std::size_t len = contraction(c, i, false)) return i + len;
  const std::uint8_t cls = c.cls[i];
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
  if (cls != kClassSpace) return run(c, i, cls);
  if (c.cp[i] == ' ' && i + 1 < n && c.cls[i + 1] != kClassSpace) return run(c, i + 1, c.cls[i + 1]);
  const std::size_t j = run(c, i, kClassSpace);
  if (j == n) return j;
  return j - 1 > i ? j - 1 : j;
}

}  // namespace pre_tokenizer_internal
using namespace pre_tokenizer_internal;

bool find_split_pattern(const std::string& regex, SplitPattern* pattern) {
  if (regex == kLlama3Regex) *pattern = SplitPattern::kLlama3;
  else if (regex == kQwen2Regex) *pattern = SplitPattern::kQwen2;
  else if (regex == kGpt2Regex) *pattern = SplitPattern::kGpt2;
  else return false;
  return true;
}

const char* split_pattern_regex(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::kLlama3: return kLlama3Regex;
    case SplitPattern::kQwen2: return kQwen2Regex;
    default: return kGpt2Regex;
  }
}

void split_pre_tokens(std::string_view text, std::uint32_t begin, std::uint32_t end, SplitPattern pattern,
                      std::vector<PreToken>* out) {
  // Fast path for the commonest piece shapes in ASCII text would go here; the general path
  // decodes once and classifies each character.
  thread_local Chars chars;
  decode(text, begin, end, &chars);
  const std::size_t n = chars.cp.size();
  for (std::size_t i = 0; i < n;) {
    const std::size_t j = pattern == SplitPattern::kGpt2 ? match_gpt2(chars, i)
                          : match_llama3(chars, i, pattern == SplitPattern::kLlama3 ? 3 : 1);
    out->push_back(PreToken{chars.offset[i], chars.offset[j]});
    i = j;
  }
}

}  // namespace ft::data
