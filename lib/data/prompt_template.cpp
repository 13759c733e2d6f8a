#include "data/prompt_template.h"

#include "data/tokenizer.h"
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
  } else if (name == "llama3") {
    // The chat_template of meta-llama/Meta-Llama-3-8B-Instruct: bos_token, then per message
    // '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>'.
    // BOS is the tokenizer's (<|begin_of_text|>); a turn ends with <|eot_id|>, not EOS.
    const std::string header_user = "<|start_header_id|>user<|end_header_id|>\n\n";
    const std::string header_assistant = "<|start_header_id|>assistant<|end_header_id|>\n\n";
    t.user = header_user + "{content}<|eot_id|>" + header_assistant;
    t.system_user = "<|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>" + t.user;
    t.assistant = "{content}<|eot_id|>";
    t.bos_each_turn = false;
    t.eos_after_response = false;
    t.trim_content = true;
    t.stop = "<|eot_id|>";
  } else if (name == "chatml") {
    // ChatML as in Qwen2/Qwen2.5's chat_template: '<|im_start|>' + role + '\n' + content +
    // '<|im_end|>' + '\n' per message. Qwen has no BOS; a turn ends with <|im_end|>.
    t.user = "<|im_start|>user\n{content}<|im_end|>\n<|im_start|>assistant\n";
    t.system_user = "<|im_start|>system\n{system}<|im_end|>\n" + t.user;
    t.assistant = "{content}<|im_end|>\n";
    t.bos_each_turn = false;
    t.eos_after_response = false;
    t.stop = "<|im_end|>";
  } else if (name == "none") {
  } else {
    FT_CHECK(false, "data.template: unknown template \"", name, "\" (built-in: ", builtin_template_names(),
             "; or give an object with the template's fields)");
  }
  return t;
}

// The chat format a tokenizer's special tokens announce.
std::string chat_template_for(const Tokenizer* tokenizer) {
  if (tokenizer != nullptr) {
    if (tokenizer->special_token_id("<|start_header_id|>") >= 0 && tokenizer->special_token_id("<|eot_id|>") >= 0)
      return "llama3";
    if (tokenizer->special_token_id("<|im_start|>") >= 0 && tokenizer->special_token_id("<|im_end|>") >= 0)
      return "chatml";
  }
  return "llama2_chat";
}

std::string trimmed(const std::string& s) {
  const char* space = " \t\n\r\f\v";
  const std::size_t begin = s.find_first_not_of(space);
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(space) - begin + 1);
}

}  // namespace

const char* builtin_template_names() { return "alpaca, llama2_chat, llama3, chatml, none"; }

Json PromptTemplate::to_json() const {
  Json out{{"name", name},         {"prompt", prompt},       {"prompt_with_input", prompt_with_input},
           {"response", response}, {"user", user},           {"system_user", system_user},
           {"assistant", assistant}, {"bos_each_turn", bos_each_turn}};
  // Written only when not the default, so that the data-settings fingerprint of token files
  // made before these fields existed stays the same.
  if (!eos_after_response) out["eos_after_response"] = false;
  if (trim_content) out["trim_content"] = true;
  if (!default_system.empty()) out["default_system"] = default_system;
  if (!stop.empty()) out["stop"] = stop;
  return out;
}

PromptTemplate resolve_template(const Json& spec, RecordFormat format, const Tokenizer* tokenizer) {
  if (spec.is_string()) {
    std::string name = spec.get<std::string>();
    if (name == "auto")
      name = format == RecordFormat::kAlpaca ? "alpaca" : is_conversation(format) ? chat_template_for(tokenizer) : "none";
    return builtin(name);
  }
  FT_CHECK(spec.is_object(), "data.template: expected a template name or an object, got ", describe_json(spec));
  std::string base = "none";
  if (spec.contains("base")) {
    FT_CHECK(spec["base"].is_string(), "data.template.base: expected a template name");
    base = spec["base"].get<std::string>();
    if (base == "auto") base = is_conversation(format) ? chat_template_for(tokenizer) : format == RecordFormat::kAlpaca ? "alpaca" : "none";
  }
  PromptTemplate t = builtin(base);
  t.name = "custom";
  for (auto it = spec.begin(); it != spec.end(); ++it) {
    const std::string& key = it.key();
    if (key == "base") continue;
    bool* flag = key == "bos_each_turn"        ? &t.bos_each_turn
                 : key == "eos_after_response" ? &t.eos_after_response
                 : key == "trim_content"       ? &t.trim_content
                                               : nullptr;
    if (flag != nullptr) {
      FT_CHECK(it.value().is_boolean(), "data.template.", key, ": expected true or false, got ", describe_json(it.value()));
      *flag = it.value().get<bool>();
      continue;
    }
    std::string* field = key == "prompt"              ? &t.prompt
                         : key == "prompt_with_input" ? &t.prompt_with_input
                         : key == "response"          ? &t.response
                         : key == "user"              ? &t.user
                         : key == "system_user"       ? &t.system_user
                         : key == "assistant"         ? &t.assistant
                         : key == "default_system"    ? &t.default_system
                         : key == "stop"              ? &t.stop
                                                      : nullptr;
    FT_CHECK(field != nullptr, "data.template: unknown field \"", key,
             "\" (fields: base, prompt, prompt_with_input, response, user, system_user, assistant, bos_each_turn, "
             "eos_after_response, trim_content, default_system, stop)");
    FT_CHECK(it.value().is_string(), "data.template.", key, ": expected a string, got ", describe_json(it.value()));
    *field = it.value().get<std::string>();
  }
  return t;
}

std::string fill_template(const std::string& pattern, const std::map<std::string, std::string>& values,
                          const std::string& where, std::vector<std::pair<std::size_t, std::size_t>>* template_text) {
  std::string out;
  out.reserve(pattern.size() + 64);
  std::size_t literal_begin = 0;  // where the current run of the pattern's own text began in `out`
  auto close_literal = [&] {
    if (template_text != nullptr && out.size() > literal_begin) template_text->emplace_back(literal_begin, out.size());
  };
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
      close_literal();
      out += it->second;
      literal_begin = out.size();
      i = close;
    } else {
      out += c;
    }
  }
  close_literal();
  return out;
}

std::vector<Segment> render_record(const PromptTemplate& t, const Record& record, RecordFormat format) {
  std::vector<Segment> segments;
  auto add = [&](const std::string& pattern, const std::map<std::string, std::string>& values, const std::string& where,
                 bool target, bool bos, bool eos) {
    Segment s;
    s.target = target;
    s.bos = bos;
    s.eos = eos;
    s.text = fill_template(pattern, values, where, &s.template_text);
    segments.push_back(std::move(s));
  };
  switch (format) {
    case RecordFormat::kAlpaca:
    case RecordFormat::kPromptCompletion: {
      const bool has_input = record.fields.count("input") && !record.fields.at("input").empty();
      const std::string& prompt = has_input && !t.prompt_with_input.empty() ? t.prompt_with_input : t.prompt;
      const char* prompt_key = has_input && !t.prompt_with_input.empty() ? "prompt_with_input" : "prompt";
      add(prompt, record.fields, str("data.template.", prompt_key), false, true, false);
      add(t.response, record.fields, "data.template.response", true, false, t.eos_after_response);
      break;
    }
    case RecordFormat::kText:
      segments.push_back({record.fields.at("text"), true, true, true, {}});
      break;
    case RecordFormat::kChat:
    case RecordFormat::kShareGpt: {
      auto content = [&](const std::string& s) { return t.trim_content ? trimmed(s) : s; };
      std::size_t i = 0;
      std::string system = t.default_system;
      if (record.messages[0].role == "system") {
        system = record.messages[0].content;
        i = 1;
      }
      system = content(system);
      const bool has_system = !system.empty() || record.messages[0].role == "system";
      for (bool first = true; i + 1 < record.messages.size(); i += 2, first = false) {
        const std::string user = content(record.messages[i].content);
        if (first && has_system)
          add(t.system_user, {{"system", system}, {"content", user}}, "data.template.system_user", false, true, false);
        else
          add(t.user, {{"content", user}}, "data.template.user", false, first || t.bos_each_turn, false);
        add(t.assistant, {{"content", content(record.messages[i + 1].content)}}, "data.template.assistant", true, false,
            t.eos_after_response);
      }
      break;
    }
  }
  return segments;
}

}  // namespace ft::data
