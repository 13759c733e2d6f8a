// Unicode character data for the Hugging Face tokenizer.json pipeline (bpe_tokenizer.h): the
// \p{L}, \p{N} and \s (White_Space) classes its split regexes use, UTF-8 decoding as Rust's
// String::from_utf8_lossy does it, and NFC normalization (canonical decomposition, canonical
// ordering, composition with Hangul). Tables: unicode_tables.inc, generated from the Unicode 15.0
// database (Oniguruma's in `tokenizers`) by scripts/make_unicode_tables.py. No other forms (NFD, NFKC).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ft::data::unicode {

bool is_letter_slow(char32_t c);
bool is_number_slow(char32_t c);
bool is_white_space_slow(char32_t c);

inline bool is_letter(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  return is_letter_slow(c);
}
inline bool is_number(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return is_number_slow(c);
}
inline bool is_white_space(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return is_white_space_slow(c);
}
int combining_class(char32_t c);

// The well-formed UTF-8 character at p (len bytes left): its length, or 0 when malformed.
std::size_t valid_utf8_length(const unsigned char* p, std::size_t len);
// Decodes the well-formed character of `length` bytes at p.
char32_t decode_utf8(const unsigned char* p, std::size_t length);
void append_utf8(char32_t c, std::string* out);
// String::from_utf8_lossy: each maximal ill-formed subsequence becomes one U+FFFD (the Unicode
// "substitution of maximal subparts" practice, also Python's errors="replace"). Returns false,
// leaving *out alone, when `text` is already valid UTF-8.
bool utf8_lossy(std::string_view text, std::string* out);

// NFC of valid UTF-8 `text`; returns false, leaving *out alone, when `text` is already NFC by
// the quick check (every character NFC_Quick_Check=Yes and combining class 0, or ASCII).
bool nfc(std::string_view text, std::string* out);

}  // namespace ft::data::unicode
