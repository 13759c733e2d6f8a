// Token files (.ftok): a tokenized dataset that ft_prep writes once and ft_train memory-maps.
// Layout, all little-endian:
//   offset  size  field
//        0     8  magic "FTTOKENS"
//        8     4  version (1)
//       12     4  header size in bytes (128)
//       16     8  tokenizer fingerprint (FNV-1a 64 of tokenizer.model)
//       24     8  source fingerprint (FNV-1a 64 of the dataset file)
//       32     8  settings fingerprint (FNV-1a 64 of the data settings: format, template, ...)
//       40     8  tokenizer vocabulary size
//       48     8  number of samples N
//       56     8  number of tokens T
//       64    64  counts: records, bad_records, truncated, dropped_too_long, dropped_no_target,
//                 target_tokens, 2 reserved (int64 each)
//      128  8(N+1) sample offsets (uint64, in tokens; offsets[0] = 0, offsets[N] = T)
//        .   4T   token ids (int32)
//        .    T   target mask (uint8, 1 = trained on)
// Opening validates every size against the file and every offset, so a truncated or foreign file
// is an error naming it, never an out-of-bounds read.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/tokenized_dataset.h"

namespace ft {
class MappedFile;
}

namespace ft::data {

struct TokenFileIdentity {
  std::uint64_t tokenizer = 0;
  std::uint64_t source = 0;
  std::uint64_t settings = 0;
  std::uint64_t vocab_size = 0;
  std::string tokenizer_kind;  // Tokenizer::kind(): "sentencepiece" or "bpe"; empty = not recorded
};

void write_token_file(const std::string& path, const TokenizedDataset& data, const TokenFileIdentity& identity);

class TokenFile {
 public:
  explicit TokenFile(const std::string& path);
  ~TokenFile();

  const std::string& path() const { return path_; }
  const TokenFileIdentity& identity() const { return identity_; }
  const DataStats& stats() const { return stats_; }
  std::size_t num_samples() const { return num_samples_; }
  std::uint64_t num_tokens() const { return num_tokens_; }
  std::size_t sample_length(std::size_t i) const { return offsets_[i + 1] - offsets_[i]; }
  const std::int32_t* sample_tokens(std::size_t i) const { return tokens_ + offsets_[i]; }
  const std::uint8_t* sample_targets(std::size_t i) const { return targets_ + offsets_[i]; }

 private:
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  TokenFileIdentity identity_;
  DataStats stats_;
  std::size_t num_samples_ = 0;
  std::uint64_t num_tokens_ = 0;
  const std::uint64_t* offsets_ = nullptr;
  const std::int32_t* tokens_ = nullptr;
  const std::uint8_t* targets_ = nullptr;
};

// Why a token file does not fit the expected identity ("" when it does): used to refuse data
// tokenized by another tokenizer or from a changed dataset, with a hint to re-run ft_prep.
std::string token_file_mismatch(const TokenFile& file, const TokenFileIdentity& expected);

}  // namespace ft::data
