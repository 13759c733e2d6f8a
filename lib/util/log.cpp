#include "util/log.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace ft::log {
namespace {

Level level_from_env() {
  const char* value = std::getenv("FT_LOG_LEVEL");
  if (value == nullptr) return Level::kInfo;
  if (std::strcmp(value, "debug") == 0) return Level::kDebug;
  if (std::strcmp(value, "warn") == 0) return Level::kWarn;
  if (std::strcmp(value, "error") == 0) return Level::kError;
  return Level::kInfo;
}

struct State {
  int rank = 0;
  int world_size = 1;
  Level level = level_from_env();
  std::mutex mutex;
};

State& state() {
  static State s;
  return s;
}

const char* level_tag(Level level) {
  switch (level) {
    case Level::kDebug: return "debug: ";
    case Level::kWarn: return "warning: ";
    case Level::kError: return "error: ";
    default: return "";
  }
}

}  // namespace

void set_rank(int rank, int world_size) {
  state().rank = rank;
  state().world_size = world_size;
}

void set_level(Level level) { state().level = level; }
Level level() { return state().level; }

void write(Level level, bool every_rank, const std::string& message) {
  State& s = state();
  if (level < s.level) return;
  if (!every_rank && s.rank != 0) return;
  std::string line;
  if (s.world_size > 1 && every_rank) line = "[rank " + std::to_string(s.rank) + "] ";
  line += level_tag(level);
  line += message;
  line += '\n';
  std::lock_guard<std::mutex> lock(s.mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace ft::log
