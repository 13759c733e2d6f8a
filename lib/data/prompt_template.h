// Prompt templates: how a record becomes the text the model sees. Templates are data (the
// config's data.template: a built-in name or an object with the same fields), not code.
// A record renders to segments; each segment is tokenized on its own (so sentencepiece's dummy
// prefix supplies the space at its start), prompt segments are not trained on (unless
// data.train_on_prompt), and BOS/EOS enter as ids, never as "<s>" text.
//
// Built-ins:
//   alpaca       Stanford Alpaca's prompt ("Below is an instruction ... ### Response:\n")
//   llama2_chat  <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant}</s><s>[INST] ...
//   none         the record's own text: prompt_completion's prompt, text's text
#pragma once

#include <string>
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

  Json to_json() const;
};

// data.template -> template. "auto" picks alpaca for alpaca records, llama2_chat for chat and
// none otherwise. An object may name a built-in as "base" and override some of its fields.
// Errors name data.template and the field.
PromptTemplate resolve_template(const Json& spec, RecordFormat format);

struct Segment {
  std::string text;
  bool target = false;  // trained on (its tokens predict themselves)
  bool bos = false;     // BOS id before the text
  bool eos = false;     // EOS id after the text
};

// The segments of one record. Throws ft::Error naming the record for unknown placeholders.
std::vector<Segment> render_record(const PromptTemplate& tmpl, const Record& record, RecordFormat format);

// Replaces {name} by values[name]; "{{" and "}}" are literal braces. `where` names the template
// field in errors.
std::string fill_template(const std::string& pattern, const std::map<std::string, std::string>& values,
                          const std::string& where);

}  // namespace ft::data
