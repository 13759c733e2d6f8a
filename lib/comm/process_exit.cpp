// The process-wide "a communicator failed" flag and the exit that skips destructors after it.
#include "comm/process_exit.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace ft::comm {
namespace {
std::atomic<bool> g_failed{false};
}  // namespace

void note_communication_failure() { g_failed.store(true); }
bool communication_failed() { return g_failed.load(); }

int exit_process(int code) {
  if (!communication_failed()) return code;
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

}  // namespace ft::comm
