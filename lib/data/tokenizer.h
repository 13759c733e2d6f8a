// The tokenizer of a model folder: a sentencepiece BPE tokenizer (tokenizer.model) with Hugging
// Face LlamaTokenizer's conventions, or a Hugging Face byte-level BPE tokenizer.json (Llama 3,
// Qwen2; bpe_tokenizer.h). encode adds BOS (and EOS only when asked) when the tokenizer has them;
// decode drops BOS/EOS/control pieces and special tokens. Text is never scanned for "<s>"- or
// "<|eot_id|>"-style special-token strings: special tokens enter sequences as ids
// (special_token_id).
// ft reads tokenizer.model itself instead of linking Debian's libsentencepiece, which embeds and
// exports protobuf 3.14 and crashes at start-up in any process that also loads LibTorch
// (protobuf 3.21); tests check every encoding against the real sentencepiece and `tokenizers`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ft::data {

// The tokenizer file a model folder is read with (what the Tokenizer constructor opens for a
// folder, and what a run's input check looks for): MODEL_DIR/tokenizer.json when present, else
// MODEL_DIR/tokenizer.model. One exception, decided deliberately: Llama-2 and Mistral folders ship
// both a sentencepiece model converted to tokenizer.json (model.byte_fallback true, a Metaspace
// or Prepend("\u2581") step) and the tokenizer.model it came from; there ft reads tokenizer.model,
// exactly that model, instead of refusing the conversion.
std::string tokenizer_file(const std::string& model_dir);

class BpeTokenizer;

class Tokenizer {
 public:
  // `path` is a tokenizer.model or tokenizer.json file, or a model folder (tokenizer_file).
  explicit Tokenizer(const std::string& path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // BOS / EOS are added when asked and the tokenizer has them (bos_id() / eos_id() >= 0).
  std::vector<std::int64_t> encode(const std::string& text, bool add_bos = true,
                                   bool add_eos = false) const;
  std::string decode(const std::vector<std::int64_t>& ids) const;
  std::string id_to_piece(std::int64_t id) const;

  std::int64_t vocab_size() const;
  std::int64_t bos_id() const;
  std::int64_t eos_id() const;
  std::int64_t unk_id() const;
  std::int64_t pad_id() const;  // -1 when the model has none (LLaMA)

  // "sentencepiece" (tokenizer.model) or "bpe" (Hugging Face tokenizer.json, byte-level BPE).
  const std::string& kind() const { return kind_; }
  // The id of the added/special token spelled exactly `text` ("<|eot_id|>", "<|im_end|>"; for
  // sentencepiece the control pieces "<s>", "</s>" and the unknown piece "<unk>"), or -1 when the
  // tokenizer has none. This is how special tokens enter a sequence: encode() never looks for
  // them in text.
  std::int64_t special_token_id(const std::string& text) const;

  const std::string& path() const { return path_; }  // the tokenizer.model / tokenizer.json read
  // FNV-1a 64 of the tokenizer file's bytes, as 16 hex digits (for tokenizer.json continued over
  // "\neos_token=" and tokenizer_config.json's eos_token, when it names one): identifies the
  // tokenizer in token files so that data tokenized by another tokenizer is refused.
  const std::string& fingerprint() const { return fingerprint_; }

 private:
  std::string path_;
  std::string fingerprint_;
  std::string kind_ = "sentencepiece";
  struct Impl;
  std::unique_ptr<Impl> impl_;       // sentencepiece
  std::unique_ptr<BpeTokenizer> bpe_;  // tokenizer.json
};

// Throws ft::Error when any id is < 0 or >= vocab_size, naming `context` (a file, a record),
// the position and the offending id: on a GPU such an id becomes an asynchronous device assert
// far from its cause, so it is caught on the CPU first.
void check_token_ids(const std::int64_t* ids, std::size_t count, std::int64_t vocab_size,
                     const std::string& context);
inline void check_token_ids(const std::vector<std::int64_t>& ids, std::int64_t vocab_size,
                            const std::string& context) {
  check_token_ids(ids.data(), ids.size(), vocab_size, context);
}

}  // namespace ft::data
