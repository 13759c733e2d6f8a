// ft_tokenize: ft's tokenizer on a list of texts, for the interop test against the sentencepiece
// library (tests/interop/test_sentencepiece.py). Not a user program.
//   ft_tokenize --tokenizer PATH --texts TEXTS.json --out IDS.json
// TEXTS.json: a JSON list of strings, of {"hex": "..."} for byte strings that are not UTF-8, or
// of {"ids": [...]} for id sequences to decode as they are (not encoded).
// IDS.json: {"ids": [[...], ...], "decoded": [...]} (ids without BOS, or the given ids; decoded
// from those ids, non-UTF-8 output as {"hex": "..."}).
#include <cxxopts.hpp>

#include "app_main.h"
#include "data/tokenizer.h"
#include "util/error.h"
#include "util/file_util.h"
#include "util/json.h"

namespace {

std::string from_hex(const std::string& hex) {
  FT_CHECK(hex.size() % 2 == 0, "hex string of odd length");
  std::string out;
  for (std::size_t i = 0; i < hex.size(); i += 2) out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

bool valid_utf8(const std::string& s) {
  try {
    (void)ft::Json(s).dump();
    return true;
  } catch (const ft::Json::exception&) {
    return false;
  }
}

int run(int argc, char** argv) {
  cxxopts::Options options("ft_tokenize", "ft's tokenizer on texts (interop tests).");
  options.add_options()("tokenizer", "tokenizer.model or a model folder", cxxopts::value<std::string>())(
      "texts", "TEXTS.json", cxxopts::value<std::string>())("out", "IDS.json", cxxopts::value<std::string>());
  auto args = options.parse(argc, argv);
  for (const char* required : {"tokenizer", "texts", "out"}) {
    if (!args.count(required)) throw ft::app::UsageError{std::string("--") + required + " is required"};
  }
  ft::data::Tokenizer tokenizer(args["tokenizer"].as<std::string>());
  const ft::Json texts = ft::parse_json(ft::read_file(args["texts"].as<std::string>()), args["texts"].as<std::string>());
  ft::Json ids = ft::Json::array();
  ft::Json decoded = ft::Json::array();
  for (const auto& t : texts) {
    std::vector<std::int64_t> encoded;
    if (t.is_object() && t.contains("ids")) {
      encoded = t.at("ids").get<std::vector<std::int64_t>>();
      ft::data::check_token_ids(encoded, tokenizer.vocab_size(), "TEXTS.json item " + std::to_string(ids.size()));
    } else {
      const std::string text = t.is_string() ? t.get<std::string>() : from_hex(t.at("hex").get<std::string>());
      encoded = tokenizer.encode(text, /*add_bos=*/false);
    }
    ids.push_back(encoded);
    const std::string back = tokenizer.decode(encoded);
    decoded.push_back(valid_utf8(back) ? ft::Json(back) : ft::Json{{"hex", to_hex(back)}});
  }
  ft::write_file_atomic(args["out"].as<std::string>(), ft::Json{{"ids", ids}, {"decoded", decoded}}.dump());
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("ft_tokenize", argc, argv, run); }
