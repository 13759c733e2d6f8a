// Turns a dataset file into token ids and target masks, the content of a token file: records
// are split, validated, rendered by the template, tokenized (on every core), truncated or
// dropped at max_seq_len, and counted. A sample with no target token left is dropped (its loss
// would be 0/0). Bad records stop the run with their locations, or are skipped and counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/run_config.h"
#include "data/dataset_record.h"
#include "data/prompt_template.h"
#include "util/json.h"

namespace ft::data {

class Tokenizer;

// The data settings that decide what a token file contains (a token file records their hash).
struct SampleSettings {
  RecordFormat format = RecordFormat::kAlpaca;
  PromptTemplate tmpl;
  std::int64_t max_seq_len = 512;
  bool drop_too_long = false;  // false: truncate
  bool train_on_prompt = false;
  bool skip_bad_records = false;
  std::int64_t max_bad_records = 100;

  // `tokenizer` resolves data.template "auto" for conversations (llama3, chatml or llama2_chat).
  static SampleSettings from_config(const config::DataConfig& data, const Tokenizer* tokenizer = nullptr);
  Json to_json() const;
  std::uint64_t hash() const;
};

struct DataStats {
  std::int64_t records = 0;            // records in the file
  std::int64_t bad_records = 0;        // skipped as malformed
  std::int64_t truncated = 0;          // cut to max_seq_len (and kept)
  std::int64_t dropped_too_long = 0;   // over max_seq_len with data.too_long = "drop"
  std::int64_t dropped_no_target = 0;  // no target token left (e.g. the prompt fills max_seq_len)
  std::int64_t samples = 0;
  std::int64_t tokens = 0;
  std::int64_t target_tokens = 0;

  Json to_json() const;
  std::string summary() const;  // one line for the log
};

struct TokenizedDataset {
  std::vector<std::int32_t> tokens;
  std::vector<std::uint8_t> targets;     // 1 where the token is trained on
  std::vector<std::uint64_t> offsets{0};  // sample i = [offsets[i], offsets[i+1])
  DataStats stats;

  std::size_t num_samples() const { return offsets.size() - 1; }
};

// Tokenizes one record's segments: [BOS] prompt, response [EOS], ...; the first token is never a
// target (nothing predicts it), which also keeps packed samples from learning across a boundary.
// Within a segment's template text, <...> spelling a special token of the tokenizer becomes its
// id, and the text around it is encoded piece by piece (as Hugging Face tokenizers split at
// special tokens); a record's own text is encoded as text whatever it spells.
void tokenize_segments(const std::vector<Segment>& segments, const Tokenizer& tokenizer, bool train_on_prompt,
                       std::vector<std::int32_t>& ids, std::vector<std::uint8_t>& targets);

// Checks a template against a format before any record is read (unknown placeholders are
// config errors, not per-record ones). With a tokenizer, also that every "<|...|>" the template
// spells and its stop token are special tokens of it (else they would silently be text).
void validate_template(const PromptTemplate& tmpl, RecordFormat format, const Tokenizer* tokenizer = nullptr);

// The ids a model is prompted with in generation: the prompt part of a template with `prompt` as
// the instruction (alpaca) or the user turn (chat templates), or `prompt` alone for "none"; BOS
// first where the tokenizer has one.
std::vector<std::int64_t> encode_prompt(const PromptTemplate& tmpl, const std::string& prompt, const Tokenizer& tokenizer);

// `threads` <= 0 uses every core.
TokenizedDataset tokenize_dataset(const std::string& path, const SampleSettings& settings, const Tokenizer& tokenizer,
                                  int threads = 0);

}  // namespace ft::data
