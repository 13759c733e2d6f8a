// JSON parsing for files users hand us (configs, HF config.json, safetensors headers, dataset
// records): errors name the file and the line/column, and nesting deeper than a caller-set
// limit is refused before nlohmann's recursive parser could overflow the stack.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ft {

using Json = nlohmann::json;

// Parses `text` (the contents of `source`, a file name or "file:line") or throws ft::Error
// "SOURCE: invalid JSON at line L, column C: ...".
Json parse_json(std::string_view text, const std::string& source, int max_depth = 64);
Json parse_json_file(const std::string& path, int max_depth = 64);

// Deepest [ or { nesting in `text`, ignoring brackets inside strings; stops counting once
// max_depth is exceeded.
int json_nesting_depth(std::string_view text, int max_depth);

// A short, human-readable description of a JSON value's type and value for error messages:
// `"2e-5x"` (a string), `-1` (a number), `an object`.
std::string describe_json(const Json& value);

}  // namespace ft
