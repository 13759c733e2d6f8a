// What ft_launch does about its ranks, as a state machine without side effects: the supervisor
// (rank_supervisor.h) feeds it what happened (a rank exited, a signal arrived, time passed, every
// rank is gone) and performs the actions it returns (print, signal the ranks, restart, exit).
//
//   running --rank failed, others left--> stopping   (SIGTERM + SIGCONT to all; SIGKILL after --grace-period)
//   running --signal--------------------> stopping   (the signal + SIGCONT to all; SIGKILL after --stop-grace-period)
//   stopping --deadline passed----------> killing    (SIGKILL to all)
//   stopping/killing --second signal----> killing    (SIGKILL to all)
//   any --every rank gone---------------> restarting (a rank failed on its own, restarts left) or done (exit code)
//   restarting --restarted()------------> running    (the next start)
//
// The exit code: after a signal, 0 when every rank exited 0 and none had to be killed, else
// 128 + the signal; otherwise the first rank that failed on its own (exit code, or 128 + N for
// signal N), 0 when none did. Only such a failure is restarted (--max-restarts). A rank killed by
// a signal within a second after the first failure, an error exit, takes its place: the peers of
// a killed rank exit with errors of their own, and may be reaped first.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ft::launch {

using Clock = std::chrono::steady_clock;

struct Action {
  enum class Kind {
    kSay,        // print "ft_launch: " + message on stderr
    kSignalAll,  // send signo to every rank (only returned while a rank is still running)
    kRestart,    // start every rank again, as start number restart()
    kExit,       // exit ft_launch with code
  };
  Kind kind = Kind::kSay;
  int signo = 0;
  int code = 0;
  std::string message;

  static Action say(std::string message) { return {Kind::kSay, 0, 0, std::move(message)}; }
  static Action signal_all(int signo) { return {Kind::kSignalAll, signo, 0, {}}; }
  static Action restart() { return {Kind::kRestart, 0, 0, {}}; }
  static Action exit(int code) { return {Kind::kExit, 0, code, {}}; }
  bool operator==(const Action& o) const {
    return kind == o.kind && signo == o.signo && code == o.code && message == o.message;
  }
};
using Actions = std::vector<Action>;

enum class Phase {
  kRunning,     // the ranks run; nothing was sent to them
  kStopping,    // a stop was passed on (SIGTERM after a failure, or ft_launch's own signal); SIGKILL at kill_deadline()
  kKilling,     // SIGKILL was sent
  kRestarting,  // every rank is gone and they are to start again: restarted() once they have
  kDone,        // every rank is gone (or supervision failed): ft_launch exits
};
const char* phase_name(Phase phase);

struct SupervisionSettings {
  int ranks = 1;              // ranks started by this ft_launch
  double grace_s = 10;        // SIGTERM -> SIGKILL after a rank failed
  double stop_grace_s = 600;  // signal -> SIGKILL after ft_launch got a signal
  int max_restarts = 0;
};

class SupervisionState {
 public:
  explicit SupervisionState(const SupervisionSettings& settings);

  Phase phase() const { return phase_; }
  int restart() const { return restart_; }   // 0 on the first start
  int running() const { return running_; }   // ranks of this start not reaped yet
  int failure_code() const { return failed_code_; }  // of the rank that failed on its own in this start, 0: none
  // When SIGKILL is due (stopping, with ranks left); none otherwise.
  std::optional<Clock::time_point> kill_deadline() const;

  // Rank `rank` (process `pid`) was reaped with waitpid status `wait_status`.
  Actions rank_exited(int rank, int pid, int wait_status, Clock::time_point now);
  // ft_launch got SIGINT, SIGTERM or SIGHUP.
  Actions signal_arrived(int signo, Clock::time_point now);
  // The clock moved on: SIGKILL when the grace period ran out.
  Actions time_passed(Clock::time_point now);
  // Every rank is reaped and their output drained: restart or exit.
  Actions all_ranks_gone();
  // Supervision itself broke (`why`): kill the ranks, exit 1.
  Actions failed(const std::string& why);
  // The ranks were started again after kRestart: a fresh start in kRunning.
  void restarted();

 private:
  Actions stop_all(int signo, double grace_s, Clock::time_point now);
  Actions likelier_cause(int rank, int pid, int wait_status, Clock::time_point now);
  Actions kill_all();

  SupervisionSettings settings_;
  Phase phase_ = Phase::kRunning;
  int restart_ = 0;
  int running_ = 0;
  Clock::time_point kill_at_{};
  int failed_rank_ = -1;  // the first rank that failed on its own (before any stop)
  int failed_code_ = 0;
  Clock::time_point failed_at_{};
  bool failed_by_signal_ = false;
  int interrupted_ = 0;   // the first signal ft_launch got, 0 when none
  bool all_exited_0_ = true;
};

// "exited with code N", "was killed by signal N (Name)": a waitpid status in words.
std::string describe_wait_status(int wait_status);
// A waitpid status as an exit code: the process's own, or 128 + N for signal N.
int exit_code_of(int wait_status);

}  // namespace ft::launch
