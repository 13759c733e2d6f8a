#include "data/dataset_record.h"

#include "util/error.h"
#include "util/json.h"

namespace ft::data {

RecordFormat parse_record_format(const std::string& name) {
  return config::parse_choice<RecordFormat>(name, "data.format");
}

const char* record_format_name(RecordFormat format) { return config::choice_name(format).c_str(); }

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

// The conversation rules shared by chat and sharegpt: an optional system message first, then
// user and assistant alternating, ending with a non-empty assistant response. Errors give the
// index in the file's list: messages[k] is list_name[k - shift] (shift 1 when a top-level
// "system" was put first).
void check_turns(Record& out, const char* list_name, std::size_t shift = 0) {
  std::size_t i = out.messages[0].role == "system" ? 1 : 0;
  FT_CHECK(i < out.messages.size(), out.location, ": a system message alone has nothing to learn from");
  for (std::size_t k = i; k < out.messages.size(); ++k) {
    const char* expected = (k - i) % 2 == 0 ? "user" : "assistant";
    FT_CHECK(out.messages[k].role == expected, out.location, ": ", list_name, "[", k - shift, "] has role \"", out.messages[k].role,
             "\" where \"", expected, "\" was expected (after an optional system message, user and assistant alternate)");
    if (out.messages[k].role == "assistant")
      FT_CHECK(!out.messages[k].content.empty(), out.location, ": ", list_name, "[", k - shift, "] is an empty assistant response");
  }
  FT_CHECK(out.messages.back().role == "assistant", out.location,
           ": the last message must be the assistant's (there is no response to learn from)");
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
  check_turns(out, "messages");
}

// ShareGPT as LLaMA-Factory and axolotl read it: "from" human/gpt/system ("user"/"assistant" as
// some exports write them), an optional top-level "system". Tool turns (function_call,
// observation) have no place in ft's templates and are refused by name.
void read_conversations(const Json& object, Record& out) {
  FT_CHECK(object.contains("conversations"), out.location, ": missing \"conversations\"");
  const Json& turns = object["conversations"];
  FT_CHECK(turns.is_array() && !turns.empty(), out.location,
           ": \"conversations\" must be a non-empty list of {\"from\", \"value\"}, got ", describe_json(turns));
  std::size_t shift = 0;
  if (object.contains("system") && !object["system"].is_null()) {
    FT_CHECK(object["system"].is_string(), out.location, ": \"system\" must be a string, got ",
             describe_json(object["system"]));
    if (!object["system"].get<std::string>().empty()) {
      out.messages.push_back({"system", object["system"].get<std::string>()});
      shift = 1;
    }
  }
  for (std::size_t i = 0; i < turns.size(); ++i) {
    const Json& t = turns[i];
    const std::string where = ft::str(out.location, ": conversations[", i, "]");
    FT_CHECK(t.is_object(), where, ": expected {\"from\", \"value\"}, got ", describe_json(t));
    FT_CHECK(t.contains("from") && t["from"].is_string(), where, ": \"from\" must be a string");
    FT_CHECK(t.contains("value") && t["value"].is_string(), where, ": \"value\" must be a string");
    const std::string from = t["from"].get<std::string>();
    std::string role = from == "human" || from == "user"        ? "user"
                       : from == "gpt" || from == "assistant"   ? "assistant"
                       : from == "system"                       ? "system"
                                                                : "";
    FT_CHECK(from != "function_call" && from != "observation", where, ": \"from\": \"", from,
             "\" is a tool turn, which ft's chat templates do not render");
    FT_CHECK(!role.empty(), where, ": \"from\": \"", from, "\" is not human, gpt or system");
    FT_CHECK(role != "system" || (i == 0 && out.messages.empty()), where,
             ": a system turn may only come first (and not beside a top-level \"system\")");
    out.messages.push_back({std::move(role), t["value"].get<std::string>()});
  }
  check_turns(out, "conversations", shift);
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
    case RecordFormat::kShareGpt:
      read_conversations(value, out);
      break;
  }
  return out;
}

}  // namespace ft::data
