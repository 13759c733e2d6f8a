// A Hugging Face tokenizer.json reader and encoder for byte-level BPE, as the `tokenizers`
// library runs it (Llama 3, Qwen2, GPT-2 style): normalizer null or NFC; pre_tokenizer Split with
// a known regex (pre_tokenizer.h) then ByteLevel, or ByteLevel(use_regex) alone; BPE with
// ignore_merges, merges as "a b" strings or ["a", "b"] pairs; added tokens; ByteLevel decoding.
// Unlike `tokenizers`, encode never splits text at added/special tokens: they enter sequences
// as ids (special_token_id). Text that is not UTF-8 is read as String::from_utf8_lossy reads it.
// Anything else (WordPiece, Unigram, other normalizers, pre-tokenizers or decoders, dropout,
// byte_fallback) is refused with the file, the field and the value.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ft::data {

class BpeTokenizer {
 public:
  // `path` is the tokenizer.json (its bytes in `json`); tokenizer_config.json beside it, when
  // present, gives the EOS token (eos_token).
  BpeTokenizer(const std::string& path, const std::string& json);
  ~BpeTokenizer();

  void encode(std::string_view text, std::vector<std::int64_t>* ids) const;
  // As `tokenizers`' decode(ids, skip_special_tokens=True) with the ByteLevel decoder.
  std::string decode(const std::vector<std::int64_t>& ids) const;
  std::string id_to_piece(std::int64_t id) const;  // the token as tokenizer.json spells it

  std::int64_t vocab_size() const;   // max id + 1 over the vocabulary and the added tokens
  std::int64_t bos_id() const;       // what post_processor's TemplateProcessing puts before $A, or -1
  std::int64_t eos_id() const;       // tokenizer_config.json's eos_token, or -1
  std::int64_t special_token_id(const std::string& text) const;  // an added token, or -1
  const std::string& eos_token() const;  // "" when none

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// True when tokenizer.json `json` (file `path`) is a sentencepiece model converted by
// transformers (model.byte_fallback true, or a Metaspace / Prepend("▁") step): Llama-2 and
// Mistral folders, which ship tokenizer.model as well.
bool is_sentencepiece_conversion(const std::string& path, const std::string& json);

}  // namespace ft::data
