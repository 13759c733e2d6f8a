// A declarative schema for JSON configs: every key with its type, default (or "required"),
// allowed range or choices and a one-line description. Validation walks the user's JSON against
// it and collects every problem at once, each with the key's full path, what was expected and
// what was found, and a "did you mean" for unknown keys. The schema also resolves defaults, so
// the JSON written to RUN_DIR/config.json holds every key as the run used it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "util/json.h"

namespace ft::config {

enum class Kind { kString, kInteger, kNumber, kBool, kStringList, kStringOrStringList, kStringOrObject };

struct KeySpec {
  std::string path;  // "train.lr"
  Kind kind = Kind::kString;
  std::optional<Json> default_value;  // nullopt = required
  std::vector<std::string> choices;   // allowed strings, for enums
  std::optional<double> min, max;     // inclusive bounds for numbers
  bool min_exclusive = false;
  std::string doc;
  std::vector<std::string> aliases;  // names other tools use for this key, for "did you mean"
};

class Schema {
 public:
  // `optional_sections` may be absent altogether (e.g. "lora": no section = full fine-tune);
  // when present, their keys' defaults apply.
  Schema(std::vector<KeySpec> keys, std::vector<std::string> optional_sections);

  // Validates `config` (after overrides) and returns it with every default filled in. Throws one
  // ft::Error listing every problem, prefixed with `source`.
  Json resolve(const Json& config, const std::string& source) const;

  // Applies "key.path=value" to `config`. The value is read as JSON when it parses as JSON
  // (numbers, true/false, lists) and as a plain string otherwise, or when the key is a string.
  void apply_override(Json& config, const std::string& assignment) const;

  const KeySpec* find(const std::string& path) const;
  const std::vector<KeySpec>& keys() const { return keys_; }
  // The known key closest to `path` (edit distance), or "" when nothing is close.
  std::string suggest(const std::string& path) const;

 private:
  bool is_section(const std::string& path) const;
  void check_value(const KeySpec& spec, const Json& value, std::vector<std::string>& errors) const;

  std::vector<KeySpec> keys_;
  std::vector<std::string> optional_sections_;
};

std::size_t edit_distance(const std::string& a, const std::string& b);

// config["a"]["b"]["c"] for path "a.b.c", or nullptr where a part is missing.
const Json* find_path(const Json& config, const std::string& path);

}  // namespace ft::config
