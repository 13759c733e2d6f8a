#include "train/progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace ft::train {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long s = static_cast<long>(seconds + 0.5);
  char buffer[32];
  if (s >= 3600) std::snprintf(buffer, sizeof(buffer), "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  else std::snprintf(buffer, sizeof(buffer), "%02ld:%02ld", s / 60, s % 60);
  return buffer;
}

Progress::Progress(std::int64_t total_steps, bool enabled)
    : total_(total_steps), enabled_(enabled), tty_(::isatty(STDERR_FILENO) == 1) {}

Progress::~Progress() { finish(); }

void Progress::update(std::int64_t step, double loss, double tokens_per_s, double elapsed_s) {
  if (!enabled_) return;
  const double eta = step > 0 ? elapsed_s / step * (total_ - step) : NAN;
  char line[256];
  std::snprintf(line, sizeof(line), "step %lld/%lld | loss %.4f | %.0f tokens/s | %s elapsed | ETA %s",
                static_cast<long long>(step), static_cast<long long>(total_), loss, tokens_per_s,
                format_duration(elapsed_s).c_str(), format_duration(eta).c_str());
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", line);
    line_open_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line);
  }
  std::fflush(stderr);
}

void Progress::print(const std::string& text) {
  if (!enabled_) return;
  if (line_open_) std::fprintf(stderr, "\r\033[K");
  std::fprintf(stderr, "%s\n", text.c_str());
  line_open_ = false;
  std::fflush(stderr);
}

void Progress::finish() {
  if (enabled_ && line_open_) std::fprintf(stderr, "\n");
  line_open_ = false;
}

}  // namespace ft::train
