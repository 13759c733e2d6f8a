// Real processes: ft_launch starts 2 or 4 comm_worker ranks on Gloo. The collectives are checked
// against closed forms inside the workers; here the exit codes, the messages users read (which
// operation, which rank, within which time) and that no process is left behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <torch/torch.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>

#include "test_support.h"

namespace {

using ft::str;
using ft::test::bin_path;
using ft::test::free_port;
using ft::test::run_command;

struct Launched {
  int code = -1;
  std::string output;
  double seconds = 0;
};

Launched run(const std::string& command) {
  const auto start = std::chrono::steady_clock::now();
  const auto result = run_command(command, true);
  Launched r;
  r.code = result.exit_code;
  r.output = result.output;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// A unique word on the workers' command lines, for pgrep.
std::string new_marker() {
  static int counter = 0;
  return str("ftmr", ::getpid(), "n", ++counter);
}

// Processes whose command line holds the marker ("[x]" so that pgrep's own shell does not match).
std::string left_behind(const std::string& marker) {
  const std::string pattern = marker.substr(0, marker.size() - 1) + "[" + marker.back() + "]";
  return run_command("pgrep -af '" + pattern + "'", false).output;
}

std::string launch(int nproc, const std::string& worker_args, const std::string& launcher_args = "") {
  return str(bin_path("ft_launch"), " --nproc_per_node ", nproc, " ", launcher_args, " ", bin_path("comm_worker"), " ",
             worker_args);
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// "rank R: detected after X s" -> X for every rank that printed it.
std::vector<double> detection_times(const std::string& output) {
  std::vector<double> out;
  static const std::regex re("detected after ([0-9.]+) s");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), re); it != std::sregex_iterator(); ++it) {
    out.push_back(std::stod((*it)[1]));
  }
  return out;
}

// Exactly one rank (the survivor of two) reports detecting the failure, after at_least and before
// `below` seconds.
void expect_one_detection(const Launched& r, double at_least, double below) {
  const auto times = detection_times(r.output);
  ASSERT_EQ(times.size(), 1u) << r.output;
  EXPECT_GE(times[0], at_least);
  EXPECT_LT(times[0], below);
}

void expect_all_ranks(const std::string& output, int nproc, const std::string& what) {
  for (int r = 0; r < nproc; ++r) {
    EXPECT_TRUE(contains(output, str("[rank ", r, "] rank ", r, ": ", what))) << "rank " << r << " " << what << "\n" << output;
  }
}

class Collectives : public ::testing::TestWithParam<int> {};

// all_reduce (sum/avg/max), reduce_scatter, all_gather, broadcast on odd sizes and several
// dtypes against closed forms, several handles in flight, barrier; then the bytes actually sent,
// from the kernel's TCP counters: a reduce-scatter and an all-gather send (W-1)/W of the buffer
// (an all-reduce twice that), and the worker fails outside 0.95..1.1 of it.
TEST_P(Collectives, ClosedFormsOverlapBarrierAndBytesSent) {
  const int nproc = GetParam();
  const Launched r = run(launch(nproc, "collectives --timeout 30"));
  ASSERT_EQ(r.code, 0) << r.output;
  expect_all_ranks(r.output, nproc, "collectives ok");
  expect_all_ranks(r.output, nproc, "overlap ok");
  expect_all_ranks(r.output, nproc, "barrier ok");
  expect_all_ranks(r.output, nproc, "reduce_scatter sent ");
}

INSTANTIATE_TEST_SUITE_P(Ranks, Collectives, ::testing::Values(2, 4));

TEST(Faults, KilledRankFailsTheOthersWithinTheTimeout) {
  const std::string marker = new_marker();
  const Launched r = run(launch(2, "kill --victim 1 --timeout 5 --marker " + marker));
  EXPECT_EQ(r.code, 128 + 9) << r.output;  // the failing rank's status: killed by SIGKILL
  EXPECT_TRUE(contains(r.output, "ft_launch: rank 1 (pid ")) << r.output;
  EXPECT_TRUE(contains(r.output, "was killed by signal 9")) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 0] comm_worker: error: all_reduce #4 of 16777216 bytes (float32, sum) failed after") ||
              contains(r.output, "[rank 0] comm_worker: error: all_reduce #5 of 16777216 bytes (float32, sum) failed after"))
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("on rank 0 of 2: rank 1 \\(pid [0-9]+ on this machine\\) has exited")))
      << r.output;
  expect_one_detection(r, 0.0, 5.0);
  EXPECT_EQ(left_behind(marker), "");
}

TEST(Faults, KilledRankAmongFour) {
  const std::string marker = new_marker();
  const Launched r = run(launch(4, "kill --victim 2 --timeout 5 --marker " + marker));
  EXPECT_EQ(r.code, 128 + 9) << r.output;
  const auto times = detection_times(r.output);
  EXPECT_EQ(times.size(), 3u) << r.output;
  for (double t : times) EXPECT_LT(t, 5.0);
  for (int survivor : {0, 1, 3}) {
    EXPECT_TRUE(std::regex_search(
        r.output, std::regex(str("\\[rank ", survivor, "\\] comm_worker: error: all_reduce #[45] of 16777216 bytes .*",
                                 "on rank ", survivor, " of 4: .*rank 2 \\(pid [0-9]+ on this machine\\) has exited"))))
        << "rank " << survivor << "\n" << r.output;
  }
  EXPECT_EQ(left_behind(marker), "");
}

// Rank 0 (the store's host) dies between collectives: rank 1 finds out at its next one.
TEST(Faults, StoreHostKilledBetweenCollectives) {
  const std::string marker = new_marker();
  const Launched r = run(launch(2, "kill_idle --victim 0 --timeout 5 --marker " + marker));
  EXPECT_EQ(r.code, 128 + 9) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("on rank 1 of 2: rank 0 \\(pid [0-9]+ on this machine, the store's "
                                                     "host\\) has exited")))
      << r.output;
  EXPECT_EQ(left_behind(marker), "");
}

TEST(Faults, StoppedRankTimesOut) {
  const std::string marker = new_marker();
  const Launched r = run(launch(2, "stop --victim 1 --timeout 2 --marker " + marker));
  EXPECT_EQ(r.code, 1) << r.output;  // rank 0's error; the stopped rank is then terminated
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\\[rank 0\\] comm_worker: error: all_reduce #4 of 16777216 bytes "
                                                     "\\(float32, sum\\) timed out after 2\\.[0-9]+ s on rank 0 of 2: rank 1 "
                                                     "\\(pid [0-9]+ on this machine\\) is stopped \\(SIGSTOP")))
      << r.output;
  EXPECT_TRUE(contains(r.output, "parallel.timeout_s = 2 s bounds every collective")) << r.output;
  expect_one_detection(r, 2.0, 4.0);
  EXPECT_EQ(left_behind(marker), "");
}

// all_gather is point-to-point transfers, not one Gloo collective: a peer that dies or stops
// in the middle of one must fail it just as it fails an all_reduce.
TEST(Faults, KilledRankFailsAnAllGather) {
  const std::string marker = new_marker();
  const Launched r = run(launch(2, "kill --op all_gather --victim 1 --timeout 5 --marker " + marker));
  EXPECT_EQ(r.code, 128 + 9) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\\[rank 0\\] comm_worker: error: all_gather #[45] of 16777216 bytes "
                                                     "\\(float32\\) failed after [0-9.]+ s on rank 0 of 2: rank 1 "
                                                     "\\(pid [0-9]+ on this machine\\) has exited")))
      << r.output;
  expect_one_detection(r, 0.0, 5.0);
  EXPECT_EQ(left_behind(marker), "");
}

TEST(Faults, StoppedRankTimesOutAnAllGather) {
  const std::string marker = new_marker();
  const Launched r = run(launch(2, "stop --op all_gather --victim 1 --timeout 2 --marker " + marker));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\\[rank 0\\] comm_worker: error: all_gather #[45] of 16777216 bytes "
                                                     "\\(float32\\) timed out after 2\\.[0-9]+ s on rank 0 of 2: rank 1 "
                                                     "\\(pid [0-9]+ on this machine\\) is stopped \\(SIGSTOP")))
      << r.output;
  expect_one_detection(r, 2.0, 4.0);
  EXPECT_EQ(left_behind(marker), "");
}

// Without the /proc view (ranks on other machines), silence in the heartbeats names the rank.
TEST(Faults, StoppedRankSeenThroughHeartbeatsOnly) {
  const Launched r = run("FT_PEER_MONITOR_PROC=0 " + launch(2, "stop --victim 1 --timeout 2"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("timed out after 2\\.[0-9]+ s on rank 0 of 2: rank 1 has sent no "
                                                     "heartbeat for [0-9.]+ s: it died, its process is frozen, or its "
                                                     "machine is unreachable")))
      << r.output;
}

TEST(Faults, StoppedStoreHost) {
  const Launched r = run(launch(2, "stop --victim 0 --timeout 2"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("on rank 1 of 2: rank 0 \\(pid [0-9]+ on this machine, the store's "
                                                     "host\\) is stopped")))
      << r.output;
}

TEST(Rendezvous, TimeoutNamesAddressPortAndArrivals) {
  const int port = free_port();
  const Launched r = run(str("RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=", port, " FT_RENDEZVOUS_TIMEOUT=1 ",
                        bin_path("comm_worker"), " rendezvous"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, str("comm_worker: error: rendezvous at 127.0.0.1:", port,
                                     " timed out after 1 s on rank 0: 1 of 2 ranks arrived (missing: rank 1)")))
      << r.output;
  EXPECT_TRUE(contains(r.output, "no firewall blocks port")) << r.output;
  EXPECT_LT(r.seconds, 10);
}

TEST(Rendezvous, PortInUse) {
  int holder = -1;
  const int port = free_port(&holder);
  const Launched r = run(launch(2, "rendezvous --timeout 5", str("--master_port ", port)));
  ::close(holder);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, str("[rank 0] comm_worker: error: rank 0 cannot host the rendezvous store on port ", port,
                                     ": the port is already in use")))
      << r.output;
  EXPECT_LT(r.seconds, 10);
}

TEST(Rendezvous, ConfigMismatchNamesTheKey) {
  const Launched r = run(launch(2, "config_mismatch --victim 1 --timeout 10"));
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 1] comm_worker: error: rank 1 runs a different config than rank 0 (every rank "
                                 "must run the same one): train.lr: 0.002 here, 0.001 on rank 0"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "[rank 0] comm_worker: error: rank 1 runs a different config than rank 0: train.lr: "
                                 "0.002 on rank 1, 0.001 on rank 0"))
      << r.output;
}

TEST(Launcher, PrefixesEveryLineOfBothStreams) {
  const Launched r = run(str(bin_path("ft_launch"), " --nproc_per_node 2 sh -c ",
                             "'printf \"line one\\npartial\"; echo to stderr >&2'"));
  EXPECT_EQ(r.code, 0) << r.output;
  for (int rank : {0, 1}) {
    EXPECT_TRUE(contains(r.output, str("[rank ", rank, "] line one\n"))) << r.output;
    EXPECT_TRUE(contains(r.output, str("[rank ", rank, "] partial\n"))) << r.output;  // no newline at exit
    EXPECT_TRUE(contains(r.output, str("[rank ", rank, "] to stderr\n"))) << r.output;
  }
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) EXPECT_EQ(line.rfind("[rank ", 0), 0u) << line;
}

TEST(Launcher, SetsTheRankEnvironment) {
  const Launched r = run(str(bin_path("ft_launch"), " --nproc-per-node=3 --master_port 29999 sh -c ",
                        "'echo \"$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT $OMP_NUM_THREADS\"'"));
  EXPECT_EQ(r.code, 0) << r.output;
  for (int rank : {0, 1, 2}) {
    EXPECT_TRUE(contains(r.output, str("[rank ", rank, "] ", rank, " ", rank, " 3 3 127.0.0.1 29999 1\n"))) << r.output;
  }
  const Launched kept = run(str("OMP_NUM_THREADS=3 ", bin_path("ft_launch"), " sh -c 'echo $OMP_NUM_THREADS'"));
  EXPECT_TRUE(contains(kept.output, "[rank 0] 3\n")) << kept.output;
}

TEST(Launcher, ExitsWithTheFailingRanksCodeAndStopsTheOthers) {
  const std::string marker = new_marker();
  const Launched r = run(str(bin_path("ft_launch"), " --nproc_per_node 2 sh -c ",
                             "'if [ $RANK = 1 ]; then sleep 0.2; exit 3; fi; sleep 30; echo was not stopped' ", marker));
  EXPECT_EQ(r.code, 3) << r.output;
  EXPECT_TRUE(contains(r.output, "ft_launch: rank 1 (pid ")) << r.output;
  EXPECT_TRUE(contains(r.output, "exited with code 3; stopping the other ranks (SIGTERM, then SIGKILL after 10 s)"))
      << r.output;
  EXPECT_FALSE(contains(r.output, "was not stopped")) << r.output;
  EXPECT_LT(r.seconds, 10);  // rank 0 slept 30 s: SIGTERM ended it
  EXPECT_EQ(left_behind(marker), "");
  const Launched signalled = run(str(bin_path("ft_launch"), " --nproc_per_node 2 sh -c 'kill -9 $$'"));
  EXPECT_EQ(signalled.code, 128 + 9) << signalled.output;
}

TEST(Launcher, ASignalToAForkingRankIsNotMistakenForOneToTheLauncher) {
  // Regression: a rank killed at once made the launcher SIGTERM the group while the next rank was
  // still between fork and exec with the launcher's signal handler, which wrote the signal into
  // the launcher's own pipe: the launcher then reported "got Terminated" and exited 143.
  for (int i = 0; i < 20; ++i) {
    const Launched r = run(str(bin_path("ft_launch"), " --nproc_per_node 4 sh -c 'kill -9 $$'"));
    ASSERT_EQ(r.code, 128 + 9) << r.output;
    ASSERT_FALSE(contains(r.output, "got Terminated")) << r.output;
  }
}

TEST(Launcher, KillsRanksThatIgnoreSigtermAfterTheGracePeriod) {
  const std::string marker = new_marker();
  const Launched r = run(str(bin_path("ft_launch"), " --nproc_per_node 2 --grace-period 1 sh -c ",
                        "'if [ $RANK = 1 ]; then sleep 0.5; exit 4; fi; trap \"\" TERM; sleep 30; echo ", marker, "' ", marker));
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_TRUE(contains(r.output, "ft_launch: 1 rank(s) still running 1 s after SIGTERM: SIGKILL")) << r.output;
  EXPECT_LT(r.seconds, 10);
  EXPECT_EQ(left_behind(marker), "");
}

// Starts `command` in the background, waits until both ranks said ready, then runs `then`.
Launched run_when_ready(const ft::test::TempDir& dir, const std::string& command, const std::string& then) {
  const std::string out = dir.file("out.txt");
  std::ofstream(dir.file("script.sh")) << command << " > " << out << " 2>&1 &\n"
                                       << "pid=$!\n"
                                       << "for i in $(seq 200); do [ \"$(grep -c ': ready' " << out
                                       << ")\" = 2 ] && break; sleep 0.05; done\n"
                                       << then << "\n";
  return run("sh " + dir.file("script.sh"));
}

// SIGTERM to ft_launch reaches every rank. Ranks that handle it and exit 0 (ft_train saves a
// checkpoint) make ft_launch exit 0; ranks that die of it make it exit 128 + SIGTERM.
TEST(Launcher, ForwardsSigterm) {
  ft::test::TempDir dir;
  const std::string out = dir.file("out.txt");
  const Launched r = run_when_ready(dir, launch(2, "wait_signal"), "kill -TERM $pid; wait $pid; echo \"exit=$?\"");
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(contains(r.output, "exit=0")) << r.output << text;
  EXPECT_TRUE(contains(text, "[rank 0] rank 0: got SIGTERM")) << text;
  EXPECT_TRUE(contains(text, "[rank 1] rank 1: got SIGTERM")) << text;
  EXPECT_TRUE(contains(text, "ft_launch: got Terminated: passing it to the ranks")) << text;

  // Ranks without a handler die of the signal.
  ft::test::TempDir plain;
  const Launched killed = run_when_ready(
      plain, str(bin_path("ft_launch"), " --nproc_per_node 2 sh -c 'echo rank $RANK: ready; exec sleep 30'"),
      "kill -TERM $pid; wait $pid; echo \"exit=$?\"");
  EXPECT_TRUE(contains(killed.output, "exit=143")) << killed.output;
}

// A launcher killed outright (SIGKILL) takes its ranks with it (PR_SET_PDEATHSIG).
TEST(Launcher, RanksDieWithTheLauncher) {
  ft::test::TempDir dir;
  const std::string marker = new_marker();
  const Launched r = run_when_ready(dir, launch(2, "wait_signal --marker " + marker),
                               "[ -n \"$(pgrep -f '" + marker.substr(0, marker.size() - 1) + "[" + marker.back() +
                                   "]')\" ] && echo running; kill -KILL $pid; wait $pid; sleep 0.3");
  EXPECT_TRUE(contains(r.output, "running")) << r.output;  // the ranks were there before
  EXPECT_EQ(left_behind(marker), "");
}

TEST(Launcher, UsageErrors) {
  const Launched none = run(bin_path("ft_launch"));
  EXPECT_EQ(none.code, 2);
  EXPECT_TRUE(contains(none.output, "ft_launch: no PROGRAM to launch")) << none.output;
  const Launched nodes = run(bin_path("ft_launch") + " --nnodes 2 --node_rank 1 true");
  EXPECT_EQ(nodes.code, 2);
  EXPECT_TRUE(contains(nodes.output, "--nnodes > 1 needs --master_addr")) << nodes.output;
  const Launched bad = run(bin_path("ft_launch") + " --nproc_per_node 0 true");
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(contains(bad.output, "--nproc_per_node: expected an integer in 1..4096, got \"0\"")) << bad.output;
  const Launched unknown = run(bin_path("ft_launch") + " --bogus 1 true");
  EXPECT_EQ(unknown.code, 2);
  EXPECT_TRUE(contains(unknown.output, "unknown option --bogus")) << unknown.output;
  const Launched missing = run(bin_path("ft_launch") + " no-such-program-ft");
  EXPECT_EQ(missing.code, 127);
  EXPECT_TRUE(contains(missing.output, "[rank 0] ft_launch: cannot run no-such-program-ft: No such file or directory"))
      << missing.output;
}

// The same closed forms on NCCL, where a CUDA LibTorch and two GPUs are there.
TEST(Nccl, CollectivesOnTwoGpus) {
  if (!torch::cuda::is_available() || torch::cuda::device_count() < 2) {
    GTEST_SKIP() << "needs a CUDA LibTorch and 2 GPUs (" << torch::cuda::device_count() << " visible)";
  }
  const Launched r = run(launch(2, "nccl_collectives --timeout 60"));
  ASSERT_EQ(r.code, 0) << r.output;
  expect_all_ranks(r.output, 2, "collectives ok");
  expect_all_ranks(r.output, 2, "barrier ok");
}

}  // namespace
