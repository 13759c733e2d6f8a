// Chat formats as the models were trained on them: ShareGPT records, the llama3 and chatml
// templates, special tokens that come only from templates (a dataset that spells <|eot_id|>
// keeps it as text), "auto" choosing by the tokenizer, and the prompt ft_generate encodes.
// The exact ids are also checked against transformers' apply_chat_template with the models' own
// Jinja templates in tests/interop/test_chat_templates.py; here they are built from the pieces.
#include <gtest/gtest.h>

#include <algorithm>

#include "data/dataset_record.h"
#include "data/prompt_template.h"
#include "data/tokenized_dataset.h"
#include "data/tokenizer.h"
#include "io/generation_config.h"
#include "test_support.h"
#include "util/file_util.h"

namespace ft::data {
namespace {

const Tokenizer& bpe_llama3() {
  static Tokenizer t(test::data_path("llama3-tokenizer"));
  return t;
}
const Tokenizer& bpe_qwen2() {
  static Tokenizer t(test::data_path("qwen2-tokenizer-tiny"));
  return t;
}
const Tokenizer& sp_llama2() {
  static Tokenizer t(test::data_path("llama2-tokenizer/tokenizer.model"));
  return t;
}

std::vector<std::int64_t> cat_ids(std::initializer_list<std::vector<std::int64_t>> parts) {
  std::vector<std::int64_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<std::int64_t> segment_ids(const std::vector<Segment>& segments, const Tokenizer& tok,
                                    std::vector<std::uint8_t>* targets_out = nullptr) {
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> targets;
  tokenize_segments(segments, tok, false, ids, targets);
  if (targets_out != nullptr) *targets_out = targets;
  return std::vector<std::int64_t>(ids.begin(), ids.end());
}

TEST(ShareGpt, ReadAsAConversation) {
  Record r = parse_record(R"({"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."},
                              {"from": "user", "value": "Bye"}, {"from": "assistant", "value": "Bye."}],
                              "system": "Be brief."})",
                          RecordFormat::kShareGpt, "f.jsonl:3");
  ASSERT_EQ(r.messages.size(), 5u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "Be brief.");
  EXPECT_EQ(r.messages[1].role, "user");
  EXPECT_EQ(r.messages[4].role, "assistant");
  EXPECT_EQ(r.messages[4].content, "Bye.");
  Record own_system = parse_record(R"({"conversations": [{"from": "system", "value": "S"}, {"from": "human", "value": "u"},
                                      {"from": "gpt", "value": "a"}], "system": ""})",
                                   RecordFormat::kShareGpt, "x");
  EXPECT_EQ(own_system.messages.size(), 3u);
  EXPECT_EQ(parse_record_format("sharegpt"), RecordFormat::kShareGpt);
  EXPECT_STREQ(record_format_name(RecordFormat::kShareGpt), "sharegpt");
}

TEST(ShareGpt, ErrorsNameTheLineAndTheTurn) {
  auto bad = [](const std::string& json, const std::string& fragment) {
    EXPECT_FT_ERROR(parse_record(json, RecordFormat::kShareGpt, "data.jsonl:7"), "data.jsonl:7" + fragment);
  };
  bad(R"({"messages": []})", ": missing \"conversations\"");
  bad(R"({"conversations": []})", ": \"conversations\" must be a non-empty list of {\"from\", \"value\"}");
  bad(R"({"conversations": [{"from": "human"}]})", ": conversations[0]: \"value\" must be a string");
  bad(R"({"conversations": [{"from": "bot", "value": "x"}]})", ": conversations[0]: \"from\": \"bot\" is not human, gpt or system");
  bad(R"({"conversations": [{"from": "human", "value": "u"}, {"from": "function_call", "value": "{}"}]})",
      ": conversations[1]: \"from\": \"function_call\" is a tool turn");
  bad(R"({"conversations": [{"from": "human", "value": "u"}]})", ": the last message must be the assistant's");
  // With a top-level system, the index is still the one in the file's list.
  bad(R"({"system": "s", "conversations": [{"from": "human", "value": "u"}, {"from": "human", "value": "v"}]})",
      ": conversations[1] has role \"user\" where \"assistant\" was expected");
  bad(R"({"conversations": [{"from": "human", "value": "u"}, {"from": "gpt", "value": ""}]})",
      ": conversations[1] is an empty assistant response");
  bad(R"({"system": "s", "conversations": [{"from": "system", "value": "t"}, {"from": "human", "value": "u"}, {"from": "gpt", "value": "a"}]})",
      ": conversations[0]: a system turn may only come first (and not beside a top-level \"system\")");
  bad(R"({"system": 3, "conversations": [{"from": "human", "value": "u"}, {"from": "gpt", "value": "a"}]})",
      ": \"system\" must be a string, got 3");
}

TEST(ChatTemplates, AutoFollowsTheTokenizer) {
  EXPECT_EQ(resolve_template("auto", RecordFormat::kChat, &bpe_llama3()).name, "llama3");
  EXPECT_EQ(resolve_template("auto", RecordFormat::kShareGpt, &bpe_qwen2()).name, "chatml");
  EXPECT_EQ(resolve_template("auto", RecordFormat::kChat, &sp_llama2()).name, "llama2_chat");
  EXPECT_EQ(resolve_template("auto", RecordFormat::kChat).name, "llama2_chat");
  EXPECT_EQ(resolve_template("auto", RecordFormat::kAlpaca, &bpe_llama3()).name, "alpaca");
}

TEST(ChatTemplates, Llama3IdsAreMetasFormat) {
  const Tokenizer& tok = bpe_llama3();
  const std::int64_t bot = tok.special_token_id("<|begin_of_text|>"), sh = tok.special_token_id("<|start_header_id|>"),
                     eh = tok.special_token_id("<|end_header_id|>"), eot = tok.special_token_id("<|eot_id|>");
  ASSERT_EQ(bot, 128000);
  ASSERT_EQ(tok.bos_id(), bot);
  ASSERT_EQ(eot, 128009);
  Record r = parse_record(R"({"messages": [{"role": "system", "content": " Be brief. "}, {"role": "user", "content": "Hi\n"},
                             {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"},
                             {"role": "assistant", "content": "Bye."}]})",
                          RecordFormat::kChat, "x");
  const PromptTemplate t = resolve_template("llama3", RecordFormat::kChat);
  std::vector<std::uint8_t> targets;
  const auto ids = segment_ids(render_record(t, r, RecordFormat::kChat), tok, &targets);
  auto text = [&](const std::string& s) { return tok.encode(s, false, false); };
  auto header = [&](const std::string& role) { return cat_ids({{sh}, text(role), {eh}, text("\n\n")}); };
  const auto prompt1 = cat_ids({{bot}, header("system"), text("Be brief."), {eot}, header("user"), text("Hi"), {eot},
                               header("assistant")});
  const auto answer1 = cat_ids({text("Hello."), {eot}});
  const auto prompt2 = cat_ids({header("user"), text("Bye"), {eot}, header("assistant")});
  const auto answer2 = cat_ids({text("Bye."), {eot}});
  EXPECT_EQ(ids, cat_ids({prompt1, answer1, prompt2, answer2}));
  // Only the answers (with their <|eot_id|>, so the model learns to stop) are trained on.
  ASSERT_EQ(targets.size(), ids.size());
  std::vector<std::uint8_t> expected(prompt1.size(), 0);
  expected.insert(expected.end(), answer1.size(), 1);
  expected.insert(expected.end(), prompt2.size(), 0);
  expected.insert(expected.end(), answer2.size(), 1);
  EXPECT_EQ(targets, expected);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok.eos_id()), 0);  // no <|end_of_text|> in a chat
}

TEST(ChatTemplates, ChatmlIdsAreQwensFormat) {
  const Tokenizer& tok = bpe_qwen2();
  const std::int64_t start = tok.special_token_id("<|im_start|>"), end = tok.special_token_id("<|im_end|>");
  ASSERT_GE(start, 0);
  ASSERT_GE(end, 0);
  ASSERT_EQ(tok.bos_id(), -1);  // Qwen has no BOS
  Record r = parse_record(R"({"conversations": [{"from": "human", "value": "Hi"}, {"from": "gpt", "value": "Hello."}]})",
                          RecordFormat::kShareGpt, "x");
  auto text = [&](const std::string& s) { return tok.encode(s, false, false); };
  const PromptTemplate t = resolve_template("chatml", RecordFormat::kShareGpt);
  EXPECT_EQ(segment_ids(render_record(t, r, RecordFormat::kShareGpt), tok),
            cat_ids({{start}, text("user\nHi"), {end}, text("\n"), {start}, text("assistant\nHello."), {end}, text("\n")}));
  // default_system puts a system turn first when the record has none (Qwen2.5's own template does).
  PromptTemplate with_default = resolve_template(Json{{"base", "chatml"}, {"default_system", "Be kind."}}, RecordFormat::kChat);
  const auto ids = segment_ids(render_record(with_default, r, RecordFormat::kShareGpt), tok);
  EXPECT_EQ(std::vector<std::int64_t>(ids.begin(), ids.begin() + 1 + text("system\nBe kind.").size() + 1),
            cat_ids({{start}, text("system\nBe kind."), {end}}));
}

TEST(ChatTemplates, SpecialTokenTextInARecordStaysText) {
  const Tokenizer& tok = bpe_llama3();
  const std::int64_t eot = tok.special_token_id("<|eot_id|>");
  Record r = parse_record(R"({"messages": [{"role": "user", "content": "say <|eot_id|> please"},
                             {"role": "assistant", "content": "<|eot_id|><|start_header_id|>system"}]})",
                          RecordFormat::kChat, "x");
  const auto ids = segment_ids(render_record(resolve_template("llama3", RecordFormat::kChat), r, RecordFormat::kChat), tok);
  // Two end-of-turn ids, the template's own: the user's and the assistant's turn end.
  EXPECT_EQ(std::count(ids.begin(), ids.end(), eot), 2);
  const auto spelled = tok.encode("<|eot_id|><|start_header_id|>system", false, false);
  EXPECT_GT(spelled.size(), 3u);
  EXPECT_TRUE(std::search(ids.begin(), ids.end(), spelled.begin(), spelled.end()) != ids.end());
  // The same for alpaca records and the "none" template.
  Record a = parse_record(R"({"instruction": "<|begin_of_text|>", "output": "<|end_of_text|>"})", RecordFormat::kAlpaca, "x");
  const auto alpaca = segment_ids(render_record(resolve_template("alpaca", RecordFormat::kAlpaca), a, RecordFormat::kAlpaca), tok);
  EXPECT_EQ(std::count(alpaca.begin(), alpaca.end(), tok.bos_id()), 1);  // the template's BOS only
  EXPECT_EQ(std::count(alpaca.begin(), alpaca.end(), tok.eos_id()), 1);  // the template's EOS only
}

TEST(ChatTemplates, TemplateSpecialsMustBeTheTokenizers) {
  EXPECT_FT_ERROR(validate_template(resolve_template("llama3", RecordFormat::kChat), RecordFormat::kChat, &sp_llama2()),
                  "data.template \"llama3\": its turns end with <|eot_id|>, which is not a special token of");
  EXPECT_FT_ERROR(validate_template(resolve_template("chatml", RecordFormat::kChat), RecordFormat::kChat, &bpe_llama3()),
                  "data.template \"chatml\": its turns end with <|im_end|>");
  EXPECT_FT_ERROR(validate_template(resolve_template(Json{{"base", "llama3"}, {"assistant", "{content}<|eom_id|><|end|>"}},
                                                     RecordFormat::kChat),
                                    RecordFormat::kChat, &bpe_llama3()),
                  "data.template.assistant: <|end|> is not a special token of");
  EXPECT_NO_THROW(validate_template(resolve_template("auto", RecordFormat::kChat, &bpe_qwen2()), RecordFormat::kChat, &bpe_qwen2()));
  EXPECT_FT_ERROR(resolve_template(Json{{"base", "chatml"}, {"trim_content", "yes"}}, RecordFormat::kChat),
                  "data.template.trim_content: expected true or false");
}

TEST(ChatTemplates, GenerationPromptEndsWithTheAssistantHeader) {
  const Tokenizer& tok = bpe_llama3();
  const auto ids = encode_prompt(resolve_template("llama3", RecordFormat::kChat), "Hi", tok);
  auto text = [&](const std::string& s) { return tok.encode(s, false, false); };
  const std::int64_t sh = tok.special_token_id("<|start_header_id|>"), eh = tok.special_token_id("<|end_header_id|>");
  EXPECT_EQ(ids, cat_ids({{tok.bos_id(), sh}, text("user"), {eh}, text("\n\nHi"), {tok.special_token_id("<|eot_id|>"), sh},
                         text("assistant"), {eh}, text("\n\n")}));
  EXPECT_EQ(encode_prompt(resolve_template("none", RecordFormat::kText), "Hi", tok), cat_ids({{tok.bos_id()}, text("Hi")}));
}

TEST(GenerationConfig, EosIdsOneOrMany) {
  test::TempDir dir;
  EXPECT_TRUE(io::generation_eos_ids(dir.path()).empty());
  write_file_atomic(join_path(dir.path(), "generation_config.json"), R"({"eos_token_id": [128001, 128008, 128009]})");
  EXPECT_EQ(io::generation_eos_ids(dir.path()), (std::vector<std::int64_t>{128001, 128008, 128009}));
  write_file_atomic(join_path(dir.path(), "generation_config.json"), R"({"eos_token_id": 2, "do_sample": false})");
  EXPECT_EQ(io::generation_eos_ids(dir.path()), (std::vector<std::int64_t>{2}));
  write_file_atomic(join_path(dir.path(), "generation_config.json"), R"({"eos_token_id": "</s>"})");
  EXPECT_FT_ERROR(io::generation_eos_ids(dir.path()), "generation_config.json: eos_token_id: expected a token id or a list");
}

TEST(TokenizedDataset, BundledShareGptThroughEachChatFormat) {
  config::DataConfig d;
  d.format = config::RecordFormat::kShareGpt;
  d.max_seq_len = 4096;
  for (const Tokenizer* tok : {&bpe_llama3(), &bpe_qwen2(), &sp_llama2()}) {
    const SampleSettings settings = SampleSettings::from_config(d, tok);
    TokenizedDataset data = tokenize_dataset(test::data_path("datasets/alpaca_sharegpt.jsonl"), settings, *tok, 2);
    EXPECT_EQ(data.stats.records, 25);
    EXPECT_EQ(data.stats.samples, 25);
    EXPECT_EQ(data.stats.bad_records, 0);
  }
}

}  // namespace
}  // namespace ft::data
