// Prompt templates: how a record becomes the text the model sees. Templates are data (the
// config's data.template: a built-in name or an object with the same fields), not code.
// A record renders to segments; each segment is tokenized on its own (so sentencepiece's dummy
// prefix supplies the space at its start), prompt segments are not trained on (unless
// data.train_on_prompt), and BOS/EOS enter as ids, never as "<s>" text.
// Special tokens come only from templates: where a template's own text spells one of the
// tokenizer's special tokens as <...> ("<|eot_id|>", "<|im_start|>"), it becomes that token's id;
// the same characters inside a record's content stay text.
//
// Built-ins:
//   alpaca       Stanford Alpaca's prompt ("Below is an instruction ... ### Response:\n")
//   llama2_chat  <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant}</s><s>[INST] ...
//   llama3       Meta's Llama 3 chat format (the chat_template of Meta-Llama-3-8B-Instruct):
//                <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>
//                <|start_header_id|>user<|end_header_id|>\n\n{user}<|eot_id|>
//                <|start_header_id|>assistant<|end_header_id|>\n\n{assistant}<|eot_id|>..., each content
//                trimmed as that template does; generation stops at <|eot_id|>
//   chatml       ChatML as Qwen2/2.5 use it: <|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n
//                {user}<|im_end|>\n<|im_start|>assistant\n{assistant}<|im_end|>\n...; no BOS; no system
//                turn unless the record or default_system gives one (Qwen2.5's own template adds
//                "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."); stops at <|im_end|>
//   none         the record's own text: prompt_completion's prompt, text's text
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset_record.h"
#include "util/json.h"

namespace ft::data {

struct PromptTemplate {
  std::string name;
  // alpaca and prompt_completion. Placeholders: {instruction} {input} {output} {prompt} {completion}.
  std::string prompt = "{prompt}";
  std::string prompt_with_input;  // used when "input" is non-empty; empty = same as prompt
  std::string response = "{completion}";
  // chat. Placeholders: {content}, and {system} in system_user (the first user turn of a
  // conversation that starts with a system message).
  std::string user = "{content}";
  std::string system_user = "{system}\n{content}";
  std::string assistant = "{content}";
  bool bos_each_turn = true;  // BOS before every user turn (Llama-2) or only the first
  // EOS id after each response; false where the template's own text ends a turn (llama3, chatml).
  bool eos_after_response = true;
  // Strip whitespace around each message's content (Llama 3's chat template does).
  bool trim_content = false;
  // The system message of a conversation that has none (empty: no system turn then).
  std::string default_system;
  // The special token that ends a response in generation besides the model's EOS ids (empty: none).
  std::string stop;

  Json to_json() const;
};

class Tokenizer;

// data.template -> template. "auto" picks alpaca for alpaca records; for conversations the chat
// format of the tokenizer (llama3 for Llama 3's special tokens, chatml for <|im_start|>, else
// llama2_chat; llama2_chat without a tokenizer); none otherwise. An object may name a built-in as
// "base" and override some of its fields. Errors name data.template and the field.
PromptTemplate resolve_template(const Json& spec, RecordFormat format, const Tokenizer* tokenizer = nullptr);

// Built-in names, for help texts and errors.
const char* builtin_template_names();

struct Segment {
  std::string text;
  bool target = false;  // trained on (its tokens predict themselves)
  bool bos = false;     // BOS id before the text
  bool eos = false;     // EOS id after the text
  // Byte ranges [first, second) of `text` that came from the template itself, not from the
  // record: only there is "<|eot_id|>"-like text a special token (see tokenize_segments).
  std::vector<std::pair<std::size_t, std::size_t>> template_text;
};

// The segments of one record. Throws ft::Error naming the record for unknown placeholders.
std::vector<Segment> render_record(const PromptTemplate& tmpl, const Record& record, RecordFormat format);

// Replaces {name} by values[name]; "{{" and "}}" are literal braces. `where` names the template
// field in errors. When `template_text` is given, the ranges of the result that are the
// pattern's own text are appended to it.
std::string fill_template(const std::string& pattern, const std::map<std::string, std::string>& values,
                          const std::string& where,
                          std::vector<std::pair<std::size_t, std::size_t>>* template_text = nullptr);

}  // namespace ft::data
