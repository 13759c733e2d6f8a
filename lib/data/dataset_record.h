// One training example as read from a dataset file, validated for its format:
//   alpaca             {"instruction": str, "input": str (optional), "output": str}
//   prompt_completion  {"prompt": str, "completion": str}
//   text               {"text": str}
//   chat               {"messages": [{"role": "system"|"user"|"assistant", "content": str}, ...]}
//   sharegpt           {"conversations": [{"from": "system"|"human"|"gpt", "value": str}, ...],
//                       "system": str (optional)}: LLaMA-Factory's and axolotl's form of a chat,
//                      read into the same messages ("user"/"assistant" are accepted as "from" too)
// Fields other tools add (e.g. "system", "history", "id") are ignored. A record that breaks its
// format is an ft::Error naming its location and the problem.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config/choices.h"

namespace ft::data {

using RecordFormat = config::RecordFormat;  // data.format

// chat and sharegpt: records that hold a conversation (Record::messages).
inline bool is_conversation(RecordFormat format) {
  return format == RecordFormat::kChat || format == RecordFormat::kShareGpt;
}

RecordFormat parse_record_format(const std::string& name);  // the names of data.format
const char* record_format_name(RecordFormat format);

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
};

struct Record {
  std::string location;                       // "path:line"
  std::map<std::string, std::string> fields;  // alpaca / prompt_completion / text
  std::vector<ChatMessage> messages;          // chat, sharegpt: optional system, then user/assistant pairs
};

// Parses and validates one record's JSON text. Throws ft::Error "LOCATION: problem".
Record parse_record(std::string_view json_text, RecordFormat format, const std::string& location);

}  // namespace ft::data
