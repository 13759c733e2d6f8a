// Splits a dataset file into its records without parsing them: a JSON array (`[{...}, {...}]`)
// or JSON Lines (one object per non-empty line). Each record keeps its location ("file:line") so
// that every later error — malformed JSON, a missing field, invalid UTF-8 — names where it is.
// Splitting scans brackets and strings only, so one bad record does not hide the others.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ft::data {

struct RawRecord {
  std::string location;   // "path:line" of the record's first character
  std::string_view text;  // the record's JSON text, a view into the file contents
};

// `contents` must outlive the returned views. Throws ft::Error naming `path` for an empty file,
// an unterminated array, or text outside the array.
std::vector<RawRecord> split_records(std::string_view contents, const std::string& path);

}  // namespace ft::data
