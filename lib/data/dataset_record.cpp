#include "data/dataset_record.h"

#include "util/error.h"
#include "util/json.h"

namespace ft::data {

RecordFormat parse_record_format(const std::string& name) {
  if (name == "alpaca") return RecordFormat::kAlpaca;
  if (name == "prompt_completion") return RecordFormat::kPromptCompletion;
  if (name == "text") return RecordFormat::kText;
  if (name == "chat") return RecordFormat::kChat;
  FT_CHECK(false, "data.format: expected alpaca, prompt_completion, text or chat, got \"", name, "\"");
  return RecordFormat::kText;
}

const char* record_format_name(RecordFormat format) {
  switch (format) {
    case RecordFormat::kAlpaca: return "alpaca";
    case RecordFormat::kPromptCompletion: return "prompt_completion";
    case RecordFormat::kText: return "text";
    case RecordFormat::kChat: return "chat";
  }
  return "";
}

namespace {

// A string field: required or optional, and whether it may be empty (a response may not:
// there would be nothing to learn, only an EOS).
void read_field(const Json& object, const char* name, bool required, bool allow_empty, Record& out) {
  if (!object.contains(name) || object[name].is_null()) {
    FT_CHECK(!required, out.location, ": missing \"", name, "\"");
    out.fields[name] = "";
    return;
  }
  const Json& v = object[name];
  FT_CHECK(v.is_string(), out.location, ": \"", name, "\" must be a string, got ", describe_json(v));
  out.fields[name] = v.get<std::string>();
  FT_CHECK(allow_empty || !out.fields[name].empty(), out.location, ": \"", name, "\" is empty");
}

void read_messages(const Json& object, Record& out) {
  FT_CHECK(object.contains("messages"), out.location, ": missing \"messages\"");
  const Json& messages = object["messages"];
  FT_CHECK(messages.is_array() && !messages.empty(), out.location,
           ": \"messages\" must be a non-empty list of {\"role\", \"content\"}, got ", describe_json(messages));
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const Json& m = messages[i];
    const std::string where = ft::str(out.location, ": messages[", i, "]");
    FT_CHECK(m.is_object(), where, ": expected {\"role\", \"content\"}, got ", describe_json(m));
    FT_CHECK(m.contains("role") && m["role"].is_string(), where, ": \"role\" must be a string");
    FT_CHECK(m.contains("content") && m["content"].is_string(), where, ": \"content\" must be a string");
    ChatMessage message{m["role"].get<std::string>(), m["content"].get<std::string>()};
    FT_CHECK(message.role == "system" || message.role == "user" || message.role == "assistant", where,
             ": role \"", message.role, "\" is not system, user or assistant");
    out.messages.push_back(std::move(message));
  }
  // Optional system first, then user/assistant alternating, ending with the assistant.
  std::size_t i = out.messages[0].role == "system" ? 1 : 0;
  FT_CHECK(i < out.messages.size(), out.location, ": a system message alone has nothing to learn from");
  for (std::size_t k = i; k < out.messages.size(); ++k) {
    const char* expected = (k - i) % 2 == 0 ? "user" : "assistant";
    FT_CHECK(out.messages[k].role == expected, out.location, ": messages[", k, "] has role \"", out.messages[k].role,
             "\" where \"", expected, "\" was expected (after an optional system message, user and assistant alternate)");
    if (out.messages[k].role == "assistant")
      FT_CHECK(!out.messages[k].content.empty(), out.location, ": messages[", k, "] is an empty assistant response");
  }
  FT_CHECK(out.messages.back().role == "assistant", out.location,
           ": the last message must be the assistant's (there is no response to learn from)");
}

}  // namespace

Record parse_record(std::string_view json_text, RecordFormat format, const std::string& location) {
  Json value = parse_json(json_text, location, 16);
  Record out;
  out.location = location;
  FT_CHECK(value.is_object(), location, ": expected a JSON object, got ", describe_json(value));
  switch (format) {
    case RecordFormat::kAlpaca:
      read_field(value, "instruction", true, false, out);
      read_field(value, "input", false, true, out);
      read_field(value, "output", true, false, out);
      break;
    case RecordFormat::kPromptCompletion:
      read_field(value, "prompt", true, true, out);
      read_field(value, "completion", true, false, out);
      break;
    case RecordFormat::kText:
      read_field(value, "text", true, false, out);
      break;
    case RecordFormat::kChat:
      read_messages(value, out);
      break;
  }
  return out;
}

}  // namespace ft::data
