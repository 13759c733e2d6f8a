// ft_launch: start one process per local rank with torchrun's rank environment, prefix their
// output with "[rank R] ", and stop them all when one fails.
//
//   ft_launch --nproc_per_node 8 ft_train configs/llama13b_zero2.json
//   ft_launch --nnodes 2 --node_rank 0 --master_addr node01 --master_port 29500 --nproc_per_node 8 ft_train CFG
//
// Each child (stdin from /dev/null) gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR and
// MASTER_PORT (a free port when --master_port is not given on a single node), and
// OMP_NUM_THREADS=1 unless it is already set. When a rank fails, the others get SIGTERM (and
// SIGCONT, so that a stopped one can act on it), then SIGKILL after --grace-period seconds
// (default 10), and ft_launch exits with the failing rank's code (128+N for signal N). SIGINT,
// SIGTERM and SIGHUP are passed on to every rank (ft_train then finishes its step, saves a
// checkpoint and exits 0), with SIGKILL after --stop-grace-period seconds (default 600: time to
// save); ft_launch exits 0 when every rank did, else 128+N. A second signal kills at once.
// --max-restarts N (one node): after a rank fails, all ranks are stopped and started again, up
// to N times, with FT_RESTART_COUNT (and torchrun's TORCHELASTIC_RESTART_COUNT) set to the
// attempt; ft_train then continues from the latest complete checkpoint (checkpoint.resume auto). The ranks run in a process group of their own, which is killed at the end, so
// nothing is left behind; each child also dies with ft_launch (PR_SET_PDEATHSIG) should
// ft_launch itself be killed.
//
// torchrun works as well, since ft programs read the same variables:
//   torchrun --nproc_per_node 8 --no-python ft_train configs/llama13b_zero2.json   (PyTorch 2.x)
// The flag is --no_python in torch 1.13, and Debian's torch 1.13 torchrun fails at launch on
// Python 3.11 (an IntFlag change breaks its Std.from_str), so use ft_launch there.
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "app_main.h"
#include "util/error.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

const char* const kUsage =
    "usage: ft_launch [--nproc_per_node N] [--nnodes K --node_rank I --master_addr A] [--master_port P]\n"
    "                 [--grace-period SECONDS] [--stop-grace-period SECONDS] [--max-restarts N] PROGRAM [ARGS...]\n"
    "Starts N processes of PROGRAM with RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and\n"
    "MASTER_PORT set, prefixes their output with [rank R], and stops all of them when one fails.\n";

struct Options {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr;
  int master_port = 0;
  double grace_s = 10;        // after a rank failed
  double stop_grace_s = 600;  // after a signal was passed on: the ranks save a checkpoint
  int max_restarts = 0;       // restarts of all ranks after a rank failed
  std::vector<std::string> command;
};

int parse_int(const std::string& flag, const std::string& value, int min, int max) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno != 0 || v < min || v > max) {
    throw ft::app::UsageError{ft::str(flag, ": expected an integer in ", min, "..", max, ", got \"", value, "\"")};
  }
  return static_cast<int>(v);
}

Options parse_args(int argc, char** argv, bool* help) {
  Options o;
  int i = 1;
  for (; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      *help = true;
      return o;
    }
    if (arg.rfind("--", 0) != 0) break;  // PROGRAM: everything from here on is its command line
    std::string value;
    const std::size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
    } else {
      if (i + 1 >= argc) throw ft::app::UsageError{arg + " needs a value"};
      value = argv[++i];
    }
    for (char& c : arg) {
      if (c == '-' && &c != &arg[0] && &c != &arg[1]) c = '_';  // --nproc-per-node == --nproc_per_node
    }
    if (arg == "--nproc_per_node") {
      o.nproc_per_node = parse_int(arg, value, 1, 4096);
    } else if (arg == "--nnodes") {
      o.nnodes = parse_int(arg, value, 1, 65536);
    } else if (arg == "--node_rank") {
      o.node_rank = parse_int(arg, value, 0, 65535);
    } else if (arg == "--master_addr") {
      o.master_addr = value;
    } else if (arg == "--master_port") {
      o.master_port = parse_int(arg, value, 1, 65535);
    } else if (arg == "--max_restarts") {
      o.max_restarts = parse_int(arg, value, 0, 1000000);
    } else if (arg == "--grace_period" || arg == "--stop_grace_period") {
      char* end = nullptr;
      const double seconds = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(seconds >= 0)) {
        throw ft::app::UsageError{"--" + arg.substr(2) + ": expected seconds >= 0, got \"" + value + "\""};
      }
      (arg == "--grace_period" ? o.grace_s : o.stop_grace_s) = seconds;
    } else {
      throw ft::app::UsageError{"unknown option " + arg};
    }
  }
  for (; i < argc; ++i) o.command.push_back(argv[i]);
  if (o.command.empty()) throw ft::app::UsageError{"no PROGRAM to launch"};
  if (o.node_rank >= o.nnodes) {
    throw ft::app::UsageError{ft::str("--node_rank ", o.node_rank, " is out of range for --nnodes ", o.nnodes)};
  }
  if (o.nnodes > 1 && (o.master_addr.empty() || o.master_port == 0)) {
    throw ft::app::UsageError{"--nnodes > 1 needs --master_addr (node rank 0's host) and --master_port, the same on every node"};
  }
  if (o.nnodes > 1 && o.max_restarts > 0) {
    throw ft::app::UsageError{"--max-restarts restarts this node's ranks only; with --nnodes > 1 let the scheduler restart the job"};
  }
  if (o.master_addr.empty()) o.master_addr = "127.0.0.1";
  return o;
}

// A port nobody listens on right now (the kernel's pick), for the store rank 0 is about to host.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  FT_CHECK(fd >= 0, "socket(): ", std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  ::close(fd);
  FT_CHECK(ok, "could not find a free port: ", std::strerror(err), " (pass --master_port)");
  return ntohs(addr.sin_port);
}

// Signals arrive through a pipe, so the poll loop sees them in order with the output.
int g_signal_pipe[2] = {-1, -1};

void on_signal(int signo) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signo);
  (void)!::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

void write_all(int fd, const std::string& text) {
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our own stdout is gone: nothing better to do than drop it
    p += n;
    left -= static_cast<std::size_t>(n);
  }
}

// One child's stdout or stderr: complete lines go out prefixed, one write per line.
struct Stream {
  int fd = -1;
  int out_fd = 1;
  std::string prefix;
  std::string partial;

  void feed(const char* data, std::size_t n) {
    partial.append(data, n);
    std::size_t start = 0;
    std::string block;
    for (std::size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
      block += prefix;
      block.append(partial, start, nl - start + 1);
    }
    partial.erase(0, start);
    if (!block.empty()) write_all(out_fd, block);
  }
  void close_stream() {
    if (!partial.empty()) write_all(out_fd, prefix + partial + "\n");
    partial.clear();
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
};

struct Child {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int code = 0;  // exit code, or 128 + signal
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return ft::str("exited with code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return ft::str("was killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  }
  return "ended";
}

void say(const std::string& message) { write_all(2, "ft_launch: " + message + "\n"); }

// How one start of all ranks ended.
struct Outcome {
  int code = 0;             // what ft_launch exits with
  bool rank_failed = false;  // a rank failed on its own (not after a signal ft_launch passed on)
};

Outcome run_ranks(const Options& o, int port, int restart) {
  const int world = o.nproc_per_node * o.nnodes;

  // The environment every child starts from.
  std::map<std::string, std::string> base;
  for (char** p = environ; *p != nullptr; ++p) {
    const std::string entry(*p);
    const std::size_t eq = entry.find('=');
    if (eq != std::string::npos) base[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  if (base.count("OMP_NUM_THREADS") == 0) base["OMP_NUM_THREADS"] = "1";
  base["WORLD_SIZE"] = std::to_string(world);
  base["LOCAL_WORLD_SIZE"] = std::to_string(o.nproc_per_node);
  base["GROUP_RANK"] = std::to_string(o.node_rank);
  base["MASTER_ADDR"] = o.master_addr;
  base["MASTER_PORT"] = std::to_string(port);
  base["FT_RESTART_COUNT"] = std::to_string(restart);
  base["TORCHELASTIC_RESTART_COUNT"] = std::to_string(restart);

  std::vector<char*> args;
  for (const auto& a : o.command) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);

  const pid_t launcher = ::getpid();
  pid_t group = 0;
  std::vector<Child> children(o.nproc_per_node);
  std::vector<Stream> streams;
  for (int local = 0; local < o.nproc_per_node; ++local) {
    const int rank = o.node_rank * o.nproc_per_node + local;
    std::map<std::string, std::string> env = base;
    env["RANK"] = std::to_string(rank);
    env["LOCAL_RANK"] = std::to_string(local);
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);

    int out[2], err[2];
    FT_CHECK(::pipe2(out, O_CLOEXEC) == 0 && ::pipe2(err, O_CLOEXEC) == 0, "pipe2(): ", std::strerror(errno));
    // Signals stay blocked across fork until the child has its default handlers back: a SIGTERM
    // that reached the child while it still ran the launcher's handler would be written into
    // the launcher's signal pipe and read as if the launcher itself had been terminated.
    sigset_t all_signals, saved_mask;
    sigfillset(&all_signals);
    ::pthread_sigmask(SIG_SETMASK, &all_signals, &saved_mask);
    const pid_t pid = ::fork();
    if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
    FT_CHECK(pid >= 0, "fork(): ", std::strerror(errno));
    if (pid == 0) {
      // Child: default signals, own process group (shared by all ranks), die with the launcher.
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) ::sigaction(s, &dfl, nullptr);
      ::pthread_sigmask(SIG_SETMASK, &saved_mask, nullptr);
      ::setpgid(0, group);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) _exit(128 + SIGKILL);
      // stdin from /dev/null: the ranks are not in the terminal's foreground group, and a read
      // from the terminal would stop them (SIGTTIN).
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) ::dup2(null_fd, 0);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      ::execvpe(args[0], args.data(), envp.data());
      const std::string msg = ft::str("ft_launch: cannot run ", args[0], ": ", std::strerror(errno), "\n");
      (void)!::write(2, msg.data(), msg.size());
      _exit(127);
    }
    if (group == 0) group = pid;
    ::setpgid(pid, group);  // also here, so the group exists before anyone signals it
    ::close(out[1]);
    ::close(err[1]);
    children[local] = Child{rank, pid, true, 0};
    const std::string prefix = ft::str("[rank ", rank, "] ");
    streams.push_back(Stream{out[0], 1, prefix, {}});
    streams.push_back(Stream{err[0], 2, prefix, {}});
  }

  int failed_rank = -1;
  int failed_code = 0;
  int interrupted = 0;
  bool stopping = false;
  bool killed = false;
  Clock::time_point kill_at;
  Clock::time_point drain_until;
  bool draining = false;

  // The group id is the first rank's pid. Once every rank is reaped that number can belong to
  // an unrelated process group, so the group is signalled only while a rank is unreaped (a
  // zombie keeps the id reserved): `running` counts them.
  int running = o.nproc_per_node;
  auto signal_group = [&](int signo) {
    if (running > 0) ::kill(-group, signo);
  };
  auto stop_all = [&](int signo, double grace_s) {
    signal_group(signo);
    signal_group(SIGCONT);  // a stopped rank acts on SIGTERM only once it runs again
    if (!stopping) {
      stopping = true;
      kill_at = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
    }
  };

  auto reap = [&] {
    while (true) {
      int status = 0;
      siginfo_t info{};
      if (::waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) break;
      // Before the last rank's zombie is reaped (and the group id freed), kill whatever the ranks
      // left behind in their group.
      if (running == 1) ::kill(-group, SIGKILL);
      const pid_t pid = ::waitpid(info.si_pid, &status, 0);
      if (pid <= 0) break;
      for (Child& c : children) {
        if (c.pid != pid || !c.running) continue;
        c.running = false;
        --running;
        c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
        if (c.code != 0 && failed_rank < 0 && interrupted == 0 && !stopping) {
          failed_rank = c.rank;
          failed_code = c.code;
          if (running > 0) {
            say(ft::str("rank ", c.rank, " (pid ", pid, ") ", describe_status(status), "; stopping the other ranks (SIGTERM, then SIGKILL after ",
                        o.grace_s, " s)"));
            stop_all(SIGTERM, o.grace_s);
          } else {
            say(ft::str("rank ", c.rank, " (pid ", pid, ") ", describe_status(status)));
          }
        }
      }
    }
  };

  std::vector<char> buffer(1 << 16);
  while (true) {
    reap();
    if (running == 0 && !draining) {
      draining = true;
      drain_until = Clock::now() + std::chrono::seconds(2);
    }
    bool open = false;
    for (const Stream& s : streams) open = open || s.fd >= 0;
    if (running == 0 && (!open || Clock::now() >= drain_until)) break;
    if (stopping && !killed && running > 0 && Clock::now() >= kill_at) {
      say(ft::str(running, " rank(s) still running ", interrupted != 0 ? o.stop_grace_s : o.grace_s, " s after ",
                  interrupted != 0 ? strsignal(interrupted) : "SIGTERM", ": SIGKILL"));
      signal_group(SIGKILL);
      killed = true;
    }

    std::vector<pollfd> fds;
    fds.push_back(pollfd{g_signal_pipe[0], POLLIN, 0});
    std::vector<Stream*> polled;
    for (Stream& s : streams) {
      if (s.fd < 0) continue;
      fds.push_back(pollfd{s.fd, POLLIN, 0});
      polled.push_back(&s);
    }
    int timeout_ms = 200;
    if (stopping && !killed) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - Clock::now()).count();
      timeout_ms = static_cast<int>(std::max<long long>(0, std::min<long long>(timeout_ms, left)));
    }
    const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      say(ft::str("poll(): ", std::strerror(errno)));
      signal_group(SIGKILL);
      return {1, false};
    }
    if (ready <= 0) continue;
    if (fds[0].revents & POLLIN) {
      unsigned char signals[64];
      const ssize_t n = ::read(g_signal_pipe[0], signals, sizeof(signals));
      for (ssize_t k = 0; k < n; ++k) {
        const int signo = signals[k];
        if (signo == SIGCHLD) continue;  // reaped at the top of the loop
        if (interrupted == 0) {
          interrupted = signo;
          say(ft::str("got ", strsignal(signo), ": passing it to the ranks (SIGKILL after ", o.stop_grace_s,
                      " s; send it again to kill them now)"));
          stop_all(signo, o.stop_grace_s);
        } else {
          say(ft::str("got ", strsignal(signo), " again: SIGKILL"));
          signal_group(SIGKILL);
          killed = true;
        }
      }
    }
    for (std::size_t k = 1; k < fds.size(); ++k) {
      if ((fds[k].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      Stream& s = *polled[k - 1];
      const ssize_t n = ::read(s.fd, buffer.data(), buffer.size());
      if (n > 0) {
        s.feed(buffer.data(), static_cast<std::size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        s.close_stream();
      }
    }
  }
  for (Stream& s : streams) s.close_stream();
  if (interrupted != 0) {
    // Every rank exiting 0 after the signal means they stopped cleanly (ft_train: with a checkpoint).
    bool all_clean = !killed;
    for (const Child& c : children) all_clean = all_clean && c.code == 0;
    return {all_clean ? 0 : 128 + interrupted, false};
  }
  return {failed_rank >= 0 ? failed_code : 0, failed_rank >= 0};
}

int launch(const Options& o) {
  FT_CHECK(::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, "pipe2(): ", std::strerror(errno));
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) ::sigaction(s, &action, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  for (int restart = 0;; ++restart) {
    // A fresh port per start when ft_launch picks it: the last start's store may linger in TIME_WAIT.
    const int port = o.master_port != 0 ? o.master_port : free_port();
    const Outcome outcome = run_ranks(o, port, restart);
    if (!outcome.rank_failed || restart >= o.max_restarts) {
      if (outcome.rank_failed && o.max_restarts > 0) say(ft::str("giving up after ", o.max_restarts, " restarts"));
      return outcome.code;
    }
    say(ft::str("restarting all ranks (restart ", restart + 1, " of ", o.max_restarts,
                "); ft_train continues from the latest complete checkpoint"));
  }
}

int run(int argc, char** argv) {
  bool help = false;
  const Options options = parse_args(argc, argv, &help);
  if (help) {
    std::cout << kUsage;
    return 0;
  }
  return launch(options);
}

}  // namespace

int main(int argc, char** argv) { return ft::app::run_main("ft_launch", argc, argv, run); }
