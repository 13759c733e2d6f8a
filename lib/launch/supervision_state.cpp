#include "launch/supervision_state.h"

#include <signal.h>
#include <sys/wait.h>

#include <cstring>

#include "util/error.h"

namespace ft::launch {

const char* phase_name(Phase phase) {
  switch (phase) {
    case Phase::kRunning: return "running";
    case Phase::kStopping: return "stopping";
    case Phase::kKilling: return "killing";
    case Phase::kRestarting: return "restarting";
    case Phase::kDone: return "done";
  }
  return "?";
}

std::string describe_wait_status(int wait_status) {
  if (WIFEXITED(wait_status)) return str("exited with code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return str("was killed by signal ", WTERMSIG(wait_status), " (", strsignal(WTERMSIG(wait_status)), ")");
  }
  return "ended";
}

int exit_code_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  return 128 + (WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0);
}

SupervisionState::SupervisionState(const SupervisionSettings& settings)
    : settings_(settings), running_(settings.ranks) {}

std::optional<Clock::time_point> SupervisionState::kill_deadline() const {
  if (phase_ == Phase::kStopping && running_ > 0) return kill_at_;
  return std::nullopt;
}

// `signo` (and SIGCONT: a stopped rank acts on it only once it runs again) to every rank; the
// first stop sets the deadline for SIGKILL, a later one keeps it.
Actions SupervisionState::stop_all(int signo, double grace_s, Clock::time_point now) {
  Actions actions;
  if (running_ > 0) {
    actions.push_back(Action::signal_all(signo));
    actions.push_back(Action::signal_all(SIGCONT));
  }
  if (phase_ == Phase::kRunning) {
    phase_ = Phase::kStopping;
    kill_at_ = now + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(grace_s));
  }
  return actions;
}

Actions SupervisionState::kill_all() {
  phase_ = Phase::kKilling;
  if (running_ > 0) return {Action::signal_all(SIGKILL)};
  return {};
}

Actions SupervisionState::rank_exited(int rank, int pid, int wait_status, Clock::time_point now) {
  FT_ASSERT(running_ > 0, "a rank exited while none was running: rank ", rank, " in phase ", phase_name(phase_));
  --running_;
  const int code = exit_code_of(wait_status);
  if (code != 0) all_exited_0_ = false;
  // Only a failure of its own counts: a rank that dies of the stop ft_launch passed on does not.
  if (code == 0 || interrupted_ != 0) return {};
  if (failed_rank_ >= 0) return likelier_cause(rank, pid, wait_status, now);
  if (phase_ != Phase::kRunning) return {};
  failed_rank_ = rank;
  failed_code_ = code;
  failed_at_ = now;
  failed_by_signal_ = WIFSIGNALED(wait_status);
  const std::string what = str("rank ", rank, " (pid ", pid, ") ", describe_wait_status(wait_status));
  if (running_ == 0) return {Action::say(what)};
  Actions actions = {Action::say(
      str(what, "; stopping the other ranks (SIGTERM, then SIGKILL after ", settings_.grace_s, " s)"))};
  for (Action& a : stop_all(SIGTERM, settings_.grace_s, now)) actions.push_back(std::move(a));
  return actions;
}

// A rank killed by a signal (not the SIGTERM ft_launch passed on) just after the first failure,
// an error exit: the kill is the likelier cause. The peers of a killed rank see its connections
// close within milliseconds and exit with an error, and one of them can be reaped before it: its
// exit completes only once all its threads are gone.
Actions SupervisionState::likelier_cause(int rank, int pid, int wait_status, Clock::time_point now) {
  constexpr auto kWindow = std::chrono::seconds(1);
  if (failed_by_signal_ || phase_ != Phase::kStopping || !WIFSIGNALED(wait_status) ||
      WTERMSIG(wait_status) == SIGTERM || now - failed_at_ > kWindow) {
    return {};
  }
  failed_rank_ = rank;
  failed_code_ = exit_code_of(wait_status);
  failed_by_signal_ = true;
  return {Action::say(str("rank ", rank, " (pid ", pid, ") ", describe_wait_status(wait_status),
                          " at about the same time: the likelier cause (ft_launch exits with ", failed_code_, ")"))};
}

Actions SupervisionState::signal_arrived(int signo, Clock::time_point now) {
  if (interrupted_ != 0) {
    Actions actions = {Action::say(str("got ", strsignal(signo), " again: SIGKILL"))};
    for (Action& a : kill_all()) actions.push_back(std::move(a));
    return actions;
  }
  interrupted_ = signo;
  Actions actions = {Action::say(str("got ", strsignal(signo), ": passing it to the ranks (SIGKILL after ",
                                     settings_.stop_grace_s, " s; send it again to kill them now)"))};
  for (Action& a : stop_all(signo, settings_.stop_grace_s, now)) actions.push_back(std::move(a));
  return actions;
}

Actions SupervisionState::time_passed(Clock::time_point now) {
  if (phase_ != Phase::kStopping || running_ == 0 || now < kill_at_) return {};
  // The grace period named is the one of the stop in effect: the signal's once ft_launch got one.
  Actions actions = {Action::say(str(running_, " rank(s) still running ",
                                     interrupted_ != 0 ? settings_.stop_grace_s : settings_.grace_s, " s after ",
                                     interrupted_ != 0 ? strsignal(interrupted_) : "SIGTERM", ": SIGKILL"))};
  for (Action& a : kill_all()) actions.push_back(std::move(a));
  return actions;
}

Actions SupervisionState::all_ranks_gone() {
  FT_ASSERT(running_ == 0, "all ranks gone with ", running_, " still running");
  int code = 0;
  bool rank_failed = false;
  if (interrupted_ != 0) {
    // Every rank exiting 0 after the signal means they stopped cleanly (ft_train: with a checkpoint).
    code = phase_ != Phase::kKilling && all_exited_0_ ? 0 : 128 + interrupted_;
  } else if (failed_rank_ >= 0) {
    code = failed_code_;
    rank_failed = true;
  }
  if (!rank_failed || restart_ >= settings_.max_restarts) {
    phase_ = Phase::kDone;
    Actions actions;
    if (rank_failed && settings_.max_restarts > 0) {
      actions.push_back(Action::say(str("giving up after ", settings_.max_restarts, " restarts")));
    }
    actions.push_back(Action::exit(code));
    return actions;
  }
  phase_ = Phase::kRestarting;
  return {Action::say(str("restarting all ranks (restart ", restart_ + 1, " of ", settings_.max_restarts,
                          "); ft_train continues from the latest complete checkpoint")),
          Action::restart()};
}

Actions SupervisionState::failed(const std::string& why) {
  Actions actions = {Action::say(why)};
  for (Action& a : kill_all()) actions.push_back(std::move(a));
  phase_ = Phase::kDone;
  actions.push_back(Action::exit(1));
  return actions;
}

void SupervisionState::restarted() {
  FT_ASSERT(phase_ == Phase::kRestarting, "restarted in phase ", phase_name(phase_));
  const int restart = restart_ + 1;
  *this = SupervisionState(settings_);
  restart_ = restart;
}

}  // namespace ft::launch
