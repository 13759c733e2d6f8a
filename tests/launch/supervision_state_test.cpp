// SupervisionState, ft_launch's decisions without processes: every transition of running ->
// stopping -> killing -> restarting/done, with the messages and exit codes users see (the same
// that tests/comm/multirank_test.cpp checks on the real program).
#include "launch/supervision_state.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <ostream>

#include "util/error.h"

namespace ft::launch {

void PrintTo(const Action& a, std::ostream* os) {
  switch (a.kind) {
    case Action::Kind::kSay: *os << "say(\"" << a.message << "\")"; break;
    case Action::Kind::kSignalAll: *os << "signal_all(" << a.signo << ")"; break;
    case Action::Kind::kRestart: *os << "restart"; break;
    case Action::Kind::kExit: *os << "exit(" << a.code << ")"; break;
  }
}

namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr int exited(int code) { return W_EXITCODE(code, 0); }
constexpr int killed_by(int signo) { return W_EXITCODE(0, signo); }

const Clock::time_point t0 = Clock::time_point() + seconds(1000);

SupervisionState make(int ranks, int max_restarts = 0) {
  return SupervisionState(SupervisionSettings{ranks, 10, 600, max_restarts});
}

const Actions kNothing;

std::string stopping_message(int rank, const std::string& how) {
  return str("rank ", rank, " (pid ", 100 + rank, ") ", how,
             "; stopping the other ranks (SIGTERM, then SIGKILL after 10 s)");
}

TEST(SupervisionState, AllRanksExitingCleanlyIsDoneWithZero) {
  SupervisionState s = make(2);
  EXPECT_EQ(s.phase(), Phase::kRunning);
  EXPECT_EQ(s.running(), 2);
  EXPECT_EQ(s.rank_exited(1, 101, exited(0), t0), kNothing);
  EXPECT_EQ(s.rank_exited(0, 100, exited(0), t0), kNothing);
  EXPECT_EQ(s.running(), 0);
  EXPECT_EQ(s.phase(), Phase::kRunning);
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(0)});
  EXPECT_EQ(s.phase(), Phase::kDone);
}

TEST(SupervisionState, ARankFailingWhileOthersRunStopsThemAndItsCodeIsTheExitCode) {
  SupervisionState s = make(3);
  EXPECT_FALSE(s.kill_deadline().has_value());
  EXPECT_EQ(s.rank_exited(1, 101, exited(3), t0),
            (Actions{Action::say(stopping_message(1, "exited with code 3")), Action::signal_all(SIGTERM),
                     Action::signal_all(SIGCONT)}));
  EXPECT_EQ(s.phase(), Phase::kStopping);
  EXPECT_EQ(s.kill_deadline(), t0 + seconds(10));
  // The others die of the SIGTERM: not failures of their own, nothing more is said or sent.
  EXPECT_EQ(s.rank_exited(0, 100, killed_by(SIGTERM), t0 + milliseconds(5)), kNothing);
  EXPECT_EQ(s.rank_exited(2, 102, exited(1), t0 + milliseconds(6)), kNothing);
  EXPECT_FALSE(s.kill_deadline().has_value());  // nobody left to kill
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(3)});
}

TEST(SupervisionState, ARankKilledByASignalFailsWith128PlusIt) {
  SupervisionState s = make(2);
  EXPECT_EQ(s.rank_exited(0, 100, killed_by(SIGKILL), t0)[0],
            Action::say(stopping_message(0, "was killed by signal 9 (Killed)")));
  EXPECT_EQ(s.rank_exited(1, 101, killed_by(SIGTERM), t0), kNothing);
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(128 + SIGKILL)});
}

// Rank 2 is killed; rank 3 sees its connection close, exits with an error, and is reaped first.
TEST(SupervisionState, ARankKilledJustAfterAnotherFailedIsTheLikelierCause) {
  SupervisionState s = make(4);
  EXPECT_EQ(s.rank_exited(3, 103, exited(1), t0)[0], Action::say(stopping_message(3, "exited with code 1")));
  EXPECT_EQ(s.rank_exited(2, 102, killed_by(SIGKILL), t0 + milliseconds(20)),
            Actions{Action::say("rank 2 (pid 102) was killed by signal 9 (Killed) at about the same time: the "
                                "likelier cause (ft_launch exits with 137)")});
  // Ranks that die of the SIGTERM passed on, or of an error, change nothing.
  EXPECT_EQ(s.rank_exited(0, 100, killed_by(SIGTERM), t0 + milliseconds(30)), kNothing);
  EXPECT_EQ(s.rank_exited(1, 101, killed_by(SIGSEGV), t0 + milliseconds(40)), kNothing);  // the first kill stands
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(128 + SIGKILL)});
}

TEST(SupervisionState, AKillLongAfterTheFirstFailureOrAfterAKillIsNotItsCause) {
  {
    SupervisionState s = make(2);
    s.rank_exited(1, 101, exited(1), t0);
    EXPECT_EQ(s.rank_exited(0, 100, killed_by(SIGKILL), t0 + milliseconds(1001)), kNothing);
    EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(1)});
  }
  {
    SupervisionState s = make(3);
    s.rank_exited(1, 101, killed_by(SIGSEGV), t0);
    EXPECT_EQ(s.rank_exited(0, 100, killed_by(SIGKILL), t0 + milliseconds(10)), kNothing);
    s.rank_exited(2, 102, killed_by(SIGTERM), t0 + milliseconds(10));
    EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(128 + SIGSEGV)});
  }
  {  // SIGKILL that ft_launch sent when the grace period ran out
    SupervisionState s = make(2);
    s.rank_exited(1, 101, exited(1), t0);
    s.time_passed(t0 + seconds(10));
    EXPECT_EQ(s.phase(), Phase::kKilling);
    EXPECT_EQ(s.rank_exited(0, 100, killed_by(SIGKILL), t0 + seconds(10)), kNothing);
    EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(1)});
  }
}

TEST(SupervisionState, TheLastRankFailingStopsNobody) {
  SupervisionState s = make(2);
  EXPECT_EQ(s.rank_exited(0, 100, exited(0), t0), kNothing);
  EXPECT_EQ(s.rank_exited(1, 101, exited(4), t0), Actions{Action::say("rank 1 (pid 101) exited with code 4")});
  EXPECT_EQ(s.phase(), Phase::kRunning);
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(4)});
}

TEST(SupervisionState, RanksOutlivingTheGracePeriodAreKilled) {
  SupervisionState s = make(3);
  s.rank_exited(2, 102, exited(4), t0);
  EXPECT_EQ(s.time_passed(t0 + milliseconds(9999)), kNothing);
  EXPECT_EQ(s.phase(), Phase::kStopping);
  EXPECT_EQ(s.time_passed(t0 + seconds(10)),
            (Actions{Action::say("2 rank(s) still running 10 s after SIGTERM: SIGKILL"), Action::signal_all(SIGKILL)}));
  EXPECT_EQ(s.phase(), Phase::kKilling);
  EXPECT_FALSE(s.kill_deadline().has_value());
  EXPECT_EQ(s.time_passed(t0 + seconds(20)), kNothing);  // killed once
  s.rank_exited(0, 100, killed_by(SIGKILL), t0 + seconds(10));
  s.rank_exited(1, 101, killed_by(SIGKILL), t0 + seconds(10));
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(4)});
}

TEST(SupervisionState, ASignalIsPassedOnAndRanksStoppingCleanlyExitZero) {
  SupervisionState s = make(2);
  EXPECT_EQ(s.signal_arrived(SIGTERM, t0),
            (Actions{Action::say("got Terminated: passing it to the ranks (SIGKILL after 600 s; send it again to kill them now)"),
                     Action::signal_all(SIGTERM), Action::signal_all(SIGCONT)}));
  EXPECT_EQ(s.phase(), Phase::kStopping);
  EXPECT_EQ(s.kill_deadline(), t0 + seconds(600));
  EXPECT_EQ(s.rank_exited(0, 100, exited(0), t0 + seconds(3)), kNothing);
  EXPECT_EQ(s.rank_exited(1, 101, exited(0), t0 + seconds(3)), kNothing);
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(0)});
}

TEST(SupervisionState, RanksDyingOfThePassedSignalExitWith128PlusIt) {
  SupervisionState s = make(2, /*max_restarts=*/3);
  s.signal_arrived(SIGINT, t0);
  EXPECT_EQ(s.rank_exited(0, 100, killed_by(SIGINT), t0), kNothing);  // not a failure of its own
  EXPECT_EQ(s.rank_exited(1, 101, exited(0), t0), kNothing);
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(128 + SIGINT)});  // and never restarted
}

TEST(SupervisionState, ASecondSignalKillsAtOnce) {
  SupervisionState s = make(2);
  s.signal_arrived(SIGINT, t0);
  EXPECT_EQ(s.signal_arrived(SIGINT, t0 + seconds(1)),
            (Actions{Action::say("got Interrupt again: SIGKILL"), Action::signal_all(SIGKILL)}));
  EXPECT_EQ(s.phase(), Phase::kKilling);
  // Killed ranks did not stop cleanly, whatever they exit with.
  s.rank_exited(0, 100, exited(0), t0 + seconds(1));
  s.rank_exited(1, 101, exited(0), t0 + seconds(1));
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(128 + SIGINT)});
}

TEST(SupervisionState, RanksOutlivingTheStopGracePeriodAreKilled) {
  SupervisionState s = make(2);
  s.signal_arrived(SIGHUP, t0);
  s.rank_exited(0, 100, exited(0), t0 + seconds(1));
  EXPECT_EQ(s.time_passed(t0 + seconds(599)), kNothing);
  EXPECT_EQ(s.time_passed(t0 + seconds(600)),
            (Actions{Action::say("1 rank(s) still running 600 s after Hangup: SIGKILL"), Action::signal_all(SIGKILL)}));
  s.rank_exited(1, 101, killed_by(SIGKILL), t0 + seconds(600));
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(128 + SIGHUP)});
}

TEST(SupervisionState, ASignalWhileStoppingAfterAFailureIsPassedOnAndWins) {
  SupervisionState s = make(3, /*max_restarts=*/2);
  s.rank_exited(1, 101, exited(3), t0);
  EXPECT_EQ(s.signal_arrived(SIGTERM, t0 + seconds(1)),
            (Actions{Action::say("got Terminated: passing it to the ranks (SIGKILL after 600 s; send it again to kill them now)"),
                     Action::signal_all(SIGTERM), Action::signal_all(SIGCONT)}));
  EXPECT_EQ(s.kill_deadline(), t0 + seconds(10));  // the failure's deadline stands
  s.rank_exited(0, 100, exited(0), t0 + seconds(2));
  s.rank_exited(2, 102, exited(0), t0 + seconds(2));
  // The user's signal ends the run: 128 + it (rank 1 failed), and no restart.
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(128 + SIGTERM)});
}

TEST(SupervisionState, ASignalAfterEveryRankIsGoneSendsNothing) {
  SupervisionState s = make(1);
  s.rank_exited(0, 100, exited(0), t0);
  EXPECT_EQ(s.signal_arrived(SIGTERM, t0),
            Actions{Action::say("got Terminated: passing it to the ranks (SIGKILL after 600 s; send it again to kill them now)")});
  EXPECT_EQ(s.time_passed(t0 + seconds(601)), kNothing);
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(0)});
}

TEST(SupervisionState, FailuresAreRestartedUntilNoRestartIsLeft) {
  SupervisionState s = make(2, /*max_restarts=*/2);
  for (int restart = 0; restart < 2; ++restart) {
    EXPECT_EQ(s.restart(), restart);
    s.rank_exited(1, 101, exited(5), t0);
    s.rank_exited(0, 100, killed_by(SIGTERM), t0);
    EXPECT_EQ(s.all_ranks_gone(),
              (Actions{Action::say(str("restarting all ranks (restart ", restart + 1,
                                       " of 2); ft_train continues from the latest complete checkpoint")),
                       Action::restart()}));
    EXPECT_EQ(s.phase(), Phase::kRestarting);
    s.restarted();
    EXPECT_EQ(s.phase(), Phase::kRunning);
    EXPECT_EQ(s.running(), 2);
    EXPECT_FALSE(s.kill_deadline().has_value());
  }
  EXPECT_EQ(s.restart(), 2);
  EXPECT_EQ(s.rank_exited(1, 101, exited(5), t0)[0], Action::say(stopping_message(1, "exited with code 5")));
  s.rank_exited(0, 100, killed_by(SIGTERM), t0);
  EXPECT_EQ(s.all_ranks_gone(), (Actions{Action::say("giving up after 2 restarts"), Action::exit(5)}));
  EXPECT_EQ(s.phase(), Phase::kDone);
}

TEST(SupervisionState, ARestartedRunThatFinishesExitsZero) {
  SupervisionState s = make(2, /*max_restarts=*/3);
  s.rank_exited(0, 100, exited(1), t0);
  s.rank_exited(1, 101, exited(1), t0);
  EXPECT_EQ(s.all_ranks_gone().back(), Action::restart());
  s.restarted();
  // The new start forgets the old failure and stop.
  s.rank_exited(0, 100, exited(0), t0 + seconds(30));
  s.rank_exited(1, 101, exited(0), t0 + seconds(30));
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(0)});
}

TEST(SupervisionState, WithoutRestartsAFailureExitsWithoutGivingUp) {
  SupervisionState s = make(1);
  s.rank_exited(0, 100, exited(2), t0);
  EXPECT_EQ(s.all_ranks_gone(), Actions{Action::exit(2)});
}

TEST(SupervisionState, BrokenSupervisionKillsTheRanksAndExitsOne) {
  SupervisionState s = make(2);
  EXPECT_EQ(s.failed("poll(): Bad address"),
            (Actions{Action::say("poll(): Bad address"), Action::signal_all(SIGKILL), Action::exit(1)}));
  EXPECT_EQ(s.phase(), Phase::kDone);
}

TEST(SupervisionState, EventsOutOfOrderAreInternalErrors) {
  SupervisionState s = make(1);
  EXPECT_THROW(s.all_ranks_gone(), InternalError);  // a rank still runs
  EXPECT_THROW(s.restarted(), InternalError);       // nothing to restart
  s.rank_exited(0, 100, exited(0), t0);
  EXPECT_THROW(s.rank_exited(0, 100, exited(0), t0), InternalError);
}

TEST(SupervisionState, WaitStatusesInWords) {
  EXPECT_EQ(describe_wait_status(exited(0)), "exited with code 0");
  EXPECT_EQ(describe_wait_status(killed_by(SIGSEGV)), "was killed by signal 11 (Segmentation fault)");
  EXPECT_EQ(exit_code_of(exited(7)), 7);
  EXPECT_EQ(exit_code_of(killed_by(SIGTERM)), 143);
  EXPECT_STREQ(phase_name(Phase::kKilling), "killing");
}

}  // namespace
}  // namespace ft::launch
