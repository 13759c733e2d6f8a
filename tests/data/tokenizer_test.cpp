// ft::data::Tokenizer against the real sentencepiece 0.1.97: the golden files, every entry of
// the reference files made by tests/reference/make_tokenizer_reference.py (LLaMA-2, tok512 and
// three tiny models covering user-defined/unused pieces, no byte fallback and whitespace as
// suffix), BOS/EOS, errors for missing, truncated, garbage and non-BPE model files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "data/sentencepiece_model.h"
#include "data/tokenizer.h"
#include "test_support.h"
#include "util/file_util.h"
#include "util/json.h"

namespace ft::data {
namespace {

using Ids = std::vector<std::int64_t>;

std::string llama2_path() { return test::data_path("llama2-tokenizer/tokenizer.model"); }
std::string tok512_path() { return test::data_path("stories260K/tokenizer.model"); }

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string show(const Ids& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) s += ',';
    s += std::to_string(ids[i]);
  }
  return s + "]";
}

// --- golden files (made by the asset maintainers with sentencepiece 0.1.97) -----------------

void check_golden(const std::string& golden_file, const std::string& model) {
  const Json golden = parse_json_file(test::data_path(golden_file));
  Tokenizer tok(model);
  EXPECT_EQ(tok.vocab_size(), golden["vocab_size"].get<std::int64_t>());
  EXPECT_EQ(tok.bos_id(), golden["bos_id"].get<std::int64_t>());
  EXPECT_EQ(tok.eos_id(), golden["eos_id"].get<std::int64_t>());
  EXPECT_EQ(tok.unk_id(), golden["unk_id"].get<std::int64_t>());
  EXPECT_EQ(tok.pad_id(), golden["pad_id"].get<std::int64_t>());
  const auto first = golden["first_pieces"].get<std::vector<std::string>>();
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_EQ(tok.id_to_piece(i), first[i]);
  for (const Json& e : golden["encodings"]) {
    const auto text = e["text"].get<std::string>();
    const auto ids = tok.encode(text, /*add_bos=*/false);
    EXPECT_EQ(ids, e["ids"].get<Ids>()) << golden_file << ": " << text;
    const auto pieces = e["pieces"].get<std::vector<std::string>>();
    ASSERT_EQ(ids.size(), pieces.size()) << text;
    for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(tok.id_to_piece(ids[i]), pieces[i]);
    if (e["roundtrip"].get<bool>()) {
      EXPECT_EQ(tok.decode(ids), text);
    }
  }
}

TEST(Tokenizer, Tok512Golden) { check_golden("stories260K-tokenizer-golden.json", tok512_path()); }
TEST(Tokenizer, Llama2Golden) { check_golden("llama2-tokenizer/golden.json", llama2_path()); }

// --- reference files ----------------------------------------------------------------------

struct Tally {
  int matched = 0, total = 0, reported = 0;
  void check(bool ok, const std::string& what) {
    ++total;
    if (ok) {
      ++matched;
    } else if (++reported <= 10) {
      ADD_FAILURE() << what;
    }
  }
};

void check_reference(const Json& ref, const std::string& label) {
  SCOPED_TRACE(label);
  Tokenizer tok(test::data_path(ref["tokenizer"].get<std::string>()));
  EXPECT_EQ(tok.vocab_size(), ref["vocab_size"].get<std::int64_t>());
  EXPECT_EQ(tok.bos_id(), ref["bos_id"].get<std::int64_t>());
  EXPECT_EQ(tok.eos_id(), ref["eos_id"].get<std::int64_t>());
  EXPECT_EQ(tok.unk_id(), ref["unk_id"].get<std::int64_t>());
  EXPECT_EQ(tok.pad_id(), ref["pad_id"].get<std::int64_t>());
  if (!ref["pieces"].is_null()) {
    const auto pieces = ref["pieces"].get<std::vector<std::string>>();
    ASSERT_EQ(pieces.size(), static_cast<std::size_t>(tok.vocab_size()));
    for (std::size_t i = 0; i < pieces.size(); ++i) EXPECT_EQ(tok.id_to_piece(i), pieces[i]);
  }

  Tally enc, dec;
  auto check_text = [&](const std::string& text, const Ids& expected, const std::string& decoded,
                        const std::string& where) {
    const Ids ids = tok.encode(text, /*add_bos=*/false);
    enc.check(ids == expected, where + ": encode gave " + show(ids) + ", sentencepiece " + show(expected));
    const std::string got = tok.decode(expected);
    dec.check(got == decoded, where + ": decode gave '" + got + "', sentencepiece '" + decoded + "'");
  };

  const Json alpaca = parse_json_file(test::data_path(ref["alpaca_file"].get<std::string>()));
  std::map<std::pair<std::size_t, std::string>, std::string> decoded_differs;
  for (const Json& d : ref["alpaca_decoded"])
    decoded_differs[{d["record"].get<std::size_t>(), d["field"].get<std::string>()}] =
        d["decoded"].get<std::string>();
  const char* fields[] = {"instruction", "input", "output"};
  const Json& rows = ref["alpaca"];
  ASSERT_EQ(rows.size(), ref["alpaca_records"].get<std::size_t>());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    for (int f = 0; f < 3; ++f) {
      const auto text = alpaca.at(r).at(fields[f]).get<std::string>();
      const auto it = decoded_differs.find({r, fields[f]});
      check_text(text, rows[r][f].get<Ids>(), it == decoded_differs.end() ? text : it->second,
                 "alpaca record " + std::to_string(r) + " " + fields[f]);
    }
  }
  const int alpaca_strings = enc.total;
  for (const Json& c : ref["cases"]) {
    const bool raw = c.contains("hex");
    const std::string text = raw ? from_hex(c["hex"].get<std::string>()) : c["text"].get<std::string>();
    check_text(text, c["ids"].get<Ids>(), c["decoded"].get<std::string>(),
               raw ? "bytes " + c["hex"].get<std::string>() : "text '" + text + "'");
  }
  for (const Json& c : ref["decode_cases"]) {
    const Ids ids = c["ids"].get<Ids>();
    const std::string want = c["decoded"].get<std::string>();
    const std::string got = tok.decode(ids);
    dec.check(got == want, "decode " + show(ids) + " gave '" + got + "', sentencepiece '" + want + "'");
  }
  std::printf("[ reference ] %s: %d/%d encodings (%d alpaca strings) and %d/%d decodings match "
              "sentencepiece %s\n",
              label.c_str(), enc.matched, enc.total, alpaca_strings, dec.matched, dec.total,
              ref["sentencepiece"].get<std::string>().c_str());
  EXPECT_EQ(enc.matched, enc.total);
  EXPECT_EQ(dec.matched, dec.total);
}

TEST(TokenizerReference, Llama2) {
  check_reference(parse_json_file(test::data_path("tokenizer_reference_llama2.json")), "llama2");
}
TEST(TokenizerReference, Tok512) {
  check_reference(parse_json_file(test::data_path("tokenizer_reference_tok512.json")), "tok512");
}
TEST(TokenizerReference, TinyModels) {
  const Json refs = parse_json_file(test::data_path("tokenizer_reference_tiny.json"));
  ASSERT_EQ(refs.size(), 3u);
  for (const auto& [name, ref] : refs.items()) check_reference(ref, name);
}

// --- API ----------------------------------------------------------------------------------

TEST(Tokenizer, BosEosFlags) {
  Tokenizer tok(llama2_path());
  const Ids plain = tok.encode("Hello world", false);
  EXPECT_EQ(plain, (Ids{15043, 3186}));
  EXPECT_EQ(tok.encode("Hello world"), (Ids{1, 15043, 3186}));  // BOS by default
  EXPECT_EQ(tok.encode("Hello world", true, true), (Ids{1, 15043, 3186, 2}));
  EXPECT_EQ(tok.encode("Hello world", false, true), (Ids{15043, 3186, 2}));
  EXPECT_EQ(tok.encode(""), (Ids{1}));
  EXPECT_EQ(tok.encode("", false, false), Ids{});
  EXPECT_EQ(tok.decode({1, 15043, 3186, 2}), "Hello world");  // control pieces vanish
  EXPECT_EQ(tok.decode({}), "");
  EXPECT_EQ(tok.decode({0}), " \xE2\x81\x87 ");  // <unk> prints as " ⁇ "
}

TEST(Tokenizer, KindAndSpecialTokenIds) {
  Tokenizer tok(llama2_path());
  EXPECT_EQ(tok.kind(), "sentencepiece");
  EXPECT_EQ(tok.special_token_id("<s>"), 1);
  EXPECT_EQ(tok.special_token_id("</s>"), 2);
  EXPECT_EQ(tok.special_token_id("<unk>"), 0);
  EXPECT_EQ(tok.special_token_id("<0x0A>"), -1);  // a byte piece is not a special token
  EXPECT_EQ(tok.special_token_id("\xE2\x96\x81the"), -1);
  EXPECT_EQ(tok.special_token_id("<|eot_id|>"), -1);
  EXPECT_EQ(tok.encode("<s>", false), tok.encode("<s>", false, false));  // text stays text
  EXPECT_NE(tok.encode("<s>", false), (Ids{1}));
}

TEST(Tokenizer, IdToPieceAndRanges) {
  Tokenizer tok(llama2_path());
  EXPECT_EQ(tok.id_to_piece(0), "<unk>");
  EXPECT_EQ(tok.id_to_piece(1), "<s>");
  EXPECT_EQ(tok.id_to_piece(13), "<0x0A>");
  EXPECT_EQ(tok.id_to_piece(31999), "\xE7\xBB\x99");  // 给
  EXPECT_FT_ERROR(tok.id_to_piece(32000), "tokenizer.model: token id 32000 is outside the vocabulary [0, 32000)");
  EXPECT_FT_ERROR(tok.id_to_piece(-1), "token id -1 is outside the vocabulary");
  EXPECT_FT_ERROR(tok.decode({1, 32000}),
                  "tokenizer.model: cannot decode token id 32000 at position 1: outside the vocabulary [0, 32000)");
}

TEST(Tokenizer, FolderAndFingerprint) {
  Tokenizer from_folder(test::data_path("stories260K"));
  Tokenizer from_file(tok512_path());
  Tokenizer llama(llama2_path());
  EXPECT_EQ(from_folder.path(), tok512_path());
  EXPECT_EQ(from_folder.fingerprint().size(), 16u);
  EXPECT_EQ(from_folder.fingerprint(), from_file.fingerprint());
  EXPECT_NE(from_folder.fingerprint(), llama.fingerprint());
  EXPECT_EQ(from_folder.encode("Once upon a time"), (Ids{1, 403, 407, 261, 378}));
}

TEST(Tokenizer, CheckTokenIdsMessage) {
  const Ids ids{1, 5, 511, 512};
  EXPECT_NO_THROW(check_token_ids(ids.data(), 3, 512, "x"));
  EXPECT_FT_ERROR(check_token_ids(ids, 512, "train.tokens record 7"),
                  "train.tokens record 7: token id 512 at position 3 is outside the model's vocabulary "
                  "[0, 512) (hint: was the data tokenized with another tokenizer?)");
  EXPECT_FT_ERROR(check_token_ids(Ids{-3}, 512, "ctx"), "ctx: token id -3 at position 0");
}

TEST(Tokenizer, ConcurrentEncodeMatchesSerial) {
  Tokenizer tok(llama2_path());
  const Json alpaca = parse_json_file(test::data_path("datasets/alpaca_en_demo.json"));
  std::vector<std::string> texts;
  for (const Json& r : alpaca) texts.push_back(r["output"].get<std::string>());
  std::vector<Ids> serial;
  for (const auto& t : texts) serial.push_back(tok.encode(t));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 2; ++rep)
        for (std::size_t i = t; i < texts.size(); i += 2)
          if (tok.encode(texts[i]) != serial[i] || tok.decode(serial[i]) != tok.decode(serial[i]))
            ++mismatches[t];
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

// --- model files: hand-built protobufs, errors ---------------------------------------------

// Minimal protobuf writer for building model files in tests.
std::string varint(std::uint64_t v) {
  std::string out;
  do {
    out.push_back(static_cast<char>((v & 0x7f) | (v > 0x7f ? 0x80 : 0)));
    v >>= 7;
  } while (v);
  return out;
}
std::string tag(int field, int wire) { return varint(static_cast<std::uint64_t>(field) << 3 | wire); }
std::string bytes_field(int field, const std::string& s) { return tag(field, 2) + varint(s.size()) + s; }
std::string varint_field(int field, std::int64_t v) { return tag(field, 0) + varint(static_cast<std::uint64_t>(v)); }
std::string float_field(int field, float f) {
  std::string out = tag(field, 5);
  out.append(reinterpret_cast<const char*>(&f), 4);  // little-endian host
  return out;
}
std::string piece(const std::string& s, float score, int type, const std::string& extra = "") {
  return bytes_field(1, bytes_field(1, s) + float_field(2, score) + varint_field(3, type) + extra);
}
// Every wire type protobuf knows, as fields this reader does not use: a varint, a fixed64, a
// length-delimited field, a group holding a nested group, and a fixed32.
std::string unknown_fields() {
  return varint_field(900, 12345) + tag(901, 1) + std::string(8, '\x7f') + bytes_field(902, "skip me") +
         tag(903, 3) + varint_field(1, 7) + tag(904, 3) + tag(904, 4) + tag(903, 4) + tag(905, 5) +
         std::string(4, '\x01');
}

// A complete BPE model: <unk> <s> </s> ▁ a b ▁a ab ▁ab.
std::string tiny_model(const std::string& extra_piece_field = "", const std::string& trainer_extra = "",
                       const std::string& normalizer_extra = "", const std::string& top_extra = "") {
  std::string m;
  m += piece("<unk>", 0, 2, extra_piece_field) + piece("<s>", 0, 3) + piece("</s>", 0, 3);
  m += piece("\xE2\x96\x81", -1, 1) + piece("a", -2, 1) + piece("b", -3, 1);
  m += piece("\xE2\x96\x81" "a", -4, 1) + piece("ab", -5, 1) + piece("\xE2\x96\x81" "ab", -6, 1);
  m += top_extra;
  m += bytes_field(2, varint_field(3, 2) + trainer_extra);
  m += bytes_field(3, bytes_field(1, "identity") + varint_field(4, 0) + normalizer_extra);
  return m;
}

std::string write_model(const test::TempDir& dir, const std::string& bytes, const std::string& name = "tokenizer.model") {
  const std::string path = dir.file(name);
  write_file_atomic(path, bytes);
  return path;
}

TEST(SentencePieceModel, HandBuiltModelEncodes) {
  test::TempDir dir;
  Tokenizer tok(write_model(dir, tiny_model()));
  EXPECT_EQ(tok.vocab_size(), 9);
  // "ab ab b": ▁ab ▁ab ▁ b (the ▁b pair is not a piece); spaces kept (remove_extra_whitespaces off).
  EXPECT_EQ(tok.encode("ab ab b", false), (Ids{8, 8, 3, 5}));
  EXPECT_EQ(tok.encode("ab  c", false), (Ids{8, 3, 3, 0}));  // 'c' is unknown, no byte fallback
  EXPECT_EQ(tok.encode("cc\xF0\x9F\xA6\x99" "c", false), (Ids{3, 0}));  // one id for the unknown run
  EXPECT_EQ(tok.decode({8, 8, 3, 5}), "ab ab b");
}

TEST(SentencePieceModel, PieceAcrossWordsDisablesWordByWordBpe) {
  // "b▁" spans the start of a word, so the merges must run over the whole text as sentencepiece
  // does: b▁ (the best score) is taken twice, then ▁a; the word-by-word shortcut never sees b▁.
  test::TempDir dir;
  Tokenizer tok(write_model(dir, tiny_model("", "", "", piece("b\xE2\x96\x81", -0.5f, 1))));
  EXPECT_EQ(tok.encode("ab ab b", false), (Ids{6, 9, 4, 9, 5}));
  EXPECT_EQ(tok.decode({6, 9, 4, 9, 5}), "ab ab b");
}

TEST(SentencePieceModel, UnknownFieldsOfEveryWireTypeAreSkipped) {
  test::TempDir dir;
  Tokenizer plain(write_model(dir, tiny_model(), "plain.model"));
  Tokenizer padded(write_model(dir, tiny_model(unknown_fields(), unknown_fields(), unknown_fields(),
                                               unknown_fields()),
                               "padded.model"));
  EXPECT_EQ(padded.vocab_size(), plain.vocab_size());
  for (const char* text : {"ab ab b", "a b  ab", "", "bab"})
    EXPECT_EQ(padded.encode(text), plain.encode(text)) << text;
  // Extensions of the other messages, self-test data and a denormalizer without a map, too.
  Tokenizer more(write_model(dir, tiny_model() + bytes_field(4, bytes_field(1, bytes_field(1, "x"))) +
                                      bytes_field(5, bytes_field(1, "identity")) + bytes_field(250, "ext"),
                             "more.model"));
  EXPECT_EQ(more.encode("ab ab b"), plain.encode("ab ab b"));
}

TEST(SentencePieceModel, RepeatedSubMessagesMerge) {
  // protobuf merges a sub-message that appears twice: the second trainer_spec sets bos_id and
  // leaves the first one's model_type in place.
  const std::string bytes = tiny_model() + bytes_field(2, varint_field(41, 5));
  const SentencePieceModel m = parse_sentencepiece_model(bytes, "x.model");
  EXPECT_EQ(m.model_type, 2);
  EXPECT_EQ(m.bos_id, 5);
  EXPECT_EQ(m.normalizer_name, "identity");
  EXPECT_FALSE(m.remove_extra_whitespaces);
  EXPECT_TRUE(m.add_dummy_prefix);
  EXPECT_EQ(m.pieces.size(), 9u);
  EXPECT_EQ(m.pieces[6].piece, "\xE2\x96\x81" "a");
  EXPECT_EQ(m.pieces[6].score, -4.0f);
}

TEST(SentencePieceModel, MissingFileOrFolder) {
  test::TempDir dir;
  EXPECT_FT_ERROR(Tokenizer{dir.file("nope.model")}, dir.file("nope.model") + ": tokenizer file not found");
  EXPECT_FT_ERROR(Tokenizer{dir.path()}, dir.path() + ": the model folder has no tokenizer.json or tokenizer.model");
}

TEST(SentencePieceModel, TruncatedModelsThrowNeverCrash) {
  const std::string bytes = read_file(tok512_path());
  test::TempDir dir;
  const std::string path = write_model(dir, bytes.substr(0, bytes.size() / 2));
  EXPECT_FT_ERROR(Tokenizer{path}, path + ": truncated sentencepiece model: ");
  EXPECT_FT_ERROR(Tokenizer{write_model(dir, "")}, "tokenizer.model: the sentencepiece model is empty");
  // Every prefix of a real model either loads (a prefix ending on a field boundary is valid
  // protobuf) or throws ft::Error; none may crash or read past the end (run under ASan too).
  int loaded = 0, refused = 0;
  for (std::size_t n = 1; n < bytes.size(); ++n) {
    try {
      parse_sentencepiece_model(std::string_view(bytes).substr(0, n), "prefix");
      ++loaded;
    } catch (const Error&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(loaded, 0);
  // A prefix that cuts the model inside a piece names what was cut and where.
  EXPECT_FT_ERROR(parse_sentencepiece_model(std::string_view(bytes).substr(0, 20), "t.model"),
                  "t.model: truncated sentencepiece model: ");
}

TEST(SentencePieceModel, GarbageIsRefused) {
  test::TempDir dir;
  const std::string text_file = write_model(dir, "this is not a sentencepiece model\n", "text.model");
  EXPECT_FT_ERROR(Tokenizer{text_file}, text_file + ": malformed sentencepiece model: ModelProto has an "
                                         "end-group tag for field 14 at byte 0 that closes no open group");
  EXPECT_FT_ERROR(parse_sentencepiece_model(std::string(11, '\xff'), "v.model"),
                  "v.model: malformed sentencepiece model: ModelProto has a varint longer than 64 bits");
  EXPECT_FT_ERROR(parse_sentencepiece_model(tag(1, 0) + varint(5), "w.model"),
                  "w.model: malformed sentencepiece model: ModelProto field 1 (ModelProto.pieces) should be "
                  "length-delimited but is varint at byte 0");
  EXPECT_FT_ERROR(parse_sentencepiece_model(tag(3, 7), "x.model"), "x.model: malformed sentencepiece model: "
                                                                    "ModelProto field 3 has invalid wire type 7");
  EXPECT_FT_ERROR(parse_sentencepiece_model(tag(7, 3) + varint_field(1, 1), "g.model"),
                  "g.model: truncated sentencepiece model: ModelProto ends inside group 7");
  EXPECT_FT_ERROR(parse_sentencepiece_model(bytes_field(1, bytes_field(1, "abc")).substr(0, 4), "s.model"),
                  "s.model: truncated sentencepiece model: ModelProto.pieces at byte 2 needs 5 bytes but only 2 remain");
  EXPECT_FT_ERROR(parse_sentencepiece_model(piece("a", 0, 9), "y.model"),
                  "y.model: sentencepiece model: piece 0 has unknown type 9");
  // Random bytes: always ft::Error or a (meaningless) model, never a crash.
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string junk(rng() % 64, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    try {
      parse_sentencepiece_model(junk, "junk");
    } catch (const Error&) {
    }
  }
}

TEST(SentencePieceModel, UnsupportedModelsAreRefused) {
  test::TempDir dir;
  const std::string unigram = test::data_path("tokenizer-tiny/unigram.model");
  EXPECT_FT_ERROR(Tokenizer{unigram}, unigram + ": sentencepiece model type is unigram (1); ft implements only "
                                      "BPE models");
  // A model that leaves model_type out is unigram by the .proto's default.
  EXPECT_FT_ERROR(Tokenizer{write_model(dir, piece("<unk>", 0, 2), "default.model")},
                  "default.model: sentencepiece model type is unigram (1)");
  const std::string nfkc = write_model(dir, tiny_model("", "", bytes_field(2, std::string(8, 'z'))), "nfkc.model");
  EXPECT_FT_ERROR(Tokenizer{nfkc}, nfkc + ": the sentencepiece normalizer 'identity' carries a precompiled "
                                          "Unicode normalization map (8 bytes)");
  EXPECT_FT_ERROR(Tokenizer{write_model(dir, tiny_model("", "", "", piece("a", 0, 1)), "dup.model")},
                  "dup.model: sentencepiece piece 9 'a' is already defined");
  EXPECT_FT_ERROR(Tokenizer{write_model(dir, tiny_model("", varint_field(35, 1)), "bytes.model")},
                  "bytes.model: the sentencepiece model has byte_fallback but no piece <0x00>");
  EXPECT_FT_ERROR(Tokenizer{write_model(dir, tiny_model("", "", "", piece("<0x41>", 0, 6)), "byte.model")},
                  "byte.model: sentencepiece byte piece 9 '<0x41>' is found although byte_fallback is false");
  EXPECT_FT_ERROR(Tokenizer{write_model(dir, piece("a", 0, 1) + bytes_field(2, varint_field(3, 2)), "unk.model")},
                  "unk.model: the sentencepiece model has no unknown (<unk>) piece");
  EXPECT_FT_ERROR(Tokenizer{write_model(dir, tiny_model("", "", "", piece("", 0, 1)), "empty.model")},
                  "empty.model: sentencepiece piece 9 is empty");
}

}  // namespace
}  // namespace ft::data
