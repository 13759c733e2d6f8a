// ft::data::Tokenizer on Hugging Face byte-level BPE tokenizer.json files against `tokenizers`:
// the encodings, decodings, special ids and vocabulary sizes that
// tests/reference/make_bpe_tokenizer.py wrote (Llama 3 and the Qwen2-style tiny tokenizer),
// the choice of file in a model folder, and every refusal's message.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "test_support.h"
#include "util/file_util.h"
#include "util/json.h"

namespace ft::data {
namespace {

using BpeIds = std::vector<std::int64_t>;

const Json& bpe_reference() {
  static const Json ref = parse_json_file(test::data_path("bpe_tokenizer_reference.json"));
  return ref;
}

void check_bpe_reference(const std::string& name) {
  const Json& ref = bpe_reference().at(name);
  Tokenizer tok(test::data_path(ref.at("folder").get<std::string>()));
  EXPECT_EQ(tok.kind(), "bpe");
  EXPECT_EQ(tok.vocab_size(), ref.at("vocab_size").get<std::int64_t>());
  for (const auto& [text, id] : ref.at("special_ids").items()) EXPECT_EQ(tok.special_token_id(text), id.get<std::int64_t>()) << text;
  EXPECT_EQ(tok.encode("Hi", /*add_bos=*/true), ref.at("encode_hi_with_specials").get<BpeIds>());
  int checked = 0;
  for (const Json& e : ref.at("encodings")) {
    const auto text = e.at("text").get<std::string>();
    const BpeIds ids = tok.encode(text, /*add_bos=*/false);
    EXPECT_EQ(ids, e.at("ids").get<BpeIds>()) << name << ": " << text.substr(0, 80);
    EXPECT_EQ(tok.decode(ids), e.at("decoded").get<std::string>()) << name << ": " << text.substr(0, 80);
    ++checked;
  }
  EXPECT_GT(checked, 30);
}

TEST(BpeTokenizer, Llama3MatchesTokenizers) { check_bpe_reference("llama3"); }
TEST(BpeTokenizer, Qwen2TinyMatchesTokenizers) { check_bpe_reference("qwen2_tiny"); }

TEST(BpeTokenizer, Llama3SpecialTokens) {
  Tokenizer tok(test::data_path("llama3-tokenizer"));
  EXPECT_EQ(tok.path(), test::data_path("llama3-tokenizer/tokenizer.json"));
  EXPECT_EQ(tok.bos_id(), 128000);
  EXPECT_EQ(tok.eos_id(), 128001);  // tokenizer_config.json's eos_token <|end_of_text|>
  EXPECT_EQ(tok.pad_id(), -1);
  EXPECT_EQ(tok.special_token_id("<|eot_id|>"), 128009);
  EXPECT_EQ(tok.special_token_id("<|eot_id|> "), -1);
  EXPECT_EQ(tok.encode("Hello", true, true), (BpeIds{128000, 9906, 128001}));
  // Text that spells a special token stays text.
  const BpeIds literal = tok.encode("<|eot_id|>", false);
  EXPECT_GT(literal.size(), 1u);
  EXPECT_EQ(tok.decode(literal), "<|eot_id|>");
  EXPECT_EQ(tok.decode({128000, 9906, 128009}), "Hello");  // special tokens dropped
  EXPECT_EQ(tok.id_to_piece(128009), "<|eot_id|>");
  EXPECT_EQ(tok.id_to_piece(9906), "Hello");
  EXPECT_FT_ERROR(tok.decode({128256}), "tokenizer.json: cannot decode token id 128256 at position 0: outside the vocabulary [0, 128256)");
}

TEST(BpeTokenizer, Qwen2TinyHasNoBosAndEosFromConfig) {
  Tokenizer tok(test::data_path("qwen2-tokenizer-tiny"));
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_EQ(tok.eos_id(), 1502);  // <|im_end|>
  EXPECT_EQ(tok.encode("", true, true), (BpeIds{1502}));
}

TEST(BpeTokenizer, InvalidUtf8IsReadLossily) {
  // As String::from_utf8_lossy: one U+FFFD per maximal ill-formed subsequence.
  Tokenizer tok(test::data_path("llama3-tokenizer"));
  EXPECT_EQ(tok.encode("a\xE2\x82" "b", false), tok.encode("a\xEF\xBF\xBD" "b", false));
  EXPECT_EQ(tok.encode("\xFF\xFE", false), tok.encode("\xEF\xBF\xBD\xEF\xBF\xBD", false));
  EXPECT_EQ(tok.decode(tok.encode("\xF0\x9F\xA6\x99", false)), "\xF0\x9F\xA6\x99");
}

TEST(BpeTokenizer, FolderChoice) {
  test::TempDir dir;
  EXPECT_EQ(tokenizer_file(dir.path()), dir.file("tokenizer.model"));
  write_file_atomic(dir.file("tokenizer.model"), read_file(test::data_path("stories260K/tokenizer.model")));
  EXPECT_EQ(tokenizer_file(dir.path()), dir.file("tokenizer.model"));
  // A sentencepiece conversion beside its tokenizer.model (Llama-2, Mistral): tokenizer.model.
  write_file_atomic(dir.file("tokenizer.json"),
                    R"({"model": {"type": "BPE", "byte_fallback": true, "vocab": {}, "merges": []},
                        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581"}})");
  EXPECT_EQ(tokenizer_file(dir.path()), dir.file("tokenizer.model"));
  EXPECT_EQ(Tokenizer(dir.path()).kind(), "sentencepiece");
  write_file_atomic(dir.file("tokenizer.json"), read_file(test::data_path("qwen2-tokenizer-tiny/tokenizer.json")));
  EXPECT_EQ(tokenizer_file(dir.path()), dir.file("tokenizer.json"));
  EXPECT_EQ(Tokenizer(dir.path()).kind(), "bpe");
  test::TempDir empty;
  EXPECT_FT_ERROR(Tokenizer{empty.path()}, ": the model folder has no tokenizer.json or tokenizer.model");
}

TEST(BpeTokenizer, FingerprintCoversEosToken) {
  test::TempDir a, b;
  const std::string json = read_file(test::data_path("qwen2-tokenizer-tiny/tokenizer.json"));
  write_file_atomic(a.file("tokenizer.json"), json);
  write_file_atomic(b.file("tokenizer.json"), json);
  write_file_atomic(b.file("tokenizer_config.json"), R"({"eos_token": {"content": "<|endoftext|>"}})");
  Tokenizer ta(a.path()), tb(b.path());
  EXPECT_EQ(ta.eos_id(), -1);
  EXPECT_EQ(tb.eos_id(), 1500);
  EXPECT_NE(ta.fingerprint(), tb.fingerprint());
}

// tokenizer.json of the tiny tokenizer with `edit` applied to its JSON.
std::string edited_tiny(const std::function<void(Json&)>& edit) {
  Json j = parse_json_file(test::data_path("qwen2-tokenizer-tiny/tokenizer.json"));
  edit(j);
  return j.dump();
}

void expect_bpe_refused(const std::string& json, const std::string& message) {
  test::TempDir dir;
  write_file_atomic(dir.file("tokenizer.json"), json);
  EXPECT_FT_ERROR(Tokenizer{dir.file("tokenizer.json")}, dir.file("tokenizer.json") + ": " + message);
}

TEST(BpeTokenizer, UnsupportedFilesAreRefusedByField) {
  expect_bpe_refused(edited_tiny([](Json& j) { j["model"]["type"] = "WordPiece"; }),
                 "model.type is \"WordPiece\"; ft supports \"BPE\" (byte-level BPE; WordPiece, Unigram and WordLevel "
                 "models are not implemented)");
  expect_bpe_refused(edited_tiny([](Json& j) { j["model"]["type"] = "Unigram"; }), "model.type is \"Unigram\"");
  expect_bpe_refused(edited_tiny([](Json& j) { j["normalizer"] = Json{{"type", "NFKC"}}; }),
                 "normalizer.type is \"NFKC\"; ft supports no normalizer (null) or NFC (Qwen2's)");
  expect_bpe_refused(edited_tiny([](Json& j) {
                   j["normalizer"] = Json{{"type", "Sequence"}, {"normalizers", {Json{{"type", "NFC"}}, Json{{"type", "Lowercase"}}}}};
                 }),
                 "normalizer.normalizers[1].type is \"Lowercase\"");
  expect_bpe_refused(edited_tiny([](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\w+"; }),
                 "pre_tokenizer.pretokenizers[0].pattern.Regex is \"\\w+\"; ft supports Llama 3's, Qwen2's and GPT-2's regexes only");
  expect_bpe_refused(edited_tiny([](Json& j) { j["pre_tokenizer"] = Json{{"type", "Whitespace"}}; }),
                 "pre_tokenizer.type is \"Whitespace\"; ft supports Split with Llama 3's");
  expect_bpe_refused(edited_tiny([](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }),
                 "pre_tokenizer.pretokenizers[0].behavior is \"Removed\"; ft supports \"Isolated\"");
  expect_bpe_refused(edited_tiny([](Json& j) { j["decoder"] = Json{{"type", "WordPiece"}}; }), "decoder is {\"type\":\"WordPiece\"}; ft supports {\"type\": \"ByteLevel\"}");
  expect_bpe_refused(edited_tiny([](Json& j) { j["model"]["byte_fallback"] = true; }),
                 "model.byte_fallback is true (a sentencepiece model converted to tokenizer.json); ft reads such a model only "
                 "from its tokenizer.model, which is not beside it");
  expect_bpe_refused(edited_tiny([](Json& j) { j["model"]["dropout"] = 0.1; }), "model.dropout is 0.1; ft supports null");
  expect_bpe_refused(edited_tiny([](Json& j) { j["model"].erase("merges"); }), "model.merges is missing");
  expect_bpe_refused(edited_tiny([](Json& j) { j["model"]["merges"][3] = "a b c"; }),
                 "model.merges[3] is \"a b c\"; expected \"left right\" (two tokens and one space)");
  expect_bpe_refused(edited_tiny([](Json& j) { j["model"]["merges"][2] = Json::array({"\xC4\xA0", "zzzz"}); }),
                 "model.merges[2]: token \"zzzz\" is not in model.vocab");
  expect_bpe_refused(edited_tiny([](Json& j) { j["model"]["vocab"]["x"] = "seven"; }), "model.vocab[\"x\"]: expected an id in [0, 2^30), got \"seven\"");
  expect_bpe_refused("[1, 2]", "expected a JSON object (a Hugging Face tokenizer.json), got an array");
  expect_bpe_refused("{\"model\": ", "invalid JSON");
}

TEST(BpeTokenizer, MergesInEitherForm) {
  // The same tokenizer with merges as "a b" strings encodes the same.
  const std::string strings = edited_tiny([](Json& j) {
    Json merges = Json::array();
    for (const Json& m : j["model"]["merges"]) merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
    j["model"]["merges"] = merges;
  });
  test::TempDir dir;
  write_file_atomic(dir.file("tokenizer.json"), strings);
  Tokenizer a(dir.file("tokenizer.json")), b(test::data_path("qwen2-tokenizer-tiny/tokenizer.json"));
  const std::string text = "Once upon a time, the llama's friends counted 12345 stars.";
  EXPECT_EQ(a.encode(text, false), b.encode(text, false));
}

}  // namespace
}  // namespace ft::data
