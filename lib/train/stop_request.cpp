#include "train/stop_request.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <initializer_list>

namespace ft::train {
namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_honoured{false};

void on_stop_signal(int signo) {
  if (!g_honoured.load() || g_signal.load() != 0) {
    // The default action: end the process (async-signal-safe calls only).
    ::signal(signo, SIG_DFL);
    ::raise(signo);
    return;
  }
  g_signal.store(signo);
  static const char message[] =
      "ft_train: stop requested: finishing this step, saving a checkpoint, then exiting (signal again to stop at "
      "once)\n";
  (void)!::write(STDERR_FILENO, message, sizeof(message) - 1);
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int s : {SIGTERM, SIGINT}) ::sigaction(s, &action, nullptr);
}

void set_stop_honoured(bool honoured) { g_honoured.store(honoured); }
bool stop_requested() { return g_signal.load() != 0; }
int stop_signal() { return g_signal.load(); }

}  // namespace ft::train
