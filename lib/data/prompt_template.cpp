#include "data/prompt_template.h"

#include "util/error.h"

namespace ft::data {
namespace {

PromptTemplate builtin(const std::string& name) {
  PromptTemplate t;
  t.name = name;
  if (name == "alpaca") {
    // github.com/tatsu-lab/stanford_alpaca train.py PROMPT_DICT.
    t.prompt =
        "Below is an instruction that describes a task. Write a response that appropriately completes the "
        "request.\n\n### Instruction:\n{instruction}\n\n### Response:\n";
    t.prompt_with_input =
        "Below is an instruction that describes a task, paired with an input that provides further context. "
        "Write a response that appropriately completes the request.\n\n### Instruction:\n{instruction}\n\n### "
        "Input:\n{input}\n\n### Response:\n";
    t.response = "{output}";
  } else if (name == "llama2_chat") {
    // Meta's Llama-2 chat format (llama/generation.py chat_completion): B_INST "[INST]",
    // E_INST "[/INST]", B_SYS "<<SYS>>\n", E_SYS "\n<</SYS>>\n\n"; BOS before and EOS after each turn.
    t.user = "[INST] {content} [/INST]";
    t.system_user = "[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{content} [/INST]";
    t.assistant = "{content}";
    t.bos_each_turn = true;
  } else if (name == "none") {
  } else {
    FT_CHECK(false, "data.template: unknown template \"", name,
             "\" (built-in: alpaca, llama2_chat, none; or give an object with the template's fields)");
  }
  return t;
}

}  // namespace

Json PromptTemplate::to_json() const {
  return Json{{"name", name},         {"prompt", prompt},       {"prompt_with_input", prompt_with_input},
              {"response", response}, {"user", user},           {"system_user", system_user},
              {"assistant", assistant}, {"bos_each_turn", bos_each_turn}};
}

PromptTemplate resolve_template(const Json& spec, RecordFormat format) {
  if (spec.is_string()) {
    std::string name = spec.get<std::string>();
    if (name == "auto")
      name = format == RecordFormat::kAlpaca ? "alpaca" : format == RecordFormat::kChat ? "llama2_chat" : "none";
    return builtin(name);
  }
  FT_CHECK(spec.is_object(), "data.template: expected a template name or an object, got ", describe_json(spec));
  std::string base = "none";
  if (spec.contains("base")) {
    FT_CHECK(spec["base"].is_string(), "data.template.base: expected a template name");
    base = spec["base"].get<std::string>();
  }
  PromptTemplate t = builtin(base);
  t.name = "custom";
  for (auto it = spec.begin(); it != spec.end(); ++it) {
    const std::string& key = it.key();
    if (key == "base") continue;
    if (key == "bos_each_turn") {
      FT_CHECK(it.value().is_boolean(), "data.template.bos_each_turn: expected true or false");
      t.bos_each_turn = it.value().get<bool>();
      continue;
    }
    std::string* field = key == "prompt"              ? &t.prompt
                         : key == "prompt_with_input" ? &t.prompt_with_input
                         : key == "response"          ? &t.response
                         : key == "user"              ? &t.user
                         : key == "system_user"       ? &t.system_user
                         : key == "assistant"         ? &t.assistant
                                                      : nullptr;
    FT_CHECK(field != nullptr, "data.template: unknown field \"", key,
             "\" (fields: base, prompt, prompt_with_input, response, user, system_user, assistant, bos_each_turn)");
    FT_CHECK(it.value().is_string(), "data.template.", key, ": expected a string, got ", describe_json(it.value()));
    *field = it.value().get<std::string>();
  }
  return t;
}

std::string fill_template(const std::string& pattern, const std::map<std::string, std::string>& values,
                          const std::string& where) {
  std::string out;
  out.reserve(pattern.size() + 64);
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '{' && i + 1 < pattern.size() && pattern[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < pattern.size() && pattern[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const std::size_t close = pattern.find('}', i);
      FT_CHECK(close != std::string::npos, where, ": unclosed '{' in \"", pattern, "\" (write {{ for a literal brace)");
      const std::string name = pattern.substr(i + 1, close - i - 1);
      auto it = values.find(name);
      if (it == values.end()) {
        std::string known;
        for (const auto& [k, v] : values) known += (known.empty() ? "" : ", ") + ("{" + k + "}");
        FT_CHECK(false, where, ": unknown placeholder {", name, "} (available here: ", known, ")");
      }
      out += it->second;
      i = close;
    } else {
      out += c;
    }
  }
  return out;
}

std::vector<Segment> render_record(const PromptTemplate& t, const Record& record, RecordFormat format) {
  std::vector<Segment> segments;
  switch (format) {
    case RecordFormat::kAlpaca:
    case RecordFormat::kPromptCompletion: {
      const bool has_input = record.fields.count("input") && !record.fields.at("input").empty();
      const std::string& prompt = has_input && !t.prompt_with_input.empty() ? t.prompt_with_input : t.prompt;
      const char* prompt_key = has_input && !t.prompt_with_input.empty() ? "prompt_with_input" : "prompt";
      segments.push_back({fill_template(prompt, record.fields, str("data.template.", prompt_key)), false, true, false});
      segments.push_back({fill_template(t.response, record.fields, "data.template.response"), true, false, true});
      break;
    }
    case RecordFormat::kText:
      segments.push_back({record.fields.at("text"), true, true, true});
      break;
    case RecordFormat::kChat: {
      std::size_t i = 0;
      std::string system;
      bool has_system = false;
      if (record.messages[0].role == "system") {
        system = record.messages[0].content;
        has_system = true;
        i = 1;
      }
      for (bool first = true; i + 1 < record.messages.size(); i += 2, first = false) {
        const std::string& user = record.messages[i].content;
        const std::string& assistant = record.messages[i + 1].content;
        std::string prompt = first && has_system
                                 ? fill_template(t.system_user, {{"system", system}, {"content", user}}, "data.template.system_user")
                                 : fill_template(t.user, {{"content", user}}, "data.template.user");
        segments.push_back({std::move(prompt), false, first || t.bos_each_turn, false});
        segments.push_back({fill_template(t.assistant, {{"content", assistant}}, "data.template.assistant"), true, false, true});
      }
      break;
    }
  }
  return segments;
}

}  // namespace ft::data
