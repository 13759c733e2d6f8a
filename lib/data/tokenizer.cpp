// sentencepiece's BPE encoding and decoding, reproduced from google/sentencepiece 0.1.97
// (normalizer.cc, bpe_model.cc, model_interface.cc, sentencepiece_processor.cc) for models with
// the identity normalizer, as LLaMA's are. Unigram/word/char models and precompiled Unicode
// normalization maps are refused at load. Every step is checked against the real library by
// tests/data/tokenizer_test.cpp; comments name the sentencepiece function each part mirrors.
#include "data/tokenizer.h"

#include <algorithm>
#include <cstring>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "data/bpe_tokenizer.h"
#include "data/sentencepiece_model.h"
#include "data/string_id_table.h"
#include "util/error.h"
#include "util/file_util.h"
#include "util/hash.h"

namespace ft::data {
namespace {

constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";        // U+2581, stands for ' '
constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";    // U+FFFD
constexpr std::size_t kMaxPieceSize = 8000;                      // model_interface.cc's limit

// string_util::OneCharLen: the length a UTF-8 lead byte announces (1 for stray trail bytes).
inline std::size_t one_char_len(unsigned char c) {
  static constexpr unsigned char kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[c >> 4];
}

// string_util::DecodeUTF8 + IsValidDecodeUTF8: the length of the well-formed character at `p`
// (shortest form, no surrogates, <= U+10FFFF), or 0 when the bytes are malformed, in which case
// sentencepiece consumes one byte and stands U+FFFD for it.
inline std::size_t valid_utf8_len(const unsigned char* p, std::size_t len) {
  const unsigned c0 = p[0];
  auto trail = [](unsigned c) { return (c & 0xC0) == 0x80; };
  if (c0 < 0x80) return 1;
  if (len >= 2 && (c0 & 0xE0) == 0xC0) {
    const unsigned cp = ((c0 & 0x1F) << 6) | (p[1] & 0x3F);
    return trail(p[1]) && cp >= 0x80 ? 2 : 0;
  }
  if (len >= 3 && (c0 & 0xF0) == 0xE0) {
    const unsigned cp = ((c0 & 0x0F) << 12) | ((p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    return trail(p[1]) && trail(p[2]) && cp >= 0x800 && (cp < 0xD800 || cp >= 0xE000) ? 3 : 0;
  }
  if (len >= 4 && (c0 & 0xF8) == 0xF0) {
    const unsigned cp = ((c0 & 0x07) << 18) | ((p[1] & 0x3F) << 12) | ((p[2] & 0x3F) << 6) |
                        (p[3] & 0x3F);
    return trail(p[1]) && trail(p[2]) && trail(p[3]) && cp >= 0x10000 && cp <= 0x10FFFF ? 4 : 0;
  }
  return 0;
}

}  // namespace


struct Tokenizer::Impl {
  std::string path;
  SentencePieceModel model;
  std::vector<PieceType> types;
  std::vector<float> scores;
  StringIdTable normal;    // NORMAL, USER_DEFINED, UNUSED: the only pieces BPE merges can produce
  StringIdTable reserved;  // UNKNOWN, CONTROL, BYTE: looked up first, as in PieceToId
  std::vector<std::int32_t> canonical;  // PieceToId(IdToPiece(id)), what Decode works with
  std::int32_t unk = -1;                // the UNKNOWN piece: PieceToId's fallback
  std::int32_t byte_ids[256];
  std::vector<std::int16_t> byte_value;  // the byte a BYTE piece stands for, else -1
  std::int64_t unk_id = -1, bos_id = -1, eos_id = -1, pad_id = -1;  // as the processor reports
  std::size_t max_piece_size = 0;
  bool has_unused = false;
  bool split_words = false;  // BPE may run word by word (see bpe())
  // User-defined symbols by first byte, longest first (PrefixMatcher's longest match).
  std::vector<std::string_view> user_symbols[256];
  bool has_user_symbols = false;

  Impl(SentencePieceModel m, const std::string& file);

  std::int32_t piece_to_id(const char* data, std::size_t size) const {
    std::int32_t id = reserved.find(data, size);
    if (id >= 0) return id;
    id = normal.find(data, size);
    return id >= 0 ? id : unk;
  }

  // PrefixMatcher::PrefixMatch: the longest user-defined symbol at `p` (found = true), else one
  // UTF-8 character as announced by its lead byte.
  std::size_t prefix_match(const char* p, std::size_t len, bool* found) const {
    const auto c = static_cast<unsigned char>(*p);
    if (has_user_symbols) {
      for (std::string_view s : user_symbols[c]) {
        if (s.size() <= len && std::memcmp(s.data(), p, s.size()) == 0) {
          *found = true;
          return s.size();
        }
      }
    }
    *found = false;
    return std::min(len, one_char_len(c));
  }

  void normalize(std::string_view input, std::string* out) const;
  void bpe(const std::string& normalized, std::vector<std::int64_t>* ids) const;
};

Tokenizer::Impl::Impl(SentencePieceModel m, const std::string& file) : path(file), model(std::move(m)) {
  FT_CHECK(model.model_type == static_cast<std::int32_t>(ModelType::kBpe), path,
           ": sentencepiece model type is ", model_type_name(model.model_type), " (",
           model.model_type, "); ft implements only BPE models (LLaMA, LLaMA-2 and Mistral "
           "tokenizers are BPE)");
  FT_CHECK(model.precompiled_charsmap.empty(), path, ": the sentencepiece normalizer '",
           model.normalizer_name, "' carries a precompiled Unicode normalization map (",
           model.precompiled_charsmap.size(), " bytes); ft implements only the identity "
           "normalizer that LLaMA tokenizers use");
  FT_CHECK(model.denormalizer_charsmap.empty(), path,
           ": the sentencepiece model has a denormalizer map (", model.denormalizer_charsmap.size(),
           " bytes); ft implements only the identity normalizer that LLaMA tokenizers use");
  const auto& pieces = model.pieces;
  FT_CHECK(!pieces.empty(), path, ": the sentencepiece model has no pieces");
  FT_CHECK(pieces.size() < (1u << 30), path, ": the sentencepiece model has ", pieces.size(),
           " pieces, more than ft supports");

  // ModelInterface::InitializePieces, with its checks.
  normal.reserve(pieces.size());
  reserved.reserve(pieces.size());
  std::fill(std::begin(byte_ids), std::end(byte_ids), -1);
  byte_value.assign(pieces.size(), -1);
  std::vector<std::string_view> user;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const SentencePiece& p = pieces[i];
    const auto id = static_cast<std::int32_t>(i);
    FT_CHECK(!p.piece.empty(), path, ": sentencepiece piece ", i, " is empty");
    FT_CHECK(p.piece.size() < kMaxPieceSize, path, ": sentencepiece piece ", i, " is ",
             p.piece.size(), " bytes long (the limit is ", kMaxPieceSize, ")");
    FT_CHECK(p.piece.find('\0') == std::string::npos, path, ": sentencepiece piece ", i,
             " contains a NUL byte");
    const bool is_normal = p.type == PieceType::kNormal || p.type == PieceType::kUserDefined ||
                           p.type == PieceType::kUnused;
    FT_CHECK((is_normal ? normal : reserved).insert(p.piece, id), path, ": sentencepiece piece ", i,
             " '", p.piece, "' is already defined");
    types.push_back(p.type);
    scores.push_back(p.score);
    if (is_normal) max_piece_size = std::max(max_piece_size, p.piece.size());
    if (p.type == PieceType::kUnused) has_unused = true;
    if (p.type == PieceType::kUserDefined) user.push_back(p.piece);
    if (p.type == PieceType::kUnknown) {
      FT_CHECK(unk < 0, path, ": sentencepiece pieces ", unk, " and ", i, " are both unknown (<unk>) pieces");
      unk = id;
    }
    if (p.type == PieceType::kByte) {
      FT_CHECK(model.byte_fallback, path, ": sentencepiece byte piece ", i, " '", p.piece,
               "' is found although byte_fallback is false");
      // PieceToByte accepts exactly "<0x%02X>".
      auto hex = [](char c) {
        return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      };
      const bool ok = p.piece.size() == 6 && p.piece.compare(0, 3, "<0x") == 0 && p.piece[5] == '>' &&
                      hex(p.piece[3]) >= 0 && hex(p.piece[4]) >= 0;
      FT_CHECK(ok, path, ": sentencepiece byte piece ", i, " '", p.piece, "' is invalid (expected <0xHH>)");
      const int value = hex(p.piece[3]) * 16 + hex(p.piece[4]);
      byte_value[i] = static_cast<std::int16_t>(value);
      byte_ids[value] = id;
    }
  }
  FT_CHECK(unk >= 0, path, ": the sentencepiece model has no unknown (<unk>) piece");
  if (model.byte_fallback) {
    for (int b = 0; b < 256; ++b)
      FT_CHECK(byte_ids[b] >= 0, path, ": the sentencepiece model has byte_fallback but no piece <0x",
               "0123456789ABCDEF"[b >> 4], "0123456789ABCDEF"[b & 15], "> (256 byte pieces are needed)");
  }
  std::sort(user.begin(), user.end());
  user.erase(std::unique(user.begin(), user.end()), user.end());
  for (std::string_view s : user) user_symbols[static_cast<unsigned char>(s[0])].push_back(s);
  for (auto& list : user_symbols) {
    std::stable_sort(list.begin(), list.end(),
                     [](std::string_view a, std::string_view b) { return a.size() > b.size(); });
  }
  has_user_symbols = !user.empty();

  // Word-by-word BPE is exact when no mergeable piece has a space symbol after a non-space
  // character (before one, with whitespace as suffix).
  const std::string_view ws = model.escape_whitespaces ? kSpaceSymbol : std::string_view(" ");
  split_words = !has_unused;
  for (const SentencePiece& p : pieces) {
    if (!split_words) break;
    if (p.type != PieceType::kNormal && p.type != PieceType::kUserDefined) continue;
    std::string_view rest = p.piece;
    if (model.treat_whitespace_as_suffix) {
      while (rest.size() >= ws.size() && rest.substr(rest.size() - ws.size()) == ws)
        rest.remove_suffix(ws.size());
    } else {
      while (rest.substr(0, ws.size()) == ws) rest.remove_prefix(ws.size());
    }
    if (rest.find(ws) != std::string_view::npos) split_words = false;
  }

  canonical.resize(pieces.size());
  for (std::size_t i = 0; i < pieces.size(); ++i)
    canonical[i] = piece_to_id(pieces[i].piece.data(), pieces[i].piece.size());

  // SentencePieceProcessor::unk_id() etc.: the id of the named piece if it has the right type.
  auto special = [&](const std::string& piece, PieceType type) -> std::int64_t {
    const std::int32_t id = piece_to_id(piece.data(), piece.size());
    return types[id] == type ? id : -1;
  };
  unk_id = special(model.unk_piece, PieceType::kUnknown);
  bos_id = special(model.bos_piece, PieceType::kControl);
  eos_id = special(model.eos_piece, PieceType::kControl);
  pad_id = special(model.pad_piece, PieceType::kControl);
}

// Normalizer::Normalize without a character map: optional removal of leading, trailing and
// repeated ' ', ' ' -> U+2581, the dummy prefix (or suffix), malformed UTF-8 bytes -> U+FFFD one
// byte at a time, user-defined symbols copied whole.
void Tokenizer::Impl::normalize(std::string_view input, std::string* out) const {
  out->clear();
  if (input.empty()) return;
  const auto& spec = model;
  const std::size_t n = input.size();
  const char* data = input.data();
  // NormalizePrefix: the normalized text of the character at `pos` and how many bytes it uses.
  auto prefix = [&](std::size_t pos, std::size_t* consumed) -> std::string_view {
    const char* p = data + pos;
    const std::size_t left = n - pos;
    if (has_user_symbols) {
      bool found = false;
      const std::size_t len = prefix_match(p, left, &found);
      if (found) {
        *consumed = len;
        return {p, len};
      }
    }
    const std::size_t len = valid_utf8_len(reinterpret_cast<const unsigned char*>(p), left);
    if (len == 0) {
      *consumed = 1;
      return kReplacementChar;
    }
    *consumed = len;
    return {p, len};
  };

  std::size_t pos = 0, consumed = 0;
  if (spec.remove_extra_whitespaces) {
    while (pos < n && prefix(pos, &consumed) == " ") pos += consumed;
  }
  if (pos == n) return;  // nothing but spaces

  out->reserve(3 * (n - pos) + 3);
  const std::string_view space = spec.escape_whitespaces ? kSpaceSymbol : std::string_view(" ");
  if (!spec.treat_whitespace_as_suffix && spec.add_dummy_prefix) out->append(space);

  bool is_prev_space = spec.remove_extra_whitespaces;
  while (pos < n) {
    std::string_view sp = prefix(pos, &consumed);
    while (is_prev_space && !sp.empty() && sp.front() == ' ') sp.remove_prefix(1);
    if (!sp.empty()) {
      for (char c : sp) {
        if (c == ' ' && spec.escape_whitespaces)
          out->append(kSpaceSymbol);
        else
          out->push_back(c);
      }
      is_prev_space = sp.back() == ' ';
    }
    pos += consumed;
    if (!spec.remove_extra_whitespaces) is_prev_space = false;
  }
  if (spec.remove_extra_whitespaces) {
    while (out->size() >= space.size() &&
           out->compare(out->size() - space.size(), space.size(), space) == 0)
      out->resize(out->size() - space.size());
  }
  if (spec.treat_whitespace_as_suffix && spec.add_dummy_prefix) out->append(space);
}

// bpe::Model::SampleEncode with alpha = 0, followed by the id half of
// SentencePieceProcessor::PopulateSentencePieceText (byte fallback, merging of unknown runs).
//
// sentencepiece runs one merge agenda over the whole text. When no mergeable piece has a space
// symbol after a non-space character (before one, with treat_whitespace_as_suffix), as in
// every vocabulary trained with split_by_whitespace, no pair can ever cross the start of a
// word, so the words are merged one at a time with the same (score, position) order: same
// result, small heaps. Models with UNUSED pieces keep the single agenda, because their
// resegmentation depends on the order in which all pairs were proposed.
void Tokenizer::Impl::bpe(const std::string& normalized, std::vector<std::int64_t>* ids) const {
  if (normalized.empty()) return;
  const char* text = normalized.data();
  const auto total = static_cast<std::int32_t>(normalized.size());

  struct Symbol {
    std::int32_t begin, size;  // bytes of `normalized`; size 0 once merged into its left neighbour
    std::int32_t prev, next;   // -1 at either end of the word (of the text without words)
    std::int32_t id;           // the piece id once merged; -1 for a symbol never merged
    bool freeze;               // a user-defined symbol: never merged
  };
  struct Pair {
    float score;
    std::int32_t left, right, size, id;
  };
  // The agenda's order: best score first, ties to the leftmost pair.
  auto worse = [](const Pair& a, const Pair& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };

  const std::string_view ws = model.escape_whitespaces ? kSpaceSymbol : std::string_view(" ");
  auto starts_with_ws = [&](std::int32_t begin, std::int32_t size) {
    return static_cast<std::size_t>(size) >= ws.size() &&
           std::memcmp(text + begin, ws.data(), ws.size()) == 0;
  };
  auto ends_with_ws = [&](std::int32_t begin, std::int32_t size) {
    return static_cast<std::size_t>(size) >= ws.size() &&
           std::memcmp(text + begin + size - ws.size(), ws.data(), ws.size()) == 0;
  };

  std::vector<Symbol> symbols;
  symbols.reserve(normalized.size());
  std::vector<std::int32_t> words;  // index of the first symbol of each word
  for (std::int32_t pos = 0; pos < total;) {
    bool found = false;
    const auto len = static_cast<std::int32_t>(prefix_match(text + pos, total - pos, &found));
    const auto index = static_cast<std::int32_t>(symbols.size());
    bool new_word = index == 0;
    if (!new_word && split_words) {
      const Symbol& prev = symbols.back();
      new_word = model.treat_whitespace_as_suffix
                     ? ends_with_ws(prev.begin, prev.size) && !starts_with_ws(pos, len)
                     : starts_with_ws(pos, len) && !ends_with_ws(prev.begin, prev.size);
    }
    if (new_word) {
      words.push_back(index);
    } else {
      symbols.back().next = index;
    }
    symbols.push_back(Symbol{pos, len, new_word ? -1 : index - 1, -1, -1, found});
    pos += len;
  }

  // rev_merge: for UNUSED pieces, how the merge that last proposed them split them, so that
  // they can be taken apart again (sentencepiece's resegmentation). Only for such models.
  std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>> rev_merge;

  std::vector<Pair> agenda;
  auto maybe_add_pair = [&](std::int32_t left, std::int32_t right) {
    if (left < 0 || right < 0 || symbols[left].freeze || symbols[right].freeze) return;
    const std::size_t size = static_cast<std::size_t>(symbols[left].size) + symbols[right].size;
    if (size > max_piece_size) return;
    const char* piece = text + symbols[left].begin;
    const std::int32_t id = normal.find(piece, size);
    if (id < 0) return;
    agenda.push_back(Pair{scores[id], left, right, static_cast<std::int32_t>(size), id});
    std::push_heap(agenda.begin(), agenda.end(), worse);
    if (types[id] == PieceType::kUnused) {
      rev_merge[std::string_view(piece, size)] = {
          std::string_view(piece, symbols[left].size),
          std::string_view(text + symbols[right].begin, symbols[right].size)};
    }
  };

  bool prev_unknown = false;
  auto emit = [&](std::string_view piece, std::int32_t id) {
    const bool unknown = types[id] == PieceType::kUnknown;
    if (unknown && model.byte_fallback) {
      for (char c : piece) ids->push_back(byte_ids[static_cast<unsigned char>(c)]);
    } else if (!(unknown && prev_unknown)) {  // a run of unknown pieces becomes one
      ids->push_back(id);
    }
    prev_unknown = unknown;
  };
  std::vector<std::string_view> stack;  // resegmentation of UNUSED pieces, without recursion

  for (std::size_t w = 0; w < words.size(); ++w) {
    const std::int32_t first = words[w];
    const auto end = static_cast<std::int32_t>(w + 1 < words.size() ? words[w + 1] : symbols.size());
    for (std::int32_t i = first + 1; i < end; ++i) maybe_add_pair(i - 1, i);

    while (!agenda.empty()) {
      std::pop_heap(agenda.begin(), agenda.end(), worse);
      const Pair top = agenda.back();
      agenda.pop_back();
      Symbol& left = symbols[top.left];
      Symbol& right = symbols[top.right];
      // Stale: one side has been merged away or grown since the pair was proposed.
      if (left.size == 0 || right.size == 0 || left.size + right.size != top.size) continue;
      left.size += right.size;
      left.id = top.id;
      left.next = right.next;
      if (right.next >= 0) symbols[right.next].prev = top.left;
      right.size = 0;
      maybe_add_pair(left.prev, top.left);
      maybe_add_pair(top.left, left.next);
    }

    for (std::int32_t i = first; i != -1; i = symbols[i].next) {
      const Symbol& s = symbols[i];
      std::string_view piece(text + s.begin, s.size);
      // PieceToId looks in the reserved pieces first; a merged symbol is a known normal piece.
      std::int32_t id = s.id >= 0 ? canonical[s.id] : piece_to_id(piece.data(), piece.size());
      if (!has_unused || types[id] != PieceType::kUnused) {
        emit(piece, id);
        continue;
      }
      stack.assign(1, piece);
      while (!stack.empty()) {
        const std::string_view w = stack.back();
        stack.pop_back();
        const std::int32_t wid = piece_to_id(w.data(), w.size());
        const auto it = types[wid] == PieceType::kUnused ? rev_merge.find(w) : rev_merge.end();
        if (it == rev_merge.end()) {
          emit(w, wid);
        } else {
          stack.push_back(it->second.second);
          stack.push_back(it->second.first);
        }
      }
    }
  }
}

std::string tokenizer_file(const std::string& model_dir) {
  const std::string json = join_path(model_dir, "tokenizer.json");
  const std::string model = join_path(model_dir, "tokenizer.model");
  if (!file_exists(json)) return model;
  if (file_exists(model) && is_sentencepiece_conversion(json, read_file(json))) return model;
  return json;
}

Tokenizer::Tokenizer(const std::string& path) : path_(path) {
  if (is_directory(path)) {
    path_ = tokenizer_file(path);
    FT_CHECK(file_exists(path_), path, ": the model folder has no tokenizer.json or tokenizer.model (hint: ft reads "
             "Hugging Face byte-level BPE tokenizer.json files and sentencepiece tokenizer.model files)");
  }
  FT_CHECK(file_exists(path_), path_, ": tokenizer file not found");
  const std::string bytes = read_file(path_);
  const bool json = path_.size() >= 5 && path_.compare(path_.size() - 5, 5, ".json") == 0;
  if (json) {
    kind_ = "bpe";
    bpe_ = std::make_unique<BpeTokenizer>(path_, bytes);
    std::uint64_t h = fnv1a64(bytes.data(), bytes.size());
    if (!bpe_->eos_token().empty()) {
      const std::string eos = "\neos_token=" + bpe_->eos_token();
      h = fnv1a64(eos.data(), eos.size(), h);
    }
    fingerprint_ = to_hex(h);
    return;
  }
  fingerprint_ = to_hex(fnv1a64(bytes.data(), bytes.size()));
  impl_ = std::make_unique<Impl>(parse_sentencepiece_model(bytes, path_), path_);
}

Tokenizer::~Tokenizer() = default;

std::vector<std::int64_t> Tokenizer::encode(const std::string& text, bool add_bos,
                                            bool add_eos) const {
  FT_CHECK(text.size() < (1u << 29), path_, ": cannot encode a text of ", text.size(),
           " bytes at once (the limit is 512 MiB)");
  std::vector<std::int64_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (bpe_) {
    if (add_bos && bpe_->bos_id() >= 0) ids.push_back(bpe_->bos_id());
    bpe_->encode(text, &ids);
    if (add_eos && bpe_->eos_id() >= 0) ids.push_back(bpe_->eos_id());
    return ids;
  }
  if (add_bos && impl_->bos_id >= 0) ids.push_back(impl_->bos_id);
  std::string normalized;
  impl_->normalize(text, &normalized);
  impl_->bpe(normalized, &ids);
  if (add_eos && impl_->eos_id >= 0) ids.push_back(impl_->eos_id);
  return ids;
}

// SentencePieceProcessor::Decode: control pieces vanish, unknown pieces print as unk_surface,
// runs of byte pieces are reassembled into UTF-8 (malformed bytes -> U+FFFD each), U+2581 ->
// ' ', and the space of the dummy prefix is dropped from the first piece that carries it.
std::string Tokenizer::decode(const std::vector<std::int64_t>& ids) const {
  if (bpe_) return bpe_->decode(ids);
  const Impl& m = *impl_;
  const auto vocab = static_cast<std::int64_t>(m.types.size());
  std::string text;
  std::string bytes;  // pending byte pieces
  auto flush_bytes = [&] {
    const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    for (std::size_t offset = 0; offset < bytes.size();) {
      const std::size_t len = valid_utf8_len(p + offset, bytes.size() - offset);
      if (len == 0) {
        text.append(kReplacementChar);
        offset += 1;
      } else {
        text.append(bytes, offset, len);
        offset += len;
      }
    }
    bytes.clear();
  };
  const bool strip_first_space = m.model.add_dummy_prefix || m.model.remove_extra_whitespaces;
  bool is_bos_ws = true;     // still expecting the piece whose leading U+2581 is the dummy prefix
  bool bos_ws_seen = false;  // that piece has been seen
  for (std::size_t i = 0; i < ids.size(); ++i) {
    FT_CHECK(ids[i] >= 0 && ids[i] < vocab, path_, ": cannot decode token id ", ids[i],
             " at position ", i, ": outside the vocabulary [0, ", vocab, ")");
    const std::int32_t id = m.canonical[ids[i]];
    const PieceType type = m.types[id];
    if (type == PieceType::kByte) {
      bytes.push_back(static_cast<char>(m.byte_value[id]));
      continue;
    }
    flush_bytes();
    if (bos_ws_seen || !text.empty()) is_bos_ws = false;
    bos_ws_seen = false;
    if (type == PieceType::kControl) continue;
    if (type == PieceType::kUnknown) {
      text.append(m.model.unk_surface);
      continue;
    }
    std::string_view piece = m.model.pieces[id].piece;
    if (is_bos_ws && strip_first_space) {
      if (piece.substr(0, kSpaceSymbol.size()) == kSpaceSymbol) {
        piece.remove_prefix(kSpaceSymbol.size());
        bos_ws_seen = true;
      }
      // With remove_extra_whitespaces every leading space was removed, so keep stripping.
      if (m.model.remove_extra_whitespaces) bos_ws_seen = false;
    }
    for (std::size_t pos = 0; pos < piece.size();) {
      if (piece.compare(pos, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
        text.push_back(' ');
        pos += kSpaceSymbol.size();
      } else {
        text.push_back(piece[pos++]);
      }
    }
  }
  flush_bytes();
  return text;
}

std::string Tokenizer::id_to_piece(std::int64_t id) const {
  if (bpe_) return bpe_->id_to_piece(id);
  const auto vocab = static_cast<std::int64_t>(impl_->types.size());
  FT_CHECK(id >= 0 && id < vocab, path_, ": token id ", id, " is outside the vocabulary [0, ",
           vocab, ")");
  return impl_->model.pieces[id].piece;
}

std::int64_t Tokenizer::vocab_size() const {
  return bpe_ ? bpe_->vocab_size() : static_cast<std::int64_t>(impl_->types.size());
}
std::int64_t Tokenizer::bos_id() const { return bpe_ ? bpe_->bos_id() : impl_->bos_id; }
std::int64_t Tokenizer::eos_id() const { return bpe_ ? bpe_->eos_id() : impl_->eos_id; }
std::int64_t Tokenizer::unk_id() const { return bpe_ ? -1 : impl_->unk_id; }
std::int64_t Tokenizer::pad_id() const { return bpe_ ? -1 : impl_->pad_id; }

std::int64_t Tokenizer::special_token_id(const std::string& text) const {
  if (bpe_) return bpe_->special_token_id(text);
  const std::int32_t id = impl_->reserved.find(text.data(), text.size());
  if (id < 0) return -1;
  const PieceType type = impl_->types[id];
  return type == PieceType::kControl || type == PieceType::kUnknown ? id : -1;
}

void check_token_ids(const std::int64_t* ids, std::size_t count, std::int64_t vocab_size,
                     const std::string& context) {
  for (std::size_t i = 0; i < count; ++i)
    FT_CHECK(ids[i] >= 0 && ids[i] < vocab_size, context, ": token id ", ids[i], " at position ", i,
             " is outside the model's vocabulary [0, ", vocab_size,
             ") (hint: was the data tokenized with another tokenizer?)");
}

}  // namespace ft::data
