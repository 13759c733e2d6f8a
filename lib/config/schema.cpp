#include "config/schema.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "util/error.h"

namespace ft::config {

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

Schema::Schema(std::vector<KeySpec> keys, std::vector<std::string> optional_sections)
    : keys_(std::move(keys)), optional_sections_(std::move(optional_sections)) {}

const KeySpec* Schema::find(const std::string& path) const {
  for (const auto& k : keys_)
    if (k.path == path) return &k;
  return nullptr;
}

bool Schema::is_section(const std::string& path) const {
  const std::string prefix = path + ".";
  for (const auto& k : keys_)
    if (k.path.compare(0, prefix.size(), prefix) == 0) return true;
  return false;
}

namespace {

// "learning_rate" -> "lr": the initials of underscore-separated words.
std::string initials(const std::string& name) {
  std::string out;
  bool start = true;
  for (char c : name) {
    if (c == '_') {
      start = true;
    } else if (start) {
      out += c;
      start = false;
    }
  }
  return out;
}

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kString: return "a string";
    case Kind::kInteger: return "an integer";
    case Kind::kNumber: return "a number";
    case Kind::kBool: return "true or false";
    case Kind::kStringList: return "a list of strings";
    case Kind::kStringOrStringList: return "a string or a list of strings";
    case Kind::kStringOrObject: return "a string or an object";
  }
  return "";
}

std::string format_bound(double v) {
  std::string s = ft::str(v);
  return s;
}

std::string expectation(const KeySpec& spec) {
  std::string out = kind_name(spec.kind);
  if (!spec.choices.empty()) {
    out = "one of ";
    for (std::size_t i = 0; i < spec.choices.size(); ++i)
      out += (i ? ", " : "") + ("\"" + spec.choices[i] + "\"");
  }
  if (spec.min && spec.max) {
    out += ft::str(" in ", spec.min_exclusive ? "(" : "[", format_bound(*spec.min), ", ", format_bound(*spec.max), "]");
  } else if (spec.min) {
    out += ft::str(spec.min_exclusive ? " > " : " >= ", format_bound(*spec.min));
  } else if (spec.max) {
    out += ft::str(" <= ", format_bound(*spec.max));
  }
  return out;
}

void walk(const Json& object, const std::string& prefix, std::vector<std::pair<std::string, const Json*>>& out) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string path = prefix.empty() ? it.key() : prefix + "." + it.key();
    out.emplace_back(path, &it.value());
  }
}

// Sets config[a][b][c] = value for path "a.b.c", creating objects on the way.
void set_path(Json& config, const std::string& path, const Json& value) {
  Json* node = &config;
  std::size_t start = 0;
  while (true) {
    const auto dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (dot == std::string::npos) {
      FT_CHECK(node->is_object(), "--set ", path, ": the config is not a JSON object");
      (*node)[part] = value;
      return;
    }
    FT_CHECK(node->is_object(), "--set ", path, ": the config is not a JSON object");
    if (!node->contains(part) || !(*node)[part].is_object()) (*node)[part] = Json::object();
    node = &(*node)[part];
    start = dot + 1;
  }
}

}  // namespace

const Json* find_path(const Json& config, const std::string& path) {
  const Json* node = &config;
  std::size_t start = 0;
  while (true) {
    const auto dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!node->is_object() || !node->contains(part)) return nullptr;
    node = &(*node)[part];
    if (dot == std::string::npos) return node;
    start = dot + 1;
  }
}

std::string Schema::suggest(const std::string& path) const {
  // Compare against full paths and against leaf names within the same section, so that both
  // "train.learning_rate" -> "train.lr" style typos and "trian.lr" are caught.
  std::string best;
  std::size_t best_distance = std::string::npos;
  const auto dot = path.rfind('.');
  const std::string section = dot == std::string::npos ? "" : path.substr(0, dot);
  const std::string leaf = dot == std::string::npos ? path : path.substr(dot + 1);
  auto consider = [&](const std::string& candidate, std::size_t distance, std::size_t length) {
    if (distance <= std::max<std::size_t>(2, length / 3) && distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  };
  for (const auto& k : keys_) {
    consider(k.path, edit_distance(path, k.path), k.path.size());
    const auto first_dot = k.path.find('.');
    if (first_dot != std::string::npos) {  // a misspelt section name: "trian" -> "train"
      const std::string k_section = k.path.substr(0, first_dot);
      consider(k_section, edit_distance(path, k_section), k_section.size());
    }
    const auto kdot = k.path.rfind('.');
    if (kdot != std::string::npos && k.path.substr(0, kdot) == section) {
      const std::string kleaf = k.path.substr(kdot + 1);
      // Shared-word matches ("learning_rate" vs "lr" share nothing; "lr_schedule" vs "schedule" do).
      std::size_t d = edit_distance(leaf, kleaf);
      if (kleaf.find(leaf) != std::string::npos || leaf.find(kleaf) != std::string::npos) d = std::min<std::size_t>(d, 2);
      if (initials(leaf) == kleaf || initials(kleaf) == leaf) d = 0;
      for (const auto& alias : k.aliases)
        if (alias == leaf) d = 0;
      consider(k.path, d, kleaf.size());
    }
  }
  return best;
}

void Schema::check_value(const KeySpec& spec, const Json& v, std::vector<std::string>& errors) const {
  auto fail = [&] { errors.push_back(ft::str(spec.path, ": expected ", expectation(spec), ", got ", describe_json(v))); };
  switch (spec.kind) {
    case Kind::kString:
      if (!v.is_string()) return fail();
      if (!spec.choices.empty() &&
          std::find(spec.choices.begin(), spec.choices.end(), v.get<std::string>()) == spec.choices.end())
        return fail();
      return;
    case Kind::kBool:
      if (!v.is_boolean()) return fail();
      return;
    case Kind::kInteger:
      if (!v.is_number_integer()) return fail();
      break;
    case Kind::kNumber:
      if (!v.is_number()) return fail();
      break;
    case Kind::kStringList:
    case Kind::kStringOrStringList:
      if (spec.kind == Kind::kStringOrStringList && v.is_string()) {
        if (!spec.choices.empty() &&
            std::find(spec.choices.begin(), spec.choices.end(), v.get<std::string>()) == spec.choices.end())
          errors.push_back(ft::str(spec.path, ": expected a list of strings or one of \"", spec.choices[0], "\", got ",
                                   describe_json(v)));
        return;
      }
      if (!v.is_array()) return fail();
      for (const Json& item : v)
        if (!item.is_string()) return fail();
      return;
    case Kind::kStringOrObject:
      if (!v.is_string() && !v.is_object()) return fail();
      return;
  }
  // Numeric range.
  const double x = v.get<double>();
  if (!std::isfinite(x)) return fail();
  if (spec.min && (spec.min_exclusive ? x <= *spec.min : x < *spec.min)) return fail();
  if (spec.max && x > *spec.max) return fail();
}

Json Schema::resolve(const Json& config, const std::string& source) const {
  std::vector<std::string> errors;
  FT_CHECK(config.is_object(), source, ": expected a JSON object at the top level, got ", describe_json(config));

  // Unknown keys, depth first.
  std::vector<std::pair<std::string, const Json*>> pending;
  walk(config, "", pending);
  while (!pending.empty()) {
    auto [path, value] = pending.back();
    pending.pop_back();
    const KeySpec* spec = find(path);
    if (spec != nullptr) continue;
    if (is_section(path)) {
      if (!value->is_object()) {
        errors.push_back(ft::str(path, ": expected a section (an object), got ", describe_json(*value)));
      } else {
        walk(*value, path, pending);
      }
      continue;
    }
    std::string message = "unknown key " + path;
    const std::string hint = suggest(path);
    if (!hint.empty()) message += ", did you mean " + hint + "?";
    errors.push_back(message);
  }

  Json resolved = Json::object();
  for (const KeySpec& spec : keys_) {
    const auto dot = spec.path.find('.');
    const std::string section = dot == std::string::npos ? "" : spec.path.substr(0, dot);
    const bool optional_section =
        std::find(optional_sections_.begin(), optional_sections_.end(), section) != optional_sections_.end();
    if (optional_section && find_path(config, section) == nullptr) continue;
    const Json* value = find_path(config, spec.path);
    if (value == nullptr || value->is_null()) {
      if (!spec.default_value) {
        errors.push_back(ft::str("missing required key ", spec.path, " (", spec.doc, ")"));
        continue;
      }
      set_path(resolved, spec.path, *spec.default_value);
      continue;
    }
    check_value(spec, *value, errors);
    set_path(resolved, spec.path, *value);
  }
  if (!errors.empty()) {
    std::sort(errors.begin(), errors.end());
    std::string message = ft::str(source, ": ", errors.size(), errors.size() == 1 ? " error" : " errors", " in the config:");
    for (const auto& e : errors) message += "\n  " + e;
    throw Error(message);
  }
  return resolved;
}

void Schema::apply_override(Json& config, const std::string& assignment) const {
  const auto eq = assignment.find('=');
  FT_CHECK(eq != std::string::npos && eq > 0, "--set ", assignment, ": expected key.path=value");
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  const KeySpec* spec = find(path);
  if (spec == nullptr) {
    const std::string hint = suggest(path);
    FT_CHECK(false, "--set ", assignment, ": unknown key ", path, hint.empty() ? "" : ", did you mean " + hint + "?");
  }
  // VALUE is JSON (a number, true, a list, an object, a "quoted string"); text that is not JSON
  // is a string: any text for a string key, a plain word (no spaces, commas, quotes or brackets)
  // for the others, so that a list or object with a typo is not taken for a string.
  Json value;
  std::string json_error;
  try {
    value = Json::parse(text);
  } catch (const Json::exception& e) {
    json_error = e.what();
  }
  if (spec->kind == Kind::kString && !value.is_string()) {
    value = text;
  } else if (!json_error.empty()) {
    const bool plain_word = !text.empty() && text.find_first_of(" \t\n[]{}\",") == std::string::npos;
    FT_CHECK(plain_word, "--set ", path, "=", text, ": the value '", text, "' is neither JSON nor a plain word (",
             json_error, "). Write lists and objects as JSON and quote the whole argument for the shell, e.g. --set '",
             path, "=[\"q_proj\",\"v_proj\"]'; a string with spaces or commas as \"...\"");
    value = text;  // validation then says what was expected
  }
  if (config.is_null()) config = Json::object();
  set_path(config, path, value);
}

}  // namespace ft::config
