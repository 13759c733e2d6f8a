// tokenizer.json reading (each field checked, errors naming file, field path and value) and the
// encoding pipeline: from_utf8_lossy -> NFC -> Split -> ByteLevel -> BPE. The BPE works on raw
// bytes: ByteLevel's byte -> character map is a bijection, so vocabulary tokens are mapped back to
// bytes once at load. BPE merges as tokenizers' Word::merge_all does: a heap of (rank, position),
// stale entries dropped when the pair at that position no longer makes the same token.
#include "data/bpe_tokenizer.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "data/pre_tokenizer.h"
#include "data/string_id_table.h"
#include "data/unicode_tables.h"
#include "util/error.h"
#include "util/hash.h"
#include "util/file_util.h"
#include "util/json.h"

namespace ft::data {
namespace {

// ByteLevel's bytes_char(): printable bytes stand for themselves, the others for U+0100 + n.
struct ByteMap {
  char32_t byte_to_char[256];
  std::unordered_map<char32_t, std::uint8_t> char_to_byte;
  ByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      byte_to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      char_to_byte[byte_to_char[b]] = static_cast<std::uint8_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap map;
  return map;
}

// The raw bytes a byte-level token stands for; false when a character is outside the map.
bool token_bytes(const std::string& token, std::string* out) {
  out->clear();
  const auto* p = reinterpret_cast<const unsigned char*>(token.data());
  const auto& map = byte_map().char_to_byte;
  for (std::size_t i = 0; i < token.size();) {
    const std::size_t len = unicode::valid_utf8_length(p + i, token.size() - i);
    if (len == 0) return false;
    const auto it = map.find(unicode::decode_utf8(p + i, len));
    if (it == map.end()) return false;
    out->push_back(static_cast<char>(it->second));
    i += len;
  }
  return true;
}

// The value as JSON, shortened: what the file says, in the file's own spelling.
std::string bpe_field_value(const Json& j) {
  std::string text = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 200) text = text.substr(0, 200) + "...";
  return text;
}

}  // namespace

namespace bpe_internal {

// (left id, right id) -> (rank, merged id), open addressing on the 64-bit pair key.
class MergeTable {
 public:
  void reserve(std::size_t count) {
    std::size_t capacity = 16;
    while (capacity < 2 * count) capacity *= 2;
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
  }
  void insert(std::int32_t a, std::int32_t b, std::int32_t rank, std::int32_t id) {  // a later one replaces
    const std::uint64_t key = pair_key(a, b);
    for (std::size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0 || s.key == key) {
        s = Slot{key, rank, id};
        return;
      }
    }
  }
  const std::pair<std::int32_t, std::int32_t>* find(std::int32_t a, std::int32_t b) const = delete;
  bool find(std::int32_t a, std::int32_t b, std::int32_t* rank, std::int32_t* id) const {
    const std::uint64_t key = pair_key(a, b);
    for (std::size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return false;
      if (s.key == key) {
        *rank = s.rank;
        *id = s.id;
        return true;
      }
    }
  }

 private:
  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  struct Slot {
    std::uint64_t key = 0;
    std::int32_t rank = 0, id = -1;
  };
  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
};

}  // namespace bpe_internal

using bpe_internal::MergeTable;

struct BpeTokenizer::Impl {
  std::string path;
  bool nfc = false;
  std::vector<SplitPattern> splits;  // Split steps, in order
  bool byte_level_regex = false;     // ByteLevel use_regex: GPT-2's split after the Split steps
  bool add_prefix_space = false;
  bool ignore_merges = false;
  std::int32_t unk = -1;
  bool fuse_unk = false;

  std::vector<std::string> pieces;      // id -> token as spelled in the file ("" for an unused id)
  std::vector<std::string> bytes;       // id -> the bytes it decodes to
  std::vector<std::uint8_t> skip;       // id -> dropped by decode (special added token or unused id)
  std::vector<std::uint8_t> assigned;   // id -> used by the vocabulary or an added token
  StringIdTable vocab;                  // byte string -> id (model vocabulary only)
  std::int32_t byte_id[256];
  MergeTable merges;
  std::unordered_map<std::string, std::int64_t> added;  // added token content -> id
  std::int64_t bos = -1, eos = -1;
  std::string eos_token;

  void bpe(const char* word, std::size_t size, std::vector<std::int64_t>* ids) const;
};

namespace {

[[noreturn]] void unsupported(const std::string& path, const std::string& field, const Json& value, const std::string& supported) {
  throw Error(str(path, ": ", field, " is ", bpe_field_value(value), "; ft supports ", supported));
}

const Json& member(const std::string& path, const Json& object, const char* key, const std::string& where) {
  FT_CHECK(object.is_object() && object.contains(key), path, ": ", where, key, " is missing");
  return object.at(key);
}

std::string get_string(const std::string& path, const Json& value, const std::string& field) {
  FT_CHECK(value.is_string(), path, ": ", field, ": expected a string, got ", describe_json(value));
  return value.get<std::string>();
}

bool get_bool(const std::string& path, const Json& object, const char* key, const std::string& where, bool fallback) {
  if (!object.contains(key) || object.at(key).is_null()) return fallback;
  const Json& v = object.at(key);
  FT_CHECK(v.is_boolean(), path, ": ", where, key, ": expected true or false, got ", describe_json(v));
  return v.get<bool>();
}

std::string type_of(const std::string& path, const Json& step, const std::string& field) {
  FT_CHECK(step.is_object(), path, ": ", field, ": expected an object, got ", describe_json(step));
  return get_string(path, member(path, step, "type", field + "."), field + ".type");
}

void read_normalizer(BpeTokenizer::Impl& m, const Json& n, const std::string& field) {
  if (n.is_null()) return;
  const std::string type = type_of(m.path, n, field);
  if (type == "NFC") {
    m.nfc = true;
  } else if (type == "Sequence") {
    const Json& list = member(m.path, n, "normalizers", field + ".");
    FT_CHECK(list.is_array(), m.path, ": ", field, ".normalizers: expected a list, got ", describe_json(list));
    for (std::size_t i = 0; i < list.size(); ++i) read_normalizer(m, list[i], str(field, ".normalizers[", i, "]"));
  } else {
    unsupported(m.path, field + ".type", n.at("type"), "no normalizer (null) or NFC (Qwen2's)");
  }
}

void read_byte_level(BpeTokenizer::Impl& m, const Json& step, const std::string& field) {
  m.byte_level_regex = get_bool(m.path, step, "use_regex", field + ".", true);
  m.add_prefix_space = get_bool(m.path, step, "add_prefix_space", field + ".", true);
}

void read_pre_tokenizer(BpeTokenizer::Impl& m, const Json& p) {
  const std::string field = "pre_tokenizer";
  const char* supported = "Split with Llama 3's, Qwen2's or GPT-2's regex followed by ByteLevel, or ByteLevel alone";
  FT_CHECK(!p.is_null(), m.path, ": pre_tokenizer is null; ft supports ", supported);
  const std::string type = type_of(m.path, p, field);
  if (type == "ByteLevel") {
    read_byte_level(m, p, field);
    return;
  }
  if (type != "Sequence") unsupported(m.path, "pre_tokenizer.type", p.at("type"), supported);
  const Json& list = member(m.path, p, "pretokenizers", "pre_tokenizer.");
  FT_CHECK(list.is_array() && !list.empty(), m.path, ": pre_tokenizer.pretokenizers: expected a non-empty list, got ",
           describe_json(list));
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string f = str("pre_tokenizer.pretokenizers[", i, "]");
    const std::string t = type_of(m.path, list[i], f);
    const bool last = i + 1 == list.size();
    if (t == "ByteLevel" && last) {
      read_byte_level(m, list[i], f);
    } else if (t == "Split" && !last) {
      const Json& pattern = member(m.path, list[i], "pattern", f + ".");
      FT_CHECK(pattern.is_object() && pattern.contains("Regex"), m.path, ": ", f, ".pattern is ", describe_json(pattern),
               "; ft supports {\"Regex\": ...} with Llama 3's, Qwen2's or GPT-2's regex");
      const std::string regex = get_string(m.path, pattern.at("Regex"), f + ".pattern.Regex");
      SplitPattern sp;
      FT_CHECK(find_split_pattern(regex, &sp), m.path, ": ", f, ".pattern.Regex is \"", regex,
               "\"; ft supports Llama 3's, Qwen2's and GPT-2's regexes only");
      const Json& behavior = member(m.path, list[i], "behavior", f + ".");
      if (get_string(m.path, behavior, f + ".behavior") != "Isolated")
        unsupported(m.path, f + ".behavior", behavior, "\"Isolated\"");
      FT_CHECK(!get_bool(m.path, list[i], "invert", f + ".", false), m.path, ": ", f,
               ".invert is true; ft supports false");
      m.splits.push_back(sp);
    } else {
      unsupported(m.path, f + ".type", list[i].at("type"), supported);
    }
  }
}

// The BOS: the special token TemplateProcessing's "single" puts before $A.
void read_post_processor(BpeTokenizer::Impl& m, const Json& p, const std::string& field) {
  if (p.is_null()) return;
  const std::string type = type_of(m.path, p, field);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const Json& list = member(m.path, p, "processors", field + ".");
    FT_CHECK(list.is_array(), m.path, ": ", field, ".processors: expected a list");
    for (std::size_t i = 0; i < list.size(); ++i) read_post_processor(m, list[i], str(field, ".processors[", i, "]"));
    return;
  }
  if (type != "TemplateProcessing") unsupported(m.path, field + ".type", p.at("type"), "null, ByteLevel, TemplateProcessing or a Sequence of them");
  const Json& single = member(m.path, p, "single", field + ".");
  FT_CHECK(single.is_array(), m.path, ": ", field, ".single: expected a list, got ", describe_json(single));
  for (const Json& piece : single) {
    if (piece.is_object() && piece.contains("Sequence")) break;
    if (!piece.is_object() || !piece.contains("SpecialToken")) continue;
    const std::string name = get_string(m.path, member(m.path, piece.at("SpecialToken"), "id", field + ".single[].SpecialToken."),
                                        field + ".single[].SpecialToken.id");
    const Json& specials = member(m.path, p, "special_tokens", field + ".");
    const Json& entry = member(m.path, specials, name.c_str(), field + ".special_tokens.");
    const Json& ids = member(m.path, entry, "ids", field + ".special_tokens." + name + ".");
    FT_CHECK(ids.is_array() && ids.size() == 1 && ids[0].is_number_integer(), m.path, ": ", field, ".special_tokens.", name,
             ".ids: expected one id, got ", describe_json(ids));
    m.bos = ids[0].get<std::int64_t>();
    break;
  }
}

}  // namespace

BpeTokenizer::BpeTokenizer(const std::string& path, const std::string& json) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  const Json root = parse_json(json, path);
  FT_CHECK(root.is_object(), path, ": expected a JSON object (a Hugging Face tokenizer.json), got ", describe_json(root));

  // model
  const Json& model = member(path, root, "model", "");
  FT_CHECK(model.is_object(), path, ": model: expected an object, got ", describe_json(model));
  const std::string type = model.contains("type") ? get_string(path, model.at("type"), "model.type") : "";
  if (type != "BPE") {
    unsupported(path, "model.type", model.contains("type") ? model.at("type") : Json(nullptr),
                "\"BPE\" (byte-level BPE; WordPiece, Unigram and WordLevel models are not implemented)");
  }
  if (get_bool(path, model, "byte_fallback", "model.", false)) {
    throw Error(str(path, ": model.byte_fallback is true (a sentencepiece model converted to tokenizer.json); ft reads such "
                          "a model only from its tokenizer.model, which is not beside it"));
  }
  if (model.contains("dropout") && !model.at("dropout").is_null())
    unsupported(path, "model.dropout", model.at("dropout"), "null (no BPE dropout)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model.at(key).is_null() && model.at(key) != "")
      unsupported(path, str("model.", key), model.at(key), "null");
  }
  m.ignore_merges = get_bool(path, model, "ignore_merges", "model.", false);
  m.fuse_unk = get_bool(path, model, "fuse_unk", "model.", false);

  const Json& vocab = member(path, model, "vocab", "model.");
  FT_CHECK(vocab.is_object() && !vocab.empty(), path, ": model.vocab: expected an object of token: id, got ", describe_json(vocab));
  std::int64_t size = 0;
  for (const auto& [token, id] : vocab.items()) {
    FT_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() < (1 << 30), path,
             ": model.vocab[\"", token, "\"]: expected an id in [0, 2^30), got ", describe_json(id));
    size = std::max(size, id.get<std::int64_t>() + 1);
  }
  const Json added = root.contains("added_tokens") && !root.at("added_tokens").is_null() ? root.at("added_tokens") : Json::array();
  FT_CHECK(added.is_array(), path, ": added_tokens: expected a list, got ", describe_json(added));
  for (std::size_t i = 0; i < added.size(); ++i) {
    const std::string f = str("added_tokens[", i, "].");
    const Json& id = member(path, added[i], "id", f);
    FT_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() < (1 << 30), path, ": ", f,
             "id: expected an id in [0, 2^30), got ", describe_json(id));
    size = std::max(size, id.get<std::int64_t>() + 1);
  }
  m.pieces.assign(size, "");
  m.bytes.assign(size, "");
  m.skip.assign(size, 1);
  m.assigned.assign(size, 0);
  std::vector<std::pair<std::string, std::int32_t>> entries;
  entries.reserve(vocab.size());
  std::string raw;
  std::unordered_map<std::string, std::int32_t> by_text;
  by_text.reserve(vocab.size());
  for (const auto& [token, id_json] : vocab.items()) {
    const auto id = static_cast<std::int32_t>(id_json.get<std::int64_t>());
    m.pieces[id] = token;
    m.assigned[id] = 1;
    m.skip[id] = 0;
    by_text.emplace(token, id);
    if (token_bytes(token, &raw)) {
      m.bytes[id] = raw;
      entries.emplace_back(raw, id);
    } else {
      m.bytes[id] = token;  // ByteLevel's decoder keeps a token with other characters as its UTF-8
    }
  }
  m.vocab.reserve(entries.size());
  for (const auto& [key, id] : entries) m.vocab.insert(key, id);  // the first of equal byte strings wins
  const ByteMap& map = byte_map();
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    m.byte_id[b] = m.vocab.find(&c, 1);
  }
  (void)map;

  if (model.contains("unk_token") && !model.at("unk_token").is_null()) {
    const std::string unk = get_string(path, model.at("unk_token"), "model.unk_token");
    const auto it = by_text.find(unk);
    FT_CHECK(it != by_text.end(), path, ": model.unk_token \"", unk, "\" is not in model.vocab");
    m.unk = it->second;
  }

  const Json& merges = member(path, model, "merges", "model.");
  FT_CHECK(merges.is_array(), path, ": model.merges: expected a list, got ", describe_json(merges));
  m.merges.reserve(merges.size());
  for (std::size_t i = 0; i < merges.size(); ++i) {
    const Json& e = merges[i];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const std::size_t space = s.find(' ');
      FT_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, path, ": model.merges[", i,
               "] is ", bpe_field_value(e), "; expected \"left right\" (two tokens and one space)");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else {
      FT_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), path, ": model.merges[", i, "] is ",
               bpe_field_value(e), "; expected \"left right\" or [\"left\", \"right\"]");
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    }
    const auto ia = by_text.find(a), ib = by_text.find(b), ic = by_text.find(a + b);
    FT_CHECK(ia != by_text.end() && ib != by_text.end(), path, ": model.merges[", i, "]: token \"",
             ia == by_text.end() ? a : b, "\" is not in model.vocab");
    FT_CHECK(ic != by_text.end(), path, ": model.merges[", i, "]: the merged token \"", a + b, "\" is not in model.vocab");
    m.merges.insert(ia->second, ib->second, static_cast<std::int32_t>(i), ic->second);
  }

  for (std::size_t i = 0; i < added.size(); ++i) {
    const std::string f = str("added_tokens[", i, "].");
    const auto id = added[i].at("id").get<std::int64_t>();
    const std::string content = get_string(path, member(path, added[i], "content", f), f + "content");
    const bool special = get_bool(path, added[i], "special", f, false);
    m.pieces[id] = content;
    m.bytes[id] = token_bytes(content, &raw) ? raw : content;
    m.assigned[id] = 1;
    m.skip[id] = special ? 1 : 0;
    m.added.emplace(content, id);
  }

  read_normalizer(m, root.contains("normalizer") ? root.at("normalizer") : Json(nullptr), "normalizer");
  read_pre_tokenizer(m, root.contains("pre_tokenizer") ? root.at("pre_tokenizer") : Json(nullptr));
  read_post_processor(m, root.contains("post_processor") ? root.at("post_processor") : Json(nullptr), "post_processor");
  const Json decoder = root.contains("decoder") ? root.at("decoder") : Json(nullptr);
  if (decoder.is_null() || !decoder.is_object() || decoder.value("type", Json()) != "ByteLevel")
    unsupported(path, "decoder", decoder, "{\"type\": \"ByteLevel\"}");
  FT_CHECK(m.bos < size && m.bos >= -1, path, ": post_processor: BOS id ", m.bos, " is outside the vocabulary [0, ", size, ")");

  // EOS: tokenizer_config.json's eos_token, as transformers reads it.
  const std::string config_path = join_path(parent_directory(path), "tokenizer_config.json");
  if (file_exists(config_path)) {
    const Json config = parse_json_file(config_path);
    FT_CHECK(config.is_object(), config_path, ": expected a JSON object, got ", describe_json(config));
    if (config.contains("eos_token") && !config.at("eos_token").is_null()) {
      const Json& e = config.at("eos_token");
      m.eos_token = e.is_object() ? get_string(config_path, member(config_path, e, "content", "eos_token."), "eos_token.content")
                                  : get_string(config_path, e, "eos_token");
      const auto it = m.added.find(m.eos_token);
      const auto jt = by_text.find(m.eos_token);
      FT_CHECK(it != m.added.end() || jt != by_text.end(), config_path, ": eos_token \"", m.eos_token, "\" is not a token of ", path);
      m.eos = it != m.added.end() ? it->second : jt->second;
    }
  }
}

BpeTokenizer::~BpeTokenizer() = default;

// Word::merge_all of tokenizers' BPE model for one pre-token (raw bytes).
void BpeTokenizer::Impl::bpe(const char* word, std::size_t size, std::vector<std::int64_t>* ids) const {
  if (size == 0) return;
  if (size == 1 || ignore_merges) {
    const std::int32_t id = size == 1 ? byte_id[static_cast<unsigned char>(word[0])] : vocab.find(word, size);
    if (id >= 0) {
      ids->push_back(id);
      return;
    }
  }
  struct Symbol {
    std::int32_t id, prev, next, len;
  };
  struct Merge {
    std::int32_t rank, pos, id;
  };
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Merge> queue;
  symbols.clear();
  queue.clear();
  bool prev_unk = false;
  for (std::size_t i = 0; i < size; ++i) {
    std::int32_t id = byte_id[static_cast<unsigned char>(word[i])];
    if (id < 0) {  // a byte outside the vocabulary: unk_token, or nothing
      if (unk < 0) continue;
      if (fuse_unk && prev_unk) {
        symbols.back().len += 1;
        continue;
      }
      id = unk;
      prev_unk = true;
    } else {
      prev_unk = false;
    }
    const auto index = static_cast<std::int32_t>(symbols.size());
    symbols.push_back(Symbol{id, index - 1, -1, 1});
    if (index > 0) symbols[index - 1].next = index;
  }
  // Max-heap order of tokenizers' Merge: lowest rank first, then leftmost position.
  auto later = [](const Merge& a, const Merge& b) { return a.rank > b.rank || (a.rank == b.rank && a.pos > b.pos); };
  std::int32_t rank, id;
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (merges.find(symbols[i].id, symbols[i + 1].id, &rank, &id))
      queue.push_back(Merge{rank, static_cast<std::int32_t>(i), id});
  }
  std::make_heap(queue.begin(), queue.end(), later);
  while (!queue.empty()) {
    std::pop_heap(queue.begin(), queue.end(), later);
    const Merge top = queue.back();
    queue.pop_back();
    Symbol& cur = symbols[top.pos];
    if (cur.len == 0 || cur.next < 0) continue;
    const std::int32_t next_pos = cur.next;
    const Symbol right = symbols[next_pos];
    if (!merges.find(cur.id, right.id, &rank, &id) || id != top.id) continue;
    cur.id = top.id;
    cur.len += right.len;
    cur.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (cur.prev >= 0 && merges.find(symbols[cur.prev].id, cur.id, &rank, &id)) {
      queue.push_back(Merge{rank, cur.prev, id});
      std::push_heap(queue.begin(), queue.end(), later);
    }
    if (cur.next >= 0 && merges.find(cur.id, symbols[cur.next].id, &rank, &id)) {
      queue.push_back(Merge{rank, top.pos, id});
      std::push_heap(queue.begin(), queue.end(), later);
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len > 0) ids->push_back(s.id);
  }
}

void BpeTokenizer::encode(std::string_view input, std::vector<std::int64_t>* ids) const {
  const Impl& m = *impl_;
  std::string lossy, normalized;
  std::string_view text = input;
  if (unicode::utf8_lossy(text, &lossy)) text = lossy;
  if (m.nfc && unicode::nfc(text, &normalized)) text = normalized;
  if (text.empty()) return;
  thread_local std::vector<PreToken> pieces, next;
  pieces.assign(1, PreToken{0, static_cast<std::uint32_t>(text.size())});
  for (SplitPattern sp : m.splits) {
    next.clear();
    for (const PreToken& p : pieces) split_pre_tokens(text, p.begin, p.end, sp, &next);
    std::swap(pieces, next);
  }
  std::string prefixed;
  if (m.add_prefix_space) {  // ByteLevel: each piece that does not start with ' ' gets one
    next.clear();
    for (const PreToken& p : pieces) {
      const auto begin = static_cast<std::uint32_t>(prefixed.size());
      if (text[p.begin] != ' ') prefixed.push_back(' ');
      prefixed.append(text.substr(p.begin, p.end - p.begin));
      next.push_back(PreToken{begin, static_cast<std::uint32_t>(prefixed.size())});
    }
    std::swap(pieces, next);
    text = prefixed;
  }
  if (m.byte_level_regex) {
    next.clear();
    for (const PreToken& p : pieces) split_pre_tokens(text, p.begin, p.end, SplitPattern::kGpt2, &next);
    std::swap(pieces, next);
  }
  for (const PreToken& p : pieces) m.bpe(text.data() + p.begin, p.end - p.begin, ids);
}

std::string BpeTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  const Impl& m = *impl_;
  const auto size = static_cast<std::int64_t>(m.pieces.size());
  std::string bytes;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    FT_CHECK(ids[i] >= 0 && ids[i] < size, m.path, ": cannot decode token id ", ids[i], " at position ", i,
             ": outside the vocabulary [0, ", size, ")");
    if (!m.skip[ids[i]]) bytes += m.bytes[ids[i]];
  }
  std::string out;
  return unicode::utf8_lossy(bytes, &out) ? out : bytes;
}

std::string BpeTokenizer::id_to_piece(std::int64_t id) const {
  const auto size = static_cast<std::int64_t>(impl_->pieces.size());
  FT_CHECK(id >= 0 && id < size, impl_->path, ": token id ", id, " is outside the vocabulary [0, ", size, ")");
  return impl_->pieces[id];
}

std::int64_t BpeTokenizer::vocab_size() const { return static_cast<std::int64_t>(impl_->pieces.size()); }
std::int64_t BpeTokenizer::bos_id() const { return impl_->bos; }
std::int64_t BpeTokenizer::eos_id() const { return impl_->eos; }
const std::string& BpeTokenizer::eos_token() const { return impl_->eos_token; }
std::int64_t BpeTokenizer::special_token_id(const std::string& text) const {
  const auto it = impl_->added.find(text);
  return it == impl_->added.end() ? -1 : it->second;
}

bool is_sentencepiece_conversion(const std::string& path, const std::string& json) {
  const Json root = parse_json(json, path);
  if (!root.is_object()) return false;
  const Json model = root.value("model", Json::object());
  if (model.is_object() && model.value("byte_fallback", Json(false)) == Json(true)) return true;
  for (const char* key : {"normalizer", "pre_tokenizer", "decoder"}) {
    if (!root.contains(key)) continue;
    const std::string text = root.at(key).dump();
    if (text.find("Metaspace") != std::string::npos || text.find("\\u2581") != std::string::npos ||
        text.find("\xE2\x96\x81") != std::string::npos)
      return true;
  }
  return false;
}

}  // namespace ft::data
