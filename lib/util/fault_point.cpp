#include "util/fault_point.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "util/log.h"

namespace ft {
namespace {

struct FaultSpec {
  bool armed = false;
  std::string point;
  long count = 1;
  std::string action = "kill";
  long hits = 0;
};

FaultSpec read_spec() {
  FaultSpec spec;
  const char* text = std::getenv("FT_FAULT");
  if (text == nullptr || *text == '\0') return spec;
  std::string s = text;
  const std::size_t at = s.find('@');
  if (at != std::string::npos) {
    const char* rank = std::getenv("RANK");
    const std::string mine = rank != nullptr ? rank : "0";
    if (s.substr(at + 1) != mine) return spec;  // meant for another rank
    s = s.substr(0, at);
  }
  const std::size_t colon = s.find(':');
  if (colon != std::string::npos) {
    spec.count = std::atol(s.c_str() + colon + 1);
    s = s.substr(0, colon);
  }
  spec.point = s;
  if (const char* action = std::getenv("FT_FAULT_ACTION"); action != nullptr && *action != '\0') spec.action = action;
  spec.armed = true;
  return spec;
}

FaultSpec& spec() {
  static FaultSpec s = read_spec();
  return s;
}
std::mutex g_mutex;

// Counts a hit of `name`; true when this is the one FT_FAULT asks for.
bool hit(FaultSpec& s, const char* name) {
  return s.armed && s.point == name && ++s.hits == s.count;
}

}  // namespace

bool fault_value(const char* name) {
  FaultSpec& s = spec();
  if (!s.armed || s.action != "nan") return false;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!hit(s, name)) return false;
  log::warn("FT_FAULT: poisoned value at ", name, " (hit ", s.hits, ")");
  return true;
}

void fault_point(const char* name) {
  FaultSpec& s = spec();
  if (!s.armed || s.action == "nan") return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!hit(s, name)) return;
  log::warn("FT_FAULT: ", s.action, " at ", name, " (hit ", s.hits, ")");
  if (s.action == "sigterm") {
    ::kill(::getpid(), SIGTERM);
  } else if (s.action == "sigterm-parent") {
    ::kill(::getppid(), SIGTERM);
  } else if (s.action == "sigstop") {
    ::kill(::getpid(), SIGSTOP);
  } else {
    ::kill(::getpid(), SIGKILL);
  }
}

}  // namespace ft
