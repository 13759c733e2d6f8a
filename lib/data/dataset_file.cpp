#include "data/dataset_file.h"

#include "util/error.h"

namespace ft::data {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Line number (1-based) of `offset`, counted incrementally from a previous position.
struct LineCounter {
  std::string_view text;
  std::size_t pos = 0;
  std::int64_t line = 1;
  std::int64_t at(std::size_t offset) {
    for (; pos < offset && pos < text.size(); ++pos)
      if (text[pos] == '\n') ++line;
    return line;
  }
};

std::vector<RawRecord> split_json_lines(std::string_view contents, const std::string& path) {
  std::vector<RawRecord> out;
  std::size_t start = 0;
  std::int64_t line = 1;
  while (start <= contents.size()) {
    std::size_t end = contents.find('\n', start);
    if (end == std::string_view::npos) end = contents.size();
    std::string_view text = contents.substr(start, end - start);
    std::size_t first = 0, last = text.size();
    while (first < last && is_space(text[first])) ++first;
    while (last > first && is_space(text[last - 1])) --last;
    if (last > first) out.push_back({path + ":" + std::to_string(line), text.substr(first, last - first)});
    ++line;
    start = end + 1;
  }
  return out;
}

std::vector<RawRecord> split_json_array(std::string_view contents, std::size_t open, const std::string& path) {
  std::vector<RawRecord> out;
  LineCounter lines{contents};
  int depth = 0;
  bool in_string = false, escaped = false;
  std::size_t element_start = std::string_view::npos;
  auto finish_element = [&](std::size_t end) {
    if (element_start == std::string_view::npos) return;
    std::size_t last = end;
    while (last > element_start && is_space(contents[last - 1])) --last;
    out.push_back({path + ":" + std::to_string(lines.at(element_start)),
                   contents.substr(element_start, last - element_start)});
    element_start = std::string_view::npos;
  };
  for (std::size_t i = open + 1; i < contents.size(); ++i) {
    const char c = contents[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (depth == 0) {
      if (c == ']') {
        finish_element(i);
        for (std::size_t j = i + 1; j < contents.size(); ++j)
          FT_CHECK(is_space(contents[j]), path, ":", lines.at(j), ": unexpected text after the closing ']' of the array");
        return out;
      }
      if (c == ',') {
        FT_CHECK(element_start != std::string_view::npos, path, ":", lines.at(i), ": empty element in the array");
        finish_element(i);
        continue;
      }
      if (is_space(c)) continue;
      if (element_start == std::string_view::npos) element_start = i;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && depth > 0) --depth;
  }
  FT_CHECK(false, path, ": the JSON array is not closed (a ']' is missing at the end of the file)");
  return out;
}

}  // namespace

std::vector<RawRecord> split_records(std::string_view contents, const std::string& path) {
  // A UTF-8 byte-order mark is not data.
  if (contents.substr(0, 3) == "\xEF\xBB\xBF") contents.remove_prefix(3);
  std::size_t first = 0;
  while (first < contents.size() && is_space(contents[first])) ++first;
  FT_CHECK(first < contents.size(), path, ": the dataset is empty (expected a JSON array or JSON Lines)");
  std::vector<RawRecord> records = contents[first] == '['
                                       ? split_json_array(contents, first, path)
                                       : split_json_lines(contents, path);
  FT_CHECK(!records.empty(), path, ": the dataset has no records");
  return records;
}

}  // namespace ft::data
