// Dataset files, records, templates and tokenization into samples, on the bundled real alpaca
// data in every input format, and every way a dataset can be bad.
#include <gtest/gtest.h>

#include "data/dataset_file.h"
#include "data/dataset_record.h"
#include "data/prompt_template.h"
#include "data/tokenized_dataset.h"
#include "data/tokenizer.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft::data {
namespace {

const Tokenizer& tok512() {
  static Tokenizer t(test::data_path("stories260K/tokenizer.model"));
  return t;
}
const Tokenizer& llama2() {
  static Tokenizer t(test::data_path("llama2-tokenizer/tokenizer.model"));
  return t;
}

SampleSettings settings_for(const char* format, std::int64_t max_seq_len = 4096) {
  config::DataConfig d;
  d.format = parse_record_format(format);
  d.max_seq_len = max_seq_len;
  return SampleSettings::from_config(d);
}

TEST(DatasetFile, JsonArrayWithLineNumbers) {
  const std::string text = "[\n {\"a\": 1},\n {\"b\": \"x]\"},\n\n {\"c\": [1, {\"d\": 2}]}\n]\n";
  auto records = split_records(text, "f.json");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].location, "f.json:2");
  EXPECT_EQ(records[1].location, "f.json:3");
  EXPECT_EQ(records[1].text, "{\"b\": \"x]\"}");
  EXPECT_EQ(records[2].location, "f.json:5");
}

TEST(DatasetFile, JsonLinesSkipBlankLines) {
  auto records = split_records("\xEF\xBB\xBF{\"a\":1}\n\n  {\"b\":2}  \r\n", "f.jsonl");
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1].location, "f.jsonl:3");
  EXPECT_EQ(records[1].text, "{\"b\":2}");
}

TEST(DatasetFile, Errors) {
  EXPECT_FT_ERROR(split_records("  \n", "e.json"), "e.json: the dataset is empty");
  EXPECT_FT_ERROR(split_records("[{\"a\":1}, {\"b\":2}", "u.json"), "u.json: the JSON array is not closed");
  EXPECT_FT_ERROR(split_records("[{\"a\":1}]\nx", "t.json"), "t.json:2: unexpected text after the closing ']'");
  EXPECT_FT_ERROR(split_records("[{\"a\":1},,{}]", "c.json"), "c.json:1: empty element in the array");
  EXPECT_FT_ERROR(split_records("[]", "n.json"), "n.json: the dataset has no records");
}

TEST(DatasetRecord, EveryFormat) {
  Record a = parse_record(R"({"instruction": "Add", "input": "1+1", "output": "2", "id": 7})", RecordFormat::kAlpaca, "x:1");
  EXPECT_EQ(a.fields["instruction"], "Add");
  EXPECT_EQ(a.fields["input"], "1+1");
  Record b = parse_record(R"({"instruction": "Hi", "output": "Hello"})", RecordFormat::kAlpaca, "x:1");
  EXPECT_EQ(b.fields["input"], "");
  Record c = parse_record(R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                             {"role": "assistant", "content": "A"}]})",
                          RecordFormat::kChat, "x:1");
  ASSERT_EQ(c.messages.size(), 3u);
  EXPECT_EQ(c.messages[2].content, "A");
}

TEST(DatasetRecord, ErrorsNameTheLocation) {
  auto bad = [](const char* json, RecordFormat f, const char* message) {
    EXPECT_FT_ERROR(parse_record(json, f, "d.jsonl:9"), std::string("d.jsonl:9") + message);
  };
  bad(R"({"instruction": "x"})", RecordFormat::kAlpaca, ": missing \"output\"");
  bad(R"({"instruction": "x", "output": ""})", RecordFormat::kAlpaca, ": \"output\" is empty");
  bad(R"({"instruction": 3, "output": "y"})", RecordFormat::kAlpaca, ": \"instruction\" must be a string, got 3");
  bad(R"({"prompt": "p"})", RecordFormat::kPromptCompletion, ": missing \"completion\"");
  bad(R"({"text": ""})", RecordFormat::kText, ": \"text\" is empty");
  bad(R"([1])", RecordFormat::kText, ": expected a JSON object, got an array");
  bad(R"({"text": "a" )", RecordFormat::kText, ": invalid JSON at line 1");
  bad("{\"text\": \"\xff\xfe\"}", RecordFormat::kText, ": invalid JSON");  // invalid UTF-8
  bad(R"({"messages": []})", RecordFormat::kChat, ": \"messages\" must be a non-empty list");
  bad(R"({"messages": [{"role": "user", "content": "u"}]})", RecordFormat::kChat, ": the last message must be the assistant's");
  bad(R"({"messages": [{"role": "user", "content": "u"}, {"role": "user", "content": "v"}]})", RecordFormat::kChat,
      ": messages[1] has role \"user\" where \"assistant\" was expected");
  bad(R"({"messages": [{"role": "bot", "content": "u"}]})", RecordFormat::kChat, ": messages[0]: role \"bot\" is not");
  bad(R"({"messages": [{"role": "user", "content": "u"}, {"role": "assistant", "content": ""}]})", RecordFormat::kChat,
      ": messages[1] is an empty assistant response");
}

TEST(PromptTemplate, AlpacaRendersStanfordsPrompt) {
  PromptTemplate t = resolve_template("auto", RecordFormat::kAlpaca);
  EXPECT_EQ(t.name, "alpaca");
  Record r = parse_record(R"({"instruction": "Name a color.", "input": "", "output": "Blue."})", RecordFormat::kAlpaca, "x");
  auto seg = render_record(t, r, RecordFormat::kAlpaca);
  ASSERT_EQ(seg.size(), 2u);
  EXPECT_EQ(seg[0].text,
            "Below is an instruction that describes a task. Write a response that appropriately completes the "
            "request.\n\n### Instruction:\nName a color.\n\n### Response:\n");
  EXPECT_TRUE(seg[0].bos);
  EXPECT_FALSE(seg[0].target);
  EXPECT_EQ(seg[1].text, "Blue.");
  EXPECT_TRUE(seg[1].target && seg[1].eos);
  r.fields["input"] = "red, green";
  EXPECT_NE(render_record(t, r, RecordFormat::kAlpaca)[0].text.find("### Input:\nred, green\n\n### Response:\n"),
            std::string::npos);
}

TEST(PromptTemplate, Llama2ChatTurns) {
  PromptTemplate t = resolve_template("auto", RecordFormat::kChat);
  Record r = parse_record(R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
                             {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"},
                             {"role": "assistant", "content": "Bye."}]})",
                          RecordFormat::kChat, "x");
  auto seg = render_record(t, r, RecordFormat::kChat);
  ASSERT_EQ(seg.size(), 4u);
  EXPECT_EQ(seg[0].text, "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST]");
  EXPECT_EQ(seg[2].text, "[INST] Bye [/INST]");
  EXPECT_TRUE(seg[2].bos);
  EXPECT_TRUE(seg[3].target && seg[3].eos);
  // Tokens: <s> [INST] ... [/INST] Hello. </s> <s> [INST] Bye [/INST] Bye. </s>
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> targets;
  tokenize_segments(seg, llama2(), false, ids, targets);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 1), 2);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 2), 2);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(targets.back(), 1);
}

TEST(PromptTemplate, CustomTemplatesAndErrors) {
  Json spec = {{"base", "alpaca"}, {"response", "{output} {{done}}"}};
  PromptTemplate t = resolve_template(spec, RecordFormat::kAlpaca);
  Record r = parse_record(R"({"instruction": "i", "output": "o"})", RecordFormat::kAlpaca, "x");
  EXPECT_EQ(render_record(t, r, RecordFormat::kAlpaca)[1].text, "o {done}");
  EXPECT_FT_ERROR(resolve_template("vicuna", RecordFormat::kAlpaca), "data.template: unknown template \"vicuna\"");
  EXPECT_FT_ERROR(resolve_template(Json{{"respone", "x"}}, RecordFormat::kAlpaca), "data.template: unknown field \"respone\"");
  EXPECT_FT_ERROR(validate_template(resolve_template(Json{{"base", "alpaca"}, {"response", "{answer}"}}, RecordFormat::kAlpaca),
                                    RecordFormat::kAlpaca),
                  "data.template.response: unknown placeholder {answer} (available here: {input}, {instruction}, {output})");
  EXPECT_FT_ERROR(fill_template("{a", {}, "w"), "w: unclosed '{'");
}

TEST(TokenizedDataset, BundledAlpacaInEveryFormat) {
  struct Case {
    const char* file;
    const char* format;
    std::int64_t records;
  };
  for (const Case& c : {Case{"datasets/alpaca_train.json", "alpaca", 899}, Case{"datasets/alpaca_eval.jsonl", "alpaca", 100},
                        Case{"datasets/alpaca_chat.jsonl", "chat", 50},
                        Case{"datasets/alpaca_prompt_completion.jsonl", "prompt_completion", 50},
                        Case{"datasets/alpaca_text.json", "text", 50}}) {
    SCOPED_TRACE(c.file);
    for (const Tokenizer* tokenizer : {&tok512(), &llama2()}) {
      TokenizedDataset d = tokenize_dataset(test::data_path(c.file), settings_for(c.format), *tokenizer, 2);
      EXPECT_EQ(d.stats.records, c.records);
      EXPECT_EQ(d.stats.samples, c.records);  // nothing is cut at 4096 tokens
      EXPECT_EQ(d.stats.truncated + d.stats.dropped_no_target + d.stats.bad_records, 0);
      EXPECT_EQ(d.offsets.back(), d.tokens.size());
      EXPECT_GT(d.stats.target_tokens, 0);
      // Every sample starts with BOS (not a target) and ends with EOS (a target).
      for (std::size_t i = 0; i < d.num_samples(); ++i) {
        EXPECT_EQ(d.tokens[d.offsets[i]], tokenizer->bos_id());
        EXPECT_EQ(d.targets[d.offsets[i]], 0);
        EXPECT_EQ(d.tokens[d.offsets[i + 1] - 1], tokenizer->eos_id());
        EXPECT_EQ(d.targets[d.offsets[i + 1] - 1], 1);
      }
    }
  }
}

TEST(TokenizedDataset, FirstAlpacaRecordExactly) {
  // [BOS] + encode(prompt) masked, encode(output) + [EOS] trained on.
  TokenizedDataset d = tokenize_dataset(test::data_path("datasets/alpaca_text.json"), settings_for("text"), llama2(), 1);
  Json records = parse_json_file(test::data_path("datasets/alpaca_text.json"));
  auto expected = llama2().encode(records[0]["text"].get<std::string>(), true, true);
  std::vector<std::int64_t> got(d.tokens.begin(), d.tokens.begin() + d.offsets[1]);
  EXPECT_EQ(got, expected);
  TokenizedDataset a = tokenize_dataset(test::data_path("datasets/alpaca_train.json"), settings_for("alpaca"), llama2(), 1);
  Json train = parse_json_file(test::data_path("datasets/alpaca_train.json"));
  PromptTemplate t = resolve_template("alpaca", RecordFormat::kAlpaca);
  Record r = parse_record(train[0].dump(), RecordFormat::kAlpaca, "x");
  auto seg = render_record(t, r, RecordFormat::kAlpaca);
  auto prompt = llama2().encode(seg[0].text, true, false);
  auto response = llama2().encode(seg[1].text, false, true);
  ASSERT_EQ(a.offsets[1], prompt.size() + response.size());
  for (std::size_t i = 0; i < a.offsets[1]; ++i) {
    const bool in_prompt = i < prompt.size();
    EXPECT_EQ(a.tokens[i], in_prompt ? prompt[i] : response[i - prompt.size()]);
    EXPECT_EQ(a.targets[i], in_prompt ? 0 : 1) << i;
  }
  // train_on_prompt: everything but the first token.
  SampleSettings all = settings_for("alpaca");
  all.train_on_prompt = true;
  TokenizedDataset b = tokenize_dataset(test::data_path("datasets/alpaca_train.json"), all, llama2(), 1);
  EXPECT_EQ(std::count(b.targets.begin(), b.targets.begin() + b.offsets[1], 1), static_cast<long>(b.offsets[1] - 1));
}

TEST(TokenizedDataset, TruncateDropAndNoTarget) {
  SampleSettings s = settings_for("alpaca", 400);
  TokenizedDataset t = tokenize_dataset(test::data_path("datasets/alpaca_train.json"), s, tok512(), 2);
  EXPECT_GT(t.stats.truncated, 0);
  EXPECT_GT(t.stats.dropped_no_target, 0);  // prompts of 400 tokens or more leave no response
  EXPECT_EQ(t.stats.samples + t.stats.dropped_no_target, 899);
  for (std::size_t i = 0; i < t.num_samples(); ++i) EXPECT_LE(t.offsets[i + 1] - t.offsets[i], 400u);
  s.drop_too_long = true;
  TokenizedDataset d = tokenize_dataset(test::data_path("datasets/alpaca_train.json"), s, tok512(), 2);
  EXPECT_EQ(d.stats.truncated, 0);
  EXPECT_EQ(d.stats.dropped_too_long, t.stats.truncated + t.stats.dropped_no_target);
  EXPECT_EQ(d.stats.samples + d.stats.dropped_too_long, 899);
}

TEST(TokenizedDataset, ThreadsDoNotChangeTheResult) {
  TokenizedDataset one = tokenize_dataset(test::data_path("datasets/alpaca_train.json"), settings_for("alpaca"), llama2(), 1);
  TokenizedDataset four = tokenize_dataset(test::data_path("datasets/alpaca_train.json"), settings_for("alpaca"), llama2(), 4);
  EXPECT_EQ(one.tokens, four.tokens);
  EXPECT_EQ(one.targets, four.targets);
  EXPECT_EQ(one.offsets, four.offsets);
}

TEST(TokenizedDataset, BadRecordsErrorOrSkip) {
  test::TempDir dir;
  const std::string path = dir.file("bad.jsonl");
  write_file_atomic(path,
                    "{\"instruction\": \"a\", \"output\": \"b\"}\n"
                    "{\"instruction\": \"a\"}\n"
                    "not json\n"
                    "{\"instruction\": \"a\", \"output\": \"\xc3\x28\"}\n"
                    "{\"instruction\": \"c\", \"output\": \"d\"}\n");
  SampleSettings s = settings_for("alpaca");
  try {
    tokenize_dataset(path, s, tok512());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.jsonl: 3 bad records (set data.on_bad_record to \"skip\" to skip and count them):"),
              std::string::npos) << m;
    EXPECT_NE(m.find("bad.jsonl:2: missing \"output\""), std::string::npos) << m;
    EXPECT_NE(m.find("bad.jsonl:3: invalid JSON"), std::string::npos) << m;
    EXPECT_NE(m.find("bad.jsonl:4: invalid JSON"), std::string::npos) << m;  // invalid UTF-8
  }
  s.skip_bad_records = true;
  TokenizedDataset d = tokenize_dataset(path, s, tok512());
  EXPECT_EQ(d.stats.bad_records, 3);
  EXPECT_EQ(d.stats.samples, 2);
  s.max_bad_records = 2;
  EXPECT_FT_ERROR(tokenize_dataset(path, s, tok512()), "bad.jsonl: 3 bad records, more than data.max_bad_records = 2:");
  EXPECT_FT_ERROR(tokenize_dataset(dir.file("missing.json"), s, tok512()), "missing.json: dataset not found");
  write_file_atomic(dir.file("empty.json"), "");
  EXPECT_FT_ERROR(tokenize_dataset(dir.file("empty.json"), s, tok512()), "empty.json: the dataset is empty");
}

}  // namespace
}  // namespace ft::data
