#include "util/json.h"

#include "util/error.h"
#include "util/file_util.h"

namespace ft {

int json_nesting_depth(std::string_view text, int max_depth) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > max_depth) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

namespace {

// Line and column (1-based) of a byte offset, for parse error messages.
std::pair<std::size_t, std::size_t> line_and_column(std::string_view text, std::size_t offset) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

}  // namespace

Json parse_json(std::string_view text, const std::string& source, int max_depth) {
  int depth = json_nesting_depth(text, max_depth);
  FT_CHECK(depth <= max_depth, source, ": JSON nested more than ", max_depth, " levels deep");
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    auto [line, column] = line_and_column(text, e.byte == 0 ? 0 : e.byte - 1);
    std::string what = e.what();
    // nlohmann's message starts with "[json.exception.parse_error.101] parse error at line..."
    auto colon = what.find(": ");
    std::string detail = colon == std::string::npos ? what : what.substr(colon + 2);
    throw Error(str(source, ": invalid JSON at line ", line, ", column ", column, ": ", detail));
  } catch (const Json::exception& e) {
    // e.g. out_of_range.406 for a number too large for a double (found by fuzzing).
    throw Error(str(source, ": invalid JSON: ", e.what()));
  }
}

Json parse_json_file(const std::string& path, int max_depth) {
  return parse_json(read_file(path), path, max_depth);
}

std::string describe_json(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::boolean: return value.get<bool>() ? "true" : "false";
    case Json::value_t::string: {
      std::string s = value.dump();
      if (s.size() > 60) s = s.substr(0, 57) + "...\"";
      return s + " (a string)";
    }
    default: return value.dump();
  }
}

}  // namespace ft
