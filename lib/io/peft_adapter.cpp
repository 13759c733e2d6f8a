// PEFT adapter folders: config parsing with PEFT's defaults and refusals, tensor-name checks,
// and the writer (weights first, then the config, so a folder with a config is complete).
#include "io/peft_adapter.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <regex>
#include <set>

#include "util/error.h"
#include "util/file_util.h"

namespace ft::io {
namespace {

const char* const kLoraA = ".lora_A.weight";
const char* const kLoraB = ".lora_B.weight";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool present(const Json& json, const char* key) { return json.contains(key) && !json[key].is_null(); }

// An empty list / object counts as absent: PEFT writes {} for rank_pattern and alpha_pattern.
bool set_and_nonempty(const Json& json, const char* key) {
  if (!present(json, key)) return false;
  const Json& v = json[key];
  return !((v.is_array() || v.is_object()) && v.empty());
}

// A value in a message that adds its own parenthesis: strings quoted, other values described.
std::string shown(const Json& v) { return v.is_string() ? v.dump() : describe_json(v); }

// Writes an integral number as an integer (PEFT's files say "lora_alpha": 16, not 16.0).
Json number(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return static_cast<std::int64_t>(v);
  return v;
}

}  // namespace

const std::vector<std::string>& llama_linear_modules() {
  static const std::vector<std::string> names{"q_proj", "k_proj", "v_proj", "o_proj",
                                              "gate_proj", "up_proj", "down_proj"};
  return names;
}

bool LoraTargets::matches(const std::string& module) const {
  if (!regex.empty()) return std::regex_match(module, std::regex(regex));
  const std::string leaf = module.substr(module.rfind('.') + 1);
  if (all_linear()) {
    const auto& all = llama_linear_modules();
    return std::find(all.begin(), all.end(), leaf) != all.end();
  }
  for (const auto& name : names)
    if (module == name || ends_with(module, "." + name)) return true;
  return false;
}

std::string LoraTargets::describe() const {
  if (!regex.empty()) return "regex '" + regex + "'";
  std::string s;
  for (const auto& name : names) s += (s.empty() ? "" : ", ") + name;
  return s;
}

double PeftAdapterConfig::scale() const {
  return use_rslora ? lora_alpha / std::sqrt(static_cast<double>(r)) : lora_alpha / static_cast<double>(r);
}

Json PeftAdapterConfig::to_json() const {
  Json targets;
  if (!target_modules.regex.empty()) {
    targets = target_modules.regex;
  } else {
    targets = Json::array();
    for (const auto& name : target_modules.all_linear() ? llama_linear_modules() : target_modules.names)
      targets.push_back(name);
  }
  Json j;
  j["peft_type"] = "LORA";
  j["task_type"] = task_type;
  j["base_model_name_or_path"] = base_model_name_or_path;
  j["r"] = r;
  j["lora_alpha"] = number(lora_alpha);
  j["lora_dropout"] = number(lora_dropout);
  j["target_modules"] = targets;
  j["bias"] = "none";
  j["fan_in_fan_out"] = false;
  j["use_rslora"] = use_rslora;
  j["use_dora"] = false;
  j["modules_to_save"] = nullptr;
  j["inference_mode"] = true;
  return j;
}

// Before std::regex sees a pattern from a file: libstdc++ overflows a signed integer (undefined
// behaviour) on repetition counts like {99999999999999999999} and on back-reference numbers
// alike, and large counts blow the automaton up in time and memory. PEFT's target-module patterns are short and count little.
static void check_regex_bounds(const std::string& pattern, const std::string& source) {
  constexpr std::size_t kMaxLength = 1024;
  constexpr long kMaxCount = 1000;
  FT_CHECK(pattern.size() <= kMaxLength, source, ": target_modules: the regular expression has ", pattern.size(),
           " characters; at most ", kMaxLength, " are accepted");
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\') {
      // An escaped character ("\\{" included), or a back-reference: its number overflows alike.
      std::size_t digits = 0;
      while (i + 1 + digits < pattern.size() && pattern[i + 1 + digits] >= '0' && pattern[i + 1 + digits] <= '9') ++digits;
      FT_CHECK(digits <= 3, source, ": target_modules: a back-reference number in \"", pattern, "\" is too large");
      i += digits > 0 ? digits : 1;
      continue;
    }
    if (pattern[i] != '{') continue;
    std::size_t digits = 0;
    long value = 0;
    for (std::size_t k = i + 1; k < pattern.size() && pattern[k] != '}'; ++k) {
      if (pattern[k] >= '0' && pattern[k] <= '9') {
        if (++digits <= 6) value = value * 10 + (pattern[k] - '0');
        FT_CHECK(digits <= 4 && value <= kMaxCount, source, ": target_modules: a repetition count in \"", pattern,
                 "\" is above ", kMaxCount);
      } else {
        digits = 0;
        value = 0;
      }
    }
  }
}

PeftAdapterConfig parse_peft_adapter_config(const Json& json, const std::string& source) {
  FT_CHECK(json.is_object(), source, ": expected a JSON object, got ", describe_json(json));
  PeftAdapterConfig c;
  FT_CHECK(present(json, "peft_type"), source, ": missing key \"peft_type\" (expected \"LORA\")");
  FT_CHECK(json["peft_type"] == "LORA", source, ": peft_type: expected \"LORA\", got ",
           shown(json["peft_type"]), " (ft applies only LoRA adapters)");
  if (present(json, "r")) {
    const Json& v = json["r"];
    FT_CHECK(v.is_number_integer() && v.get<std::int64_t>() > 0, source, ": r: expected a positive integer, got ",
             describe_json(v));
    c.r = v.get<std::int64_t>();
  }
  if (present(json, "lora_alpha")) {
    const Json& v = json["lora_alpha"];
    FT_CHECK(v.is_number() && v.get<double>() > 0, source, ": lora_alpha: expected a positive number, got ",
             describe_json(v));
    c.lora_alpha = v.get<double>();
  }
  if (present(json, "lora_dropout")) {
    const Json& v = json["lora_dropout"];
    FT_CHECK(v.is_number() && v.get<double>() >= 0 && v.get<double>() < 1, source,
             ": lora_dropout: expected a number in [0, 1), got ", describe_json(v));
    c.lora_dropout = v.get<double>();
  }
  // What ft cannot apply: refuse rather than produce different outputs than PEFT would.
  FT_CHECK(!present(json, "use_dora") || json["use_dora"] == false, source,
           ": use_dora: DoRA adapters are not supported (expected false, got ", describe_json(json["use_dora"]), ")");
  FT_CHECK(!present(json, "bias") || json["bias"] == "none", source, ": bias: expected \"none\", got ",
           shown(json["bias"]), " (adapters that train biases are not supported)");
  FT_CHECK(!present(json, "fan_in_fan_out") || json["fan_in_fan_out"] == false, source,
           ": fan_in_fan_out: expected false, got ", describe_json(json["fan_in_fan_out"]),
           " (that is for GPT-2-style Conv1D layers, which LLaMA does not have)");
  FT_CHECK(!set_and_nonempty(json, "modules_to_save"), source, ": modules_to_save: expected null, got ",
           describe_json(json["modules_to_save"]), " (adapters carrying full copies of modules are not supported)");
  for (const char* key : {"rank_pattern", "alpha_pattern", "layers_to_transform", "exclude_modules", "target_parameters"})
    FT_CHECK(!set_and_nonempty(json, key), source, ": ", key, ": expected null or empty, got ", describe_json(json[key]),
             " (ft applies one rank and alpha to every targeted module)");
  FT_CHECK(!present(json, "lora_bias") || json["lora_bias"] == false, source,
           ": lora_bias: expected false, got ", describe_json(json["lora_bias"]));
  // LoRA variants PEFT saves under peft_type LORA that change what the adapter computes: an
  // activated LoRA (only after its invocation tokens), replicated layers, block-diagonal, KaSA,
  // MonteCLoRA, Arrow routing, trainable token rows. Found by the interop tests: without these
  // checks the first two loaded and gave other logits than PEFT.
  for (const char* key : {"alora_invocation_tokens", "layer_replication", "trainable_token_indices", "kasa_config",
                          "monteclora_config", "arrow_config"}) {
    FT_CHECK(!set_and_nonempty(json, key), source, ": ", key, ": expected null or empty, got ", describe_json(json[key]),
             " (this LoRA variant is not supported: ft applies plain LoRA to every targeted linear layer)");
  }
  FT_CHECK(!present(json, "use_bdlora") || json["use_bdlora"] == false, source, ": use_bdlora: expected null or false, got ",
           describe_json(json["use_bdlora"]), " (block-diagonal LoRA is not supported)");
  FT_CHECK(present(json, "target_modules"), source,
           ": missing key \"target_modules\" (expected a list of module names, \"all-linear\" or a regex)");
  const Json& targets = json["target_modules"];
  if (targets.is_string()) {
    const std::string s = targets.get<std::string>();
    if (s == "all-linear") {
      c.target_modules.names = {"all-linear"};
    } else {
      check_regex_bounds(s, source);
      try {
        std::regex check(s);
      } catch (const std::regex_error& e) {
        FT_CHECK(false, source, ": target_modules: \"", s, "\" is not a valid regular expression: ", e.what());
      }
      c.target_modules.regex = s;
    }
  } else {
    FT_CHECK(targets.is_array() && !targets.empty(), source,
             ": target_modules: expected a non-empty list of module names or a string, got ", describe_json(targets));
    for (const auto& t : targets) {
      FT_CHECK(t.is_string() && !t.get<std::string>().empty(), source,
               ": target_modules: expected module names (strings), got ", describe_json(t));
      c.target_modules.names.push_back(t.get<std::string>());
    }
  }
  if (present(json, "use_rslora")) {
    FT_CHECK(json["use_rslora"].is_boolean(), source, ": use_rslora: expected true or false, got ",
             describe_json(json["use_rslora"]));
    c.use_rslora = json["use_rslora"].get<bool>();
  }
  if (present(json, "base_model_name_or_path")) {
    FT_CHECK(json["base_model_name_or_path"].is_string(), source, ": base_model_name_or_path: expected a string, got ",
             describe_json(json["base_model_name_or_path"]));
    c.base_model_name_or_path = json["base_model_name_or_path"].get<std::string>();
  }
  if (present(json, "task_type") && json["task_type"].is_string()) c.task_type = json["task_type"].get<std::string>();

  return c;
}

PeftAdapterConfig read_peft_adapter_config(const std::string& dir) {
  const std::string path = join_path(dir, kAdapterConfigFile);
  FT_CHECK(is_directory(dir), dir, ": not found or not a folder (expected a PEFT adapter folder with ",
           kAdapterConfigFile, " and ", kAdapterWeightsFile, ")");
  FT_CHECK(file_exists(path), path, ": not found (", dir, " is not a PEFT adapter folder)");
  return parse_peft_adapter_config(parse_json_file(path), path);
}

PeftAdapter read_peft_adapter(const std::string& dir) {
  PeftAdapter adapter;
  adapter.config = read_peft_adapter_config(dir);
  adapter.weights_path = join_path(dir, kAdapterWeightsFile);
  const std::string& path = adapter.weights_path;
  FT_CHECK(file_exists(path), path, ": not found",
           file_exists(join_path(dir, "adapter_model.bin"))
               ? " (this adapter is saved as adapter_model.bin, a pickle; save it with safe_serialization=True)"
               : "");
  SafetensorsReader reader(path);
  std::set<std::string> seen;
  const std::string prefix = kPeftKeyPrefix;
  for (const auto& info : reader.tensors()) {
    const std::string& key = info.name;
    std::string name = key.compare(0, prefix.size(), prefix) == 0 ? key.substr(prefix.size()) : key;
    FT_CHECK(key.find("lora_magnitude_vector") == std::string::npos, path, ": tensor '", key,
             "' is a DoRA magnitude; DoRA adapters are not supported");
    FT_CHECK(key.find("lora_embedding_") == std::string::npos, path, ": tensor '", key,
             "' is an embedding LoRA weight; only LoRA on linear layers is supported");
    if (!ends_with(name, kLoraA) && !ends_with(name, kLoraB)) {
      const bool named = name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
      FT_CHECK(!named, path, ": tensor '", key,
               "' carries an adapter name; expected PEFT's saved form, which ends in .lora_A.weight or "
               ".lora_B.weight (adapter name removed)");
      FT_CHECK(false, path, ": tensor '", key,
               "' is not a LoRA weight (expected names ending in .lora_A.weight or .lora_B.weight)");
    }
    FT_CHECK(seen.insert(name).second, path, ": tensor '", name, "' appears twice (with and without the '",
             prefix, "' prefix)");
    FT_CHECK(info.dtype->scalar && at::isFloatingType(*info.dtype->scalar), path, ": tensor '", key, "' has dtype ",
             info.dtype->name, "; expected F32, F16 or BF16");
    FT_CHECK(info.shape.size() == 2, path, ": tensor '", key, "' has ", info.shape.size(),
             " dimensions; expected a matrix");
    adapter.tensors.emplace_back(name, reader.load(key).to(torch::kFloat));
  }
  FT_CHECK(!adapter.tensors.empty(), path, ": holds no tensors (expected lora_A / lora_B weights)");
  return adapter;
}

void write_peft_adapter(const std::string& dir, const PeftAdapterConfig& config, const NamedTensors& tensors) {
  NamedTensors prefixed;
  prefixed.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    FT_ASSERT(ends_with(name, kLoraA) || ends_with(name, kLoraB), "not a LoRA tensor: ", name);
    prefixed.emplace_back(kPeftKeyPrefix + name, tensor.detach().to(torch::kFloat));
  }
  make_directories(dir);
  write_safetensors(join_path(dir, kAdapterWeightsFile), prefixed);
  write_file_atomic(join_path(dir, kAdapterConfigFile), config.to_json().dump(2) + "\n");
}

}  // namespace ft::io
