// The rank-0 progress line: step/total, loss, tokens/s, elapsed and ETA. On a terminal it
// redraws one line in place; otherwise (a log file, a CI job) it prints plain lines.
#pragma once

#include <cstdint>
#include <string>

namespace ft::train {

class Progress {
 public:
  Progress(std::int64_t total_steps, bool enabled);
  ~Progress();
  void update(std::int64_t step, double loss, double tokens_per_s, double elapsed_s);
  // A message that must not be overwritten (an evaluation result, a warning).
  void print(const std::string& line);
  void finish();

 private:
  std::int64_t total_;
  bool enabled_;
  bool tty_;
  bool line_open_ = false;
};

std::string format_duration(double seconds);  // "1:02:03" or "02:03"

}  // namespace ft::train
