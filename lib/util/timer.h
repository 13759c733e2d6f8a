// Wall-clock stopwatch for step-time accounting and benchmarks (steady clock, seconds).
#pragma once

#include <chrono>
#include <cstdint>

namespace ft {

// A timeout in seconds (configs write seconds) as the milliseconds c10d and std::chrono waits take.
inline std::chrono::milliseconds to_milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000.0));
}

class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  void restart() { start_ = Clock::now(); }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

}  // namespace ft
