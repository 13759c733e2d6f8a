// The ranks' output as ft_launch passes it on: every line of a rank's stdout and stderr with the
// prefix "[rank R] ", whole lines only, so that lines of different ranks never interleave.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

namespace ft::launch {

// Splits one stream into prefixed lines.
class LinePrefixer {
 public:
  explicit LinePrefixer(std::string prefix) : prefix_(std::move(prefix)) {}

  // The lines completed by `data`, each prefixed; "" while no line is complete.
  std::string feed(const char* data, std::size_t n);
  // The unfinished last line, prefixed and ended with a newline; "" when there is none.
  std::string finish();

 private:
  std::string prefix_;
  std::string partial_;
};

// "[rank R] "
std::string rank_prefix(int rank);

// Writes all of `text` to `fd` (one write when the pipe takes it); drops it when fd is gone.
void write_all(int fd, const std::string& text);

}  // namespace ft::launch
