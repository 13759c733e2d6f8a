// Rank-aware logging to stderr. By default only rank 0 speaks (info); warnings and errors from
// any rank carry a "[rank N]" prefix when the world has more than one rank. Metrics do not go
// here: they go to metrics.jsonl (lib/train).
#pragma once

#include <string>

#include "util/error.h"

namespace ft::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Called once the rank is known (lib/comm); before that the process counts as rank 0 of 1.
void set_rank(int rank, int world_size);
void set_level(Level level);  // FT_LOG_LEVEL=debug|info|warn|error sets the initial level
Level level();

void write(Level level, bool every_rank, const std::string& message);

template <typename... Args>
void info(Args&&... args) {
  write(Level::kInfo, false, ::ft::str(std::forward<Args>(args)...));
}
// Info from every rank (prefixed with the rank), for per-rank facts such as shard sizes.
template <typename... Args>
void info_all(Args&&... args) {
  write(Level::kInfo, true, ::ft::str(std::forward<Args>(args)...));
}
template <typename... Args>
void debug(Args&&... args) {
  write(Level::kDebug, true, ::ft::str(std::forward<Args>(args)...));
}
template <typename... Args>
void warn(Args&&... args) {
  write(Level::kWarn, true, ::ft::str(std::forward<Args>(args)...));
}
template <typename... Args>
void error(Args&&... args) {
  write(Level::kError, true, ::ft::str(std::forward<Args>(args)...));
}

}  // namespace ft::log
