#include "data/token_file.h"

#include <cstring>

#include "util/error.h"
#include "util/file_util.h"
#include "util/mapped_file.h"

namespace ft::data {
namespace {

constexpr char kMagic[8] = {'F', 'T', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kHeaderSize = 128;

struct Header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t header_size;
  std::uint64_t tokenizer, source, settings, vocab_size;
  std::uint64_t num_samples, num_tokens;
  std::int64_t records, bad_records, truncated, dropped_too_long, dropped_no_target, target_tokens, tokenizer_kind, reserved;
};
static_assert(sizeof(Header) == kHeaderSize, "token file header layout");

}  // namespace

void write_token_file(const std::string& path, const TokenizedDataset& data, const TokenFileIdentity& id) {
  FT_ASSERT(data.offsets.size() == data.num_samples() + 1 && data.offsets.back() == data.tokens.size() &&
                data.targets.size() == data.tokens.size(),
            "a consistent tokenized dataset");
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.header_size = kHeaderSize;
  h.tokenizer = id.tokenizer;
  h.source = id.source;
  h.settings = id.settings;
  h.vocab_size = id.vocab_size;
  h.tokenizer_kind = id.tokenizer_kind == "sentencepiece" ? 1 : id.tokenizer_kind == "bpe" ? 2 : 0;
  h.num_samples = data.num_samples();
  h.num_tokens = data.tokens.size();
  const DataStats& s = data.stats;
  h.records = s.records;
  h.bad_records = s.bad_records;
  h.truncated = s.truncated;
  h.dropped_too_long = s.dropped_too_long;
  h.dropped_no_target = s.dropped_no_target;
  h.target_tokens = s.target_tokens;
  make_directories(parent_directory(path));
  write_file_atomic_with(path, [&](int fd) {
    write_all(fd, &h, sizeof(h), path);
    write_all(fd, data.offsets.data(), data.offsets.size() * sizeof(std::uint64_t), path);
    write_all(fd, data.tokens.data(), data.tokens.size() * sizeof(std::int32_t), path);
    write_all(fd, data.targets.data(), data.targets.size(), path);
  });
}

TokenFile::TokenFile(const std::string& path) : path_(path), file_(std::make_unique<MappedFile>(path)) {
  const std::size_t size = file_->size();
  const std::string hint = " (re-run ft_prep to rebuild it)";
  FT_CHECK(size >= kHeaderSize && std::memcmp(file_->data(), kMagic, 8) == 0, path,
           ": not an ft token file", hint);
  Header h;
  std::memcpy(&h, file_->data(), sizeof(h));
  FT_CHECK(h.version == kVersion, path, ": token file version ", h.version, ", this ft reads version ", kVersion, hint);
  FT_CHECK(h.header_size == kHeaderSize, path, ": unexpected header size ", h.header_size, hint);
  // Sizes in 128-bit arithmetic so that hostile counts cannot overflow the check.
  const unsigned __int128 expected = static_cast<unsigned __int128>(kHeaderSize) +
                                     static_cast<unsigned __int128>(h.num_samples + 1) * 8 +
                                     static_cast<unsigned __int128>(h.num_tokens) * 5;
  FT_CHECK(h.num_samples < (1ull << 40) && expected == size, path, ": truncated or damaged: the header describes ",
           h.num_samples, " samples and ", h.num_tokens, " tokens but the file has ", size, " bytes", hint);
  identity_ = {h.tokenizer, h.source, h.settings, h.vocab_size,
               h.tokenizer_kind == 1 ? "sentencepiece" : h.tokenizer_kind == 2 ? "bpe" : ""};
  num_samples_ = h.num_samples;
  num_tokens_ = h.num_tokens;
  stats_.records = h.records;
  stats_.bad_records = h.bad_records;
  stats_.truncated = h.truncated;
  stats_.dropped_too_long = h.dropped_too_long;
  stats_.dropped_no_target = h.dropped_no_target;
  stats_.samples = static_cast<std::int64_t>(h.num_samples);
  stats_.tokens = static_cast<std::int64_t>(h.num_tokens);
  stats_.target_tokens = h.target_tokens;
  const std::uint8_t* base = file_->data() + kHeaderSize;
  offsets_ = reinterpret_cast<const std::uint64_t*>(base);  // 8-byte aligned: header is 128 bytes
  tokens_ = reinterpret_cast<const std::int32_t*>(base + (num_samples_ + 1) * 8);
  targets_ = base + (num_samples_ + 1) * 8 + num_tokens_ * 4;
  FT_CHECK(offsets_[0] == 0 && offsets_[num_samples_] == num_tokens_, path, ": damaged sample offsets", hint);
  for (std::size_t i = 0; i < num_samples_; ++i)
    FT_CHECK(offsets_[i] < offsets_[i + 1], path, ": damaged sample offsets at sample ", i, hint);
  for (std::uint64_t t = 0; t < num_tokens_; ++t)
    FT_CHECK(tokens_[t] >= 0 && static_cast<std::uint64_t>(tokens_[t]) < identity_.vocab_size, path, ": token id ",
             tokens_[t], " at position ", t, " is outside the vocabulary of ", identity_.vocab_size, hint);
}

TokenFile::~TokenFile() = default;

std::string token_file_mismatch(const TokenFile& file, const TokenFileIdentity& expected) {
  const TokenFileIdentity& got = file.identity();
  const std::string rerun = "; run ft_prep with this config again to rebuild it";
  if (got.tokenizer != expected.tokenizer) {
    auto kind = [](const std::string& k) {
      return k == "bpe" ? std::string(" (tokenizer.json)") : k == "sentencepiece" ? std::string(" (tokenizer.model)") : "";
    };
    return file.path() + " was made with another tokenizer" + kind(got.tokenizer_kind) + " than the model's" +
           kind(expected.tokenizer_kind) + rerun;
  }
  if (got.source != expected.source) return file.path() + " was made from a different version of the dataset" + rerun;
  if (got.settings != expected.settings)
    return file.path() + " was made with other data settings (format, template, max_seq_len, ...)" + rerun;
  if (got.vocab_size != expected.vocab_size) return file.path() + " has another vocabulary size" + rerun;
  return "";
}

}  // namespace ft::data
