#include "launch/rank_supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "launch/free_port.h"
#include "launch/node_rendezvous.h"
#include "launch/rank_environment.h"
#include "launch/rank_output.h"
#include "launch/supervision_state.h"
#include "util/error.h"

extern char** environ;

namespace ft::launch {
namespace {

// Signals arrive through a pipe, so the poll loop sees them in order with the output.
int g_signal_pipe[2] = {-1, -1};

void on_signal(int signo) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  (void)!::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

void install_signal_handlers() {
  FT_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, "pipe2(): ", std::strerror(errno));
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) ::sigaction(s, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

void say(const std::string& message) { write_all(2, "ft_launch: " + message + "\n"); }

// One rank's stdout or stderr: the read end of its pipe, passed on to ours in prefixed lines.
struct RankStream {
  int fd = -1;
  int out_fd = 1;
  LinePrefixer lines;

  // Reads what is there; closes the stream at its end.
  void read_some(std::vector<char>& buffer) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n > 0) {
      write_all(out_fd, lines.feed(buffer.data(), static_cast<std::size_t>(n)));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      close();
    }
  }
  void close() {
    write_all(out_fd, lines.finish());
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct RankProcess {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
};

// The forked child, before exec: default signals, the ranks' process group (`group`, 0 for the
// first rank: a group of its own), death with the launcher, stdin from /dev/null (the ranks are
// not in the terminal's foreground group, and a read from the terminal would stop them with
// SIGTTIN), stdout and stderr into the launcher's pipes; then PROGRAM.
[[noreturn]] void become_rank(pid_t group, pid_t launcher, const sigset_t& mask, int out_fd, int err_fd, char** args,
                              char** envp) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) ::sigaction(s, &dfl, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &mask, nullptr);
  ::setpgid(0, group);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != launcher) _exit(128 + SIGKILL);
  const int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd >= 0) ::dup2(null_fd, 0);
  ::dup2(out_fd, 1);
  ::dup2(err_fd, 2);
  ::execvpe(args[0], args, envp);
  const std::string msg = str("ft_launch: cannot run ", args[0], ": ", std::strerror(errno), "\n");
  (void)!::write(2, msg.data(), msg.size());
  _exit(127);
}

// One start of every local rank: their processes and output, watched until all are gone.
class RankGroup {
 public:
  // `restart`: the start number the ranks are told (FT_RESTART_COUNT).
  RankGroup(const Options& o, int port, int restart, SupervisionState& state) : state_(state) {
    for (int local = 0; local < o.nproc_per_node; ++local) spawn(o, local, port, restart);
  }
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;
  ~RankGroup() {
    for (RankStream& s : streams_) {
      if (s.fd >= 0) ::close(s.fd);
    }
  }

  // Passes output and signals on and performs what state_ decides until every rank is gone and
  // its output drained; returns how this start ends (Action::kRestart or kExit).
  Action watch();

 private:
  void spawn(const Options& o, int local, int port, int restart);
  void reap();
  std::optional<Action> perform(const Actions& actions);
  void read_signals();
  bool output_open() const {
    return std::any_of(streams_.begin(), streams_.end(), [](const RankStream& s) { return s.fd >= 0; });
  }
  // The group id is the first rank's pid. Once every rank is reaped that number can belong to an
  // unrelated process group, so the group is signalled only while a rank is unreaped (a zombie
  // keeps the id reserved).
  void signal_group(int signo) {
    if (state_.running() > 0) ::kill(-group_, signo);
  }

  SupervisionState& state_;
  pid_t group_ = 0;
  std::vector<RankProcess> ranks_;
  std::vector<RankStream> streams_;
};

void RankGroup::spawn(const Options& o, int local, int port, int restart) {
  const int rank = o.node_rank * o.nproc_per_node + local;
  std::vector<std::string> env = rank_environment(environ, o, local, port, restart);
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> args;
  for (const std::string& a : o.command) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const pid_t launcher = ::getpid();
  int out[2], err[2];
  FT_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, "pipe2(): ", std::strerror(errno));
  // Signals stay blocked across fork until the child has its default handlers back: a SIGTERM
  // that reached the child while it still ran the launcher's handler would be written into the
  // launcher's signal pipe and read as if the launcher itself had been terminated.
  sigset_t all_signals, saved_mask;
  sigfillset(&all_signals);
  ::pthread_sigmask(SIG_SETMASK, &all_signals, &saved_mask);
  const pid_t pid = ::fork();
  if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
  FT_CHECK(pid >= 0, "fork(): ", std::strerror(errno));
  if (pid == 0) become_rank(group_, launcher, saved_mask, out[1], err[1], args.data(), envp.data());
  if (group_ == 0) group_ = pid;
  ::setpgid(pid, group_);  // also here, so the group exists before anyone signals it
  ::close(out[1]);
  ::close(err[1]);
  ranks_.push_back(RankProcess{rank, pid, true});
  streams_.push_back(RankStream{out[0], 1, LinePrefixer(rank_prefix(rank))});
  streams_.push_back(RankStream{err[0], 2, LinePrefixer(rank_prefix(rank))});
}

// Says and signals; returns the action that ends this start, if one came.
std::optional<Action> RankGroup::perform(const Actions& actions) {
  std::optional<Action> end;
  for (const Action& a : actions) {
    switch (a.kind) {
      case Action::Kind::kSay: say(a.message); break;
      case Action::Kind::kSignalAll: signal_group(a.signo); break;
      case Action::Kind::kRestart:
      case Action::Kind::kExit: end = a; break;
    }
  }
  return end;
}

void RankGroup::reap() {
  while (true) {
    siginfo_t info{};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) break;
    // Before the last rank's zombie is reaped (and the group id freed), kill whatever the ranks
    // left behind in their group.
    if (state_.running() == 1) ::kill(-group_, SIGKILL);
    int status = 0;
    const pid_t pid = ::waitpid(info.si_pid, &status, 0);
    if (pid <= 0) break;
    for (RankProcess& r : ranks_) {
      if (r.pid != pid || !r.running) continue;
      r.running = false;
      perform(state_.rank_exited(r.rank, pid, status, Clock::now()));
    }
  }
}

void RankGroup::read_signals() {
  unsigned char signals[64];
  const ssize_t n = ::read(g_signal_pipe[0], signals, sizeof(signals));
  for (ssize_t k = 0; k < n; ++k) {
    const int signo = signals[k];
    if (signo == SIGCHLD) continue;  // reaped at the top of the loop
    perform(state_.signal_arrived(signo, Clock::now()));
  }
}

Action RankGroup::watch() {
  std::vector<char> buffer(1 << 16);
  std::optional<Clock::time_point> drain_until;  // once every rank is gone: how long to wait for their output
  while (true) {
    reap();
    if (state_.running() == 0 && !drain_until) drain_until = Clock::now() + std::chrono::seconds(2);
    if (state_.running() == 0 && (!output_open() || Clock::now() >= *drain_until)) break;
    perform(state_.time_passed(Clock::now()));

    std::vector<pollfd> fds;
    fds.push_back(pollfd{g_signal_pipe[0], POLLIN, 0});
    std::vector<RankStream*> polled;
    for (RankStream& s : streams_) {
      if (s.fd < 0) continue;
      fds.push_back(pollfd{s.fd, POLLIN, 0});
      polled.push_back(&s);
    }
    long long timeout_ms = 200;
    if (const auto deadline = state_.kill_deadline()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      timeout_ms = std::max<long long>(0, std::min<long long>(timeout_ms, left));
    }
    const int ready = ::poll(fds.data(), fds.size(), static_cast<int>(timeout_ms));
    if (ready < 0 && errno != EINTR) return *perform(state_.failed(str("poll(): ", std::strerror(errno))));
    if (ready <= 0) continue;
    if (fds[0].revents & POLLIN) read_signals();
    for (std::size_t k = 1; k < fds.size(); ++k) {
      if ((fds[k].revents & (POLLIN | POLLHUP | POLLERR)) != 0) polled[k - 1]->read_some(buffer);
    }
  }
  for (RankStream& s : streams_) s.close();
  return *perform(state_.all_ranks_gone());
}

// A fresh port per start: the last start's store may linger in TIME_WAIT.
int pick_port() {
  try {
    return free_port();
  } catch (const Error& e) {
    throw Error(str(e.what(), " (pass --master_port)"));
  }
}

}  // namespace

int supervise(const Options& o) {
  install_signal_handlers();
  SupervisionState state({o.nproc_per_node, o.grace_s, o.stop_grace_s, o.max_restarts});
  // Several nodes that restart: their launchers meet before every start (node_rendezvous.h).
  std::optional<NodeRendezvous> nodes;
  if (o.nnodes > 1 && o.max_restarts > 0) {
    try {
      nodes.emplace(o);
    } catch (const RendezvousError& e) {
      say(e.what());
      return 1;
    }
  }
  int last_failure = 0;  // the exit code of the start that failed last
  while (true) {
    int port = o.master_port != 0 ? o.master_port : pick_port();
    int restart = state.restart();
    if (nodes) {
      say(o.node_rank == 0 ? str("waiting for the launchers of the other ", o.nnodes - 1, " node(s) at ",
                                 nodes->endpoint(), " (start ", restart, ")")
                           : str("joining node 0's launcher at ", nodes->endpoint(), " (start ", restart, " here)"));
      Meeting meeting;
      try {
        meeting = nodes->meet(restart, g_signal_pipe[0]);
      } catch (const RendezvousError& e) {
        say(e.what());
        return last_failure != 0 ? last_failure : 1;
      }
      if (meeting.signo != 0) return 128 + meeting.signo;
      port = meeting.port;
      restart = meeting.restart;
      say(str("all ", o.nnodes, " nodes are here: start ", restart, ", ranks' store at ", o.master_addr, ":", port));
    }
    const Action end = RankGroup(o, port, restart, state).watch();
    if (end.kind == Action::Kind::kExit) return end.code;
    last_failure = state.failure_code();
    state.restarted();
  }
}

}  // namespace ft::launch
